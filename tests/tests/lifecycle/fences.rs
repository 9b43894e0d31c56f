//! A quarantine record of generation `unknown` (written when a container's ID could not be
//! read) fences whatever container is under the sandbox's name: a create never discovers it,
//! a provider never hands it out, and a destroy tears it down and retires the record. On the
//! fake engine and on the real dockerd, each through sockproxy.

use std::time::Duration;

use lifecycle::decide::Mode;
use lifecycle::engine::Engine as Client;
use lifecycle::ops::Lifecycle;
use sockproxy_tests::engine::{each_engine_async, Engine, Fakes};
use sockproxy_tests::lc::settings;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

struct Stack {
    lc: Lifecycle,
    proxy: StackProxy,
    engine: std::path::PathBuf,
    _state: tempfile::TempDir,
}

fn stack(e: &Engine) -> Stack {
    let prefix = unique_prefix();
    let proxy = StackProxy::start(&e.socket, &prefix, false);
    let state = tempfile::tempdir().expect("state");
    let mut s = settings(&prefix, Mode::Open);
    s.image = Some(e.image.clone());
    s.stop_timeout = 1;
    s.removal_wait = Duration::from_secs(30);
    let lc = Lifecycle::new(
        Client::new(&format!("unix://{}", proxy.socket().display())).expect("address"),
        state.path(),
        s,
    );
    Stack {
        lc,
        proxy,
        engine: e.socket.clone(),
        _state: state,
    }
}

fn exists(s: &Stack, container_id: &str) -> bool {
    sockproxy_tests::raw::get(&s.engine, &format!("/containers/{container_id}/json"))
        .is_ok_and(|r| r.status == 200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_record_fences_a_present_container_on_create() {
    each_engine_async(
        "an_unknown_record_fences_a_present_container_on_create",
        Fakes::Debian,
        |e| {
            Box::pin(async move {
                let s = stack(e);
                let first = s.lc.create("user-1", "fenced").await.expect("create");
                let id = first.sandbox_id.clone();
                s.lc.ledger.mark(&id, "unknown").expect("mark");
                let second = s.lc.create("user-1", "fenced").await.expect("replaced");
                assert!(!second.discovered, "a fenced container is never discovered");
                assert_ne!(second.container_id, first.container_id);
                assert!(!exists(&s, &first.container_id), "the fenced one is gone");
                assert!(exists(&s, &second.container_id));
                assert!(!s.lc.ledger.is_quarantined(&id).expect("ledger"), "retired");
                s.lc.destroy(&id).await.expect("clean up");
                drop(s.proxy);
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_record_is_torn_down_with_the_present_container_on_destroy() {
    each_engine_async(
        "an_unknown_record_is_torn_down_with_the_present_container_on_destroy",
        Fakes::Debian,
        |e| {
            Box::pin(async move {
                let s = stack(e);
                let made = s.lc.create("user-1", "gone").await.expect("create");
                let id = made.sandbox_id.clone();
                s.lc.ledger.mark(&id, "unknown").expect("mark");
                assert!(
                    s.lc.ledger.fences(&id, &made.container_id).expect("ledger"),
                    "`unknown` fences the container present"
                );
                let done = s.lc.destroy(&id).await.expect("destroyed");
                assert_eq!(
                    done.container_id.as_deref(),
                    Some(made.container_id.as_str())
                );
                assert!(done.absent_teardown, "the unknown record's teardown ran");
                assert!(!exists(&s, &made.container_id));
                assert!(!s.lc.ledger.is_quarantined(&id).expect("ledger"));
            })
        },
    )
    .await;
}
