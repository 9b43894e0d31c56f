//! Fuzz target `sockproxy_request`: the properties of `sockproxy_policy::props::request` (see its docs); a violated property is a
//! crash, and its input joins `fuzz/corpus/sockproxy_request/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = sockproxy_policy::props::request(data) {
        panic!("property violated: {why}");
    }
});
