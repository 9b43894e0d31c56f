//! Unit tests of `config`.
use super::*;
use crate::bind_root::bind_root_mount;

/// Settings from argv with the two flags every configuration needs; `policy_file`'s tests use
/// them too.
pub(crate) fn args(extra: &[&str]) -> Args {
    let mut argv = vec![
        "sockproxy",
        "--listen",
        "/tmp/x.sock",
        "--prefix",
        "deer-flow-",
    ];
    argv.extend_from_slice(extra);
    Args::try_parse_from(argv).expect("parses")
}

#[test]
fn bind_roots_need_nosuid_and_nodev_mounts() {
    use nix::sys::statvfs::FsFlags;
    assert_eq!(
        bind_root_mount(FsFlags::ST_NOSUID | FsFlags::ST_NODEV),
        Ok(())
    );
    let both = FsFlags::ST_NOSUID | FsFlags::ST_NODEV | FsFlags::ST_RDONLY;
    assert_eq!(bind_root_mount(both), Ok(()));
    assert_eq!(bind_root_mount(FsFlags::ST_NOSUID), Err("dev".into()));
    assert_eq!(bind_root_mount(FsFlags::ST_NODEV), Err("suid".into()));
    assert_eq!(bind_root_mount(FsFlags::empty()), Err("suid,dev".into()));
    // The root file system always allows set-user-ID programs (sudo, su live there).
    let e = Config::from_args(args(&["--allow-bind-root", "/"]), None)
        .map(|_| ())
        .map_err(|e| e.to_string())
        .expect_err("refused");
    assert!(
        e.starts_with("--allow-bind-root \"/\": must be on a mount with nosuid and nodev"),
        "{e}"
    );
}

#[test]
fn defaults_and_upstream_fallbacks() {
    let c = Config::from_args(args(&[]), None).expect("ok");
    assert_eq!(c.upstream, PathBuf::from("/var/run/docker.sock"));
    assert_eq!(c.socket_mode, 0o660);
    assert_eq!(c.stack, "deer-flow-");
    let c = Config::from_args(args(&[]), Some("unix:///run/d.sock".into())).expect("ok");
    assert_eq!(c.upstream, PathBuf::from("/run/d.sock"));
    let c = Config::from_args(
        args(&["--upstream", "unix:///a.sock"]),
        Some("unix:///b.sock".into()),
    )
    .expect("ok");
    assert_eq!(c.upstream, PathBuf::from("/a.sock"));
}

