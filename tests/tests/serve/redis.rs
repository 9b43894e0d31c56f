//! The shared ownership store on a real, private `redis-server` (issue 16): deer-flow's
//! semantics script by script, an outage failing closed while the provider keeps serving what
//! it owns, and two `lifecycle serve` processes sharing one Redis and one proxy, one killed with
//! SIGKILL: the other adopts its sandboxes only once their claims lapsed and the grace passed,
//! never while the first still renews.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lifecycle::serve::claims::{Claim, Renew};
use lifecycle::serve::redis_store::RedisStore;
use lifecycle::serve::store::{Ownership, Store};
use serde_json::{json, Value};
use sockproxy_tests::lc::LcStack;
use sockproxy_tests::redis_server::RedisServer;
use sockproxy_tests::serve::{call, config, Served};
use sockproxy_tests::serve_process::ServeProcess;
use sockproxy_tests::step::{step, step_async};

fn owner(redis: &RedisServer, me: &str, ttl: Duration) -> Ownership {
    redis.ownership(me, ttl)
}

#[tokio::test]
async fn redis_store_follows_deer_flows_ownership_rules() {
    let Some(redis) = RedisServer::start("redis_store_follows_deer_flows_ownership_rules") else {
        return;
    };
    let (a, b) = (
        owner(&redis, "a", Duration::from_secs(60)),
        owner(&redis, "b", Duration::from_secs(60)),
    );
    assert_eq!(a.claim("k").await.ok(), Some(Claim::Ours), "unowned: taken");
    assert_eq!(a.claim("k").await.ok(), Some(Claim::Ours), "already ours");
    assert_eq!(b.claim("k").await.ok(), Some(Claim::Owned("a".into())));
    assert_eq!(
        b.begin_delete("k").await.ok(),
        Some(Claim::Owned("a".into())),
        "no teardown of another's"
    );
    assert_eq!(
        b.release("k").await.ok(),
        Some(false),
        "release drops only our own"
    );
    assert_eq!(a.value("k").await.ok(), Some(Some("own:a".into())));
    assert_eq!(a.begin_delete("k").await.ok(), Some(Claim::Ours));
    assert_eq!(a.value("k").await.ok(), Some(Some("del:a".into())));
    assert_eq!(
        b.claim("k").await.ok(),
        Some(Claim::Deleting("a".into())),
        "take refuses a del: key"
    );
    assert_eq!(
        a.claim("k").await.ok(),
        Some(Claim::Deleting("a".into())),
        "even our own teardown"
    );
    assert_eq!(
        a.renew("k").await.ok(),
        Some(Renew::Renewed),
        "a teardown keeps its del: alive"
    );
    assert_eq!(a.release("k").await.ok(), Some(true));
    assert_eq!(b.claim("k").await.ok(), Some(Claim::Ours));
    assert_eq!(a.renew("k").await.ok(), Some(Renew::Lost));
    assert_eq!(
        a.value("k").await.ok(),
        Some(Some("own:b".into())),
        "lost is never re-taken"
    );
    assert_eq!(
        b.renew_fenced("k").await.ok(),
        Some(Renew::Renewed),
        "a teardown's renewal"
    );
    assert_eq!(
        a.value("k").await.ok(),
        Some(Some("del:b".into())),
        "turns our own: into del:"
    );
    assert_eq!(a.renew_fenced("k").await.ok(), Some(Renew::Lost));
    assert_eq!(b.release("k").await.ok(), Some(true));
    assert_eq!(
        b.renew_fenced("k").await.ok(),
        Some(Renew::Lapsed),
        "an expired one is taken back"
    );
    assert_eq!(
        a.value("k").await.ok(),
        Some(Some("del:b".into())),
        "as del:"
    );
}

