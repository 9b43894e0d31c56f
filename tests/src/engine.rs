//! The engines tests run against: a fake engine (always; one per test, per flavor) and the real
//! dockerd found through `DOCKER_HOST` (unix://) or the default socket, and `each_engine`, which
//! runs a test's case on each of them. Locally a missing real engine is skipped with a printed
//! notice; with `CI=true` it fails the test. Also builds the local busybox test image on the
//! real engine, since no registry can be reached.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::Mutex;

use crate::fake::{FakeEngine, Flavor};
use crate::raw;
use crate::skip::skip;

/// The image every real-engine test runs: busybox-static imported as a rootfs.
pub const TEST_IMAGE: &str = "sockproxy-test-busybox:latest";

/// Which engine a test is talking to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Fake(Flavor),
    Real,
}

/// An engine under test. For a fake, the engine lives as long as this value.
#[derive(Debug)]
pub struct Engine {
    pub socket: PathBuf,
    pub image: String,
    pub kind: Kind,
    /// The wordings to expect: a fake's own flavor, or the real engine's, read from `/version`.
    pub flavor: Flavor,
    pub fake: Option<FakeEngine>,
}

impl Engine {
    pub fn start_fake(flavor: Flavor) -> Self {
        let fake = FakeEngine::start(flavor);
        Self {
            socket: fake.socket().to_owned(),
            image: TEST_IMAGE.to_owned(),
            kind: Kind::Fake(flavor),
            flavor,
            fake: Some(fake),
        }
    }

    pub fn label(&self) -> String {
        match self.kind {
            Kind::Fake(f) => format!("fake engine ({})", f.name()),
            Kind::Real => format!("real dockerd at {}", self.socket.display()),
        }
    }

    pub fn is_fake(&self) -> bool {
        self.fake.is_some()
    }
}

/// The fakes a case runs on; the real engine follows them when one answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fakes {
    /// The Debian 20.10 flavor, which every docker CLI on the machine speaks.
    Debian,
    /// Every flavor.
    All,
}

/// Runs `case` on each engine in turn: a fresh fake of each flavor `fakes` names, then the real
/// engine when one answers (else a skip, see `real_engine`). Each run is announced as
/// `== {test}: {engine}`; libtest prints that with a failing test's output, so the failure
/// names its engine.
pub fn each_engine(test: &str, fakes: Fakes, mut case: impl FnMut(Engine)) {
    for e in in_turn(test, fakes) {
        case(e);
    }
}

/// `each_engine` for an `async` case: `|e| Box::pin(async move { … })`. The case borrows the
/// engine, which lives here until the case is done; handed over by value, an `async move` block
/// would capture only the fields it names and drop the rest (a fake's server) at once.
pub async fn each_engine_async(
    test: &str,
    fakes: Fakes,
    mut case: impl for<'e> FnMut(&'e Engine) -> Pin<Box<dyn Future<Output = ()> + 'e>>,
) {
    for e in in_turn(test, fakes) {
        case(&e).await;
    }
}

/// The engines of `each_engine`, each started (or looked for) only when its turn comes.
fn in_turn(test: &str, fakes: Fakes) -> impl Iterator<Item = Engine> + '_ {
    let flavors: &[Flavor] = match fakes {
        Fakes::Debian => &[Flavor::Debian2010],
        Fakes::All => &Flavor::ALL,
    };
    flavors
        .iter()
        .map(|f| Engine::start_fake(*f))
        .chain(std::iter::once_with(move || real_engine(test)).flatten())
        .inspect(move |e| eprintln!("== {test}: {}", e.label()))
}

/// The real engine's socket: `DOCKER_HOST` when it is `unix://…`, else the default path.
pub fn candidate_socket() -> PathBuf {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if h.starts_with("unix://") => PathBuf::from(&h["unix://".len()..]),
        _ => PathBuf::from("/var/run/docker.sock"),
    }
}

fn answers_ping(sock: &Path) -> bool {
    raw::get(sock, "/_ping").is_ok_and(|r| r.status == 200)
}

