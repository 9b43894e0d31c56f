//! A scripted DNS server on a UDP socket of the test's own (in its network namespace), for the
//! stub resolver's own behaviour: each query is answered from a fixed table, byte for byte as
//! a server would send it (hickory's message types, re-exported by hickory-resolver). Only
//! `.test` names are scripted; any other name is NXDOMAIN.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};

use hickory_resolver::proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, AAAA, CNAME};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};

/// One scripted record.
#[derive(Debug, Clone)]
pub enum Rec {
    A(&'static str, &'static str),
    Aaaa(&'static str, &'static str),
    Cname(&'static str, &'static str),
}

impl Rec {
    fn record(&self) -> Record {
        let name = |n: &str| Name::from_ascii(format!("{n}.")).expect("a scripted name");
        let (owner, data) = match self {
            Self::A(n, ip) => (n, RData::A(A(ip.parse().expect("IPv4")))),
            Self::Aaaa(n, ip) => (n, RData::AAAA(AAAA(ip.parse().expect("IPv6")))),
            Self::Cname(n, to) => (n, RData::CNAME(CNAME(name(to)))),
        };
        Record::from_rdata(name(owner), 60, data)
    }
}

/// What the server answers for one name: `answers` (those of the asked type, and every CNAME,
/// whatever name they carry) and `additionals` (always).
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub answers: Vec<Rec>,
    pub additionals: Vec<Rec>,
}

/// The server; its thread ends with the test process.
#[derive(Debug)]
pub struct Dns {
    pub addr: SocketAddr,
    /// Every name asked, as asked.
    pub asked: Arc<Mutex<Vec<String>>>,
}

impl Dns {
    /// Serves `script` on 127.0.0.1 (a free port).
    pub fn serve(script: &[(&str, Answer)]) -> Self {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let addr = sock.local_addr().expect("addr");
        let script: HashMap<String, Answer> = script
            .iter()
            .map(|(n, a)| (format!("{n}."), a.clone()))
            .collect();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Bounded: a test asks a handful of questions.
            for _ in 0..10_000 {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    return;
                };
                let Ok(q) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let Some(query) = q.queries.first().cloned() else {
                    continue;
                };
                let name = query.name().to_ascii().to_ascii_lowercase();
                log.lock().expect("lock").push(name.clone());
                let mut m = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
                m.metadata.recursion_desired = q.metadata.recursion_desired;
                m.metadata.recursion_available = true;
                m.add_query(query.clone());
                match script.get(&name) {
                    None => m.metadata.response_code = ResponseCode::NXDomain,
                    Some(a) => {
                        for r in a.answers.iter().map(Rec::record) {
                            let t = r.record_type();
                            if t == query.query_type() || t == RecordType::CNAME {
                                m.add_answer(r);
                            }
                        }
                        for r in a.additionals.iter().map(Rec::record) {
                            m.add_additional(r);
                        }
                    }
                }
                if let Ok(bytes) = m.to_vec() {
                    let _ = sock.send_to(&bytes, from);
                }
            }
        });
        Self { addr, asked }
    }

    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("lock").clone()
    }
}