#[tokio::test]
async fn redis_claim_that_expired_unclaimed_renews_as_lapsed() {
    let Some(redis) = RedisServer::start("redis_claim_that_expired_unclaimed_renews_as_lapsed")
    else {
        return;
    };
    let a = owner(&redis, "a", Duration::from_millis(200));
    assert_eq!(a.claim("k").await.ok(), Some(Claim::Ours));
    let mut gone = false;
    for _ in 0..500 {
        if a.value("k").await.ok() == Some(None) {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the TTL expires the claim");
    assert_eq!(a.renew("k").await.ok(), Some(Renew::Lapsed));
    assert_eq!(a.value("k").await.ok(), Some(Some("own:a".into())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_fails_closed_and_keeps_serving_what_is_owned() {
    let Some(mut redis) =
        RedisServer::start("redis_outage_fails_closed_and_keeps_serving_what_is_owned")
    else {
        return;
    };
    let own = owner(&redis, "me", Duration::from_secs(60));
    let s = Served::start_owned(config(0, 0), false, own).await;
    let mine = s.acquired("user-1", "mine", "run").await;
    s.release(&mine["lease"]).await;
    let orphan_id = lifecycle::naming::sandbox_id("user-1", "orphan").expect("id");
    let orphan = s.stack.make(
        &s.stack.names(&orphan_id).sandbox,
        json!({ "deerflow.role": "sandbox", "deerflow.network_mode": "open", "deerflow.sandbox_id": orphan_id,
            "lifecycle.scope": lifecycle::naming::scope_digest("user-1", "orphan") }),
    );
    let creates = || {
        s.stack
            .fake()
            .request_lines()
            .iter()
            .filter(|l| l.contains("/containers/create"))
            .count()
    };
    let created_before = creates();
    redis.kill();
    let again = s.acquired("user-1", "mine", "run").await;
    assert_eq!(
        (again["source"].clone(), again["generation"].clone()),
        (json!("warm"), mine["generation"].clone())
    );
    let (status, v) = s.acquire("user-1", "new", "run").await;
    assert_eq!(status, 503, "no claim, no create: {v}");
    assert_eq!(creates(), created_before);
    let (status, v) = s.destroy(&json!(orphan_id)).await;
    assert_eq!(status, 503, "no destroy without a del: claim: {v}");
    assert!(s.running(&json!(orphan)));
    for _ in 0..3 {
        lifecycle::serve::background::reconcile(&s.provider).await;
    }
    assert_eq!(
        s.listed(&json!(orphan_id)).await,
        Value::Null,
        "nothing adopted in an outage"
    );
    s.provider.heartbeat().await;
    assert_eq!(
        s.listed(&mine["sandbox_id"]).await["state"],
        "active",
        "still served"
    );
}

fn serve_process(stack: &LcStack, redis: &RedisServer, dir: &Path, me: &str) -> ServeProcess {
    serve_process_with(stack, redis, dir, me, &[])
}

fn serve_process_with(
    stack: &LcStack,
    redis: &RedisServer,
    dir: &Path,
    me: &str,
    more: &[&str],
) -> ServeProcess {
    let url = redis.url();
    let mut flags = vec![
        "--ownership",
        &url,
        "--owner-id",
        me,
        "--ownership-ttl",
        "2",
        "--adopt-grace",
        "1",
        "--tick",
        "0.2",
        "--idle-timeout",
        "0",
    ];
    flags.extend_from_slice(more);
    ServeProcess::start(
        stack.proxy.socket(),
        &stack.prefix,
        stack.state.path(),
        dir.join(format!("{me}.sock")),
        &["--ready-timeout", "0", "--sandbox-cmd", "sleep 600"],
        &flags,
    )
}

/// deer-flow's gateway keeps a sandbox's owner at `deerflow:sandbox:owner:{id}` as
/// `own:{host}:{hex}`, set with `PX`. With `--ownership-key-prefix deerflow:sandbox:owner`, a
/// provider reads and writes those very keys: a sandbox the gateway owns is not handed out, and
/// one the provider creates is marked as its own where the gateway looks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_shares_deer_flows_ownership_keys_when_told_their_prefix() {
    let Some(redis) =
        RedisServer::start("a_provider_shares_deer_flows_ownership_keys_when_told_their_prefix")
    else {
        return;
    };
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    let p = serve_process_with(
        &stack,
        &redis,
        dir.path(),
        "lc-1",
        &["--ownership-key-prefix", "deerflow:sandbox:owner"],
    );
    let id = lifecycle::naming::sandbox_id("user-1", "shared").expect("id");
    let key = format!("deerflow:sandbox:owner:{id}");
    let client = redis::Client::open(redis.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let raw = |args: &[&str]| {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c
    };
    step_async("the gateway's claim keeps the provider off", async {
        let set: String = raw(&["SET", &key, "own:gw-host:5f2c9a", "PX", "120000"])
            .query_async(&mut conn)
            .await
            .expect("SET");
        assert_eq!(set, "OK");
        let (status, v) = p.acquire("user-1", "shared").await;
        assert_eq!(status, 409, "{v}");
        assert!(v.to_string().contains("gw-host:5f2c9a"), "{v}");
        assert!(p.ids().await.is_empty(), "nothing made or tracked");
    })
    .await;
    step_async(
        "once the gateway lets go, the provider's claim is where it looks",
        async {
            let _: i64 = raw(&["DEL", &key])
                .query_async(&mut conn)
                .await
                .expect("DEL");
            let (status, v) = p.acquire("user-1", "shared").await;
            assert_eq!(status, 200, "{v}");
            let value: Option<String> = raw(&["GET", &key])
                .query_async(&mut conn)
                .await
                .expect("GET");
            assert_eq!(value.as_deref(), Some("own:lc-1"));
            let ttl: i64 = raw(&["PTTL", &key])
                .query_async(&mut conn)
                .await
                .expect("PTTL");
            assert!(
                (1..=2000).contains(&ttl),
                "a TTL of --ownership-ttl: {ttl} ms"
            );
            let ours: Vec<String> = raw(&["KEYS", "lifecycle:*"])
                .query_async(&mut conn)
                .await
                .expect("KEYS");
            assert!(
                ours.is_empty(),
                "nothing under the default prefix: {ours:?}"
            );
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_provider_adopts_a_killed_ones_sandboxes_only_after_ttl_and_grace() {
    let Some(redis) = RedisServer::start(
        "second_provider_adopts_a_killed_ones_sandboxes_only_after_ttl_and_grace",
    ) else {
        return;
    };
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    let mut a = serve_process(&stack, &redis, dir.path(), "A");
    let mut b = serve_process(&stack, &redis, dir.path(), "B");
    let acquire = |sock: PathBuf, thread: &'static str| async move {
        call(
            &sock,
            "POST",
            "/v1/acquire",
            Some(json!({"user_id": "user-1", "thread_id": thread, "holder": "run"})),
        )
        .await
    };
    let (warm, held) = step_async("A hands out t1, released warm, and holds t2", async {
        let (status, warm) = acquire(a.sock.clone(), "t1").await;
        assert_eq!(status, 200, "{warm}");
        call(
            &a.sock,
            "POST",
            &format!(
                "/v1/leases/{}/release",
                warm["lease"].as_str().unwrap_or("")
            ),
            None,
        )
        .await;
        let (status, held) = acquire(a.sock.clone(), "t2").await;
        assert_eq!(status, 200, "{held}");
        (warm, held)
    })
    .await;
    // While A renews, B neither adopts nor hands out A's sandboxes, for two TTL + grace spans.
    step_async(
        "while A renews, B neither adopts, hands out nor destroys A's sandboxes",
        async {
            let watch_until = Instant::now() + Duration::from_secs(6);
            while Instant::now() < watch_until {
                assert!(b.ids().await.is_empty(), "B adopted while A still renews");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let (status, v) = acquire(b.sock.clone(), "t1").await;
            assert_eq!(status, 409, "A's sandbox is not B's to hand out: {v}");
            let held_id = held["sandbox_id"].as_str().unwrap_or_default();
            let (status, v) = call(
                &b.sock,
                "POST",
                &format!("/v1/sandboxes/{held_id}/destroy"),
                None,
            )
            .await;
            assert_eq!(status, 409, "B never destroys A's sandbox: {v}");
            let held_cid = held["generation"].as_str().unwrap_or_default();
            assert!(stack.exists(&format!("/containers/{held_cid}/json")));
        },
    )
    .await;
    step_async(
        "A killed: B adopts both, only after the TTL and the grace",
        async {
            a.kill9();
            let killed = Instant::now();
            let mut adopted = Vec::new();
            for _ in 0..300 {
                adopted = b.ids().await;
                if adopted.len() == 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let took = killed.elapsed();
            assert_eq!(adopted.len(), 2, "B adopts both after A died: {adopted:?}");
            assert!(adopted.iter().all(|(_, o)| o == "B"), "{adopted:?}");
            // A's claim outlives it by the rest of its TTL (2 s after its last renewal, which came
            // some ticks before the kill), then the sandboxes must be seen unowned for the grace (1 s):
            // the grace alone is a bound no scheduling can undercut.
            assert!(
                took >= Duration::from_secs(1),
                "adopted after {took:?}, before the grace"
            );
        },
    )
    .await;
    step_async("B reclaims A's warm sandbox", async {
        let (status, again) = acquire(b.sock.clone(), "t1").await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(
            (again["source"].clone(), again["generation"].clone()),
            (json!("warm"), warm["generation"].clone())
        );
    })
    .await;
    step("B's shutdown destroys both", || {
        let out = b.terminate();
        assert!(out.status.success(), "{out:?}");
        let lines = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            lines
                .lines()
                .filter(|l| l.contains("\"destroyed\""))
                .count(),
            2,
            "{lines}"
        );
        for g in [&warm["generation"], &held["generation"]] {
            assert!(
                !stack.exists(&format!("/containers/{}/json", g.as_str().unwrap_or(""))),
                "{lines}"
            );
        }
    });
}

/// Not a check of speed: prints acquire throughput of two providers sharing one Redis and one
/// proxy (fake engine), cold creates and then warm reclaims, for the benchmark table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_providers_sharing_redis_print_acquire_throughput() {
    let Some(redis) = RedisServer::start("two_providers_sharing_redis_print_acquire_throughput")
    else {
        return;
    };
    const PER_PROCESS: usize = 20;
    let stack = LcStack::new(false);
    let dir = tempfile::tempdir().expect("dir");
    let a = serve_process(&stack, &redis, dir.path(), "A");
    let b = serve_process(&stack, &redis, dir.path(), "B");
    let mut table = Vec::new();
    for round in ["created", "warm"] {
        let started = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for (p, name) in [(&a, "a"), (&b, "b")] {
            for i in 0..PER_PROCESS {
                let sock = p.sock.clone();
                let thread = format!("{name}-{i}");
                set.spawn(async move {
                    let body = json!({"user_id": "user-1", "thread_id": thread, "holder": "bench"});
                    let (status, v) = call(&sock, "POST", "/v1/acquire", Some(body)).await;
                    assert_eq!(status, 200, "{v}");
                    let lease = v["lease"].as_str().unwrap_or_default().to_owned();
                    call(&sock, "POST", &format!("/v1/leases/{lease}/release"), None).await;
                    v["source"].as_str().unwrap_or_default().to_owned()
                });
            }
        }
        let mut sources = Vec::new();
        while let Some(r) = set.join_next().await {
            sources.push(r.expect("task"));
        }
        let took = started.elapsed();
        assert!(sources.iter().all(|s| s == round), "{round}: {sources:?}");
        table.push((round, 2 * PER_PROCESS, took));
    }
    println!(
        "\nacquire+release throughput, 2 lifecycle serve processes sharing Redis (fake engine)"
    );
    println!("| source | acquires | time | acquires/s |");
    println!("|---|---|---|---|");
    for (round, n, took) in table {
        println!(
            "| {round} | {n} | {took:?} | {:.0} |",
            n as f64 / took.as_secs_f64().max(1e-9)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_claim_is_forgotten_never_retaken_and_nothing_destroyed() {
    let Some(redis) =
        RedisServer::start("a_lost_claim_is_forgotten_never_retaken_and_nothing_destroyed")
    else {
        return;
    };
    let s = Served::start_owned(
        config(0, 0),
        false,
        owner(&redis, "me", Duration::from_millis(300)),
    )
    .await;
    let a = s.acquired("user-1", "lost", "run").await;
    s.release(&a["lease"]).await;
    let id = a["sandbox_id"].as_str().unwrap_or_default().to_owned();
    // No heartbeat runs in this test: the claim lapses, and another provider takes it.
    let other = owner(&redis, "other", Duration::from_secs(60));
    let mut taken = false;
    for _ in 0..500 {
        if other.claim(&id).await.ok() == Some(Claim::Ours) {
            taken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(taken, "the lapsed claim is free for another provider");
    s.provider.heartbeat().await;
    assert_eq!(
        s.listed(&a["sandbox_id"]).await,
        Value::Null,
        "lost: forgotten"
    );
    assert_eq!(
        other.value(&id).await.ok(),
        Some(Some("own:other".into())),
        "never re-taken"
    );
    assert!(s.running(&a["generation"]), "and not destroyed");
    let (status, v) = s.acquire("user-1", "lost", "run").await;
    assert_eq!(status, 409, "now the other provider's: {v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claimed_before_create_and_torn_down_under_a_del_claim() {
    let Some(redis) = RedisServer::start("claimed_before_create_and_torn_down_under_a_del_claim")
    else {
        return;
    };
    let s = Served::start_owned(
        config(0, 0),
        true,
        owner(&redis, "me", Duration::from_secs(60)),
    )
    .await;
    let relay = s.relay.as_ref().expect("relayed");
    let peer = owner(&redis, "peer", Duration::from_secs(60));
    let id = lifecycle::naming::sandbox_id("user-1", "fenced").expect("id");
    let gate = relay.hold_once("POST", "/start");
    let sock = s.socket();
    let acquire = tokio::spawn(async move {
        let body = json!({"user_id": "user-1", "thread_id": "fenced", "holder": "run"});
        call(&sock, "POST", "/v1/acquire", Some(body)).await
    });
    gate.arrived().await;
    // The container exists but is not started yet: already ours, so no peer adopts it.
    assert_eq!(peer.value(&id).await.ok(), Some(Some("own:me".into())));
    assert_eq!(peer.claim(&id).await.ok(), Some(Claim::Owned("me".into())));
    gate.release();
    let (status, a) = acquire.await.expect("acquire");
    assert_eq!(status, 200, "{a}");
    s.release(&a["lease"]).await;
    let gate = relay.hold_once("POST", "/stop");
    let sock = s.socket();
    let destroy_path = format!("/v1/sandboxes/{id}/destroy");
    let destroy = tokio::spawn(async move { call(&sock, "POST", &destroy_path, None).await });
    gate.arrived().await;
    assert_eq!(
        peer.value(&id).await.ok(),
        Some(Some("del:me".into())),
        "teardown under del:"
    );
    assert_eq!(
        peer.claim(&id).await.ok(),
        Some(Claim::Deleting("me".into()))
    );
    gate.release();
    let (status, v) = destroy.await.expect("destroy");
    assert_eq!((status, v["result"].clone()), (200, json!("destroyed")));
    assert_eq!(peer.value(&id).await.ok(), Some(None), "released once gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_never_answers_fails_closed_within_the_store_timeout() {
    // Not a real Redis: a socket that accepts connections and never says anything.
    let dir = tempfile::tempdir().expect("dir");
    let sock = dir.path().join("silent.sock");
    let listener = tokio::net::UnixListener::bind(&sock).expect("bind");
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((c, _)) = listener.accept().await {
            open.push(c);
        }
    });
    let url = format!("unix://{}", sock.display());
    let silent = Ownership::new(
        Store::Redis(RedisStore::new(&url, "t-:".into(), Duration::from_millis(200)).expect("url")),
        "me",
        Duration::from_secs(60),
    );
    // The client's connection setup is never answered: every call fails on it, in time.
    let unavailable = "ownership store: connect: no answer in 200ms";
    assert_eq!(
        silent.claim("k").await.map_err(|e| e.to_string()),
        Err(unavailable.to_owned())
    );
    assert_eq!(
        silent.begin_delete("k").await.map_err(|e| e.to_string()),
        Err(unavailable.to_owned()),
        "no teardown claim either"
    );
    assert_eq!(
        silent.renew("k").await.map_err(|e| e.to_string()),
        Err(unavailable.to_owned())
    );
    held.abort();
}
