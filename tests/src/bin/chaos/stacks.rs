//! The run's stacks: each a real `sockproxy` process and a real `lifecycle serve` process (the
//! provisioner API on 127.0.0.1 TCP with a key file; every second stack in restricted mode), a
//! bind root (deer-flow's host base directory), a state directory, and a canary: a container
//! made through the stack's own proxy holding a token (in its environment, a label, its log and
//! a file it serves on 8080) that no other stack may ever read. Either process can be killed
//! (SIGKILL) and started again with the same settings; every incarnation's log is kept, so
//! panics are counted over the whole run.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::json;

use sockproxy_tests::bindroot::BindRootDir;
use sockproxy_tests::engine::TEST_IMAGE;
use sockproxy_tests::raw;

use crate::procs::{free_port, unix_answers, Proc};
use crate::Config;

/// The provisioner API key of every stack (a file of its own per stack, mode 0600).
pub const KEY: &str = "chaos-k3y-not-secret";
/// Memory and CPUs of each sandbox: 0.5 CPU so N stacks share two cores.
pub const SANDBOX_CPUS: &str = "0.5";
const SANDBOX_MEMORY: &str = "128m";

/// One stack's fixed facts.
#[derive(Debug)]
pub struct Stack {
    pub k: usize,
    pub prefix: String,
    pub name: String,
    pub restricted: bool,
    pub dir: PathBuf,
    pub addr: SocketAddr,
    pub canary: String,
    /// The canary container's ID and its address on the stack's network.
    pub canary_id: Mutex<(String, String)>,
    root: BindRootDir,
    engine: PathBuf,
    bins: PathBuf,
    sidecar: Option<String>,
    max_containers: usize,
    proxy: Mutex<Option<Proc>>,
    serve: Mutex<Option<Proc>>,
    /// Incarnations so far (log file numbers).
    runs: Mutex<(u32, u32)>,
}

#[derive(Debug)]
pub struct Stacks {
    pub all: Vec<Stack>,
    _dir: tempfile::TempDir,
}

impl Drop for Stacks {
    /// Each stack's directory goes with its pin directory's tmpfs detached first (as `PinnedDir`),
    /// which the proxy leaves mounted when it exits.
    fn drop(&mut self) {
        for s in self.all.drain(..) {
            // A restarted proxy mounts its tmpfs over the killed one's: one detach each.
            let pins = s.dir.join("pins");
            while rustix::mount::unmount(&pins, rustix::mount::UnmountFlags::DETACH).is_ok() {}
        }
    }
}

impl Stacks {
    pub fn start(cfg: &Config, engine: &Path, sidecar: Option<&str>) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("chs")
            .tempdir_in("/tmp")
            .context("stacks dir")?;
        let mut all = Vec::new();
        for k in 0..cfg.stacks {
            let restricted = k % 2 == 1;
            let sdir = dir.path().join(format!("s{k}"));
            std::fs::create_dir_all(sdir.join("state"))?;
            let port = free_port()?;
            let key = sdir.join("key");
            std::fs::write(&key, format!("{KEY}\n"))?;
            std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            let s = Stack {
                k,
                prefix: format!("cs{k}-"),
                name: format!("chaos-{k}"),
                restricted,
                dir: sdir,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                canary: format!("CANARY-{}-{k}-{:016x}", cfg.seed, canary_salt(cfg.seed, k)),
                canary_id: Mutex::new((String::new(), String::new())),
                root: BindRootDir::new("chroot"),
                engine: engine.to_owned(),
                bins: cfg.bin_dir.clone(),
                sidecar: sidecar.map(str::to_owned),
                max_containers: cfg.max_containers,
                proxy: Mutex::new(None),
                serve: Mutex::new(None),
                runs: Mutex::new((0, 0)),
            };
            s.start_proxy()?;
            s.start_serve()?;
            s.plant_canary()?;
            println!(
                "stack {k}: prefix {}, {} mode, API {}, proxy {}",
                s.prefix,
                if restricted { "restricted" } else { "open" },
                s.addr,
                s.socket().display()
            );
            all.push(s);
        }
        Ok(Self { all, _dir: dir })
    }

    /// (stack, token) of every canary.
    pub fn canaries(&self) -> Vec<(usize, String, String)> {
        self.all
            .iter()
            .map(|s| (s.k, s.prefix.clone(), s.canary.clone()))
            .collect()
    }

    /// Every line with "panicked" in any incarnation's log of any proxy or provider.
    pub fn panics(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.all {
            let Ok(read) = std::fs::read_dir(&s.dir) else {
                continue;
            };
            for f in read.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                if !name.ends_with(".log") {
                    continue;
                }
                let text = std::fs::read_to_string(f.path()).unwrap_or_default();
                for l in text.lines().filter(|l| l.contains("panicked")) {
                    out.push(format!("stack {} {name}: {l}", s.k));
                }
            }
        }
        out
    }
}

