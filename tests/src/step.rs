//! Named steps of a long scenario test. `step("name", || …)` runs one step: it announces
//! `-- step: name` (captured by libtest and printed with a failing test's output, so the log
//! reads as the scenario) and, when the step panics, panics again with the step's name in front
//! of the message, so a failure says which part of the scenario broke. `step_async` is the same
//! for an `async` step. The steps' assertions are the test's own; nothing here judges anything.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs step `name` of a scenario; returns what it returns.
pub fn step<R>(name: &str, f: impl FnOnce() -> R) -> R {
    eprintln!("-- step: {name}");
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => panic!("step {name:?} failed: {}", message(&*payload)),
    }
}

/// `step` for an `async` step.
pub async fn step_async<F: Future>(name: &str, fut: F) -> F::Output {
    eprintln!("-- step: {name}");
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(
        |cx| match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(payload) => panic!("step {name:?} failed: {}", message(&*payload)),
        },
    )
    .await
}

/// A panic's message: the `&str` or `String` `panic!` was given.
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(a panic without a message)".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_step_names_itself_and_a_passing_one_returns_its_value() {
        assert_eq!(step("passes", || 7), 7);
        let failed = catch_unwind(|| step("breaks", || panic!("boom {}", 1)));
        let payload = failed.expect_err("the step's panic goes on");
        assert_eq!(message(&*payload), r#"step "breaks" failed: boom 1"#);
    }

    #[test]
    fn a_failing_async_step_names_itself() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let failed = catch_unwind(AssertUnwindSafe(|| {
            rt.block_on(step_async("breaks", async { panic!("boom") }))
        }));
        let payload = failed.expect_err("the step's panic goes on");
        assert_eq!(message(&*payload), r#"step "breaks" failed: boom"#);
        assert_eq!(rt.block_on(step_async("passes", async { 7 })), 7);
    }
}
