//! `--policy FILE` and `--print-policy`: the stack's policy as TOML. The file's keys are the
//! policy settings of `config::Args`, each its flag's name without `--` (`name-cache = false` is
//! `--no-name-cache`); `merged` reads the file under the flags, and `print` writes the effective
//! policy in that form (with the name families as comments), so an operator can see and keep
//! exactly what the proxy enforces. Flags add to the file's lists, turn on its switches and
//! override its numbers.

use std::fmt;

use figment::providers::Serialized;
use figment::value::{Dict, Value};
use figment::Figment;
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use stackmodel::{ChangedIn, FAMILIES};

use crate::config::{Args, Config, ConfigError, InfoMode};
use crate::spend_args::SpendArgs;
use sockproxy_policy::settings::cpus;

/// The flags with the policy file they name (`--policy`), if any, read into them: the settings
/// `Config::from_args` takes.
pub fn merged(mut flags: Args) -> Result<Args, ConfigError> {
    let Some(path) = flags.policy.take() else {
        return Ok(flags);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| ConfigError::PolicyFile(path.clone(), e.to_string()))?;
    over(flags, &text).map_err(|e| ConfigError::PolicyFile(path, e))
}

/// `flags` over the policy file `text`, in one merge (figment's `adjoin`): the flags' lists,
/// then the file's; a switch on if either turns it on; a number from the flags where they give
/// one, else from the file. The flag-only settings (`#[serde(skip)]`) are the flags'.
pub fn over(flags: Args, text: &str) -> Result<Args, String> {
    let file = read(text)?;
    let both: Args = Figment::from(Serialized::defaults(given(&flags)?))
        .adjoin(Serialized::defaults(file))
        .extract()
        .map_err(|e| e.to_string())?;
    Ok(Args {
        listen: flags.listen,
        upstream: flags.upstream,
        prefix: flags.prefix,
        stack: flags.stack,
        socket_mode: flags.socket_mode,
        socket_group: flags.socket_group,
        metrics_listen: flags.metrics_listen,
        log_format: flags.log_format,
        shutdown_grace: flags.shutdown_grace,
        worker_threads: flags.worker_threads,
        event_loops: flags.event_loops,
        stack_lock: flags.stack_lock,
        policy: flags.policy,
        print_policy: flags.print_policy,
        pin_dir: flags.pin_dir,
        state_dir: flags.state_dir,
        network_pool: flags.network_pool,
        network_pool_size: flags.network_pool_size,
        ..both
    })
}

/// The policy settings by key (the flag-only ones are not serialized).
fn settings(args: &impl Serialize) -> Result<Dict, String> {
    Value::serialize(args)
        .map(|v| v.into_dict().unwrap_or_default())
        .map_err(|e| e.to_string())
}

/// The policy settings `flags` give. One that no flag or variable gave is as in
/// `Args::default()` (a switch off, a list empty, a number open: no policy setting has a clap
/// default, a test checks it) and is left out so that the file's stands; a switch the flags
/// leave off, in particular, must not turn off the file's.
fn given(flags: &Args) -> Result<Dict, String> {
    let unset = settings(&Args::default())?;
    let mut given = settings(flags)?;
    given.retain(|key, value| unset.get(key) != Some(value));
    Ok(given)
}

/// The file's settings. Each entry is first read on its own, so that a mistake in one (a key
/// the proxy does not know, a value of the wrong type, a spelling the flag would refuse such
/// as `info = "Deny"`) is reported at its line and column: read whole, a mistake in a key of
/// `SpendArgs` (serde's `flatten`) would be reported at the top of the file.
fn read(text: &str) -> Result<Args, String> {
    let keys: Vec<String> = settings(&Args::default())?.into_keys().collect();
    let spend: Vec<String> = settings(&SpendArgs::default())?.into_keys().collect();
    toml::Deserializer::parse(text)
        .and_then(|doc| {
            doc.deserialize_map(Entries {
                keys: &keys,
                spend: &spend,
            })
        })
        .map_err(|e| e.to_string())?;
    toml::from_str(text).map_err(|e| e.to_string())
}

/// The file's entries, each read as a setting of its own: `keys` are every setting's,
/// `spend` those of `SpendArgs`.
struct Entries<'a> {
    keys: &'a [String],
    spend: &'a [String],
}

impl<'de> Visitor<'de> for Entries<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a table of policy settings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(Key(self.keys))? {
            let spend = self.spend.contains(&key);
            map.next_value_seed(Setting { key, spend })?;
        }
        Ok(())
    }
}

