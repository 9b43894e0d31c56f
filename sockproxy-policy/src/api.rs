//! Typed Docker Engine API endpoints: (method, canonical target) → `Endpoint`. Anything the
//! proxy does not know becomes `Endpoint::Unknown` and is denied by policy.

use http::Method;

use crate::canon::Target;
use crate::reference::ObjRef;

/// What a request to a single container does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerOp {
    Inspect,
    Start,
    Stop,
    Kill,
    Restart,
    Wait,
    Remove,
    Logs,
    Attach,
    Resize,
    ExecCreate,
    Archive,
    Top,
    Rename,
    Update,
}

impl ContainerOp {
    pub fn name(self) -> &'static str {
        match self {
            Self::Inspect => "containers.inspect",
            Self::Start => "containers.start",
            Self::Stop => "containers.stop",
            Self::Kill => "containers.kill",
            Self::Restart => "containers.restart",
            Self::Wait => "containers.wait",
            Self::Remove => "containers.remove",
            Self::Logs => "containers.logs",
            Self::Attach => "containers.attach",
            Self::Resize => "containers.resize",
            Self::ExecCreate => "containers.exec",
            Self::Archive => "containers.archive",
            Self::Top => "containers.top",
            Self::Rename => "containers.rename",
            Self::Update => "containers.update",
        }
    }

    /// The query parameters dockerd reads for this operation (20.10 and current), less those
    /// no stack may pass: `start`'s `checkpoint` and `checkpoint-dir` name a directory dockerd
    /// joins onto a path without checking it (fixed in moby after 28.5), on experimental
    /// engines restoring a process from files a sandbox could write. `detachKeys` on start is
    /// API 1.24's; dockerd ignores it and clients still send it. Anything else is refused by
    /// name, never forwarded.
    pub fn query_params(self) -> &'static [&'static str] {
        match self {
            Self::Inspect => &["size"],
            Self::Start => &["detachKeys"],
            Self::Stop | Self::Restart => &["t", "signal"],
            Self::Kill => &["signal"],
            Self::Wait => &["condition"],
            Self::Remove => &["force", "v", "link"],
            Self::Logs => &[
                "follow",
                "stdout",
                "stderr",
                "since",
                "until",
                "timestamps",
                "tail",
                "details",
                "format",
            ],
            Self::Attach => &["stream", "stdin", "stdout", "stderr", "logs", "detachKeys"],
            Self::Resize => &["h", "w"],
            Self::Archive => &["path", "noOverwriteDirNonDir", "copyUIDGID"],
            Self::Top => &["ps_args"],
            Self::Rename => &["name"],
            Self::ExecCreate | Self::Update => &[],
        }
    }

    /// Reading a container's state or output does not change it; everything else does.
    pub fn is_read(self) -> bool {
        matches!(self, Self::Inspect | Self::Wait | Self::Logs | Self::Top)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecOp {
    Start,
    Inspect,
    Resize,
}

impl ExecOp {
    pub fn name(self) -> &'static str {
        match self {
            Self::Start => "exec.start",
            Self::Inspect => "exec.inspect",
            Self::Resize => "exec.resize",
        }
    }

    /// The query parameters dockerd reads for this operation; anything else is refused.
    pub fn query_params(self) -> &'static [&'static str] {
        match self {
            Self::Resize => &["h", "w"],
            Self::Start | Self::Inspect => &[],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkOp {
    Inspect,
    Remove,
    Connect,
    Disconnect,
}

impl NetworkOp {
    pub fn name(self) -> &'static str {
        match self {
            Self::Inspect => "networks.inspect",
            Self::Remove => "networks.remove",
            Self::Connect => "networks.connect",
            Self::Disconnect => "networks.disconnect",
        }
    }

    /// The query parameters dockerd reads for this operation; anything else is refused.
    pub fn query_params(self) -> &'static [&'static str] {
        match self {
            Self::Inspect => &["verbose", "scope"],
            Self::Remove | Self::Connect | Self::Disconnect => &[],
        }
    }
}

/// Object kinds that exist on the host but never in a stack's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind {
    Plugin,
}

/// What a stack may do to one of its named volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeOp {
    Inspect,
    Remove,
}

impl VolumeOp {
    pub fn name(self) -> &'static str {
        match self {
            Self::Inspect => "volumes.inspect",
            Self::Remove => "volumes.remove",
        }
    }

    /// The query parameters dockerd reads for this operation; anything else is refused.
    pub fn query_params(self) -> &'static [&'static str] {
        match self {
            Self::Inspect => &[],
            Self::Remove => &["force"],
        }
    }
}

