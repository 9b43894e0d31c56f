//! Tables for the host-side bounds: each row a create (or update, or exec) body and the exact
//! decision, with the default bounds and the operator's own.

use serde_json::json;

use super::*;
use crate::create_rules::CreateRules;
use crate::paths::kernel_fs;
use crate::spend::tests::{decide, decide_with};

fn host(h: Value) -> String {
    decide(json!({ "Image": "img", "HostConfig": h }))
}

#[test]
fn log_options_are_the_drivers_own_and_bounded() {
    let log = |t: &str, c: Value| host(json!({ "LogConfig": { "Type": t, "Config": c } }));
    assert_eq!(
        log("json-file", json!({ "max-size": "10m", "max-file": "3" })),
        "allow"
    );
    assert_eq!(log("json-file", json!({ "max-size": "100m" })), "allow");
    assert_eq!(log("json-file", json!({ "max-size": "100MiB" })), "allow");
    assert_eq!(
        log("local", json!({ "max-size": "1k", "compress": "true" })),
        "allow"
    );
    // What the engine expands or copies into every line needs the operator's word, for
    // every driver (issue 50: a 10 KB tag took dockerd to 2.25 GB).
    for key in ["tag", "labels", "labels-regex", "env", "env-regex"] {
        assert_eq!(
            log("json-file", json!({ key: "a" })),
            format!("sockproxy: containers.create: HostConfig.LogConfig.Config {key} is not allowed for this stack (not an option json-file may be given here; --allow-log-opt json-file:{key})"),
        );
    }
    assert_eq!(log("json-file", json!({})), "allow");
    // Options with no driver (`docker run --log-opt` without `--log-driver`): the refusal
    // says how to name it.
    assert_eq!(
        log("", json!({ "max-size": "10m" })),
        "sockproxy: containers.create: HostConfig.LogConfig.Config is not allowed for this stack without HostConfig.LogConfig.Type: name the driver the options are for (docker run --log-driver json-file --log-opt …)"
    );
    assert_eq!(
        log("json-file", json!({ "max-size": "1000g" })),
        "sockproxy: containers.create: HostConfig.LogConfig.Config.max-size 1000g is not allowed for this stack (allowed: 1 to 104857600 bytes; --max-log-size)"
    );
    assert_eq!(
        log("json-file", json!({ "max-size": "100.5m" })),
        "sockproxy: containers.create: HostConfig.LogConfig.Config.max-size 100.5m is not allowed for this stack (allowed: 1 to 104857600 bytes; --max-log-size)"
    );
    for bad in ["-1", "0", "", "10x", "m", "1.m"] {
        assert!(
            log("json-file", json!({ "max-size": bad }))
                .contains(&format!("max-size {bad} is not allowed")),
            "{bad}"
        );
    }
    assert_eq!(
        log("local", json!({ "max-file": "6" })),
        "sockproxy: containers.create: HostConfig.LogConfig.Config.max-file 6 is not allowed for this stack (allowed: 1..=5; --max-log-files)"
    );
    assert!(log("json-file", json!({ "max-file": "0" })).contains("max-file 0 is not allowed"));
    assert!(log("json-file", json!({ "max-file": "-1" })).contains("max-file -1 is not allowed"));
    assert_eq!(
        log("local", json!({ "labels": "a" })),
        "sockproxy: containers.create: HostConfig.LogConfig.Config labels is not allowed for this stack (not an option local may be given here; --allow-log-opt local:labels)"
    );
    assert_eq!(
        log("none", json!({ "max-size": "1m" })),
        "sockproxy: containers.create: HostConfig.LogConfig.Config max-size is not allowed for this stack (not an option none may be given here; --allow-log-opt none:max-size)"
    );
    // The operator's own bounds and options.
    let rules = CreateRules {
        allow_log_drivers: vec!["json-file".into(), "syslog".into()],
        spend: Spend {
            max_log_size: 1 << 30,
            max_log_files: 20,
            allow_log_opts: vec!["syslog:tag".into()],
            ..Spend::default()
        },
        ..CreateRules::default()
    };
    let log = |t: &str, c: Value| {
        decide_with(
            &rules,
            json!({ "HostConfig": { "LogConfig": { "Type": t, "Config": c } } }),
        )
    };
    assert_eq!(
        log("json-file", json!({ "max-size": "1g", "max-file": "20" })),
        "allow"
    );
    assert_eq!(log("syslog", json!({ "tag": "x" })), "allow");
    assert!(log(
        "syslog",
        json!({ "syslog-address": "udp://203.0.113.1:514" })
    )
    .contains("--allow-log-opt syslog:syslog-address"));
}

