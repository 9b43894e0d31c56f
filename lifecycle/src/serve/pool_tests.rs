//! Table tests of the provider's pure state (leases, warm pool, deferred destroy, expiry, cap).

use super::*;

const S: Duration = Duration::from_secs(1);

fn acquire(p: &mut Pool, id: &str, scope: &str, lease: &str, now: Duration) {
    p.commit_acquire(id, scope, &format!("c-{id}"), "http://x", lease, "h", now);
}

/// A pool holding `id` warm since `since`.
fn warm(p: &mut Pool, id: &str, since: Duration) {
    acquire(p, id, "s", &format!("l-{id}"), since);
    assert_eq!(
        p.release(&format!("l-{id}"), since),
        Release::Idle {
            sandbox_id: id.into()
        }
    );
    p.warm(id, since);
}

#[test]
fn plan_acquire_table() {
    let mut p = Pool::new(10 * S, 0);
    acquire(&mut p, "held", "a", "l1", S);
    warm(&mut p, "warm", S);
    acquire(&mut p, "pending", "a", "l2", S);
    assert!(matches!(
        p.plan_destroy("pending"),
        DestroyPlan::Deferred { holders: 1 }
    ));
    let cases = [
        (
            "held",
            "a",
            AcquirePlan::Reuse {
                source: Source::Cached,
                container_id: "c-held".into(),
            },
        ),
        ("held", "b", AcquirePlan::Collision),
        (
            "warm",
            "s",
            AcquirePlan::Reuse {
                source: Source::Warm,
                container_id: "c-warm".into(),
            },
        ),
        ("warm", "other", AcquirePlan::Collision),
        ("pending", "a", AcquirePlan::Busy),
        ("new", "a", AcquirePlan::Create { evict: vec![] }),
    ];
    for (id, scope, want) in cases {
        assert_eq!(p.plan_acquire(id, scope), want, "{id} {scope}");
    }
}

#[test]
fn lease_defers_destroy_until_last_release() {
    let mut p = Pool::new(Duration::ZERO, 0);
    acquire(&mut p, "x", "a", "run", S);
    acquire(&mut p, "x", "a", "upload", S);
    assert_eq!(p.plan_destroy("x"), DestroyPlan::Deferred { holders: 2 });
    assert_eq!(
        p.release("upload", S),
        Release::StillHeld {
            sandbox_id: "x".into()
        }
    );
    assert_eq!(
        p.release("upload", S),
        Release::UnknownLease,
        "a lease releases once"
    );
    assert_eq!(
        p.release("run", S),
        Release::Destroy {
            sandbox_id: "x".into()
        }
    );
    assert_eq!(
        p.plan_acquire("x", "a"),
        AcquirePlan::Busy,
        "fenced while destroying"
    );
    p.forget("x");
    assert_eq!(
        p.plan_acquire("x", "a"),
        AcquirePlan::Create { evict: vec![] }
    );
}

#[test]
fn reused_sandbox_needs_every_release_before_it_is_idle() {
    let mut p = Pool::new(Duration::ZERO, 0);
    acquire(&mut p, "x", "a", "run", S);
    acquire(&mut p, "x", "a", "upload", S);
    assert!(matches!(p.release("upload", S), Release::StillHeld { .. }));
    assert_eq!(p.get("x").map(|e| e.state.clone()), Some(State::Active));
    assert_eq!(
        p.release("run", 2 * S),
        Release::Idle {
            sandbox_id: "x".into()
        }
    );
    p.warm("x", 2 * S);
    assert_eq!(
        p.get("x").map(|e| e.state.clone()),
        Some(State::Warm { since: 2 * S })
    );
}

#[test]
fn destroy_plan_table() {
    let mut p = Pool::new(Duration::ZERO, 0);
    warm(&mut p, "idle", S);
    acquire(&mut p, "held", "a", "l", S);
    assert_eq!(p.plan_destroy("none"), DestroyPlan::Untracked);
    assert_eq!(p.plan_destroy("idle"), DestroyPlan::Now);
    assert_eq!(p.plan_destroy("idle"), DestroyPlan::AlreadyDestroying);
    assert_eq!(p.plan_destroy("held"), DestroyPlan::Deferred { holders: 1 });
}

