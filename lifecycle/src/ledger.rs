//! The quarantine ledger (docs/architecture.md, "lifecycle"): `{state_dir}/sandbox-quarantine/{k(scope)}/{k(id)}/
//! {k(generation)}`, one empty file per quarantined generation, written atomically (temp file,
//! fsync, rename, fsync of the directory) so a record survives a crash and a restart. Beside the
//! records, `.sandbox_id` names the sandbox (the path holds only hashes). Every storage error is
//! returned: the caller fails closed.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::naming::{k, parse_sandbox_id};
use crate::private;

/// The generation recorded when the container ID could not be read.
pub const UNKNOWN_GENERATION: &str = "unknown";
const ID_FILE: &str = ".sandbox_id";

#[derive(Debug, thiserror::Error)]
#[error("quarantine ledger at {path}: {source}")]
pub struct LedgerError {
    pub path: PathBuf,
    pub source: io::Error,
}

fn err(path: &Path) -> impl FnOnce(io::Error) -> LedgerError + '_ {
    move |source| LedgerError {
        path: path.to_owned(),
        source,
    }
}

/// One sandbox's records.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Entry {
    /// `k(sandbox_id)`: the directory name.
    pub key: String,
    /// The sandbox ID, when `.sandbox_id` was written (records from before it was, have none).
    pub sandbox_id: Option<String>,
    /// `k(generation)` of every quarantined generation.
    pub generations: Vec<String>,
}

impl Entry {
    /// The sandbox ID these records may be acted on under. `.sandbox_id` is read from disk, so
    /// it is input: it must be a sandbox ID (16 lowercase hex) whose `k` is this entry's
    /// directory, or a retire would send the engine a name built from whatever the file holds
    /// (`zz/../../x`) or act on another sandbox's records. `Ok(None)`: no `.sandbox_id`;
    /// `Err`: why the record is corrupt (never act on it).
    pub fn checked_id(&self) -> Result<Option<String>, String> {
        let Some(raw) = &self.sandbox_id else {
            return Ok(None);
        };
        let id = parse_sandbox_id(raw).map_err(|e| format!("{ID_FILE}: {e}"))?;
        if k(&id) != self.key {
            return Err(format!(
                "{ID_FILE} names sandbox {id}, whose records would be under {}, not {}",
                k(&id),
                self.key
            ));
        }
        Ok(Some(id))
    }
}

