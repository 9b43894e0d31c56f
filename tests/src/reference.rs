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
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if !headings.contains(&a.get_help_heading()) {
            headings.push(a.get_help_heading());
        }
    }
    for heading in headings {
        let args: Vec<&clap::Arg> = cmd
            .get_arguments()
            .filter(|a| a.get_help_heading() == heading)
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
            // A hidden flag (an old name kept for a release) is left out, as `--help` leaves it.
            .filter(|a| !a.is_hide_set())
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
    // `help` repeats what each command's own section says.
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
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
        .map_or_else(|| "—".to_owned(), |e| format!("`{}`", e.to_string_lossy()))
}

/// The flag's default, never blank: clap's own, else the `[default: …]` its help states, else
/// what leaving it out means by its kind (a switch is off; a flag that may repeat, or an
/// optional value with no stated default, is none).
fn default(a: &clap::Arg) -> String {
    let values: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !a.get_action().takes_values() {
        return "off".to_owned();
    }
    if !values.is_empty() {
        return format!("`{}`", values.join(","));
    }
    if let Some((_, stated)) = stated_default(&raw_help(a)) {
        return stated.replace('|', "\\|");
    }
    if a.is_required_set() {
        return "required".to_owned();
    }
    "none".to_owned()
}

/// The help text as written, on one line.
fn raw_help(a: &clap::Arg) -> String {
    a.get_long_help()
        .or_else(|| a.get_help())
        .map(ToString::to_string)
        .unwrap_or_default()
        .replace('\n', " ")
}

/// A help text's trailing `[default: X]`: (the text before it, X).
fn stated_default(text: &str) -> Option<(&str, &str)> {
    let trimmed = text.trim_end();
    let body = trimmed.strip_suffix(']')?;
    let at = body.rfind("[default: ")?;
    Some((body[..at].trim_end(), &body[at + "[default: ".len()..]))
}

fn help(a: &clap::Arg) -> String {
    let raw = raw_help(a);
    // A stated default is in its own column.
    let text = stated_default(&raw).map_or(raw.as_str(), |(before, _)| before);
    let mut text = text.replace('|', "\\|");
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