/// One Docker Engine API endpoint, as far as the proxy distinguishes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Ping,
    Version,
    /// `GET /info`: answered for the stack alone (or refused with `--info deny`).
    Info,
    ContainerList,
    ContainerCreate,
    Container {
        op: ContainerOp,
        target: ObjRef,
    },
    Exec {
        op: ExecOp,
        id: String,
    },
    NetworkList,
    NetworkCreate,
    Network {
        op: NetworkOp,
        target: ObjRef,
    },
    /// `GET /images/{reference}/json`; the reference may span segments (`library/busybox:1`).
    ImageInspect {
        reference: String,
    },
    /// `POST /images/create`: a pull, allowed only for `--allow-image` references.
    ImagePull,
    /// `GET /events`: streamed, filtered to the stack's own objects.
    Events,
    /// `GET /volumes`: filtered to the stack's named volumes.
    VolumeList,
    /// Inspect or remove a volume by name (`is_word_ish`).
    Volume {
        op: VolumeOp,
        name: String,
    },
    /// A known endpoint that is never allowed (host-wide or out of this toolkit's needs).
    Denied {
        op: String,
    },
    /// Inspect of an object kind a stack never owns (plugins): absent in its view.
    NotInView {
        kind: ViewKind,
        name: String,
    },
    /// A path segment where a reference belongs is not a usable reference.
    BadRef {
        op: &'static str,
    },
    Unknown {
        op: String,
    },
}

impl Endpoint {
    /// The operation name used in refusal messages and logs.
    pub fn op(&self) -> String {
        match self {
            Self::Denied { op } | Self::Unknown { op } => op.clone(),
            _ => self.op_label().into(),
        }
    }

    /// `op()` as a metric label, always one of a fixed set whatever the client sent: an
    /// unknown path is `unknown`, a denied operation named after the client's word that is not
    /// in `DENIED_OPS` is `denied.other`.
    pub fn op_label(&self) -> &'static str {
        match self {
            Self::Ping => "system.ping",
            Self::Version => "system.version",
            Self::Info => "system.info",
            Self::ContainerList => "containers.list",
            Self::ContainerCreate => "containers.create",
            Self::Container { op, .. } => op.name(),
            Self::Exec { op, .. } => op.name(),
            Self::NetworkList => "networks.list",
            Self::NetworkCreate => "networks.create",
            Self::Network { op, .. } => op.name(),
            Self::ImageInspect { .. } => "images.inspect",
            Self::ImagePull => "images.pull",
            Self::Events => "system.events",
            Self::VolumeList => "volumes.list",
            Self::Volume { op, .. } => op.name(),
            Self::Denied { op } => DENIED_OPS
                .iter()
                .find(|known| *known == op)
                .copied()
                .unwrap_or("denied.other"),
            Self::Unknown { .. } => "unknown",
            Self::BadRef { op } => op,
            Self::NotInView {
                kind: ViewKind::Plugin,
                ..
            } => "plugins.inspect",
        }
    }
}

/// The denied operations a metric names as they are (`Endpoint::op_label`): every fixed name
/// `denied_family`, `containers`, `networks` and `images` give, and the Engine API's own
/// words for the rest.
const DENIED_OPS: [&str; 28] = [
    "containers.prune",
    "containers.export",
    "containers.stats",
    "containers.changes",
    "containers.pause",
    "containers.unpause",
    "networks.prune",
    "images",
    "images.list",
    "images.commit",
    "system",
    "system.info",
    "system.events",
    "system.auth",
    "system.df",
    "swarm.swarm",
    "swarm.nodes",
    "swarm.services",
    "swarm.tasks",
    "plugins",
    "secrets",
    "configs",
    "volumes",
    "build",
    "session",
    "distribution",
    "grpc",
    "containers.checkpoints",
];

pub fn parse(method: &Method, target: &Target) -> Endpoint {
    let segs: Vec<&str> = target.segments.iter().map(String::as_str).collect();
    let m = method.as_str();
    let unknown = || Endpoint::Unknown {
        op: format!("{m} {}", target.path()),
    };
    match segs.as_slice() {
        ["_ping"] if m == "GET" || m == "HEAD" => Endpoint::Ping,
        ["version"] if m == "GET" => Endpoint::Version,
        ["info"] if m == "GET" => Endpoint::Info,
        ["events"] if m == "GET" => Endpoint::Events,
        ["containers", rest @ ..] => containers(m, rest).unwrap_or_else(unknown),
        ["exec", id, action] => exec(m, id, action).unwrap_or_else(unknown),
        ["networks", rest @ ..] => networks(m, rest).unwrap_or_else(unknown),
        ["images", rest @ ..] => images(m, rest),
        ["volumes"] if m == "GET" => Endpoint::VolumeList,
        ["volumes", name] if (m == "GET" || m == "DELETE") && is_word_ish(name) => {
            Endpoint::Volume {
                op: if m == "GET" {
                    VolumeOp::Inspect
                } else {
                    VolumeOp::Remove
                },
                name: (*name).to_owned(),
            }
        }
        // `docker inspect NAME` walks containers, images, networks, volumes, /info, plugins and
        // goes on only past "not found": answering plugins as absent keeps it working.
        ["plugins", name, "json"] if m == "GET" => Endpoint::NotInView {
            kind: ViewKind::Plugin,
            name: (*name).to_owned(),
        },
        [first, rest @ ..] => denied_family(first, rest).unwrap_or_else(unknown),
        [] => unknown(),
    }
}

