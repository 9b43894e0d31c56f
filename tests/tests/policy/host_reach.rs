//! Requests that reached past the stack until a review found them, each refused through the
//! real proxy on the fake and the real dockerd and checked on what the engine holds afterwards:
//! a tmpfs `remount` of `/sys/` (a writable sysfs), an empty network name (the start's error
//! counts the host's networks), `top` with `ps` options (every host process and its
//! environment), an update to an unlimited pids limit, a gateway mode that opens container
//! addresses to other hosts, under `--require-stack-label` a create that borrows another
//! container's volumes by name, and an old API version's network list naming other stacks'
//! containers on the stack's own network; and on engines before API 1.43, whose archive
//! endpoints mount a container's volumes in the host's namespace, any archive request; and a
//! sandbox network made without `Internal`; and, with `--allow-image`, an image inspect by ID
//! prefix or of another image; and a start naming a checkpoint (a path dockerd joins unchecked,
//! on experimental engines a process restored from files the sandbox wrote).

use serde_json::json;
use sockproxy_tests::engine::{each_engine, Cleanup, Engine, Fakes, Kind};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

fn absent(e: &Engine, what: &str, name: &str) -> bool {
    inspect(e, what, name).status == 404
}

#[test]
fn reaches_past_the_stack_are_refused_and_leave_the_engine_unchanged() {
    each_engine(
        "reaches_past_the_stack_are_refused_and_leave_the_engine_unchanged",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, true);
            step("a tmpfs remount of /sys makes no container", || {
                for (i, tmpfs) in [
                    json!({ "/sys/": "remount" }),
                    json!({ "/sys": "rw,remount" }),
                    json!({ "/mnt": "rshared" }),
                ]
                .into_iter()
                .enumerate()
                {
                    let name = clean.container(&format!("{prefix}sandbox-sys{i}"));
                    let body = json!({
                        "Image": e.image, "Cmd": ["sleep", "600"],
                        "HostConfig": { "Tmpfs": tmpfs },
                    });
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &body,
                    );
                    refused(&r, 403, "HostConfig.Tmpfs");
                    assert!(absent(&e, "containers", &format!("{name}/json")), "{name}");
                }
            });
            step(
                "other spellings and shapes of the refused settings make no container",
                || {
                    // 20.10 (API 1.41) reads top-level HostConfig fields when HostConfig is
                    // absent; keys are matched case-insensitively; `seccomp:` is `seccomp=`.
                    let rows = [
                        (
                            json!({ "Tmpfs": { "/sys/": "remount" } }),
                            "HostConfig.Tmpfs",
                        ),
                        (
                            json!({ "hostconfig": { "tmpfs": { "/sys": "REMOUNT" } } }),
                            "HostConfig.Tmpfs",
                        ),
                        (
                            json!({ "HostConfig": { "Mounts": [{ "Type": "tmpfs", "Target": "/scratch",
                                "TmpfsOptions": { "Options": [["size", "1,remount"]] } }] } }),
                            "TmpfsOptions.Options",
                        ),
                        (
                            json!({ "HostConfig": { "SecurityOpt": ["seccomp:builtin"] } }),
                            "seccomp:builtin",
                        ),
                        (
                            json!({ "HostConfig": { "Ulimits": [{ "Name": "rtprio", "Soft": 99, "Hard": 99 }] } }),
                            "Ulimits[0].Name rtprio",
                        ),
                        (
                            json!({ "NetworkingConfig": { "endpointsconfig": { "": {} } } }),
                            "empty name",
                        ),
                    ];
                    for (i, (extra, needle)) in rows.into_iter().enumerate() {
                        let name = clean.container(&format!("{prefix}sandbox-shape{i}"));
                        let mut body = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
                        if let (Some(b), Some(x)) = (body.as_object_mut(), extra.as_object()) {
                            b.extend(x.clone());
                        }
                        let r = send(
                            p.socket(),
                            "POST",
                            &format!("/v1.41/containers/create?name={name}"),
                            &body,
                        );
                        refused(&r, 403, needle);
                        assert!(absent(&e, "containers", &format!("{name}/json")), "{name}");
                    }
                },
            );
            step("an empty network name makes no container", || {
                let name = clean.container(&format!("{prefix}sandbox-nonet"));
                let body = json!({
                    "Image": e.image, "Cmd": ["sleep", "600"],
                    "HostConfig": { "NetworkMode": "bridge" },
                    "NetworkingConfig": { "EndpointsConfig": { "": {} } },
                });
                let r = send(
                    p.socket(),
                    "POST",
                    &format!("/containers/create?name={name}"),
                    &body,
                );
                refused(&r, 403, "has a network with an empty name");
                assert!(absent(&e, "containers", &format!("{name}/json")));
            });
            let own = clean.container(&format!("{prefix}sandbox-own"));
            step("an own container with a pids limit, running", || {
                let body = json!({
                    "Image": e.image, "Cmd": ["sleep", "600"],
                    "HostConfig": { "PidsLimit": 100, "Tmpfs": { "/scratch": "rw,size=1m" } },
                });
                let r = send(
                    p.socket(),
                    "POST",
                    &format!("/containers/create?name={own}"),
                    &body,
                );
                assert_eq!(r.status, 201, "{}", r.text());
                let r = raw::request(
                    p.socket(),
                    "POST",
                    &format!("/containers/{own}/start"),
                    None,
                )
                .expect("answer");
                assert_eq!(r.status, 204, "{}", r.text());
            });
            step("top passes plain ps options and refuses the rest", || {
                let r = raw::get(p.socket(), &format!("/containers/{own}/top?ps_args=-ef"))
                    .expect("answer");
                assert_eq!(r.status, 200, "{}", r.text());
                let r = raw::get(
                    p.socket(),
                    &format!(
                        "/containers/{own}/top?ps_args=-ofname%3DA%2Clabel%3DPID%2Cargs%20eww%20-N%20-p1"
                    ),
                )
                .expect("answer");
                refused(&r, 403, "ps_args");
                assert!(r.json().get("Processes").is_none(), "{}", r.text());
            });
            step("an update to unlimited pids leaves the limit", || {
                for unlimited in [0, -1] {
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/{own}/update"),
                        &json!({ "PidsLimit": unlimited }),
                    );
                    refused(&r, 403, "PidsLimit");
                }
                let held = raw::get(&e.socket, &format!("/containers/{own}/json"))
                    .expect("answer")
                    .json();
                assert_eq!(held["HostConfig"]["PidsLimit"], 100, "{held}");
            });
            step(
                "a network that routes to its containers is not made",
                || {
                    let net = clean.network(&format!("{prefix}net-routed"));
                    let body = json!({
                        "Name": net,
                        "Options": { "com.docker.network.bridge.gateway_mode_ipv4": "routed" },
                    });
                    let r = send(p.socket(), "POST", "/networks/create", &body);
                    refused(&r, 403, "gateway_mode_ipv4=routed");
                    assert!(absent(&e, "networks", &net));
                },
            );
            step(
                "under --require-stack-label a create naming a container makes nothing",
                || {
                    let strict = StackProxy::start_with(&e.socket, &prefix, false, |c| {
                        c.create_rules.require_stack_label = true;
                    });
                    let name = clean.container(&format!("{prefix}sandbox-borrow"));
                    let body = json!({
                        "Image": e.image, "Cmd": ["sleep", "600"],
                        "HostConfig": { "VolumesFrom": [own] },
                    });
                    let r = send(
                        strict.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &body,
                    );
                    refused(&r, 403, "--require-stack-label does not allow");
                    assert!(absent(&e, "containers", &format!("{name}/json")));
                },
            );
        },
    );
}

