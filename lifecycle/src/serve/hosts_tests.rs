use super::*;

/// (call, tracked, fresh, claim, expected)
type ClaimCase = (Call, bool, bool, Result<Option<&'static str>, ()>, ByClaim);

#[test]
fn route_by_claim_table() {
    use ByClaim::*;
    use Call::*;
    let store_down = "the ownership store does not answer";
    let cases: Vec<ClaimCase> = vec![
        // Tracked here and renewed within the TTL: answered here, the store not asked.
        (Create, true, true, Err(()), Local),
        (Get, true, true, Err(()), Local),
        (Delete, true, true, Err(()), Local),
        // Tracked but not renewed within the TTL: not handed out; a DELETE still runs.
        (Delete, true, false, Err(()), Local),
        (Create, true, false, Ok(None), Unavailable("")),
        (Get, true, false, Ok(None), Unavailable("")),
        // Untracked: the claim decides.
        (Create, false, false, Err(()), Unavailable(store_down)),
        (Get, false, false, Err(()), Unavailable(store_down)),
        (Delete, false, false, Err(()), Unavailable(store_down)),
        (Create, false, false, Ok(None), Local),
        (Get, false, false, Ok(None), NotFound),
        (Delete, false, false, Ok(None), Local),
        (Create, false, false, Ok(Some("own:me")), Local),
        (Get, false, false, Ok(Some("del:me")), Local),
        (Create, false, false, Ok(Some("own:b")), Owner("b".into())),
        (Get, false, false, Ok(Some("own:b")), Owner("b".into())),
        (Delete, false, false, Ok(Some("del:b")), Owner("b".into())),
    ];
    for (call, tracked, fresh, claim, want) in cases {
        let got = route_by_claim(call, "me", tracked, fresh, claim);
        match (&got, &want) {
            (Unavailable(_), Unavailable("")) => {}
            _ => assert_eq!(
                got, want,
                "{call:?} tracked={tracked} fresh={fresh} {claim:?}"
            ),
        }
    }
}

#[test]
fn route_by_owner_table() {
    use ByOwner::*;
    use Call::*;
    let live = Some("http://10.0.0.2:8002");
    let cases = [
        (Get, live, Some(5000), Registry),
        (Get, None, Some(5000), NotFound),
        (
            Create,
            live,
            Some(5000),
            Redirect("http://10.0.0.2:8002/api/sandboxes/x".into()),
        ),
        (
            Delete,
            live,
            None,
            Redirect("http://10.0.0.2:8002/api/sandboxes/x".into()),
        ),
        (Create, None, Some(4001), OwnerGone(5)),
        (Delete, None, Some(1), OwnerGone(1)),
        (Create, None, None, OwnerGone(1)),
    ];
    for (call, url, ms, want) in cases {
        assert_eq!(
            route_by_owner(call, url, ms, "/api/sandboxes/x"),
            want,
            "{call:?} {url:?} {ms:?}"
        );
    }
}

#[test]
fn advertised_addresses_are_checked() {
    for (raw, want) in [
        ("http://10.0.0.2:8002", Some("http://10.0.0.2:8002")),
        ("http://10.0.0.2:8002/", Some("http://10.0.0.2:8002")),
        ("https://h.test:443", Some("https://h.test:443")),
        ("http://[fd00::2]:8002", Some("http://[fd00::2]:8002")),
        ("10.0.0.2:8002", None),
        ("http://10.0.0.2", None),
        ("http://10.0.0.2:0", None),
        ("http://10.0.0.2:8002/api", None),
        ("http://u@10.0.0.2:8002", None),
        ("http://", None),
    ] {
        assert_eq!(check_advertise(raw).ok().as_deref(), want, "{raw}");
    }
}
