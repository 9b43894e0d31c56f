//! Fuzz target `create_body`: the properties of `sockproxy_policy::props::create_body` (see its docs); a violated property is a
//! crash, and its input joins `fuzz/corpus/create_body/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = sockproxy_policy::props::create_body(data) {
        panic!("property violated: {why}");
    }
});
