//! Pinned bind sources (I/O): each host path a create binds is opened beneath its bind root
//! (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, from a
//! descriptor of the root opened at start-up) and bind-mounted, from that descriptor, onto a
//! fresh staging path in the pin directory (`pin_dir`). The policy asks for this once a
//! create's body is checked (`Need::BindPins`, gathered by `exchange`), and writes the body
//! forwarded on the staging paths, so the kernel mounts the directory that was checked at
//! every start and restart, whatever is renamed or replaced later.
//!
//! The table of the stack's pins: a pin is in flight while its create is; the engine refusing
//! the create, or the proxy not forwarding it, releases it at once; otherwise it stays until
//! no container refers to it, which `pin_watch` asks the engine after each of the stack's
//! containers goes (and at start-up: a proxy restarted finds the earlier one's pins in the
//! directory and keeps those in use). At most `--max-bind-pins` at once. Staging names are 128 random bits, never reused: a
//! container that refers to a pin lost at a reboot can never meet another one's.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rustix::fs::{Mode, OFlags, ResolveFlags, StatVfsMountFlags};
use sockproxy_policy::{BindSource, Refusal};

use crate::pin_dir::{self, PinDir, PinError};

/// Default bound on the pins of one stack (`--max-bind-pins`): deer-flow gives a sandbox 11
/// binds, so some 370 sandboxes' worth.
pub const DEFAULT_MAX_PINS: usize = 4096;

/// Where pins go and how many (`--pin-dir`, `--max-bind-pins`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinSettings {
    pub dir: PathBuf,
    pub max: usize,
}

/// The settings from `--pin-dir` and `--max-bind-pins`: the directory defaults to
/// `/run/sockproxy-pins/STACK`, for which the stack's name must be one file name.
pub fn settings(
    dir: Option<PathBuf>,
    max: Option<usize>,
    stack: &str,
) -> Result<PinSettings, String> {
    let dir = match dir {
        Some(d) => d,
        None if !stack.is_empty()
            && !stack.contains('/')
            && stack != "."
            && stack != ".." =>
        {
            Path::new("/run/sockproxy-pins").join(stack)
        }
        None => {
            return Err(format!(
                "the stack's name {stack:?} is not a file name for the default directory; pass --pin-dir"
            ))
        }
    };
    Ok(PinSettings {
        dir,
        max: max.unwrap_or(DEFAULT_MAX_PINS).max(1),
    })
}

const OP: &str = "containers.create";

/// The stack's pins; see the module docs.
#[derive(Debug)]
pub struct Pins {
    dir: PinDir,
    /// Each bind root and a descriptor of it opened at start-up.
    roots: Vec<(PathBuf, OwnedFd)>,
    max: usize,
    /// Staging name → in flight.
    table: Mutex<HashMap<String, bool>>,
    /// Asks `pin_watch` to release what no container refers to.
    wake: tokio::sync::Notify,
}

