//! Skipping a test, the one way: a test that cannot run here (no engine, no `redis-server`, no
//! docker-py, …) says so on a `NOTICE:` line that the test runner lets through, and under
//! `CI=true` it fails instead, since `.ci/run` installs everything the suite needs and a skip
//! there would be a test that asserts nothing.

use std::io::Write;

/// Whether this run is CI's (`CI=true`), where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skips (part of) `test` because of `why`; `how` says how to get what is missing. Prints
/// `NOTICE: {test}: skipped, {why} ({how})`, or panics with the same words under `CI=true`.
/// The caller then returns (or leaves out the part) without asserting.
pub fn skip(test: &str, why: &str, how: &str) {
    if in_ci() {
        panic!("CI=true but {test} would be skipped: {why} ({how}); CI must run it");
    }
    // Written to the stderr handle, not with eprintln!: libtest captures eprintln! and shows it
    // only for a failing test, and a skipped test passes.
    let _ = writeln!(std::io::stderr(), "NOTICE: {test}: skipped, {why} ({how})");
}
