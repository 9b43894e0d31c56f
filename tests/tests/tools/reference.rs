//! `docs/reference/` is what the flag definitions generate (issue 40): a flag added, renamed or
//! re-described without regenerating fails here, with the command that regenerates. And every
//! flag of every program says what it does.

use clap::CommandFactory;
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

/// Every flag, subcommands' included, has help text (`--help` would list it bare).
#[test]
fn every_flag_has_help_text() {
    fn bare(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            if !matches!(id, "help" | "version") && a.get_help().is_none() {
                out.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            bare(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut missing = Vec::new();
    for (name, mut cmd) in [
        ("sockproxy", sockproxy::config::Args::command()),
        ("netproxy", netproxy::config::Args::command()),
        ("lifecycle", lifecycle::cli::Args::command()),
    ] {
        cmd.build();
        bare(&cmd, name, &mut missing);
    }
    assert!(missing.is_empty(), "flags with no help text: {missing:?}");
}
