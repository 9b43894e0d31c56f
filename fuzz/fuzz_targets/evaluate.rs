//! Fuzz target `evaluate`: the properties of `sockproxy_policy::props::evaluate_request` (see its docs); a violated property is a
//! crash, and its input joins `fuzz/corpus/evaluate/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = sockproxy_policy::props::evaluate_request(data) {
        panic!("property violated: {why}");
    }
});
