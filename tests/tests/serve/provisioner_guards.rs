//! Issue 36's guards on the provisioner API: the key on every route but `/health` (and the
//! binary's refusals of a TCP listener without a private key), concurrent creates of one ID,
//! bad input refused before any engine call, the socket's limits for TCP clients, and ownership
//! claims in Redis.

use lifecycle::decide::Mode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sockproxy_tests::bounded::{OutputWithin, SHORT};
use sockproxy_tests::engine::Engine;
use sockproxy_tests::provisioner::{engine_asked, hex, ApiStack, KEY};
use sockproxy_tests::stack::StackProxy;

/// On a listener with a key, no route but `/health` answers without it: deer-flow's, the
/// project's `/v1/` and `/healthz`, `/metrics`, a 405 and a path no route has (one added later
/// is keyed the same way); a missing, empty, wrong, longer or partial key gets the same 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_guards_every_route_but_health() {
    if !sockproxy_tests::bindroot::can_pin("the_key_guards_every_route_but_health") {
        return;
    }
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = ApiStack::start(&e, Mode::Open, Some(KEY)).await;
    let create = Some(json!({"sandbox_id": "s1"}).to_string().into_bytes());
    let acquire = Some(
        json!({"user_id": "user-1", "thread_id": "thread-1"})
            .to_string()
            .into_bytes(),
    );
    let other_length = "k".repeat(KEY.len() + 7);
    let longer = format!("{KEY}x");
    let prefix = &KEY[..KEY.len() - 1];
    for (headers, why) in [
        (vec![], "no key"),
        (vec![("X-API-Key", "")], "an empty key"),
        (vec![("X-API-Key", prefix)], "a prefix of the key"),
        (vec![("X-API-Key", longer.as_str())], "the key and more"),
        (vec![("X-API-Key", "wrong-key-of-same-len")], "wrong key"),
        (vec![("X-API-Key", other_length.as_str())], "another length"),
        (vec![("Authorization", KEY)], "another header"),
        (vec![("X-Api-Key-2", KEY)], "a lookalike header"),
    ] {
        for (method, path, body) in [
            ("GET", "/api/capabilities", None),
            ("GET", "/api/sandboxes", None),
            ("POST", "/api/sandboxes", create.clone()),
            ("GET", "/api/sandboxes/s1", None),
            ("DELETE", "/api/sandboxes/s1", None),
            ("GET", "/healthz", None),
            ("GET", "/metrics", None),
            ("GET", "/v1/sandboxes", None),
            ("POST", "/v1/acquire", acquire.clone()),
            ("POST", "/v1/leases/l/release", None),
            ("POST", "/v1/leases/l/renew", None),
            ("POST", "/v1/sandboxes/7d9ac0ff9b98cd06/destroy", None),
            ("POST", "/health", None),
            ("GET", "/v2/added-later", None),
        ] {
            let (status, text) = s.call(method, path, &headers, body).await;
            assert_eq!(
                (status, text.as_str()),
                (401, "Unauthorized"),
                "{why}: {method} {path}"
            );
        }
    }
    assert_eq!(
        engine_asked(&e)
            .iter()
            .filter(|l| l.contains("/containers/create"))
            .count(),
        0
    );
    let (_, listed) = s
        .call("GET", "/v1/sandboxes", &[("X-API-Key", KEY)], None)
        .await;
    assert_eq!(listed.trim(), r#"{"sandboxes":[]}"#, "nothing acquired");
    let (status, text) = s.call("GET", "/health", &[], None).await;
    assert_eq!((status, text.trim()), (200, r#"{"status":"ok"}"#));
    let key = [("X-API-Key", KEY)];
    for path in ["/api/capabilities", "/healthz", "/v1/sandboxes"] {
        let (status, text) = s.call("GET", path, &key, None).await;
        assert_eq!(status, 200, "{path}: {text}");
    }
    // The metrics left the API's listener for `--metrics-listen`.
    let (status, text) = s.call("GET", "/metrics", &key, None).await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("--metrics-listen"), "{text}");
    let metrics = s.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"lifecycle_api_requests_total{route="sandboxes",code="401"} 16"#),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"lifecycle_api_requests_total{route="v1",code="401"} 48"#),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"lifecycle_api_requests_total{route="capabilities",code="200"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_parallel_creates_of_one_id_make_one_container() {
    if !sockproxy_tests::bindroot::can_pin("eight_parallel_creates_of_one_id_make_one_container") {
        return;
    }
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = std::sync::Arc::new(ApiStack::start(&e, Mode::Open, Some(KEY)).await);
    let body =
        json!({"sandbox_id": "7d9ac0ff9b98cd06", "thread_id": "thread-1", "user_id": "user-1"});
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (s, body) = (s.clone(), body.clone());
        set.spawn(async move { s.create(&body).await });
    }
    let mut urls = Vec::new();
    while let Some(r) = set.join_next().await {
        let (status, text) = r.expect("task");
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).expect("json");
        urls.push(v["sandbox_url"].clone());
    }
    urls.dedup();
    assert_eq!(urls.len(), 1, "one URL for all: {urls:?}");
    let creates = engine_asked(&e)
        .iter()
        .filter(|l| l.contains("/containers/create"))
        .count();
    assert_eq!(creates, 1, "one container");
    // A create while a delete of the same ID runs: both answer, and what the engine holds
    // afterwards is what the API says.
    let del = {
        let s = s.clone();
        tokio::spawn(async move {
            s.call(
                "DELETE",
                "/api/sandboxes/7d9ac0ff9b98cd06",
                &[("X-API-Key", KEY)],
                None,
            )
            .await
        })
    };
    let post = {
        let (s, body) = (s.clone(), body.clone());
        tokio::spawn(async move { s.create(&body).await })
    };
    assert_eq!(del.await.expect("delete").0, 200);
    assert_eq!(post.await.expect("post").0, 200);
    let (status, _) = s
        .call(
            "GET",
            "/api/sandboxes/7d9ac0ff9b98cd06",
            &[("X-API-Key", KEY)],
            None,
        )
        .await;
    let held = s.inspect(&s.name("7d9ac0ff9b98cd06"));
    assert_eq!(
        status == 200,
        held != Value::Null,
        "the API and the engine agree: {status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_any_engine_call() {
    if !sockproxy_tests::bindroot::can_pin("bad_input_is_refused_before_any_engine_call") {
        return;
    }
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = ApiStack::start(&e, Mode::Open, Some(KEY)).await;
    s.proxy.wait_names_live();
    std::os::unix::fs::symlink("/etc", s.root.join("link")).expect("symlink");
    let r = s.root.display().to_string();
    let mount =
        |host: String, container: &str| json!({"host_path": host, "container_path": container});
    let eleven: Vec<Value> = (0..11)
        .map(|i| mount(format!("{r}/m{i}"), "/mnt/acp-workspace"))
        .collect();
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (json!({"sandbox_id": "s", "extra_mounts": [mount(format!("{r}/../etc"), "/mnt/acp-workspace")]}).to_string().into_bytes(), 400, "absolute, clean"),
        (json!({"sandbox_id": "s", "extra_mounts": [mount("/etc".into(), "/mnt/acp-workspace")]}).to_string().into_bytes(), 400, "not under the mount root"),
        (json!({"sandbox_id": "s", "extra_mounts": [mount(format!("{r}/link/x"), "/mnt/acp-workspace")]}).to_string().into_bytes(), 400, "is a symbolic link"),
        (json!({"sandbox_id": "s", "extra_mounts": eleven}).to_string().into_bytes(), 400, "11 given; at most 10"),
        (json!({"sandbox_id": "s", "extra_mounts": [mount(format!("{r}/a"), "/mnt/acp-workspace"), mount(format!("{r}/b"), "/mnt/acp-workspace")]}).to_string().into_bytes(), 400, "given twice"),
        (json!({"sandbox_id": "s", "extra_mounts": [mount(format!("{r}/a"), "/etc")]}).to_string().into_bytes(), 400, "is not one the provisioner mounts"),
        (json!({"sandbox_id": "S!"}).to_string().into_bytes(), 400, "sandbox_id"),
        (json!({"sandbox_id": "s", "thread_id": "a:b"}).to_string().into_bytes(), 400, "thread ID may contain only"),
        (json!({"sandbox_id": "s", "user_id": "x".repeat(129)}).to_string().into_bytes(), 400, "user ID must be at most 128"),
        (b"not json".to_vec(), 422, "not a sandbox create request"),
        (json!({"thread_id": "t"}).to_string().into_bytes(), 422, "missing field `sandbox_id`"),
        (vec![b'{'; 2 << 20], 413, "over 64 KiB"),
    ];
    for (body, want, says) in cases {
        if let Some(f) = e.fake.as_ref() {
            f.clear_requests();
        }
        let (status, text) = s
            .call("POST", "/api/sandboxes", &[("X-API-Key", KEY)], Some(body))
            .await;
        assert_eq!(status, want, "{says}: {text}");
        assert!(text.contains(says), "{says}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert!(v["detail"].is_string(), "FastAPI's shape: {text}");
        assert_eq!(
            engine_asked(&e),
            Vec::<String>::new(),
            "{says}: no engine call"
        );
    }
    assert!(
        !std::path::Path::new("/etc/x").exists(),
        "nothing made through the link"
    );
    // deer-flow adds fields over time: unknown ones are ignored.
    let body = json!({"sandbox_id": "s", "required_mount_contract_version": 2, "new_thing": [1]});
    let (status, text) = s.create(&body).await;
    assert_eq!(status, 200, "{text}");
}

