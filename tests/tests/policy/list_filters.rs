//! What one list request may make the proxy and the engine do with its filters (issue 50,
//! findings 2 and 4): filters the proxy cannot read as dockerd's (`{"label":null}`, which Go's
//! decoder takes, and the engine would then list the whole host) and more than 16 `name`
//! values are refused with a 400 before anything reaches the engine; the values a list may
//! carry are compiled and matched off the runtime's worker, so a `/_ping` is answered while a
//! heavy list is still being cut.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use sockproxy_tests::engine::{each_engine, Fakes};
use sockproxy_tests::raw;
use sockproxy_tests::recorder::Recorder;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::offline::assert_refusal;

/// A bounded wait for another thread's answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(60);

const UNREADABLE: &str =
    "sockproxy: bad request: filters must be a JSON object of string arrays or of objects of booleans";

/// `filters` as a query value.
fn encoded(filters: &str) -> String {
    form_urlencoded::byte_serialize(filters.as_bytes()).collect()
}

/// `{"name":[...]}` with `n` values.
fn names(n: usize) -> String {
    let v: Vec<String> = (0..n).map(|i| format!("\"v{i}\"")).collect();
    format!(r#"{{"name":[{}]}}"#, v.join(","))
}

#[test]
fn filters_the_proxy_cannot_read_are_refused_before_the_engine() {
    let up = Recorder::fixed("[]");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    for (path, filters) in [
        ("/v1.41/containers/json", r#"{"label":null}"#),
        ("/v1.41/containers/json", r#"{"name":null}"#),
        (
            "/v1.41/containers/json",
            r#"{"status":["exited"],"label":null}"#,
        ),
        ("/v1.41/containers/json", "[]"),
        ("/v1.41/networks", r#"{"name":null}"#),
        ("/v1.41/volumes", r#"{"label":null}"#),
    ] {
        let r =
            raw::get(p.socket(), &format!("{path}?filters={}", encoded(filters))).expect("answer");
        assert_refusal(&r, 400, UNREADABLE);
    }
    for path in [
        "/v1.41/containers/json",
        "/v1.41/networks",
        "/v1.41/volumes",
    ] {
        let r = raw::get(
            p.socket(),
            &format!("{path}?filters={}", encoded(&names(17))),
        )
        .expect("answer");
        assert_refusal(
            &r,
            400,
            "sockproxy: bad request: filters: 17 name values; at most 16",
        );
    }
    assert_eq!(up.requests(), Vec::<String>::new(), "nothing forwarded");
    // Sixteen are a list as before.
    let r = raw::get(
        p.socket(),
        &format!("/v1.41/containers/json?filters={}", encoded(&names(16))),
    )
    .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(up.requests().len(), 1);
}

/// On the engines too: what Go's decoder would take as "no filter" is a 400 from the proxy,
/// where the engine itself lists every container (directly, the same filter answers 200).
#[test]
fn a_null_filter_lists_nothing_on_the_engines() {
    each_engine(
        "a_null_filter_lists_nothing_on_the_engines",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let p = StackProxy::start(&e.socket, &prefix, false);
            step("refused through the proxy", || {
                for filters in [r#"{"label":null}"#, r#"{"name":null}"#] {
                    let target =
                        format!("/v1.41/containers/json?all=1&filters={}", encoded(filters));
                    let r = raw::get(p.socket(), &target).expect("answer");
                    assert_refusal(&r, 400, UNREADABLE);
                    if !e.is_fake() {
                        let direct = raw::get(&e.socket, &target).expect("answer");
                        assert_eq!(direct.status, 200, "the engine takes it: {}", direct.text());
                    }
                }
            });
        },
    );
}

/// Sixteen values, cut against a list of 4,000 of the stack's containers with long names: the work runs on the blocking pool, so a `/_ping` sent once the engine has
/// answered the list is answered before the list is (an ordering check: the list takes
/// seconds of matching, a ping none). One runtime worker, as the binary runs by default.
#[test]
fn a_heavy_list_does_not_hold_the_other_clients() {
    let entries: Vec<String> = (0..4_000)
        .map(|i| {
            format!(
                r#"{{"Id":"{i:064x}","Names":["/deer-flow-sandbox-{}"]}}"#,
                "x".repeat(1_500) + &i.to_string()
            )
        })
        .collect();
    let body = format!("[{}]", entries.join(","));
    let answered = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&answered);
    let up = Recorder::start(move |_, uri| {
        if uri.contains("/containers/json") {
            seen.store(true, Ordering::SeqCst);
            (200, body.clone())
        } else {
            (200, "{}".into())
        }
    });
    let p = StackProxy::start_with(up.socket(), "deer-flow-", false, |c| c.worker_threads = 1);
    // Each value scans every name to its end (no letter follows a digit in them, and there is
    // no literal to skip ahead by): linear, and a second or more of matching for 16 values
    // over 4,000 names of 1,500 bytes in a test build.
    let values: Vec<String> = (0..16)
        .map(|i| format!("\"[0-9][a-w]{{{}}}\"", i + 1))
        .collect();
    let filters = format!(r#"{{"name":[{}]}}"#, values.join(","));
    let target = format!("/v1.41/containers/json?all=1&filters={}", encoded(&filters));
    let list_done = Arc::new(AtomicBool::new(false));
    let (list_tx, list_rx) = mpsc::channel();
    {
        let (sock, done) = (p.socket().to_owned(), Arc::clone(&list_done));
        std::thread::spawn(move || {
            let r = raw::get(&sock, &target).map(|r| (r.status, r.text()));
            done.store(true, Ordering::SeqCst);
            let _ = list_tx.send(r);
        });
    }
    let asked = (0..6_000).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        answered.load(Ordering::SeqCst)
    });
    assert!(asked, "the engine was asked for the list");
    // Time for the proxy to read the answer and begin cutting it (seconds of work).
    std::thread::sleep(Duration::from_millis(500));
    let ping = raw::get(p.socket(), "/_ping").expect("ping answer");
    assert_eq!(ping.status, 200);
    assert!(
        !list_done.load(Ordering::SeqCst),
        "the ping was answered while the list was still being cut"
    );
    let (status, text) = list_rx
        .recv_timeout(ANSWER_WITHIN)
        .expect("the list is answered")
        .expect("list answer");
    assert_eq!(status, 200, "{text}");
}
