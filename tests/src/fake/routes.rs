//! The fake engine's HTTP side: the accept loop, request logging and fault injection, API
//! version handling, routing, and the handlers that answer at once. Streaming handlers (wait,
//! logs, attach, exec start, events) live in `streams`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use super::state::{self, Container, Endpoint, Lookup, RunState};
use super::{hostconfig, render, streams, system, Fault, Logged, Shared};

pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A handler's answer before it becomes a response.
pub enum Reply {
    Json(u16, Value),
    Error(u16, String),
    Empty(u16),
    Raw(Box<Response<Body>>),
}

/// Returned by the service to make hyper drop the connection (the `Reset` fault).
#[derive(Debug)]
pub struct InjectedReset;

impl std::fmt::Display for InjectedReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("fault injected: connection reset")
    }
}

impl std::error::Error for InjectedReset {}

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

pub async fn serve(
    listener: tokio::net::UnixListener,
    shared: Arc<Shared>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| handle(shared.clone(), req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades()
                        .await;
                });
            }
        }
    }
    // Stop every fake program so waiters and streams end.
    let stops: Vec<_> = shared
        .stops
        .lock()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default();
    for s in stops {
        let _ = s.send(Some(137));
    }
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, InjectedReset> {
    let method = req.method().as_str().to_owned();
    let raw_path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let (version, segments) = split_version(&raw_path);
    let path = format!("/{}", segments.join("/"));
    shared.record(Logged {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
    });
    let fault = shared.fault_for(&method, &path);
    match fault {
        Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
        Some(Fault::Reset) => return Err(InjectedReset),
        Some(Fault::Status500) => {
            return Ok(finish(
                &shared,
                Reply::Error(500, "fake-dockerd: injected fault".into()),
            ))
        }
        Some(Fault::Status404) => {
            return Ok(finish(
                &shared,
                Reply::Error(404, "fake-dockerd: injected not found".into()),
            ))
        }
        _ => {}
    }
    let reply = match version
        .as_deref()
        .and_then(|v| shared.flavor.version_error(v))
    {
        Some(msg) => Reply::Error(400, msg),
        None => {
            let params: Vec<(String, String)> = form_urlencoded_pairs(&query);
            let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
            route(&shared, req, &method, &segs, &params, version.as_deref()).await
        }
    };
    let reply = match (fault, reply) {
        (Some(Fault::Truncated), Reply::Json(_, v)) => {
            let text = v.to_string();
            let half = text.len() / 2;
            Reply::Raw(Box::new(json_response(
                200,
                Bytes::from(text.into_bytes()).slice(..half),
            )))
        }
        (Some(Fault::Malformed), Reply::Json(..)) => Reply::Raw(Box::new(json_response(
            200,
            Bytes::from_static(b"{\"Id\": <not json>"),
        ))),
        (_, r) => r,
    };
    Ok(finish(&shared, reply))
}

fn json_response(status: u16, body: Bytes) -> Response<Body> {
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut()
        .insert("Content-Type", HeaderValue::from_static("application/json"));
    resp
}

/// dockerd's encoder writes a newline after every JSON value.
fn json_bytes(v: &Value) -> Bytes {
    let mut out = v.to_string().into_bytes();
    out.push(b'\n');
    Bytes::from(out)
}

fn finish(shared: &Shared, reply: Reply) -> Response<Body> {
    let mut resp = match reply {
        Reply::Json(status, v) => json_response(status, json_bytes(&v)),
        Reply::Error(status, message) => {
            json_response(status, json_bytes(&json!({ "message": message })))
        }
        Reply::Empty(status) => {
            let mut r = Response::new(full(Bytes::new()));
            *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NO_CONTENT);
            r
        }
        Reply::Raw(r) => *r,
    };
    let f = shared.flavor;
    let h = resp.headers_mut();
    h.insert("Api-Version", HeaderValue::from_static(f.api_version()));
    h.insert("Docker-Experimental", HeaderValue::from_static("false"));
    h.insert("Ostype", HeaderValue::from_static("linux"));
    if let Ok(v) = HeaderValue::from_str(&format!("Docker/{} (linux)", f.engine_version())) {
        h.insert("Server", v);
    }
    resp
}

