//! lifecycle's rules (docs/architecture.md, "lifecycle", the seed's patch note), against the fake engine behind the
//! real sockproxy (not `--restricted`, so sidecar and network changes are refused exactly as in
//! the incident), and against the raw fake where the seed says "a raw engine".

use lifecycle::decide::Mode;
use lifecycle::ops::OpError;
use serde_json::json;
use sockproxy_tests::fake::{Fault, FaultRule};
use sockproxy_tests::lc::LcStack;

/// `filters={"name":["^/?PREFIX"]}`, URL-encoded: what the proxy asks the engine for in place
/// of a client's own name filter (test prefixes hold no `.` to escape).
fn stack_filter(prefix: &str) -> String {
    format!("filters=%7B%22name%22%3A%5B%22%5E%2F%3F{prefix}%22%5D%7D")
}

fn refusal(s: &LcStack, id: &str) -> String {
    format!(
        "sockproxy: containers.stop: {} is not one of this stack's sandboxes",
        s.names(id).sidecar
    )
}

#[tokio::test]
async fn destroy_cleans_restricted_resources_only_when_the_label_says_so_or_cannot_be_read() {
    for label in [Some("open"), Some("restricted"), None] {
        let s = LcStack::new(false);
        let id = s.id("destroy");
        let names = s.names(&id);
        let labels = match label {
            Some(l) => json!({ "deerflow.network_mode": l }),
            None => json!({}),
        };
        let cid = s.make(&names.sandbox, labels);
        // A sidecar left there, which the proxy (not `--restricted`) lets the stack see only.
        s.make(&names.sidecar, json!({}));
        let lc = s.through_proxy(Mode::Open).await;
        let port = s.reserve(&id, &cid);
        s.fake().clear_requests();
        let result = lc.destroy(&id).await;
        assert!(
            !s.exists(&format!("/containers/{}/json", names.sandbox)),
            "{label:?}: the sandbox is gone either way"
        );
        if label == Some("open") {
            assert_eq!(result.expect("destroyed").ports_released, vec![port]);
            assert!(
                s.asked().iter().all(|l| !l.contains("netproxy")),
                "{:?}",
                s.asked()
            );
            assert!(!s.ledger().is_quarantined(&id).expect("read"));
        } else {
            let err = result.expect_err("the sidecar stop is refused").to_string();
            assert!(err.contains(&refusal(&s, &id)), "{label:?}: {err}");
            assert!(
                s.ledger().fences(&id, &cid).expect("read"),
                "{label:?}: a record for this generation"
            );
            assert_eq!(
                s.port(&id, &cid),
                Some(port),
                "{label:?}: the port is retained"
            );
        }
    }
}

#[tokio::test]
async fn a_failed_stop_is_an_error_and_leaves_a_record() {
    let s = LcStack::new(false);
    let id = s.id("stopfail");
    let names = s.names(&id);
    let cid = s.make(&names.sandbox, json!({ "deerflow.network_mode": "open" }));
    s.fake().inject(FaultRule::new(
        Some("POST"),
        &format!("/containers/{cid}/stop"),
        Fault::Status500,
    ));
    let port = s.reserve(&id, &cid);
    let lc = s.through_proxy(Mode::Open).await;
    let err = lc.destroy(&id).await.expect_err("stop failed").to_string();
    assert!(
        err.contains(&format!(
            "teardown deferred, quarantine record kept: stop {}",
            names.sandbox
        )) && err.contains("injected fault"),
        "{err}"
    );
    assert!(s.ledger().fences(&id, &cid).expect("read"));
    assert_eq!(s.port(&id, &cid), Some(port));
    assert!(
        s.exists(&format!("/containers/{}/json", names.sandbox)),
        "nothing was removed after the failed stop"
    );
}

