//! sockproxy against a recording stand-in upstream: what is refused is never forwarded, what is
//! forwarded is pinned, and an absent or broken upstream fails closed (lists: `lists`). The
//! stand-in upstream and the refusal check are shared with `lists` and `http_layer`.

use sockproxy_tests::raw::{self, RawResponse};
use sockproxy_tests::recorder::Recorder;
use sockproxy_tests::stack::StackProxy;

const OWN_ID: &str = "1111111111111111111111111111111111111111111111111111111111111111";
const FOREIGN_ID: &str = "2222222222222222222222222222222222222222222222222222222222222222";

/// An upstream with one in-scope container (`P` + `sandbox-a`) and one foreign one.
pub fn engine(prefix: &str) -> Recorder {
    let own = format!("/{prefix}sandbox-a");
    Recorder::start(move |method, uri| {
        let path = uri.split('?').next().unwrap_or("");
        let inspect = |id: &str, name: &str| (200, format!(r#"{{"Id":"{id}","Name":"{name}"}}"#));
        match (method, path) {
            // An ID prefix is looked up among the stack's own containers (the proxy's own
            // `{"name":["^/P"]}`; a client's list goes with the map form, `{"name":{…}}`).
            ("GET", p)
                if p.ends_with("/containers/json")
                    && uri.contains("filters=%7B%22name%22%3A%5B") =>
            {
                (
                    200,
                    format!(
                        r#"[{{"Id":"{OWN_ID}","Names":["{own}"]}},{{"Id":"{FOREIGN_ID}","Names":["/foreign"]}}]"#
                    ),
                )
            }
            ("GET", p) if p.ends_with(&format!("{own}/json")) || p.contains("/containers/1111") => {
                inspect(OWN_ID, &own)
            }
            ("GET", p) if p.contains("/containers/2222") => inspect(FOREIGN_ID, "/foreign"),
            ("GET", p) if p.contains("/containers/4/") => (
                500,
                r#"{"message":"Multiple IDs found with provided prefix: 4"}"#.into(),
            ),
            ("GET", p) if p.contains("/containers/5/") => (
                400,
                r#"{"message":"multiple IDs found with provided prefix: 5"}"#.into(),
            ),
            ("GET", p) if p.contains("/containers/6/") => (500, r#"{"message":"boom"}"#.into()),
            ("GET", p) if p.contains("/exec/aaaa") => (
                200,
                format!(r#"{{"ID":"{}","ContainerID":"{OWN_ID}"}}"#, "a".repeat(64)),
            ),
            ("GET", p) if p.contains("/exec/bbbb") => (
                200,
                format!(
                    r#"{{"ID":"{}","ContainerID":"{FOREIGN_ID}"}}"#,
                    "b".repeat(64)
                ),
            ),
            ("GET", p) if p.starts_with("/exec/") => {
                (404, r#"{"message":"No such exec instance: x"}"#.into())
            }
            ("GET", p)
                if p.starts_with("/containers/")
                    && p.ends_with("/json")
                    && p != "/containers/json" =>
            {
                (404, r#"{"message":"No such container: x"}"#.into())
            }
            ("GET", "/containers/json" | "/v1.41/containers/json") => (
                200,
                format!(
                    r#"[{{"Id":"a","Names":["/foreign"]}},{{"Id":"b","Names":["{own}"]}},{{"Id":"c","Names":["/{own}2"]}},{{"Id":"d","Names":["{own}3"]}}]"#
                ),
            ),
            _ => (200, "{}".into()),
        }
    })
}

pub fn assert_refusal(r: &RawResponse, status: u16, message: &str) {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.message(), message);
}

#[test]
fn refusals_are_byte_exact_and_never_forwarded() {
    let up = Recorder::fixed("[]");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let r = raw::request(
        p.socket(),
        "POST",
        "/v1.41/containers/deer-flow-netproxy-c1a44b2434411cc2/stop",
        None,
    )
    .expect("answer");
    assert_eq!(r.status, 403);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.body,
        b"{\"message\":\"sockproxy: containers.stop: deer-flow-netproxy-c1a44b2434411cc2 is not one of this stack's sandboxes\"}\n"
    );
    let cases = [
        ("POST", "/info", 403, "sockproxy: system.info: not allowed for this stack"),
        ("GET", "/system/df", 403, "sockproxy: system.df: not allowed for this stack"),
        ("POST", "/images/create?fromImage=busybox&tag=latest", 403, "sockproxy: images.pull: busybox:latest is not an allowed image (--allow-image)"),
        // No tag pulls every tag of the repository.
        ("POST", "/images/create?fromImage=busybox", 403, "sockproxy: images.pull: busybox names no tag or digest; pull one tag at a time"),
        ("POST", "/build", 403, "sockproxy: build: not allowed for this stack"),
        ("PUT", "/containers/deer-flow-sandbox-a/archive?path=%2Ftmp&extract=1", 403, "sockproxy: containers.archive: query parameter extract is not allowed for this stack"),
        ("POST", "/volumes/create", 403, "sockproxy: volumes: not allowed for this stack"),
        ("POST", "/volumes/prune", 403, "sockproxy: volumes: not allowed for this stack"),
        ("POST", "/swarm/init", 403, "sockproxy: swarm.swarm: not allowed for this stack"),
        ("POST", "/containers/prune", 403, "sockproxy: containers.prune: not allowed for this stack"),
        ("POST", "/containers/deer-flow-sandbox-a/rename?name=x", 403, "sockproxy: containers.rename: x is not one of this stack's sandboxes"),
        ("POST", "/containers/deer-flow-sandbox-a/pause", 403, "sockproxy: containers.pause: not allowed for this stack"),
        ("POST", "/containers/foreign/stop", 403, "sockproxy: containers.stop: foreign is not one of this stack's sandboxes"),
        ("DELETE", "/containers/foreign?force=1", 403, "sockproxy: containers.remove: foreign is not one of this stack's sandboxes"),
        ("GET", "/containers/foreign/json", 403, "sockproxy: containers.inspect: foreign is not one of this stack's sandboxes"),
        ("POST", "/containers/deer-flow-sandbox-a/foreign/stop", 403, "sockproxy: POST /containers/deer-flow-sandbox-a/foreign/stop: not allowed for this stack"),
        ("POST", "/containers/create?name=foreign", 403, "sockproxy: containers.create: foreign is not one of this stack's sandboxes"),
        ("POST", "/containers/create", 403, "sockproxy: containers.create: a container without a name is not one of this stack's sandboxes"),
        ("POST", "/networks/create", 403, "sockproxy: networks.create: not allowed for this stack"),
        ("DELETE", "/networks/deer-flow-net-1", 403, "sockproxy: networks.remove: not allowed for this stack"),
        ("GET", "/networks/other-net", 403, "sockproxy: networks.inspect: other-net is not one of this stack's networks"),
        ("GET", "/volumes/other-x", 404, "get other-x: no such volume"),
        ("DELETE", "/volumes/other-x", 404, "get other-x: no such volume"),
        ("GET", "/plugins/deer-flow-x/json", 404, "plugin \"deer-flow-x\" not found"),
    ];
    for (method, target, status, message) in cases {
        let r = raw::request(p.socket(), method, target, None).expect("answer");
        assert_refusal(&r, status, message);
    }
    assert_eq!(
        up.requests(),
        Vec::<String>::new(),
        "nothing may reach the engine"
    );
}

#[test]
fn forwarded_paths_are_pinned_to_the_full_id() {
    let prefix = "deer-flow-";
    let up = engine(prefix);
    let p = StackProxy::start(up.socket(), prefix, false);
    let r = raw::request(
        p.socket(),
        "POST",
        "/v1.41/containers/deer-flow-sandbox-a/stop?t=3",
        None,
    )
    .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = raw::request(p.socket(), "DELETE", "/containers/111111?force=1", None).expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        up.requests(),
        [
            "GET /v1.41/containers/deer-flow-sandbox-a/json".to_owned(),
            format!("POST /v1.41/containers/{OWN_ID}/stop?t=3"),
            "GET /containers/json?all=1&filters=%7B%22name%22%3A%5B%22%5E%2Fdeer-flow-%22%5D%7D"
                .to_owned(),
            format!("GET /containers/{OWN_ID}/json"),
            format!("DELETE /containers/{OWN_ID}?force=1"),
        ]
    );
}

#[test]
fn exec_paths_are_pinned_and_foreign_execs_look_absent() {
    let up = engine("deer-flow-");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let own_exec = "a".repeat(64);
    let r = raw::request(
        p.socket(),
        "POST",
        &format!("/v1.41/exec/{own_exec}/resize?h=1&w=2"),
        None,
    )
    .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        up.requests(),
        [
            format!("GET /v1.41/exec/{own_exec}/json"),
            format!("GET /v1.41/containers/{OWN_ID}/json"),
            format!("POST /v1.41/exec/{own_exec}/resize?h=1&w=2"),
        ]
    );
    for id in ["b".repeat(64), "c".repeat(64)] {
        let r = raw::request(
            p.socket(),
            "POST",
            &format!("/exec/{id}/start"),
            Some(b"{}"),
        )
        .expect("answer");
        assert_refusal(&r, 404, &format!("No such exec instance: {id}"));
    }
    assert!(
        !up.requests().iter().any(|l| l.contains("/start")),
        "{:?}",
        up.requests()
    );
}

#[test]
fn foreign_ids_and_prefixes_look_absent() {
    let up = engine("deer-flow-");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    // "4" and "5" are ambiguous prefixes as 20.10 (500) and 29 (400) answer them.
    for r in [FOREIGN_ID, "2222", "3333", "4", "5"] {
        let resp = raw::request(p.socket(), "POST", &format!("/containers/{r}/stop"), None)
            .expect("answer");
        assert_refusal(&resp, 404, &format!("No such container: {r}"));
    }
    assert!(
        up.requests().iter().all(|l| l.starts_with("GET ")),
        "only inspects were sent: {:?}",
        up.requests()
    );
    // An engine failure while resolving is not an absence: 502, and still nothing forwarded.
    let failing = Recorder::start(|_, _| (500, r#"{"message":"boom"}"#.into()));
    let p = StackProxy::start(failing.socket(), "deer-flow-", false);
    for r in ["6", "deer-flow-sandbox-a"] {
        let resp = raw::request(p.socket(), "POST", &format!("/containers/{r}/stop"), None)
            .expect("answer");
        assert_eq!(resp.status, 502, "{}", resp.text());
    }
    assert!(failing.requests().iter().all(|l| l.starts_with("GET ")));
}

#[test]
fn upstream_down_is_502_and_recovers_without_restart() {
    let up = Recorder::fixed("[]");
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    assert_eq!(raw::get(p.socket(), "/_ping").expect("answer").status, 200);
    let (dir, answer) = up.stop();
    let r = raw::get(p.socket(), "/_ping").expect("answer");
    assert_eq!(r.status, 502);
    assert!(
        r.message()
            .starts_with("sockproxy: upstream unavailable: cannot connect to "),
        "{}",
        r.message()
    );
    let again = Recorder::start_at(dir, answer);
    let r = raw::get(p.socket(), "/_ping").expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(again.requests(), ["GET /_ping"]);
}

#[test]
fn create_bodies_are_checked_capped_and_reserialized() {
    // The stack's network (as the proxy makes it) and its containers (none yet) are asked
    // for before a create is sent.
    let up = Recorder::start(|method, uri| {
        match method {
        "GET" if uri.contains("/networks/") => (
            200,
            r#"{"Id":"n","Name":"deer-flow-net","Driver":"bridge","Options":{"com.docker.network.bridge.enable_icc":"false"},"Labels":{"sockproxy.stack":"test-deer-flow-"}}"#.to_owned(),
        ),
        "GET" => (200, "[]".to_owned()),
        _ => (201, r#"{"Id":"x","Warnings":[]}"#.to_owned()),
    }
    });
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let target = "/v1.41/containers/create?name=deer-flow-sandbox-a";
    let big = format!(
        "{{\"Image\":\"img\",\"Env\":[\"{}\"]}}",
        "x".repeat(1 << 20)
    );
    let r = raw::request(p.socket(), "POST", target, Some(big.as_bytes())).expect("answer");
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(
        r.message(),
        "sockproxy: bad request: body larger than 1048576 bytes"
    );
    let r = raw::request(p.socket(), "POST", target, Some(b"not json")).expect("answer");
    assert_eq!(r.status, 400);
    let r = raw::request(
        p.socket(),
        "POST",
        target,
        Some(br#"{"HostConfig":{"privileged":true}}"#),
    )
    .expect("answer");
    assert_refusal(
        &r,
        403,
        "sockproxy: containers.create: HostConfig.Privileged is not allowed for this stack",
    );
    assert!(
        up.requests().is_empty(),
        "no refused create reached the engine"
    );
    // Content-Type with parameters is accepted, as dockerd accepts it.
    let body = r#"{"Image":"img","Labels":{"a":"b"}}"#;
    let req = format!(
        "POST {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = raw::send(p.socket(), req.as_bytes()).expect("answer");
    assert_eq!(r.status, 201, "{}", r.text());
    let asked = up.requests();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(asked[0], "GET /v1.41/networks/deer-flow-net");
    assert!(
        asked[1].starts_with("GET /v1.41/containers/json?all=1&filters="),
        "{asked:?}"
    );
    assert_eq!(asked[2], format!("POST {target}"));
}

/// dockerd names the pinned ID where the client named the container; the proxy puts the
/// client's name back (a container removed between the check and the act, say).
#[test]
fn engine_errors_name_what_the_client_named() {
    let up = Recorder::start(|method, uri| match method {
        "GET" if uri.ends_with("/json") => (
            200,
            format!(r#"{{"Id":"{OWN_ID}","Name":"/deer-flow-sandbox-a"}}"#),
        ),
        _ => (
            404,
            format!(r#"{{"message":"No such container: {OWN_ID}"}}"#),
        ),
    });
    let p = StackProxy::start(up.socket(), "deer-flow-", false);
    let r = raw::request(
        p.socket(),
        "POST",
        "/containers/deer-flow-sandbox-a/stop",
        None,
    )
    .expect("answer");
    assert_eq!(r.status, 404);
    assert_eq!(r.message(), "No such container: deer-flow-sandbox-a");
    assert_eq!(
        up.requests().last().map(String::as_str),
        Some(format!("POST /containers/{OWN_ID}/stop").as_str()),
        "still pinned"
    );
}
