//! The operator's address pool for the stack's networks (`--network-pool`): every network the
//! stack makes, its own network among them, gets a subnet of the pool and that subnet's first
//! address as its gateway, both named in the create, chosen here from the subnets the engine
//! already holds (`held`, read from its network list). A stack still names no subnet itself
//! (one it chose could shadow a host route); the operator's pool is the only source.
//!
//! Why the gateway is named: dockerd before 23.0 (Debian 12 ships 20.10.24) writes a network's
//! record again after giving its subnet back and before removing the record; stopped in
//! between (a `systemctl restart docker` while a network is being removed), it keeps a record
//! whose subnet was the engine's choice but whose allocation is gone, and panics at every
//! start after (`reservePools`, moby#45057). A record that names its gateway is read back
//! whole, and the engine removes the half-removed network itself at that start. The engine
//! is the last judge of overlaps: a subnet another network took meanwhile is refused by it.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::refusal::Refusal;

/// The smallest subnet a pool is cut into: a network, its gateway, a sandbox and its sidecar.
pub const MAX_PREFIX_LEN: u8 = 29;

/// Label bytes (keys and values) one network may carry under a pool: every pooled create reads
/// the engine's whole network list, which a stack's labels would otherwise grow past any cap.
pub const MAX_LABEL_BYTES: usize = 16 << 10;

/// Ranges a pool may not touch: a bridge there would take this network's "this host",
/// loopback, link-local (where a cloud's metadata service answers) or multicast and reserved
/// addresses on the host.
const SPECIAL: [(&str, &str); 4] = [
    ("0.0.0.0/8", "this network"),
    ("127.0.0.0/8", "loopback"),
    (
        "169.254.0.0/16",
        "link-local, where a cloud's metadata service answers",
    ),
    ("224.0.0.0/3", "multicast and reserved"),
];

/// dockerd's IPAM's words for an explicit subnet another network's pool overlaps.
const POOL_OVERLAP: &str = "Pool overlaps with other one on this address space";

/// `--network-pool` cut into subnets of `prefix_len` bits (`--network-pool-size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkPool {
    pool: Ipv4Net,
    prefix_len: u8,
}

/// A subnet chosen for one network, with its gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assigned {
    pub subnet: Ipv4Net,
    pub gateway: Ipv4Addr,
}

impl NetworkPool {
    /// A pool cut into `/prefix_len` subnets; refused when they do not fit in it or leave no
    /// room for a gateway and two members.
    pub fn new(pool: Ipv4Net, prefix_len: u8) -> Result<Self, String> {
        for (special, what) in SPECIAL {
            let special: Ipv4Net = special.parse().map_err(|_| special.to_owned())?;
            if overlaps(&pool, &special) {
                return Err(format!("{pool} overlaps {special} ({what})"));
            }
        }
        if prefix_len < pool.prefix_len() || prefix_len > MAX_PREFIX_LEN {
            return Err(format!(
                "--network-pool-size {prefix_len} must be between the pool's own ({}) and {MAX_PREFIX_LEN}",
                pool.prefix_len()
            ));
        }
        Ok(Self {
            pool: pool.trunc(),
            prefix_len,
        })
    }

    pub fn pool(&self) -> Ipv4Net {
        self.pool
    }

    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// The pool's first subnet that overlaps none the engine holds.
    pub fn choose(&self, held: &[Ipv4Net]) -> Option<Assigned> {
        let subnets = self.pool.subnets(self.prefix_len).ok()?;
        subnets
            .into_iter()
            .find(|s| !held.iter().any(|h| overlaps(s, h)))
            .and_then(|subnet| {
                let gateway = subnet.hosts().next()?;
                Some(Assigned { subnet, gateway })
            })
    }

    /// A checked network create with its `IPAM` set to a free subnet of the pool; refused
    /// when none is free, when it asks for IPv6 (whose subnet would be the engine's choice,
    /// and its record as unreadable after a cut-short removal), or when its labels are over
    /// `MAX_LABEL_BYTES`. Also the transport's, for a subnet the engine refused (`overlap`).
    pub fn assign(&self, op: &str, held: &[Ipv4Net], body: &mut Value) -> Result<(), Refusal> {
        let setting = |why: String| Refusal::Setting { op: op.into(), why };
        let Value::Object(o) = body else {
            return Err(Refusal::BadRequest(format!("{op}: body is not an object")));
        };
        if o.get("EnableIPv6") == Some(&Value::Bool(true)) {
            return Err(setting(
                "EnableIPv6 true is not allowed for this stack under --network-pool (its IPv6 subnet would be the engine's choice)".into(),
            ));
        }
        let label_bytes: usize = o
            .get("Labels")
            .and_then(Value::as_object)
            .map(|l| {
                l.iter()
                    .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
                    .sum()
            })
            .unwrap_or(0);
        if label_bytes > MAX_LABEL_BYTES {
            return Err(setting(format!(
                "Labels of {label_bytes} bytes are not allowed for this stack's networks (at most {MAX_LABEL_BYTES})"
            )));
        }
        let Some(assigned) = self.choose(held) else {
            return Err(Refusal::Setting {
                op: op.into(),
                why: format!(
                    "no /{} of --network-pool {} is free (the engine's networks hold them all)",
                    self.prefix_len, self.pool
                ),
            });
        };
        o.insert("IPAM".into(), assigned.ipam());
        Ok(())
    }
}

