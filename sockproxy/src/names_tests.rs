use super::*;
use sockproxy_policy::Prefix;

fn scope() -> Scope {
    Scope::new(Prefix::parse("deer-flow-").expect("valid"), false)
}

const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

fn entry(id: &str, name: &str) -> Found {
    Found {
        id: id.into(),
        name: format!("/{name}"),
        stack_label: Some("atlas".into()),
    }
}

fn name(n: &str) -> ObjRef {
    ObjRef::Name(n.into())
}

fn live() -> Names {
    let n = Names::default();
    n.set_live(true);
    n
}

fn filled(n: &Names, id: &str, nm: &str) {
    let stamp = n.stamp().expect("live");
    n.fill(Kind::Container, stamp, &entry(id, nm).inspected(), &scope());
}

fn event(kind: Kind, action: Action, id: &str, names: &[&str]) -> Event {
    Event {
        kind,
        action,
        id: id.into(),
        name: names.first().map(|s| (*s).to_owned()),
        old_name: names.get(1).map(|s| (*s).to_owned()),
    }
}

#[test]
fn a_filled_entry_answers_by_name_and_by_full_id_only() {
    let n = live();
    filled(&n, A, "deer-flow-sandbox-1");
    let want = Some(entry(A, "deer-flow-sandbox-1"));
    assert_eq!(
        n.lookup(Kind::Container, &name("deer-flow-sandbox-1")),
        want
    );
    assert_eq!(n.lookup(Kind::Container, &ObjRef::Hex(A.into())), want);
    // A prefix is the listed objects' business, and the kinds are kept apart.
    assert_eq!(n.lookup(Kind::Container, &ObjRef::Hex("aaaa".into())), None);
    assert_eq!(n.lookup(Kind::Network, &name("deer-flow-sandbox-1")), None);
}

#[test]
fn nothing_is_held_or_taken_while_the_subscription_is_down() {
    let n = Names::default();
    assert_eq!(n.stamp(), None);
    let live = live();
    let stamp = live.stamp().expect("live");
    // A stamp from another life of the subscription is refused too.
    n.set_live(true);
    n.set_live(false);
    n.set_live(true);
    n.fill(
        Kind::Container,
        stamp,
        &entry(A, "deer-flow-1").inspected(),
        &scope(),
    );
    assert_eq!(n.lookup(Kind::Container, &name("deer-flow-1")), None);
    filled(&n, A, "deer-flow-1");
    assert!(n.lookup(Kind::Container, &name("deer-flow-1")).is_some());
    n.set_live(false);
    assert_eq!(n.lookup(Kind::Container, &name("deer-flow-1")), None);
    n.set_live(true);
    assert_eq!(
        n.lookup(Kind::Container, &name("deer-flow-1")),
        None,
        "a drop empties the map"
    );
}

#[test]
fn a_fill_older_than_an_event_about_the_stack_is_dropped() {
    // (name the event is about, whether a fill from before it is taken)
    for (about, taken) in [("deer-flow-2", false), ("other-1", true)] {
        let n = live();
        let stamp = n.stamp().expect("live");
        let ev = event(Kind::Container, Action::Create, B, &[about]);
        n.apply(&ev, &scope());
        let a = entry(A, "deer-flow-1");
        n.fill(Kind::Container, stamp, &a.inspected(), &scope());
        // Another stack's traffic does not make fills fail.
        let held = n.lookup(Kind::Container, &name("deer-flow-1"));
        assert_eq!(held.is_some(), taken, "{about}");
    }
}

#[test]
fn events_drop_what_they_make_wrong() {
    use Action::*;
    use Kind::{Container as C, Network as N};
    // The map holds A as deer-flow-1. (event, still held?)
    let cases: [(Event, bool); 10] = [
        // Destroyed.
        (event(C, Destroy, A, &["deer-flow-1"]), false),
        // Renamed, here or out of the stack's scope by someone else.
        (event(C, Rename, A, &["deer-flow-9", "deer-flow-1"]), false),
        (event(C, Rename, A, &["other", "/deer-flow-1"]), false),
        // A rename to the name the map already has: the inspect came after it.
        (event(C, Rename, A, &["deer-flow-1", "deer-flow-0"]), true),
        // A's own create, read after the inspect that filled the entry.
        (event(C, Create, A, &["deer-flow-1"]), true),
        // Another object takes the name (a network name can be taken twice), or gave it up.
        (event(C, Create, B, &["deer-flow-1"]), false),
        (event(C, Rename, B, &["deer-flow-2", "deer-flow-1"]), false),
        // Another object of the stack, the other kind, another stack.
        (event(C, Destroy, B, &["deer-flow-2"]), true),
        (event(N, Destroy, A, &["deer-flow-1"]), true),
        (event(C, Create, B, &["other-1"]), true),
    ];
    for (ev, kept) in cases {
        let n = live();
        filled(&n, A, "deer-flow-1");
        n.apply(&ev, &scope());
        let by_name = n.lookup(Kind::Container, &name("deer-flow-1"));
        assert_eq!(by_name.is_some(), kept, "{ev:?}");
        let by_id = n.lookup(Kind::Container, &ObjRef::Hex(A.into()));
        assert_eq!(by_id.is_some(), kept, "{ev:?}: by ID as by name");
    }
}

#[test]
fn only_full_ids_and_visible_names_are_remembered() {
    let n = live();
    filled(&n, "abc", "deer-flow-1");
    filled(&n, A, "other-1");
    filled(&n, B, "deer-flow-a/link");
    assert_eq!(n.len(), (0, 0));
    filled(&n, A, "deer-flow-1");
    // The same ID under a new name (an inspect after a rename) replaces the old name.
    filled(&n, A, "deer-flow-2");
    assert_eq!(n.lookup(Kind::Container, &name("deer-flow-1")), None);
    assert_eq!(n.len(), (1, 0));
    n.evict(Kind::Container, A);
    assert_eq!(n.len(), (0, 0));
    filled(&n, A, "deer-flow-1");
    n.doubt();
    assert_eq!(n.len(), (0, 0));
}

#[test]
fn event_lines() {
    let ev = |s: &str| Event::parse(s.as_bytes());
    assert_eq!(
        ev(r#"{"Type":"container","Action":"rename","Actor":{"ID":"x","Attributes":{"name":"deer-flow-2","oldName":"/deer-flow-1","image":"i"}}}"#)
            .ok()
            .flatten(),
        Some(event(
            Kind::Container,
            Action::Rename,
            "x",
            &["deer-flow-2", "deer-flow-1"]
        ))
    );
    assert_eq!(
        ev(r#"{"status":"destroy","id":"x","Type":"network","Actor":{"ID":"x","Attributes":{"name":"n"}}}"#)
            .ok()
            .flatten(),
        Some(event(Kind::Network, Action::Destroy, "x", &["n"]))
    );
    for quiet in [
        r#"{"Type":"container","Action":"start","Actor":{"ID":"x","Attributes":{"name":"deer-flow-1"}}}"#,
        r#"{"Type":"network","Action":"connect","Actor":{"ID":"x","Attributes":{"name":"n"}}}"#,
        r#"{"Type":"image","Action":"delete","Actor":{"ID":"x"}}"#,
        r#"[]"#,
    ] {
        assert_eq!(ev(quiet).ok().flatten(), None, "{quiet}");
    }
    assert_eq!(
        ev("{not json").map_err(|e| e.to_string()),
        Err("key must be a string at line 1 column 2".into())
    );
}
