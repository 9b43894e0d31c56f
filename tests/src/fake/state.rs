//! The fake engine's in-memory model: containers, networks, images and exec instances, with
//! dockerd's lookup order (full ID, exact name including link aliases, unique ID prefix) and its
//! list-filter semantics. No I/O; the HTTP side (`routes`) and the runtime (`runtime`) use it.

use std::collections::BTreeMap;

use serde_json::Value;

use super::flavor::Flavor;

/// Where a container is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    Created,
    Running,
    Exited,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Running => "running",
            Self::Exited => "exited",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Endpoint {
    pub endpoint_id: String,
    pub ip: String,
    pub aliases: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Container {
    pub id: String,
    /// Canonical name, with its leading `/`.
    pub name: String,
    pub image: String,
    pub image_id: String,
    pub cmd: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub env: Vec<String>,
    pub tty: bool,
    pub open_stdin: bool,
    pub created: i64,
    pub state: RunState,
    pub exit_code: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// How many times it has exited; `wait?condition=next-exit` waits for this to grow.
    pub exits: u64,
    pub network_mode: String,
    /// Network name → endpoint (the configuration; active only while running).
    pub networks: BTreeMap<String, Endpoint>,
    /// Legacy links: (target container ID, alias). Each gives the target a name `/{self}/{alias}`.
    pub links: Vec<(String, String)>,
    pub host_config: Value,
    pub config: Value,
    /// Everything it has written: (stream 1 = stdout, 2 = stderr, bytes).
    pub logs: Vec<(u8, Vec<u8>)>,
}

#[derive(Debug, Clone)]
pub struct Network {
    pub id: String,
    pub name: String,
    pub driver: String,
    pub internal: bool,
    pub labels: BTreeMap<String, String>,
    pub options: BTreeMap<String, String>,
    pub subnet: String,
    pub created: i64,
    pub predefined: bool,
}

#[derive(Debug, Clone)]
pub struct Image {
    pub id: String,
    pub tags: Vec<String>,
    pub cmd: Vec<String>,
    pub created: i64,
}

#[derive(Debug, Clone)]
pub struct Exec {
    pub id: String,
    pub container_id: String,
    pub cmd: Vec<String>,
    pub tty: bool,
    pub attach_stdin: bool,
    pub running: bool,
    pub exit_code: Option<i64>,
}

/// Why a lookup failed, in dockerd's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    NotFound,
    Ambiguous,
}

#[derive(Debug, Default)]
pub struct State {
    pub containers: Vec<Container>,
    pub networks: Vec<Network>,
    pub images: Vec<Image>,
    pub execs: Vec<Exec>,
    counter: u64,
    seed: u64,
}

/// A 64-hex ID, unique in this engine (sha256 of a counter and a per-engine seed).
pub fn new_id(seed: u64, n: u64) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("fake-dockerd {seed} {n}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
}

