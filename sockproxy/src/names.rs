//! The name ↔ ID map of the stack's own containers and networks (pure; the event stream that
//! keeps it coherent is `watch`'s). It lets a request naming an object skip the inspect that
//! pins it: one engine round trip instead of two.
//!
//! Why a cached pin is as safe as an inspected one:
//! - Entries come only from the engine's inspect answers (the same answers today's decision
//!   reads), and only while the event subscription is live. An entry carries what the decision
//!   reads — full ID, name, `sockproxy.stack` label — and `evaluate` decides on it
//!   exactly as on a fresh inspect, so scope and label rules are the same.
//! - Every create, rename or destroy event that names an object the stack can see, or an ID the
//!   map holds, drops the entries it touches and bumps a generation. A fill whose inspect
//!   started before such an event is discarded, so an entry is never older than the event
//!   stream.
//! - While the subscription is down the map is empty and takes no fills: every request inspects,
//!   as it did without the map. After a drop the map starts empty again rather than replaying
//!   with `since`: the engine keeps a bounded event buffer (and none across a restart), so a
//!   replay cannot prove nothing was missed.
//! - What remains is the time an event takes to arrive. In that window an entry can only pin to
//!   an object that *was* the stack's own under that name: names in scope are only ever given
//!   by this stack (its creates and renames are checked), IDs are never reused, and a label
//!   never changes. A pin to an ID that no longer exists gets the engine's 404, and the proxy
//!   then inspects afresh and tries once more (`proxy`'s `with_fresh_pin`). The same window exists without the map,
//!   between an inspect and the request it pins.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use sockproxy_policy::{is_full_id, CanonicalName, Found, Inspected, Kind, ObjRef, Scope};

/// Objects remembered per kind; past this, fills are dropped (lookups then inspect).
const MAX_ENTRIES: usize = 65_536;

/// When a lookup or an inspect was made, for `Names::fill`: a fill is taken only if no event
/// that concerns the stack came in between, and the subscription never dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp(u64);

#[derive(Debug, Default)]
struct Table {
    by_name: HashMap<String, Found>,
    by_id: HashMap<String, String>,
}

impl Table {
    fn remove_id(&mut self, id: &str) {
        if let Some(name) = self.by_id.remove(id) {
            self.by_name.remove(&name);
        }
    }

    fn remove_name(&mut self, name: &str) {
        if let Some(e) = self.by_name.remove(name) {
            self.by_id.remove(&e.id);
        }
    }
}

#[derive(Debug, Default)]
struct State {
    live: bool,
    generation: u64,
    containers: Table,
    networks: Table,
}

impl State {
    /// Every entry gone, and every fill in flight refused.
    fn forget(&mut self) {
        self.generation += 1;
        self.containers = Table::default();
        self.networks = Table::default();
    }

    fn table(&mut self, kind: Kind) -> &mut Table {
        match kind {
            Kind::Container => &mut self.containers,
            Kind::Network => &mut self.networks,
        }
    }
}

/// What an engine event does to a name or an ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Rename,
    Destroy,
}

/// What an engine event means for the map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    pub action: Action,
    pub id: String,
    /// The object's name after the event, without the leading `/`.
    pub name: Option<String>,
    /// A rename's old name, without the leading `/`.
    pub old_name: Option<String>,
}

impl Event {
    /// Reads one line of `GET /events`. `None` for an event that does not change any name or ID
    /// (start, stop, connect, …) or a line that is not an event; the caller treats an unreadable
    /// line as a doubt (`Names::doubt`).
    pub fn parse(line: &[u8]) -> Result<Option<Self>, serde_json::Error> {
        let v: serde_json::Value = serde_json::from_slice(line)?;
        let kind = match v["Type"].as_str() {
            Some("container") => Kind::Container,
            Some("network") => Kind::Network,
            _ => return Ok(None),
        };
        // `status` is the pre-1.22 spelling of the action.
        let action = match v["Action"].as_str().or(v["status"].as_str()) {
            Some("create") => Action::Create,
            Some("rename") => Action::Rename,
            Some("destroy") => Action::Destroy,
            _ => return Ok(None),
        };
        let id = v["Actor"]["ID"]
            .as_str()
            .or(v["id"].as_str())
            .unwrap_or("")
            .to_owned();
        let attrs = &v["Actor"]["Attributes"];
        let bare = |k: &str| {
            attrs[k]
                .as_str()
                .map(|n| CanonicalName::stripped(n).to_owned())
        };
        Ok(Some(Self {
            kind,
            action,
            id,
            name: bare("name"),
            old_name: bare("oldName"),
        }))
    }