#[test]
fn sizes_read_as_dockerd_reads_max_size() {
    assert_eq!(ram_in_bytes("10"), Some(10));
    assert_eq!(ram_in_bytes("10k"), Some(10 << 10));
    assert_eq!(ram_in_bytes("10m"), Some(10 << 20));
    assert_eq!(ram_in_bytes("10 MB"), Some(10 << 20));
    assert_eq!(ram_in_bytes("10MiB"), Some(10 << 20));
    assert_eq!(ram_in_bytes("1.5k"), Some(1536));
    assert_eq!(ram_in_bytes("2g"), Some(2 << 30));
    assert_eq!(ram_in_bytes("1t"), Some(1 << 40));
    for bad in ["", "k", "-1", "1x", "1kk", ".5k", "1.k", "1  k"] {
        assert_eq!(ram_in_bytes(bad), None, "{bad}");
    }
}

#[test]
fn cpu_and_io_weight_pids_and_core_dumps_are_bounded() {
    assert_eq!(host(json!({ "CpuShares": 512 })), "allow");
    assert_eq!(
        host(json!({ "CpuShares": 1024, "BlkioWeight": 500 })),
        "allow"
    );
    assert_eq!(
        host(json!({ "CpuShares": 262144 })),
        "sockproxy: containers.create: HostConfig.CpuShares 262144 is not allowed for this stack (allowed: 0..=1024; --max-cpu-shares)"
    );
    assert!(host(json!({ "CpuShares": -1 })).contains("CpuShares -1 is not allowed"));
    assert_eq!(
        host(json!({ "BlkioWeight": 1000 })),
        "sockproxy: containers.create: HostConfig.BlkioWeight 1000 is not allowed for this stack (allowed: 0..=500; --max-blkio-weight)"
    );
    for f in ["CpuRealtimePeriod", "CpuRealtimeRuntime", "CpuPercent"] {
        assert_eq!(host(json!({ f: 0 })), "allow", "{f}");
        assert_eq!(
            host(json!({ f: 1000 })),
            format!("sockproxy: containers.create: HostConfig.{f} is not allowed for this stack")
        );
    }
    assert_eq!(host(json!({ "PidsLimit": 32768 })), "allow");
    assert_eq!(
        host(json!({ "PidsLimit": i64::MAX })),
        "sockproxy: containers.create: HostConfig.PidsLimit 9223372036854775807 is not allowed for this stack (allowed: 0..=32768; --max-pids-limit)"
    );
    let ulimit = |name: &str, soft: i64, hard: i64| {
        host(json!({ "Ulimits": [{ "Name": name, "Soft": soft, "Hard": hard }] }))
    };
    assert_eq!(ulimit("core", 0, 0), "allow");
    assert_eq!(ulimit("nofile", 1024, 4096), "allow");
    assert_eq!(
        ulimit("core", -1, -1),
        "sockproxy: containers.create: HostConfig.Ulimits[0].Hard -1 is not allowed for this stack (allowed: 0..=0; --max-core-ulimit)"
    );
    assert!(ulimit("core", 0, 1).contains("Ulimits[0].Hard 1 is not allowed"));
    // The same bounds at update.
    let update = |v: Value| {
        crate::write_rules::update(v, None, &Spend::default()).map_err(|e| e.to_string())
    };
    assert_eq!(
        update(json!({ "CpuShares": 512, "BlkioWeight": 100, "PidsLimit": 100 })),
        Ok(json!({ "CpuShares": 512, "BlkioWeight": 100, "PidsLimit": 100 }))
    );
    assert_eq!(
        update(json!({ "CpuShares": 262144 })),
        Err("sockproxy: containers.update: CpuShares 262144 is not allowed for this stack (allowed: 0..=1024; --max-cpu-shares)".into())
    );
    assert_eq!(
        update(json!({ "BlkioWeight": 1000 })),
        Err("sockproxy: containers.update: BlkioWeight 1000 is not allowed for this stack (allowed: 0..=500; --max-blkio-weight)".into())
    );
    assert_eq!(
        update(json!({ "CpuRealtimeRuntime": 950000 })),
        Err(
            "sockproxy: containers.update: CpuRealtimeRuntime is not allowed for this stack".into()
        )
    );
    assert_eq!(
        update(json!({ "PidsLimit": 1_i64 << 40 })),
        Err("sockproxy: containers.update: PidsLimit 1099511627776 is not allowed for this stack (allowed: 1..=32768; --max-pids-limit)".into())
    );
    // The operator's own bounds.
    let rules = CreateRules {
        spend: Spend {
            max_cpu_shares: 4096,
            max_pids_limit: 100,
            max_core_ulimit: 1 << 20,
            ..Spend::default()
        },
        ..CreateRules::default()
    };
    let h = |v: Value| decide_with(&rules, json!({ "HostConfig": v }));
    assert_eq!(h(json!({ "CpuShares": 4096, "PidsLimit": 100 })), "allow");
    assert!(h(json!({ "PidsLimit": 101 })).contains("allowed: 0..=100"));
    assert_eq!(
        h(json!({ "Ulimits": [{ "Name": "core", "Soft": 1024, "Hard": 1048576 }] })),
        "allow"
    );
}

