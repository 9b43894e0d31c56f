//! Issue 46: a bind source swapped after the create is not what the engine mounts. With
//! `--allow-bind-root` the proxy pins each source when it is created (`sockproxy::pins`), so
//! whatever the stack's containers or its gateway rename or replace later, every start and
//! restart mounts the directory that was checked. Each attack here is a real one on the real
//! engine: a directory `R/a/b` checked and bound, then replaced by a symbolic link to a
//! directory outside the bind root that stands for the host (`H`, holding `canary`). The
//! sandbox's command leaves a marker in whatever it sees at `/host` and writes `ESCAPED` there
//! if it sees the canary: afterwards `H` holds nothing new and the markers are in the
//! directory that was checked. The restarts (the proxy's, dockerd's, a reboot's lost pins)
//! and the swap loop are `pins_restarts`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sockproxy_tests::bindroot::{can_pin, BindRootDir};
use sockproxy_tests::engine::{real_engine, Cleanup, Engine};
use sockproxy_tests::raw::{self, RawResponse};
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

/// What the sandbox runs: a marker in what it sees at `/host`, `ESCAPED` there if that is
/// the host's directory, then sleep.
pub(crate) const MARK: &str = "mktemp /host/run.XXXXXX >/dev/null; \
     if [ -e /host/canary ]; then touch /host/ESCAPED; fi";

/// An attack's ground: the real engine, a bind root `R` (nosuid,nodev) with `R/a/b` holding
/// `orig`, and `H` outside it standing for the host.
pub(crate) struct Ground {
    pub e: Engine,
    pub root: BindRootDir,
    pub host: tempfile::TempDir,
    pub prefix: String,
    pub clean: Cleanup,
}

impl Ground {
    /// `None` after a skip notice where there is no real engine or no right to mount.
    pub fn new(test: &str) -> Option<Self> {
        if !can_pin(test) {
            return None;
        }
        let e = real_engine(test)?;
        let root = BindRootDir::new("pinroot");
        std::fs::create_dir_all(root.path().join("a/b")).expect("a/b");
        std::fs::write(root.path().join("a/b/orig"), b"checked\n").expect("orig");
        let host = tempfile::Builder::new()
            .prefix("pinhost")
            .tempdir()
            .expect("host");
        std::fs::write(host.path().join("canary"), b"the host\n").expect("canary");
        let clean = Cleanup::new(&e.socket);
        Some(Self {
            e,
            root,
            host,
            prefix: unique_prefix(),
            clean,
        })
    }

    /// The checked source, `R/a/b`.
    pub fn src(&self) -> PathBuf {
        self.root.path().join("a/b")
    }

    /// Where the checked directory is once `swap` moved it.
    pub fn moved(&self) -> PathBuf {
        self.root.path().join("a/b.old")
    }

    /// The stack's proxy, `R` its bind root.
    pub fn proxy(&self) -> StackProxy {
        self.proxy_with(|_| {})
    }

    pub fn proxy_with(&self, adjust: impl FnOnce(&mut sockproxy::config::Config)) -> StackProxy {
        let root = self.root.path().to_owned();
        StackProxy::start_with(&self.e.socket, &self.prefix, false, |c| {
            c.create_rules.bind_roots = vec![root];
            adjust(c);
        })
    }

    /// The gateway's move (it writes the parents of what it binds): the checked directory
    /// renamed away and a link to the host put in its place.
    pub fn swap(&self) {
        std::fs::rename(self.src(), self.moved()).expect("rename");
        std::os::unix::fs::symlink(self.host.path(), self.src()).expect("link to the host");
    }

    /// What appeared in the host's directory besides the canary: each an escape.
    pub fn escaped(&self) -> Vec<String> {
        names(self.host.path())
            .into_iter()
            .filter(|n| n != "canary")
            .collect()
    }

    /// Waits (at most `secs`) until `dir` holds `n` of the sandbox's markers, failing at once
    /// on anything in the host's directory: an escape.
    pub fn wait_runs(&self, dir: &Path, n: usize, secs: u64) {
        wait_for(
            &format!("{n} runs' markers in {}", dir.display()),
            secs,
            || {
                let escaped = self.escaped();
                assert_eq!(
                    escaped,
                    Vec::<String>::new(),
                    "escaped to the host's directory"
                );
                Self::markers(dir) >= n
            },
        );
        assert_eq!(Self::markers(dir), n);
    }

