//! Fuzz target `netproxy_target`: the properties of `netproxy::props::target` (see its docs); a violated property is a
//! crash, and its input joins `fuzz/corpus/netproxy_target/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = netproxy::props::target(data) {
        panic!("property violated: {why}");
    }
});