/// Below API 1.28 dockerd's network list carries every endpoint of each network; a container of
/// another stack attached (directly on the engine) to the stack's own network is left out, as
/// in the network's inspect.
#[test]
fn an_old_api_network_list_names_no_other_stacks_containers() {
    each_engine(
        "an_old_api_network_list_names_no_other_stacks_containers",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, true);
            let net = clean.network(&format!("{prefix}net-old"));
            let stranger = clean.container(&format!("x{prefix}stranger"));
            step(
                "a foreign container runs on the stack's own network",
                || {
                    let r = send(
                        p.socket(),
                        "POST",
                        "/networks/create",
                        &json!({ "Name": net }),
                    );
                    assert_eq!(r.status, 201, "{}", r.text());
                    let body = json!({
                        "Image": e.image, "Cmd": ["sleep", "600"],
                        "HostConfig": { "NetworkMode": net },
                    });
                    let r = send(
                        &e.socket,
                        "POST",
                        &format!("/containers/create?name={stranger}"),
                        &body,
                    );
                    assert_eq!(r.status, 201, "{}", r.text());
                    let r = raw::request(
                        &e.socket,
                        "POST",
                        &format!("/containers/{stranger}/start"),
                        None,
                    )
                    .expect("answer");
                    assert_eq!(r.status, 204, "{}", r.text());
                },
            );
            step("the v1.27 list through the proxy leaves it out", || {
                let listed = |sock: &std::path::Path| {
                    let r = raw::get(sock, "/v1.27/networks").expect("answer");
                    assert_eq!(r.status, 200, "{}", r.text());
                    r.text()
                };
                if e.kind == Kind::Real {
                    assert!(
                        listed(&e.socket).contains(&stranger),
                        "the engine itself lists the endpoint at v1.27"
                    );
                }
                let through = listed(p.socket());
                assert!(through.contains(&net), "{through}");
                assert!(!through.contains(&stranger), "{through}");
            });
        },
    );
}

