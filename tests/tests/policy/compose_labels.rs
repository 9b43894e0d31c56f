//! compose's labels (`com.docker.compose.*`) on what a stack makes, on the real engine: a
//! container's, a network's and a volume mount's are refused, in each spelling dockerd reads,
//! and the engine holds nothing afterwards. One set would put a stack's object in a compose
//! project's lists: `docker-compose down --remove-orphans` would remove it, and in the proxy's
//! own project it would stop the proxy from starting again (its deployment check).

use serde_json::{json, Value};
use sockproxy_tests::cli::docker;
use sockproxy_tests::engine::{real_engine, Cleanup};
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::unique_prefix;

use crate::bypasses::{inspect, refused, send};

#[test]
fn compose_labels_are_refused_on_what_a_stack_makes() {
    let Some(e) = real_engine("compose_labels_are_refused_on_what_a_stack_makes") else {
        return;
    };
    let prefix = unique_prefix();
    let mut clean = Cleanup::new(&e.socket);
    let p = StackProxy::start(&e.socket, &prefix, true);
    let container = clean.container(&format!("{prefix}sandbox-compose"));
    let volume = clean.volume(&format!("{prefix}compose-data"));
    let network = clean.network(&format!("{prefix}net-compose"));
    // The engine's inspect path for the container.
    let held = format!("{container}/json");
    let create = |body: Value| crate::volumes::create(&p, &e, &container, body);

    // dockerd reads the body's keys case-insensitively: each spelling is the same field.
    for body in [
        json!({ "Labels": { "com.docker.compose.project": "x" } }),
        json!({ "labels": { "com.docker.compose.service": "sockproxy" } }),
        json!({ "LABELS": { "a": "b", "com.docker.compose.oneoff": "False" } }),
    ] {
        let r = create(body.clone());
        refused(&r, 403, "is not allowed for this stack (compose's labels");
        assert_eq!(inspect(&e, "containers", &held).status, 404, "{body}");
    }
    let r = create(json!({ "HostConfig": { "Mounts": [{
        "Type": "volume", "Source": volume, "Target": "/data",
        "VolumeOptions": { "Labels": { "com.docker.compose.project": "x" } }
    }] } }));
    refused(
        &r,
        403,
        "VolumeOptions.Labels com.docker.compose.project is not allowed",
    );
    assert_eq!(inspect(&e, "containers", &held).status, 404);
    assert_eq!(inspect(&e, "volumes", &volume).status, 404);
    let r = send(
        p.socket(),
        "POST",
        "/networks/create",
        &json!({ "Name": network, "Labels": { "com.docker.compose.network": "default" } }),
    );
    refused(&r, 403, "Labels com.docker.compose.network is not allowed");
    assert_eq!(inspect(&e, "networks", &network).status, 404);

    // The docker CLI's refusal, as a user sees it.
    let out = docker(
        p.socket(),
        &[
            "run",
            "-d",
            "--name",
            &container,
            "--label",
            "com.docker.compose.project=x",
            &e.image,
            "sleep",
            "600",
        ],
    );
    assert!(
        out.stderr.contains(
            "Error response from daemon: sockproxy: containers.create: Labels com.docker.compose.project is not allowed for this stack"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(inspect(&e, "containers", &held).status, 404);

    // Other labels still pass, with the stack's own stamped beside them.
    let r = create(json!({ "Labels": { "team": "a", "com.docker.x": "y" } }));
    assert_eq!(r.status, 201, "{}", r.text());
    let labels = inspect(&e, "containers", &held).json()["Config"]["Labels"].clone();
    assert_eq!(
        (labels["team"].as_str(), labels["com.docker.x"].as_str()),
        (Some("a"), Some("y")),
        "{labels}"
    );
    assert!(labels["sockproxy.stack"].is_string(), "{labels}");
}