#[test]
fn working_directories_and_mounts_stay_out_of_the_kernels_file_systems() {
    let wd = |d: &str| decide(json!({ "Image": "img", "WorkingDir": d }));
    for ok in [
        "",
        "/",
        "/work",
        "/home/user/app",
        "/devices",
        "/proc1",
        "/system",
    ] {
        assert_eq!(wd(ok), "allow", "{ok}");
    }
    assert_eq!(
        wd("/proc/self/fd/7"),
        "sockproxy: containers.create: WorkingDir /proc/self/fd/7 is not allowed for this stack (a working directory at or under /proc; it stays out of /dev, /proc and /sys)"
    );
    for bad in ["/proc", "/sys/fs/cgroup", "/dev", "/dev/shm"] {
        assert!(
            wd(bad).contains(&format!("WorkingDir {bad} is not allowed")),
            "{bad}"
        );
    }
    for unclean in [
        "work",
        "/work/",
        "//proc/self",
        "/x/../proc/self/fd/7",
        "/./proc",
    ] {
        assert_eq!(
            wd(unclean),
            format!("sockproxy: containers.create: WorkingDir {unclean} is not allowed for this stack (a working directory is a clean absolute path (no '..', '.', '//' or trailing '/'))"),
            "{unclean}"
        );
    }
    let exec = |d: &str| {
        crate::write_rules::exec_create(json!({ "Cmd": ["sh"], "WorkingDir": d }))
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        exec("/work"),
        Ok(json!({ "Cmd": ["sh"], "WorkingDir": "/work" }))
    );
    assert_eq!(exec(""), Ok(json!({ "Cmd": ["sh"], "WorkingDir": "" })));
    assert_eq!(
        exec("/proc/self/fd/8"),
        Err("sockproxy: containers.exec: WorkingDir /proc/self/fd/8 is not allowed for this stack (a working directory at or under /proc; it stays out of /dev, /proc and /sys)".into())
    );
    assert_eq!(
        exec("proc"),
        Err("sockproxy: containers.exec: WorkingDir proc is not allowed for this stack (a working directory is a clean absolute path (no '..', '.', '//' or trailing '/'))".into())
    );

    let hint = |fs: &str| {
        format!("(a mount target at or under {fs}; mounts stay out of /dev, /proc and /sys)")
    };
    assert_eq!(
        host(json!({ "Mounts": [{ "Type": "volume", "Source": "deer-flow-v", "Target": "/dev" }] })),
        format!("sockproxy: containers.create: HostConfig.Mounts[0].Target /dev is not allowed for this stack {}", hint("/dev"))
    );
    assert_eq!(
        host(json!({ "Mounts": [{ "Type": "tmpfs", "Target": "/proc/sys" }] })),
        format!("sockproxy: containers.create: HostConfig.Mounts[0].Target /proc/sys is not allowed for this stack {}", hint("/proc"))
    );
    assert_eq!(
        host(json!({ "Mounts": [{ "Type": "volume", "Source": "deer-flow-v", "Target": "//dev/" }] })),
        format!("sockproxy: containers.create: HostConfig.Mounts[0].Target //dev/ is not allowed for this stack {}", hint("/dev"))
    );
    assert_eq!(
        host(json!({ "Binds": ["deer-flow-v:/sys/fs"] })),
        format!("sockproxy: containers.create: HostConfig.Binds /sys/fs is not allowed for this stack {}", hint("/sys"))
    );
    assert_eq!(
        host(json!({ "Binds": ["deer-flow-v:/x/../dev:ro"] })),
        format!("sockproxy: containers.create: HostConfig.Binds /x/../dev is not allowed for this stack {}", hint("/dev"))
    );
    assert_eq!(
        host(json!({ "Tmpfs": { "/dev/shm": "size=64m" } })),
        format!("sockproxy: containers.create: HostConfig.Tmpfs /dev/shm is not allowed for this stack {}", hint("/dev"))
    );
    assert_eq!(
        decide(json!({ "Image": "img", "Volumes": { "/dev": {} } })),
        format!(
            "sockproxy: containers.create: Volumes /dev is not allowed for this stack {}",
            hint("/dev")
        )
    );
    assert_eq!(
        decide(
            json!({ "Image": "img", "Volumes": { "/devices": {} }, "HostConfig": { "Binds": ["deer-flow-v:/devices"], "Tmpfs": { "/tmp": "" } } })
        ),
        "allow"
    );
    assert_eq!(kernel_fs("/proc/../etc"), None);
    assert_eq!(kernel_fs("/../proc"), Some("/proc"));
    assert_eq!(kernel_fs("sys"), Some("/sys"));
}

