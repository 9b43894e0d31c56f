//! A call for an ID another live host owns, sent to the wrong host, and a Redis outage, on real
//! parts (docs/multi-host.md): two `lifecycle serve` processes (`--advertise-url`, one Redis
//! namespace through `--ownership-key-prefix`) on ONE real engine, each with its own stack
//! prefix and proxy, so each sees only its own sandboxes as two Docker hosts would; a private
//! `redis-server` on a Unix socket, killed and started again mid-run. deer-flow's calls
//! (`deerflow_remote.py`, with `requests` as deer-flow's remote backend: module-level
//! `requests.get/post/delete`, redirects followed, a 307 keeping its method, body and
//! `X-API-Key`) are sent to the wrong host on purpose.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;

use serde_json::{json, Value};
use sockproxy_tests::bindroot::BindRootDir;
use sockproxy_tests::engine::{real_engine, remove_stack, Engine};
use sockproxy_tests::multihost::{
    call, free_port, http, key_file, labelled, remote, sandboxes_named, wait_for, ServeHost,
};
use sockproxy_tests::provisioner::SERVING_CMD;
use sockproxy_tests::raw;
use sockproxy_tests::redis_server::RedisServer;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

/// One host: its stack's proxy on the shared engine, its state, its serve on a loopback port.
struct Host {
    name: &'static str,
    prefix: String,
    port: u16,
    serve: Child,
    state: tempfile::TempDir,
    _proxy: StackProxy,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.serve.kill();
        let _ = self.serve.wait();
    }
}

struct Shared<'a> {
    engine: &'a Engine,
    root: &'a Path,
    key_file: &'a Path,
    redis: &'a RedisServer,
    /// The one Redis namespace both hosts use (their stack prefixes differ).
    key_prefix: String,
}

impl Host {
    fn start(name: &'static str, t: &Shared) -> Self {
        let prefix = unique_prefix();
        let root = t.root.to_owned();
        let proxy = StackProxy::start_with(&t.engine.socket, &prefix, false, |c| {
            c.create_rules.bind_roots = vec![root];
        });
        proxy.wait_names_live();
        let state = tempfile::tempdir().expect("state");
        let port = free_port();
        let log = std::fs::File::create(state.path().join("serve.log")).expect("log");
        let mut cmd =
            sockproxy_tests::lc::lifecycle_base(proxy.socket(), &prefix, "open", state.path());
        cmd.args(["--sandbox-cmd", SERVING_CMD, "--stop-timeout", "1"]);
        let serve = ServeHost {
            port,
            key_file: t.key_file,
            root: t.root,
            redis: &t.redis.url(),
            owner: name,
            key_prefix: Some(&t.key_prefix),
            // Long enough that a sandbox held when Redis goes is still handed out while the
            // test asks for it.
            ttl: 30,
        }
        .spawn(&mut cmd, &["--sandbox-host", "127.0.0.1"], log);
        let host = Self {
            name,
            prefix,
            port,
            serve,
            state,
            _proxy: proxy,
        };
        wait_for(&format!("serve {name} answers /health"), 30, || {
            http(port, "GET", "/health").0 == 200
        });
        host
    }

    /// Sandbox ID → (container ID, running) of this host's stack on the engine.
    fn sandboxes(&self, engine: &Path) -> BTreeMap<String, (String, bool)> {
        sandboxes_named(engine, &format!("{}sandbox-", self.prefix))
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.state.path().join("serve.log")).unwrap_or_default()
    }
}

/// deer-flow's create body for (user, thread).
fn create_body(user: &str, thread: &str) -> (String, Value) {
    let id = stackmodel::sandbox_id(user, thread);
    let body = json!({
        "sandbox_id": id, "thread_id": thread, "user_id": user,
        "include_legacy_skills": true, "provision_lark_cli_runtime": false,
        "provision_lark_cli_broker": false, "extra_mounts": [],
    });
    (id, body)
}

