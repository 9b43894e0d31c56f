//! One provisioner URL over three Docker hosts (docs/multi-host.md), simulated on one machine:
//! three real dockerds of the test's own, each in a network namespace of its own, three
//! `lifecycle serve` processes (each with its own sockproxy, `--advertise-url`), one Redis and
//! one HAProxy running the shipped `deploy/multi-host/haproxy.cfg` (its bind and server lines
//! replaced by the test's). deer-flow's remote-backend calls (`deerflow_remote.py`, with
//! `requests`, which follows the serves' 307s as deer-flow does) go through HAProxy only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use sockproxy_tests::bindroot::BindRootDir;
use sockproxy_tests::bins;
use sockproxy_tests::engine::real_engine;
use sockproxy_tests::multihost::{
    free_port, haproxy, http, key_file, may_run, remote, sandboxes_named, wait_for, wait_until,
    Killed, ServeHost,
};
use sockproxy_tests::own_dockerd::OwnDockerd;
use sockproxy_tests::redis_server::RedisServer;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

/// One host: its engine, its stack's proxy, its state and its serve on a loopback port.
struct Host {
    name: String,
    port: u16,
    serve: Option<Child>,
    state: tempfile::TempDir,
    proxy: StackProxy,
    dockerd: OwnDockerd,
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Host {
    fn kill(&mut self) {
        if let Some(mut c) = self.serve.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn start_serve(&mut self, t: &Setup) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.state.path().join("serve.log"))
            .expect("log");
        let mut cmd = sockproxy_tests::lc::lifecycle_base(
            self.proxy.socket(),
            &t.prefix,
            "open",
            self.state.path(),
        );
        // `sleep` ignores SIGTERM: a stop waits its timeout out.
        cmd.args(["--sandbox-cmd", "sleep 600", "--stop-timeout", "1"]);
        let child = ServeHost {
            port: self.port,
            key_file: &t.key_file,
            root: &t.root,
            redis: &t.redis.url(),
            owner: &self.name,
            key_prefix: None,
            ttl: 6,
        }
        .spawn(&mut cmd, &[], log);
        self.serve = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while http(self.port, "GET", "/health").0 != 200 {
            assert!(
                Instant::now() < deadline,
                "serve {} did not answer",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sandbox ID → (container ID, running) of the stack's sandboxes on this host's engine.
    fn sandboxes(&self, prefix: &str) -> BTreeMap<String, (String, bool)> {
        sandboxes_named(&self.dockerd.socket(), &format!("{prefix}sandbox-"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("serve.log")).unwrap_or_default()
    }
}

struct Setup {
    prefix: String,
    root: PathBuf,
    key_file: PathBuf,
    redis: RedisServer,
}

fn claim(t: &Setup, id: &str) -> String {
    let key = format!("lifecycle:{}:sandbox:{id}", t.prefix);
    let out = Command::new("redis-cli")
        .arg("-s")
        .arg(t.redis.socket())
        .args(["GET", &key])
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Every ID's running sandboxes across `hosts`: ID → the hosts holding it running.
fn running(hosts: &[Host], prefix: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for h in hosts {
        for (id, (_, up)) in h.sandboxes(prefix) {
            if up {
                out.entry(id).or_default().push(h.name.clone());
            }
        }
    }
    out
}

const SANDBOXES: usize = 30;

#[test]
fn three_hosts_behind_haproxy_one_owner_per_sandbox() {
    let test = "three_hosts_behind_haproxy_one_owner_per_sandbox";
    if !may_run(test, true) {
        return;
    }
    let Some(e) = real_engine(test) else { return };
    let Some(redis) = RedisServer::start(test) else {
        return;
    };
    let root_dir = BindRootDir::new("mhroot");
    let keys = tempfile::tempdir().expect("dir");
    let key_file = key_file(keys.path());
    let t = Setup {
        prefix: unique_prefix(),
        root: root_dir.path().to_owned(),
        key_file,
        redis,
    };
    // Three hosts: their own engines; the mount root is one directory, as an NFS export
    // mounted at the same path on every host would be.
    let mut hosts: Vec<Host> = (1..=3)
        .map(|n| {
            let dockerd = OwnDockerd::start(test, &e.socket).expect("a dockerd of the test's own");
            dockerd.loopback_up();
            let root = t.root.clone();
            let proxy = StackProxy::start_with(&dockerd.socket(), &t.prefix, false, |c| {
                c.create_rules.bind_roots = vec![root];
            });
            proxy.wait_names_live();
            Host {
                name: format!("host{n}"),
                port: free_port(),
                serve: None,
                state: tempfile::tempdir().expect("state"),
                proxy,
                dockerd,
            }
        })
        .collect();
    for i in 0..hosts.len() {
        let (before, rest) = hosts.split_at_mut(i);
        let _ = before;
        rest[0].start_serve(&t);
    }
    let front = free_port();
    let backends: Vec<(String, u16)> = hosts.iter().map(|h| (h.name.clone(), h.port)).collect();
    let _haproxy = Killed(haproxy(keys.path(), front, &backends));
    wait_for("HAProxy answers /health", 30, || {
        http(front, "GET", "/health").0 == 200
    });

    // 30 sandboxes created through HAProxy, three gateways' worth of calls at once.
    let ids: Vec<(String, String, String)> = (0..SANDBOXES)
        .map(|i| {
            let (user, thread) = (format!("user-{i}"), format!("thread-{i}"));
            (stackmodel::sandbox_id(&user, &thread), user, thread)
        })
        .collect();
    let create = |(id, user, thread): &(String, String, String)| {
        remote(front, &["create", id, user, thread, "[]"])
    };
    std::thread::scope(|s| {
        for chunk in ids.chunks(SANDBOXES / 3) {
            s.spawn(move || {
                for one in chunk {
                    if let Err(why) = create(one) {
                        panic!("create {} through HAProxy: {why}", one.0);
                    }
                }
            });
        }
    });
    let placed = running(&hosts, &t.prefix);
    let mut per_host: BTreeMap<String, usize> = BTreeMap::new();
    for (id, _, _) in &ids {
        let on = placed.get(id).cloned().unwrap_or_default();
        assert_eq!(on.len(), 1, "{id} runs on exactly one host: {on:?}");
        assert_eq!(
            claim(&t, id),
            format!("own:{}", on[0]),
            "{id}: the claim names its host"
        );
        *per_host.entry(on[0].clone()).or_default() += 1;
        // Every call for the ID reaches its owner: discover answers the owner's sandbox.
        let (status, v) = http(front, "GET", &format!("/api/sandboxes/{id}"));
        assert_eq!(
            (status, v["owner"].as_str()),
            (200, Some(on[0].as_str())),
            "{v}"
        );
    }
    assert_eq!(per_host.len(), 3, "each host got some: {per_host:?}");
    let (status, listed) = http(front, "GET", "/api/sandboxes");
    assert_eq!(
        (status, listed["count"].as_u64()),
        (200, Some(SANDBOXES as u64)),
        "{listed}"
    );

    // host2 dies (its serve; its engine keeps the containers, as after a crash or a cut
    // cable): its IDs go to the others on deer-flow's next call.
    let victim = 1;
    hosts[victim].kill();
    let lost: Vec<&(String, String, String)> = ids
        .iter()
        .filter(|(id, _, _)| placed[id][0] == hosts[victim].name)
        .collect();
    assert!(!lost.is_empty());
    for one in &lost {
        let id = &one.0;
        // deer-flow's discover finds nothing once the dead host's claim lapsed (a TTL)...
        wait_for(&format!("{id}: discover answers 404"), 60, || {
            http(front, "GET", &format!("/api/sandboxes/{id}")).0 == 404
        });
        // ...and its create makes the sandbox on a live host (503 while the claim lives).
        let mut last = String::new();
        wait_for(&format!("{id}: created again"), 30, || match create(one) {
            Ok(_) => true,
            Err(why) => {
                last = why;
                false
            }
        });
        let _ = last;
    }
    let moved = running(&hosts, &t.prefix);
    for (id, _, _) in &ids {
        let live: Vec<&String> = moved[id]
            .iter()
            .filter(|h| **h != hosts[victim].name)
            .collect();
        assert_eq!(
            live.len(),
            1,
            "{id}: one live copy on the live hosts: {:?}",
            moved[id]
        );
        assert_eq!(claim(&t, id), format!("own:{}", live[0]), "{id}");
    }
    let (status, listed) = http(front, "GET", "/api/sandboxes");
    let listed_ids: BTreeSet<&str> = listed["sandboxes"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["sandbox_id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!((status, listed_ids.len()), (200, SANDBOXES), "{listed}");

    // host2 returns: its stale sandboxes are removed, the new owners' untouched.
    let new_owners: BTreeMap<String, (String, String)> = ids
        .iter()
        .map(|(id, _, _)| {
            let h = moved[id]
                .iter()
                .find(|h| **h != hosts[victim].name)
                .cloned()
                .unwrap_or_default();
            let cid = hosts
                .iter()
                .find(|x| x.name == h)
                .map(|x| x.sandboxes(&t.prefix)[id].0.clone())
                .unwrap_or_default();
            (id.clone(), (h, cid))
        })
        .collect();
    let serve_again = |hosts: &mut Vec<Host>| {
        let h = &mut hosts[victim];
        h.start_serve(&t);
    };
    serve_again(&mut hosts);
    let victim_name = hosts[victim].name.clone();
    let removed = wait_until(60, || {
        let held = hosts[victim].sandboxes(&t.prefix);
        lost.iter().all(|(id, _, _)| !held.contains_key(id))
    });
    assert!(
        removed,
        "the returning host's stale sandboxes are removed within 60 s: {:?}\n{}",
        hosts[victim].sandboxes(&t.prefix),
        hosts[victim].log()
    );
    let after = running(&hosts, &t.prefix);
    for (id, _, _) in &ids {
        let (owner, cid) = &new_owners[id];
        assert_eq!(
            after[id],
            vec![owner.clone()],
            "{id}: live once, on its owner"
        );
        let h = hosts.iter().find(|x| x.name == *owner).expect("owner");
        assert_eq!(
            &h.sandboxes(&t.prefix)[id].0,
            cid,
            "{id}: the new owner's sandbox untouched"
        );
        assert_eq!(claim(&t, id), format!("own:{owner}"), "{id}");
        // The returning host answers the IDs it lost for their owners (HAProxy's stick
        // table, or its own 307 and the registry).
        let (status, v) = http(front, "GET", &format!("/api/sandboxes/{id}"));
        assert_eq!(
            (status, v["owner"].as_str()),
            (200, Some(owner.as_str())),
            "{id}: {v}"
        );
    }
    assert!(
        hosts[victim].log().contains("stale"),
        "{victim_name} said what it removed: {}",
        hosts[victim].log()
    );

    // deer-flow's DELETE of one sandbox per owner reaches its owner, whichever host HAProxy picks.
    for owner in ["host1", "host3"] {
        let Some((id, _)) = new_owners.iter().find(|(_, (o, _))| o == owner) else {
            continue;
        };
        remote(front, &["delete", id]).unwrap_or_else(|why| panic!("delete {id}: {why}"));
        let h = hosts.iter().find(|x| x.name == owner).expect("owner");
        assert!(
            !h.sandboxes(&t.prefix).contains_key(id),
            "{id} gone from {owner}'s engine"
        );
    }
    assert!(bins::lifecycle().exists());
}