#[test]
fn images_are_named_as_dockerd_names_them() {
    use crate::images::normalize_image;
    for (given, want) in [
        ("busybox", "busybox:latest"),
        ("library/busybox", "busybox:latest"),
        ("docker.io/library/busybox:1.36", "busybox:1.36"),
        ("index.docker.io/library/busybox", "busybox:latest"),
        ("docker.io/library/a/b:t", "library/a/b:t"),
        ("library/a/b:t", "library/a/b:t"),
        ("docker.io/a/b", "a/b:latest"),
        ("a/b", "a/b:latest"),
        ("localhost:5000/x", "localhost:5000/x:latest"),
        ("ghcr.io/library/x:1", "ghcr.io/library/x:1"),
    ] {
        assert_eq!(normalize_image(given), want, "{given}");
    }
    // `--allow-image a/b:t` does not let a stack create from `library/a/b:t`, another image.
    let rules = CreateRules {
        allow_images: vec![normalize_image("a/b:t")],
        ..CreateRules::default()
    };
    assert_eq!(
        decide_with(&rules, json!({ "Image": "docker.io/a/b:t" })),
        "allow"
    );
    assert_eq!(
        decide_with(&rules, json!({ "Image": "docker.io/library/a/b:t" })),
        "sockproxy: containers.create: Image docker.io/library/a/b:t is not allowed for this stack (--allow-image)"
    );
}

#[test]
fn an_allowed_tag_is_a_bounded_template() {
    let rules = CreateRules {
        spend: Spend {
            allow_log_opts: vec!["json-file:tag".into(), "json-file:labels".into()],
            ..Spend::default()
        },
        ..CreateRules::default()
    };
    let tag = |t: &str| {
        decide_with(
            &rules,
            json!({ "HostConfig": { "LogConfig": { "Type": "json-file", "Config": { "tag": t } } } }),
        )
    };
    for ok in [
        "",
        "sandbox",
        "{{.Name}}",
        "{{ .ID }}/{{.ImageID}}",
        "{{.FullID}}-{{.DaemonName}}",
        "{{.Name}}{{.Name}}",
    ] {
        assert_eq!(tag(ok), "allow", "{ok}");
    }
    let refused = |t: &str, why: &str| {
        let answer = tag(t);
        assert!(
            answer.starts_with("sockproxy: containers.create: HostConfig.LogConfig.Config.tag ")
                && answer.ends_with(&format!(
                    " is not allowed for this stack (a tag is expanded at every log line: {why})"
                )),
            "{t}: {answer}"
        );
    };
    let only =
        "only {{.ID}}, {{.FullID}}, {{.Name}}, {{.ImageID}}, {{.ImageFullID}}, {{.DaemonName}}";
    refused(
        "{{.Hostname}}",
        &format!("{{{{.Hostname}}}} is not a placeholder a tag may hold ({only})"),
    );
    refused(
        "{{define \"a\"}}x{{end}}",
        &format!("{{{{define \"a\"}}}} is not a placeholder a tag may hold ({only})"),
    );
    refused(
        "{{template \"a\"}}",
        &format!("{{{{template \"a\"}}}} is not a placeholder a tag may hold ({only})"),
    );
    refused(
        "{{printf \"%999999d\" 1}}",
        &format!("{{{{printf \"%999999d\" 1}}}} is not a placeholder a tag may hold ({only})"),
    );
    refused(
        "{{range .ContainerEnv}}{{.}}{{end}}",
        &format!("{{{{range .ContainerEnv}}}} is not a placeholder a tag may hold ({only})"),
    );
    refused(
        "{{.Name | printf \"%s\"}}",
        &format!("{{{{.Name | printf \"%s\"}}}} is not a placeholder a tag may hold ({only})"),
    );
    refused(
        "{{- .ID -}}",
        &format!("{{{{- .ID -}}}} is not a placeholder a tag may hold ({only})"),
    );
    refused("{{.ID", "an unclosed {{");
    refused("a}b", "a brace outside a placeholder");
    refused(
        "{{.Name}}{{.Name}}{{.ID}}",
        "it may add up to 268 bytes to each log line; at most 256",
    );
    // A long literal is cut in the refusal, never echoed whole.
    let long = "x".repeat(10_000);
    let answer = tag(&long);
    assert!(answer.contains("… (10000 bytes)"), "{answer}");
    assert!(answer.len() < 400, "{answer}");
    assert_eq!(tag_template("{{.Name}}-{{ .ID }}"), Ok(128 + 1 + 12));
}
