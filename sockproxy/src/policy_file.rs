//! `--policy FILE`: the stack's policy as TOML, the same settings as the flags, and
//! `--print-policy`, which writes the effective policy in that form (with the name families
//! as comments), so an operator can see and keep exactly what the proxy enforces.
//! Flags add to the file's lists, turn on its switches and override its numbers.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use stackmodel::{ChangedIn, FAMILIES};

use crate::config::{Args, Config, InfoMode};

/// Every policy setting; a key the proxy does not know is an error, not ignored.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PolicyFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restricted: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<InfoMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_api_version: Option<String>,
    #[serde(default)]
    pub allow_cap: Vec<String>,
    #[serde(default)]
    pub allow_bind_root: Vec<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_public_ports: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_seccomp_unconfined: Option<bool>,
    #[serde(default)]
    pub allow_seccomp_profile: Vec<String>,
    #[serde(default)]
    pub allow_sysctl: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_shm_size: Option<u64>,
    #[serde(default)]
    pub allow_log_driver: Vec<String>,
    #[serde(default)]
    pub allow_image: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_stack_label: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_timeout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_list_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_list_bytes_total: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_cache: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_json_keys: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_healthcheck_interval: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_healthcheck_retries: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stop_timeout: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_port_bindings: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_host_port: Option<u16>,
    #[serde(default)]
    pub allow_host_port: Vec<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpu_shares: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_blkio_weight: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_core_ulimit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_log_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_log_files: Option<u64>,
    #[serde(default)]
    pub allow_log_opt: Vec<String>,
}

impl PolicyFile {
    pub fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// The flags, with this file's settings where the flags leave them open.
    pub fn merge_into(self, mut a: Args) -> Args {
        a.restricted |= self.restricted.unwrap_or(false);
        a.allow_public_ports |= self.allow_public_ports.unwrap_or(false);
        a.allow_seccomp_unconfined |= self.allow_seccomp_unconfined.unwrap_or(false);
        a.require_stack_label |= self.require_stack_label.unwrap_or(false);
        a.no_name_cache |= self.name_cache == Some(false);
        a.allow_cap.extend(self.allow_cap);
        a.allow_bind_root.extend(self.allow_bind_root);
        a.allow_seccomp_profile.extend(self.allow_seccomp_profile);
        a.allow_sysctl.extend(self.allow_sysctl);
        a.allow_log_driver.extend(self.allow_log_driver);
        a.allow_image.extend(self.allow_image);
        a.info = a.info.or(self.info);
        a.min_api_version = a.min_api_version.or(self.min_api_version);
        a.max_shm_size = a.max_shm_size.or(self.max_shm_size);
        a.header_timeout = a.header_timeout.or(self.header_timeout);
        a.max_connections = a.max_connections.or(self.max_connections);
        a.max_list_bytes = a.max_list_bytes.or(self.max_list_bytes);
        a.max_list_bytes_total = a.max_list_bytes_total.or(self.max_list_bytes_total);
        let sp = &mut a.spend;
        sp.max_json_keys = sp.max_json_keys.or(self.max_json_keys);
        sp.min_healthcheck_interval = sp
            .min_healthcheck_interval
            .take()
            .or(self.min_healthcheck_interval);
        sp.max_healthcheck_retries = sp.max_healthcheck_retries.or(self.max_healthcheck_retries);
        sp.max_stop_timeout = sp.max_stop_timeout.or(self.max_stop_timeout);
        sp.max_port_bindings = sp.max_port_bindings.or(self.max_port_bindings);
        sp.min_host_port = sp.min_host_port.or(self.min_host_port);
        sp.allow_host_port.extend(self.allow_host_port);
        sp.max_cpu_shares = sp.max_cpu_shares.or(self.max_cpu_shares);
        sp.max_blkio_weight = sp.max_blkio_weight.or(self.max_blkio_weight);
        sp.max_pids_limit = sp.max_pids_limit.or(self.max_pids_limit);
        sp.max_core_ulimit = sp.max_core_ulimit.or(self.max_core_ulimit);
        sp.max_log_size = sp.max_log_size.take().or(self.max_log_size);
        sp.max_log_files = sp.max_log_files.or(self.max_log_files);
        sp.allow_log_opt.extend(self.allow_log_opt);
        a
    }

