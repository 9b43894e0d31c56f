//! Issue 40: every flag, argument and subcommand of every binary says what it does in `--help`
//! (clap's own `--help` and `--version` aside, which always do).

use clap::CommandFactory;

/// The ids of `cmd`'s arguments and subcommands, at every depth, that have no help text.
fn bare(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for a in cmd.get_arguments() {
        if a.get_help().is_none() && a.get_long_help().is_none() {
            out.push(format!("{path} {}", a.get_id()));
        }
    }
    for sub in cmd.get_subcommands() {
        let name = format!("{path} {}", sub.get_name());
        if sub.get_about().is_none() && sub.get_long_about().is_none() {
            out.push(name.clone());
        }
        bare(sub, &name, out);
    }
}

#[test]
fn every_flag_of_every_binary_has_help() {
    let binaries = [
        ("sockproxy", sockproxy::config::Args::command()),
        ("netproxy", netproxy::config::Args::command()),
        ("lifecycle", lifecycle::cli::Args::command()),
    ];
    for (name, cmd) in binaries {
        let cmd = cmd.name(name);
        assert!(
            cmd.get_arguments().count() >= 10,
            "{name}: its flags are seen"
        );
        let mut missing = Vec::new();
        bare(&cmd, name, &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }
    // The subcommands' flags are seen too (`lifecycle serve --listen`).
    let lc = lifecycle::cli::Args::command();
    let serve = lc.find_subcommand("serve").expect("serve");
    assert!(serve.get_arguments().any(|a| a.get_id() == "listen"));
}
