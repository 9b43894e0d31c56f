//! Start-up as every binary of the toolkit does it: the flags validated into a `Config` once,
//! and each start-up error printed once, as one line (`netproxy: --allow "a..b.test":
//! malformed host`), never with a backtrace; exit 2 for bad configuration (a flag clap or
//! `Config` refuses, the policy file), 1 for a failure at run time (the listener, the
//! descriptor limit, /etc/resolv.conf).

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::{Args, LogFormat, PolicyError};
use crate::forward::Timeouts;
use crate::policy::Policy;
use crate::server::Limits;

/// Exit status for bad configuration.
pub const EXIT_CONFIG: u8 = 2;
/// Exit status for a failure at run time.
pub const EXIT_RUNTIME: u8 = 1;

/// The flags, validated: what `main` runs with.
#[derive(Debug)]
pub struct Config {
    pub listen: SocketAddr,
    /// The inbound relays (`--relay`), each on a listener of its own.
    pub relays: Vec<crate::relay::Relay>,
    pub policy: Policy,
    pub log_format: LogFormat,
    pub dns_timeout: Duration,
    pub connect_timeout: Duration,
    pub tunnel_idle: Duration,
    pub timeouts: Timeouts,
    pub limits: Limits,
    /// As the flag says; lowered at start-up to what the descriptor limit leaves
    /// (`fds::dial_cap`).
    pub max_dials: usize,
    pub max_dials_per_client: usize,
    /// The flags themselves: SIGHUP validates the policy from them again (the file's text may
    /// have changed).
    pub args: Args,
}

impl Config {
    /// The flags and the policy file, checked whole: a refusal is bad configuration.
    pub fn from_args(args: Args) -> Result<Self, PolicyError> {
        Ok(Self {
            listen: args.listen,
            relays: args.relays()?,
            policy: args.policy()?,
            log_format: args.log_format,
            dns_timeout: Duration::from_millis(args.dns_timeout_ms),
            connect_timeout: Duration::from_millis(args.connect_timeout_ms),
            tunnel_idle: Duration::from_millis(args.tunnel_idle_timeout_ms),
            timeouts: args.timeouts(),
            limits: args.limits(),
            max_dials: args.max_dials,
            max_dials_per_client: args.max_dials_per_client,
            args,
        })
    }
}

pub use scrape::startup::clap_line;

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(argv: &[&str]) -> String {
        let e = Args::load_from(std::iter::once("netproxy").chain(argv.iter().copied()))
            .expect_err("refused");
        clap_line(&e).expect("an error, not help")
    }

    #[test]
    fn a_clap_refusal_is_one_line() {
        assert_eq!(
            refused(&["--listen", "nonsense"]),
            "invalid value 'nonsense' for '--listen <LISTEN>': invalid socket address syntax"
        );
        assert_eq!(
            refused(&["--listen"]),
            "a value is required for '--listen <LISTEN>' but none was supplied"
        );
        let unknown = refused(&["--alow", "a.test"]);
        assert!(
            unknown.starts_with("unexpected argument '--alow' found; tip: ")
                && unknown.contains("'--allow'"),
            "{unknown}"
        );
        for asked in [&["--help"][..], &["--version"], &["-h"]] {
            let e = Args::load_from(std::iter::once("netproxy").chain(asked.iter().copied()))
                .expect_err("clap's to print");
            assert_eq!(clap_line(&e), None, "{asked:?}");
        }
        for line in [
            refused(&["--listen", "nonsense"]),
            refused(&["--bogus"]),
            refused(&["--max-dials", "-1"]),
        ] {
            assert!(!line.contains('\n') && !line.contains("Usage"), "{line}");
        }
    }

    /// Each refusal names where its value came from, once.
    #[test]
    fn a_config_refusal_names_its_source_once() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("policy.json");
        std::fs::write(
            &file,
            r#"{"allow":["ok.test"],"deny":["x..y.test"],"allow_cidr":[]}"#,
        )
        .expect("write");
        let f = file.to_str().expect("utf-8 path");
        let cases: [(&[&str], String); 8] = [
            (
                &["--relay", "0.0.0.0:8080=sandbox"],
                r#"--relay "0.0.0.0:8080=sandbox": target "sandbox": missing port"#.into(),
            ),
            (
                &["--relay", "0.0.0.0:8080=a:80", "--relay", "0.0.0.0:8080=b:80"],
                r#"--relay "0.0.0.0:8080=b:80": another relay listens on 0.0.0.0:8080"#.into(),
            ),
            (
                &["--allow", "a..b.test"],
                r#"--allow "a..b.test": malformed host"#.into(),
            ),
            (
                &["--deny", "c.test:0"],
                r#"--deny "c.test:0": ports must be 1-65535"#.into(),
            ),
            (
                &["--allow-cidr", "10.0.0.0/33"],
                r#"--allow-cidr "10.0.0.0/33": not a CIDR network"#.into(),
            ),
            (
                &["--nat64-prefix", "2600:64::/80"],
                r#"--nat64-prefix "2600:64::/80": a NAT64 prefix is /32, /40, /48, /56, /64 or /96 (RFC 6052)"#.into(),
            ),
            (
                &["--policy", f],
                format!(r#"policy file {f}: deny "x..y.test": malformed host"#),
            ),
            (
                &["--policy", "/nonexistent/policy.json"],
                "policy file /nonexistent/policy.json: No such file or directory (os error 2)"
                    .into(),
            ),
        ];
        for (argv, want) in cases {
            let args = Args::load_from(std::iter::once("netproxy").chain(argv.iter().copied()))
                .expect("clap takes it");
            let got = Config::from_args(args)
                .map(|_| ())
                .map_err(|e| e.to_string());
            assert_eq!(got, Err(want), "{argv:?}");
        }
        std::fs::write(&file, r#"{"allow_cidr":["::ffff:0:0/95"]}"#).expect("write");
        let args = Args::load_from(["netproxy", "--policy", f]).expect("flags");
        let e = Config::from_args(args).map(|_| ()).expect_err("refused");
        assert!(
            e.to_string().starts_with(&format!(
                r#"policy file {f}: allow_cidr "::ffff:0:0/95": reaches into"#
            )),
            "{e}"
        );
    }
}
