//! A contract-case subject: one engine, reached either directly or through a `--restricted`
//! sockproxy in front of it, with its own stack prefix and cleanup. The same case runs on each
//! subject; `via_proxy` tells a case where the proxy's answer differs from the engine's.

use std::path::Path;

use serde_json::Value;

use crate::engine::{Cleanup, Engine};
use crate::raw::{self, RawResponse};
use crate::stack::StackProxy;
use crate::unique_prefix;

#[derive(Debug)]
pub struct Subject<'e> {
    pub engine: &'e Engine,
    pub proxy: Option<StackProxy>,
    pub prefix: String,
    pub clean: Cleanup,
}

impl<'e> Subject<'e> {
    /// The engine directly, then through sockproxy.
    pub fn both(engine: &'e Engine) -> [Subject<'e>; 2] {
        let direct = Self {
            engine,
            proxy: None,
            prefix: unique_prefix(),
            clean: Cleanup::new(&engine.socket),
        };
        let prefix = unique_prefix();
        // The engine's default bridge allowed by name, so a case that asks for it (legacy
        // links live there) asks the same of both; a create that names no network still goes
        // on the stack's own network.
        let proxy = StackProxy::start_with(&engine.socket, &prefix, true, |c| {
            c.create_rules.allow_default_bridge = true;
        });
        let proxied = Self {
            engine,
            proxy: Some(proxy),
            prefix,
            clean: Cleanup::new(&engine.socket),
        };
        [direct, proxied]
    }

    pub fn via_proxy(&self) -> bool {
        self.proxy.is_some()
    }

    pub fn label(&self) -> String {
        let via = if self.via_proxy() {
            "through sockproxy"
        } else {
            "directly"
        };
        format!("{} {via}", self.engine.label())
    }

    /// Where the case talks: the proxy's socket, or the engine's.
    pub fn socket(&self) -> &Path {
        match &self.proxy {
            Some(p) => p.socket(),
            None => &self.engine.socket,
        }
    }

    /// `{P}sandbox-{suffix}`, removed from the engine when the subject is dropped.
    pub fn sandbox(&mut self, suffix: &str) -> String {
        let name = format!("{}sandbox-{suffix}", self.prefix);
        self.clean.container(&name)
    }

    /// `{P}net-{suffix}`, removed from the engine when the subject is dropped.
    pub fn network(&mut self, suffix: &str) -> String {
        let name = format!("{}net-{suffix}", self.prefix);
        self.clean.network(&name)
    }

    pub fn req(&self, method: &str, target: &str, body: Option<&Value>) -> RawResponse {
        let bytes = body.map(|b| b.to_string().into_bytes());
        raw::request(self.socket(), method, target, bytes.as_deref())
            .unwrap_or_else(|e| panic!("{} {target} on {}: {e}", method, self.label()))
    }

    pub fn get(&self, target: &str) -> RawResponse {
        self.req("GET", target, None)
    }

    /// Creates `name` running `cmd` on the test image; returns its ID.
    pub fn create(&self, name: &str, cmd: &[&str], extra: Value) -> String {
        let mut body = serde_json::json!({ "Image": self.engine.image, "Cmd": cmd });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let r = self.req(
            "POST",
            &format!("/containers/create?name={name}"),
            Some(&body),
        );
        assert_eq!(
            r.status,
            201,
            "create {name} on {}: {}",
            self.label(),
            r.text()
        );
        r.json()["Id"].as_str().unwrap_or_default().to_owned()
    }

    pub fn start(&self, name: &str) {
        let r = self.req("POST", &format!("/containers/{name}/start"), None);
        assert_eq!(
            r.status,
            204,
            "start {name} on {}: {}",
            self.label(),
            r.text()
        );
    }

    /// Whether the engine itself (not through the proxy) reports the container running.
    pub fn running(&self, name: &str) -> bool {
        raw::get(&self.engine.socket, &format!("/containers/{name}/json"))
            .is_ok_and(|r| r.json()["State"]["Running"] == Value::Bool(true))
    }
}