/// TCP needs a key, and the key file must be private, non-empty, one line: each refusal is one
/// line on stderr and exit 2, before anything is bound. On a Unix socket a key is optional,
/// and enforced when given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_refuses_tcp_without_a_private_key_and_enforces_one_on_a_unix_socket() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("dir");
    let key_file = |name: &str, body: &str, mode: u32| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        p.display().to_string()
    };
    let good = key_file("good", &format!("{KEY}\n"), 0o600);
    let open = key_file("open", "k\n", 0o644);
    let empty = key_file("empty", "", 0o600);
    let missing = dir.path().join("missing").display().to_string();
    let sock = dir.path().join("proxy.sock");
    let cases: Vec<(Vec<String>, String)> = vec![
        (vec![], "listening on TCP needs --api-key-file".into()),
        (
            vec!["--api-key-file".into(), open.clone()],
            format!("--api-key-file {open}: readable or writable by others (mode 0644)"),
        ),
        (
            vec!["--api-key-file".into(), empty.clone()],
            format!("--api-key-file {empty}: the file is empty"),
        ),
        (
            vec!["--api-key-file".into(), missing.clone()],
            format!("--api-key-file {missing}: "),
        ),
    ];
    for (extra, want) in cases {
        let out = sockproxy_tests::lc::lifecycle_base(&sock, "deer-flow-", "open", dir.path())
            .args(["serve", "--listen", "tcp://127.0.0.1:1"])
            .args(&extra)
            .env_remove("LIFECYCLE_API_KEY_FILE")
            .output_within(SHORT)
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(&want), "{extra:?}: {stderr}");
        assert!(!stderr.contains(KEY), "never the key");
    }
    // A Unix socket with a key: /api/ needs it, /health does not.
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let stack = StackProxy::start(&e.socket, "deer-flow-", false);
    let api = dir.path().join("api.sock");
    let serve = sockproxy_tests::serve_process::ServeProcess::start(
        stack.socket(),
        "deer-flow-",
        dir.path(),
        api.clone(),
        &[],
        &["--api-key-file", &good],
    );
    let get = |path: &str, key: Option<&str>| {
        let mut req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        if let Some(k) = key {
            req.push_str(&format!("X-API-Key: {k}\r\n"));
        }
        req.push_str("\r\n");
        sockproxy_tests::raw::send(&api, req.as_bytes()).expect("answer")
    };
    let r = get("/api/capabilities", None);
    assert_eq!((r.status, r.text()), (401, "Unauthorized".to_owned()));
    let _ = get("/api/sandboxes", Some("not-the-key"));
    // One warn line per refusal, naming method, path and peer, never a key.
    let mut logged = String::new();
    for _ in 0..100 {
        logged = serve.stderr();
        if logged.matches("missing or wrong X-API-Key").count() >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lines: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("missing or wrong X-API-Key"))
        .collect();
    assert_eq!(lines.len(), 2, "{logged}");
    assert!(
        lines[0].contains("GET") && lines[0].contains("/api/capabilities"),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains("peer=unix") || lines[0].contains("peer=\"unix\""),
        "{}",
        lines[0]
    );
    assert!(
        !logged.contains(KEY) && !logged.contains("not-the-key"),
        "never a key: {logged}"
    );
    assert_eq!(get("/api/capabilities", Some(KEY)).status, 200);
    assert_eq!(get("/health", None).status, 200);
    // The key guards the project's own routes on this socket too.
    let r = get("/v1/sandboxes", None);
    assert_eq!((r.status, r.text()), (401, "Unauthorized".to_owned()));
    assert_eq!(get("/v1/sandboxes", Some(KEY)).status, 200);
    assert_eq!(get("/healthz", None).status, 401);
    drop(serve);
}

