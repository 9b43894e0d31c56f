//! The record of a multi-object step under way: before the first change a create or a
//! teardown of sandbox `id` makes, `{state_dir}/intents/{k(prefix)}/{k(id)}` is written
//! (atomically: temp file, fsync, rename, fsync of the directory) saying which step it is; when
//! the step returns it is removed. A record left behind means a process stopped half way
//! (killed, its host rebooted) between the objects a sandbox is made of (sandbox, sidecar, two
//! networks, a port): the next operation on the ID, or the provider's reconciliation at
//! start-up and every tick, finishes or undoes it (`converge`) before anything else, so a crash
//! at any step wedges nothing. A create's record carries a random token that every object it
//! makes is labelled with (`LABEL_INTENT`): undoing it removes exactly what it made, never a
//! sandbox that was there before it (a create that only found one). A teardown's record
//! finishes the teardown: everything lifecycle made for the ID goes. Written and removed under
//! the sandbox's lock; every storage error is returned (the caller fails closed).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::ledger::write_atomic;
use crate::naming::{k, parse_stack_sandbox_id};
use crate::private;

/// The label a create puts on every object it makes: its intent record's token.
pub const LABEL_INTENT: &str = "lifecycle.intent";

/// Which step a record is about.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "step", rename_all = "lowercase")]
pub enum Step {
    /// A create: what it made carries `token` in `LABEL_INTENT`.
    Create { token: String },
    /// A teardown: finishing it removes everything lifecycle made for the ID.
    Teardown,
}

impl Step {
    /// A create's step with a fresh token (16 hex from the OS's random source; should it
    /// fail, from the clock and the process, still unique among this ID's creates).
    pub fn create() -> Self {
        let mut bytes = [0u8; 8];
        if getrandom::getrandom(&mut bytes).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            bytes = (t as u64 ^ u64::from(std::process::id()).rotate_left(32)).to_be_bytes();
        }
        Step::Create {
            token: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// One record: the sandbox and its step.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub sandbox_id: String,
    #[serde(flatten)]
    pub step: Step,
}

/// A storage error of the intent records: returned, so the caller fails closed.
#[derive(Debug, thiserror::Error)]
#[error("intent record at {path}: {source}")]
pub struct IntentError {
    pub path: PathBuf,
    pub source: io::Error,
}

#[derive(Debug, Clone)]
pub struct Intents {
    dir: PathBuf,
}

impl Intents {
    /// The records of stack `prefix` under `state_dir`.
    pub fn new(state_dir: &Path, prefix: &str) -> Self {
        Self {
            dir: state_dir.join("intents").join(k(prefix)),
        }
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(k(id))
    }

    fn err(path: &Path) -> impl FnOnce(io::Error) -> IntentError + '_ {
        move |source| IntentError {
            path: path.to_owned(),
            source,
        }
    }

    /// Records that `step` on `id` is under way (replacing the record of an earlier step of
    /// the same operation: a replacement's teardown, then its create).
    pub fn begin(&self, id: &str, step: &Step) -> Result<(), IntentError> {
        private::create_dir_all(&self.dir).map_err(Self::err(&self.dir))?;
        let record = Record {
            sandbox_id: id.to_owned(),
            step: step.clone(),
        };
        let body = serde_json::to_vec(&record).unwrap_or_default();
        write_atomic(&self.dir, &k(id), &body).map_err(|e| IntentError {
            path: e.path,
            source: e.source,
        })
    }