fn container_ref(op: ContainerOp, raw: &str) -> Endpoint {
    match ObjRef::parse(raw) {
        Some(target) => Endpoint::Container { op, target },
        None => Endpoint::BadRef { op: op.name() },
    }
}

fn containers(m: &str, rest: &[&str]) -> Option<Endpoint> {
    use ContainerOp::*;
    let ep = match (m, rest) {
        ("GET", ["json"]) => Endpoint::ContainerList,
        ("POST", ["create"]) => Endpoint::ContainerCreate,
        ("POST", ["prune"]) => Endpoint::Denied {
            op: "containers.prune".into(),
        },
        ("DELETE", [r]) => container_ref(Remove, r),
        (_, [r, action]) => {
            let op = match (m, *action) {
                ("GET", "json") => Inspect,
                ("POST", "start") => Start,
                ("POST", "stop") => Stop,
                ("POST", "kill") => Kill,
                ("POST", "restart") => Restart,
                ("POST", "wait") => Wait,
                ("GET", "logs") => Logs,
                ("POST", "attach") => Attach,
                ("POST", "resize") => Resize,
                ("POST", "exec") => ExecCreate,
                ("GET" | "PUT" | "HEAD", "archive") => Archive,
                ("GET", "top") => Top,
                ("POST", "rename") => Rename,
                ("POST", "update") => Update,
                (_, a) if is_word(a) => {
                    return Some(Endpoint::Denied {
                        op: format!("containers.{a}"),
                    })
                }
                _ => return None,
            };
            container_ref(op, r)
        }
        _ => return None,
    };
    Some(ep)
}

fn exec(m: &str, id: &str, action: &str) -> Option<Endpoint> {
    let op = match (m, action) {
        ("POST", "start") => ExecOp::Start,
        ("GET", "json") => ExecOp::Inspect,
        ("POST", "resize") => ExecOp::Resize,
        _ => return None,
    };
    if !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(Endpoint::BadRef { op: op.name() });
    }
    Some(Endpoint::Exec {
        op,
        id: id.to_owned(),
    })
}

fn networks(m: &str, rest: &[&str]) -> Option<Endpoint> {
    let op = match (m, rest) {
        ("GET", []) => return Some(Endpoint::NetworkList),
        ("POST", ["create"]) => return Some(Endpoint::NetworkCreate),
        ("POST", ["prune"]) => {
            return Some(Endpoint::Denied {
                op: "networks.prune".into(),
            })
        }
        ("GET", [_]) => NetworkOp::Inspect,
        ("DELETE", [_]) => NetworkOp::Remove,
        ("POST", [_, "connect"]) => NetworkOp::Connect,
        ("POST", [_, "disconnect"]) => NetworkOp::Disconnect,
        _ => return None,
    };
    Some(match ObjRef::parse(rest[0]) {
        Some(target) => Endpoint::Network { op, target },
        None => Endpoint::BadRef { op: op.name() },
    })
}

fn images(m: &str, rest: &[&str]) -> Endpoint {
    match (m, rest) {
        // Image names contain '/' and ':' (`library/busybox:latest`), so they span segments.
        ("GET", [name @ .., "json"]) if !name.is_empty() => Endpoint::ImageInspect {
            reference: name.join("/"),
        },
        ("POST", ["create"]) => Endpoint::ImagePull,
        ("GET", ["json"]) => Endpoint::Denied {
            op: "images.list".into(),
        },
        _ => Endpoint::Denied {
            op: "images".into(),
        },
    }
}

/// Host-wide endpoint families, named so a refusal says what was asked for.
fn denied_family(first: &str, rest: &[&str]) -> Option<Endpoint> {
    let op = match first {
        "info" => "system.info".to_owned(),
        "events" => "system.events".to_owned(),
        "auth" => "system.auth".to_owned(),
        "system" => match rest.first() {
            Some(s) if is_word(s) => format!("system.{s}"),
            _ => "system".to_owned(),
        },
        "swarm" | "nodes" | "services" | "tasks" => format!("swarm.{first}"),
        "plugins" | "secrets" | "configs" | "volumes" | "build" | "session" | "distribution"
        | "grpc" => first.to_owned(),
        "commit" => "images.commit".to_owned(),
        _ => return None,
    };
    Some(Endpoint::Denied { op })
}

/// A volume name as dockerd accepts it (`[a-zA-Z0-9][a-zA-Z0-9_.-]*`), not a sub-route.
fn is_word_ish(s: &str) -> bool {
    s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && s != "prune"
        && s != "create"
}

fn is_word(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
#[path = "api_tests.rs"]
mod tests;
