//! sockproxy-policy: what a stack may ask of the Docker Engine API, decided without I/O. The
//! front door is one function, `evaluate(request, facts, policy) -> Decision`: the transport
//! (the `sockproxy` crate) hands it a request head and what its I/O found (`Facts`), and acts on
//! the `Plan` it answers, or sends the `Refusal`. A plan that names an object says which fact it
//! needs; only with that fact does it carry the `Pinned` ID, which nothing outside this crate
//! can make. Besides `evaluate` and its types, the crate shows the transport what it reads off
//! the engine (`facts`), the filters every answer passes before the stack sees it (`filters`),
//! the operator's settings as the policy takes them (`settings`), and the properties the fuzz
//! targets assert (`props`). Everything else is private.
//!
//! Within: a request is canonicalized (`canon`), typed (`api`, `reference`) and decided
//! (`policy`, `scope`, `spend`); an object the engine named is pinned (`pinning`). Bodies are
//! read with the key rule (`json`, `fields`) and decided by `create_body`, `host_config`,
//! `host_refs`, `mounts`, `paths` and `write_rules` under the operator's `create_rules`, and
//! `spend_host`; `stack_net` puts a create on the stack's own network, and `limits` holds each
//! container's memory, CPU and pids limits and the stack's totals; `bind_pins` says which host
//! paths a checked create binds (the transport pins each, `Need::BindPins`, asked last) and
//! writes the body forwarded on the staging paths it pinned them on. Answers are cut to the
//! stack's view: lists (`list_query`, `filter`, `volumes`), events (`events`) and `info`;
//! `answers` reads the engine's answers the decisions stand on. A refusal (`refusal`) carries
//! dockerd's error shape. `log_flood` is the rule the transport's log guard samples each running
//! container against, the one decision not about a request.

mod answers;
mod api;
mod bind_pins;
mod canon;
mod create_body;
mod create_props;
mod create_rules;
pub mod deployment;
mod evaluate;
mod evaluate_props;
mod events;
mod fields;
mod filter;
mod host_config;
mod host_refs;
mod images;
mod info;
mod json;
mod limits;
mod list_query;
pub mod log_flood;
mod mounts;
mod paths;
mod pinning;
mod policy;
pub mod props;
mod reference;
mod refusal;
mod refusal_rule;
mod scope;
mod seccomp;
mod spend;
mod spend_host;
mod stack_net;
mod steps;
mod subnet_pool;
mod volumes;
mod write_rules;

pub use crate::api::{ContainerOp, ExecOp, NetworkOp};
pub use crate::bind_pins::{BindSource, BIND_LABEL_PREFIX};
pub use crate::canon::{Query, Target};
pub use crate::evaluate::{
    evaluate, Decision, Fact, Facts, Found, Host, Inspected, Need, Pinned, Plan, Policy, Reason,
    Request, Sent,
};
pub use crate::policy::Route;
pub use crate::reference::{is_full_id, CanonicalName, ObjRef};
pub use crate::refusal::Refusal;
pub use crate::scope::{Access, Kind, Prefix, PrefixError, Scope, STACK_LABEL};

/// The engine's answers and the client's body as the transport reads them into `Facts`: an
/// inspect (`Named`), an exec instance's inspect (`ExecInfo`), the list of the stack's own
/// objects (`own_list_path` asks for it, `own_objects` keeps what the stack may see), a JSON
/// body (`parse_body`, the key rule), the stack's own network (`stack_network` names it,
/// `stack_network_body` is what makes it, `StackNetwork` reads its inspect), a container's
/// memory limit for the totals (`Usage`) and the subnets the engine's networks hold
/// (`network_subnets`, for `--network-pool`).
pub mod facts {
    pub use crate::answers::{
        own_list_path, own_objects, parse_body, ExecInfo, Named, Own, ARCHIVE_SAFE_API,
    };
    pub use crate::limits::Usage;
    pub use crate::stack_net::{create_body as stack_network_body, Held as StackNetwork};
    pub use crate::subnet_pool::{
        assigned as assigned_subnet, held as network_subnets, overlap as subnet_overlap,
        Assigned as AssignedSubnet,
    };

    /// The name of the stack's own network (`{P}net`).
    pub fn stack_network(policy: &crate::Policy) -> String {
        crate::stack_net::name(&policy.scope, &policy.stack)
    }

    /// Whether `held` is the network the proxy made for this stack (what a create may join,
    /// and what the proxy may remove when no container names it).
    pub fn is_stack_network(held: &StackNetwork, policy: &crate::Policy) -> bool {
        crate::stack_net::judge("networks.remove", held, policy).is_ok()
    }
}

/// What the transport does to the engine's answers before the stack sees them: lists asked
/// for the stack's own (`own_list_filters`) and cut to them (`stack_list`, `stack_volumes`), a
/// network's endpoints (`own_endpoints`), events (`keep_event`), `/info` (`info_for_stack`), and
/// a name conflict (`conflict_names_only`).
pub mod filters {
    pub use crate::answers::conflict_names_only;
    pub use crate::events::keep as keep_event;
    pub use crate::filter::{own_endpoints, parse_limit, stack_list, FilterError, OwnIds};
    pub use crate::info::{for_stack as info_for_stack, State};
    pub use crate::list_query::{own_list_filters, ListAsk, Names};
    pub use crate::volumes::stack_volumes;
}

/// The operator's settings as the policy takes them: what creates may ask for
/// (`CreateRules`, `Spend`), the host paths a bind source is walked on (`HostPaths`), and the
/// readers the flags and the policy file are validated with (`clean_absolute`: a path
/// setting is absolute, with no `.`, `..` or doubled `/`).
pub mod settings {
    pub use crate::canon::api_version;
    pub use crate::create_rules::{default_log_drivers, CreateRules, HostPaths, DEFAULT_MAX_SHM};
    pub use crate::images::normalize_image;
    pub use crate::limits::{cpus, Limits};
    pub use crate::paths::clean_absolute;
    pub use crate::seccomp::{canonical as canonical_seccomp, Canonical};
    pub use crate::spend::{parse_duration, show_duration, Spend};
    pub use crate::spend_host::ram_in_bytes;
    pub use crate::subnet_pool::NetworkPool;
}
