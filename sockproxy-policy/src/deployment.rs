//! The deployment the proxy itself runs in, judged against the stack's prefix once at start.
//! The prefix is the whole of a stack's scope (without `--require-stack-label`): a prefix that
//! begins the name of the proxy's own container, or of the provider's beside it, hands the stack
//! their inspect (the environment) and logs, and in a family the stack may change, `docker
//! exec`, which in the proxy's container reaches the engine's own socket. With compose it
//! covers more than one name at once: compose names a project's containers
//! `PROJECT-SERVICE-N` (v2) or `PROJECT_SERVICE_N` (v1) and its volumes and networks
//! `PROJECT_NAME`, so a prefix such as `PROJECT-` or `PROJECT_` takes the proxy's container,
//! its state volume, its socket's volume or the provider's ledger.
//!
//! Pure: which container this process runs in (from its mount table), what the engine says of
//! it, and which of the deployment's objects a prefix covers. The transport asks the engine
//! (`sockproxy::deployment`) and refuses to start when anything is covered.

use crate::scope::{Access, Kind, Scope};

/// The label compose puts on every container, volume and network of a project.
pub const COMPOSE_PROJECT_LABEL: &str = "com.docker.compose.project";

/// The ID of the container this process runs in, read from its `/proc/self/mountinfo`: the
/// engine bind-mounts the container's own `hostname` file from `…/containers/ID/hostname`
/// onto `/etc/hostname`. `None` outside a container (or in one the engine did not give an
/// `/etc/hostname` of its own).
pub fn own_container_id(mountinfo: &str) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        // ID, parent ID, device, then the root of the mount within its file system and where
        // it is mounted.
        let root = fields.nth(3)?;
        let at = fields.next()?;
        if at != "/etc/hostname" {
            return None;
        }
        let mut parts = root.rsplit('/');
        let (file, id, dir) = (parts.next()?, parts.next()?, parts.next()?);
        let hex = id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
        (file == "hostname" && dir == "containers" && hex).then(|| id.to_owned())
    })
}

/// What the engine's inspect says of the proxy's own container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnContainer {
    /// Without the leading `/`.
    pub name: String,
    /// The compose project it belongs to, if compose made it.
    pub project: Option<String>,
}

/// Reads a container inspect answer (`GET /containers/ID/json`).
pub fn own_container(inspect: &[u8]) -> Result<OwnContainer, String> {
    #[derive(serde::Deserialize)]
    struct Inspect {
        #[serde(rename = "Name")]
        name: String,
        #[serde(rename = "Config")]
        config: Option<Config>,
    }
    #[derive(serde::Deserialize)]
    struct Config {
        #[serde(rename = "Labels")]
        labels: Option<std::collections::BTreeMap<String, String>>,
    }
    let i: Inspect =
        serde_json::from_slice(inspect).map_err(|e| format!("the container's inspect: {e}"))?;
    let project = i
        .config
        .and_then(|c| c.labels)
        .and_then(|mut l| l.remove(COMPOSE_PROJECT_LABEL));
    Ok(OwnContainer {
        name: i.name.trim_start_matches('/').to_owned(),
        project,
    })
}

/// The kinds of object a deployment has, each with its list endpoint's answer shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    Containers,
    Volumes,
    Networks,
}

impl Listed {
    pub const ALL: [Self; 3] = [Self::Containers, Self::Volumes, Self::Networks];

    /// The engine's list of this kind's objects labelled as compose project `project`.
    pub fn path(self, project: &str) -> String {
        let filter = serde_json::json!({ "label": [format!("{COMPOSE_PROJECT_LABEL}={project}")] });
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("filters", &filter.to_string())
            .finish();
        match self {
            Self::Containers => format!("/containers/json?all=1&{query}"),
            Self::Volumes => format!("/volumes?{query}"),
            Self::Networks => format!("/networks?{query}"),
        }
    }

    pub fn noun(self) -> &'static str {
        match self {
            Self::Containers => "container",
            Self::Volumes => "volume",
            Self::Networks => "network",
        }
    }

    /// The names in a list answer of this kind (containers without the leading `/`).
    pub fn names(self, body: &[u8]) -> Result<Vec<String>, String> {
        #[derive(serde::Deserialize)]
        struct Container {
            #[serde(rename = "Names")]
            names: Option<Vec<String>>,
        }
        #[derive(serde::Deserialize)]
        struct Named {
            #[serde(rename = "Name")]
            name: String,
        }
        #[derive(serde::Deserialize)]
        struct Volumes {
            #[serde(rename = "Volumes")]
            volumes: Option<Vec<Named>>,
        }
        let bad = |e: serde_json::Error| format!("the {} list: {e}", self.noun());
        Ok(match self {
            Self::Containers => serde_json::from_slice::<Vec<Container>>(body)
                .map_err(bad)?
                .into_iter()
                .flat_map(|c| c.names.unwrap_or_default())
                .map(|n| n.trim_start_matches('/').to_owned())
                .collect(),
            Self::Volumes => serde_json::from_slice::<Volumes>(body)
                .map_err(bad)?
                .volumes
                .unwrap_or_default()
                .into_iter()
                .map(|v| v.name)
                .collect(),
            Self::Networks => serde_json::from_slice::<Vec<Named>>(body)
                .map_err(bad)?
                .into_iter()
                .map(|n| n.name)
                .collect(),
        })
    }
}