#[tokio::test]
async fn a_restricted_process_tears_down_strictly_without_a_listing() {
    let s = LcStack::new(false);
    let id = s.id("strict");
    s.make(&s.names(&id).sidecar, json!({}));
    s.ledger().mark(&id, "unknown").expect("mark");
    let port = s.reserve(&id, "unknown");
    let lc = s.through_proxy(Mode::Restricted).await;
    s.fake().clear_requests();
    let err = lc
        .complete_absent_teardown(&id)
        .await
        .expect_err("refused")
        .to_string();
    assert!(err.contains(&refusal(&s, &id)), "{err}");
    assert!(
        s.asked()
            .iter()
            .all(|l| !l.starts_with("GET /containers/json")),
        "no listing: {:?}",
        s.asked()
    );
    assert!(
        s.ledger().is_quarantined(&id).expect("read"),
        "the record is kept"
    );
    assert_eq!(s.port(&id, "unknown"), Some(port), "the port is retained");
}

#[tokio::test]
async fn an_open_process_lists_once_refuses_nothing_and_retires() {
    let s = LcStack::new(false);
    let id = s.id("open");
    s.ledger().mark(&id, "unknown").expect("mark");
    let port = s.reserve(&id, "unknown");
    let lc = s.through_proxy(Mode::Open).await;
    s.fake().clear_requests();
    let (_, denied_before) = s.proxy.decisions();
    let done = lc.complete_absent_teardown(&id).await.expect("retired");
    assert_eq!((done.strict, done.ports_released), (false, vec![port]));
    let asked = s.asked();
    assert_eq!(asked.len(), 1, "exactly one listing: {asked:?}");
    // bollard spells `all=1` as `all=true`; dockerd reads both.
    assert!(
        asked[0].starts_with("GET /containers/json?all=true"),
        "{asked:?}"
    );
    // lifecycle asks for its sidecar by name; the proxy sends the engine the stack's anchored
    // prefix instead (dockerd ORs name values) and matches lifecycle's name itself.
    assert!(asked[0].contains(&stack_filter(&s.prefix)), "{asked:?}");
    assert_eq!(s.proxy.decisions().1, denied_before, "no refused call");
    assert!(!s.ledger().is_quarantined(&id).expect("read"));
    assert_eq!(s.port(&id, "unknown"), None);
}

#[tokio::test]
async fn an_exactly_listed_sidecar_stays_strict_behind_the_proxy_and_is_removed_on_a_raw_engine() {
    // Behind the proxy: listed (leftover of a restricted process), so strict, so refused.
    let s = LcStack::new(false);
    let id = s.id("listed");
    let names = s.names(&id);
    s.make(&names.sidecar, json!({}));
    s.ledger().mark(&id, "unknown").expect("mark");
    let lc = s.through_proxy(Mode::Open).await;
    let err = lc
        .complete_absent_teardown(&id)
        .await
        .expect_err("strict, refused")
        .to_string();
    assert!(err.contains(&refusal(&s, &id)), "{err}");
    assert!(s.ledger().is_quarantined(&id).expect("read"));

    // On a raw engine the same listing (among a longer lookalike) leads to a full removal.
    let s = LcStack::new(false);
    let names = s.names(&id);
    s.make(&names.sidecar, json!({}));
    s.make(&format!("{}0", names.sidecar), json!({}));
    s.make_network(&names.network);
    s.ledger().mark(&id, "unknown").expect("mark");
    let lc = s.raw_engine(Mode::Open).await;
    let done = lc
        .complete_absent_teardown(&id)
        .await
        .expect("strict cleanup on a raw engine");
    assert!(done.strict);
    assert!(!s.exists(&format!("/containers/{}/json", names.sidecar)));
    assert!(!s.exists(&format!("/networks/{}", names.network)));
    assert!(
        s.exists(&format!("/containers/{}0/json", names.sidecar)),
        "the lookalike is untouched"
    );
    assert!(!s.ledger().is_quarantined(&id).expect("read"));
}

#[tokio::test]
async fn lookalike_sidecars_do_not_count_as_listed() {
    let s = LcStack::new(false);
    let id = s.id("lookalike");
    let names = s.names(&id);
    let longer = format!("{}0", names.sidecar);
    let prefixed = format!("x{}", names.sidecar);
    s.make(&longer, json!({}));
    s.make(&prefixed, json!({}));
    s.ledger().mark(&id, "unknown").expect("mark");
    let lc = s.raw_engine(Mode::Open).await;
    s.fake().clear_requests();
    let done = lc.complete_absent_teardown(&id).await.expect("retired");
    assert!(!done.strict, "{:?}", s.asked());
    assert_eq!(s.asked().len(), 1, "only the listing: {:?}", s.asked());
    assert!(
        s.exists(&format!("/containers/{longer}/json"))
            && s.exists(&format!("/containers/{prefixed}/json"))
    );
}