/// Stack `k`'s range: the `k`th /20 of 10.200.0.0/13 (256 networks of /28 each, apart from
/// dockerd's own pool and every other stack's).
pub fn network_pool(k: usize) -> String {
    let base = u32::from(std::net::Ipv4Addr::new(10, 200, 0, 0)) + ((k as u32 % 128) << 12);
    format!("{}/20", std::net::Ipv4Addr::from(base))
}

/// A token part no one guesses from the seed alone (the seed is printed).
pub fn canary_salt(seed: u64, k: usize) -> u64 {
    let mut r = sockproxy_tests::crash::Rng::new(
        seed ^ (k as u64 + 1).wrapping_mul(0x9e37_79b9) ^ u64::from(std::process::id()),
    );
    r.next_u64()
}

impl Stack {
    pub fn socket(&self) -> PathBuf {
        self.dir.join("p.sock")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    pub fn mode(&self) -> &'static str {
        if self.restricted {
            "restricted"
        } else {
            "open"
        }
    }

    /// Starts (again) this stack's sockproxy and waits until it listens.
    pub fn start_proxy(&self) -> anyhow::Result<()> {
        let n = {
            let mut r = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            r.0 += 1;
            r.0
        };
        let _ = std::fs::remove_file(self.socket());
        let mut cmd = Command::new(self.bins.join("sockproxy"));
        cmd.arg("--listen")
            .arg(self.socket())
            .arg("--upstream")
            .arg(format!("unix://{}", self.engine.display()))
            .args(["--prefix", &self.prefix, "--stack", &self.name])
            .arg("--allow-bind-root")
            .arg(self.root())
            .arg("--pin-dir")
            .arg(self.dir.join("pins"))
            .args(["--max-containers", &self.max_containers.to_string()])
            .args([
                "--default-cpus",
                SANDBOX_CPUS,
                "--max-container-cpus",
                "0.5",
            ])
            .args(["--default-memory", "256m", "--max-container-memory", "256m"])
            // Its networks' subnets named, so the run's dockerd restart (Debian 12's 20.10)
            // never finds a network record it cannot read back (docs/sockproxy.md, "Network
            // subnets").
            .args([
                "--network-pool",
                &network_pool(self.k),
                "--network-pool-size",
                "28",
            ])
            // The log guard's last stop outlives the harness's SIGKILLs of the proxy.
            .arg("--state-dir")
            .arg(self.dir.join("proxy-state"));
        if self.restricted {
            cmd.arg("--restricted");
        }
        let mut p = Proc::spawn(
            &format!("sockproxy {}", self.k),
            cmd,
            self.dir.join(format!("sockproxy-{n}.log")),
        )?;
        let sock = self.socket();
        p.wait(Duration::from_secs(30), || unix_answers(&sock))?;
        *self.proxy.lock().unwrap_or_else(|p| p.into_inner()) = Some(p);
        Ok(())
    }

    /// The lifecycle command for this stack (global flags), for `serve` and the teardown's
    /// reconciler pass.
    pub fn lifecycle(&self) -> Command {
        let mut cmd = Command::new(self.bins.join("lifecycle-cli"));
        cmd.arg("--docker-host")
            .arg(format!("unix://{}", self.socket().display()))
            .args(["--prefix", &self.prefix, "--mode", self.mode()])
            .arg("--state-dir")
            .arg(self.state())
            .args(["--image", TEST_IMAGE])
            .args(["--sandbox-cmd", sockproxy_tests::provisioner::SERVING_CMD])
            .args(["--sandbox-cpus", SANDBOX_CPUS])
            .args(["--sandbox-memory", SANDBOX_MEMORY])
            .args(["--ready-timeout", "30", "--stop-timeout", "2"]);
        if let Some(img) = &self.sidecar {
            cmd.args(["--sidecar-image", img]).args([
                "--sidecar-cpus",
                "0.25",
                "--sidecar-memory",
                "64m",
            ]);
        }
        cmd
    }

