//! Fuzz target `netproxy_framing`: the properties of `netproxy::props::framing` (see its docs); a violated property is a
//! crash, and its input joins `fuzz/corpus/netproxy_framing/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = netproxy::props::framing(data) {
        panic!("property violated: {why}");
    }
});