#[test]
fn idle_expiry_is_measured_on_the_monotonic_time_given() {
    let mut p = Pool::new(10 * S, 0);
    warm(&mut p, "old", S);
    warm(&mut p, "fresh", 8 * S);
    acquire(&mut p, "held", "a", "l", Duration::ZERO);
    assert_eq!(p.expired(5 * S), Vec::<String>::new());
    assert_eq!(p.expired(11 * S), vec!["old".to_string()]);
    assert_eq!(
        p.expired(100 * S),
        vec!["fresh".to_string(), "old".to_string()]
    );
    let never = Pool::new(Duration::ZERO, 0);
    assert!(never.expired(1000 * S).is_empty(), "0 disables expiry");
}

#[test]
fn replica_cap_evicts_oldest_warm_first_and_never_an_active_one() {
    let mut p = Pool::new(Duration::ZERO, 3);
    warm(&mut p, "newest", 20 * S);
    warm(&mut p, "oldest", 10 * S);
    acquire(&mut p, "held", "a", "l", Duration::ZERO);
    assert_eq!(
        p.plan_acquire("new", "a"),
        AcquirePlan::Create {
            evict: vec!["oldest".into()]
        }
    );
    // At the cap with nothing warm, an active sandbox is never evicted, and the cap holds:
    // the create is refused (503), not made anyway.
    let mut cap1 = Pool::new(Duration::ZERO, 1);
    acquire(&mut cap1, "held", "a", "l", S);
    assert_eq!(cap1.plan_acquire("new", "a"), AcquirePlan::Full);
    let mut under = Pool::new(Duration::ZERO, 5);
    warm(&mut under, "w", S);
    assert_eq!(
        under.plan_acquire("new", "a"),
        AcquirePlan::Create { evict: vec![] }
    );
}

#[test]
fn begin_destroy_fences_only_idle_entries() {
    let mut p = Pool::new(Duration::ZERO, 0);
    warm(&mut p, "w", S);
    acquire(&mut p, "h", "a", "l", S);
    assert!(p.begin_destroy("w"));
    assert!(!p.begin_destroy("w"), "already destroying");
    assert!(!p.begin_destroy("h"), "held");
    assert!(!p.begin_destroy("none"));
}

#[test]
fn failed_destroy_stays_fenced_and_is_retried_by_expiry() {
    let mut p = Pool::new(10 * S, 0);
    warm(&mut p, "w", S);
    assert!(p.begin_destroy("w"));
    p.destroy_failed("w", 2 * S);
    assert_eq!(p.expired(20 * S), vec!["w".to_string()]);
    assert_eq!(p.plan_destroy("w"), DestroyPlan::Now);
    p.destroy_failed("w", 3 * S);
    // Never handed out: an acquire of its thread retries the teardown first (fenced
    // meanwhile), and only then creates or discovers a replacement.
    assert_eq!(p.plan_acquire("w", "s"), AcquirePlan::RetryTeardown);
    assert_eq!(p.get("w").map(|e| e.state.clone()), Some(State::Destroying));
    assert_eq!(
        p.plan_acquire("w", "s"),
        AcquirePlan::Busy,
        "retry under way"
    );
    assert_eq!(p.plan_destroy("w"), DestroyPlan::AlreadyDestroying);
}

#[test]
fn forget_drops_the_entry_and_its_leases() {
    let mut p = Pool::new(Duration::ZERO, 0);
    acquire(&mut p, "x", "a", "l", S);
    p.forget("x");
    assert_eq!(p.release("l", S), Release::UnknownLease);
    assert_eq!(p.lease_sandbox("l"), None);
    assert_eq!(p.sizes(), (0, 0, 0));
}