impl Pins {
    /// Sets up pinning for `roots` (nothing to do without any): checks the process may mount,
    /// mounts or reuses the pin directory, opens the roots, takes over the pins an earlier
    /// proxy left (removing mount points left empty) and pins the first root once to prove the
    /// calls work here.
    pub fn open(settings: &PinSettings, roots: &[PathBuf]) -> Result<Option<Self>, PinError> {
        if roots.is_empty() {
            return Ok(None);
        }
        pin_dir::check_dir(&settings.dir, roots)?;
        pin_dir::can_mount()?;
        tracing::info!(pin_dir = %settings.dir.display(), "setting up the pin directory (mount(2))");
        let dir = PinDir::open(&settings.dir, settings.max)?;
        let roots = roots
            .iter()
            .map(|r| {
                let fd = rustix::fs::openat2(
                    rustix::fs::CWD,
                    r,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                    ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
                )
                .map_err(|e| PinError::Root(r.clone(), format!("cannot open it: {e}")))?;
                Ok((r.clone(), fd))
            })
            .collect::<Result<Vec<_>, PinError>>()?;
        let pins = Self {
            table: Mutex::new(left_over(&dir)?),
            dir,
            roots,
            max: settings.max,
            wake: tokio::sync::Notify::new(),
        };
        let probe = pins.probe_source();
        let (name, _) = pins
            .mount_one(&probe)
            .map_err(|r| PinError::Probe(r.to_string()))?;
        pins.unmount(&name);
        Ok(Some(pins))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, bool>> {
        // Each change is one map operation: a panic elsewhere leaves it whole.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pin directory (where the tmpfs is).
    pub fn dir(&self) -> &Path {
        &self.dir.dir
    }

    /// Where pin `name` is mounted.
    pub fn staging(&self, name: &str) -> PathBuf {
        self.dir.staging.join(name)
    }

    /// The first bind root itself, as a bind source: what start-up pins to prove it can.
    pub fn probe_source(&self) -> BindSource {
        let root = self
            .roots
            .first()
            .map(|(r, _)| r.clone())
            .unwrap_or_default();
        BindSource {
            path: root.clone(),
            root,
            beneath: PathBuf::new(),
            target: "/probe".into(),
            field: "--allow-bind-root".into(),
        }
    }

    /// Pins held, in flight or not.
    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// Pins each source for one create; on any failure the ones made are released and the
    /// create is refused.
    pub fn pin(&self, sources: &[BindSource]) -> Result<PinSet<'_>, Refusal> {
        let mut set = PinSet {
            pins: Some(self),
            names: Vec::with_capacity(sources.len()),
            staging: Vec::with_capacity(sources.len()),
            settled: false,
        };
        if sources.is_empty() {
            set.settled = true;
            return Ok(set);
        }
        {
            let held = self.lock().len();
            if held.saturating_add(sources.len()) > self.max {
                set.settled = true;
                return Err(Refusal::Busy(format!(
                    "the stack holds {held} pinned bind sources and this create needs {} more, over --max-bind-pins {}; remove containers it no longer needs",
                    sources.len(),
                    self.max
                )));
            }
        }
        for s in sources {
            match self.mount_one(s) {
                Ok((name, staging)) => {
                    set.names.push(name);
                    set.staging.push(staging);
                }
                Err(refusal) => {
                    set.release();
                    return Err(refusal);
                }
            }
        }
        Ok(set)
    }

    /// Opens `s` beneath its root and mounts it on a new staging path, recorded in flight.
    fn mount_one(&self, s: &BindSource) -> Result<(String, PathBuf), Refusal> {
        let refuse = |why: String| Refusal::Setting {
            op: OP.into(),
            why: format!("{} {} {why}", s.field, s.path.display()),
        };
        let Some((_, root)) = self.roots.iter().find(|(r, _)| *r == s.root) else {
            return Err(refuse("is not under a bind root the proxy opened".into()));
        };
        let beneath: &Path = if s.beneath.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &s.beneath
        };
        // No O_NOFOLLOW: with O_PATH it would hand back a trailing link itself; without it,
        // RESOLVE_NO_SYMLINKS refuses a link anywhere, the last component included.
        let fd = rustix::fs::openat2(
            root,
            beneath,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| {
            refuse(match e {
                rustix::io::Errno::LOOP => {
                    "goes through a symbolic link, which is not allowed".into()
                }
                rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR => {
                    "does not exist (create it before the container)".into()
                }
                rustix::io::Errno::XDEV => "leaves its bind root".into(),
                e => format!("cannot be opened beneath its bind root ({e})"),
            })
        })?;
        let flags = rustix::fs::fstatvfs(&fd)
            .map_err(|e| refuse(format!("cannot be read ({e})")))?
            .f_flag;
        if !flags.contains(StatVfsMountFlags::NOSUID | StatVfsMountFlags::NODEV) {
            return Err(refuse(
                "is on a mount without nosuid and nodev, which a bind source must be on".into(),
            ));
        }
        let is_dir = rustix::fs::fstat(&fd)
            .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir())
            .map_err(|e| refuse(format!("cannot be read ({e})")))?;
        let name = staging_name()
            .map_err(|e| Refusal::Upstream(format!("no random name for a pin: {e}")))?;
        let staging = self.staging(&name);
        self.lock().insert(name.clone(), true);
        let made = if is_dir {
            rustix::fs::mkdir(&staging, Mode::RWXU)
        } else {
            rustix::fs::open(
                &staging,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::RUSR | Mode::WUSR,
            )
            .map(drop)
        };
        // The descriptor's own path, through /proc: the kernel mounts what was opened, not
        // what the path names now.
        let mounted = made.and_then(|()| {
            rustix::mount::mount_bind(format!("/proc/self/fd/{}", fd.as_raw_fd()), &staging)
        });
        if let Err(e) = mounted {
            self.unmount(&name);
            return Err(Refusal::Upstream(format!(
                "cannot pin {} at {}: {e}",
                s.path.display(),
                staging.display()
            )));
        }
        Ok((name, staging))
    }

    /// Forgets pin `name` and undoes its mount.
    fn unmount(&self, name: &str) {
        self.lock().remove(name);
        let staging = self.staging(name);
        if let Err(e) = pin_dir::unpin(&staging) {
            tracing::warn!(staging = %staging.display(), error = %e, "could not release a pinned bind source");
        }
    }

    /// Asks for the pins no container refers to to be released (`pin_watch`).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Until `wake` is called (at once if it was called since the last time).
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// The pins not in flight, each with its staging path: those a release may take.
    pub fn settled(&self) -> Vec<(String, PathBuf)> {
        self.lock()
            .iter()
            .filter(|(_, inflight)| !**inflight)
            .map(|(n, _)| (n.clone(), self.staging(n)))
            .collect()
    }

    /// Releases each of `candidates` (from `settled`) whose staging path is not in
    /// `referenced`, unless a create took it up since; returns how many went.
    pub fn release_unreferenced(
        &self,
        candidates: &[(String, PathBuf)],
        referenced: &HashSet<PathBuf>,
    ) -> usize {
        let mut gone = 0;
        for (name, staging) in candidates {
            if referenced.contains(staging) || self.lock().get(name) != Some(&false) {
                continue;
            }
            self.unmount(name);
            gone += 1;
        }
        gone
    }
}

