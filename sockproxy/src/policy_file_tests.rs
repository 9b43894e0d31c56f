use super::*;
use crate::config::tests::args;
use clap::{CommandFactory, Parser};

#[test]
fn a_printed_policy_reads_back_to_the_same_configuration() {
    let cfg = Config::from_args(
        args(&[
            "--allow-cap",
            "CHOWN",
            "--allow-sysctl",
            "net.ipv4.ping_group_range",
            "--info",
            "deny",
            "--max-shm-size",
            "1024",
            "--min-healthcheck-interval",
            "1500ms",
            "--allow-host-port",
            "80",
            "--max-stop-timeout",
            "30",
            "--max-log-size",
            "10m",
            "--allow-log-opt",
            "json-file:mode",
        ]),
        None,
    )
    .expect("valid");
    let printed = print(&cfg).expect("printed");
    assert!(
        printed.contains("deer-flow-sandbox-*  open: yes"),
        "{printed}"
    );
    assert!(
        printed.contains("deer-flow-sandbox-egress-*  open: no"),
        "{printed}"
    );
    let file = read(&printed).expect("the printed policy is a policy file");
    let again = Config::from_args(over(args(&[]), &printed).expect("merged"), None).expect("valid");
    assert_eq!(settings(&effective(&again)), settings(&file));
    assert_eq!(print(&again), Ok(printed));
}

#[test]
fn flags_add_to_the_file_and_override_its_numbers() {
    let file = "allow-cap = [\"CHOWN\"]\nmax-shm-size = 10\nrestricted = true\n";
    let merged = over(
        args(&["--allow-cap", "FOWNER", "--max-shm-size", "20"]),
        file,
    )
    .expect("valid");
    // An enum setting is read as one: a spelling the flag would refuse is refused, never
    // taken for the default (`info = "Deny"` once meant `stack`, open).
    assert_eq!(
        over(args(&[]), "info = \"deny\"").map(|a| a.info),
        Ok(Some(InfoMode::Deny))
    );
    for bad in ["Deny", "DENY", "off", ""] {
        let got = over(args(&[]), &format!("info = \"{bad}\""));
        assert_eq!(
            got.map(|_| ())
                .map_err(|e| e.lines().last().map(str::to_owned)),
            Err(Some(format!(
                "unknown variant `{bad}`, expected `stack` or `deny`"
            ))),
            "{bad}"
        );
    }
    assert_eq!(merged.allow_cap, ["FOWNER", "CHOWN"]);
    assert_eq!(merged.max_shm_size, Some(20));
    assert!(merged.restricted);
    assert_eq!(
        over(args(&[]), "allow-everything = true").map(|_| ()),
        Err(concat!(
            "TOML parse error at line 1, column 1\n",
            "  |\n",
            "1 | allow-everything = true\n",
            "  | ^^^^^^^^^^^^^^^^\n",
            "unknown field `allow-everything`, expected one of ",
            "`allow-bind-root`, `allow-cap`, `allow-default-bridge`, `allow-host-port`, ",
            "`allow-image`, `allow-log-driver`, `allow-log-opt`, `allow-public-ports`, ",
            "`allow-publish-address`, ",
            "`allow-seccomp-profile`, `allow-seccomp-unconfined`, `allow-sysctl`, ",
            "`body-timeout`, `default-cpus`, `default-memory`, `default-pids-limit`, ",
            "`header-timeout`, `info`, `log-flood-lines`, `log-flood-seconds`, `max-bind-pins`, `max-blkio-weight`, `max-connections`, ",
            "`max-container-cpus`, `max-container-memory`, `max-containers`, ",
            "`max-core-ulimit`, `max-cpu-shares`, `max-healthcheck-retries`, ",
            "`max-json-keys`, `max-list-bytes`, `max-list-bytes-total`, `max-log-files`, ",
            "`max-log-size`, `max-memory`, `max-pids-limit`, `max-port-bindings`, `max-shm-size`, ",
            "`max-stop-timeout`, `min-api-version`, `min-healthcheck-interval`, ",
            "`min-host-port`, `name-cache`, `require-stack-label`, `restricted`\n",
        )
        .into())
    );
}

#[test]
fn a_switch_is_on_if_the_flags_or_the_file_turn_it_on() {
    let on = |flags: &[&str], file: &str| {
        over(args(flags), file)
            .map(|a| (a.restricted, a.no_name_cache))
            .expect("valid")
    };
    assert_eq!(on(&[], ""), (false, false));
    assert_eq!(
        on(&[], "restricted = true\nname-cache = false"),
        (true, true)
    );
    assert_eq!(
        on(
            &["--restricted", "--no-name-cache"],
            "restricted = false\nname-cache = true"
        ),
        (true, true)
    );
    assert_eq!(
        on(&[], "restricted = false\nname-cache = true"),
        (false, false)
    );
}

/// Every flag and variable is kept when a file is read, whatever the merge does with the
/// file's settings: the flag-only ones are put back by name in `over`, and a new one
/// forgotten there would be lost without a word.
#[test]
fn every_flag_is_kept_over_an_empty_file() {
    let mut argv = vec!["sockproxy".to_owned()];
    for a in Args::command().get_arguments() {
        let (Some(long), false) = (
            a.get_long(),
            ["help", "version"].contains(&a.get_id().as_str()),
        ) else {
            continue;
        };
        argv.push(format!("--{long}"));
        if a.get_action().takes_values() {
            let value = a
                .get_possible_values()
                .first()
                .map_or("1".to_owned(), |v| v.get_name().to_owned());
            argv.push(value);
        }
    }
    let flags = Args::try_parse_from(&argv).expect("every flag parses");
    let want = format!("{flags:?}");
    assert!(
        want.contains("no_name_cache: true") && want.contains("allow_cap: [\"1\"]"),
        "{want}"
    );
    assert_eq!(format!("{:?}", over(flags, "").expect("merged")), want);
}

/// The file's keys are the flags' names, and none has a clap default: an unset flag must be
/// told from a set one (`given`).
#[test]
fn the_file_keys_are_flags_without_defaults() {
    let keys = settings(&Args::default()).expect("serializes");
    assert_eq!(keys.len(), 45);
    let cmd = Args::command();
    for key in keys.keys() {
        let long = if key == "name-cache" {
            "no-name-cache"
        } else {
            key
        };
        let flag = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .unwrap_or_else(|| panic!("{key}: no flag --{long}"));
        assert_eq!(flag.get_default_values(), [] as [&str; 0], "{key}");
    }
}

#[test]
fn a_mistake_is_reported_where_it_stands() {
    let e = over(
        args(&[]),
        "allow-cap = [\"CHOWN\"]\nmax-json-keys = \"many\"\n",
    )
    .map(|_| ())
    .expect_err("refused");
    assert_eq!(
        e,
        concat!(
            "TOML parse error at line 2, column 17\n",
            "  |\n",
            "2 | max-json-keys = \"many\"\n",
            "  |                 ^^^^^^\n",
            "invalid type: string \"many\", expected usize\n",
        )
    );
    let e = over(args(&[]), "allow-host-port = [80, \"x\"]")
        .map(|_| ())
        .expect_err("refused");
    assert!(
        e.starts_with("TOML parse error at line 1, column 24\n"),
        "{e}"
    );
    let e = over(args(&[]), "info = \"deny\"\nlisten = \"/x\"\n")
        .map(|_| ())
        .expect_err("refused");
    assert!(
        e.starts_with("TOML parse error at line 2, column 1\n"),
        "{e}"
    );
    assert!(
        e.contains("unknown field `listen`, expected one of `allow-bind-root`"),
        "{e}"
    );
}
