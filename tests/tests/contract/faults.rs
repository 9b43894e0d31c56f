//! The fake's request log and fault injection, and what the proxy makes of a failing engine:
//! an unreadable or missing answer to a check is a refusal (502), never a forwarded change.

use std::time::Duration;

use serde_json::json;
use sockproxy_tests::engine::Engine;
use sockproxy_tests::fake::{Fault, FaultRule, Flavor};
use sockproxy_tests::raw;
use sockproxy_tests::stack::StackProxy;
use sockproxy_tests::step::step;
use sockproxy_tests::unique_prefix;

#[test]
fn the_request_log_shows_what_an_operation_asked() {
    let engine = Engine::start_fake(Flavor::Debian2010);
    let fake = engine.fake.as_ref().expect("fake");
    let prefix = unique_prefix();
    let proxy = StackProxy::start(&engine.socket, &prefix, false);
    let name = format!("{prefix}sandbox-log");
    let made = raw::request(
        proxy.socket(),
        "POST",
        &format!("/v1.41/containers/create?name={name}"),
        Some(
            json!({ "Image": engine.image, "Cmd": ["sleep", "600"] })
                .to_string()
                .as_bytes(),
        ),
    )
    .expect("answer");
    let id = made.json()["Id"].as_str().unwrap_or_default().to_owned();
    fake.clear_requests();
    let stop = raw::request(
        proxy.socket(),
        "POST",
        &format!("/v1.41/containers/{name}/stop"),
        None,
    )
    .expect("answer");
    assert_eq!(stop.status, 304);
    assert_eq!(
        fake.request_lines(),
        [
            format!("GET /containers/{name}/json"),
            format!("POST /containers/{id}/stop")
        ]
    );
    fake.clear_requests();
    let refused = raw::request(
        proxy.socket(),
        "POST",
        "/containers/someone-else/stop",
        None,
    )
    .expect("answer");
    assert_eq!(refused.status, 403);
    assert!(
        fake.requests().is_empty(),
        "a refusal by name asks the engine nothing"
    );
}

#[test]
fn injected_faults_reach_clients_and_the_proxy_fails_closed() {
    for flavor in Flavor::ALL {
        let engine = Engine::start_fake(flavor);
        let fake = engine.fake.as_ref().expect("fake");
        let prefix = unique_prefix();
        let proxy = StackProxy::start(&engine.socket, &prefix, false);
        let name = format!("{prefix}sandbox-f");
        let made = raw::request(
            &engine.socket,
            "POST",
            &format!("/containers/create?name={name}"),
            Some(
                json!({ "Image": engine.image, "Cmd": ["sleep", "600"] })
                    .to_string()
                    .as_bytes(),
            ),
        )
        .expect("answer");
        let id = made.json()["Id"].as_str().unwrap_or_default().to_owned();

        step("a 500 on a list passes through", || {
            fake.inject(FaultRule::new(
                Some("GET"),
                "/containers/json",
                Fault::Status500,
            ));
            let direct = raw::get(&engine.socket, "/containers/json").expect("answer");
            assert_eq!(
                (direct.status, direct.message().as_str()),
                (500, "fake-dockerd: injected fault")
            );
            let proxied = raw::get(proxy.socket(), "/containers/json").expect("answer");
            assert_eq!(
                proxied.status, 500,
                "an engine error on a list passes through"
            );
            fake.clear_faults();
        });

        step("a truncated list is a 502, never half-filtered", || {
            fake.inject(FaultRule::new(
                Some("GET"),
                "/containers/json",
                Fault::Truncated,
            ));
            let direct = raw::get(&engine.socket, "/containers/json?all=1").expect("answer");
            assert_eq!(
                serde_json::from_slice::<serde_json::Value>(&direct.body).map_err(|e| e.classify()),
                Err(serde_json::error::Category::Eof),
                "the engine's own answer is cut short"
            );
            let proxied = raw::get(proxy.socket(), "/containers/json?all=1").expect("answer");
            assert_eq!(
                proxied.status, 502,
                "a truncated list is never half-filtered"
            );
            fake.clear_faults();
        });

        step(
            "an unreadable answer to a check is a 502 and nothing is forwarded",
            || {
                for fault in [
                    Fault::Malformed,
                    Fault::Reset,
                    Fault::Status500,
                    Fault::Truncated,
                ] {
                    fake.inject(FaultRule::new(
                        Some("GET"),
                        &format!("/containers/{id}/json"),
                        fault,
                    ));
                    fake.clear_requests();
                    let r = raw::request(
                        proxy.socket(),
                        "POST",
                        &format!("/containers/{id}/stop"),
                        None,
                    )
                    .expect("answer");
                    assert_eq!(r.status, 502, "{fault:?}: {}", r.text());
                    assert!(
                        r.message().starts_with("sockproxy: upstream unavailable: "),
                        "{}",
                        r.text()
                    );
                    assert!(
                        !fake.request_lines().iter().any(|l| l.starts_with("POST")),
                        "{fault:?}: nothing was forwarded: {:?}",
                        fake.request_lines()
                    );
                    fake.clear_faults();
                }
            },
        );

        // A fault that fires a limited number of times, then the engine answers normally.
        step(
            "a fault fires its number of times; a delay is waited out",
            || {
                let mut once = FaultRule::new(None, "/_ping", Fault::Reset);
                once.times = Some(1);
                fake.inject(once);
                assert_eq!(
                    raw::get(&engine.socket, "/_ping")
                        .map(|r| r.status)
                        .map_err(|e| (e.kind(), e.to_string())),
                    Err((std::io::ErrorKind::InvalidData, "no end of headers".into())),
                    "reset: no answer"
                );
                assert_eq!(
                    raw::get(&engine.socket, "/_ping").expect("answer").status,
                    200
                );
                fake.inject(FaultRule::new(
                    None,
                    "/version",
                    Fault::Delay(Duration::from_millis(50)),
                ));
                assert_eq!(
                    raw::get(proxy.socket(), "/version").expect("answer").status,
                    200
                );
                fake.clear_faults();
            },
        );
    }
}

#[test]
fn the_fake_answers_garbage_like_dockerd_and_keeps_serving() {
    for flavor in Flavor::ALL {
        let engine = Engine::start_fake(flavor);
        let sock = &engine.socket;
        let unknown = raw::get(sock, "/nope/nothing").expect("answer");
        assert_eq!(
            (unknown.status, unknown.message().as_str()),
            (404, "page not found")
        );
        let bad_json = raw::request(
            sock,
            "POST",
            "/containers/create?name=gx",
            Some(b"{not json"),
        )
        .expect("answer");
        assert_eq!(bad_json.status, 400);
        let bad_filter = raw::get(sock, "/containers/json?filters=%7Bbroken").expect("answer");
        assert_eq!(bad_filter.status, 400);
        let mut long_line = vec![b'Z'; 9000];
        long_line.extend_from_slice(b"\r\n\r\n");
        for garbage in [
            &b"\x00\x01\x02\r\n\r\n"[..],
            b"GET\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
            &long_line,
        ] {
            if let Ok(r) = raw::send(sock, garbage) {
                assert!((400..500).contains(&r.status), "{}", r.status);
            }
        }
        assert_eq!(raw::get(sock, "/_ping").expect("still serving").body, b"OK");
    }
}
