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

use crate::scope::{Access, Kind, Scope, STACK_LABEL};

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
        // `…/containers/ID/hostname`, or `/ID/hostname` where the containers directory is a
        // mount of its own.
        let dir_ok = dir == "containers" || (dir.is_empty() && parts.next().is_none());
        (file == "hostname" && dir_ok && hex).then(|| id.to_owned())
    })
}

/// What the engine's inspect says of the proxy's own container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnContainer {
    /// Without the leading `/`.
    pub name: String,
    /// The compose project it belongs to, if compose made it.
    pub project: Option<String>,
    /// The named volumes mounted in it, compose's or not.
    pub volumes: Vec<String>,
}

/// Reads a container inspect answer (`GET /containers/ID/json`).
pub fn own_container(inspect: &[u8]) -> Result<OwnContainer, String> {
    #[derive(serde::Deserialize)]
    struct Inspect {
        #[serde(rename = "Name")]
        name: String,
        #[serde(rename = "Config")]
        config: Option<Config>,
        #[serde(rename = "Mounts")]
        mounts: Option<Vec<Mount>>,
    }
    #[derive(serde::Deserialize)]
    struct Mount {
        #[serde(rename = "Type")]
        kind: Option<String>,
        #[serde(rename = "Name")]
        name: Option<String>,
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
    let volumes = i
        .mounts
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.kind.as_deref() == Some("volume"))
        .filter_map(|m| m.name)
        .collect();
    Ok(OwnContainer {
        name: i.name.trim_start_matches('/').to_owned(),
        project,
        volumes,
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

    /// The names in a list answer of this kind (containers without the leading `/`), but for
    /// the entries labelled `sockproxy.stack`: a proxy made those, in a stack's name, so they
    /// are no part of a deployment however they are labelled.
    pub fn names(self, body: &[u8]) -> Result<Vec<String>, String> {
        type Labels = Option<std::collections::BTreeMap<String, String>>;
        let made_by_a_proxy = |l: &Labels| l.as_ref().is_some_and(|l| l.contains_key(STACK_LABEL));
        #[derive(serde::Deserialize)]
        struct Container {
            #[serde(rename = "Names")]
            names: Option<Vec<String>>,
            #[serde(rename = "Labels")]
            labels: Labels,
        }
        #[derive(serde::Deserialize)]
        struct Named {
            #[serde(rename = "Name")]
            name: String,
            #[serde(rename = "Labels")]
            labels: Labels,
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
                .filter(|c| !made_by_a_proxy(&c.labels))
                .flat_map(|c| c.names.unwrap_or_default())
                .map(|n| n.trim_start_matches('/').to_owned())
                .collect(),
            Self::Volumes => serde_json::from_slice::<Volumes>(body)
                .map_err(bad)?
                .volumes
                .unwrap_or_default()
                .into_iter()
                .filter(|v| !made_by_a_proxy(&v.labels))
                .map(|v| v.name)
                .collect(),
            Self::Networks => serde_json::from_slice::<Vec<Named>>(body)
                .map_err(bad)?
                .into_iter()
                .filter(|n| !made_by_a_proxy(&n.labels))
                .map(|n| n.name)
                .collect(),
        })
    }
}

/// Whether the prefix begins every name compose gives a kind of project `project`'s objects,
/// those made later included: it is a prefix of `PROJECT_` (volumes, networks, v1's
/// containers) or of `PROJECT-` (v2's containers). Which of the two the project's containers
/// get is read off the proxy's own container's name (`own`); a name compose did not make
/// (`container_name:`) says nothing, and both count.
pub fn project_covered(scope: &Scope, project: &str, own: &str) -> bool {
    let p = scope.prefix().as_str();
    let containers = match own
        .strip_prefix(project)
        .and_then(|rest| rest.chars().next())
    {
        Some(sep @ ('_' | '-')) => format!("{project}{sep}"),
        _ => format!("{project}-"),
    };
    [format!("{project}_"), containers]
        .iter()
        .any(|named| named.starts_with(p))
}

/// The labels compose reads to know its own objects, which no stack may set: one set on a
/// stack's object would put it in a compose project's lists (`docker-compose down
/// --remove-orphans` would remove it) and, in the proxy's own project, stop the proxy from
/// starting again.
pub const COMPOSE_LABEL_PREFIX: &str = "com.docker.compose.";

/// Refuses a label in `COMPOSE_LABEL_PREFIX` among `keys`, the labels of a create at `path`.
pub(crate) fn no_compose_label<'a>(
    op: &str,
    path: &str,
    mut keys: impl Iterator<Item = &'a String>,
) -> Result<(), crate::Refusal> {
    match keys.find(|k| k.starts_with(COMPOSE_LABEL_PREFIX)) {
        None => Ok(()),
        Some(k) => Err(crate::fields::value_not_allowed(
            op,
            path,
            k,
            "compose's labels mark a compose project's own objects",
        )),
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
            // The containers directory mounted on its own: the root is `/ID/hostname`.
            (line(&format!("/{ID}/hostname"), "/etc/hostname"), Some(ID)),
            (line(&format!("/x/{ID}/hostname"), "/etc/hostname"), None),
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
        let with = br#"{"Name":"/pfx_sockproxy_1","Config":{"Labels":{"com.docker.compose.project":"pfx","x":"y"}},
            "Mounts":[{"Type":"volume","Name":"pfx_state"},{"Type":"bind","Source":"/var/run/docker.sock"},{"Type":"volume","Name":"shared"}]}"#;
        assert_eq!(
            own_container(with),
            Ok(OwnContainer {
                name: "pfx_sockproxy_1".into(),
                project: Some("pfx".into()),
                volumes: vec!["pfx_state".into(), "shared".into()],
            })
        );
        let without = br#"{"Name":"/proxy","Config":{"Labels":null}}"#;
        assert_eq!(
            own_container(without).map(|c| (c.project, c.volumes)),
            Ok((None, vec![]))
        );
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
    fn what_a_proxy_made_is_no_part_of_a_deployment() {
        // A stack's sandbox, labelled by its proxy, however else it is labelled.
        let containers = br#"[{"Names":["/pfx_sandbox-1"],"Labels":{"sockproxy.stack":"s","com.docker.compose.project":"pfx"}},
            {"Names":["/pfx_sockproxy_1"],"Labels":{"com.docker.compose.project":"pfx"}}]"#;
        assert_eq!(
            Listed::Containers.names(containers),
            Ok(vec!["pfx_sockproxy_1".to_owned()])
        );
        let volumes = br#"{"Volumes":[{"Name":"pfx_x","Labels":{"sockproxy.stack":"s"}},{"Name":"pfx_y","Labels":null}]}"#;
        assert_eq!(Listed::Volumes.names(volumes), Ok(vec!["pfx_y".to_owned()]));
        let networks = br#"[{"Name":"pfx_net-1","Labels":{"sockproxy.stack":"s"}}]"#;
        assert_eq!(Listed::Networks.names(networks), Ok(vec![]));
    }

    #[test]
    fn a_prefix_of_the_projects_names_covers_the_project() {
        let scope = |p: &str| Scope::new(Prefix::parse(p).expect("prefix"), false);
        for (prefix, project, own, covered) in [
            ("deer-flow-", "deer-flow", "deer-flow-sockproxy-1", true),
            ("deer-flow_", "deer-flow", "deer-flow-sockproxy-1", true),
            // compose v1 names the containers with `_`: `deer-flow-` begins none of its names.
            ("deer-flow-", "deer-flow", "deer-flow_sockproxy_1", false),
            ("deer-flow_", "deer-flow", "deer-flow_sockproxy_1", true),
            // A name of the operator's: either separator may come.
            ("deer-flow-", "deer-flow", "proxy", true),
            ("deer-", "deer-flow", "deer-flow_sockproxy_1", true),
            ("de-", "deer-flow", "deer-flow-sockproxy-1", false),
            ("deer-flow-s-", "deer-flow", "deer-flow-sockproxy-1", false),
            ("deer-flow-", "deer-flow-x", "deer-flow-x_sockproxy_1", true),
            ("deer-flow-", "deploy", "deploy_sockproxy_1", false),
            ("deploy-", "deployment", "deployment-sockproxy-1", false),
        ] {
            assert_eq!(
                project_covered(&scope(prefix), project, own),
                covered,
                "{prefix} {project} {own}"
            );
        }
    }

    #[test]
    fn compose_labels_are_refused_on_a_stacks_objects() {
        let keys = |k: &[&str]| k.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(no_compose_label(
            "containers.create",
            "Labels",
            keys(&["a", "com.docker.x"]).iter()
        )
        .is_ok());
        let refused = no_compose_label(
            "containers.create",
            "Labels",
            keys(&["a", "com.docker.compose.project"]).iter(),
        )
        .expect_err("refused");
        assert!(
            refused
                .to_string()
                .contains("Labels com.docker.compose.project is not allowed"),
            "{refused}"
        );
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