    /// The record of `id`, if any. One that is not a record of this ID (a torn write from
    /// before the atomic rename cannot be; a file someone else wrote can) reads as a teardown:
    /// whatever is there for the ID is removed, never a step trusted to say what it made.
    pub fn read(&self, id: &str) -> Result<Option<Record>, IntentError> {
        let path = self.path(id);
        match fs::read(&path) {
            Ok(body) => Ok(Some(
                serde_json::from_slice::<Record>(&body)
                    .ok()
                    .filter(|r| r.sandbox_id == id)
                    .unwrap_or(Record {
                        sandbox_id: id.to_owned(),
                        step: Step::Teardown,
                    }),
            )),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::err(&path)(e)),
        }
    }

    /// The step on `id` ended with nothing left half made.
    pub fn end(&self, id: &str) -> Result<(), IntentError> {
        let path = self.path(id);
        match fs::remove_file(&path) {
            Ok(()) => fs::File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(Self::err(&self.dir)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Self::err(&path)(e)),
        }
    }

    /// Whether a step on `id` is recorded as under way (or stopped half way).
    pub fn is_open(&self, id: &str) -> Result<bool, IntentError> {
        let path = self.path(id);
        match fs::symlink_metadata(&path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Self::err(&path)(e)),
        }
    }

    /// The sandbox IDs with a record. A record whose content is not a sandbox ID of the stack
    /// whose `k` is its file name is skipped with a warning (never acted on: the engine would be
    /// sent a name built from whatever the file holds); temp files of interrupted writes too.
    pub fn open(&self) -> Result<Vec<String>, IntentError> {
        let read = match fs::read_dir(&self.dir) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Self::err(&self.dir)(e)),
        };
        let mut ids = Vec::new();
        for entry in read {
            let entry = entry.map_err(Self::err(&self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let raw = fs::read(entry.path()).map_err(Self::err(&entry.path()))?;
            let named = serde_json::from_slice::<Record>(&raw)
                .ok()
                .and_then(|r| parse_stack_sandbox_id(&r.sandbox_id).ok());
            match named {
                Some(id) if k(&id) == name => ids.push(id),
                _ => {
                    tracing::warn!(record = %entry.path().display(), "an intent record that names no sandbox of this stack; left alone")
                }
            }
        }
        ids.sort();
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_lives_from_begin_to_end_and_says_its_step() {
        let state = tempfile::tempdir().expect("dir");
        let intents = Intents::new(state.path(), "deer-flow-");
        assert_eq!(intents.open().expect("none yet"), Vec::<String>::new());
        let create = Step::create();
        intents.begin("7d9ac0ff9b98cd06", &create).expect("begin");
        assert!(intents.is_open("7d9ac0ff9b98cd06").expect("read"));
        assert_eq!(intents.open().expect("one"), vec!["7d9ac0ff9b98cd06"]);
        assert_eq!(
            intents
                .read("7d9ac0ff9b98cd06")
                .expect("read")
                .map(|r| r.step),
            Some(create.clone())
        );
        // A replacement's teardown, then its create: the later step is what a record says.
        intents
            .begin("7d9ac0ff9b98cd06", &Step::Teardown)
            .expect("begin");
        assert_eq!(
            intents
                .read("7d9ac0ff9b98cd06")
                .expect("read")
                .map(|r| r.step),
            Some(Step::Teardown)
        );
        intents.end("7d9ac0ff9b98cd06").expect("end");
        intents
            .end("7d9ac0ff9b98cd06")
            .expect("ending twice is done");
        assert!(!intents.is_open("7d9ac0ff9b98cd06").expect("read"));
        assert_eq!(intents.read("7d9ac0ff9b98cd06").expect("read"), None);
        // Another stack's records are its own; two creates never share a token.
        let other = Intents::new(state.path(), "other-");
        other.begin("my-box_1", &Step::Teardown).expect("begin");
        assert_eq!(intents.open().expect("none"), Vec::<String>::new());
        assert_eq!(other.open().expect("one"), vec!["my-box_1"]);
        assert_ne!(Step::create(), Step::create());
    }

    #[test]
    fn a_record_that_names_no_sandbox_of_its_file_is_never_trusted() {
        let state = tempfile::tempdir().expect("dir");
        let intents = Intents::new(state.path(), "deer-flow-");
        intents.begin("good", &Step::create()).expect("begin");
        let dir = state.path().join("intents").join(k("deer-flow-"));
        // Content that is no sandbox ID, one that is another's than its name says, garbage.
        fs::write(
            dir.join(k("x")),
            r#"{"sandbox_id":"../../etc","step":"teardown"}"#,
        )
        .expect("write");
        fs::write(
            dir.join(k("y")),
            r#"{"sandbox_id":"good","step":"teardown"}"#,
        )
        .expect("write");
        fs::write(dir.join(k("z")), "half a rec").expect("write");
        fs::write(dir.join(".tmp.partial"), "half").expect("write");
        assert_eq!(intents.open().expect("read"), vec!["good"]);
        // Read for its own ID, a record that says something else is a teardown.
        assert_eq!(
            intents.read("z").expect("read").map(|r| r.step),
            Some(Step::Teardown)
        );
    }
}
