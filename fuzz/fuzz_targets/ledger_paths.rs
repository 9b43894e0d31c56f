//! Fuzz target `ledger_paths`: the properties of `lifecycle::props::ledger_paths` (see its
//! docs), in a fresh state directory per input under one temp dir for the run; a violated
//! property is a crash, and its input joins `fuzz/corpus/ledger_paths/`.
#![no_main]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// `/dev/shm/ledger-fuzz-{pid}` (memory: the ledger fsyncs every record), else under
/// `$TMPDIR`, made once; each input gets its own numbered directory in it, removed afterwards.
fn base() -> &'static PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        let tmp = if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        };
        let dir = tmp.join(format!("ledger-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir for the fuzz run");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    static N: AtomicU64 = AtomicU64::new(0);
    let state = base().join(N.fetch_add(1, Ordering::Relaxed).to_string());
    std::fs::create_dir_all(&state).expect("state dir");
    let result = lifecycle::props::ledger_paths(&state, data);
    let _ = std::fs::remove_dir_all(&state);
    if let Err(why) = result {
        panic!("property violated: {why}");
    }
});