    fn names(&self) -> impl Iterator<Item = &String> {
        self.name.iter().chain(&self.old_name)
    }
}

/// The map; see the module docs.
#[derive(Debug, Default)]
pub struct Names {
    state: Mutex<State>,
}

impl Names {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-made entry (each change is one
        // map operation), so the state is still good.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The subscription is up (`true`: fills are taken from now on) or down (the map empties
    /// and takes none).
    pub fn set_live(&self, live: bool) {
        let mut s = self.lock();
        s.live = live;
        s.forget();
    }

    pub fn is_live(&self) -> bool {
        self.lock().live
    }

    /// Before an inspect whose answer may fill the map. `None` while the subscription is down.
    pub fn stamp(&self) -> Option<Stamp> {
        let s = self.lock();
        s.live.then_some(Stamp(s.generation))
    }

    /// The entry for what the client named, if the map holds it: a name, or a full ID. An ID
    /// prefix is never looked up here (it is resolved among the stack's listed objects).
    pub fn lookup(&self, kind: Kind, r: &ObjRef) -> Option<Found> {
        let mut s = self.lock();
        if !s.live {
            return None;
        }
        let t = s.table(kind);
        match r {
            ObjRef::Name(name) => t.by_name.get(name.as_str()).cloned(),
            ObjRef::Hex(id) if is_full_id(id) => {
                let name = t.by_id.get(id.as_str())?;
                t.by_name.get(name).cloned()
            }
            ObjRef::Hex(_) => None,
        }
    }

    /// Remembers an inspected object, unless an event came in since `stamp` (the answer may
    /// predate it) or the object is not one the stack can see.
    pub fn fill(&self, kind: Kind, stamp: Stamp, ins: &Inspected<'_>, scope: &Scope) {
        let Some(bare) = CanonicalName::parse(ins.name).map(CanonicalName::as_str) else {
            return;
        };
        if !is_full_id(ins.id) || !scope.visible(bare) {
            return;
        }
        let mut s = self.lock();
        if !s.live || Stamp(s.generation) != stamp {
            return;
        }
        let t = s.table(kind);
        // The usual case for an object asked about again: nothing to change, nothing to copy.
        if t.by_name.get(bare).is_some_and(|e| e.inspected() == *ins) {
            return;
        }
        if t.by_name.len() >= MAX_ENTRIES {
            return;
        }
        t.remove_id(ins.id);
        t.remove_name(bare);
        t.by_id.insert(ins.id.to_owned(), bare.to_owned());
        t.by_name.insert(bare.to_owned(), Found::from(ins));
    }

    /// Forgets the entry pinned to `id` (the engine said it does not exist).
    pub fn evict(&self, kind: Kind, id: &str) {
        let mut s = self.lock();
        s.generation += 1;
        s.table(kind).remove_id(id);
    }

    /// Applies one event: drops every entry it makes wrong. An entry that already says what
    /// the event leaves behind stays (its inspect came after the event: a create's or rename's
    /// event often arrives after the request that follows it). Events about objects the stack
    /// cannot see and the map does not hold change nothing, so other stacks' traffic does not
    /// make fills fail.
    pub fn apply(&self, event: &Event, scope: &Scope) {
        let mut s = self.lock();
        let t = s.table(event.kind);
        let concerns = t.by_id.contains_key(&event.id)
            || event
                .names()
                .any(|n| scope.visible(n) || t.by_name.contains_key(n));
        if !concerns {
            return;
        }
        let agrees = event.action != Action::Destroy
            && event.name.is_some()
            && t.by_id.get(&event.id) == event.name.as_ref();
        if !agrees {
            t.remove_id(&event.id);
        }
        for n in event.names() {
            if t.by_name.get(n).is_some_and(|e| e.id != event.id) {
                t.remove_name(n);
            }
        }
        // A fill in flight may have read the object before this event: it is dropped.
        s.generation += 1;
    }

    /// Something was read that could not be understood: forget everything (any doubt →
    /// inspect).
    pub fn doubt(&self) {
        self.lock().forget();
    }

    /// Entries held, containers and networks (for tests and the log).
    pub fn len(&self) -> (usize, usize) {
        let s = self.lock();
        (s.containers.by_name.len(), s.networks.by_name.len())
    }
}

#[cfg(test)]
#[path = "names_tests.rs"]
mod tests;
