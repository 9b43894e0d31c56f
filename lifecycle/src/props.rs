//! Properties the fuzz target `ledger_paths` (`fuzz/`) asserts and the stable replay test
//! (`tests/tests/tools/fuzz_corpus.rs`) checks again on every committed corpus input; `Err(why)` when
//! one does not hold. The caller gives a fresh state directory (a temp dir) to write in.
//!
//! `ledger_paths`: arbitrary scope, sandbox ID and generation strings map to a record strictly
//! under `{state}/sandbox-quarantine`, three components of 16 lowercase hex (`k` of each), an
//! empty file; the record is read back, fences its generation, and retiring removes it and
//! nothing else. A port-release key from the same input never reaches outside `ports/`.

use std::path::{Component, Path};

use crate::ledger::Ledger;
use crate::naming::k;
use crate::ports::Ports;

/// Input: scope, sandbox ID and generation separated by `0xff` bytes (missing parts are empty);
/// each part read as lossy UTF-8. A fourth part, if any, is tried as a port-release key.
pub fn ledger_paths(state: &Path, data: &[u8]) -> Result<(), String> {
    let mut parts = data.split(|b| *b == 0xff).map(String::from_utf8_lossy);
    let scope = parts.next().unwrap_or_default();
    let id = parts.next().unwrap_or_default();
    let generation = parts.next().unwrap_or_default();
    let key = parts.next();
    let sentinel = state.join("sentinel");
    std::fs::write(&sentinel, b"x").map_err(|e| format!("sentinel: {e}"))?;

    let ledger = Ledger::new(state, &scope);
    let root = state.join("sandbox-quarantine");
    if ledger.dir() != root.join(k(&scope)) {
        return Err(format!("ledger dir {:?} for scope {scope:?}", ledger.dir()));
    }
    let record = ledger
        .mark(&id, &generation)
        .map_err(|e| format!("mark {id:?} {generation:?}: {e}"))?;
    let rel = record
        .strip_prefix(&root)
        .map_err(|_| format!("record {record:?} is not under {root:?}"))?;
    let comps: Vec<String> = rel
        .components()
        .map(|c| match c {
            Component::Normal(s) => Ok(s.to_string_lossy().into_owned()),
            other => Err(format!("record path component {other:?} in {record:?}")),
        })
        .collect::<Result<_, _>>()?;
    let want = [k(&scope), k(&id), k(&generation)];
    if comps != want {
        return Err(format!("record components {comps:?}, want {want:?}"));
    }
    if let Some(c) = comps
        .iter()
        .find(|c| c.len() != 16 || !c.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    {
        return Err(format!("component {c:?} is not 16 lowercase hex"));
    }
    let meta = std::fs::metadata(&record).map_err(|e| format!("stat {record:?}: {e}"))?;
    if !meta.is_file() || meta.len() != 0 {
        return Err(format!("record {record:?} is not an empty file"));
    }
    let read = |what: &str, r: Result<bool, crate::ledger::LedgerError>| {
        r.map_err(|e| format!("{what}: {e}"))
    };
    if !read("fences", ledger.fences(&id, &generation))? {
        return Err(format!(
            "{id:?} does not fence its generation {generation:?}"
        ));
    }
    let entries = ledger.entries().map_err(|e| format!("entries: {e}"))?;
    if !entries
        .iter()
        .any(|e| e.key == k(&id) && e.sandbox_id.as_deref() == Some(&*id))
    {
        return Err(format!("entries {entries:?} lack {id:?}"));
    }
    if let Some(key) = key {
        Ports::new(state)
            .release_key(&id, &key)
            .map_err(|e| format!("release_key {key:?}: {e}"))?;
    }
    ledger
        .retire(&id)
        .map_err(|e| format!("retire {id:?}: {e}"))?;
    if read("quarantined", ledger.is_quarantined(&id))? || record.exists() {
        return Err(format!("{id:?} still quarantined after retire"));
    }
    if !sentinel.exists() {
        return Err("a file outside the ledger and ports was removed".into());
    }
    Ok(())
}
