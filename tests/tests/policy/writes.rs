//! What a stack may create and change, with the real docker CLI through sockproxy, on the fake
//! and on the real engine: refused creates leave nothing behind, the gateway's normal create
//! works and is stamped, an allowed bind root works end to end (real engine), `docker events`
//! shows only the stack's containers, rename, update, privileged exec, `--require-stack-label`,
//! image pulls and network options.

use std::time::Duration;

use sockproxy_tests::cli::{self, docker};
use sockproxy_tests::engine::{each_engine, real_engine, Cleanup, Fakes};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

fn absent(sock: &std::path::Path, name: &str) -> bool {
    raw::get(sock, &format!("/containers/{name}/json")).is_ok_and(|r| r.status == 404)
}

/// The docker CLI's flags for a create the stack may not make, each with the reason the proxy
/// gives.
fn refused_create_cases() -> Vec<(Vec<&'static str>, &'static str)> {
    vec![
            (
                vec!["--privileged"],
                "HostConfig.Privileged is not allowed for this stack",
            ),
            (
                vec!["--cap-add", "SYS_ADMIN"],
                "SYS_ADMIN is not allowed for this stack (--allow-cap)",
            ),
            (vec!["--network", "host"], "HostConfig.NetworkMode host is not allowed for this stack"),
            (vec!["--pid", "host"], "HostConfig.PidMode host is not allowed for this stack"),
            (vec!["--ipc", "host"], "HostConfig.IpcMode host is not allowed for this stack"),
            (vec!["--uts", "host"], "HostConfig.UTSMode host is not allowed for this stack"),
            (vec!["--userns", "host"], "HostConfig.UsernsMode host is not allowed for this stack"),
            (
                vec!["--security-opt", "seccomp=unconfined"],
                "HostConfig.SecurityOpt seccomp=unconfined is not allowed for this stack (--allow-seccomp-unconfined)",
            ),
            (
                vec!["--security-opt", "apparmor=unconfined"],
                "HostConfig.SecurityOpt apparmor=unconfined is not allowed for this stack",
            ),
            (
                vec!["--security-opt", "label=disable"],
                "HostConfig.SecurityOpt label=disable is not allowed for this stack",
            ),
            (
                vec!["--cgroup-parent", "/escape"],
                "HostConfig.CgroupParent is not allowed for this stack",
            ),
            (vec!["--runtime", "other"], "HostConfig.Runtime other is not allowed for this stack"),
            (
                vec!["--device", "/dev/null:/dev/x"],
                "HostConfig.Devices is not allowed for this stack",
            ),
            (
                vec!["-v", "/etc:/host-etc"],
                "HostConfig.Binds /etc is not under an allowed bind root (--allow-bind-root)",
            ),
            (
                vec!["-v", "/var/run/docker.sock:/var/run/docker.sock"],
                "HostConfig.Binds /var/run/docker.sock is the engine's socket",
            ),
            (
                vec!["--mount", "type=bind,source=/root,target=/r"],
                "HostConfig.Mounts[0].Source /root is not under an allowed bind root (--allow-bind-root)",
            ),
            (
                vec!["-p", "8080:80"],
                "HostConfig.PortBindings.80/tcp published on every address is not allowed for this stack (loopback only; --allow-public-ports)",
            ),
            (
                vec!["-P", "--expose", "80"],
                "HostConfig.PublishAllPorts true is not allowed for this stack (--allow-public-ports)",
            ),
            (
                vec!["--volumes-from", "someone-else"],
                "HostConfig.VolumesFrom someone-else is not one of this stack's sandboxes",
            ),
            (
                vec!["--link", "someone-else:peer"],
                "HostConfig.Links someone-else is not one of this stack's sandboxes",
            ),
            // Issue 12: what the CLI sends for each of these reached the engine before.
            (
                vec!["--security-opt", "systempaths=unconfined"],
                "HostConfig.MaskedPaths is not allowed for this stack",
            ),
            (
                vec!["--security-opt", "no-new-privileges=false"],
                "HostConfig.SecurityOpt no-new-privileges=false is not allowed for this stack",
            ),
            (
                vec!["--security-opt", "seccomp:unconfined"],
                "HostConfig.SecurityOpt seccomp:unconfined is not allowed for this stack (--allow-seccomp-unconfined)",
            ),
            (
                vec!["--log-driver", "syslog", "--log-opt", "syslog-address=udp://127.0.0.1:514"],
                "HostConfig.LogConfig.Type syslog is not allowed for this stack (--allow-log-driver)",
            ),
            (
                vec!["-v", "victim-vol:/v"],
                "HostConfig.Binds victim-vol is not allowed for this stack (a named volume must start with the stack's prefix)",
            ),
            (
                vec!["--mount", "type=volume,source=victim-vol,target=/v"],
                "HostConfig.Mounts[0].Source victim-vol is not allowed for this stack (a named volume must start with the stack's prefix)",
            ),
            (
                vec!["--sysctl", "net.ipv4.ip_forward=1"],
                "HostConfig.Sysctls net.ipv4.ip_forward is not allowed for this stack (--allow-sysctl)",
            ),
            (
                vec!["--oom-score-adj", "-500"],
                "HostConfig.OomScoreAdj -500 is not allowed for this stack (allowed: 0..=1000)",
            ),
            (
                vec!["--oom-kill-disable"],
                "HostConfig.OomKillDisable is not allowed for this stack",
            ),
            (
                vec!["--pids-limit", "-1"],
                "HostConfig.PidsLimit -1 is not allowed for this stack (allowed: 0..=32768; --max-pids-limit)",
            ),
            (
                vec!["--shm-size", "64g"],
                "HostConfig.ShmSize 68719476736 is not allowed for this stack (allowed: 0..=1073741824)",
            ),
            (
                vec!["--device-cgroup-rule", "a *:* rwm"],
                "HostConfig.DeviceCgroupRules is not allowed for this stack",
            ),
            (
                vec!["--network", "container:someone-else"],
                "HostConfig.NetworkMode someone-else is not one of this stack's sandboxes",
            ),
            (
                vec!["--ipc", "container:someone-else"],
                "HostConfig.IpcMode someone-else is not one of this stack's sandboxes",
            ),
        ]
}

