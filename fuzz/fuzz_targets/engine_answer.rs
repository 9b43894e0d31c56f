//! Fuzz target `engine_answer`: the properties of `sockproxy::props::engine_answer` (see its
//! docs); a violated property is a crash, and its input joins `fuzz/corpus/engine_answer/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = sockproxy::props::engine_answer(data) {
        panic!("property violated: {why}");
    }
});