/// One regular file in a ustar archive, as `docker cp` sends it.
fn one_file_tar(name: &str, content: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    let field = |h: &mut [u8; 512], at: usize, v: &[u8]| h[at..at + v.len()].copy_from_slice(v);
    field(&mut h, 0, name.as_bytes());
    field(&mut h, 100, b"0000644\0");
    field(&mut h, 108, b"0000000\0");
    field(&mut h, 116, b"0000000\0");
    field(&mut h, 124, format!("{:011o}\0", content.len()).as_bytes());
    field(&mut h, 136, b"00000000000\0");
    field(&mut h, 148, b"        ");
    h[156] = b'0';
    field(&mut h, 257, b"ustar\x0000");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    field(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
    let mut tar = h.to_vec();
    tar.extend_from_slice(content);
    tar.resize(tar.len().div_ceil(512) * 512 + 1024, 0);
    tar
}

#[test]
fn archive_requests_reach_only_engines_that_mount_them_apart() {
    each_engine(
        "archive_requests_reach_only_engines_that_mount_them_apart",
        Fakes::All,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let ping = raw::get(&e.socket, "/_ping").expect("answer");
            let api = ping.header("api-version").unwrap_or("").to_owned();
            let old = sockproxy_policy::settings::api_version(&api).expect("an Api-Version")
                < sockproxy_policy::facts::ARCHIVE_SAFE_API;
            let name = clean.container(&format!("{prefix}sandbox-cp"));
            let body = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
            let r = send(
                p.socket(),
                "POST",
                &format!("/containers/create?name={name}"),
                &body,
            );
            assert_eq!(r.status, 201, "{}", r.text());
            let tar = one_file_tar("planted", b"from the stack\n");
            let mut put = format!(
                "PUT /containers/{name}/archive?path=/tmp HTTP/1.1\r\nHost: docker\r\n\
                 Connection: close\r\nContent-Type: application/x-tar\r\n\
                 Content-Length: {}\r\n\r\n",
                tar.len()
            )
            .into_bytes();
            put.extend_from_slice(&tar);
            let stat = format!("/containers/{name}/archive?path=/tmp/planted");
            step(
                &format!("engine API {api}: upload, stat and download"),
                || {
                    let answers = [
                        raw::send(p.socket(), &put).expect("answer"),
                        raw::request(p.socket(), "HEAD", &stat, None).expect("answer"),
                        raw::get(p.socket(), &stat).expect("answer"),
                    ];
                    for (i, r) in answers.iter().enumerate() {
                        if old && i == 1 {
                            // A HEAD answer has no body to carry the message.
                            assert_eq!(r.status, 403, "{}", r.text());
                        } else if old {
                            refused(r, 403, "needs Docker Engine 24 (API 1.43) or later");
                        } else {
                            assert_ne!(r.status, 403, "{}", r.text());
                        }
                    }
                    // What the engine holds: nothing was unpacked into an old engine's
                    // container; a newer real engine has the file.
                    let there = raw::get(&e.socket, &stat).expect("answer").status;
                    match (old, e.kind == Kind::Real) {
                        (true, _) => assert_eq!(there, 404, "nothing planted"),
                        (false, true) => assert_eq!(there, 200, "the upload landed"),
                        (false, false) => assert_eq!(answers[0].status, 200),
                    }
                },
            );
        },
    );
}

