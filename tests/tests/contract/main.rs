//! The contract suite: one set of cases, written once, run against every engine (each fake
//! flavor always; the real dockerd in CI and locally when reachable), each both directly and
//! through sockproxy (`--restricted`) in front of it. What the fake must agree with dockerd on
//! is what our components depend on: lookup order, list filters, error statuses and bodies,
//! streams and upgrades, networks, version negotiation. `differences` names where the fake
//! deliberately differs, and why that does not matter.

mod differences;
mod errors;
mod faults;
mod lists;
mod lookup;
mod networks;
mod streams;
mod versions;

use sockproxy_tests::engine::{each_engine, Fakes};
use sockproxy_tests::subject::Subject;

/// Runs `case` on every engine, directly and through the proxy.
pub fn each_subject(test: &str, case: impl Fn(&mut Subject<'_>)) {
    each_engine(test, Fakes::All, |engine| {
        for mut subject in Subject::both(&engine) {
            eprintln!("== {test}: {}", subject.label());
            case(&mut subject);
        }
    });
}