/// The names among `names` that the stack would be handed: a container it could inspect (its
/// environment), read the logs of, or, in a family it may change, exec into or stop; a volume it
/// could mount (a named volume is the stack's by its prefix alone); a network it could join.
/// A network it can only read (its own endpoints in it, and its settings) is not counted: the
/// shipped deer-flow route names its gateway's network under the default prefix.
pub fn covered(scope: &Scope, kind: Listed, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| match kind {
            Listed::Containers | Listed::Volumes => scope.visible(n),
            Listed::Networks => scope.allows(Kind::Network, Access::Change, n),
        })
        .map(|n| format!("{} {n}", kind.noun()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Prefix;

    const ID: &str = "4f2a0c4e1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f";

    #[test]
    fn the_own_container_is_read_from_the_hostname_mount() {
        let line = |root: &str, at: &str| {
            format!("812 790 254:1 {root} {at} rw,relatime - ext4 /dev/vda rw")
        };
        let cases: Vec<(String, Option<&str>)> = vec![
            (
                line(
                    &format!("/var/lib/docker/containers/{ID}/hostname"),
                    "/etc/hostname",
                ),
                Some(ID),
            ),
            // A data root elsewhere, or on a file system of its own: the root is relative to it.
            (
                line(
                    &format!("/docker/containers/{ID}/hostname"),
                    "/etc/hostname",
                ),
                Some(ID),
            ),
            (
                line(
                    &format!("/var/lib/docker/containers/{ID}/hosts"),
                    "/etc/hosts",
                ),
                None,
            ),
            (
                line(
                    &format!("/var/lib/docker/containers/{ID}/hostname"),
                    "/data/hostname",
                ),
                None,
            ),
            (line("/etc/hostname", "/etc/hostname"), None),
            (
                line("/var/lib/docker/containers/short/hostname", "/etc/hostname"),
                None,
            ),
            (
                line(
                    &format!("/var/lib/docker/volumes/{ID}/hostname"),
                    "/etc/hostname",
                ),
                None,
            ),
            ("22 1 0:21 / /proc rw - proc proc rw".to_owned(), None),
            (String::new(), None),
        ];
        for (mountinfo, want) in cases {
            let table = format!("21 1 254:1 / / rw - ext4 /dev/vda rw\n{mountinfo}\n");
            assert_eq!(own_container_id(&table).as_deref(), want, "{mountinfo}");
        }
    }

    #[test]
    fn the_inspect_gives_the_name_and_the_compose_project() {
        let with = br#"{"Name":"/pfx_sockproxy_1","Config":{"Labels":{"com.docker.compose.project":"pfx","x":"y"}}}"#;
        assert_eq!(
            own_container(with),
            Ok(OwnContainer {
                name: "pfx_sockproxy_1".into(),
                project: Some("pfx".into())
            })
        );
        let without = br#"{"Name":"/proxy","Config":{"Labels":null}}"#;
        assert_eq!(own_container(without).map(|c| c.project), Ok(None));
        assert!(own_container(b"[]").is_err());
    }

    #[test]
    fn the_lists_names_and_what_a_prefix_covers() {
        let scope = Scope::new(Prefix::parse("pfx_").expect("prefix"), false);
        let containers = br#"[{"Names":["/pfx_sockproxy_1"]},{"Names":["/other"]}]"#;
        let volumes =
            br#"{"Volumes":[{"Name":"pfx_stack-socket"},{"Name":"keep"}],"Warnings":null}"#;
        // A network the stack may only read is not counted; one it may join is.
        let networks = br#"[{"Name":"pfx_default"},{"Name":"pfx_net-1"}]"#;
        let mut all = Vec::new();
        for (kind, body) in [
            (Listed::Containers, &containers[..]),
            (Listed::Volumes, &volumes[..]),
            (Listed::Networks, &networks[..]),
        ] {
            let names = kind.names(body).expect("a list");
            assert_eq!(names.len(), 2, "{kind:?}");
            all.extend(covered(&scope, kind, &names));
        }
        assert_eq!(
            all,
            ["container pfx_sockproxy_1", "volume pfx_stack-socket"]
        );
        let restricted = Scope::new(Prefix::parse("pfx_").expect("prefix"), true);
        let names = Listed::Networks.names(networks).expect("a list");
        assert_eq!(
            covered(&restricted, Listed::Networks, &names),
            ["network pfx_net-1"]
        );
        let apart = Scope::new(Prefix::parse("deer-flow-").expect("prefix"), false);
        let names = Listed::Volumes.names(volumes).expect("a list");
        assert!(covered(&apart, Listed::Volumes, &names).is_empty());
        assert!(Listed::Volumes.names(b"[]").is_err());
        assert!(Listed::Networks.names(b"{}").is_err());
    }

    #[test]
    fn the_list_asks_for_the_project_label_only() {
        assert_eq!(
            Listed::Volumes.path("pfx"),
            "/volumes?filters=%7B%22label%22%3A%5B%22com.docker.compose.project%3Dpfx%22%5D%7D"
        );
        assert!(Listed::Containers
            .path("p")
            .starts_with("/containers/json?all=1&filters="));
    }
}
