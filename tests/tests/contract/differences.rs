//! Where the fake deliberately differs from dockerd, and why it does not matter. Each
//! difference is pinned here so that changing it is a decision, not an accident.
//!
//! - The 101 status line reads `Switching Protocols` (hyper's reason phrase), where dockerd
//!   writes `UPGRADED`. Clients read the status code only (docker CLI, docker-py, bollard).
//! - Network lookups treat an ambiguous ID prefix as not found; no component addresses
//!   networks by prefix, and the proxy answers both as absent anyway.
//! - The fake keeps no filesystem: archive reads find nothing and writes are discarded. The
//!   toolkit never copies files in or out.

use serde_json::json;
use sockproxy_tests::engine::Engine;
use sockproxy_tests::fake::Flavor;
use sockproxy_tests::raw;

fn create(engine: &Engine, name: &str, body: serde_json::Value) {
    let r = raw::request(
        &engine.socket,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(body.to_string().as_bytes()),
    )
    .expect("answer");
    assert_eq!(r.status, 201, "{}", r.text());
}

/// dockerd stops a `sleep` (PID 1 ignores SIGTERM) with SIGKILL after the timeout: exit 137.
/// The fake skips the timeout; the end state and the code are the same, only faster.
#[test]
fn stop_ends_at_once_with_the_code_a_timed_out_stop_gives() {
    let e = Engine::start_fake(Flavor::Debian2010);
    create(
        &e,
        "d1",
        json!({ "Image": e.image, "Cmd": ["sleep", "600"] }),
    );
    assert_eq!(
        raw::request(&e.socket, "POST", "/containers/d1/start", None)
            .expect("ok")
            .status,
        204
    );
    assert_eq!(
        raw::request(&e.socket, "POST", "/containers/d1/stop?t=600", None)
            .expect("ok")
            .status,
        204
    );
    let state = raw::get(&e.socket, "/containers/d1/json")
        .expect("ok")
        .json()["State"]
        .clone();
    assert_eq!(
        (state["Running"].clone(), state["ExitCode"].clone()),
        (json!(false), json!(137))
    );
}

/// A fake container runs only the busybox commands the tests use; anything else fails the way a
/// missing binary does. Cases never run other programs.
#[test]
fn only_the_commands_tests_use_run() {
    let e = Engine::start_fake(Flavor::Debian2010);
    create(
        &e,
        "d2",
        json!({ "Image": e.image, "Cmd": ["nginx", "-g", "daemon off;"] }),
    );
    assert_eq!(
        raw::request(&e.socket, "POST", "/containers/d2/start", None)
            .expect("ok")
            .status,
        204
    );
    let done = raw::request(&e.socket, "POST", "/containers/d2/wait", None).expect("ok");
    assert_eq!(done.json()["StatusCode"], json!(127));
    let logs = raw::get(&e.socket, "/containers/d2/logs?stderr=1").expect("ok");
    assert!(String::from_utf8_lossy(&raw::demux(&logs.body).1).contains("nginx"));
}

/// Stdin reaches a fake program only when attached before it starts, which is what
/// `docker run -i` does; a fake program started without attached stdin sees EOF at once (on
/// dockerd, `cat` with an open stdin would wait). The toolkit never attaches stdin later.
#[test]
fn a_program_without_stdin_attached_before_start_sees_eof() {
    let e = Engine::start_fake(Flavor::Debian2010);
    create(
        &e,
        "d3",
        json!({ "Image": e.image, "Cmd": ["cat"], "OpenStdin": true }),
    );
    assert_eq!(
        raw::request(&e.socket, "POST", "/containers/d3/start", None)
            .expect("ok")
            .status,
        204
    );
    let done = raw::request(&e.socket, "POST", "/containers/d3/wait", None).expect("ok");
    assert_eq!(done.json()["StatusCode"], json!(0), "{}", done.text());
}

#[test]
fn archives_hold_nothing() {
    let e = Engine::start_fake(Flavor::Docker29);
    create(&e, "d4", json!({ "Image": e.image, "Cmd": ["true"] }));
    let r = raw::get(&e.socket, "/containers/d4/archive?path=/etc/hostname").expect("ok");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.message(),
        "Could not find the file /etc/hostname in container d4"
    );
}