impl Assigned {
    /// The create's `IPAM`: the engine's default driver, the subnet and its gateway.
    pub fn ipam(&self) -> Value {
        json!({
            "Driver": "default",
            "Config": [{ "Subnet": self.subnet.to_string(), "Gateway": self.gateway.to_string() }],
        })
    }
}

/// The subnet a create under the pool was given (`assign`).
pub fn assigned(body: &Value) -> Option<Ipv4Net> {
    body.get("IPAM")?
        .get("Config")?
        .get(0)?
        .get("Subnet")?
        .as_str()?
        .parse()
        .ok()
}

/// Whether the engine refused a create because its subnet overlaps one it holds: its IPAM's
/// words for a pool taken in the address space, or the bridge driver's for a bridge it keeps
/// that no network record names (one whose create an engine restart cut short, dockerd
/// 20.10). The subnet is then passed over, since nothing the engine lists shows it taken.
/// Matched whole, so a network name in another answer ("network with name X already exists")
/// can never read as one.
pub fn overlap(status: u16, body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Message {
        message: String,
    }
    let Ok(Message { message: m }) = serde_json::from_slice::<Message>(body) else {
        return false;
    };
    status == 403
        && (m == POOL_OVERLAP
            || (m.starts_with("cannot create network ")
                && m.ends_with(": networks have overlapping IPv4")))
}