#[test]
fn refused_creates_say_why_and_leave_nothing_behind() {
    each_engine(
        "refused_creates_say_why_and_leave_nothing_behind",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let p = StackProxy::start(&e.socket, &prefix, false);
            let cases = refused_create_cases();
            for (i, (flags, why)) in cases.iter().enumerate() {
                let name = format!("{prefix}sandbox-bad{i}");
                let mut args = vec!["run", "-d", "--name", name.as_str()];
                args.extend(flags.iter().copied());
                args.extend([e.image.as_str(), "sleep", "600"]);
                let out = docker(p.socket(), &args);
                assert!(!out.ok(), "{flags:?} must be refused");
                // Newer CLIs spell capabilities CAP_X, so the reason is matched as a suffix.
                let line = out
                    .stderr
                    .lines()
                    .find(|l| l.contains("sockproxy: containers.create: "))
                    .unwrap_or("");
                assert!(
                    line.contains("Error response from daemon: sockproxy: containers.create: "),
                    "{flags:?}: {}",
                    out.stderr
                );
                assert!(line.ends_with(why), "{flags:?}: {}", out.stderr);
                assert!(absent(&e.socket, &name), "{flags:?}: nothing was created");
            }
        },
    );
}

#[test]
fn the_gateways_normal_create_works_and_is_stamped() {
    each_engine(
        "the_gateways_normal_create_works_and_is_stamped",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let name = clean.container(&format!("{prefix}sandbox-normal"));
            let p = StackProxy::start(&e.socket, &prefix, false);
            let out = docker(
                p.socket(),
                &[
                    "run",
                    "-d",
                    "--name",
                    &name,
                    "-l",
                    "deerflow.role=sandbox",
                    "-e",
                    "A=1",
                    "-p",
                    "127.0.0.1::8080",
                    &e.image,
                    "sleep",
                    "600",
                ],
            );
            assert!(out.ok(), "{}: {}", e.label(), out.stderr);
            let inspect = raw::get(&e.socket, &format!("/containers/{name}/json"))
                .expect("answer")
                .json();
            assert_eq!(inspect["Config"]["Labels"]["deerflow.role"], "sandbox");
            assert_eq!(
                inspect["Config"]["Labels"]["sockproxy.stack"],
                format!("test-{prefix}").as_str()
            );
            assert!(inspect["Config"]["Env"]
                .as_array()
                .is_some_and(|env| env.contains(&serde_json::json!("A=1"))));
            // Never the host's cgroup namespace (a cgroup v1 host's default); the docker CLI
            // sends the mode empty.
            assert_eq!(inspect["HostConfig"]["CgroupnsMode"], "private");
            // Nor for clients below API 1.41: with a HostConfig, 20.10 and current put an empty
            // mode in the host's namespace on cgroup v1 whatever dockerd's own default; with
            // none, the default applies (the host's on cgroup v1). And a HostConfig the proxy
            // adds must not change the IPC default: below API 1.40, 20.10 makes an empty
            // IpcMode "shareable" when a HostConfig is there.
            let bodies = [
                ("v140-empty", "/v1.40", r#","HostConfig":{}"#),
                ("v140-none", "/v1.40", ""),
                ("v139-none", "/v1.39", ""),
            ];
            for (tag, version, host) in bodies {
                let legacy = clean.container(&format!("{prefix}sandbox-{tag}"));
                let body = format!(r#"{{"Image":"{}","Cmd":["sleep","600"]{host}}}"#, e.image);
                let r = raw::request(
                    p.socket(),
                    "POST",
                    &format!("{version}/containers/create?name={legacy}"),
                    Some(body.as_bytes()),
                )
                .expect("answer");
                assert_eq!(r.status, 201, "{}: {tag}: {}", e.label(), r.text());
                let inspect = raw::get(&e.socket, &format!("/containers/{legacy}/json"))
                    .expect("answer")
                    .json();
                let hc = &inspect["HostConfig"];
                assert_eq!(hc["CgroupnsMode"], "private", "{}: {tag}", e.label());
                assert_eq!(hc["IpcMode"], "private", "{}: {tag}", e.label());
            }
        },
    );
}

#[test]
fn an_allowed_bind_root_works_end_to_end() {
    let test = "an_allowed_bind_root_works_end_to_end";
    let Some(e) = real_engine(test) else {
        return;
    };
    if !sockproxy_tests::bindroot::can_pin(test) {
        return;
    }
    let root = sockproxy_tests::bindroot::BindRootDir::new("bind");
    std::fs::create_dir(root.path().join("data")).expect("mkdir");
    std::fs::write(root.path().join("data/greeting"), b"hello through a bind\n").expect("write");
    let prefix = unique_prefix();
    let mut clean = Cleanup::new(&e.socket);
    let name = clean.container(&format!("{prefix}sandbox-bind"));
    let bind_root = root.path().to_owned();
    let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
        c.create_rules.bind_roots = vec![bind_root]
    });
    let mount = format!("{}/data:/data:ro", root.path().display());
    let out = docker(
        p.socket(),
        &[
            "run",
            "--name",
            &name,
            "-v",
            &mount,
            &e.image,
            "cat",
            "/data/greeting",
        ],
    );
    assert!(out.ok(), "{}", out.stderr);
    assert_eq!(out.out(), "hello through a bind\n");
    // A sibling whose name merely starts with the root is not under it.
    let sibling = format!("{}X:/data", root.path().display());
    let out = docker(
        p.socket(),
        &[
            "run",
            "--name",
            &format!("{prefix}sandbox-bind2"),
            "-v",
            &sibling,
            &e.image,
            "true",
        ],
    );
    assert!(
        out.stderr.contains("is not under an allowed bind root"),
        "{}",
        out.stderr
    );
}