/// Whether an HTTP server answers at `url` (`http://HOST:PORT`): any status line.
fn answers(url: &str) -> bool {
    use std::io::{Read, Write};
    let Some(addr) = url.strip_prefix("http://") else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    if s.write_all(b"GET / HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

struct Fixture {
    _root: BindRootDir,
    _keys: tempfile::TempDir,
    redis: RedisServer,
    a: Host,
    b: Host,
    engine: Engine,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for h in [&self.a, &self.b] {
            remove_stack(&self.engine.socket, &h.prefix);
        }
    }
}

/// Two hosts on the real engine sharing one Redis; `None` after a skip notice.
fn fixture(test: &str) -> Option<Fixture> {
    let engine = real_engine(test)?;
    let redis = RedisServer::start(test)?;
    let root = BindRootDir::new("mhroutes");
    let keys = tempfile::tempdir().expect("dir");
    let key_file = key_file(keys.path());
    let shared = Shared {
        engine: &engine,
        root: root.path(),
        key_file: &key_file,
        redis: &redis,
        key_prefix: format!("lifecycle:{}:sandbox", unique_prefix()),
    };
    let a = Host::start("hostA", &shared);
    let b = Host::start("hostB", &shared);
    Some(Fixture {
        _root: root,
        _keys: keys,
        redis,
        a,
        b,
        engine,
    })
}

/// Creates (user, thread)'s sandbox on `h` directly: its ID and answer.
fn create_on(h: &Host, user: &str, thread: &str) -> (String, Value) {
    let (id, body) = create_body(user, thread);
    let r = call(h.port, "POST", "/api/sandboxes", Some(&body));
    assert_eq!(r.status, 200, "create {id} on {}: {}", h.name, r.body);
    assert_eq!(r.body["owner"], h.name, "{}", r.body);
    (id, r.body)
}

#[test]
fn calls_sent_to_the_wrong_host_reach_the_live_owner() {
    let test = "calls_sent_to_the_wrong_host_reach_the_live_owner";
    let Some(f) = fixture(test) else { return };
    let engine = f.engine.socket.clone();
    let (a, b) = (&f.a, &f.b);
    let (id, made) = create_on(a, "user-a", "thread-a");
    let (b_id, _) = create_on(b, "user-b", "thread-b");
    let b_before = b.sandboxes(&engine);
    let a_cid = a.sandboxes(&engine)[&id].0.clone();

    // GET at the wrong host: answered from the shared registry, the owner's answer.
    let (status, got) = http(b.port, "GET", &format!("/api/sandboxes/{id}"));
    assert_eq!(status, 200, "{got}");
    assert_eq!(
        (
            got["owner"].as_str(),
            &got["sandbox_url"],
            got["status"].as_str()
        ),
        (Some("hostA"), &made["sandbox_url"], Some("Running")),
        "{got}"
    );
    let url = got["sandbox_url"].as_str().unwrap_or("");
    // deer-flow polls a new sandbox's URL for up to 30 s: the create does not wait for it.
    wait_for(&format!("the owner's sandbox answers at {url}"), 30, || {
        answers(url)
    });

    // POST at the wrong host: 307 to the owner, nothing made on the wrong host's stack.
    let (_, body) = create_body("user-a", "thread-a");
    let r = call(b.port, "POST", "/api/sandboxes", Some(&body));
    assert_eq!(r.status, 307, "{}", r.body);
    assert_eq!(
        r.location.as_deref(),
        Some(format!("{}/api/sandboxes", a.url()).as_str())
    );
    // Followed as `requests` does (method and body kept): the owner's same sandbox.
    let followed = call(a.port, "POST", "/api/sandboxes", Some(&body));
    assert_eq!(
        (followed.status, &followed.body["sandbox_url"]),
        (200, &made["sandbox_url"]),
        "{}",
        followed.body
    );
    assert_eq!(b.sandboxes(&engine), b_before, "hostB made nothing");

    // DELETE at the wrong host: 307 to the owner; the wrong host removed nothing.
    let path = format!("/api/sandboxes/{id}");
    let r = call(b.port, "DELETE", &path, None);
    assert_eq!(r.status, 307, "{}", r.body);
    assert_eq!(
        r.location.as_deref(),
        Some(format!("{}{path}", a.url()).as_str())
    );
    assert_eq!(
        a.sandboxes(&engine).get(&id),
        Some(&(a_cid.clone(), true)),
        "a 307 removes nothing"
    );
    assert_eq!(b.sandboxes(&engine), b_before, "hostB's own untouched");
    // Followed: the owner removes its sandbox from the engine.
    let (status, gone) = http(a.port, "DELETE", &path);
    assert_eq!(
        (status, &gone),
        (
            200,
            &json!({"ok": true, "sandbox_id": id, "result": "destroyed"})
        )
    );
    assert!(
        raw::get(&engine, &format!("/containers/{a_cid}/json")).is_ok_and(|r| r.status == 404),
        "the owner's container is gone from the engine"
    );
    assert_eq!(labelled(&engine, &id), Vec::<String>::new());
    assert_eq!(b.sandboxes(&engine), b_before, "hostB's own untouched");
    assert_eq!(
        http(b.port, "GET", &path).0,
        404,
        "gone from the registry too"
    );

    // deer-flow's own client, pointed at the wrong host for a sandbox hostA holds: its
    // create (POST, 307 followed with its body), discover, list, and DELETE (307 followed
    // with its method) all keep the contract, and the sandbox lives and goes on hostA only.
    let (id2, _) = create_on(a, "user-a", "thread-a2");
    let a2_cid = a.sandboxes(&engine)[&id2].0.clone();
    remote(b.port, &["create", &id2, "user-a", "thread-a2", "[]"])
        .unwrap_or_else(|why| panic!("deer-flow's create through hostB: {why}"));
    assert_eq!(labelled(&engine, &id2), vec![a2_cid.clone()], "one sandbox");
    remote(b.port, &["delete", &id2])
        .unwrap_or_else(|why| panic!("deer-flow's delete through hostB: {why}"));
    assert_eq!(labelled(&engine, &id2), Vec::<String>::new());
    assert!(raw::get(&engine, &format!("/containers/{a2_cid}/json")).is_ok_and(|r| r.status == 404));
    assert_eq!(b.sandboxes(&engine), b_before, "hostB's own untouched");
    assert_eq!(
        b.sandboxes(&engine).get(&b_id).map(|s| s.1),
        Some(true),
        "{}",
        b.log()
    );
}

#[test]
fn a_redis_outage_keeps_what_is_held_and_creates_nothing() {
    let test = "a_redis_outage_keeps_what_is_held_and_creates_nothing";
    let Some(mut f) = fixture(test) else { return };
    let engine = f.engine.socket.clone();
    let (held, made) = create_on(&f.a, "user-h", "thread-h");
    let url = made["sandbox_url"].as_str().unwrap_or("").to_owned();
    wait_for(&format!("the sandbox answers at {url}"), 30, || {
        answers(&url)
    });

    f.redis.kill();
    // What hostA holds is still handed out (its claim was renewed within its TTL), and
    // its sandbox still answers.
    let (status, got) = http(f.a.port, "GET", &format!("/api/sandboxes/{held}"));
    assert_eq!(
        (status, got["status"].as_str(), got["sandbox_url"].as_str()),
        (200, Some("Running"), Some(url.as_str())),
        "{got}"
    );
    assert!(answers(&url), "the held sandbox answers during the outage");
    // A create: a clear 503, and nothing on the engine, on either host.
    let (new_id, body) = create_body("user-n", "thread-n");
    for h in [&f.a, &f.b] {
        let r = call(h.port, "POST", "/api/sandboxes", Some(&body));
        let detail = r.body["detail"].as_str().unwrap_or("").to_owned();
        assert_eq!(r.status, 503, "{}: {}", h.name, r.body);
        assert!(
            detail.contains("ownership store does not answer"),
            "{}: {detail}",
            h.name
        );
    }
    assert_eq!(
        labelled(&engine, &new_id),
        Vec::<String>::new(),
        "nothing created in the outage"
    );

    // Redis back (empty, as after a restart without persistence): creates work again.
    f.redis.restart();
    let mut last = Value::Null;
    wait_for("a create answers 200 once Redis is back", 30, || {
        let r = call(f.a.port, "POST", "/api/sandboxes", Some(&body));
        last = r.body;
        r.status == 200
    });
    assert_eq!(last["owner"], "hostA", "{last}");
    assert_eq!(
        labelled(&engine, &new_id).len(),
        1,
        "one sandbox: {}",
        f.a.log()
    );
    let new_url = last["sandbox_url"].as_str().unwrap_or("");
    wait_for(&format!("the new sandbox answers at {new_url}"), 30, || {
        answers(new_url)
    });
}
