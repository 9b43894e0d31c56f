//! Unit tests of `serve::cmd`.
use clap::Parser;

use super::*;

#[derive(Debug, Parser)]
struct Wrap {
    #[command(flatten)]
    serve: ServeArgs,
}

fn parse(extra: &[&str]) -> Result<ServeArgs, clap::Error> {
    let argv = ["serve", "--listen", "/nonexistent/serve.sock"];
    Wrap::try_parse_from(argv.iter().chain(extra)).map(|w| w.serve)
}

fn limits_of(extra: &[&str]) -> Result<Limits, String> {
    let a = parse(extra).map_err(|e| e.to_string())?;
    limits(&a).map_err(|e| e.to_string())
}

#[test]
fn limit_flags_default_and_parse() {
    assert_eq!(limits_of(&[]), Ok(Limits::default()));
    assert_eq!(
        limits_of(&[
            "--header-timeout",
            "1.5",
            "--write-timeout",
            "0.5",
            "--max-connections",
            "2"
        ]),
        Ok(Limits {
            header_timeout: Duration::from_millis(1500),
            write_timeout: Duration::from_millis(500),
            max_connections: 2
        })
    );
}

#[test]
fn tick_is_checked_at_start_up() {
    let tick_of = |extra: &[&str]| {
        let a = parse(extra).map_err(|e| e.to_string())?;
        tick(&a).map_err(|e| e.to_string())
    };
    assert_eq!(tick_of(&[]), Ok(Duration::from_secs(10)), "TTL/3");
    assert_eq!(tick_of(&["--tick", "0"]), Ok(Duration::from_millis(50)));
    assert_eq!(tick_of(&["--tick", "2.5"]), Ok(Duration::from_millis(2500)));
    for bad in ["inf", "NaN", "1e300", "3601"] {
        let got = tick_of(&["--tick", bad]);
        assert!(
            got.as_ref().is_err_and(
                |e| e.starts_with("--tick: ") && e.contains("expected seconds up to 3600")
            ),
            "{bad}: {got:?}"
        );
    }
}

#[test]
fn bad_limit_flags_are_refused_with_the_flag_named() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["--header-timeout", "0"],
            "--header-timeout: 0: expected seconds from 0.1 to 3600",
        ),
        (&["--header-timeout=-2"], "--header-timeout: -2: expected"),
        (
            &["--header-timeout", "NaN"],
            "--header-timeout: NaN: expected",
        ),
        (
            &["--header-timeout", "7200"],
            "--header-timeout: 7200: expected",
        ),
        (
            &["--write-timeout", "0"],
            "--write-timeout: 0: expected seconds from 0.1 to 3600",
        ),
        (
            &["--write-timeout", "inf"],
            "--write-timeout: inf: expected",
        ),
        (&["--write-timeout", "later"], "invalid value 'later'"),
        (
            &["--max-connections", "0"],
            "--max-connections: 0: expected at least 1",
        ),
        // Not a number at all: clap refuses it before any check of ours.
        (&["--header-timeout", "soon"], "invalid value 'soon'"),
    ];
    for (flags, want) in cases {
        let got = limits_of(flags).expect_err("refused");
        assert!(got.contains(want), "{flags:?}: {got}");
    }
    let negative = limits_of(&["--max-connections", "-1"]).expect_err("refused");
    assert!(
        negative.contains("unexpected argument '-1'") || negative.contains("invalid value '-1'"),
        "{negative}"
    );
}