impl State {
    pub fn new(seed: u64) -> Self {
        let mut s = Self {
            counter: seed.wrapping_mul(1_000_003),
            seed,
            ..Self::default()
        };
        for (name, driver, subnet) in [
            ("bridge", "bridge", "172.17.0.0/16"),
            ("host", "host", ""),
            ("none", "null", ""),
        ] {
            let id = s.next_id();
            s.networks.push(Network {
                id,
                name: name.into(),
                driver: driver.into(),
                internal: false,
                labels: BTreeMap::new(),
                options: if name == "bridge" {
                    super::system::BRIDGE_OPTIONS
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect()
                } else {
                    BTreeMap::new()
                },
                subnet: subnet.into(),
                created: now(),
                predefined: true,
            });
        }
        for tag in ["sockproxy-test-busybox:latest", "busybox:latest"] {
            s.add_image(tag);
        }
        s
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn next_id(&mut self) -> String {
        self.counter += 1;
        new_id(0x5eed, self.counter)
    }

    pub fn add_image(&mut self, tag: &str) {
        let id = format!("sha256:{}", self.next_id());
        self.images.push(Image {
            id,
            tags: vec![normalize_tag(tag)],
            cmd: vec!["sh".into()],
            created: now(),
        });
    }

    pub fn image(&self, reference: &str) -> Option<&Image> {
        let tag = normalize_tag(reference);
        self.images.iter().find(|i| {
            i.tags.contains(&tag)
                || i.id == reference
                || i.id.strip_prefix("sha256:") == Some(reference)
                || (reference.len() >= 12
                    && i.id
                        .strip_prefix("sha256:")
                        .is_some_and(|h| h.starts_with(reference)))
        })
    }

    /// dockerd's order: full ID, exact name (link aliases included), unique ID prefix.
    pub fn find_container(&self, reference: &str) -> Result<usize, Lookup> {
        if reference.is_empty() {
            return Err(Lookup::NotFound);
        }
        if let Some(i) = self.containers.iter().position(|c| c.id == reference) {
            return Ok(i);
        }
        let wanted = if reference.starts_with('/') {
            reference.to_owned()
        } else {
            format!("/{reference}")
        };
        if let Some(i) = self.containers.iter().position(|c| c.name == wanted) {
            return Ok(i);
        }
        if let Some(target) = self.alias_target(&wanted) {
            if let Some(i) = self.containers.iter().position(|c| c.id == target) {
                return Ok(i);
            }
        }
        unique_prefix(self.containers.iter().map(|c| c.id.as_str()), reference)
    }

    /// `/{parent}/{alias}` → the linked container's ID.
    fn alias_target(&self, wanted: &str) -> Option<String> {
        let (parent, alias) = wanted[1..].split_once('/')?;
        let parent = self.containers.iter().find(|c| c.name[1..] == *parent)?;
        parent
            .links
            .iter()
            .find(|(_, a)| a == alias)
            .map(|(id, _)| id.clone())
    }

    /// All names of a container as `docker ps` lists them: its own, then link aliases.
    pub fn names_of(&self, c: &Container) -> Vec<String> {
        let mut names = vec![c.name.clone()];
        for parent in &self.containers {
            for (target, alias) in &parent.links {
                if *target == c.id {
                    names.push(format!("{}/{alias}", parent.name));
                }
            }
        }
        names
    }

    pub fn find_network(&self, reference: &str) -> Result<usize, Lookup> {
        if let Some(i) = self.networks.iter().position(|n| n.id == reference) {
            return Ok(i);
        }
        if let Some(i) = self.networks.iter().position(|n| n.name == reference) {
            return Ok(i);
        }
        unique_prefix(self.networks.iter().map(|n| n.id.as_str()), reference)
    }

    pub fn find_exec(&self, id: &str) -> Option<usize> {
        self.execs.iter().position(|e| e.id == id)
    }

    /// Running containers attached to network `name`.
    pub fn active_endpoints(&self, name: &str) -> Vec<&Container> {
        self.containers
            .iter()
            .filter(|c| c.state == RunState::Running && c.networks.contains_key(name))
            .collect()
    }

    pub fn next_ip(&mut self, network: &str) -> String {
        let n = self
            .networks
            .iter()
            .position(|x| x.name == network)
            .unwrap_or(0);
        let used = self
            .containers
            .iter()
            .filter(|c| c.networks.contains_key(network))
            .count();
        format!("172.{}.0.{}", 17 + n, used + 2)
    }
}

fn unique_prefix<'a>(ids: impl Iterator<Item = &'a str>, prefix: &str) -> Result<usize, Lookup> {
    let matches: Vec<usize> = ids
        .enumerate()
        .filter(|(_, id)| id.starts_with(prefix))
        .map(|(i, _)| i)
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(Lookup::NotFound),
        _ => Err(Lookup::Ambiguous),
    }
}

/// `busybox` → `busybox:latest`; a digest or explicit tag is kept.
pub fn normalize_tag(reference: &str) -> String {
    let reference = reference
        .strip_prefix("docker.io/library/")
        .or_else(|| reference.strip_prefix("docker.io/"))
        .unwrap_or(reference);
    let last = reference.rsplit('/').next().unwrap_or(reference);
    if last.contains(':') || reference.contains('@') {
        reference.to_owned()
    } else {
        format!("{reference}:latest")
    }
}

