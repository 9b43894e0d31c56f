use serde_json::{json, Value};

use super::super::{FakeEngine, Flavor};
use super::HOST_LABEL;
use crate::raw;

fn get(e: &FakeEngine, target: &str) -> Value {
    let r = raw::get(e.socket(), target).expect("answer");
    assert_eq!(r.status, 200, "{target}: {}", r.text());
    r.json()
}

fn run(e: &FakeEngine, name: &str, host_config: Value) -> String {
    let body = json!({ "Image": "busybox", "Cmd": ["sleep", "60"], "HostConfig": host_config });
    let r = raw::request(
        e.socket(),
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body.to_string().as_bytes()),
    )
    .expect("answer");
    assert_eq!(r.status, 201, "{}", r.text());
    let r = raw::request(
        e.socket(),
        "POST",
        &format!("/containers/{name}/start"),
        None,
    )
    .expect("answer");
    assert_eq!(r.status, 204, "{}", r.text());
    get(e, &format!("/containers/{name}/json"))["Id"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn info_has_dockerds_shape_and_counts_the_fakes_containers() {
    for flavor in Flavor::ALL {
        let e = FakeEngine::start(flavor);
        run(&e, "up-1", json!({}));
        let r = raw::request(
            e.socket(),
            "POST",
            "/containers/create?name=idle-1",
            Some(br#"{"Image":"busybox"}"#),
        )
        .expect("answer");
        assert_eq!(r.status, 201);
        let info = get(&e, "/info");
        assert_eq!(info["Containers"], json!(2));
        assert_eq!(info["ContainersRunning"], json!(1));
        assert_eq!(info["ContainersStopped"], json!(1));
        assert_eq!(info["ContainersPaused"], json!(0));
        assert_eq!(info["Images"], json!(2));
        assert_eq!(info["ServerVersion"], json!(flavor.engine_version()));
        assert_eq!(info["Swarm"]["LocalNodeState"], json!("inactive"));
        assert_eq!(info["Labels"], json!([HOST_LABEL]));
        assert_eq!(
            info["ID"].as_str().map(|id| id.split(':').count()),
            Some(12)
        );
        for key in [
            "Name",
            "OSType",
            "OperatingSystem",
            "Architecture",
            "KernelVersion",
            "NCPU",
            "MemTotal",
            "Driver",
            "DockerRootDir",
            "RegistryConfig",
            "Plugins",
            "SecurityOptions",
            "CgroupDriver",
            "CgroupVersion",
            "DefaultRuntime",
            "HttpProxy",
        ] {
            assert!(!info[key].is_null(), "{key} on {}", flavor.name());
        }
    }
}

#[test]
fn images_list_in_dockerds_shape_with_reference_filter() {
    let e = FakeEngine::start(Flavor::Debian2010);
    let all = get(&e, "/images/json");
    let tags: Vec<&Value> = all
        .as_array()
        .expect("a list")
        .iter()
        .map(|i| &i["RepoTags"][0])
        .collect();
    assert_eq!(
        tags,
        [
            &json!("busybox:latest"),
            &json!("sockproxy-test-busybox:latest")
        ]
    );
    assert_eq!(all[0]["Containers"], json!(-1));
    assert!(all[0]["Id"]
        .as_str()
        .is_some_and(|i| i.starts_with("sha256:")));
    let filtered = get(
        &e,
        "/images/json?filters=%7B%22reference%22%3A%5B%22busybox%22%5D%7D",
    );
    assert_eq!(filtered.as_array().map(Vec::len), Some(1));
    let r = raw::get(
        e.socket(),
        "/images/json?filters=%7B%22nope%22%3A%5B%22x%22%5D%7D",
    )
    .expect("answer");
    assert_eq!(r.status, 400);
}

#[test]
fn predefined_networks_list_their_containers_by_name_and_by_id() {
    let e = FakeEngine::start(Flavor::Debian2010);
    let on_bridge = run(
        &e,
        "on-bridge",
        json!({ "PortBindings": { "8080/tcp": [{ "HostIp": "127.0.0.1", "HostPort": "" }] } }),
    );
    let on_host = run(&e, "on-host", json!({ "NetworkMode": "host" }));
    let on_none = run(&e, "on-none", json!({ "NetworkMode": "none" }));
    for (net, id, ip) in [
        ("bridge", &on_bridge, true),
        ("host", &on_host, false),
        ("none", &on_none, false),
    ] {
        let by_name = get(&e, &format!("/networks/{net}"));
        let net_id = by_name["Id"].as_str().expect("an ID").to_owned();
        let by_id = get(&e, &format!("/networks/{net_id}"));
        for n in [&by_name, &by_id] {
            let members = n["Containers"].as_object().expect("a map");
            assert_eq!(members.len(), 1, "{net}: {n}");
            let entry = &members[id.as_str()];
            assert_eq!(entry["Name"], json!(format!("on-{net}")));
            assert_eq!(
                entry["IPv4Address"]
                    .as_str()
                    .is_some_and(|a| a.ends_with("/16")),
                ip
            );
            assert!(entry["EndpointID"].as_str().is_some_and(|x| x.len() == 64));
        }
    }
    let bridge = get(&e, "/networks/bridge");
    assert_eq!(
        bridge["Options"]["com.docker.network.bridge.name"],
        json!("docker0")
    );
    // The published port shows in inspect and in the list, as `docker port` reads it.
    let c = get(&e, "/containers/on-bridge/json");
    let binding = &c["NetworkSettings"]["Ports"]["8080/tcp"][0];
    assert_eq!(binding["HostIp"], json!("127.0.0.1"));
    let port = binding["HostPort"]
        .as_str()
        .expect("a host port")
        .to_owned();
    let list = get(
        &e,
        "/containers/json?filters=%7B%22name%22%3A%5B%22on-bridge%22%5D%7D",
    );
    assert_eq!(list[0]["Ports"][0]["PublicPort"].to_string(), port);
    assert_eq!(list[0]["Ports"][0]["PrivatePort"], json!(8080));
}