/// `/v1.41/containers/json` → (Some("1.41"), ["containers", "json"]).
fn split_version(path: &str) -> (Option<String>, Vec<String>) {
    let mut segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let version = segs
        .first()
        .and_then(|s| s.strip_prefix('v'))
        .filter(|v| {
            v.split_once('.').is_some_and(|(a, b)| {
                !a.is_empty()
                    && !b.is_empty()
                    && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
            })
        })
        .map(str::to_owned);
    if version.is_some() {
        segs.remove(0);
    }
    (version, segs)
}

/// Go's url.ParseQuery reading: '&'-separated, '+' is a space, %XX decoded.
fn form_urlencoded_pairs(q: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(q.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub fn param<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

pub fn flag(params: &[(String, String)], key: &str) -> bool {
    matches!(param(params, key), Some("1" | "true" | "True" | "yes"))
}

pub async fn read_bytes(body: Incoming) -> Result<Bytes, Reply> {
    Ok(Limited::new(body, 16 << 20)
        .collect()
        .await
        .map_err(|e| Reply::Error(400, format!("reading body: {e}")))?
        .to_bytes())
}

pub async fn read_json(body: Incoming) -> Result<Value, Reply> {
    let bytes = read_bytes(body).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    serde_json::from_slice(&bytes).map_err(|e| Reply::Error(400, format!("invalid JSON: {e}")))
}

/// Looks a container up and maps failures to dockerd's answers.
pub fn container_index(shared: &Shared, st: &state::State, r: &str) -> Result<usize, Reply> {
    st.find_container(r).map_err(|e| match e {
        Lookup::NotFound => Reply::Error(404, shared.flavor.no_such_container(r)),
        Lookup::Ambiguous => {
            let (status, msg) = shared.flavor.ambiguous_prefix(r);
            Reply::Error(status, msg)
        }
    })
}

async fn route(
    shared: &Arc<Shared>,
    mut req: Request<Incoming>,
    method: &str,
    segs: &[&str],
    params: &[(String, String)],
    version: Option<&str>,
) -> Reply {
    use super::{containers as c, networks as n};
    let upgrade = req.headers().contains_key(http::header::UPGRADE);
    match (method, segs) {
        ("GET" | "HEAD", ["_ping"]) => n::ping(shared, method == "HEAD"),
        ("GET", ["version"]) => Reply::Json(200, render::version(shared.flavor)),
        ("GET", ["info"]) => Reply::Json(200, system::info(&shared.state(), shared.flavor)),
        ("GET", ["images", "json"]) => system::images(shared, params),
        ("GET", ["events"]) => streams::events(shared),
        ("GET", ["containers", "json"]) => c::list(shared, params),
        ("POST", ["containers", "create"]) => match read_bytes(req.into_body()).await {
            Ok(raw) => match hostconfig::decode(shared.flavor, &raw) {
                Ok(body) => c::create(shared, param(params, "name"), body),
                Err(e) => Reply::Error(400, e),
            },
            Err(r) => r,
        },
        ("DELETE", ["containers", rest @ ..]) if !rest.is_empty() => {
            c::remove(shared, &rest.join("/"), flag(params, "force")).await
        }
        (_, ["containers", rest @ .., action]) if !rest.is_empty() => {
            let r = rest.join("/");
            match (method, *action) {
                ("GET", "json") => c::inspect(shared, &r),
                ("POST", "start") => {
                    let h = req.headers();
                    let length = h
                        .get(http::header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok()?.parse().ok());
                    let chunked = h.contains_key(http::header::TRANSFER_ENCODING);
                    let ct = h
                        .get(http::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let raw = match read_bytes(req.into_body()).await {
                        Ok(b) => b,
                        Err(e) => return e,
                    };
                    let f = shared.flavor;
                    match hostconfig::start_body(f, version, length, chunked, ct.as_deref(), &raw) {
                        Ok(replacement) => c::start(shared, &r, replacement),
                        Err(e) => Reply::Error(400, e),
                    }
                }
                ("POST", "stop") => c::stop(shared, &r).await,
                ("POST", "restart") => c::restart(shared, &r).await,
                ("POST", "kill") => c::kill(shared, &r, param(params, "signal")).await,
                ("POST", "wait") => streams::wait(shared, &r, param(params, "condition")),
                ("GET", "logs") => streams::logs(shared, &r, params),
                ("POST", "attach") => {
                    let on_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
                    streams::attach(shared, &r, params, on_upgrade)
                }
                ("POST", "resize") => c::exists_then(shared, &r, Reply::Empty(200)),
                ("GET", "top") => c::top(shared, &r),
                ("POST", "update") => match read_json(req.into_body()).await {
                    Ok(body) => c::update(shared, &r, &body),
                    Err(e) => e,
                },
                ("POST", "rename") => c::rename(shared, &r, param(params, "name").unwrap_or("")),
                ("POST", "exec") => match read_json(req.into_body()).await {
                    Ok(body) => c::exec_create(shared, &r, &body),
                    Err(e) => e,
                },
                ("PUT", "archive") => match read_bytes(req.into_body()).await {
                    Ok(tar) => c::archive_put(shared, &r, params, &tar),
                    Err(e) => e,
                },
                ("GET" | "HEAD", "archive") => c::archive(shared, &r, method, params),
                _ => Reply::Error(404, "page not found".into()),
            }
        }
        ("GET", ["exec", id, "json"]) => c::exec_inspect(shared, id),
        ("POST", ["exec", id, "resize"]) => c::exec_exists_then(shared, id, Reply::Empty(200)),
        ("POST", ["exec", id, "start"]) => {
            let on_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
            let body = read_json(req.into_body()).await.unwrap_or(Value::Null);
            streams::exec_start(shared, id, &body, on_upgrade)
        }
        ("GET", ["networks"]) => n::list(shared, params),
        ("POST", ["networks", "create"]) => match read_json(req.into_body()).await {
            Ok(body) => n::create(shared, &body),
            Err(r) => r,
        },
        ("GET", ["networks", r]) => n::inspect(shared, r),
        ("DELETE", ["networks", r]) => n::remove(shared, r),
        ("POST", ["networks", r, action @ ("connect" | "disconnect")]) => {
            match read_json(req.into_body()).await {
                Ok(body) => n::attach(shared, r, &body, *action == "connect"),
                Err(e) => e,
            }
        }
        ("GET", ["images", rest @ .., "json"]) if !rest.is_empty() => {
            n::image_inspect(shared, &rest.join("/"))
        }
        ("POST", ["images", "create"]) => n::pull(shared, params),
        ("GET", ["volumes"]) => Reply::Json(200, json!({ "Volumes": [], "Warnings": [] })),
        ("GET", ["volumes", name]) => Reply::Error(404, format!("get {name}: no such volume")),
        ("GET", ["plugins"]) => Reply::Json(200, json!([])),
        ("GET", ["plugins", name, "json"]) => {
            Reply::Error(404, format!("plugin \"{name}\" not found"))
        }
        _ => Reply::Error(404, "page not found".into()),
    }
}

/// Adds the endpoint a container gets on `network` (IP, endpoint ID).
/// On `host` and `none` the endpoint has no address, as in dockerd.
pub fn endpoint_for(st: &mut state::State, network: &str, aliases: Vec<String>) -> Endpoint {
    let addressless = st
        .networks
        .iter()
        .any(|n| n.name == network && matches!(n.driver.as_str(), "host" | "null"));
    let ip = if addressless {
        String::new()
    } else {
        st.next_ip(network)
    };
    let endpoint_id = st.next_id();
    Endpoint {
        endpoint_id,
        ip,
        aliases,
    }
}

pub fn is_running(c: &Container) -> bool {
    c.state == RunState::Running
}