#[test]
fn invalid_settings_are_refused_with_the_rule() {
    let e = Config::from_args(
        Args::try_parse_from(["sockproxy", "--listen", "/x", "--prefix", "abc"]).expect("parses"),
        None,
    )
    .expect_err("bad prefix");
    assert!(
        e.to_string().contains("^[a-zA-Z0-9][a-zA-Z0-9_.-]*[-_.]$"),
        "{e}"
    );
    let e = Config::from_args(
        Args::try_parse_from(["sockproxy", "--listen", "/x", "--prefix", "abc123-"])
            .expect("parses"),
        None,
    );
    assert_eq!(
        e.map(|c| c.scope.prefix().as_str().to_owned())
            .map_err(|e| e.to_string()),
        Ok("abc123-".to_owned()),
        "'-' is not a hex digit"
    );
    let e = Config::from_args(
        Args::try_parse_from(["sockproxy", "--listen", "/x", "--prefix", "abc12_"])
            .expect("parses"),
        None,
    );
    assert_eq!(
        e.map(|c| c.scope.prefix().as_str().to_owned())
            .map_err(|e| e.to_string()),
        Ok("abc12_".to_owned())
    );
    let refused = |flags: &[&str]| {
        Config::from_args(args(flags), None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        refused(&["--allow-publish-address", "172.30.0.1,gateway.invalid"]),
        Err("--allow-publish-address \"gateway.invalid\": expected an IP address such as 172.30.0.1".into())
    );
    assert_eq!(
        Config::from_args(
            args(&["--allow-publish-address", "172.30.0.1,fd00::1"]),
            None
        )
        .map(|c| c.create_rules.publish_addresses)
        .map_err(|e| e.to_string()),
        Ok(vec![
            "172.30.0.1".parse().expect("ip"),
            "fd00::1".parse().expect("ip")
        ])
    );
    assert_eq!(
        refused(&["--upstream", "tcp://1.2.3.4:2375"]),
        Err("--upstream \"tcp://1.2.3.4:2375\": only unix:// addresses are supported".into())
    );
    assert_eq!(
        refused(&["--socket-mode", "999"]),
        Err("--socket-mode \"999\": expected octal permission bits such as 0660".into())
    );
    assert_eq!(
        refused(&["--socket-group", "no-such-group-xyz"]),
        Err("--socket-group \"no-such-group-xyz\": no such group".into())
    );
    let c = Config::from_args(
        args(&["--socket-group", "0", "--socket-mode", "0600"]),
        None,
    )
    .expect("ok");
    assert_eq!((c.socket_gid, c.socket_mode), (Some(0), 0o600));
}

#[test]
fn worker_threads_default_to_one_and_are_bounded() {
    let c = Config::from_args(args(&[]), None).expect("ok");
    assert_eq!((c.worker_threads, c.old_worker_flag), (1, false));
    let c = Config::from_args(args(&["--worker-threads", "4"]), None).expect("ok");
    assert_eq!((c.worker_threads, c.old_worker_flag), (4, false));
    for flag in ["--worker-threads", "--event-loops"] {
        for bad in ["0", "65"] {
            let e = Config::from_args(args(&[flag, bad]), None).expect_err(bad);
            assert_eq!(
                e.to_string(),
                format!("--worker-threads {bad}: expected 1 to 64")
            );
        }
    }
}

/// `--event-loops`, the flag's name until issue 47, still works for a release, hidden from
/// `--help`; the new name wins where both are given.
#[test]
fn the_old_name_of_worker_threads_still_works_hidden() {
    let c = Config::from_args(args(&["--event-loops", "3"]), None).expect("ok");
    assert_eq!((c.worker_threads, c.old_worker_flag), (3, true));
    let both = args(&["--event-loops", "3", "--worker-threads", "2"]);
    let c = Config::from_args(both, None).expect("ok");
    assert_eq!((c.worker_threads, c.old_worker_flag), (2, false));
    let help = <Args as clap::CommandFactory>::command()
        .render_long_help()
        .to_string();
    assert!(help.contains("--worker-threads"), "{help}");
    assert!(help.contains("SOCKPROXY_WORKER_THREADS"), "{help}");
    assert!(!help.contains("event-loops"), "{help}");
    assert!(!help.contains("EVENT_LOOPS"), "{help}");
}

/// Settings straight from clap with `--policy` still unread are refused, not taken without the
/// file's settings (`policy_file::merged` reads it first, as the binary does).
#[test]
fn an_unread_policy_file_is_refused() {
    let e = Config::from_args(args(&["--policy", "/etc/sockproxy/x.toml"]), None)
        .map(|_| ())
        .map_err(|e| e.to_string());
    assert_eq!(
        e,
        Err(
            "--policy \"/etc/sockproxy/x.toml\": not read: policy_file::merged reads it into the settings first"
                .into()
        )
    );
}

#[test]
fn the_network_pool_is_read_once_with_its_size() {
    let pool = |extra: &[&str]| {
        Config::from_args(args(extra), None)
            .map(|c| {
                c.create_rules
                    .network_pool
                    .map(|p| (p.pool().to_string(), p.prefix_len()))
            })
            .map_err(|e| e.to_string())
    };
    assert_eq!(pool(&[]), Ok(None));
    assert_eq!(
        pool(&["--network-pool", "10.213.0.0/16"]),
        Ok(Some(("10.213.0.0/16".into(), 24)))
    );
    assert_eq!(
        pool(&[
            "--network-pool",
            "10.213.0.0/16",
            "--network-pool-size",
            "28"
        ]),
        Ok(Some(("10.213.0.0/16".into(), 28)))
    );
    let refused = [
        (
            &["--network-pool", "10.213.0.0"][..],
            "--network-pool: \"10.213.0.0\" is not an IPv4 range (a.b.c.d/n)",
        ),
        (
            &["--network-pool", "fd00::/64"][..],
            "--network-pool: \"fd00::/64\" is not an IPv4 range (a.b.c.d/n)",
        ),
        (
            &[
                "--network-pool",
                "10.213.0.0/16",
                "--network-pool-size",
                "30",
            ][..],
            "--network-pool: --network-pool-size 30 must be between the pool's own (16) and 29",
        ),
        (
            &["--network-pool-size", "24"][..],
            "--network-pool: --network-pool-size needs --network-pool",
        ),
    ];
    for (extra, want) in refused {
        assert_eq!(pool(extra), Err(want.to_owned()), "{extra:?}");
    }
}

/// `--state-dir` is made if missing and checked writable once, at start; a path the proxy
/// cannot keep a file in stops the start with the reason.
#[test]
fn the_state_dir_is_made_and_checked_at_start() {
    let tmp = tempfile::tempdir().expect("dir");
    let dir = tmp.path().join("a/b");
    let arg = dir.to_string_lossy().into_owned();
    let cfg = Config::from_args(args(&["--state-dir", &arg]), None).expect("valid");
    assert_eq!(cfg.state_dir.as_deref(), Some(dir.as_path()));
    assert!(dir.is_dir());
    assert_eq!(
        std::fs::read_dir(&dir).expect("listed").count(),
        0,
        "the probe is gone"
    );
    assert_eq!(
        Config::from_args(args(&[]), None).expect("valid").state_dir,
        None
    );
    let file = tmp.path().join("file");
    std::fs::write(&file, b"").expect("file");
    let refused = |p: &str| {
        Config::from_args(args(&["--state-dir", p]), None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        refused("state"),
        Err("--state-dir state: must be an absolute path".into())
    );
    let f = file.to_string_lossy().into_owned();
    assert_eq!(
        refused(&f),
        Err(format!(
            "--state-dir {f}: must be a directory (not a link to one)"
        ))
    );
    // --print-policy makes nothing.
    let unmade = tmp.path().join("unmade");
    let arg = unmade.to_string_lossy().into_owned();
    let cfg =
        Config::from_args(args(&["--state-dir", &arg, "--print-policy"]), None).expect("valid");
    assert_eq!(cfg.state_dir, None);
    assert!(!unmade.exists());
}
