//! The stack's policy as sockproxy enforces it: what a stack may see, create and change, and what
//! is refused before it reaches an engine. Raw requests against a recording stand-in upstream
//! (`offline`), the HTTP layer in front of the policy (`http_layer`: bad heads, slow and idle
//! clients) and lists filtered and capped there (`lists`), issue 12's host-takeover bypasses
//! checked on what the engine holds afterwards (`bypasses`), and those a later review found
//! (`host_reach`: tmpfs flags, `top`'s ps options, unlimited pids, gateway modes), creates, events, rename, update,
//! exec, pulls and network options with the docker CLI (`writes`), what `info`/`version`/the
//! bridge network say for a stack (`info`), `--restricted`'s network and sidecar scopes
//! (`restricted`), the name map pinning the right container in one round trip (`names`), and
//! two stacks given one prefix under `--require-stack-label` (`shared_prefix`), log options the
//! engine expands at every line (`log_templates`), list filters the proxy cannot read or that
//! would compile too much (`list_filters`), and bind sources pinned against a swap after the
//! create, across every kind of restart, and a proxy that cannot pin refusing to start (`pins`,
//! `pins_restarts`, `pins_startup`), and a sandbox flooding its log stopped by the log guard
//! (`log_flood`), and the stack's networks given subnets of the operator's pool, which keeps a
//! dockerd 20.10 restarted during a network removal able to start (`network_pool`), and
//! compose's labels refused on what a stack makes (`compose_labels`);
//! on the fake and the real engine. Run on its own with
//! `cargo test -p sockproxy-tests --test policy`.

mod bypasses;
mod compose_labels;
mod floors;
mod host_reach;
mod http_layer;
mod info;
mod isolation;
mod limits;
mod list_filters;
mod lists;
mod log_flood;
mod log_templates;
mod names;
mod network_pool;
mod offline;
mod pins;
mod pins_restarts;
mod pins_startup;
mod restricted;
mod seccomp;
mod shared_prefix;
mod slow_body;
mod spend;
mod stack_network;
mod totals;
mod volumes;
mod writes;
