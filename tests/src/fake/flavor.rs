//! Engine flavors: the version numbers and wordings that differ between the engines our users
//! run. Every wording is taken from moby's own sources, cited per function, at tag `v20.10.24`
//! (Debian 12's engine) and tag `docker-v29.0.0`–`docker-v29.7.2` (the current engine; paths
//! moved from `api/server/…` to `daemon/server/…` in 29). Status codes follow each error's class
//! (`api/server/httpstatus/status.go`, `daemon/server/httpstatus/status.go`).
//!
//! Note: moby 29 did not lower-case "No such container: X" (`daemon/errors.go` builds
//! `"No such " + object + ": " + id` in both), so that wording is shared; what changed is below.

use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Debian 12's docker.io 20.10.24: API 1.41, minimum 1.12.
    Debian2010,
    /// Docker 29.0–29.2: API 1.52, minimum 1.44 (29.3 lowered the minimum to 1.40).
    Docker29,
}

impl FromStr for Flavor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "debian-20.10" | "20.10" => Ok(Self::Debian2010),
            "docker-29" | "29" | "current" => Ok(Self::Docker29),
            other => Err(format!(
                "unknown flavor {other:?}: use debian-20.10 or docker-29"
            )),
        }
    }
}

impl Flavor {
    pub const ALL: [Flavor; 2] = [Flavor::Debian2010, Flavor::Docker29];