/// Parsed `filters` query: key → values. Accepts both encodings dockerd accepts
/// (`{"name":["x"]}` and the older `{"name":{"x":true}}`).
pub fn parse_filters(raw: Option<&str>) -> Result<BTreeMap<String, Vec<String>>, String> {
    let Some(raw) = raw.filter(|r| !r.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let v: Value = serde_json::from_str(raw).map_err(|e| format!("invalid filter: {e}"))?;
    let obj = v.as_object().ok_or("invalid filter")?;
    let mut out = BTreeMap::new();
    for (k, vals) in obj {
        let list: Vec<String> = match vals {
            Value::Array(a) => a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect(),
            Value::Object(m) => m
                .iter()
                .filter(|(_, b)| b.as_bool() == Some(true))
                .map(|(k, _)| k.clone())
                .collect(),
            _ => return Err("invalid filter".into()),
        };
        out.insert(k.clone(), list);
    }
    Ok(out)
}

/// dockerd matches `name` values as unanchored regular expressions; values are ORed.
pub fn any_regex_matches(values: &[String], candidates: &[String]) -> bool {
    Patterns::new(values).any_matches(candidates)
}

/// A filter's values compiled once per list, not once per entry: a 10,000-container list is
/// the bench's, and compiling per entry made the fake, not the proxy, what it measured.
#[derive(Debug)]
pub struct Patterns(Vec<Result<regex::Regex, String>>);

impl Patterns {
    pub fn new(values: &[String]) -> Self {
        Self(
            values
                .iter()
                .map(|v| regex::Regex::new(v).map_err(|_| v.clone()))
                .collect(),
        )
    }

    pub fn any_matches(&self, candidates: &[String]) -> bool {
        self.0.iter().any(|p| match p {
            Ok(re) => candidates.iter().any(|c| re.is_match(c)),
            Err(v) => candidates.iter().any(|c| c.contains(v.as_str())),
        })
    }
}

/// `label=key` or `label=key=value`; every value must match (dockerd ANDs labels).
pub fn labels_match(values: &[String], labels: &BTreeMap<String, String>) -> bool {
    values.iter().all(|v| match v.split_once('=') {
        Some((k, want)) => labels.get(k).is_some_and(|have| have == want),
        None => labels.contains_key(v),
    })
}

/// Containers `GET /containers/json` returns, newest first, before `limit`.
pub fn list_containers(
    state: &State,
    all: bool,
    filters: &BTreeMap<String, Vec<String>>,
    flavor: Flavor,
) -> Result<Vec<usize>, (u16, String)> {
    const KNOWN: [&str; 6] = ["name", "label", "status", "id", "network", "volume"];
    for (k, vals) in filters {
        if !KNOWN.contains(&k.as_str()) {
            return Err((400, flavor.invalid_filter(k)));
        }
        if k == "status" {
            for s in vals {
                if ![
                    "created",
                    "restarting",
                    "running",
                    "removing",
                    "paused",
                    "exited",
                    "dead",
                ]
                .contains(&s.as_str())
                {
                    return Err((400, flavor.invalid_filter_value("status", s)));
                }
            }
        }
    }
    let names = filters.get("name").map(|v| Patterns::new(v));
    let ids = filters.get("id").map(|v| Patterns::new(v));
    let mut idx: Vec<usize> = (0..state.containers.len())
        .filter(|&i| {
            let c = &state.containers[i];
            let status_filter = filters.get("status");
            if !all && status_filter.is_none() && c.state != RunState::Running {
                return false;
            }
            if let Some(p) = &names {
                if !p.any_matches(&state.names_of(c)) {
                    return false;
                }
            }
            if let Some(p) = &ids {
                if !p.any_matches(std::slice::from_ref(&c.id)) {
                    return false;
                }
            }
            if let Some(v) = filters.get("label") {
                if !labels_match(v, &c.labels) {
                    return false;
                }
            }
            if let Some(v) = status_filter {
                if !v.iter().any(|s| s == c.state.as_str()) {
                    return false;
                }
            }
            if let Some(v) = filters.get("volume") {
                if !super::mounts::volume_matches(v, &c.host_config) {
                    return false;
                }
            }
            if let Some(v) = filters.get("network") {
                if !v.iter().any(|n| c.networks.contains_key(n)) {
                    return false;
                }
            }
            true
        })
        .collect();
    idx.sort_by(|a, b| {
        let (ca, cb) = (&state.containers[*a], &state.containers[*b]);
        cb.created.cmp(&ca.created).then(b.cmp(a))
    });
    Ok(idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(names: &[&str]) -> State {
        let mut s = State::new(1);
        for n in names {
            let id = s.next_id();
            s.containers.push(Container {
                id,
                name: format!("/{n}"),
                image: "busybox".into(),
                image_id: String::new(),
                cmd: vec![],
                labels: BTreeMap::new(),
                env: vec![],
                tty: false,
                open_stdin: false,
                created: 0,
                state: RunState::Created,
                exit_code: 0,
                started_at: None,
                finished_at: None,
                exits: 0,
                network_mode: "bridge".into(),
                networks: BTreeMap::new(),
                links: vec![],
                host_config: Value::Null,
                config: Value::Null,
                logs: vec![],
            });
        }
        s
    }

    #[test]
    fn lookup_order_full_id_then_name_then_prefix() {
        let mut s = with(&["a", "b"]);
        let id_b = s.containers[1].id.clone();
        // A container *named* like b's ID prefix: the name wins over the prefix.
        let prefix = id_b[..6].to_owned();
        s.containers[0].name = format!("/{prefix}");
        assert_eq!(s.find_container(&prefix), Ok(0));
        assert_eq!(s.find_container(&id_b), Ok(1));
        assert_eq!(s.find_container(&id_b[..7]), Ok(1));
        assert_eq!(s.find_container("/b"), Ok(1));
        assert_eq!(s.find_container("nope"), Err(Lookup::NotFound));
        assert_eq!(s.find_container(""), Err(Lookup::NotFound));
        s.containers[0].links.push((id_b.clone(), "alias".into()));
        assert_eq!(s.find_container(&format!("{prefix}/alias")), Ok(1));
        assert_eq!(
            s.names_of(&s.containers[1]),
            ["/b".to_owned(), format!("/{prefix}/alias")]
        );
    }

    #[test]
    fn filters_both_encodings_and_regex_or() {
        let f = parse_filters(Some(r#"{"name":["^/a$","zz"],"label":{"k=v":true}}"#)).expect("ok");
        assert_eq!(f["name"], ["^/a$", "zz"]);
        assert_eq!(f["label"], ["k=v"]);
        assert!(any_regex_matches(&f["name"], &["/a".into()]));
        assert!(any_regex_matches(&["b".into()], &["/abc".into()]));
        assert!(!any_regex_matches(&["^b".into()], &["/abc".into()]));
        assert_eq!(parse_filters(Some("[1]")), Err("invalid filter".into()));
    }
}