#[derive(Debug, Clone)]
pub struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    /// The ledger of `scope` (the stack prefix) under `state_dir`.
    pub fn new(state_dir: &Path, scope: &str) -> Self {
        Self {
            dir: state_dir.join("sandbox-quarantine").join(k(scope)),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.dir.join(k(id))
    }

    /// Records `generation` (a container ID, or `unknown`) of sandbox `id` as quarantined.
    pub fn mark(&self, id: &str, generation: &str) -> Result<PathBuf, LedgerError> {
        let dir = self.sandbox_dir(id);
        private::create_dir_all(&dir).map_err(err(&dir))?;
        write_atomic(&dir, ID_FILE, id.as_bytes())?;
        let record = dir.join(k(generation));
        write_atomic(&dir, &k(generation), b"")?;
        Ok(record)
    }

    /// `k(generation)` of each record of sandbox `id`.
    pub fn generations(&self, id: &str) -> Result<Vec<String>, LedgerError> {
        read_generations(&self.sandbox_dir(id))
    }

    pub fn is_quarantined(&self, id: &str) -> Result<bool, LedgerError> {
        Ok(!self.generations(id)?.is_empty())
    }

    /// Whether container `container_id` is one of the sandbox's quarantined generations (or the
    /// sandbox has an `unknown` generation, which fences whatever container it finds).
    pub fn fences(&self, id: &str, container_id: &str) -> Result<bool, LedgerError> {
        let gens = self.generations(id)?;
        Ok(gens.contains(&k(container_id)) || gens.contains(&k(UNKNOWN_GENERATION)))
    }

    /// Removes every record of sandbox `id`; already gone counts as done.
    pub fn retire(&self, id: &str) -> Result<(), LedgerError> {
        let dir = self.sandbox_dir(id);
        // Records first, then the rest: a kill part-way must never leave records behind
        // without the `.sandbox_id` that lets `retire` find their sandbox again.
        for key in read_generations(&dir)? {
            let record = dir.join(&key);
            match fs::remove_file(&record) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(err(&record)(e)),
            }
        }
        if dir.exists() {
            sync_dir(&dir)?;
        }
        match fs::remove_dir_all(&dir) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(err(&dir)(e)),
        }
    }

    /// Removes the record of one generation (by `k(generation)`, as `generations` lists it);
    /// the sandbox's directory goes with its last record. Already gone counts as done.
    pub fn retire_key(&self, id: &str, key: &str) -> Result<(), LedgerError> {
        let dir = self.sandbox_dir(id);
        let record = dir.join(key);
        match fs::remove_file(&record) {
            Ok(()) => sync_dir(&dir)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(&record)(e)),
        }
        if self.generations(id)?.is_empty() {
            self.retire(id)?;
        }
        Ok(())
    }

    /// Removes the record of `generation` (a container ID, or `unknown`).
    pub fn retire_generation(&self, id: &str, generation: &str) -> Result<(), LedgerError> {
        self.retire_key(id, &k(generation))
    }

    /// Every sandbox with records.
    pub fn entries(&self) -> Result<Vec<Entry>, LedgerError> {
        let read = match fs::read_dir(&self.dir) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(err(&self.dir)(e)),
        };
        let mut out = Vec::new();
        for entry in read {
            let entry = entry.map_err(err(&self.dir))?;
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            let generations = read_generations(&path)?;
            if generations.is_empty() {
                continue;
            }
            let sandbox_id = match fs::read_to_string(path.join(ID_FILE)) {
                Ok(s) => Some(s),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(err(&path)(e)),
            };
            out.push(Entry {
                key: entry.file_name().to_string_lossy().into_owned(),
                sandbox_id,
                generations,
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

fn read_generations(dir: &Path) -> Result<Vec<String>, LedgerError> {
    let read = match fs::read_dir(dir) {
        Ok(r) => r,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(err(dir)(e)),
    };
    let mut gens = Vec::new();
    for entry in read {
        let name = entry
            .map_err(err(dir))?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.len() == 16 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            gens.push(name);
        }
    }
    gens.sort();
    Ok(gens)
}

/// temp file → fsync → rename → fsync of the directory.
pub(crate) fn write_atomic(dir: &Path, name: &str, data: &[u8]) -> Result<(), LedgerError> {
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = private::options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(name))
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(err(&dir.join(name))(e));
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), LedgerError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(err(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Already gone" counts as done, and only that: any other storage error is returned (fail
    /// closed), never taken for a retired record. Errors are made as root can feel them: a file
    /// where a directory belongs (ENOTDIR) and a directory where a record belongs (EISDIR).
    #[test]
    fn only_already_gone_counts_as_retired() {
        let state = tempfile::tempdir().expect("dir");
        let ledger = Ledger::new(state.path(), "deer-flow-");
        let id = "7d9ac0ff9b98cd06";
        // The path and kind of a storage error: what the caller is told, and why.
        let failed = |r: Result<(), LedgerError>| r.map_err(|e| (e.path, e.source.kind()));
        // Nothing recorded: retiring is done at once, as are entries and generations.
        assert_eq!(failed(ledger.retire(id)), Ok(()));
        assert_eq!(
            ledger.retire_key(id, &k("gone")).map_err(|e| e.to_string()),
            Ok(())
        );
        assert!(ledger.entries().expect("no ledger dir yet").is_empty());
        // A record whose name is a directory cannot be removed: an error, kept.
        ledger.mark(id, "c1").expect("mark");
        let record = ledger.sandbox_dir(id).join(k("c1"));
        fs::remove_file(&record).expect("rm");
        fs::create_dir(&record).expect("a directory in its place");
        fs::write(record.join("x"), b"").expect("not empty");
        assert_eq!(
            failed(ledger.retire_key(id, &k("c1"))),
            Err((record.clone(), io::ErrorKind::IsADirectory)),
            "EISDIR is no 'already gone'"
        );
        assert_eq!(
            failed(ledger.retire(id)),
            Err((record, io::ErrorKind::IsADirectory)),
            "EISDIR is no 'already gone'"
        );
        // The sandbox's directory is a file: reading its generations fails, loudly.
        let other = "0123456789abcdef";
        let dir = ledger.sandbox_dir(other);
        fs::write(&dir, b"not a directory").expect("file");
        assert_eq!(
            failed(ledger.generations(other).map(drop)),
            Err((dir.clone(), io::ErrorKind::NotADirectory)),
            "ENOTDIR is no 'nothing recorded'"
        );
        assert_eq!(
            failed(ledger.retire(other)),
            Err((dir, io::ErrorKind::NotADirectory))
        );
        // The ledger's own directory is a file: no entries cannot be claimed.
        let broken = tempfile::tempdir().expect("dir");
        fs::create_dir(broken.path().join("sandbox-quarantine")).expect("dir");
        fs::write(
            broken.path().join("sandbox-quarantine/ca020af577589f4a"),
            b"",
        )
        .expect("file");
        let b = Ledger::new(broken.path(), "deer-flow-");
        assert_eq!(
            failed(b.entries().map(drop)),
            Err((b.dir().to_owned(), io::ErrorKind::NotADirectory)),
            "a file is no empty ledger"
        );
        // A record whose sandbox-ID file cannot be read (a directory in its place) is an
        // error, not a record that names no sandbox.
        let odd = tempfile::tempdir().expect("dir");
        let o = Ledger::new(odd.path(), "deer-flow-");
        o.mark(id, "c1").expect("mark");
        let id_file = o.sandbox_dir(id).join(ID_FILE);
        fs::remove_file(&id_file).expect("rm");
        fs::create_dir(&id_file).expect("a directory in its place");
        assert_eq!(
            failed(o.entries().map(drop)),
            Err((o.sandbox_dir(id), io::ErrorKind::IsADirectory)),
            "EISDIR is no missing ID file"
        );
    }

    /// Only 16-hex names are generations: the id file, temp files and anything else a
    /// directory holds are not.
    #[test]
    fn only_sixteen_hex_names_are_generations() {
        let state = tempfile::tempdir().expect("dir");
        let ledger = Ledger::new(state.path(), "deer-flow-");
        let id = "7d9ac0ff9b98cd06";
        ledger.mark(id, "c1").expect("mark");
        let dir = ledger.sandbox_dir(id);
        for name in [
            "0123456789abcdeg",
            "0123456789abcde",
            "0123456789abcdef0",
            ".x.tmp.1",
        ] {
            fs::write(dir.join(name), b"").expect("write");
        }
        assert_eq!(ledger.generations(id).expect("read"), vec![k("c1")]);
    }

    /// Known answers, written as literals: the record's path is part of the on-disk format
    /// (records survive restarts and upgrades), so it is never recomputed by the code under
    /// test. `k(x)` = the first 16 hex of SHA-256 over `x`.
    #[test]
    fn record_paths_are_known_answers() {
        let state = tempfile::tempdir().expect("dir");
        let ledger = Ledger::new(state.path(), "deer-flow-");
        let record = ledger.mark("7d9ac0ff9b98cd06", "c0ffee").expect("mark");
        assert_eq!(
            record
                .strip_prefix(state.path())
                .expect("under the state dir"),
            Path::new("sandbox-quarantine/ca020af577589f4a/aa2da1bb76732f47/fb0288872031fc48")
        );
        let unknown = ledger.mark("7d9ac0ff9b98cd06", "unknown").expect("mark");
        assert_eq!(
            unknown
                .file_name()
                .map(|n| n.to_string_lossy().into_owned()),
            Some("b23a6a8439c0dde5".to_owned())
        );
    }

    #[test]
    fn layout_is_three_16_hex_components() {
        let state = tempfile::tempdir().expect("dir");
        let ledger = Ledger::new(state.path(), "deer-flow-");
        let record = ledger.mark("c1a44b2434411cc2", "abc123").expect("mark");
        let rel = record.strip_prefix(state.path()).expect("under state dir");
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        assert_eq!(parts[0], "sandbox-quarantine");
        assert_eq!(
            parts[1..],
            [k("deer-flow-"), k("c1a44b2434411cc2"), k("abc123")]
        );
        for p in &parts[1..] {
            assert_eq!(p.len(), 16);
            assert!(p.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_eq!(
            fs::metadata(&record).expect("stat").len(),
            0,
            "a record is an empty file"
        );
        let leftovers: Vec<_> = fs::read_dir(record.parent().expect("dir"))
            .expect("read")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(leftovers.is_empty(), "no temp files left");
    }

    #[test]
    fn an_entry_is_acted_on_only_under_an_id_that_is_its_directorys() {
        let state = tempfile::tempdir().expect("dir");
        let ledger = Ledger::new(state.path(), "p-");
        let (a, b) = ("aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb");
        ledger.mark(a, "gen1").expect("mark");
        let entry = |ledger: &Ledger| ledger.entries().expect("entries").remove(0);
        assert_eq!(entry(&ledger).checked_id(), Ok(Some(a.to_owned())));
        let id_file = ledger.dir().join(k(a)).join(ID_FILE);
        let not_an_id = |raw: &str| {
            format!("{ID_FILE}: {raw:?} is not a sandbox ID (16 lowercase hex characters)")
        };
        for (bad, why) in [
            ("zz/../../x", not_an_id("zz/../../x")),
            (
                b,
                format!(
                    "{ID_FILE} names sandbox {b}, whose records would be under {}, not {}",
                    k(b),
                    k(a)
                ),
            ),
            ("AAAAAAAAAAAAAAAA", not_an_id("AAAAAAAAAAAAAAAA")),
            ("aaaaaaaaaaaaaaaa\n", not_an_id("aaaaaaaaaaaaaaaa\n")),
            ("", not_an_id("")),
        ] {
            fs::write(&id_file, bad).expect("write");
            let e = entry(&ledger);
            assert_eq!(e.key, k(a));
            assert_eq!(e.checked_id(), Err(why), "{bad:?} accepted");
        }
        fs::remove_file(&id_file).expect("rm");
        assert_eq!(entry(&ledger).checked_id(), Ok(None));
    }

    #[test]
    fn records_survive_a_new_ledger_and_retire() {
        let state = tempfile::tempdir().expect("dir");
        Ledger::new(state.path(), "p-")
            .mark("aaaaaaaaaaaaaaaa", "gen1")
            .expect("mark");
        let again = Ledger::new(state.path(), "p-");
        assert!(again.is_quarantined("aaaaaaaaaaaaaaaa").expect("read"));
        assert!(again.fences("aaaaaaaaaaaaaaaa", "gen1").expect("read"));
        assert!(!again.fences("aaaaaaaaaaaaaaaa", "gen2").expect("read"));
        let entries = again.entries().expect("entries");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].sandbox_id.as_deref(), Some("aaaaaaaaaaaaaaaa"));
        again.mark("aaaaaaaaaaaaaaaa", "gen2").expect("mark");
        again
            .retire_generation("aaaaaaaaaaaaaaaa", "gen1")
            .expect("retire one");
        assert!(!again.fences("aaaaaaaaaaaaaaaa", "gen1").expect("read"));
        assert!(again.fences("aaaaaaaaaaaaaaaa", "gen2").expect("read"));
        again.retire("aaaaaaaaaaaaaaaa").expect("retire");
        again
            .retire("aaaaaaaaaaaaaaaa")
            .expect("retiring twice is fine");
        assert!(!again.is_quarantined("aaaaaaaaaaaaaaaa").expect("read"));
        // Another scope's ledger is separate.
        assert!(Ledger::new(state.path(), "q-")
            .entries()
            .expect("read")
            .is_empty());
    }
}
