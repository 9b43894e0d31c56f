//! The endpoint table: (method, target) → endpoint, for every route the proxy knows.
use super::*;
use crate::canon::canonicalize;

fn ep(method: &str, target: &str) -> Endpoint {
    let uri: http::Uri = target.parse().expect("uri");
    let t = canonicalize(&uri, &http::HeaderMap::new()).expect("canonical");
    parse(&Method::from_bytes(method.as_bytes()).expect("method"), &t)
}

fn name(s: &str) -> ObjRef {
    ObjRef::Name(s.into())
}

#[test]
fn endpoint_table() {
    use ContainerOp::*;
    let c = |op, target| Endpoint::Container { op, target };
    let cases = [
        ("HEAD", "/_ping", Endpoint::Ping),
        ("GET", "/v1.41/_ping", Endpoint::Ping),
        ("GET", "/version", Endpoint::Version),
        ("GET", "/v1.41/containers/json", Endpoint::ContainerList),
        (
            "POST",
            "/v1.41/containers/create",
            Endpoint::ContainerCreate,
        ),
        ("POST", "/containers/x-1/stop", c(Stop, name("x-1"))),
        ("DELETE", "/containers/x-1", c(Remove, name("x-1"))),
        (
            "GET",
            "/containers/abc123/json",
            c(Inspect, ObjRef::Hex("abc123".into())),
        ),
        ("GET", "/containers/ABC/json", c(Inspect, name("ABC"))),
        ("PUT", "/containers/x-1/archive", c(Archive, name("x-1"))),
        ("POST", "/containers/x-1/exec", c(ExecCreate, name("x-1"))),
        (
            "POST",
            "/exec/ab12/start",
            Endpoint::Exec {
                op: ExecOp::Start,
                id: "ab12".into(),
            },
        ),
        ("GET", "/networks", Endpoint::NetworkList),
        (
            "DELETE",
            "/networks/n-1",
            Endpoint::Network {
                op: NetworkOp::Remove,
                target: name("n-1"),
            },
        ),
        (
            "GET",
            "/images/library/busybox:latest/json",
            Endpoint::ImageInspect {
                reference: "library/busybox:latest".into(),
            },
        ),
        ("GET", "/info", Endpoint::Info),
        (
            "POST",
            "/info",
            Endpoint::Denied {
                op: "system.info".into(),
            },
        ),
        ("GET", "/v1.41/events", Endpoint::Events),
        (
            "GET",
            "/system/df",
            Endpoint::Denied {
                op: "system.df".into(),
            },
        ),
        ("POST", "/images/create", Endpoint::ImagePull),
        ("POST", "/containers/x-1/rename", c(Rename, name("x-1"))),
        (
            "POST",
            "/containers/x-1/pause",
            Endpoint::Denied {
                op: "containers.pause".into(),
            },
        ),
        (
            "POST",
            "/containers/prune",
            Endpoint::Denied {
                op: "containers.prune".into(),
            },
        ),
        ("GET", "/volumes", Endpoint::VolumeList),
        (
            "GET",
            "/volumes/v1",
            Endpoint::Volume {
                op: VolumeOp::Inspect,
                name: "v1".into(),
            },
        ),
        (
            "DELETE",
            "/volumes/v1",
            Endpoint::Volume {
                op: VolumeOp::Remove,
                name: "v1".into(),
            },
        ),
        (
            "POST",
            "/volumes/create",
            Endpoint::Denied {
                op: "volumes".into(),
            },
        ),
        (
            "POST",
            "/volumes/prune",
            Endpoint::Denied {
                op: "volumes".into(),
            },
        ),
        (
            "DELETE",
            "/volumes/prune",
            Endpoint::Denied {
                op: "volumes".into(),
            },
        ),
        (
            "DELETE",
            "/volumes/-x",
            Endpoint::Denied {
                op: "volumes".into(),
            },
        ),
        (
            "GET",
            "/plugins/p:1/json",
            Endpoint::NotInView {
                kind: ViewKind::Plugin,
                name: "p:1".into(),
            },
        ),
        (
            "POST",
            "/exec/zz/start",
            Endpoint::BadRef { op: "exec.start" },
        ),
        (
            "POST",
            "/containers/own/alias/stop",
            Endpoint::Unknown {
                op: "POST /containers/own/alias/stop".into(),
            },
        ),
        (
            "POST",
            "/containers/json",
            Endpoint::Unknown {
                op: "POST /containers/json".into(),
            },
        ),
        ("GET", "/", Endpoint::Unknown { op: "GET ".into() }),
    ];
    for (m, t, want) in cases {
        assert_eq!(ep(m, t), want, "{m} {t}");
    }
}

#[test]
fn refs_from_bodies() {
    assert_eq!(ObjRef::parse("/x-1"), Some(name("x-1")));
    assert_eq!(ObjRef::parse("//x-1"), None);
    assert_eq!(ObjRef::parse("/parent/alias"), None);
    assert_eq!(ObjRef::parse(""), None);
    assert_eq!(
        ObjRef::parse("0123abcdef"),
        Some(ObjRef::Hex("0123abcdef".into()))
    );
}

/// A metric's `op` label is one of a fixed set: what the client wrote never becomes one.
#[test]
fn op_labels_are_bounded() {
    for (m, t, want) in [
        ("GET", "/_ping", "system.ping"),
        ("POST", "/containers/x-1/stop", "containers.stop"),
        ("POST", "/containers/x-1/pause", "containers.pause"),
        ("POST", "/containers/x-1/anything_at_all", "denied.other"),
        ("GET", "/system/df", "system.df"),
        ("GET", "/system/my_own_word", "denied.other"),
        ("POST", "/swarm/init", "swarm.swarm"),
        ("GET", "/no/such/route", "unknown"),
        ("GET", "/", "unknown"),
        ("POST", "/exec/not-hex/start", "exec.start"),
    ] {
        assert_eq!(ep(m, t).op_label(), want, "{m} {t}");
    }
    // Where the name is fixed, the label is the name itself.
    for (m, t) in [
        ("POST", "/containers/x-1/pause"),
        ("POST", "/networks/prune"),
        ("GET", "/images/json"),
        ("GET", "/v1.41/volumes"),
        ("GET", "/plugins/p/json"),
    ] {
        let e = ep(m, t);
        assert_eq!(e.op_label(), e.op(), "{m} {t}");
    }
}
