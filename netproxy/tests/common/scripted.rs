//! An injectable resolver with scripted answers, counting queries. Only `.test` and
//! `.invalid` names are ever scripted; an unknown name never answers.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use netproxy::resolve::{Lookup, Resolve};

#[derive(Debug, Default)]
pub struct Scripted {
    answers: Mutex<HashMap<String, Vec<IpAddr>>>,
    pub queries: AtomicUsize,
}

impl Scripted {
    pub fn with(pairs: &[(&str, &[&str])]) -> Arc<Self> {
        let s = Self::default();
        for (name, ips) in pairs {
            let ips = ips.iter().map(|ip| ip.parse().expect("ip")).collect();
            s.answers
                .lock()
                .expect("lock")
                .insert((*name).to_owned(), ips);
        }
        Arc::new(s)
    }

    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

impl Resolve for Scripted {
    fn lookup(&self, name: &str) -> Lookup {
        self.queries.fetch_add(1, Ordering::SeqCst);
        let answer = self.answers.lock().expect("lock").get(name).cloned();
        Box::pin(async move {
            match answer {
                Some(a) => Ok(a),
                None => std::future::pending().await,
            }
        })
    }
}