#[tokio::test]
async fn a_failed_listing_keeps_the_strict_cleanup() {
    // Listing faults on a raw engine: strict cleanup runs (and finds nothing to remove).
    for fault in [
        Fault::Reset,
        Fault::Status500,
        Fault::Malformed,
        Fault::Delay(std::time::Duration::from_secs(3)),
    ] {
        let s = LcStack::new(false);
        let id = s.id("listfail");
        s.ledger().mark(&id, "unknown").expect("mark");
        s.fake()
            .inject(FaultRule::new(Some("GET"), "/containers/json", fault));
        let lc = s.raw_engine(Mode::Open).await;
        s.fake().clear_requests();
        let done = lc
            .complete_absent_teardown(&id)
            .await
            .expect("strict cleanup, nothing left");
        assert!(done.strict, "{fault:?}");
        let sidecar = s.names(&id).sidecar;
        assert!(
            s.asked()
                .iter()
                .any(|l| l == &format!("GET /containers/{sidecar}/json")),
            "{fault:?}: the sidecar is looked for: {:?}",
            s.asked()
        );
    }
    // Socket missing, and connection refused: strict cleanup is attempted and cannot finish.
    let s = LcStack::new(false);
    let missing = s.state_dir().join("missing.sock");
    let refused = s.state_dir().join("refused.sock");
    drop(std::os::unix::net::UnixListener::bind(&refused).expect("bind"));
    for socket in [missing, refused] {
        let stem = socket
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let id = s.id(&stem);
        s.ledger().mark(&id, "unknown").expect("mark");
        let port = s.reserve(&id, "unknown");
        let lc = s.at(&socket, Mode::Open).await;
        let err = lc
            .complete_absent_teardown(&id)
            .await
            .expect_err("strict cannot finish");
        assert!(matches!(err, OpError::Engine { .. }), "{err}");
        assert!(s.ledger().is_quarantined(&id).expect("read"));
        assert_eq!(s.port(&id, "unknown"), Some(port));
    }
}

#[tokio::test]
async fn two_racing_teardowns_release_the_port_once() {
    let s = LcStack::new(false);
    let id = s.id("race");
    s.ledger().mark(&id, "unknown").expect("mark");
    let port = s.reserve(&id, "unknown");
    let (a, b) = (
        s.through_proxy(Mode::Open).await,
        s.through_proxy(Mode::Open).await,
    );
    let (ra, rb) = tokio::join!(
        a.complete_absent_teardown(&id),
        b.complete_absent_teardown(&id)
    );
    let released: Vec<Vec<u16>> = [ra, rb]
        .into_iter()
        .map(|r| r.expect("ok").ports_released)
        .collect();
    assert_eq!(
        released.iter().flatten().collect::<Vec<_>>(),
        [&port],
        "{released:?}"
    );
    assert!(!s.ledger().is_quarantined(&id).expect("read"));
}

#[tokio::test]
async fn records_from_before_modes_existed_retire_on_the_next_create() {
    let s = LcStack::new(false);
    let id = s.id("legacy");
    // As the old code left it: one empty file per generation, no mode, no sandbox-ID file.
    let dir = s.ledger().dir().join(lifecycle::naming::k(&id));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join(lifecycle::naming::k("unknown")), b"").expect("record");
    assert!(s.ledger().is_quarantined(&id).expect("read"));
    let lc = s.through_proxy(Mode::Open).await;
    let made = lc.create("user-1", "legacy").await.expect("create");
    assert!(!made.discovered);
    assert!(!s.ledger().is_quarantined(&id).expect("read"));
    assert_eq!(s.proxy.decisions().1, 0, "no refusal");
}

