//! Issue 12's host-takeover bypasses, each sent as raw bytes through the real proxy on the fake
//! and on the real dockerd, and each checked on what the engine holds afterwards (its own
//! inspect), not only on the status: 20.10's legacy top-level HostConfig, a start body on an
//! old API version, NetworkID under an own network's key, a network made from a foreign
//! config, a bind through a planted symbolic link, and the oracles (before/since, ID prefixes,
//! network inspect). Where the real engine is 20.10, the same request sent directly shows the
//! danger the refusal prevents.

use serde_json::{json, Value};
use sockproxy_tests::engine::{each_engine, Cleanup, Engine, Fakes, Kind};
use sockproxy_tests::raw::{self, RawResponse};
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

pub(crate) fn send(
    sock: &std::path::Path,
    method: &str,
    target: &str,
    body: &Value,
) -> RawResponse {
    let bytes = body.to_string();
    raw::request(sock, method, target, Some(bytes.as_bytes())).expect("answer")
}

pub(crate) fn inspect(e: &Engine, what: &str, name: &str) -> RawResponse {
    raw::get(&e.socket, &format!("/{what}/{name}")).expect("answer")
}

pub(crate) fn refused(r: &RawResponse, status: u16, needle: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(
        r.message().contains(needle),
        "{needle:?} in {}",
        r.message()
    );
}

#[test]
fn legacy_top_level_host_config_is_read_and_refused() {
    each_engine(
        "legacy_top_level_host_config_is_read_and_refused",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let rows: Vec<(Value, &str)> = vec![
                (
                    json!({ "Binds": ["/:/host"], "PidMode": "host" }),
                    "HostConfig.Binds / is not under an allowed bind root",
                ),
                (
                    json!({ "privileged": true }),
                    "HostConfig.Privileged is not allowed",
                ),
                (
                    json!({ "HostConfig": null, "NetworkMode": "host" }),
                    "HostConfig.NetworkMode host is not allowed",
                ),
                (
                    json!({ "DeviceCgroupRules": ["a *:* rwm"] }),
                    "HostConfig.DeviceCgroupRules is not allowed",
                ),
                (
                    json!({ "PortBindings": { "80/tcp": [{ "HostIp": "", "HostPort": "" }] } }),
                    "published on every address",
                ),
                (
                    json!({ "HostConfig": {}, "Privileged": true }),
                    "Privileged at the top level beside HostConfig is not allowed",
                ),
            ];
            for (i, (extra, why)) in rows.iter().enumerate() {
                let name = clean.container(&format!("{prefix}sandbox-legacy{i}"));
                let mut body = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
                for (k, v) in extra.as_object().expect("object") {
                    body[k] = v.clone();
                }
                let target = format!("/v1.41/containers/create?name={name}");
                refused(&send(p.socket(), "POST", &target, &body), 403, why);
                assert_eq!(
                    inspect(&e, "containers", &format!("{name}/json")).status,
                    404
                );
            }
            if e.kind == Kind::Real && e.flavor.name() == "debian-20.10" {
                // The danger itself: sent directly, 20.10 mounts the host's root.
                let name = clean.container(&format!("{prefix}sandbox-direct"));
                let body = json!({ "Image": e.image, "Cmd": ["true"], "Binds": ["/:/host"] });
                let made = send(
                    &e.socket,
                    "POST",
                    &format!("/containers/create?name={name}"),
                    &body,
                );
                assert_eq!(made.status, 201, "{}", made.text());
                let got = inspect(&e, "containers", &format!("{name}/json")).json();
                assert_eq!(got["HostConfig"]["Binds"], json!(["/:/host"]));
            }
        },
    );
}

#[test]
fn a_start_body_never_reaches_the_engine() {
    each_engine(
        "a_start_body_never_reaches_the_engine",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let name = clean.container(&format!("{prefix}sandbox-start"));
            let body = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
            let made = send(
                p.socket(),
                "POST",
                &format!("/containers/create?name={name}"),
                &body,
            );
            assert_eq!(made.status, 201, "{}", made.text());
            let takeover = json!({ "Binds": ["/:/host"], "Privileged": true });
            for version in ["v1.23", "v1.12", "v1.41"] {
                let r = send(
                    p.socket(),
                    "POST",
                    &format!("/{version}/containers/{name}/start"),
                    &takeover,
                );
                refused(&r, 400, "sockproxy: bad request:");
            }
            let got = inspect(&e, "containers", &format!("{name}/json")).json();
            assert_eq!(got["State"]["Running"], json!(false));
            assert_ne!(got["HostConfig"]["Privileged"], json!(true));
            assert!(
                got["HostConfig"]["Binds"]
                    .as_array()
                    .is_none_or(Vec::is_empty),
                "{}",
                got["HostConfig"]
            );
            // Without a body it starts, as the CLI starts it.
            let r = raw::request(
                p.socket(),
                "POST",
                &format!("/v1.41/containers/{name}/start"),
                None,
            )
            .expect("answer");
            assert_eq!(r.status, 204, "{}", r.text());
        },
    );
}