    /// The effective policy of a validated configuration.
    pub fn of(cfg: &Config) -> Self {
        let r = &cfg.create_rules;
        let (major, minor) = cfg.min_api_version;
        Self {
            restricted: Some(cfg.scope.restricted()),
            info: Some(if cfg.scope.info_for_stack() {
                InfoMode::Stack
            } else {
                InfoMode::Deny
            }),
            min_api_version: Some(format!("{major}.{minor}")),
            allow_cap: r.allow_caps.clone(),
            allow_bind_root: r.bind_roots.clone(),
            allow_public_ports: Some(r.public_ports),
            allow_seccomp_unconfined: Some(r.allow_seccomp_unconfined),
            allow_seccomp_profile: r
                .seccomp_profiles
                .iter()
                .map(|d| format!("sha256:{d}"))
                .collect(),
            allow_sysctl: r.allow_sysctls.clone(),
            max_shm_size: Some(r.max_shm_size),
            allow_log_driver: r.allow_log_drivers.clone(),
            allow_image: cfg.allow_images.clone(),
            require_stack_label: Some(r.require_stack_label),
            header_timeout: Some(cfg.header_timeout.as_secs()),
            max_connections: Some(cfg.max_connections),
            max_list_bytes: Some(cfg.max_list_bytes),
            max_list_bytes_total: Some(cfg.max_list_bytes_total),
            name_cache: Some(cfg.name_cache),
            max_json_keys: Some(r.spend.max_json_keys),
            min_healthcheck_interval: Some(sockproxy_policy::spend::show_duration(
                r.spend.min_healthcheck_interval_ns,
            )),
            max_healthcheck_retries: Some(r.spend.max_healthcheck_retries),
            max_stop_timeout: Some(r.spend.max_stop_timeout),
            max_port_bindings: Some(r.spend.max_port_bindings),
            min_host_port: Some(r.spend.min_host_port),
            allow_host_port: r.spend.allow_host_ports.clone(),
            max_cpu_shares: Some(r.spend.max_cpu_shares),
            max_blkio_weight: Some(r.spend.max_blkio_weight),
            max_pids_limit: Some(r.spend.max_pids_limit),
            max_core_ulimit: Some(r.spend.max_core_ulimit),
            max_log_size: Some(r.spend.max_log_size.to_string()),
            max_log_files: Some(r.spend.max_log_files),
            allow_log_opt: r.spend.allow_log_opts.clone(),
        }
    }
}