/// The pins of a create's bind sources (`Need::BindPins`: the policy checked the body and
/// names each host path it binds), logged with the staging path each went to. With no pins set
/// up (no `--allow-bind-root`) the create is refused: a host path is never forwarded unpinned.
pub fn for_create<'a>(
    pins: Option<&'a Pins>,
    sources: &[BindSource],
    stack: &str,
) -> Result<PinSet<'a>, Refusal> {
    let Some(pins) = pins else {
        return Err(Refusal::Setting {
            op: OP.into(),
            why: "binds a host path, and this proxy pins none (no --allow-bind-root)".into(),
        });
    };
    let set = pins.pin(sources)?;
    // Where each source went, beside the `sockproxy.bind.<target>` labels.
    let each: Vec<String> = sources
        .iter()
        .zip(&set.staging)
        .map(|(s, staging)| format!("{}={}", s.path.display(), staging.display()))
        .collect();
    tracing::info!(%stack, pins = %each.join(","), "bind sources pinned");
    Ok(set)
}

/// 128 random bits in hex.
fn staging_name() -> Result<String, getrandom::Error> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The pins an earlier proxy left in the directory (mounted: kept, not in flight), with every
/// mount point left without its mount removed.
fn left_over(dir: &PinDir) -> Result<HashMap<String, bool>, PinError> {
    let fail = |why: String| PinError::Dir(dir.dir.clone(), why);
    let mounted: HashSet<PathBuf> = pin_dir::mounts()
        .map_err(|e| fail(format!("cannot read /proc/self/mountinfo: {e}")))?
        .into_iter()
        .map(|m| m.point)
        .collect();
    let mut table = HashMap::new();
    let entries = std::fs::read_dir(&dir.staging).map_err(|e| fail(e.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|e| fail(e.to_string()))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if mounted.contains(&path) {
            table.insert(name, false);
        } else {
            pin_dir::unpin(&path).map_err(|e| fail(format!("{}: {e}", path.display())))?;
        }
    }
    if !table.is_empty() {
        tracing::info!(
            pins = table.len(),
            "kept the pinned bind sources an earlier sockproxy left"
        );
    }
    Ok(table)
}

/// The pins of one create: in flight until the engine answers it.
#[derive(Debug)]
pub struct PinSet<'a> {
    /// `None`: a create with nothing pinned.
    pins: Option<&'a Pins>,
    names: Vec<String>,
    /// Each source's staging path, in the order the sources were given (`Fact::BindPins`).
    pub staging: Vec<PathBuf>,
    settled: bool,
}

impl PinSet<'_> {
    /// The engine answered the create: created (`true`), the pins stay while a container
    /// refers to them; refused (or never forwarded: `false`), they are released at once.
    pub fn answered(mut self, created: bool) {
        if created {
            self.settle();
        } else {
            self.release();
        }
    }

    /// No longer in flight.
    fn settle(&mut self) {
        if let Some(pins) = self.pins {
            let mut table = pins.lock();
            for n in &self.names {
                if let Some(inflight) = table.get_mut(n) {
                    *inflight = false;
                }
            }
        }
        self.settled = true;
    }

    fn release(&mut self) {
        if let Some(pins) = self.pins {
            for n in self.names.drain(..) {
                pins.unmount(&n);
            }
        }
        self.settled = true;
    }
}

impl Drop for PinSet<'_> {
    /// Never answered (the request to the engine failed on the way): whether a container was
    /// made is the engine's to say, so the pins are left to the next release pass.
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.settle();
        if let Some(pins) = self.pins {
            pins.wake();
        }
    }
}
