//! The hostile tenant's moves on sockets: slow heads and bodies and idle connection floods on
//! its proxy's socket and its provisioner port, and the provisioner API from the tenant's own
//! loopback address (127.0.0.K+2) without a key, with a wrong one, with a bad ID and with mounts
//! outside its root.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde_json::{json, Value};
use sockproxy_tests::raw;

use crate::hostile::{Answer, Ctx, Expect};
use crate::hostile_moves::ask;

/// Slow heads, a slow body and idle connections on the proxy's socket, and idle connections
/// from the tenant's own address on the provisioner port, all held a few seconds.
pub fn slow(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    let sock = ctx.me.socket();
    let mut held: Vec<UnixStream> = Vec::new();
    for i in 0..64 {
        if let Ok(mut s) = UnixStream::connect(&sock) {
            let part: &[u8] = match i % 3 {
                0 => b"GET /_ping HTTP/1.1\r\nHo",
                1 => b"POST /containers/create HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"Image\":",
                _ => b"",
            };
            let _ = s.write_all(part);
            held.push(s);
        }
    }
    let mut tcp: Vec<TcpStream> = Vec::new();
    for _ in 0..64 {
        if let Ok(s) = connect_from(ctx, ctx.me.addr) {
            tcp.push(s);
        }
    }
    std::thread::sleep(Duration::from_secs(5));
    let out = vec![Answer::new(
        "a ping beside them",
        ask(ctx, "GET", "/_ping", None),
        Expect::Any,
    )];
    drop(held);
    drop(tcp);
    out
}

fn connect_from(ctx: &Ctx<'_>, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Stream,
        nix::sys::socket::SockFlag::empty(),
        None,
    )?;
    let from = SocketAddr::new(ctx.source, 0);
    nix::sys::socket::bind(
        std::os::fd::AsRawFd::as_raw_fd(&s),
        &nix::sys::socket::SockaddrStorage::from(from),
    )?;
    nix::sys::socket::connect(
        std::os::fd::AsRawFd::as_raw_fd(&s),
        &nix::sys::socket::SockaddrStorage::from(to),
    )?;
    let t = TcpStream::from(s);
    t.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(t)
}

/// One HTTP request on the provisioner port from the tenant's own address.
fn api_from(
    ctx: &Ctx<'_>,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> std::io::Result<(u16, String)> {
    use std::io::Read;
    let mut s = connect_from(ctx, ctx.me.addr)?;
    let b = body.map(Value::to_string).unwrap_or_default();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: p\r\nConnection: close\r\nContent-Length: {}\r\nContent-Type: application/json\r\n", b.len());
    if let Some(k) = key {
        head.push_str(&format!("X-API-Key: {k}\r\n"));
    }
    head.push_str("\r\n");
    let _ = s.write_all(head.as_bytes());
    let _ = s.write_all(b.as_bytes());
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    raw::parse(&out).map(|r| (r.status, r.text()))
}

pub fn provisioner(ctx: &mut Ctx<'_>) -> Vec<Answer> {
    let key = Some(crate::stacks::KEY);
    let oroot = ctx.other().root().display().to_string();
    let ok = json!({"sandbox_id": "0123456789abcdef", "user_id": "u", "thread_id": "t"});
    let bad = |extra: Value| json!({"sandbox_id": "0123456789abcdef", "user_id": "u", "thread_id": "t", "extra_mounts": extra});
    let asks: Vec<(&str, String, Option<&str>, Option<Value>)> = vec![
        ("GET", "/api/sandboxes".into(), None, None),
        ("POST", "/api/sandboxes".into(), None, Some(ok.clone())),
        ("POST", "/api/sandboxes".into(), Some("wrong-key"), Some(ok)),
        (
            "POST",
            "/api/sandboxes".into(),
            key,
            Some(json!({"sandbox_id": "../../etc", "user_id": "u", "thread_id": "t"})),
        ),
        (
            "POST",
            "/api/sandboxes".into(),
            key,
            Some(bad(
                json!([{"host_path": "/etc", "container_path": "/mnt/x", "read_only": false}]),
            )),
        ),
        (
            "POST",
            "/api/sandboxes".into(),
            key,
            Some(bad(
                json!([{"host_path": oroot, "container_path": "/mnt/x", "read_only": false}]),
            )),
        ),
        ("DELETE", "/api/sandboxes/..%2f..%2fetc".into(), key, None),
    ];
    asks.into_iter()
        .map(|(m, p, k, b)| {
            Answer::new(
                format!("API {m} {p} key {k:?}"),
                api_from(ctx, m, &p, k, b.as_ref()),
                Expect::Refused,
            )
        })
        .collect()
}