/// `--print-policy`: the name families this stack may see and change, then every setting.
pub fn print(cfg: &Config) -> Result<String, String> {
    let p = cfg.scope.prefix().as_str();
    let mut out = format!(
        "# sockproxy policy for stack {:?}: prefix {p:?}, {} mode.\n\
         # Lists show every container and network whose name starts with {p:?}.\n\
         # Names this stack may change (kind, pattern, open mode, restricted mode):\n",
        cfg.stack,
        if cfg.scope.restricted() {
            "restricted"
        } else {
            "open"
        }
    );
    for f in FAMILIES {
        let restricted_only = f.changed_in == ChangedIn::Restricted;
        out.push_str(&format!(
            "#   {:<9} {p}{}*  open: {:<3}  restricted: yes   ({})\n",
            f.kind.as_str(),
            f.role,
            if restricted_only { "no" } else { "yes" },
            f.what
        ));
    }
    out.push_str("#   networks bridge, host, none: read only\n");
    out.push_str(&toml::to_string(&PolicyFile::of(cfg)).map_err(|e| e.to_string())?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> Args {
        let mut argv = vec![
            "sockproxy",
            "--listen",
            "/tmp/x.sock",
            "--prefix",
            "deer-flow-",
        ];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).expect("parses")
    }

    #[test]
    fn a_printed_policy_reads_back_to_the_same_configuration() {
        let cfg = Config::from_args(
            args(&[
                "--allow-cap",
                "CHOWN",
                "--allow-sysctl",
                "net.ipv4.ping_group_range",
                "--info",
                "deny",
                "--max-shm-size",
                "1024",
                "--min-healthcheck-interval",
                "1500ms",
                "--allow-host-port",
                "80",
                "--max-stop-timeout",
                "30",
                "--max-log-size",
                "10m",
                "--allow-log-opt",
                "json-file:mode",
            ]),
            None,
        )
        .expect("valid");
        let printed = print(&cfg).expect("printed");
        assert!(
            printed.contains("deer-flow-sandbox-*  open: yes"),
            "{printed}"
        );
        assert!(
            printed.contains("deer-flow-sandbox-egress-*  open: no"),
            "{printed}"
        );
        let file = PolicyFile::parse(&printed).expect("the printed policy is a policy file");
        let again = Config::from_args(file.clone().merge_into(args(&[])), None).expect("valid");
        assert_eq!(PolicyFile::of(&again), file);
    }

    #[test]
    fn flags_add_to_the_file_and_override_its_numbers() {
        let file =
            PolicyFile::parse("allow-cap = [\"CHOWN\"]\nmax-shm-size = 10\nrestricted = true\n")
                .expect("valid");
        let merged = file.merge_into(args(&["--allow-cap", "FOWNER", "--max-shm-size", "20"]));
        // An enum setting is read as one: a spelling the flag would refuse is refused, never
        // taken for the default (`info = "Deny"` once meant `stack`, open).
        assert_eq!(
            PolicyFile::parse("info = \"deny\"").map(|f| f.merge_into(args(&[])).info),
            Ok(Some(InfoMode::Deny))
        );
        for bad in ["Deny", "DENY", "off", ""] {
            let got = PolicyFile::parse(&format!("info = \"{bad}\""));
            assert_eq!(
                got.map_err(|e| e.lines().last().map(str::to_owned)),
                Err(Some(format!(
                    "unknown variant `{bad}`, expected `stack` or `deny`"
                ))),
                "{bad}"
            );
        }
        assert_eq!(merged.allow_cap, ["FOWNER", "CHOWN"]);
        assert_eq!(merged.max_shm_size, Some(20));
        assert!(merged.restricted);
        assert_eq!(
            PolicyFile::parse("allow-everything = true"),
            Err(concat!(
                "TOML parse error at line 1, column 1\n",
                "  |\n",
                "1 | allow-everything = true\n",
                "  | ^^^^^^^^^^^^^^^^\n",
                "unknown field `allow-everything`, expected one of ",
                "`restricted`, `info`, `min-api-version`, `allow-cap`, ",
                "`allow-bind-root`, `allow-public-ports`, `allow-seccomp-unconfined`, `allow-seccomp-profile`, ",
                "`allow-sysctl`, `max-shm-size`, `allow-log-driver`, `allow-image`, ",
                "`require-stack-label`, `header-timeout`, `max-connections`, `max-list-bytes`, ",
                "`max-list-bytes-total`, `name-cache`, `max-json-keys`, `min-healthcheck-interval`, ",
                "`max-healthcheck-retries`, `max-stop-timeout`, `max-port-bindings`, `min-host-port`, ",
                "`allow-host-port`, `max-cpu-shares`, `max-blkio-weight`, `max-pids-limit`, ",
                "`max-core-ulimit`, `max-log-size`, `max-log-files`, `allow-log-opt`\n",
            )
            .into())
        );
    }
}