#[test]
fn endpoints_name_only_own_networks_and_configs() {
    each_engine(
        "endpoints_name_only_own_networks_and_configs",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, true);
            let own_net = clean.network(&format!("{prefix}net-a"));
            let foreign_net = clean.network(&format!("x{prefix}foreign"));
            let foreign_id = step("a foreign network and the stack's own", || {
                let r = send(
                    &e.socket,
                    "POST",
                    "/networks/create",
                    &json!({ "Name": foreign_net }),
                );
                assert_eq!(r.status, 201, "{}", r.text());
                let foreign_id = r.json()["Id"].as_str().unwrap_or_default().to_owned();
                let r = send(
                    p.socket(),
                    "POST",
                    "/networks/create",
                    &json!({ "Name": own_net }),
                );
                assert_eq!(r.status, 201, "{}", r.text());
                foreign_id
            });
            // Create with NetworkID under the own network's key: nothing made.
            let name = step(
                "a create naming a foreign network by NetworkID makes nothing",
                || {
                    let name = clean.container(&format!("{prefix}sandbox-nid"));
                    let body = json!({
                        "Image": e.image, "Cmd": ["sleep", "600"],
                        "HostConfig": { "NetworkMode": own_net },
                        "NetworkingConfig": { "EndpointsConfig": { own_net.clone(): { "NetworkID": foreign_id } } },
                    });
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &body,
                    );
                    refused(&r, 403, "NetworkID is not allowed");
                    assert_eq!(
                        inspect(&e, "containers", &format!("{name}/json")).status,
                        404
                    );
                    name
                },
            );
            // Connect with NetworkID: the container stays off the foreign network.
            step(
                "a connect by NetworkID leaves the container off the foreign network",
                || {
                    let body = json!({ "Image": e.image, "Cmd": ["sleep", "600"] });
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/containers/create?name={name}"),
                        &body,
                    );
                    assert_eq!(r.status, 201, "{}", r.text());
                    let connect =
                        json!({ "Container": name, "EndpointConfig": { "NetworkID": foreign_id } });
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/networks/{own_net}/connect"),
                        &connect,
                    );
                    refused(&r, 403, "EndpointConfig.NetworkID is not allowed");
                    let got = inspect(&e, "containers", &format!("{name}/json")).json();
                    let nets = got["NetworkSettings"]["Networks"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default();
                    assert!(
                        !nets.contains_key(&foreign_net) && !nets.contains_key(&own_net),
                        "{nets:?}"
                    );
                },
            );
            // A network made from another's config: refused, nothing made.
            step("a network made from another's config is refused", || {
                let cfg_net = format!("{prefix}net-cfg");
                let body = json!({ "Name": cfg_net, "ConfigFrom": { "Network": foreign_net } });
                refused(
                    &send(p.socket(), "POST", "/networks/create", &body),
                    403,
                    "ConfigFrom is not allowed",
                );
                assert_eq!(inspect(&e, "networks", &cfg_net).status, 404);
            });
            // The own network's inspect lists no foreign container, even one attached directly.
            step(
                "the own network's inspect lists no foreign container",
                || {
                    let stranger = clean.container(&format!("x{prefix}stranger"));
                    let r = send(
                        &e.socket,
                        "POST",
                        &format!("/containers/create?name={stranger}"),
                        &body_of(&e),
                    );
                    assert_eq!(r.status, 201, "{}", r.text());
                    let r = send(
                        &e.socket,
                        "POST",
                        &format!("/networks/{own_net}/connect"),
                        &json!({ "Container": stranger }),
                    );
                    assert!(r.status < 300, "{}", r.text());
                    let direct = inspect(&e, "networks", &own_net).json();
                    let through =
                        raw::get(p.socket(), &format!("/networks/{own_net}")).expect("answer");
                    assert_eq!(through.status, 200, "{}", through.text());
                    let listed =
                        |v: &Value| v["Containers"].as_object().map(|m| m.len()).unwrap_or(0);
                    if listed(&direct) > 0 {
                        assert!(!through.text().contains(&stranger), "{}", through.text());
                    }
                },
            );
            // A disconnect naming that foreign container by an ID prefix, with the lower-case
            // key Go's decoder also reads: refused, and it stays on the network.
            step(
                "a disconnect of a foreign container by ID prefix and lower-case key is refused",
                || {
                    let stranger = format!("x{prefix}stranger");
                    let id = inspect(&e, "containers", &format!("{stranger}/json")).json()["Id"]
                        .as_str()
                        .expect("an ID")
                        .to_owned();
                    let r = send(
                        p.socket(),
                        "POST",
                        &format!("/networks/{own_net}/disconnect"),
                        &json!({ "container": &id[..12], "force": true }),
                    );
                    // What a container that does not exist gets: the stranger is not the stack's.
                    assert_eq!(r.status, 404, "{}", r.text());
                    assert!(r.message().contains(&id[..12]), "{}", r.message());
                    let got = inspect(&e, "containers", &format!("{stranger}/json")).json();
                    assert!(
                        got["NetworkSettings"]["Networks"]
                            .as_object()
                            .is_some_and(|n| n.contains_key(&own_net)),
                        "{got}"
                    );
                },
            );
        },
    );
}