/// The real engine, or `None` after skipping `test`'s real-engine run (`skip::skip`: a notice
/// locally, a failure with `CI=true`, since CI must never skip it).
pub fn real_engine(test: &str) -> Option<Engine> {
    let socket = candidate_socket();
    if !answers_ping(&socket) {
        skip(
            test,
            &format!(
                "the real-engine run: no Docker engine answers at {}",
                socket.display()
            ),
            "start dockerd and set DOCKER_HOST=unix://…, as .ci/run does",
        );
        return None;
    }
    ensure_image(&socket);
    let version = raw::get(&socket, "/version")
        .map(|r| r.json())
        .unwrap_or_default();
    let flavor = match version["Version"].as_str() {
        Some(v) if v.starts_with("20.") => Flavor::Debian2010,
        _ => Flavor::Docker29,
    };
    Some(Engine {
        socket,
        image: TEST_IMAGE.to_owned(),
        kind: Kind::Real,
        flavor,
        fake: None,
    })
}

/// Imports the busybox test image once, if the engine does not have it yet.
pub fn ensure_image(sock: &Path) {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let inspect = raw::get(sock, &format!("/images/{TEST_IMAGE}/json"));
    if inspect.is_ok_and(|r| r.status == 200) {
        return;
    }
    let script = format!(
        r#"set -e
bb=$(command -v busybox || echo /bin/busybox)
root=$(mktemp -d)
mkdir -p "$root/bin" "$root/tmp"
cp "$bb" "$root/bin/busybox"
for a in $("$root/bin/busybox" --list); do [ "$a" = busybox ] || ln -s busybox "$root/bin/$a"; done
tar -C "$root" -c . | docker import -c 'CMD ["sh"]' -c 'ENV PATH=/bin' - {TEST_IMAGE} >/dev/null
rm -rf "$root""#
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "building {TEST_IMAGE} failed (is busybox-static installed?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The three images (`sockproxy-test-{sockproxy,netproxy,lifecycle}:latest`), built once per
/// test process from `deploy/` (static binaries in `FROM scratch` images; no registry needed).
/// Returns the tag prefix.
pub fn ensure_images(sock: &Path) -> &'static str {
    static LOCK: Mutex<()> = Mutex::new(());
    const PREFIX: &str = "sockproxy-test-";
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let have = |c: &str| {
        raw::get(sock, &format!("/images/{PREFIX}{c}:latest/json")).is_ok_and(|r| r.status == 200)
    };
    if ["sockproxy", "netproxy", "lifecycle"]
        .iter()
        .all(|c| have(c))
    {
        return PREFIX;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("deploy/build-images.sh"))
        .arg(PREFIX)
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .output()
        .expect("build script runs");
    assert!(
        out.status.success(),
        "building the images: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PREFIX
}

/// The netproxy sidecar image (see `ensure_images`).
pub fn ensure_netproxy_image(sock: &Path) -> String {
    format!("{}netproxy:latest", ensure_images(sock))
}

/// Removes the named containers from the engine (directly, not through a proxy) when dropped,
/// so a failing test leaves nothing behind.
#[derive(Debug)]
pub struct Cleanup {
    socket: PathBuf,
    containers: Vec<String>,
    networks: Vec<String>,
    volumes: Vec<String>,
}

impl Cleanup {
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_owned(),
            containers: Vec::new(),
            networks: Vec::new(),
            volumes: Vec::new(),
        }
    }

    pub fn container(&mut self, name: &str) -> String {
        self.containers.push(name.to_owned());
        name.to_owned()
    }

    pub fn network(&mut self, name: &str) -> String {
        self.networks.push(name.to_owned());
        name.to_owned()
    }

    /// A volume removed after the containers (which may hold it).
    pub fn volume(&mut self, name: &str) -> String {
        self.volumes.push(name.to_owned());
        name.to_owned()
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = raw::request(
                &self.socket,
                "DELETE",
                &format!("/containers/{c}?force=1"),
                None,
            );
        }
        for n in &self.networks {
            let _ = raw::request(&self.socket, "DELETE", &format!("/networks/{n}"), None);
        }
        // The stacks' own networks (`{P}net`, `{P}net_HASH`), which their proxies made for
        // these containers: kept by the engine while a container was on them.
        let mut prefixes: Vec<&str> = self
            .containers
            .iter()
            .filter_map(|c| {
                ["sandbox-", "netproxy-"]
                    .iter()
                    .find_map(|role| c.find(role).map(|at| &c[..at]))
            })
            .collect();
        prefixes.sort_unstable();
        prefixes.dedup();
        for p in prefixes {
            for n in stack_networks(&self.socket, p) {
                let _ = raw::request(&self.socket, "DELETE", &format!("/networks/{n}"), None);
            }
        }
        for v in &self.volumes {
            let _ = raw::request(&self.socket, "DELETE", &format!("/volumes/{v}"), None);
        }
    }
}