#[test]
fn forced_collision_never_overwrites_the_warm_tenant() {
    let mut p = Pool::new(Duration::ZERO, 0);
    p.commit_acquire("deadbeefdeadbeef", "user-a", "c-a", "http://a", "l", "h", S);
    p.release("l", S);
    p.warm("deadbeefdeadbeef", S);
    let before = p.get("deadbeefdeadbeef").cloned();
    assert_eq!(
        p.plan_acquire("deadbeefdeadbeef", "user-b"),
        AcquirePlan::Collision
    );
    assert_eq!(p.get("deadbeefdeadbeef").cloned(), before, "untouched");
    assert_eq!(
        p.plan_acquire("deadbeefdeadbeef", "user-a"),
        AcquirePlan::Reuse {
            source: Source::Warm,
            container_id: "c-a".into()
        }
    );
}

#[test]
fn a_failed_rollback_is_tracked_fenced_for_a_retry() {
    let mut p = Pool::new(10 * S, 0);
    p.keep_failed_rollback("new", "a", "c-left", S);
    acquire(&mut p, "held", "a", "l1", S);
    p.keep_failed_rollback("held", "a", "c-left", S);
    for id in ["new", "held"] {
        assert_eq!(p.get(id).map(|e| e.container_id.as_str()), Some("c-left"));
    }
    assert_eq!(p.plan_acquire("held", "a"), AcquirePlan::Busy);
    assert_eq!(
        p.expired(11 * S),
        vec!["new".to_owned()],
        "the reaper retries an unheld one"
    );
    assert_eq!(p.plan_destroy("new"), DestroyPlan::Now);
    p.destroy_failed("new", 11 * S);
    assert_eq!(
        p.plan_acquire("new", "a"),
        AcquirePlan::RetryTeardown,
        "an acquire retries the teardown before anything is handed out"
    );
    assert_eq!(
        p.release("l1", S),
        Release::Destroy {
            sandbox_id: "held".into()
        },
        "its holder's last release retries the teardown"
    );
}

#[test]
fn reclaim_probe_table() {
    let ms = Duration::from_millis;
    let cases = [
        (Source::Warm, 30 * S, Some(RECLAIM_PROBE)),
        (Source::Warm, ms(300), Some(ms(300))),
        (Source::Warm, Duration::ZERO, None),
        (Source::Cached, 30 * S, None),
        (Source::Discovered, 30 * S, None),
        (Source::Created, 30 * S, None),
    ];
    for (source, ready_timeout, want) in cases {
        assert_eq!(
            reclaim_probe(&source, ready_timeout),
            want,
            "{source:?} {ready_timeout:?}"
        );
    }
}

#[test]
fn leases_lapse_only_when_not_renewed_for_the_lease_timeout() {
    let lapsed = |p: &Pool, now| {
        p.lapsed_leases(now)
            .into_iter()
            .map(|(lease, id, _)| (lease, id))
            .collect::<Vec<_>>()
    };
    let pair = |l: &str, id: &str| (l.to_owned(), id.to_owned());

    // Off (the default): a lease held for a day never lapses.
    let mut off = Pool::new(10 * S, 0);
    acquire(&mut off, "a", "s", "l1", S);
    assert!(off.lapsed_leases(86_400 * S).is_empty());

    let mut p = Pool::new(10 * S, 0).with_lease_timeout(60 * S);
    acquire(&mut p, "a", "s", "l1", S);
    acquire(&mut p, "a", "s", "l2", 30 * S);
    acquire(&mut p, "b", "s", "l3", S);
    assert!(lapsed(&p, 60 * S).is_empty(), "just under the timeout");
    assert_eq!(lapsed(&p, 61 * S), vec![pair("l1", "a"), pair("l3", "b")]);
    assert_eq!(
        p.lapsed_leases(61 * S)[0].2,
        "h",
        "the holder's name is reported"
    );

    // A renewal restarts the clock; an unknown lease is not renewed.
    assert_eq!(p.renew_lease("l1", 50 * S), Some("a".to_owned()));
    assert_eq!(p.renew_lease("nope", 50 * S), None);
    assert_eq!(lapsed(&p, 61 * S), vec![pair("l3", "b")]);
    assert_eq!(
        lapsed(&p, 110 * S),
        vec![pair("l1", "a"), pair("l2", "a"), pair("l3", "b")]
    );

    // Releasing a lapsed lease is an ordinary release: the last one leaves the sandbox idle.
    assert_eq!(
        p.release("l3", 110 * S),
        Release::Idle {
            sandbox_id: "b".into()
        }
    );
    assert_eq!(
        p.release("l1", 110 * S),
        Release::StillHeld {
            sandbox_id: "a".into()
        }
    );
    assert_eq!(lapsed(&p, 110 * S), vec![pair("l2", "a")]);
    assert_eq!(
        p.renew_lease("l3", 110 * S),
        None,
        "a released lease is gone"
    );
}

