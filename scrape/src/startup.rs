//! How every program of the toolkit reports a start-up error (issue 40): one line, with no
//! `Caused by:` block and no backtrace. `clap_line` is a clap refusal on one line; `error_line`
//! an error and its causes on one line.

/// A clap refusal as one line: its first paragraph without clap's `error: `, the lines of it
/// joined (a list of missing flags stays), and any `tip:` kept; the usage and "For more
/// information" lines are left out. `None` for what clap prints itself (`clap::Error::exit`):
/// `--help`, `--version`, and the help a bare command with a subcommand to choose gets.
pub fn clap_line(e: &clap::Error) -> Option<String> {
    if !e.use_stderr()
        || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        return None;
    }
    // Display of the rendered text is plain: no colour codes, whatever the terminal.
    let text = e.render().to_string();
    let mut parts: Vec<String> = Vec::new();
    for (i, paragraph) in text.split("\n\n").enumerate() {
        let joined = paragraph
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        if i == 0 {
            parts.push(joined.strip_prefix("error: ").unwrap_or(&joined).to_owned());
        } else if joined.starts_with("tip: ") {
            parts.push(joined);
        }
    }
    Some(parts.join("; "))
}

/// An error and its causes (`source()`, which walks anyhow's contexts too) joined with ": ",
/// leaving out a cause whose text the line already holds (an error that prints its source would
/// otherwise say it twice).
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut next = Some(e);
    while let Some(cause) = next {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        next = cause.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot listen on /x: {0}")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_cause_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use");
        assert_eq!(
            error_line(&Outer(io)),
            "cannot listen on /x: Address already in use"
        );
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let wrapped = std::io::Error::other(Outer(inner));
        assert_eq!(error_line(&wrapped), "cannot listen on /x: gone");
    }
}