    /// The sandbox's markers in `dir`.
    pub fn markers(dir: &Path) -> usize {
        names(dir).iter().filter(|n| n.starts_with("run.")).count()
    }

    /// A container `name` through `p` with `host_config`, running `cmd` under `sh -c`.
    pub fn create(&mut self, p: &StackProxy, name: &str, host_config: Value, cmd: &str) -> String {
        let name = self.clean.container(&format!("{}{name}", self.prefix));
        let body =
            json!({ "Image": self.e.image, "Cmd": ["sh", "-c", cmd], "HostConfig": host_config });
        let r = send(
            p.socket(),
            "POST",
            &format!("/containers/create?name={name}"),
            &body,
        );
        assert_eq!(r.status, 201, "{}", r.text());
        name
    }

    /// The engine's own inspect of `name`.
    pub fn inspect(&self, name: &str) -> Value {
        inspect(&self.e, "containers", &format!("{name}/json")).json()
    }
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (at most `secs`) for `done`; panics naming `what` if it never comes.
pub(crate) fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn post(sock: &Path, target: &str) -> RawResponse {
    raw::request(sock, "POST", target, None).expect("answer")
}

/// The gateway's swap between create and start, and a sandbox's: `Binds` swapped from inside a
/// sibling container that binds the parent (`rmdir`-style rename and `ln -s`), `Mounts` of
/// type `bind` swapped from the host side. Each start mounts the checked directory; what the
/// sandbox writes lands there, nothing in the host's; the engine holds the staging path as
/// the source and the named path in the `sockproxy.bind.<target>` label.
#[test]
fn a_source_swapped_after_the_create_is_not_what_the_start_mounts() {
    for (how, field) in [("a sibling sandbox", "Binds"), ("the gateway", "Mounts")] {
        let Some(mut g) =
            Ground::new("a_source_swapped_after_the_create_is_not_what_the_start_mounts")
        else {
            return;
        };
        eprintln!("-- {how} swaps a {field} source");
        let p = g.proxy();
        let src = g.src().display().to_string();
        let host_config = if field == "Binds" {
            json!({ "Binds": [format!("{src}:/host")] })
        } else {
            json!({ "Mounts": [{ "Type": "bind", "Source": src, "Target": "/host" }] })
        };
        let victim = g.create(
            &p,
            "sandbox-victim",
            host_config,
            &format!("{MARK}; sleep 600"),
        );
        if how == "the gateway" {
            g.swap();
        } else {
            let parent = g.root.path().join("a").display().to_string();
            let host = g.host.path().display().to_string();
            let sibling = g.create(
                &p,
                "sandbox-sibling",
                json!({ "Binds": [format!("{parent}:/w")] }),
                &format!("mv /w/b /w/b.old && ln -s {host} /w/b"),
            );
            assert_eq!(
                post(p.socket(), &format!("/containers/{sibling}/start")).status,
                204
            );
            let w = raw::request(
                p.socket(),
                "POST",
                &format!("/containers/{sibling}/wait"),
                None,
            )
            .expect("wait");
            assert_eq!(
                w.json()["StatusCode"],
                0,
                "the sibling's swap: {}",
                w.text()
            );
            assert!(std::fs::symlink_metadata(g.src()).is_ok_and(|m| m.file_type().is_symlink()));
        }
        let r = post(p.socket(), &format!("/containers/{victim}/start"));
        assert_eq!(r.status, 204, "{}", r.text());
        g.wait_runs(&g.moved(), 1, 30);
        assert_eq!(
            g.escaped(),
            Vec::<String>::new(),
            "{how}: nothing in the host's directory"
        );
        let c = g.inspect(&victim);
        let mounts = c["Mounts"].as_array().cloned().unwrap_or_default();
        assert_eq!(mounts.len(), 1, "{c}");
        let staging = mounts[0]["Source"].as_str().unwrap_or_default().to_owned();
        assert!(
            !staging.starts_with(&src),
            "the engine holds a staging path: {staging}"
        );
        assert_eq!(c["Config"]["Labels"]["sockproxy.bind./host"], json!(src));
        assert_eq!(c["HostConfig"]["Binds"], Value::Null, "{c}");
    }
}

/// No request at all: `RestartPolicy: always` and a command that exits after a second; the
/// swap happens while it runs, and dockerd's own restarts mount the checked directory.
#[test]
fn a_restart_by_policy_mounts_what_was_checked() {
    let Some(mut g) = Ground::new("a_restart_by_policy_mounts_what_was_checked") else {
        return;
    };
    let p = g.proxy();
    let src = g.src().display().to_string();
    let name = g.create(
        &p,
        "sandbox-restarts",
        json!({ "Binds": [format!("{src}:/host")], "RestartPolicy": { "Name": "always" } }),
        &format!("{MARK}; sleep 1; exit 1"),
    );
    assert_eq!(
        post(p.socket(), &format!("/containers/{name}/start")).status,
        204
    );
    wait_for("the first marker", 30, || Ground::markers(&g.src()) == 1);
    g.swap();
    wait_for("two restarts after the swap", 90, || {
        assert_eq!(
            g.escaped(),
            Vec::<String>::new(),
            "escaped to the host's directory"
        );
        g.inspect(&name)["RestartCount"].as_u64().unwrap_or(0) >= 3
    });
    assert_eq!(g.escaped(), Vec::<String>::new());
    assert!(
        Ground::markers(&g.moved()) >= 3,
        "every run wrote in the checked directory"
    );
}

/// `docker restart` (and a stop and a start) after the swap.
#[test]
fn docker_restart_mounts_what_was_checked() {
    let Some(mut g) = Ground::new("docker_restart_mounts_what_was_checked") else {
        return;
    };
    let p = g.proxy();
    let src = g.src().display().to_string();
    let name = g.create(
        &p,
        "sandbox-restart",
        json!({ "Mounts": [{ "Type": "bind", "Source": src, "Target": "/host", "ReadOnly": false }] }),
        &format!("{MARK}; sleep 600"),
    );
    assert_eq!(
        post(p.socket(), &format!("/containers/{name}/start")).status,
        204
    );
    wait_for("the first marker", 30, || Ground::markers(&g.src()) == 1);
    g.swap();
    assert_eq!(
        post(p.socket(), &format!("/containers/{name}/restart?t=0")).status,
        204
    );
    g.wait_runs(&g.moved(), 2, 30);
    assert_eq!(
        post(p.socket(), &format!("/containers/{name}/stop?t=0")).status,
        204
    );
    assert_eq!(
        post(p.socket(), &format!("/containers/{name}/start")).status,
        204
    );
    g.wait_runs(&g.moved(), 3, 30);
    assert_eq!(g.escaped(), Vec::<String>::new());
}

/// `VolumesFrom` would inherit the pin without what makes a lost one fail the start (dockerd
/// recreates the staging path empty for the inheriting container): refused with bind roots,
/// and the engine holds no such container.
#[test]
fn volumes_from_is_refused_with_bind_roots() {
    let Some(mut g) = Ground::new("volumes_from_is_refused_with_bind_roots") else {
        return;
    };
    let p = g.proxy();
    let src = g.src().display().to_string();
    let parent = g.create(
        &p,
        "sandbox-parent",
        json!({ "Binds": [format!("{src}:/host")] }),
        "true",
    );
    let child = g.clean.container(&format!("{}sandbox-child", g.prefix));
    for host_config in [
        json!({ "HostConfig": { "VolumesFrom": [parent.clone()] } }),
        json!({ "VolumesFrom": [format!("{parent}:ro")] }),
    ] {
        let mut body = json!({ "Image": g.e.image, "Cmd": ["true"] });
        for (k, v) in host_config.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        let r = send(
            p.socket(),
            "POST",
            &format!("/containers/create?name={child}"),
            &body,
        );
        refused(
            &r,
            403,
            "HostConfig.VolumesFrom is not allowed with --allow-bind-root",
        );
        assert_eq!(
            inspect(&g.e, "containers", &format!("{child}/json")).status,
            404
        );
    }
}

/// A Python venv's relative link inside a bound workspace resolves inside the sandbox, and so
/// does one the sandbox makes.
#[test]
fn a_venv_link_in_a_bound_workspace_resolves_in_the_sandbox() {
    let Some(mut g) = Ground::new("a_venv_link_in_a_bound_workspace_resolves_in_the_sandbox")
    else {
        return;
    };
    let ws = g.root.path().join("ws");
    std::fs::create_dir_all(ws.join(".venv/bin")).expect("venv");
    std::fs::create_dir_all(ws.join(".venv/lib")).expect("lib");
    std::fs::write(ws.join(".venv/lib/python3"), b"venv python\n").expect("python");
    std::os::unix::fs::symlink("../lib/python3", ws.join(".venv/bin/python")).expect("link");
    let p = g.proxy();
    let name = g.create(
        &p,
        "sandbox-venv",
        json!({ "Binds": [format!("{}:/ws", ws.display())] }),
        "cat /ws/.venv/bin/python && ln -s ../lib/python3 /ws/.venv/bin/py && cat /ws/.venv/bin/py",
    );
    assert_eq!(
        post(p.socket(), &format!("/containers/{name}/start")).status,
        204
    );
    let w = raw::request(
        p.socket(),
        "POST",
        &format!("/containers/{name}/wait"),
        None,
    )
    .expect("wait");
    assert_eq!(w.json()["StatusCode"], 0, "{}", w.text());
    let logs = raw::get(p.socket(), &format!("/containers/{name}/logs?stdout=1")).expect("logs");
    let (out, _) = raw::demux(&logs.body);
    assert_eq!(String::from_utf8_lossy(&out), "venv python\nvenv python\n");
    assert_eq!(
        std::fs::read_link(ws.join(".venv/bin/py")).ok(),
        Some(PathBuf::from("../lib/python3"))
    );
}

/// A pin lives as long as a container refers to it: one the engine refuses leaves none, one
/// made stays mounted until its container is removed, and `--max-bind-pins` bounds them.
#[test]
fn pins_go_with_their_containers_and_are_bounded() {
    let Some(mut g) = Ground::new("pins_go_with_their_containers_and_are_bounded") else {
        return;
    };
    let p = g.proxy_with(|c| c.pins.max = 2);
    let src = g.src().display().to_string();
    let pins = p.pin_dir().join("p");
    let mounted = |dir: &Path| {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&format!(" {}/", dir.display())))
            .count()
    };
    let name = g.clean.container(&format!("{}sandbox-noimage", g.prefix));
    let body = json!({ "Image": "no-such-image-anywhere:1", "HostConfig": { "Binds": [format!("{src}:/host")] } });
    let r = send(
        p.socket(),
        "POST",
        &format!("/containers/create?name={name}"),
        &body,
    );
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(mounted(&pins), 0, "a refused create leaves no pin");
    assert_eq!(names(&pins), Vec::<String>::new());
    let two = json!({ "Binds": [format!("{src}:/host"), format!("{src}:/again:ro")] });
    let kept = g.create(&p, "sandbox-kept", two.clone(), "true");
    assert_eq!(mounted(&pins), 2);
    let over = g.clean.container(&format!("{}sandbox-over", g.prefix));
    let body = json!({ "Image": g.e.image, "HostConfig": { "Binds": [format!("{src}:/host")] } });
    let r = send(
        p.socket(),
        "POST",
        &format!("/containers/create?name={over}"),
        &body,
    );
    refused(&r, 503, "over --max-bind-pins 2");
    assert_eq!(
        inspect(&g.e, "containers", &format!("{over}/json")).status,
        404
    );
    let r = raw::request(p.socket(), "DELETE", &format!("/containers/{kept}"), None).expect("rm");
    assert_eq!(r.status, 204, "{}", r.text());
    wait_for("the pins released", 30, || {
        mounted(&pins) == 0 && names(&pins).is_empty()
    });
    g.create(&p, "sandbox-again", two, "true");
    assert_eq!(mounted(&pins), 2, "room again");
}