fn overlaps(a: &Ipv4Net, b: &Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

#[derive(Deserialize)]
struct Listed {
    #[serde(rename = "IPAM", default)]
    ipam: Option<ListedIpam>,
}

#[derive(Deserialize)]
struct ListedIpam {
    #[serde(rename = "Config", default)]
    config: Option<Vec<ListedConfig>>,
}

#[derive(Deserialize)]
struct ListedConfig {
    #[serde(rename = "Subnet", default)]
    subnet: Option<String>,
}

/// Every IPv4 subnet in the engine's network list answer (`GET /networks`). IPv6 subnets are
/// not the pool's concern; an unreadable answer is a refusal, never an empty list.
pub fn held(body: &[u8]) -> Result<Vec<Ipv4Net>, Refusal> {
    let listed: Vec<Listed> = serde_json::from_slice(body)
        .map_err(|e| Refusal::Upstream(format!("unreadable network list: {e}")))?;
    Ok(listed
        .into_iter()
        .filter_map(|n| n.ipam)
        .filter_map(|i| i.config)
        .flatten()
        .filter_map(|c| c.subnet)
        .filter_map(|s| s.parse::<Ipv4Net>().ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().expect("cidr")
    }

    fn pool(s: &str, len: u8) -> NetworkPool {
        NetworkPool::new(net(s), len).expect("pool")
    }

    #[test]
    fn the_first_free_subnet_is_chosen_with_its_first_address_as_gateway() {
        type Row<'a> = (&'a str, u8, &'a [&'a str], Option<(&'a str, &'a str)>);
        let table: [Row; 7] = [
            (
                "10.213.0.0/16",
                24,
                &[],
                Some(("10.213.0.0/24", "10.213.0.1")),
            ),
            (
                "10.213.0.0/16",
                24,
                &["10.213.0.0/24"],
                Some(("10.213.1.0/24", "10.213.1.1")),
            ),
            // Held by a wider network (the engine's own pools, another stack's): skipped whole.
            (
                "10.213.0.0/16",
                24,
                &["10.213.0.0/23", "172.17.0.0/16"],
                Some(("10.213.2.0/24", "10.213.2.1")),
            ),
            // A narrower one inside a subnet makes it taken too.
            (
                "10.213.0.0/16",
                24,
                &["10.213.0.128/25"],
                Some(("10.213.1.0/24", "10.213.1.1")),
            ),
            (
                "10.213.0.0/28",
                29,
                &["10.213.0.0/29"],
                Some(("10.213.0.8/29", "10.213.0.9")),
            ),
            (
                "10.213.0.0/28",
                29,
                &["10.213.0.0/29", "10.213.0.8/29"],
                None,
            ),
            // A network holding the whole pool and more.
            ("10.213.0.0/16", 24, &["10.0.0.0/8"], None),
        ];
        for (p, len, held, want) in table {
            let held: Vec<Ipv4Net> = held.iter().map(|h| net(h)).collect();
            let got = pool(p, len).choose(&held);
            let want = want.map(|(s, g)| Assigned {
                subnet: net(s),
                gateway: g.parse().expect("ip"),
            });
            assert_eq!(got, want, "{p} /{len} with {held:?}");
        }
    }

    #[test]
    fn a_pool_touching_the_hosts_special_ranges_is_refused() {
        for (cidr, why) in [
            ("0.0.0.0/0", "0.0.0.0/0 overlaps 0.0.0.0/8 (this network)"),
            ("127.0.0.0/16", "127.0.0.0/16 overlaps 127.0.0.0/8 (loopback)"),
            ("169.254.169.0/24", "169.254.169.0/24 overlaps 169.254.0.0/16 (link-local, where a cloud's metadata service answers)"),
            ("160.0.0.0/4", "160.0.0.0/4 overlaps 169.254.0.0/16 (link-local, where a cloud's metadata service answers)"),
            ("239.1.0.0/16", "239.1.0.0/16 overlaps 224.0.0.0/3 (multicast and reserved)"),
        ] {
            assert_eq!(NetworkPool::new(net(cidr), 29), Err(why.to_owned()), "{cidr}");
        }
        assert!(NetworkPool::new(net("100.64.0.0/16"), 24).is_ok());
    }

    #[test]
    fn a_size_outside_the_pool_or_too_small_for_a_sandbox_is_refused() {
        assert!(NetworkPool::new(net("10.213.0.0/16"), 15).is_err());
        assert!(NetworkPool::new(net("10.213.0.0/16"), 30).is_err());
        assert!(NetworkPool::new(net("10.213.0.0/16"), 16).is_ok());
        // Written with host bits, read as its network.
        assert_eq!(pool("10.213.7.9/16", 24).pool(), net("10.213.0.0/16"));
    }

    #[test]
    fn the_create_gets_the_subnet_or_a_refusal_naming_the_pool() {
        let mut body = json!({ "Name": "p-sandbox-net-a", "IPAM": { "Driver": "default" } });
        pool("10.213.0.0/16", 24)
            .assign("networks.create", &[], &mut body)
            .expect("free");
        assert_eq!(
            body["IPAM"],
            json!({ "Driver": "default", "Config": [{ "Subnet": "10.213.0.0/24", "Gateway": "10.213.0.1" }] })
        );
        let mut v6 = json!({ "Name": "n", "EnableIPv6": true });
        assert!(pool("10.213.0.0/16", 24)
            .assign("networks.create", &[], &mut v6)
            .expect_err("v6")
            .to_string()
            .contains("EnableIPv6 true is not allowed for this stack under --network-pool"));
        let mut big = json!({ "Name": "n", "Labels": { "k": "x".repeat(MAX_LABEL_BYTES) } });
        assert_eq!(
            pool("10.213.0.0/16", 24)
                .assign("networks.create", &[], &mut big)
                .expect_err("labels")
                .to_string(),
            "sockproxy: networks.create: Labels of 16385 bytes are not allowed for this stack's networks (at most 16384)"
        );
        let full = pool("10.213.0.0/24", 24)
            .assign("networks.create", &[net("10.213.0.0/24")], &mut body)
            .expect_err("full");
        assert_eq!(
            full.to_string(),
            "sockproxy: networks.create: no /24 of --network-pool 10.213.0.0/24 is free (the engine's networks hold them all)"
        );
    }

    #[test]
    fn the_engines_overlap_refusals_are_told_from_its_others() {
        let table: [(u16, &str, bool); 7] = [
            (
                403,
                r#"{"message":"Pool overlaps with other one on this address space"}"#,
                true,
            ),
            (
                403,
                r#"{"message":"cannot create network 0011 (br-0011): conflicts with network f883 (br-f883): networks have overlapping IPv4"}"#,
                true,
            ),
            (
                409,
                r#"{"message":"network with name x already exists"}"#,
                false,
            ),
            (403, r#"{"message":"operation not permitted"}"#, false),
            (
                500,
                r#"{"message":"Pool overlaps with other one on this address space"}"#,
                false,
            ),
            // A name the client chose, inside another answer.
            (
                403,
                r#"{"message":"network with name p-Pool overlaps with other one on this address space already exists"}"#,
                false,
            ),
            (
                403,
                r#"{"message":"network with name p-: networks have overlapping IPv4 already exists"}"#,
                false,
            ),
        ];
        for (status, body, want) in table {
            assert_eq!(overlap(status, body.as_bytes()), want, "{status} {body}");
        }
        let mut body = json!({ "Name": "n" });
        assert_eq!(assigned(&body), None);
        pool("10.213.0.0/16", 24)
            .assign("networks.create", &[], &mut body)
            .expect("free");
        assert_eq!(assigned(&body), Some(net("10.213.0.0/24")));
    }

    #[test]
    fn the_engines_list_gives_its_ipv4_subnets_and_a_garbled_one_is_refused() {
        let list = br#"[
            {"Name":"bridge","IPAM":{"Driver":"default","Config":[{"Subnet":"172.17.0.0/16","Gateway":"172.17.0.1"}]}},
            {"Name":"v6","IPAM":{"Config":[{"Subnet":"10.9.0.0/24"},{"Subnet":"fd00::/64"}]}},
            {"Name":"host","IPAM":{"Driver":"default","Config":[]}},
            {"Name":"none","IPAM":{"Config":null}},
            {"Name":"odd"}
        ]"#;
        assert_eq!(
            held(list).expect("list"),
            vec![net("172.17.0.0/16"), net("10.9.0.0/24")]
        );
        assert!(held(b"{\"message\":\"x\"}").is_err());
        assert!(held(b"not json").is_err());
    }
}
