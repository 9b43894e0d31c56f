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

/// Every flag's row says what it is when it is left out (issue 51: 24 of sockproxy's 44 rows had
/// an empty Default cell), and no page repeats its commands under `help`.
#[test]
fn every_row_has_a_default_and_no_help_sections() {
    for (program, text) in pages() {
        for row in text.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split(" | ").collect();
            assert!(
                cells.len() >= 4 && cells.iter().all(|c| !c.trim().is_empty()),
                "{program}: a blank cell in {row}"
            );
        }
        let help = text
            .lines()
            .find(|l| l.starts_with("## `") && l.split(' ').any(|w| w.trim_matches('`') == "help"));
        assert_eq!(help, None, "{program}: a help section");
    }
}