/// Force-removes every container and network of stack `prefix` on the engine at `socket` (what
/// a test's stack made there, whatever state it was left in by a test that failed).
pub fn remove_stack(socket: &Path, prefix: &str) {
    let filters = |name: &str| {
        form_urlencoded::byte_serialize(
            serde_json::json!({ "name": [name] }).to_string().as_bytes(),
        )
        .collect::<String>()
    };
    if let Ok(r) = raw::get(
        socket,
        &format!("/containers/json?all=1&filters={}", filters(prefix)),
    ) {
        for c in r.json().as_array().into_iter().flatten() {
            let named = c["Names"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str())
                .any(|n| n.trim_start_matches('/').starts_with(prefix));
            if let (true, Some(id)) = (named, c["Id"].as_str()) {
                let _ = raw::request(socket, "DELETE", &format!("/containers/{id}?force=1"), None);
            }
        }
    }
    if let Ok(r) = raw::get(socket, &format!("/networks?filters={}", filters(prefix))) {
        for n in r.json().as_array().into_iter().flatten() {
            if let Some(name) = n["Name"].as_str().filter(|n| n.starts_with(prefix)) {
                let _ = raw::request(socket, "DELETE", &format!("/networks/{name}"), None);
            }
        }
    }
}

/// The names of the networks the proxies of stacks with prefix `p` made for them on the engine
/// at `socket` (`{P}net`, and `{P}net_` with a stack's hash under `--require-stack-label`).
pub fn stack_networks(socket: &Path, p: &str) -> Vec<String> {
    let filter = serde_json::json!({ "name": [format!("^{}net", p.replace('.', "\\."))] });
    let path = format!(
        "/networks?{}",
        form_urlencoded::Serializer::new(String::new())
            .append_pair("filters", &filter.to_string())
            .finish()
    );
    let listed = raw::get(socket, &path)
        .map(|r| r.json())
        .unwrap_or_default();
    listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["Name"].as_str())
        .filter(|n| {
            n.strip_prefix(p)
                .and_then(|rest| rest.strip_prefix("net"))
                .is_some_and(|tail| {
                    tail.is_empty()
                        || tail.strip_prefix('_').is_some_and(|h| {
                            h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit())
                        })
                })
        })
        .map(str::to_owned)
        .collect()
}

/// A running container `name` (the test image, sleeping) with `labels`, made on the engine at
/// `socket` itself, behind any proxy's back (what an earlier process or an operator left);
/// returns its ID.
pub fn make_container(socket: &Path, name: &str, labels: serde_json::Value) -> String {
    let body =
        serde_json::json!({ "Image": TEST_IMAGE, "Cmd": ["sleep", "600"], "Labels": labels });
    let r = raw::request(
        socket,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body.to_string().as_bytes()),
    )
    .expect("answer");
    assert_eq!(r.status, 201, "{}", r.text());
    let started =
        raw::request(socket, "POST", &format!("/containers/{name}/start"), None).expect("answer");
    assert_eq!(started.status, 204);
    r.json()["Id"].as_str().unwrap_or_default().to_owned()
}

/// `network`'s gateway address on the host: its IPAM's `Gateway`, or the subnet's first address
/// (the default bridge's IPAM names none on dockerd 20.10); empty when the engine says neither.
pub fn network_gateway(sock: &Path, network: &str) -> String {
    let net = raw::get(sock, &format!("/networks/{network}"))
        .map(|r| r.json())
        .unwrap_or_default();
    let config = &net["IPAM"]["Config"][0];
    config["Gateway"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            let subnet: ipnet::Ipv4Net = config["Subnet"].as_str()?.parse().ok()?;
            subnet.hosts().next().map(|a| a.to_string())
        })
        .unwrap_or_default()
}