#[test]
fn the_reaper_decides_again_under_the_lock() {
    let mut p = Pool::new(10 * S, 0).with_lease_timeout(60 * S);
    acquire(&mut p, "a", "s", "l1", S);
    // Listed as lapsed at 61 s, renewed at 62 s, released by the reaper's pass at 63 s: kept.
    assert_eq!(p.lapsed_leases(61 * S).len(), 1);
    assert_eq!(p.renew_lease("l1", 62 * S), Some("a".to_owned()));
    assert_eq!(p.release_if_lapsed("l1", 63 * S), None);
    assert_eq!(p.release_if_lapsed("nope", 63 * S), None);
    assert_eq!(
        p.release_if_lapsed("l1", 122 * S),
        Some(Release::Idle {
            sandbox_id: "a".into()
        })
    );
    assert_eq!(p.release_if_lapsed("l1", 200 * S), None, "gone");

    // An entry expired when listed, reclaimed and released again before its turn: fresh.
    warm(&mut p, "w", S);
    assert!(p.is_expired("w", 11 * S));
    acquire(&mut p, "w", "s", "l2", 11 * S);
    assert!(!p.is_expired("w", 11 * S), "held");
    p.release("l2", 11 * S);
    p.warm("w", 11 * S);
    assert!(!p.is_expired("w", 12 * S), "warm again, but fresh");
    assert!(p.is_expired("w", 21 * S));
    assert!(!Pool::new(Duration::ZERO, 0).is_expired("w", 1000 * S));
}

/// A failed teardown is retried by the reaper's next pass, with the idle timeout off as well
/// (docs/lifecycle.md's promise); a held one waits for its last release.
#[test]
fn the_reaper_retries_a_failed_teardown_with_or_without_an_idle_timeout() {
    for idle in [Duration::ZERO, 600 * S] {
        let mut p = Pool::new(idle, 0);
        warm(&mut p, "w", S);
        assert!(p.begin_destroy("w"));
        p.destroy_failed("w", S);
        assert_eq!(p.expired(2 * S), vec!["w".to_owned()], "idle {idle:?}");
        acquire(&mut p, "held", "s", "l1", S);
        p.destroy_failed("held", S);
        assert!(!p.is_expired("held", 2 * S), "held: idle {idle:?}");
    }
}

/// A release that left its sandbox idle looks again once it holds the sandbox's lock: what
/// ran meanwhile (a destroy, an acquire, a failed destroy) decides its answer.
#[test]
fn idle_check_table() {
    let mut p = Pool::new(10 * S, 0);
    let idle = |p: &mut Pool, id: &str| {
        acquire(p, id, "s", &format!("l-{id}"), S);
        assert_eq!(
            p.release(&format!("l-{id}"), S),
            Release::Idle {
                sandbox_id: id.into()
            }
        );
    };
    idle(&mut p, "still-idle");
    assert_eq!(
        p.idle_check("still-idle"),
        IdleCheck::Check {
            scope: "s".into(),
            container_id: "c-still-idle".into()
        }
    );
    // A destroy request found it unheld and destroyed it.
    idle(&mut p, "destroyed");
    assert_eq!(p.plan_destroy("destroyed"), DestroyPlan::Now);
    p.forget("destroyed");
    assert_eq!(p.idle_check("destroyed"), IdleCheck::Gone);
    // Acquired again.
    idle(&mut p, "again");
    acquire(&mut p, "again", "s", "l2", 2 * S);
    assert_eq!(p.idle_check("again"), IdleCheck::Held);
    // A destroy that failed: never warmed, destroyed again.
    idle(&mut p, "failed");
    assert_eq!(p.plan_destroy("failed"), DestroyPlan::Now);
    p.destroy_failed("failed", 2 * S);
    assert_eq!(p.idle_check("failed"), IdleCheck::Fenced);
    // Never tracked.
    assert_eq!(p.idle_check("never"), IdleCheck::Gone);
}