fn body_of(e: &Engine) -> Value {
    json!({ "Image": e.image, "Cmd": ["sleep", "600"] })
}

#[test]
fn a_bind_through_a_planted_link_is_refused() {
    let test = "a_bind_through_a_planted_link_is_refused";
    if !sockproxy_tests::bindroot::can_pin(test) {
        return;
    }
    each_engine(test, Fakes::Debian, |e| {
        let prefix = unique_prefix();
        let mut clean = Cleanup::new(&e.socket);
        let root = sockproxy_tests::bindroot::BindRootDir::new("link");
        let real_root = root.path().to_owned();
        std::fs::create_dir(real_root.join("data")).expect("data");
        // What a sandbox with the directory bound could plant.
        std::os::unix::fs::symlink("/", real_root.join("data").join("escape")).expect("link");
        let allowed = real_root.clone();
        let p = StackProxy::start_with(&e.socket, &prefix, false, move |c| {
            c.create_rules.bind_roots = vec![allowed]
        });
        let name = clean.container(&format!("{prefix}sandbox-link"));
        for source in ["data/escape", "data/escape/etc"] {
            let bind = format!("{}/{source}:/host", real_root.display());
            let body =
                json!({ "Image": e.image, "Cmd": ["true"], "HostConfig": { "Binds": [bind] } });
            let r = send(
                p.socket(),
                "POST",
                &format!("/containers/create?name={name}"),
                &body,
            );
            refused(&r, 403, "goes through a symbolic link");
            assert_eq!(
                inspect(&e, "containers", &format!("{name}/json")).status,
                404
            );
        }
        let bind = format!("{}/data:/data", real_root.display());
        let body = json!({ "Image": e.image, "Cmd": ["true"], "HostConfig": { "Binds": [bind] } });
        let r = send(
            p.socket(),
            "POST",
            &format!("/containers/create?name={name}"),
            &body,
        );
        assert_eq!(
            r.status,
            201,
            "the real directory itself is fine: {}",
            r.text()
        );
    });
}

#[test]
fn lookups_say_nothing_about_other_stacks() {
    each_engine(
        "lookups_say_nothing_about_other_stacks",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let foreign = clean.container(&format!("x{prefix}neighbour"));
            let r = send(
                &e.socket,
                "POST",
                &format!("/containers/create?name={foreign}"),
                &body_of(&e),
            );
            assert_eq!(r.status, 201, "{}", r.text());
            let foreign_id = r.json()["Id"].as_str().unwrap_or_default().to_owned();
            let own = clean.container(&format!("{prefix}sandbox-own"));
            let r = send(
                p.socket(),
                "POST",
                &format!("/containers/create?name={own}"),
                &body_of(&e),
            );
            assert_eq!(r.status, 201, "{}", r.text());
            let own_id = r.json()["Id"].as_str().unwrap_or_default().to_owned();
            // before/since naming a foreign container answer exactly like a missing one.
            let ask = |r: &str| {
                let f = json!({ "before": [r] }).to_string();
                let q: String = form_urlencoded_pair("filters", &f);
                raw::get(p.socket(), &format!("/containers/json?all=1&{q}")).expect("answer")
            };
            for r in [
                foreign.as_str(),
                &foreign_id[..12],
                "no-such-container-anywhere",
            ] {
                let got = ask(r);
                assert_eq!(got.status, 404, "{r}: {}", got.text());
                assert_eq!(got.message(), format!("No such container: {r}"));
            }
            let got = ask(&own);
            if !e.is_fake() {
                // The fake has no before/since filters (it answers 400 "Invalid filter").
                assert_eq!(got.status, 200, "{}", got.text());
            }
            // A one-character prefix is resolved among the stack's own: it names the own
            // container whatever else on the host shares that character.
            let got = raw::get(p.socket(), &format!("/containers/{}/json", &own_id[..1]))
                .expect("answer");
            assert_eq!(got.status, 200, "{}", got.text());
            assert_eq!(got.json()["Id"], json!(own_id));
            let got = raw::get(
                p.socket(),
                &format!("/containers/{}/json", &foreign_id[..12]),
            )
            .expect("answer");
            assert_eq!(got.status, 404);
            assert_eq!(
                got.message(),
                format!("No such container: {}", &foreign_id[..12])
            );
            // A pull of every tag (no tag) is refused even for an allowed repository.
            let q = p.socket();
            let r =
                raw::request(q, "POST", "/images/create?fromImage=busybox", None).expect("answer");
            refused(&r, 403, "names no tag or digest");
        },
    );
}