/// The socket's limits hold for TCP clients as for Unix ones: over `--max-connections` a client
/// is answered 503, a half-sent head is cut at `--header-timeout`, and the slot serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_clients_are_held_to_the_same_limits() {
    if !sockproxy_tests::bindroot::can_pin("tcp_clients_are_held_to_the_same_limits") {
        return;
    }
    use std::io::{Read, Write};
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let limits = lifecycle::serve::limits::Limits::new(0.5, 1.0, 1).expect("limits");
    let s = ApiStack::start_limited(&e, Mode::Open, Some(KEY), limits).await;
    let addr = s.addr;
    let mut held = tokio::task::spawn_blocking(move || {
        let mut t = std::net::TcpStream::connect(addr).expect("connect");
        t.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            .expect("half a head");
        t
    })
    .await
    .expect("client");
    let (status, text) = s.call("GET", "/health", &[], None).await;
    assert_eq!(status, 503, "the only slot is held: {text}");
    let closed = tokio::task::spawn_blocking(move || {
        held.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        matches!(held.read(&mut buf), Ok(0))
            || matches!(held.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset)
    })
    .await
    .expect("reader");
    assert!(closed, "the half-sent head was cut at the header timeout");
    let mut status = 0;
    for _ in 0..100 {
        status = s.call("GET", "/health", &[], None).await.0;
        if status == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(status, 200, "the freed slot serves again");
}

