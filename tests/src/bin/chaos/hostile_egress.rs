//! The hostile tenant's egress attempts outside its allowlist, from inside its own stack's
//! lifecycle-made sandbox (the held one, behind its netproxy sidecar), through an exec it makes
//! through its own proxy. The stacks run with no `--egress-allow` at all (deer-flow's isolated
//! mode: deny everything), so every attempt must fail:
//! - through the sidecar, as an HTTP proxy (`GET http://T/`) and as a tunnel (`CONNECT T`), to
//!   names (`.invalid`, `.test`), to the host's address on the sidecar's egress network (where
//!   the harness's host canary listens), to the sidecar's own 127.0.0.1 (its relay and its proxy
//!   port) and to every other stack's canary address;
//! - directly, with no proxy, to the host canary and the other stacks' canaries (the sandbox's
//!   network is internal: no route).
//!
//! An attempt through the sidecar succeeded when an answer came that is not netproxy's own
//! refusal (which alone carries `X-Netproxy-Error`); a direct one when it connected (`wget`
//! exits 0) or brought back a token. Any success is counted as a cross-stack effect by
//! `hostile::judge` (like a refused request served); another stack's canary token in the output
//! is counted there too. Open-mode stacks have no sidecar and no egress fence of the toolkit's
//! (their sandboxes sit on the proxy's own bridge network, the operator's to firewall): the move
//! does nothing there.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sockproxy_tests::raw;

use crate::hostile::{Answer, Ctx, Expect};
use crate::hostile_moves::ask;
use crate::polite::held_id;

/// Bound on one exec's whole output (every attempt's timeouts add up to less).
const EXEC_LIMIT: Duration = Duration::from_secs(120);

/// The host canary: a TCP listener on every address of the run's namespace (so on each bridge
/// network's gateway address too) writing a token to whoever connects. A sandbox that reads it
/// reached the host.
#[derive(Debug, Clone)]
pub struct HostCanary {
    pub port: u16,
    pub token: String,
}

impl HostCanary {
    /// Listens until `stop`.
    pub fn start(token: String, stop: Arc<AtomicBool>) -> std::io::Result<Self> {
        let l = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], 0)))?;
        l.set_nonblocking(true)?;
        let port = l.local_addr()?.port();
        let answer = format!("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{token}\n");
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((mut s, peer)) => {
                        println!("host canary: connection from {peer}");
                        let _ = s.write_all(answer.as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        });
        Ok(Self { port, token })
    }
}

/// How an attempt is made, and so how it is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Proxy,
    Direct,
}

struct Attempt {
    label: String,
    via: Via,
    shell: String,
}

pub fn egress(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    if !ctx.me.restricted {
        return Vec::new();
    }
    let Ok(prefix) = stackmodel::Prefix::parse(&ctx.me.prefix) else {
        return Vec::new();
    };
    let names = stackmodel::Names::new(&prefix, &held_id(ctx.me.k));
    let gateway = raw::get(ctx.me.engine(), &format!("/networks/{}", names.egress))
        .ok()
        .and_then(|r| {
            r.json()["IPAM"]["Config"]
                .as_array()
                .and_then(|c| c.iter().find_map(|c| c["Gateway"].as_str()))
                .map(str::to_owned)
        });
    let host = ctx.host.clone();
    let canaries: Vec<String> = ctx
        .others
        .iter()
        .map(|o| o.canary_ids().1)
        .filter(|ip| !ip.is_empty())
        .collect();
    let mut targets = vec![
        "evil.invalid:80".to_owned(),
        "exfil.chaos.test:443".to_owned(),
        "127.0.0.1:8080".to_owned(),
        "127.0.0.1:3128".to_owned(),
    ];
    let mut direct = Vec::new();
    if let Some(gw) = &gateway {
        targets.push(format!("{gw}:{}", host.port));
        direct.push(format!("{gw}:{}", host.port));
    }
    for ip in &canaries {
        targets.push(format!("{ip}:8080"));
        direct.push(format!("{ip}:8080"));
    }
    let side = &names.sidecar;
    let mut attempts = Vec::new();
    for t in &targets {
        let get =
            format!("GET http://{t}/ HTTP/1.1\\r\\nHost: {t}\\r\\nConnection: close\\r\\n\\r\\n");
        let connect = format!("CONNECT {t} HTTP/1.1\\r\\nHost: {t}\\r\\n\\r\\n");
        for (what, req) in [("GET via sidecar", get), ("CONNECT via sidecar", connect)] {
            attempts.push(Attempt {
                label: format!("{what} to {t}"),
                via: Via::Proxy,
                shell: format!("printf '{req}' | nc -w 4 {side} 3128"),
            });
        }
    }
    for t in &direct {
        attempts.push(Attempt {
            label: format!("direct wget of http://{t}/"),
            via: Via::Direct,
            shell: format!(
                "env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY \
                 wget -q -T 3 -O- http://{t}/"
            ),
        });
    }
    let script: String = attempts
        .iter()
        .enumerate()
        // The exit line on a line of its own, whatever the output ended with.
        .map(|(i, a)| {
            format!(
                "echo '@@{i}'; {} 2>&1; r=$?; echo; echo \"@@rc $r\"; ",
                a.shell
            )
        })
        .collect();
    let (exec, out) = run_exec(ctx, &names.sandbox, &script);
    let mut answers = vec![exec];
    if out.is_empty() {
        return answers;
    }
    let (mut by_sidecar, mut silent) = (0, 0);
    for (i, a) in attempts.iter().enumerate() {
        let seg = segment(&out, i);
        if seg.to_ascii_lowercase().contains("x-netproxy-error") {
            by_sidecar += 1;
        } else if !seg.contains("HTTP/1.") {
            silent += 1;
        }
        answers.push(judge_attempt(a, seg, &host.token));
    }
    // What shows the attempts reached the fence at all: the sidecar's own refusals.
    println!(
        "egress (stack {}): {} attempts from {}, {by_sidecar} refused by its sidecar, \
         {silent} with no HTTP answer (no route, no name, closed)",
        ctx.me.k,
        attempts.len(),
        names.sandbox
    );
    answers
}

