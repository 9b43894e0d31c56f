//! The flag references in `docs/reference/`, generated from the clap definitions (issue 40):
//! `cargo run -p sockproxy-tests --bin reference` writes them, and `tools::reference` fails when
//! the committed files differ from what the code generates. One table per `--help` heading, with
//! each flag's environment variable and default (what `clap-markdown` leaves out, and what an
//! operator writing a unit or compose file needs).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::CommandFactory;

/// (program, the page's text) for each program.
pub fn pages() -> Vec<(&'static str, String)> {
    vec![
        ("sockproxy", page(sockproxy::config::Args::command())),
        ("netproxy", page(netproxy::config::Args::command())),
        ("lifecycle", page(lifecycle::cli::Args::command())),
    ]
}

/// Where `program`'s page is committed.
pub fn path(program: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("docs/reference")
        .join(format!("{program}.md"))
}

fn page(mut cmd: clap::Command) -> String {
    cmd.build();
    let name = cmd.get_name().to_owned();
    let mut out = format!(
        "<!-- Generated from {name}'s flag definitions by `cargo run -p sockproxy-tests --bin reference`; do not edit. -->\n\n# `{name}`\n"
    );
    section(&mut out, &cmd, &name);
    out
}

/// One command's usage and flag tables, then its subcommands'.
fn section(out: &mut String, cmd: &clap::Command, path: &str) {
    if let Some(about) = cmd.get_about() {
        let _ = write!(out, "\n{about}\n");
    }
    let usage = cmd.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ");
    let _ = write!(out, "\n```text\n{usage}\n```\n");
    let mut headings: Vec<Option<&str>> = Vec::new();
    for a in cmd.get_arguments() {
        if !headings.contains(&a.get_help_heading()) {
            headings.push(a.get_help_heading());
        }
    }
    for heading in headings {
        let args: Vec<&clap::Arg> = cmd
            .get_arguments()
            .filter(|a| a.get_help_heading() == heading)
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
            .collect();
        if args.is_empty() {
            continue;
        }
        let _ = write!(
            out,
            "\n### {}\n\n| Flag | Environment | Default | What it sets |\n|---|---|---|---|\n",
            heading.unwrap_or("Options")
        );
        for a in args {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                flag(a),
                env(a),
                default(a),
                help(a)
            );
        }
    }
    for sub in cmd.get_subcommands() {
        let path = format!("{path} {}", sub.get_name());
        let _ = write!(out, "\n## `{path}`\n");
        section(out, sub, &path);
    }
}

fn flag(a: &clap::Arg) -> String {
    let value = a
        .get_value_names()
        .and_then(|v| v.first())
        .filter(|_| a.get_action().takes_values())
        .map(|v| format!(" <{v}>"))
        .unwrap_or_default();
    match (a.get_long(), a.get_short()) {
        (Some(l), _) => format!("`--{l}{value}`"),
        (None, Some(s)) => format!("`-{s}{value}`"),
        (None, None) => format!("`<{}>`", a.get_id()),
    }
}

fn env(a: &clap::Arg) -> String {
    a.get_env()
        .map(|e| format!("`{}`", e.to_string_lossy()))
        .unwrap_or_default()
}

fn default(a: &clap::Arg) -> String {
    let values: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if values.is_empty() || !a.get_action().takes_values() {
        String::new()
    } else {
        format!("`{}`", values.join(","))
    }
}

fn help(a: &clap::Arg) -> String {
    let mut text = a
        .get_long_help()
        .or_else(|| a.get_help())
        .map(ToString::to_string)
        .unwrap_or_default()
        .replace('\n', " ")
        .replace('|', "\\|");
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if !values.is_empty() && a.get_action().takes_values() {
        let _ = write!(text, " (one of: {})", values.join(", "));
    }
    text
}
