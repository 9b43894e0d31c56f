//! Issue 36: deer-flow's provisioner API on `lifecycle serve`. The contract test drives every
//! route with Python `requests` in the order deer-flow's remote backend calls them, on the fake
//! engine and on the real dockerd, each through sockproxy, in open and restricted mode, and
//! asserts what the engine holds; sandboxes made here are never reaped. The guards (key, input,
//! concurrency, limits, claims) are in `provisioner_guards`.

use lifecycle::decide::Mode;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sockproxy_tests::engine::{each_engine_async, Engine, Fakes};
use sockproxy_tests::provisioner::{hex, python, script, ApiStack, KEY};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deer_flows_remote_backend_creates_finds_checks_lists_and_destroys() {
    if !sockproxy_tests::bindroot::can_pin(
        "deer_flows_remote_backend_creates_finds_checks_lists_and_destroys",
    ) {
        return;
    }
    each_engine_async(
        "deer_flows_remote_backend_creates_finds_checks_lists_and_destroys",
        Fakes::Debian,
        |e| {
            Box::pin(async move {
                let s = ApiStack::start(e, Mode::Open, Some(KEY)).await;
                // deer-flow's own derivation, as a literal computation here (not the code under
                // test): sha256("user-1:thread-1")[:16] and the full digest as the scope label.
                let digest = hex(&Sha256::digest(b"user-1:thread-1"));
                let id = digest[..16].to_owned();
                assert_eq!(id, "7d9ac0ff9b98cd06");
                let acp = s.root.join("users/user-1/threads/thread-1/acp-workspace");
                let extra = json!([{"host_path": acp.display().to_string(),
                                    "container_path": "/mnt/acp-workspace", "read_only": false}])
                .to_string();
                let (url, key, sid) = (s.url(), KEY.to_owned(), id.clone());
                let out = tokio::task::spawn_blocking(move || {
                    python(
                        &script(),
                        &[&url, &key, "create", &sid, "user-1", "thread-1", &extra],
                    )
                })
                .await
                .expect("python");
                let made: Value = serde_json::from_str(out.trim()).expect("one JSON line");
                let c = s.inspect(&s.name(&id));
                assert_ne!(c, Value::Null, "the engine holds {}", s.name(&id));
                let labels = &c["Config"]["Labels"];
                assert_eq!(labels["deerflow.sandbox_id"], json!(id));
                assert_eq!(labels["lifecycle.scope"], json!(digest));
                assert_eq!(labels["deerflow.role"], "sandbox");
                assert_eq!(labels["deerflow.network_mode"], "open");
                assert_eq!(labels["lifecycle.origin"], "provisioner");
                let r = s.root.display().to_string();
                // Each bind is pinned (`bind_pins`): the path deer-flow named is in its label,
                // and what the engine mounts is that very directory.
                let binds = sockproxy_tests::unpin::host_binds(&c);
                for m in c["HostConfig"]["Mounts"].as_array().into_iter().flatten() {
                    let staging = m["Source"].as_str().unwrap_or_default();
                    let named = &c["Config"]["Labels"][format!(
                        "sockproxy.bind.{}",
                        m["Target"].as_str().unwrap_or_default()
                    )];
                    let named = named.as_str().unwrap_or_default();
                    assert!(!staging.starts_with(&r), "pinned, not {staging}");
                    use std::os::unix::fs::MetadataExt;
                    let (a, b) = (
                        std::fs::metadata(staging).expect("staging"),
                        std::fs::metadata(named).expect("named"),
                    );
                    assert_eq!(
                        (a.dev(), a.ino()),
                        (b.dev(), b.ino()),
                        "{staging} is {named}"
                    );
                }
                let mut want = vec![
                    format!("{r}/skills_view/public:/mnt/skills/public:ro"),
                    format!("{r}/users/user-1/skills_view/custom:/mnt/skills/custom:ro"),
                    format!("{r}/users/user-1/skills_view/legacy:/mnt/skills/legacy:ro"),
                    format!("{r}/users/user-1/threads/thread-1/user-data:/mnt/user-data"),
                    format!("{r}/users/user-1/threads/thread-1/acp-workspace:/mnt/acp-workspace"),
                ];
                want.sort();
                assert_eq!(binds, want, "deer-flow's provisioner layout");
                assert!(s.root.join("skills_view/public").is_dir(), "made empty");
                let binding = &c["HostConfig"]["PortBindings"]["8080/tcp"][0];
                assert_eq!(binding["HostIp"], "127.0.0.1", "published on loopback only");
                let port = binding["HostPort"].as_str().unwrap_or_default().to_owned();
                assert_eq!(
                    made["sandbox_url"],
                    json!(format!("http://localhost:{port}"))
                );
                if !e.is_fake() {
                    // The URL answers HTTP (busybox httpd in the sandbox) once it is up: the
                    // create answered when the container ran, and deer-flow waits for
                    // readiness itself, as this does (within its own bound).
                    let answered = tokio::task::spawn_blocking(move || {
                        use std::io::{Read, Write};
                        let mut last = String::new();
                        for _ in 0..300 {
                            if let Ok(mut t) =
                                std::net::TcpStream::connect(format!("127.0.0.1:{port}"))
                            {
                                t.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                                    .ok();
                                if t.write_all(b"GET / HTTP/1.0\r\n\r\n").is_ok() {
                                    let mut buf = [0u8; 12];
                                    let n = t.read(&mut buf).unwrap_or(0);
                                    last = String::from_utf8_lossy(&buf[..n]).into_owned();
                                    if last.starts_with("HTTP/1.") {
                                        break;
                                    }
                                }
                            }
                            std::thread::sleep(std::time::Duration::from_millis(100));
                        }
                        last
                    })
                    .await
                    .expect("probe");
                    assert!(answered.starts_with("HTTP/1."), "{answered:?}");
                }
                let (url, key, sid) = (s.url(), KEY.to_owned(), id.clone());
                tokio::task::spawn_blocking(move || {
                    python(&script(), &[&url, &key, "delete", &sid])
                })
                .await
                .expect("python");
                assert_eq!(
                    s.inspect(&s.name(&id)),
                    Value::Null,
                    "destroyed on the engine"
                );
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_mode_makes_the_sidecar_and_networks_and_delete_removes_them() {
    if !sockproxy_tests::bindroot::can_pin(
        "restricted_mode_makes_the_sidecar_and_networks_and_delete_removes_them",
    ) {
        return;
    }
    each_engine_async(
        "restricted_mode_makes_the_sidecar_and_networks_and_delete_removes_them",
        Fakes::Debian,
        |e| {
            Box::pin(async move {
                let s = ApiStack::start(e, Mode::Restricted, Some(KEY)).await;
                // deer-flow's remote backend's own calls, as in open mode.
                let (url, key) = (s.url(), KEY.to_owned());
                let out = tokio::task::spawn_blocking(move || {
                    python(
                        &script(),
                        &[
                            &url,
                            &key,
                            "create",
                            "7d9ac0ff9b98cd06",
                            "user-1",
                            "thread-1",
                            "[]",
                        ],
                    )
                })
                .await
                .expect("python");
                let p = &s.prefix;
                // deer-flow's digest of ("{P}sandbox", id), computed here, not by the code under
                // test.
                let digest = hex(&Sha256::digest(
                    format!("{p}sandbox:7d9ac0ff9b98cd06").as_bytes(),
                ))[..16]
                    .to_owned();
                let made = [
                    format!("/containers/{p}netproxy-{digest}/json"),
                    format!("/networks/{p}sandbox-net-{digest}"),
                    format!("/networks/{p}sandbox-egress-{digest}"),
                ];
                for path in &made {
                    assert!(s.exists(path), "{path}");
                }
                let c = s.inspect(&s.name("7d9ac0ff9b98cd06"));
                assert_eq!(c["Config"]["Labels"]["deerflow.network_mode"], "allowlist");
                let v: Value = serde_json::from_str(out.trim()).expect("one JSON line");
                // The URL is the sidecar's relay, published on loopback (issue 49): the host
                // has no address on the sandbox's internal network.
                let sidecar = s.inspect(&format!("{p}netproxy-{digest}"));
                let bound = &sidecar["HostConfig"]["PortBindings"]["8080/tcp"][0];
                assert_eq!(bound["HostIp"], "127.0.0.1", "{sidecar}");
                let port = bound["HostPort"].as_str().unwrap_or_default().to_owned();
                assert_eq!(
                    v["sandbox_url"],
                    json!(format!("http://localhost:{port}")),
                    "{out}"
                );
                let own = &c["HostConfig"]["PortBindings"];
                assert!(
                    own.as_object().is_none_or(serde_json::Map::is_empty),
                    "the sandbox publishes nothing itself: {own}"
                );
                if !e.is_fake() {
                    // Through the real netproxy's relay to the sandbox's httpd.
                    let answered = tokio::task::spawn_blocking(move || {
                        let mut c = std::net::TcpStream::connect((
                            "127.0.0.1",
                            port.parse::<u16>().expect("port"),
                        ))
                        .expect("the relay accepts");
                        let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                        std::io::Write::write_all(&mut c, b"GET / HTTP/1.0\r\n\r\n").expect("send");
                        let mut got = String::new();
                        let _ = std::io::Read::read_to_string(&mut c, &mut got);
                        got
                    })
                    .await
                    .expect("probe");
                    assert!(answered.starts_with("HTTP/1."), "{answered:?}");
                }
                let (url, key) = (s.url(), KEY.to_owned());
                tokio::task::spawn_blocking(move || {
                    python(&script(), &[&url, &key, "delete", "7d9ac0ff9b98cd06"])
                })
                .await
                .expect("python");
                for path in &made {
                    assert!(!s.exists(path), "removed: {path}");
                }
                assert_eq!(s.inspect(&s.name("7d9ac0ff9b98cd06")), Value::Null);
            })
        },
    )
    .await;
}

/// A provisioner sandbox is deer-flow's to keep: the reaper never takes it on the idle timer,
/// and a later create for another (user, thread) under the same ID is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioned_sandboxes_are_never_reaped_and_ids_never_cross_tenants() {
    if !sockproxy_tests::bindroot::can_pin(
        "provisioned_sandboxes_are_never_reaped_and_ids_never_cross_tenants",
    ) {
        return;
    }
    let e = Engine::start_fake(sockproxy_tests::fake::Flavor::Debian2010);
    let s = ApiStack::start(&e, Mode::Open, Some(KEY)).await;
    let body =
        json!({"sandbox_id": "7d9ac0ff9b98cd06", "thread_id": "thread-1", "user_id": "user-1"});
    let (status, _) = s.create(&body).await;
    assert_eq!(status, 200);
    assert!(s.provider.reap().await.is_empty(), "never reaped");
    lifecycle::serve::background::reconcile(&s.provider).await;
    assert!(s.provider.reap().await.is_empty());
    assert_ne!(
        s.inspect(&s.name("7d9ac0ff9b98cd06")),
        Value::Null,
        "still there"
    );
    // After a restart, a provider adopts what the API made as deer-flow's too (the label
    // says so), while an ordinary orphan goes to the warm pool and its idle timer.
    let labels = |id: &str, thread: &str, origin: Option<&str>| {
        let mut l = json!({"deerflow.sandbox_id": id, "deerflow.role": "sandbox",
            "deerflow.network_mode": "open", "deerflow.stack": s.prefix,
            "lifecycle.scope": hex(&Sha256::digest(format!("user-1:{thread}").as_bytes()))});
        if let Some(o) = origin {
            l["lifecycle.origin"] = json!(o);
        }
        l
    };
    let kept_id = hex(&Sha256::digest(b"user-1:kept"))[..16].to_owned();
    let warm_id = hex(&Sha256::digest(b"user-1:warm"))[..16].to_owned();
    let kept = s.make(
        &s.name(&kept_id),
        labels(&kept_id, "kept", Some("provisioner")),
    );
    let warm = s.make(&s.name(&warm_id), labels(&warm_id, "warm", None));
    lifecycle::serve::background::reconcile(&s.provider).await;
    let (_, listed) = s
        .call("GET", "/v1/sandboxes", &[("X-API-Key", KEY)], None)
        .await;
    assert!(
        listed.contains(&kept_id) && listed.contains(&warm_id),
        "{listed}"
    );
    s.clock.advance(std::time::Duration::from_secs(86_400));
    assert_eq!(
        s.provider.reap().await,
        vec![warm_id.clone()],
        "only the ordinary orphan"
    );
    let running = |cid: &str| s.inspect(cid)["State"]["Running"] == json!(true);
    assert!(running(&kept), "the API's sandbox stays");
    assert!(s.inspect(&warm) == Value::Null, "the orphan was reaped");
    let other =
        json!({"sandbox_id": "7d9ac0ff9b98cd06", "thread_id": "thread-2", "user_id": "user-9"});
    let (status, text) = s.create(&other).await;
    assert_eq!(status, 409, "{text}");
}

/// deer-flow's newest remote backend (its mount contract, `skills_container_path`,
/// `max_shell_sessions`), with Python `requests` as it calls: every field is honoured on the
/// engine and read back from every answer; a create of the same ID with other mounts is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deer_flows_newest_backend_gets_its_fields_honoured_and_read_back() {
    if !sockproxy_tests::bindroot::can_pin(
        "deer_flows_newest_backend_gets_its_fields_honoured_and_read_back",
    ) {
        return;
    }
    each_engine_async(
        "deer_flows_newest_backend_gets_its_fields_honoured_and_read_back",
        Fakes::Debian,
        |e| {
            Box::pin(async move {
                let s = ApiStack::start(e, Mode::Open, Some(KEY)).await;
                // The mount contract's own derivation, computed here.
                let id = hex(&Sha256::digest(b"mount-v2:alice:thread-7"))[..16].to_owned();
                let r = s.root.display().to_string();
                let conv = format!("{r}/users/alice/threads/thread-7/user-data/.upload-conversions");
                let integrations = format!("{r}/users/alice/skills_view/integrations");
                let extra = json!([
                    {"host_path": conv, "container_path": "/mnt/user-data/.upload-conversions", "read_only": true},
                    {"host_path": integrations, "container_path": "/mnt/skills/integrations", "read_only": true},
                ])
                .to_string();
                let (url, key, sid) = (s.url(), KEY.to_owned(), id.clone());
                tokio::task::spawn_blocking(move || {
                    python(
                        &script(),
                        &[&url, &key, "create-newest", &sid, "alice", "thread-7", &extra],
                    )
                })
                .await
                .expect("python");
                let c = s.inspect(&s.name(&id));
                let env: Vec<&str> = c["Config"]["Env"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                assert!(env.contains(&"MAX_SHELL_SESSIONS=13"), "{env:?}");
                // Pinned by the proxy: read back through the labels it names each source in.
                let binds = sockproxy_tests::unpin::host_binds(&c);
                let mut want = vec![
                    format!("{r}/skills_view/public:/custom-skills/public:ro"),
                    format!("{r}/users/alice/skills_view/custom:/custom-skills/custom:ro"),
                    format!("{r}/users/alice/skills_view/legacy:/custom-skills/legacy:ro"),
                    format!("{r}/users/alice/threads/thread-7/user-data:/mnt/user-data"),
                    format!("{conv}:/mnt/user-data/.upload-conversions:ro"),
                    format!("{integrations}:/custom-skills/integrations:ro"),
                ];
                want.sort();
                assert_eq!(binds, want, "the skills under their root, conversions read-only");
                let labels = &c["Config"]["Labels"];
                assert_eq!(labels["lifecycle.mount_contract"], "2");
                assert_eq!(labels["lifecycle.user_id"], "alice");
                assert_eq!(
                    labels["lifecycle.scope"],
                    json!(hex(&Sha256::digest(b"alice:thread-7"))),
                    "the contract's derivation scopes the (user, thread)"
                );
                // The same ID asked for with other mounts (the default skills root) is not
                // handed out as if it were that sandbox.
                let other = json!({"sandbox_id": id, "user_id": "alice", "thread_id": "thread-7"});
                let (status, text) = s.create(&other).await;
                assert_eq!(status, 409, "{text}");
                assert!(text.contains("other mounts"), "{text}");
                let (url, key, sid) = (s.url(), KEY.to_owned(), id.clone());
                tokio::task::spawn_blocking(move || {
                    python(&script(), &[&url, &key, "delete", &sid])
                })
                .await
                .expect("python");
                assert_eq!(s.inspect(&s.name(&id)), Value::Null);
            })
        },
    )
    .await;
}