/// The output between attempt `i`'s marker and the next.
fn segment(out: &str, i: usize) -> &str {
    let start = format!("@@{i}\n");
    let Some(from) = out.find(&start).map(|p| p + start.len()) else {
        return "";
    };
    let rest = &out[from..];
    let end = rest.find("\n@@").map_or(rest.len(), |p| p + 1);
    let tail = &rest[end..];
    // Keep the exit line with it.
    let rc_end = tail
        .strip_prefix("@@rc ")
        .and_then(|t| t.find('\n'))
        .map_or(0, |p| p + 6);
    &rest[..end + rc_end]
}

fn judge_attempt(a: &Attempt, seg: &str, host_token: &str) -> Answer {
    let rc_zero = seg.contains("@@rc 0\n");
    let head_end = seg.find("\r\n\r\n").unwrap_or(seg.len());
    let head = &seg[..head_end];
    let answered = head.lines().any(|l| l.starts_with("HTTP/1."));
    let refusal = head.to_ascii_lowercase().contains("x-netproxy-error");
    let served = seg.contains(host_token)
        || match a.via {
            Via::Proxy => answered && !refusal,
            Via::Direct => rc_zero,
        };
    let status = if served { 200 } else { 403 };
    Answer::new(
        format!("from its sandbox: {}", a.label),
        Ok((status, seg.to_owned())),
        Expect::Refused,
    )
}

/// Runs `script` in `container` through the tenant's own proxy; the exec create's answer and
/// the command's output (stdout and stderr together, empty when it could not run).
fn run_exec(ctx: &Ctx<'_>, container: &str, script: &str) -> (Answer, String) {
    let body = json!({"AttachStdout": true, "AttachStderr": true, "Cmd": ["sh", "-c", script]});
    let made = ask(
        ctx,
        "POST",
        &format!("/containers/{container}/exec"),
        Some(&body),
    );
    let id = match &made {
        Ok((201, text)) => serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v["Id"].as_str().map(str::to_owned)),
        _ => None,
    };
    let answer = Answer::new(
        format!("exec into its own sandbox {container}"),
        made,
        Expect::Any,
    );
    let Some(id) = id else {
        return (answer, String::new());
    };
    let req = raw::exec_start_request(&id);
    let Ok(mut conn) = raw::Conn::open(&ctx.me.socket(), &req) else {
        return (answer, String::new());
    };
    if !matches!(conn.status, 101 | 200) {
        return (answer, String::new());
    }
    let got = conn.read_to_end(EXEC_LIMIT);
    let (out, err) = raw::demux(&got);
    let mut text = String::from_utf8_lossy(&out).into_owned();
    text.push_str(&String::from_utf8_lossy(&err));
    (answer, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(via: Via) -> Attempt {
        Attempt {
            label: "x".into(),
            via,
            shell: String::new(),
        }
    }

    #[test]
    fn segments_split_on_markers_and_keep_the_exit_line() {
        let out = "@@0\nHTTP/1.1 403 Forbidden\r\nX-Netproxy-Error: not_allowed\r\n\r\n{}\n@@rc 0\n@@1\nwget: bad address\n@@rc 1\n";
        assert!(segment(out, 0).contains("403") && segment(out, 0).ends_with("@@rc 0\n"));
        assert_eq!(segment(out, 1), "wget: bad address\n@@rc 1\n");
        assert_eq!(segment(out, 2), "");
    }

    #[test]
    fn only_an_answer_that_is_not_netproxys_refusal_or_a_token_is_a_success() {
        let refused = "HTTP/1.1 403 Forbidden\r\nx-netproxy-error: not_allowed\r\n\r\n{}\n@@rc 0\n";
        let served = "HTTP/1.1 404 Not Found\r\nServer: busybox\r\n\r\n\n@@rc 0\n";
        let nothing = "nc: bad address 'x'\n@@rc 1\n";
        let status = |a: &Attempt, s: &str| judge_attempt(a, s, "HOST-TOKEN").status;
        let (proxy, direct) = (attempt(Via::Proxy), attempt(Via::Direct));
        assert_eq!(status(&proxy, refused), Some(403));
        assert_eq!(status(&proxy, served), Some(200));
        assert_eq!(status(&proxy, nothing), Some(403));
        assert_eq!(status(&direct, nothing), Some(403));
        assert_eq!(status(&direct, "@@rc 0\n"), Some(200));
        assert_eq!(status(&direct, "HOST-TOKEN\n@@rc 1\n"), Some(200));
    }
}