#[test]
fn docker_events_show_the_stacks_containers_only() {
    each_engine(
        "docker_events_show_the_stacks_containers_only",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let own = clean.container(&format!("{prefix}sandbox-ev"));
            let foreign = clean.container(&format!("o{prefix}ev"));
            let p = StackProxy::start(&e.socket, &prefix, false);
            let mut events = cli::spawn_docker(
                p.socket(),
                &[
                    "events",
                    "--format",
                    "{{.Type}} {{.Action}} {{.Actor.Attributes.name}}",
                ],
            );
            let rx = events.lines();
            std::thread::sleep(Duration::from_millis(300));
            // The foreign container starts at the same time, directly on the engine.
            let other = docker(
                &e.socket,
                &["run", "-d", "--name", &foreign, &e.image, "sleep", "600"],
            );
            assert!(other.ok(), "{}", other.stderr);
            let mine = docker(
                p.socket(),
                &["run", "-d", "--name", &own, &e.image, "sleep", "600"],
            );
            assert!(mine.ok(), "{}", mine.stderr);
            let mut seen = Vec::new();
            let want = format!("container start {own}");
            while let Ok(line) = rx.recv_timeout(Duration::from_secs(30)) {
                let done = line == want;
                seen.push(line);
                if done {
                    break;
                }
            }
            drop(events);
            assert!(seen.contains(&want), "{}: {seen:?}", e.label());
            assert!(
                !seen.iter().any(|l| l.contains(&foreign)),
                "{}: a foreign event came through: {seen:?}",
                e.label()
            );
        },
    );
}