#[tokio::test]
async fn the_next_create_retires_and_a_second_create_asks_nothing_about_it() {
    let s = LcStack::new(false);
    let id = s.id("next");
    let names = s.names(&id);
    let lc = s.through_proxy(Mode::Open).await;
    let first = lc.create("user-1", "next").await.expect("create");
    s.ledger().mark(&id, &first.container_id).expect("mark");
    // The container disappears out of band.
    let gone = sockproxy_tests::raw::request(
        &s.engine.socket,
        "DELETE",
        &format!("/containers/{}?force=1", names.sandbox),
        None,
    )
    .expect("rm");
    assert_eq!(gone.status, 204);
    s.fake().clear_requests();
    let second = lc
        .create("user-1", "next")
        .await
        .expect("the create retires the record and succeeds");
    assert!(!second.discovered);
    assert!(!s.ledger().is_quarantined(&id).expect("read"));
    assert_eq!(s.proxy.decisions().1, 0, "no refused call");
    let asked = s.asked();
    assert_eq!(
        asked[0],
        format!("GET /containers/{}/json", names.sandbox),
        "absence is confirmed first: {asked:?}"
    );
    // What the proxy asks itself before it forwards a create (the stack's network, and its
    // containers for the stack's totals: a list with `all=1`, then each one's inspect by ID) is
    // not lifecycle's.
    let proxys_own = |l: &str| {
        l == format!("GET /networks/{}net", s.prefix)
            || l.starts_with("GET /containers/json?all=1&")
            || l.strip_prefix("GET /containers/")
                .and_then(|r| r.strip_suffix("/json"))
                .is_some_and(|id| id.len() == 64)
    };
    let by_lifecycle: Vec<&String> = asked.iter().filter(|l| !proxys_own(l)).collect();
    assert_eq!(
        by_lifecycle
            .iter()
            .filter(|l| l.starts_with("GET /containers/json"))
            .count(),
        1,
        "{asked:?}"
    );

    s.fake().clear_requests();
    let third = lc
        .create("user-1", "next")
        .await
        .expect("discovers the live sandbox");
    assert!(third.discovered);
    assert_eq!(third.container_id, second.container_id);
    let asked = s.asked();
    let by_lifecycle: Vec<&String> = asked.iter().filter(|l| !proxys_own(l)).collect();
    assert!(
        by_lifecycle[0].starts_with("POST /containers/create?name="),
        "no question about the old record first: {asked:?}"
    );
    assert!(
        !by_lifecycle
            .iter()
            .any(|l| l.starts_with("GET /containers/json")),
        "{asked:?}"
    );
}

#[tokio::test]
async fn a_running_quarantined_container_is_replaced_in_the_same_create() {
    let s = LcStack::new(false);
    let id = s.id("running");
    let lc = s.through_proxy(Mode::Open).await;
    let first = lc.create("user-1", "running").await.expect("create");
    s.ledger().mark(&id, &first.container_id).expect("mark");
    let second = lc
        .create("user-1", "running")
        .await
        .expect("stopped, removed, retired, created");
    assert_ne!(second.container_id, first.container_id);
    assert!(!s.exists(&format!("/containers/{}/json", first.container_id)));
    assert!(!s.ledger().is_quarantined(&id).expect("read"));
    assert_eq!(s.proxy.decisions().1, 0);
}

#[tokio::test]
async fn a_restricted_record_is_kept_when_its_sidecar_stop_is_refused() {
    let s = LcStack::new(false);
    let id = s.id("kept");
    s.make(&s.names(&id).sidecar, json!({}));
    s.ledger().mark(&id, "unknown").expect("mark");
    let lc = s.through_proxy(Mode::Restricted).await;
    let err = lc.create("user-1", "kept").await.expect_err("deferred");
    assert!(matches!(err, OpError::Deferred { .. }), "{err}");
    assert!(err.to_string().contains(&refusal(&s, &id)), "{err}");
    assert!(s.ledger().is_quarantined(&id).expect("read"));
    assert!(
        !s.exists(&format!("/containers/{}/json", s.names(&id).sandbox)),
        "nothing was created"
    );
}

