//! Fuzz target `list_filter`: the properties of `sockproxy_policy::props::list_filter` (see its docs); a violated property is a
//! crash, and its input joins `fuzz/corpus/list_filter/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = sockproxy_policy::props::list_filter(data) {
        panic!("property violated: {why}");
    }
});
