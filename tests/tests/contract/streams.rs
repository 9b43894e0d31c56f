//! Streams and upgrades: `wait` answers its headers before the container exits, `logs
//! ?follow=1` delivers output while the container runs, attach and exec start answer 101 and
//! carry stdin with half-close (`cat` echoes, then the stream ends), megabytes of it to a client
//! that reads only after the socket buffers on the way have filled.

use std::time::Duration;

use serde_json::json;
use sockproxy_tests::raw::{self, Conn};

use crate::each_subject;

fn open(
    s: &sockproxy_tests::subject::Subject<'_>,
    method: &str,
    target: &str,
    body: &str,
    upgrade: bool,
) -> Conn {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: docker\r\n");
    if upgrade {
        req.push_str("Connection: Upgrade\r\nUpgrade: tcp\r\n");
    }
    req.push_str(&format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    ));
    Conn::open(s.socket(), req.as_bytes())
        .unwrap_or_else(|e| panic!("{target} on {}: {e}", s.label()))
}

const LONG: Duration = Duration::from_secs(30);

#[test]
fn wait_answers_headers_before_the_container_exits() {
    each_subject("wait_answers_headers_before_the_container_exits", |s| {
        let w = s.sandbox("w");
        s.create(&w, &["sleep", "600"], json!({}));
        s.start(&w);
        let mut wait = open(
            s,
            "POST",
            &format!("/containers/{w}/wait?condition=not-running"),
            "",
            false,
        );
        assert_eq!(wait.status, 200);
        assert!(
            s.running(&w),
            "the head arrived while the container still runs"
        );
        assert_eq!(
            s.req("POST", &format!("/containers/{w}/stop?t=1"), None)
                .status,
            204
        );
        let body = wait.read_until(LONG, |b| b.contains(&b'}'));
        let body = if wait.header("transfer-encoding") == Some("chunked") {
            raw::dechunk_partial(&body)
        } else {
            body
        };
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(
            v,
            s.engine.flavor.wait_body(137),
            "{}",
            String::from_utf8_lossy(&body)
        );
    });
}

#[test]
fn followed_logs_arrive_while_the_container_runs() {
    each_subject("followed_logs_arrive_while_the_container_runs", |s| {
        let l = s.sandbox("l");
        s.create(
            &l,
            &["sh", "-c", "echo alpha; echo beta; sleep 600"],
            json!({}),
        );
        s.start(&l);
        let mut logs = open(
            s,
            "GET",
            &format!("/containers/{l}/logs?follow=1&stdout=1&stderr=1"),
            "",
            false,
        );
        assert_eq!(logs.status, 200);
        let chunked = logs.header("transfer-encoding") == Some("chunked");
        let got = logs.read_until(LONG, |b| {
            let b = if chunked {
                raw::dechunk_partial(b)
            } else {
                b.to_vec()
            };
            raw::demux(&b).0.ends_with(b"beta\n")
        });
        let got = if chunked {
            raw::dechunk_partial(&got)
        } else {
            got
        };
        assert_eq!(raw::demux(&got).0, b"alpha\nbeta\n");
        assert!(s.running(&l));
    });
}

#[test]
fn exec_start_upgrades_and_keeps_half_close() {
    each_subject("exec_start_upgrades_and_keeps_half_close", |s| {
        let x = s.sandbox("x");
        s.create(&x, &["sleep", "600"], json!({}));
        s.start(&x);
        let created = s.req(
            "POST",
            &format!("/containers/{x}/exec"),
            Some(&json!({ "AttachStdin": true, "AttachStdout": true, "AttachStderr": true, "Cmd": ["cat"] })),
        );
        assert_eq!(created.status, 201, "{}", created.text());
        let exec_id = created.json()["Id"].as_str().unwrap_or_default().to_owned();
        let mut conn = open(
            s,
            "POST",
            &format!("/exec/{exec_id}/start"),
            r#"{"Detach":false,"Tty":false}"#,
            true,
        );
        assert_eq!(conn.status, 101, "{:?}", conn.headers);
        assert_eq!(conn.header("upgrade"), Some("tcp"));
        conn.write(b"through the upgrade\n").expect("write");
        conn.close_write().expect("half-close");
        let out = conn.read_to_end(LONG);
        assert_eq!(
            raw::demux(&out).0,
            b"through the upgrade\n",
            "cat echoed stdin, then EOF ended it"
        );
        let inspect = s.get(&format!("/exec/{exec_id}/json"));
        assert_eq!(inspect.json()["ExitCode"], json!(0), "{}", inspect.text());
    });
}

#[test]
fn attach_before_start_carries_stdin_like_docker_run_i() {
    each_subject("attach_before_start_carries_stdin_like_docker_run_i", |s| {
        let (a, mut conn) = attached_cat(s, "att");
        let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        conn.write(&payload).expect("write");
        conn.close_write().expect("half-close");
        let out = conn.read_to_end(LONG);
        assert!(
            raw::demux(&out).0 == payload,
            "{} bytes came back",
            raw::demux(&out).0.len()
        );
        let done = s.req("POST", &format!("/containers/{a}/wait"), None);
        let v: serde_json::Value = serde_json::from_slice(&done.body).unwrap_or_default();
        assert_eq!(v["StatusCode"], json!(0), "{}", done.text());
    });
}

#[test]
fn attach_carries_megabytes_to_a_client_that_reads_late() {
    each_subject(
        "attach_carries_megabytes_to_a_client_that_reads_late",
        |s| {
            let (_, mut conn) = attached_cat(s, "big");
            // Twenty times a Unix socket's default buffer: every writer on the way (the proxy's
            // to this client among them) has to wait for room, more than once.
            let payload: Vec<u8> = (0..4_000_000u32).map(|i| (i % 253) as u8).collect();
            let mut writer = conn.writer().expect("a second handle");
            let sent = payload.clone();
            let feed = std::thread::spawn(move || {
                use std::io::Write;
                writer.write_all(&sent)?;
                writer.shutdown(std::net::Shutdown::Write)
            });
            // Not reading yet: what cat echoes piles up until the buffers are full.
            std::thread::sleep(Duration::from_millis(500));
            let out = conn.read_to_end(LONG);
            feed.join()
                .expect("writer thread")
                .expect("stdin written whole");
            let echoed = raw::demux(&out).0;
            assert!(
                echoed == payload,
                "{} of {} bytes came back",
                echoed.len(),
                payload.len()
            );
        },
    );
}

/// A container running `cat` with stdin open, attached to before it starts (`docker run -i`),
/// then started: its name and the upgraded stream.
fn attached_cat(s: &mut sockproxy_tests::subject::Subject<'_>, name: &str) -> (String, Conn) {
    let a = s.sandbox(name);
    s.create(
        &a,
        &["cat"],
        json!({ "OpenStdin": true, "StdinOnce": true, "AttachStdin": true, "AttachStdout": true, "AttachStderr": true }),
    );
    let conn = open(
        s,
        "POST",
        &format!("/containers/{a}/attach?stream=1&stdin=1&stdout=1&stderr=1"),
        "",
        true,
    );
    assert_eq!(conn.status, 101, "{:?}", conn.headers);
    s.start(&a);
    (a, conn)
}