#[tokio::test]
async fn a_storage_error_fails_closed_and_is_returned() {
    let s = LcStack::new(false);
    let blocker = s.state_dir().join("a-file");
    std::fs::write(&blocker, b"not a directory").expect("write");
    let mut lc = s.through_proxy(Mode::Open).await;
    lc.ledger = lifecycle::ledger::Ledger::new(&blocker, &s.prefix);
    lc.ports = lifecycle::ports::Ports::new(&blocker);
    s.fake().clear_requests();
    let err = lc
        .create("user-1", "storage")
        .await
        .expect_err("storage error");
    assert!(
        matches!(
            err,
            OpError::Ports(_) | OpError::Ledger(_) | OpError::Lock(_)
        ),
        "{err}"
    );
    assert!(
        !s.asked().iter().any(|l| l.starts_with("POST")),
        "nothing created: {:?}",
        s.asked()
    );
    let id = s.id("storage");
    assert_eq!(
        lc.ledger
            .mark(&id, "unknown")
            .map_err(|e| (e.path, e.source.kind())),
        Err((
            lc.ledger.dir().join(lifecycle::naming::k(&id)),
            std::io::ErrorKind::NotADirectory
        )),
        "a record that cannot be written is an error"
    );
}

/// The sidecar, like the sandbox, is stopped and removed by the ID an inspect of its exact name
/// answered (docs/architecture.md, "lifecycle" "pinned"), never by its name.
#[tokio::test]
async fn the_sidecar_is_stopped_and_removed_by_its_inspected_id() {
    let s = LcStack::new(false);
    let id = s.id("sidecarid");
    let names = s.names(&id);
    let sidecar = s.make(&names.sidecar, json!({}));
    s.make_network(&names.network);
    s.ledger().mark(&id, "unknown").expect("mark");
    let lc = s.raw_engine(Mode::Restricted).await;
    s.fake().clear_requests();
    let done = lc
        .complete_absent_teardown(&id)
        .await
        .expect("strict cleanup on a raw engine");
    assert!(done.strict);
    assert!(!s.exists(&format!("/containers/{}/json", names.sidecar)));
    let asked = s.asked();
    let changes: Vec<&String> = asked
        .iter()
        .filter(|l| l.starts_with("POST /") || l.starts_with("DELETE /"))
        .filter(|l| l.contains("/containers/"))
        .collect();
    assert!(
        changes
            .iter()
            .any(|l| l.contains(&format!("/containers/{sidecar}/stop"))),
        "{asked:?}"
    );
    assert!(
        changes
            .iter()
            .any(|l| l.starts_with("DELETE") && l.contains(&format!("/containers/{sidecar}"))),
        "{asked:?}"
    );
    assert!(
        changes.iter().all(|l| !l.contains(&names.sidecar)),
        "never by name: {asked:?}"
    );
    assert!(
        asked
            .iter()
            .any(|l| l.starts_with("GET")
                && l.contains(&format!("/containers/{}/json", names.sidecar))),
        "decided on an inspect: {asked:?}"
    );
}

/// The undo of a failed restricted create removes the sidecar by the ID its create returned.
#[tokio::test]
async fn a_failed_restricted_create_undoes_its_sidecar_by_id() {
    let s = LcStack::new(false);
    let id = s.id("undo-sidecar");
    let names = s.names(&id);
    // The first start is the sidecar's (it starts before the sandbox is created).
    s.fake().inject(FaultRule {
        times: Some(1),
        ..FaultRule::new(Some("POST"), "/start", Fault::Status500)
    });
    let lc = s.raw_engine(Mode::Restricted).await;
    s.fake().clear_requests();
    lc.create("user-1", "undo-sidecar")
        .await
        .expect_err("the sidecar start fails");
    assert!(!s.exists(&format!("/containers/{}/json", names.sidecar)));
    let asked = s.asked();
    let sidecar = asked
        .iter()
        .position(|l| l.contains(&format!("name={}", names.sidecar)))
        .expect("the sidecar was created");
    let changes: Vec<&String> = asked[sidecar + 1..]
        .iter()
        .filter(|l| l.contains("/containers/") && !l.starts_with("GET"))
        .collect();
    assert!(
        changes.iter().any(|l| l.ends_with("/stop?t=1")),
        "{asked:?}"
    );
    assert!(
        changes.iter().all(|l| !l.contains(&names.sidecar)),
        "connected, started, stopped and removed by ID: {asked:?}"
    );
}