    /// Starts (again) this stack's `lifecycle serve` and waits until its port answers.
    pub fn start_serve(&self) -> anyhow::Result<()> {
        let n = {
            let mut r = self.runs.lock().unwrap_or_else(|p| p.into_inner());
            r.1 += 1;
            r.1
        };
        let mut cmd = self.lifecycle();
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("tcp://{}", self.addr))
            .arg("--api-key-file")
            .arg(self.dir.join("key"))
            .arg("--mount-root")
            .arg(self.root());
        let mut p = Proc::spawn(
            &format!("lifecycle serve {}", self.k),
            cmd,
            self.dir.join(format!("serve-{n}.log")),
        )?;
        let addr = self.addr;
        p.wait(Duration::from_secs(30), || {
            std::net::TcpStream::connect(addr).is_ok()
        })?;
        *self.serve.lock().unwrap_or_else(|p| p.into_inner()) = Some(p);
        Ok(())
    }

    /// SIGKILL of the proxy (a crash); `start_proxy` brings it back.
    pub fn kill_proxy(&self) {
        drop(self.proxy.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// SIGKILL of the provider.
    pub fn kill_serve(&self) {
        drop(self.serve.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// SIGTERM of the provider (teardown); whether it exited within 60 s.
    pub fn stop_serve(&self) -> bool {
        let taken = self.serve.lock().unwrap_or_else(|p| p.into_inner()).take();
        taken.is_some_and(|mut p| p.terminate(Duration::from_secs(60)))
    }

    /// SIGTERM of the proxy (teardown).
    pub fn stop_proxy(&self) -> bool {
        let taken = self.proxy.lock().unwrap_or_else(|p| p.into_inner()).take();
        taken.is_some_and(|mut p| p.terminate(Duration::from_secs(30)))
    }

    /// The process IDs of the proxy and of the provider now (`None` while one is down).
    pub fn pids(&self) -> (Option<u32>, Option<u32>) {
        let of = |m: &Mutex<Option<Proc>>| {
            m.lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(Proc::pid)
        };
        (of(&self.proxy), of(&self.serve))
    }

    /// Resident memory (KiB) of the proxy and of the provider now (0 while one is down).
    pub fn rss(&self) -> (u64, u64) {
        let of = |m: &Mutex<Option<Proc>>| {
            m.lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map_or(0, |p| p.sample().rss_kib)
        };
        (of(&self.proxy), of(&self.serve))
    }

    /// The canary container, made and started through the stack's own proxy, serving its
    /// token on 8080.
    fn plant_canary(&self) -> anyhow::Result<()> {
        let name = self.canary_name();
        let t = &self.canary;
        let body = json!({
            "Image": TEST_IMAGE,
            "Env": [format!("CANARY={t}")],
            "Labels": {"chaos.canary": t},
            "Cmd": ["sh", "-c", format!(
                "mkdir -p /tmp/w && echo {t} > /tmp/w/index.html && echo {t} && \
                 exec httpd -f -p 8080 -h /tmp/w")],
        });
        let sock = self.socket();
        let r = raw::request(
            &sock,
            "POST",
            &format!("/containers/create?name={name}"),
            Some(body.to_string().as_bytes()),
        )?;
        if r.status != 201 {
            bail!("canary of stack {}: {} {}", self.k, r.status, r.text());
        }
        let id = r.json()["Id"].as_str().unwrap_or_default().to_owned();
        let started = raw::request(&sock, "POST", &format!("/containers/{name}/start"), None)?;
        if started.status != 204 {
            bail!("canary start: {} {}", started.status, started.text());
        }
        let c = raw::get(&self.engine, &format!("/containers/{id}/json"))?.json();
        let ip = c["NetworkSettings"]["Networks"]
            .as_object()
            .and_then(|n| n.values().find_map(|v| v["IPAddress"].as_str()))
            .unwrap_or_default()
            .to_owned();
        *self.canary_id.lock().unwrap_or_else(|p| p.into_inner()) = (id, ip);
        Ok(())
    }

    /// The engine's own socket (for what the harness reads directly: network gateways).
    pub fn engine(&self) -> &Path {
        &self.engine
    }

    pub fn max_containers(&self) -> usize {
        self.max_containers
    }

    pub fn canary_name(&self) -> String {
        format!("{}sandbox-canary", self.prefix)
    }

    /// (canary ID, canary IP).
    pub fn canary_ids(&self) -> (String, String) {
        self.canary_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