/// A key, refused where it stands unless it names a setting.
struct Key<'a>(&'a [String]);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        let key = String::deserialize(d)?;
        if self.0.contains(&key) {
            return Ok(key);
        }
        let expected: Vec<String> = self.0.iter().map(|k| format!("`{k}`")).collect();
        Err(de::Error::custom(format_args!(
            "unknown field `{key}`, expected one of {}",
            expected.join(", ")
        )))
    }
}

/// A value, read as `Args` reads its key's, so that its mistake is reported where it stands.
/// A key of `SpendArgs` is read by it directly: through `Args`'s `flatten` the value would be
/// buffered first, and a mistake inside a list reported at the list.
struct Setting {
    key: String,
    spend: bool,
}

impl<'de> DeserializeSeed<'de> for Setting {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, value: D) -> Result<(), D::Error> {
        let entry = OneEntry {
            key: Some(self.key),
            value: Some(value),
        };
        if self.spend {
            SpendArgs::deserialize(entry).map(drop)
        } else {
            Args::deserialize(entry).map(drop)
        }
    }
}

/// A table of one entry whose value is still to be read: what `Setting` gives `Args`.
struct OneEntry<D> {
    key: Option<String>,
    value: Option<D>,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for OneEntry<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        visitor.visit_map(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

impl<'de, D: Deserializer<'de>> MapAccess<'de> for OneEntry<D> {
    type Error = D::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, D::Error> {
        self.key
            .take()
            .map(|key| seed.deserialize(IntoDeserializer::<D::Error>::into_deserializer(key)))
            .transpose()
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, D::Error> {
        let value = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a value without a key"))?;
        seed.deserialize(value)
    }
}

/// The effective policy of a validated configuration, as the settings that give it: every
/// policy-file setting given, the flag-only ones left at their defaults (not printed).
pub fn effective(cfg: &Config) -> Args {
    let r = &cfg.create_rules;
    let (major, minor) = cfg.min_api_version;
    Args {
        restricted: cfg.scope.restricted(),
        info: Some(if cfg.scope.info_for_stack() {
            InfoMode::Stack
        } else {
            InfoMode::Deny
        }),
        min_api_version: Some(format!("{major}.{minor}")),
        allow_cap: r.allow_caps.clone(),
        allow_bind_root: r.bind_roots.clone(),
        allow_public_ports: r.public_ports,
        allow_publish_address: r.publish_addresses.iter().map(|a| a.to_string()).collect(),
        allow_default_bridge: r.allow_default_bridge,
        allow_seccomp_unconfined: r.allow_seccomp_unconfined,
        allow_seccomp_profile: r
            .seccomp_profiles
            .iter()
            .map(|d| format!("sha256:{d}"))
            .collect(),
        allow_sysctl: r.allow_sysctls.clone(),
        max_shm_size: Some(r.max_shm_size),
        allow_log_driver: r.allow_log_drivers.clone(),
        allow_image: cfg.allow_images.clone(),
        require_stack_label: r.require_stack_label,
        header_timeout: Some(cfg.header_timeout.as_secs()),
        body_timeout: Some(cfg.body_timeout.as_secs()),
        max_connections: Some(cfg.max_connections),
        max_list_bytes: Some(cfg.max_list_bytes),
        max_bind_pins: Some(cfg.pins.max),
        max_list_bytes_total: Some(cfg.max_list_bytes_total),
        no_name_cache: !cfg.name_cache,
        spend: SpendArgs {
            max_json_keys: Some(r.spend.max_json_keys),
            min_healthcheck_interval: Some(sockproxy_policy::settings::show_duration(
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
            default_memory: Some(r.spend.limits.default_memory.to_string()),
            default_cpus: Some(cpus(r.spend.limits.default_nano_cpus)),
            default_pids_limit: Some(r.spend.limits.default_pids_limit),
            max_container_memory: Some(r.spend.limits.max_container_memory.to_string()),
            max_container_cpus: Some(cpus(r.spend.limits.max_container_nano_cpus)),
            max_containers: Some(r.spend.limits.max_containers),
            max_memory: Some(r.spend.limits.max_memory.to_string()),
            log_flood_lines: Some(cfg.log_flood.map_or(0, |l| l.lines)),
            log_flood_seconds: cfg.log_flood.map(|l| l.seconds),
        },
        ..Args::default()
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
    out.push_str(&format!(
        "#   network   {}  the stack's own: made by the proxy, joined by creates that name no network, never changed\n",
        sockproxy_policy::facts::stack_network(&crate::server::policy_of(cfg))
    ));
    out.push_str("#   networks bridge, host, none: read only\n");
    out.push_str(&toml::to_string(&effective(cfg)).map_err(|e| e.to_string())?);
    Ok(out)
}

#[cfg(test)]
#[path = "policy_file_tests.rs"]
mod tests;