#[test]
fn rename_update_exec_and_the_stack_label() {
    each_engine(
        "rename_update_exec_and_the_stack_label",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let own = clean.container(&format!("{prefix}sandbox-r"));
            let renamed = clean.container(&format!("{prefix}sandbox-r2"));
            let unlabelled = clean.container(&format!("{prefix}sandbox-unlabelled"));
            let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
                c.create_rules.require_stack_label = true
            });
            assert!(docker(
                p.socket(),
                &["run", "-d", "--name", &own, &e.image, "sleep", "600"]
            )
            .ok());

            let out = docker(p.socket(), &["rename", &own, "someone-else"]);
            assert!(
            out.stderr.contains(
                "sockproxy: containers.rename: someone-else is not one of this stack's sandboxes"
            ),
            "{}",
            out.stderr
        );
            assert!(!absent(&e.socket, &own), "it keeps its name");
            assert!(docker(p.socket(), &["rename", &own, &renamed]).ok());
            assert!(absent(&e.socket, &own) && !absent(&e.socket, &renamed));

            let out = docker(p.socket(), &["update", "--restart", "always", &renamed]);
            assert!(
                out.stderr.contains(
                    "sockproxy: containers.update: RestartPolicy is not allowed for this stack"
                ),
                "{}",
                out.stderr
            );
            let out = docker(p.socket(), &["update", "--cpu-shares", "512", &renamed]);
            assert!(out.ok(), "{}: {}", e.label(), out.stderr);

            let out = docker(p.socket(), &["exec", "--privileged", &renamed, "true"]);
            assert!(
                out.stderr
                    .contains("sockproxy: containers.exec: privileged exec is not allowed"),
                "{}",
                out.stderr
            );

            // An in-scope name without the stack's label (made on the engine) is not the stack's.
            assert!(docker(
                &e.socket,
                &["run", "-d", "--name", &unlabelled, &e.image, "sleep", "600"]
            )
            .ok());
            // Answered as a container nobody has (issue 37: a 403 told the stack it exists).
            let out = docker(p.socket(), &["stop", &unlabelled]);
            assert!(
                !out.ok()
                    && out
                        .stderr
                        .contains(&format!("No such container: {unlabelled}")),
                "{}",
                out.stderr
            );
            assert_eq!(
                raw::get(&e.socket, &format!("/containers/{unlabelled}/json"))
                    .expect("inspect")
                    .json()["State"]["Running"],
                true,
                "not stopped"
            );
            assert!(
                docker(p.socket(), &["stop", "-t", "1", &renamed]).ok(),
                "its own, stamped container still stops"
            );
        },
    );
}

#[test]
fn pulls_only_of_allowed_images_and_no_host_bridges() {
    each_engine(
        "pulls_only_of_allowed_images_and_no_host_bridges",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let net = clean.network(&format!("{prefix}net-hb"));
            let p = StackProxy::start_with(&e.socket, &prefix, true, |c| {
                c.allow_images = vec!["busybox:latest".into()]
            });
            // Never forwarded, so no engine ever tries a registry for these.
            let out = docker(p.socket(), &["pull", "alpine:3"]);
            assert!(out.stderr.contains("sockproxy: images.pull: docker.io/library/alpine:3 is not an allowed image (--allow-image)"), "{}", out.stderr);
            if e.is_fake() {
                // Allowed references are forwarded; the fake has the image and needs no registry.
                let out = docker(p.socket(), &["pull", "busybox:latest"]);
                assert!(out.ok(), "{}", out.stderr);
            }
            let out = docker(
                p.socket(),
                &[
                    "network",
                    "create",
                    "-o",
                    "com.docker.network.bridge.name=docker0",
                    &net,
                ],
            );
            assert!(
                out.stderr.contains(
                    "option com.docker.network.bridge.name is not allowed for this stack"
                ),
                "{}",
                out.stderr
            );
            assert!(raw::get(&e.socket, &format!("/networks/{net}")).is_ok_and(|r| r.status == 404));
        },
    );
}
