//! A stack for lifecycle tests: a fake engine, a sockproxy in front of it, a state dir, and
//! `Lifecycle` values pointed at the proxy or (where the seed says "a raw engine") at the fake.
//! `fault_relay` is the fault-injecting pass-through tests put between lifecycle and the proxy
//! (declared here because this module is where lifecycle's test support lives).

#[path = "fault_relay.rs"]
pub mod fault_relay;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lifecycle::decide::Mode;
use lifecycle::engine::Engine as Client;
use lifecycle::ledger::Ledger;
use lifecycle::naming::{self, Names, Prefix};
use lifecycle::ops::{Lifecycle, Settings};
use lifecycle::ports::Ports;
use serde_json::json;

use crate::bins;
use crate::engine::{Engine, TEST_IMAGE};
use crate::fake::{FakeEngine, Flavor};
use crate::raw;
use crate::stack::StackProxy;
use crate::unique_prefix;

#[derive(Debug)]
pub struct LcStack {
    pub proxy: StackProxy,
    pub engine: Engine,
    pub prefix: String,
    pub state: tempfile::TempDir,
}

pub fn settings(prefix: &str, mode: Mode) -> Settings {
    Settings {
        prefix: Prefix::parse(prefix).expect("valid test prefix"),
        mode,
        image: Some(TEST_IMAGE.to_owned()),
        sandbox_port: 8080,
        publish_address: "127.0.0.1".into(),
        sandbox_cmd: Some(vec!["sleep".into(), "600".into()]),
        sidecar_image: Some(TEST_IMAGE.to_owned()),
        sidecar_cmd: Some(vec!["sleep".into(), "600".into()]),
        egress_allow: vec![],
        egress_allow_cidr: vec![],
        egress_own_cidr: vec![],
        egress_nat64_prefix: vec![],
        // The fake's containers serve nothing and its addresses are not real: never probe them.
        ready_timeout: Duration::ZERO,
        list_timeout: Duration::from_secs(1),
        stop_timeout: 1,
        lock_timeout: Duration::from_secs(60),
        removal_wait: Duration::from_secs(10),
        sandbox_resources: lifecycle::resources::Resources::default(),
        sidecar_resources: lifecycle::resources::Resources::parse("256m", "1", 128)
            .expect("the sidecar's defaults"),
    }
}

impl LcStack {
    /// A fake engine behind a sockproxy that is `--restricted` or not.
    pub fn new(restricted_proxy: bool) -> Self {
        let engine = Engine::start_fake(Flavor::Debian2010);
        let prefix = unique_prefix();
        let proxy = StackProxy::start(&engine.socket, &prefix, restricted_proxy);
        // The proxy's own event subscription is up before a test clears the engine's request
        // log and counts what lifecycle asked (else it can land in the count, a flake seen in
        // CI: `an_open_process_lists_once_refuses_nothing_and_retires`).
        proxy.wait_names_live();
        Self {
            proxy,
            engine,
            prefix,
            state: tempfile::tempdir().expect("state dir"),
        }
    }

    pub fn fake(&self) -> &FakeEngine {
        self.engine.fake.as_ref().expect("a fake engine")
    }

    pub async fn through_proxy(&self, mode: Mode) -> Lifecycle {
        self.at(self.proxy.socket(), mode).await
    }

    pub async fn raw_engine(&self, mode: Mode) -> Lifecycle {
        self.at(&self.engine.socket, mode).await
    }

    pub async fn at(&self, socket: &Path, mode: Mode) -> Lifecycle {
        Lifecycle::new(
            Client::new(&format!("unix://{}", socket.display())).expect("address"),
            self.state.path(),
            settings(&self.prefix, mode),
        )
    }

    pub fn ledger(&self) -> Ledger {
        Ledger::new(self.state.path(), &self.prefix)
    }

    pub fn ports(&self) -> Ports {
        Ports::new(self.state.path())
    }

    pub fn names(&self, id: &str) -> Names {
        names(&self.prefix, id)
    }

    /// Reserves a port for `generation` of sandbox `id`, as a create would have.
    pub fn reserve(&self, id: &str, generation: &str) -> u16 {
        let port = self.ports().reserve(id).expect("reserve");
        self.ports().assign(id, generation).expect("assign");
        port
    }

    /// The port reserved for `generation` of sandbox `id`.
    pub fn port(&self, id: &str, generation: &str) -> Option<u16> {
        self.ports().get(id, generation).expect("read")
    }

    pub fn id(&self, thread: &str) -> String {
        naming::sandbox_id("user-1", thread).expect("valid")
    }

    /// Creates (and starts) a container directly on the engine, as an earlier process or an
    /// operator would have; returns its ID.
    pub fn make(&self, name: &str, labels: serde_json::Value) -> String {
        crate::engine::make_container(&self.engine.socket, name, labels)
    }

    pub fn make_network(&self, name: &str) {
        let body = json!({ "Name": name, "Internal": true });
        let r = raw::request(
            &self.engine.socket,
            "POST",
            "/networks/create",
            Some(body.to_string().as_bytes()),
        )
        .expect("answer");
        assert_eq!(r.status, 201, "{}", r.text());
    }

    pub fn exists(&self, path: &str) -> bool {
        raw::get(&self.engine.socket, path).is_ok_and(|r| r.status == 200)
    }

    /// What the engine was asked since the log was cleared, without version negotiation.
    pub fn asked(&self) -> Vec<String> {
        self.fake()
            .request_lines()
            .into_iter()
            .filter(|l| !l.starts_with("GET /version") && !l.contains("/_ping"))
            .collect()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.state.path().to_owned()
    }
}

/// deer-flow's names of sandbox `id` under the test prefix `prefix`.
pub fn names(prefix: &str, id: &str) -> Names {
    Names::new(&Prefix::parse(prefix).expect("valid test prefix"), id)
}

/// The lifecycle program under test (`bins::lifecycle`) pointed at `sock` with the stack's flags
/// only; `DOCKER_HOST` is removed so only `--docker-host` can work.
pub fn lifecycle_base(sock: &Path, prefix: &str, mode: &str, state: &Path) -> Command {
    let mut cmd = Command::new(bins::lifecycle());
    cmd.arg("--docker-host")
        .arg(format!("unix://{}", sock.display()))
        .args(["--prefix", prefix, "--mode", mode, "--state-dir"])
        .arg(state)
        .args(["--image", TEST_IMAGE])
        .env_remove("DOCKER_HOST");
    cmd
}

/// `lifecycle_base` with the busybox test image standing in for the sidecar.
pub fn lifecycle_command(sock: &Path, prefix: &str, mode: &str, state: &Path) -> Command {
    let mut cmd = lifecycle_base(sock, prefix, mode, state);
    cmd.args(["--sidecar-image", TEST_IMAGE, "--sidecar-cmd", "sleep 600"]);
    cmd
}