fn form_urlencoded_pair(k: &str, v: &str) -> String {
    let enc: String = v
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("{k}={enc}")
}

/// Makes and starts `name` directly on the engine; its full ID.
fn running_container(e: &Engine, name: &str) -> String {
    let made = send(
        &e.socket,
        "POST",
        &format!("/containers/create?name={name}"),
        &body_of(e),
    );
    assert_eq!(made.status, 201, "{}", made.text());
    let id = made.json()["Id"].as_str().unwrap_or_default().to_owned();
    let r =
        raw::request(&e.socket, "POST", &format!("/containers/{id}/start"), None).expect("answer");
    assert_eq!(r.status, 204, "{}", r.text());
    id
}

fn running(e: &Engine, id: &str) -> bool {
    inspect(e, "containers", &format!("{id}/json")).json()["State"]["Running"] == json!(true)
}

/// A container the stack may see but not change (a sidecar left by a restricted process,
/// behind a proxy without `--restricted`): a stop or kill by its full ID, on a current and an
/// old API version, is refused by its name, never answered as absent, and it keeps running.
#[test]
fn a_visible_sidecar_is_refused_by_name_when_addressed_by_id() {
    each_engine(
        "a_visible_sidecar_is_refused_by_name_when_addressed_by_id",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let name = clean.container(&format!("{prefix}netproxy-0123456789abcdef"));
            let id = running_container(&e, &name);
            for target in [
                format!("/containers/{id}/stop"),
                format!("/v1.24/containers/{id}/kill"),
                format!("/v1.41/containers/{id}?force=1"),
            ] {
                let method = if target.contains("?force") {
                    "DELETE"
                } else {
                    "POST"
                };
                let r = raw::request(p.socket(), method, &target, None).expect("answer");
                refused(
                    &r,
                    403,
                    &format!("{name} is not one of this stack's sandboxes"),
                );
            }
            assert!(running(&e, &id), "the sidecar still runs");
        },
    );
}

/// A head hyper would refuse in its own bare shape is refused in dockerd's, even as the second
/// request of a kept-alive connection, and the engine never sees it: the stack's own sandbox
/// still runs after a stop sent with a repeated Content-Length, a Transfer-Encoding that does
/// not end in chunked, or bare LF line endings.
#[test]
fn a_malformed_second_request_changes_nothing_on_the_engine() {
    each_engine(
        "a_malformed_second_request_changes_nothing_on_the_engine",
        Fakes::Debian,
        |e| {
            let prefix = unique_prefix();
            let mut clean = Cleanup::new(&e.socket);
            let p = StackProxy::start(&e.socket, &prefix, false);
            let name = clean.container(&format!("{prefix}sandbox-heads"));
            let id = running_container(&e, &name);
            let ping = "GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n";
            for (bad, why) in [
            (
                format!("POST /containers/{name}/stop HTTP/1.1\r\nHost: d\r\nContent-Length: 0\r\nContent-Length: 2\r\n\r\n{{}}"),
                "duplicate Content-Length",
            ),
            (
                format!("POST /v1.41/containers/{id}/stop HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n"),
                "Transfer-Encoding must end in chunked",
            ),
            (
                format!("POST /containers/{name}/stop HTTP/1.1\nHost: d\n\n"),
                "bare LF line ending",
            ),
        ] {
            let answers =
                raw::exchange(p.socket(), format!("{ping}{bad}").as_bytes()).expect("answers");
            assert_eq!(answers.len(), 2, "{why}");
            assert_eq!(answers[0].status, 200, "{}", answers[0].text());
            refused(&answers[1], 400, &format!("sockproxy: bad request: {why}"));
            assert!(running(&e, &id), "{why}: the sandbox still runs");
        }
        },
    );
}
