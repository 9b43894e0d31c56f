//! Custom seccomp profiles an operator allows by file (issue 40, point 7): one
//! `--allow-seccomp-profile FILE` (a pretty-printed profile, as deer-flow's documented one is)
//! lets the profile through however the client formats it (the docker CLI compacts it; another
//! client may reorder it), and the engine holds the canonical text the proxy decided on; an
//! allow-all profile is refused in each form and makes no container.

use clap::Parser;
use serde_json::json;
use sockproxy::config::{Args, Config};
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{each_engine, Cleanup, Fakes};
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

/// A tightened profile, pretty-printed the way a file in a repository is.
const PROFILE: &str = r#"{
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 1,
    "architectures": [ "SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64" ],
    "syscalls": [
        {
            "names": [ "read", "write", "exit", "exit_group", "nanosleep" ],
            "action": "SCMP_ACT_ALLOW"
        }
    ]
}
"#;

const COMPACT: &str = r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_AARCH64"],"syscalls":[{"names":["read","write","exit","exit_group","nanosleep"],"action":"SCMP_ACT_ALLOW"}]}"#;

const REORDERED: &str = r#"{"syscalls":[{"action":"SCMP_ACT_ALLOW","names":["read","write","exit","exit_group","nanosleep"]}],"architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_AARCH64"],"defaultErrnoRet":1,"defaultAction":"SCMP_ACT_ERRNO"}"#;

/// The canonical text (sorted keys, no spaces) the proxy forwards.
const CANONICAL: &str = r#"{"architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_AARCH64"],"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"syscalls":[{"action":"SCMP_ACT_ALLOW","names":["read","write","exit","exit_group","nanosleep"]}]}"#;

#[test]
fn a_profile_allowed_by_file_passes_in_any_form_and_allow_all_never() {
    each_engine(
        "a_profile_allowed_by_file_passes_in_any_form_and_allow_all_never",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let dir = tempfile::tempdir().expect("dir");
            let file = dir.path().join("seccomp.json");
            std::fs::write(&file, PROFILE).expect("write");
            let file = file.display().to_string();
            // The flag as an operator writes it, through the proxy's own parser.
            let args = Args::try_parse_from([
                "sockproxy",
                "--listen",
                "/unused",
                "--prefix",
                &prefix,
                "--allow-seccomp-profile",
                &file,
            ])
            .expect("flags parse");
            let flags = Config::from_args(args, None).expect("a valid configuration");
            let allowed = flags.create_rules.seccomp_profiles.clone();
            let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
                c.create_rules.seccomp_profiles = allowed;
            });
            let create = |name: &str, profile: &str| {
                let body = json!({
                    "Image": e.image, "Cmd": ["true"],
                    "HostConfig": { "SecurityOpt": [format!("seccomp={profile}")] },
                });
                send(
                    p.socket(),
                    "POST",
                    &format!("/containers/create?name={name}"),
                    &body,
                )
            };
            let held = |name: &str| {
                let r = inspect(&e, "containers", &format!("{name}/json"));
                assert_eq!(r.status, 200, "{}", r.text());
                r.json()["HostConfig"]["SecurityOpt"].clone()
            };

            step(
                "the allowed profile passes pretty, compact and reordered",
                || {
                    for (i, form) in [PROFILE, COMPACT, REORDERED].into_iter().enumerate() {
                        let name = clean.container(&format!("{prefix}sandbox-sc{i}"));
                        let r = create(&name, form);
                        assert_eq!(r.status, 201, "{form}: {}", r.text());
                        assert_eq!(held(&name), json!([format!("seccomp={CANONICAL}")]));
                    }
                },
            );

            step(
                "the docker CLI's --security-opt seccomp=FILE passes",
                || {
                    let name = clean.container(&format!("{prefix}sandbox-cli"));
                    let opt = format!("seccomp={file}");
                    let out = docker(
                        p.socket(),
                        &[
                            "create",
                            "--name",
                            &name,
                            "--security-opt",
                            &opt,
                            &e.image,
                            "true",
                        ],
                    );
                    assert!(out.ok(), "{}", out.stderr);
                    assert_eq!(held(&name), json!([format!("seccomp={CANONICAL}")]));
                },
            );

            step("an allow-all profile is refused in each form", || {
                let name = clean.container(&format!("{prefix}sandbox-all"));
                for form in [
                    r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#,
                    "{\n  \"defaultAction\": \"SCMP_ACT_ALLOW\"\n}\n",
                    r#"{"syscalls":[],"defaultAction":"SCMP_ACT_ALLOW"}"#,
                    r#"{"DefaultAction":"SCMP_ACT_ALLOW"}"#,
                    r#"{"defaultAction":"SCMP_ACT_ERRNO","DefaultAction":"SCMP_ACT_ALLOW"}"#,
                ] {
                    let r = create(&name, form);
                    assert_eq!(r.status, 403, "{form}: {}", r.text());
                    let why = r.message();
                    assert!(
                        why.starts_with(
                            "sockproxy: containers.create: HostConfig.SecurityOpt seccomp"
                        ) && (why
                            .ends_with("is not allowed for this stack (--allow-seccomp-profile)")
                            || why.contains("profile keys that name the same field")),
                        "{form}: {why}"
                    );
                    assert_eq!(
                        inspect(&e, "containers", &format!("{name}/json")).status,
                        404
                    );
                }
                refused(
                    &create(&name, r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#),
                    403,
                    "seccomp profile sha256:",
                );
            });
        },
    );
}