    pub fn name(self) -> &'static str {
        match self {
            Self::Debian2010 => "debian-20.10",
            Self::Docker29 => "docker-29",
        }
    }

    /// `api/common.go` (20.10); `daemon/config/config.go` (29).
    pub fn api_version(self) -> &'static str {
        match self {
            Self::Debian2010 => "1.41",
            Self::Docker29 => "1.52",
        }
    }

    /// `api/common_unix.go` (20.10); 29.0's default minimum (lowered to 1.40 in 29.3.0).
    pub fn min_api_version(self) -> &'static str {
        match self {
            Self::Debian2010 => "1.12",
            Self::Docker29 => "1.44",
        }
    }

    pub fn engine_version(self) -> &'static str {
        match self {
            Self::Debian2010 => "20.10.24+dfsg1",
            Self::Docker29 => "29.0.0",
        }
    }

    /// `…/middleware/version.go`, both: 400.
    pub fn version_error(self, requested: &str) -> Option<String> {
        let req = parse_version(requested)?;
        if req < parse_version(self.min_api_version())? {
            return Some(format!(
                "client version {requested} is too old. Minimum supported API version is {}, please upgrade your client to a newer version",
                self.min_api_version()
            ));
        }
        if req > parse_version(self.api_version())? {
            return Some(format!(
                "client version {requested} is too new. Maximum supported API version is {}",
                self.api_version()
            ));
        }
        None
    }

    /// `daemon/errors.go`, both: 404.
    pub fn no_such_container(self, r: &str) -> String {
        format!("No such container: {r}")
    }

    /// 20.10: `pkg/truncindex/truncindex.go`, wrapped as a System error (500) in
    /// `daemon/container.go`. 29: `daemon/container/view.go` `GetByPrefix`, InvalidParameter (400).
    pub fn ambiguous_prefix(self, p: &str) -> (u16, String) {
        match self {
            Self::Debian2010 => (500, format!("Multiple IDs found with provided prefix: {p}")),
            Self::Docker29 => (400, format!("multiple IDs found with provided prefix: {p}")),
        }
    }

    /// `daemon/errors.go` + `daemon/names.go`, both: 409.
    pub fn name_conflict(self, name: &str, id: &str) -> String {
        format!("Conflict. The container name \"/{name}\" is already in use by container \"{id}\". You have to remove (or rename) that container to be able to reuse that name.")
    }

    /// `daemon/delete.go`: 409.
    pub fn remove_running(self, given: &str, id: &str) -> String {
        match self {
            Self::Debian2010 => format!("You cannot remove a running container {id}. Stop the container before attempting removal or force remove"),
            Self::Docker29 => format!("cannot remove container \"{given}\": container is running: stop the container before removing or force remove"),
        }
    }

    /// 20.10: `api/server/router/container/container_routes.go` + `daemon/kill.go`;
    /// 29: `daemon/server/router/container/container_routes.go` + `daemon/errors.go`: 409.
    pub fn kill_not_running(self, given: &str, id: &str) -> String {
        match self {
            Self::Debian2010 => {
                format!("Cannot kill container: {given}: Container {id} is not running")
            }
            Self::Docker29 => {
                format!("cannot kill container: {given}: container {id} is not running")
            }
        }
    }

    /// `daemon/images/image.go`, both: 404.
    pub fn no_such_image(self, r: &str) -> String {
        format!("No such image: {}", super::state::normalize_tag(r))
    }

    /// `daemon/errors.go` + `daemon/exec.go`, both: 404.
    pub fn no_such_exec(self, id: &str) -> String {
        format!("No such exec instance: {id}")
    }

    /// libnetwork `error.go` (vendored in 20.10, `daemon/libnetwork/error.go` in 29): 404.
    pub fn no_such_network(self, r: &str) -> String {
        format!("network {r} not found")
    }

    /// `daemon/network.go`, both: 403.
    pub fn network_active_endpoints(
        self,
        name: &str,
        id: &str,
        endpoints: &[(String, String)],
    ) -> String {
        match self {
            Self::Debian2010 => {
                format!("error while removing network: network {name} id {id} has active endpoints")
            }
            Self::Docker29 => {
                let eps: Vec<String> = endpoints
                    .iter()
                    .map(|(ep_name, ep_id)| {
                        format!("name:{ep_name:?} id:{:?}", &ep_id[..12.min(ep_id.len())])
                    })
                    .collect();
                format!(
                    "error while removing network: network {name} has active endpoints ({})",
                    eps.join(", ")
                )
            }
        }
    }

    /// `daemon/network.go` / `daemon/libnetwork/controller.go`: 409.
    pub fn network_exists(self, name: &str) -> String {
        format!("network with name {name} already exists")
    }

    /// `…/router/network/network_routes.go`: 403.
    pub fn predefined_network(self, name: &str) -> String {
        format!("{name} is a pre-defined network and cannot be removed")
    }

    /// 20.10: `api/types/filters/parse.go`; 29: `daemon/internal/filters/errors.go`: 400.
    pub fn invalid_filter(self, key: &str) -> String {
        match self {
            Self::Debian2010 => format!("Invalid filter '{key}'"),
            Self::Docker29 => format!("invalid filter '{key}'"),
        }
    }

    /// 20.10: `daemon/errors.go`; 29: `api/types/container/state.go`: 400.
    pub fn invalid_filter_value(self, key: &str, value: &str) -> String {
        match self {
            Self::Debian2010 => format!("Invalid filter '{key}={value}'"),
            Self::Docker29 => format!("invalid filter '{key}={value}': invalid value for state ({value}): must be one of created, running, paused, restarting, removing, exited, dead"),
        }
    }

    /// The body of `POST /containers/{id}/wait`: 20.10 always writes `Error` (not omitempty),
    /// 29 omits it (`api/types/container/wait_response.go`).
    pub fn wait_body(self, code: i64) -> serde_json::Value {
        match self {
            Self::Debian2010 => serde_json::json!({ "Error": null, "StatusCode": code }),
            Self::Docker29 => serde_json::json!({ "StatusCode": code }),
        }
    }

    /// 29 only, for API ≥ 1.42 and no TTY: the attach/exec stream's content type.
    pub fn raw_stream_type(self, tty: bool) -> &'static str {
        match (self, tty) {
            (Self::Docker29, false) => "application/vnd.docker.multiplexed-stream",
            _ => "application/vnd.docker.raw-stream",
        }
    }
}

fn parse_version(v: &str) -> Option<(u32, u32)> {
    let (a, b) = v.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_window() {
        let f = Flavor::Docker29;
        assert_eq!(f.version_error("1.44"), None);
        assert_eq!(f.version_error("1.52"), None);
        assert_eq!(
            f.version_error("1.41").as_deref(),
            Some("client version 1.41 is too old. Minimum supported API version is 1.44, please upgrade your client to a newer version")
        );
        assert!(f
            .version_error("1.53")
            .is_some_and(|m| m.contains("too new")));
        assert_eq!(Flavor::Debian2010.version_error("1.24"), None);
        assert_eq!("current".parse::<Flavor>(), Ok(Flavor::Docker29));
    }
}
