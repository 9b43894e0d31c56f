//! Unit tests of `config`.
use super::*;

/// Case 1 of issue 14: `RULE:PORT,PORT` is one rule; flags repeat; env lists split on
/// whitespace only.
#[test]
fn lists_never_split_on_commas() {
    let a = Args::load_from([
        "netproxy",
        "--deny",
        "secret.allowed.test:80,8080",
        "--allow",
        "a.test",
        "--allow",
        "[2600::1]",
    ])
    .expect("flags");
    assert_eq!(a.deny, ["secret.allowed.test:80,8080"]);
    assert_eq!(a.allow, ["a.test", "[2600::1]"]);
    let p = a.policy().expect("policy");
    assert_eq!(p.deny.len(), 1);
    let host = crate::target::canonical_host("secret.allowed.test").expect("host");
    assert!(p.deny[0].matches(&host, 8080) && p.deny[0].matches(&host, 80));
    let stray = crate::target::canonical_host("0.0.31.144").expect("host");
    assert!(!p
        .deny
        .iter()
        .chain(&p.allow)
        .any(|r| r.matches(&stray, 443)));
}

/// A declared translator prefix reaches the decision: the IPv4 a synthesized address
/// carries is judged, and a prefix RFC 6052 does not define is refused at start-up.
#[test]
fn nat64_prefixes_are_judged_and_checked() {
    use crate::addr::AddrRefusal;
    use crate::special::Special;
    let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("ip");
    let plain = Args::load_from(["netproxy"]).expect("flags");
    let plain = plain.policy().expect("policy");
    let flagged = Args::load_from(["netproxy", "--nat64-prefix", "2600:64::/96"])
        .expect("flags")
        .policy()
        .expect("policy");
    let metadata = [ip("2600:64::a9fe:a9fe")];
    assert_eq!(plain.vet(&[], &metadata, 443), Ok(metadata.to_vec()));
    assert_eq!(
        flagged.vet(&[], &metadata, 443),
        Err(AddrRefusal::Special(Special::LinkLocal))
    );
    let public = [ip("2600:64::808:808")];
    assert_eq!(flagged.vet(&[], &public, 443), Ok(public.to_vec()));
    let bad = Args::load_from(["netproxy", "--nat64-prefix", "2600:64::/80"]).expect("flags");
    assert_eq!(
        bad.policy().map(|_| ()).map_err(|e| e.to_string()),
        Err(
            "--nat64-prefix \"2600:64::/80\": a NAT64 prefix is /32, /40, /48, /56, /64 \
             or /96 (RFC 6052)"
                .to_owned()
        )
    );
}

/// Issue 38, finding 7: only a JSON object is a policy file; an array (which serde would
/// read field by field) and every other shape are refused with a line saying so.
#[test]
fn a_policy_file_is_an_object_or_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("policy.json");
    // (allow rules, deny rules) read, or words of the refusal.
    type Want = Result<(usize, usize), &'static str>;
    let cases: &[(&str, Want)] = &[
        (r#"{"allow":["a.test"],"deny":["b.test"]}"#, Ok((1, 1))),
        ("{}", Ok((0, 0))),
        (
            r#"[["*.allowed.test","evil.test"],[]]"#,
            Err("not an array"),
        ),
        (r#""a.test""#, Err("not a string")),
        ("7", Err("not a number")),
        ("true", Err("not a boolean")),
        ("null", Err("not null")),
        (
            r#"{"allow":["a.test"],"extra":1}"#,
            Err("unknown field `extra`"),
        ),
    ];
    for (text, want) in cases {
        std::fs::write(&path, text).expect("write");
        let a = Args::load_from([
            std::ffi::OsStr::new("netproxy"),
            std::ffi::OsStr::new("--policy"),
            path.as_os_str(),
        ])
        .expect("flags");
        match (a.policy(), want) {
            (Ok(p), Ok(n)) => assert_eq!((p.allow.len(), p.deny.len()), *n, "{text}"),
            (Err(e), Err(why)) => {
                let e = e.to_string();
                assert!(
                    e.starts_with("policy file ") && e.contains(why),
                    "{text}: {e}"
                );
                assert!(!e.contains('\n'), "one line: {e}");
            }
            (got, _) => panic!("{text}: {got:?}, wanted {want:?}"),
        }
    }
}

/// Issue 38, finding 8: `--own-cidr`/`--allow-cidr` (and a file's `allow_cidr`) in mapped
/// form are read as IPv4, so they match the folded addresses; a network straddling mapped
/// space is refused at start-up.
#[test]
fn mapped_form_networks_are_normalised_or_refused() {
    use crate::addr::AddrRefusal;
    let ip = |s: &str| s.parse::<std::net::IpAddr>().expect("ip");
    let p = Args::load_from([
        "netproxy",
        "--own-cidr",
        "::ffff:11.0.0.0/120",
        "--allow-cidr",
        "::ffff:10.0.0.0/104",
    ])
    .expect("flags")
    .policy()
    .expect("policy");
    assert_eq!(
        p.own_networks,
        vec!["11.0.0.0/24".parse::<IpNet>().expect("net")]
    );
    assert_eq!(
        p.allow_cidrs,
        vec!["10.0.0.0/8".parse::<IpNet>().expect("net")]
    );
    assert_eq!(
        p.vet(&[], &[ip("11.0.0.7")], 443),
        Err(AddrRefusal::OwnNetwork)
    );
    assert_eq!(
        p.vet(&[], &[ip("::ffff:11.0.0.7")], 443),
        Err(AddrRefusal::OwnNetwork)
    );
    assert_eq!(p.vet(&[], &[ip("10.1.2.3")], 443), Ok(vec![ip("10.1.2.3")]));
    let bad = Args::load_from(["netproxy", "--own-cidr", "::ffff:0:0/95"]).expect("flags");
    let e = bad.policy().map(|_| ()).map_err(|e| e.to_string());
    assert!(
        e.as_ref().is_err_and(
            |e| e.starts_with("--own-cidr \"::ffff:0:0/95\": reaches into IPv4-mapped space")
        ),
        "{e:?}"
    );
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("policy.json");
    std::fs::write(&path, r#"{"allow_cidr":["::ffff:127.0.0.1/128"]}"#).expect("write");
    let a = Args::load_from([
        std::ffi::OsStr::new("netproxy"),
        std::ffi::OsStr::new("--policy"),
        path.as_os_str(),
    ])
    .expect("flags");
    assert_eq!(
        a.policy().expect("policy").allow_cidrs,
        vec!["127.0.0.1/32".parse::<IpNet>().expect("net")]
    );
}

/// Issue 38: every flag says what it does in `--help`.
#[test]
fn every_flag_has_help() {
    let cmd = Args::command();
    let bare: Vec<&str> = cmd
        .get_arguments()
        .filter(|a| a.get_help().is_none() && a.get_long_help().is_none())
        .map(|a| a.get_id().as_str())
        .collect();
    assert!(bare.is_empty(), "no help: {bare:?}");
    assert!(cmd.get_arguments().count() >= 21, "the flags are all there");
}