/// The cap counts creates under way, and a victim is fenced in the same step that picks it:
/// two acquires planned back to back never both fit past the cap or pick one victim.
#[test]
fn the_replica_cap_counts_creates_in_flight_and_fences_its_victims() {
    let mut p = Pool::new(Duration::ZERO, 2);
    assert_eq!(
        p.plan_acquire("a", "s"),
        AcquirePlan::Create { evict: vec![] }
    );
    assert_eq!(
        p.plan_acquire("b", "s"),
        AcquirePlan::Create { evict: vec![] }
    );
    assert_eq!(p.counted(), 2, "two creates in flight hold both slots");
    assert_eq!(p.plan_acquire("c", "s"), AcquirePlan::Full);
    // One create fails: its slot is free again.
    p.end_create("b");
    assert_eq!(
        p.plan_acquire("c", "s"),
        AcquirePlan::Create { evict: vec![] }
    );
    // Both land, then go warm; two new threads each evict a different one.
    p.commit_acquire("a", "s", "c-a", "u", "la", "h", S);
    p.commit_acquire("c", "s", "c-c", "u", "lc", "h", 2 * S);
    assert_eq!(p.counted(), 2, "a commit turns a reservation into an entry");
    p.release("la", S);
    p.warm("a", S);
    p.release("lc", 2 * S);
    p.warm("c", 2 * S);
    assert_eq!(
        p.plan_acquire("d", "s"),
        AcquirePlan::Create {
            evict: vec!["a".into()]
        }
    );
    assert_eq!(p.get("a").map(|e| e.state.clone()), Some(State::Destroying));
    assert_eq!(
        p.plan_acquire("e", "s"),
        AcquirePlan::Create {
            evict: vec!["c".into()]
        },
        "the second acquire takes the next victim, not the first one's"
    );
    assert_eq!(p.plan_acquire("f", "s"), AcquirePlan::Full, "nothing left");
    // A warm entry being reclaimed is no victim.
    let mut q = Pool::new(Duration::ZERO, 1);
    warm(&mut q, "w", S);
    assert!(matches!(
        q.plan_acquire("w", "s"),
        AcquirePlan::Reuse { .. }
    ));
    assert_eq!(q.plan_acquire("new", "s"), AcquirePlan::Full);
    q.end_reclaim("w");
    assert_eq!(
        q.plan_acquire("new", "s"),
        AcquirePlan::Create {
            evict: vec!["w".into()]
        }
    );
}

#[test]
fn failed_teardowns_are_retried_with_backoff() {
    let cases = [
        (0, 0),
        (1, 0),
        (2, 2),
        (3, 4),
        (4, 8),
        (9, 256),
        (10, 300),
        (u32::MAX, 300),
    ];
    for (failures, secs) in cases {
        assert_eq!(retry_backoff(failures), secs * S, "{failures}");
    }
    let mut p = Pool::new(Duration::ZERO, 0);
    warm(&mut p, "w", S);
    assert!(p.begin_destroy("w"));
    p.destroy_failed("w", 10 * S);
    assert!(
        p.is_expired("w", 10 * S),
        "the first retry at the next pass"
    );
    assert!(p.begin_destroy("w"));
    p.destroy_failed("w", 11 * S);
    assert!(!p.is_expired("w", 12 * S), "second failure: 2 s later");
    assert!(p.is_expired("w", 13 * S));
    assert!(p.begin_destroy("w"));
    p.destroy_failed("w", 13 * S);
    assert!(!p.is_expired("w", 16 * S));
    assert!(p.is_expired("w", 17 * S), "third failure: 4 s later");
}
