//! `docs/reference/` is what the flag definitions generate (issue 40): a flag added, renamed or
//! re-described without regenerating fails here, with the command that regenerates (that every
//! flag has a text at all is `help`'s test).

use sockproxy_tests::reference::{pages, path};

#[test]
fn the_committed_references_are_what_the_flags_generate() {
    let mut stale = Vec::new();
    for (program, text) in pages() {
        let committed = std::fs::read_to_string(path(program)).unwrap_or_default();
        if committed != text {
            stale.push(program);
        }
    }
    assert!(
        stale.is_empty(),
        "docs/reference/ is stale for {stale:?}: run `cargo run -p sockproxy-tests --bin reference` and commit the result"
    );
}