/// With a shared store, the provisioner API claims a sandbox before it creates it (`own:`) and
/// drops the claim once it is torn down, as `/v1/` does; an ID another provider owns is 409 and
/// nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_a_create_claims_first_and_a_delete_lets_go() {
    if !sockproxy_tests::bindroot::can_pin("with_redis_a_create_claims_first_and_a_delete_lets_go")
    {
        return;
    }
    let Some(redis) = sockproxy_tests::redis_server::RedisServer::start(
        "with_redis_a_create_claims_first_and_a_delete_lets_go",
    ) else {
        return;
    };
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let ttl = std::time::Duration::from_secs(60);
    let s = ApiStack::start_owned(&e, Mode::Open, Some(KEY), redis.ownership("api", ttl)).await;
    let peer = redis.ownership("peer", ttl);
    let body =
        json!({"sandbox_id": "7d9ac0ff9b98cd06", "thread_id": "thread-1", "user_id": "user-1"});
    let (status, text) = s.create(&body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        peer.value("7d9ac0ff9b98cd06").await.ok(),
        Some(Some("own:api".into()))
    );
    let (status, text) = s
        .call(
            "DELETE",
            "/api/sandboxes/7d9ac0ff9b98cd06",
            &[("X-API-Key", KEY)],
            None,
        )
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        peer.value("7d9ac0ff9b98cd06").await.ok(),
        Some(None),
        "claim dropped"
    );
    // Another provider's sandbox: refused, nothing created.
    let other = hex(&Sha256::digest(b"user-1:elsewhere"))[..16].to_owned();
    assert_eq!(
        peer.claim(&other).await.ok(),
        Some(lifecycle::serve::claims::Claim::Ours)
    );
    if let Some(f) = e.fake.as_ref() {
        f.clear_requests();
    }
    let body = json!({"sandbox_id": other, "thread_id": "elsewhere", "user_id": "user-1"});
    let (status, text) = s.create(&body).await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("owned by peer"), "{text}");
    assert_eq!(
        engine_asked(&e)
            .iter()
            .filter(|l| l.contains("/containers/create"))
            .count(),
        0
    );
}