#[test]
fn a_sandbox_network_is_made_internal_or_not_at_all() {
    each_engine(
        "a_sandbox_network_is_made_internal_or_not_at_all",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, true);
            step(
                "without Internal: refused, and the engine has no such network",
                || {
                    for (i, body) in [
                        json!({}),
                        json!({ "Internal": false }),
                        json!({ "internal": false }),
                    ]
                    .into_iter()
                    .enumerate()
                    {
                        let net = clean.network(&format!("{prefix}sandbox-net-open{i}"));
                        let mut body = body;
                        body["Name"] = json!(net);
                        let r = send(p.socket(), "POST", "/networks/create", &body);
                        refused(&r, 403, "must be made with Internal: true");
                        assert!(absent(&e, "networks", &net), "{net}");
                    }
                },
            );
            step("with Internal: made internal", || {
                let net = clean.network(&format!("{prefix}sandbox-net-closed"));
                let body = json!({ "Name": net, "Internal": true });
                let r = send(p.socket(), "POST", "/networks/create", &body);
                assert_eq!(r.status, 201, "{}", r.text());
                let held = inspect(&e, "networks", &net);
                assert_eq!(held.status, 200, "{}", held.text());
                assert_eq!(held.json()["Internal"], json!(true), "{}", held.text());
            });
        },
    );
}

#[test]
fn with_an_image_list_no_other_image_can_be_inspected() {
    each_engine(
        "with_an_image_list_no_other_image_can_be_inspected",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let allowed = sockproxy_policy::settings::normalize_image(&e.image);
            let p = StackProxy::start_with(&e.socket, &prefix, false, |c| {
                c.allow_images = vec![allowed.clone()];
                c.create_rules.allow_images = vec![allowed.clone()];
            });
            let direct = inspect(&e, "images", &format!("{}/json", e.image));
            assert_eq!(direct.status, 200, "{}", direct.text());
            let id = direct.json()["Id"].as_str().expect("an Id").to_owned();
            let hex = id.strip_prefix("sha256:").unwrap_or(&id).to_owned();
            step("the allowed image, by name or full ID", || {
                for r in [e.image.clone(), allowed.clone(), id.clone(), hex.clone()] {
                    let got = raw::get(p.socket(), &format!("/images/{r}/json")).expect("answer");
                    assert_eq!(got.status, 200, "{r}: {}", got.text());
                    assert_eq!(got.json()["Id"], json!(id), "{r}");
                }
            });
            step("an ID prefix or another name is absent", || {
                for r in [&hex[..1], &hex[..2], &hex[..12], "deer-flow-secretimg:1"] {
                    let got = raw::get(p.socket(), &format!("/images/{r}/json")).expect("answer");
                    refused(&got, 404, "No such image: ");
                    assert!(!got.text().contains(&hex), "{r}: {}", got.text());
                }
            });
        },
    );
}

#[test]
fn a_start_may_not_name_a_checkpoint() {
    each_engine("a_start_may_not_name_a_checkpoint", Fakes::Debian, |e| {
        let prefix = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let p = StackProxy::start(&e.socket, &prefix, false);
        let name = clean.container(&format!("{prefix}sandbox-ckpt"));
        let body = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
        let r = send(
            p.socket(),
            "POST",
            &format!("/containers/create?name={name}"),
            &body,
        );
        assert_eq!(r.status, 201, "{}", r.text());
        let status = |e: &Engine| {
            inspect(e, "containers", &format!("{name}/json")).json()["State"]["Status"].clone()
        };
        step("checkpoint or checkpoint-dir: refused, not started", || {
            for (q, needle) in [
                ("checkpoint=..%2F..%2F..%2Ftmp%2Fx", "checkpoint "),
                ("checkpoint-dir=%2Ftmp", "checkpoint-dir "),
                ("checkpoint=c1&checkpoint-dir=%2Ftmp%2Fd", "checkpoint "),
            ] {
                let path = format!("/v1.41/containers/{name}/start?{q}");
                let r = raw::request(p.socket(), "POST", &path, None).expect("answer");
                refused(&r, 403, &format!("query parameter {needle}is not allowed"));
                assert_eq!(status(&e), json!("created"), "{q}");
            }
        });
        step("the same start without them runs it", || {
            let path = format!("/v1.41/containers/{name}/start");
            let r = raw::request(p.socket(), "POST", &path, None).expect("answer");
            assert_eq!(r.status, 204, "{}", r.text());
            assert_eq!(status(&e), json!("running"));
        });
    });
}
