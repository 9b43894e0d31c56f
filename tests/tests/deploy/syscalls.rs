//! What a unit's seccomp filter lets through, and what a program asks the kernel for: the
//! `SystemCallFilter=` and `RestrictAddressFamilies=` lines of a unit file, read in order as
//! systemd reads them (`man systemd.exec`, "SYSTEM CALL FILTERING"), with the groups expanded
//! by `systemd-analyze syscall-filter`; and the system calls and socket families of a program
//! run under `strace -f`. Nothing here is hard-coded from a systemd version: the groups are
//! the installed systemd's.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use sockproxy_tests::skip::skip;

/// The values of `key=` in the unit's `[Service]` section, in order (comments and other
/// sections left out; a line ending in `\` continues on the next).
pub fn unit_values(unit: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut section = "";
    let mut pending = String::new();
    for raw in unit.lines() {
        let line = raw.trim();
        if pending.is_empty() && (line.starts_with('#') || line.starts_with(';')) {
            continue;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            pending.push_str(stripped);
            pending.push(' ');
            continue;
        }
        let line = format!("{pending}{line}");
        pending.clear();
        if line.starts_with('[') {
            section = if line == "[Service]" {
                "service"
            } else {
                "other"
            };
            continue;
        }
        if section != "service" {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            if k.trim() == key {
                out.push(v.trim().to_owned());
            }
        }
    }
    out
}

/// The groups `systemd-analyze syscall-filter` knows: `@name` → its entries (system call
/// names and `@groups`).
pub fn groups() -> HashMap<String, Vec<String>> {
    let out = Command::new("systemd-analyze")
        .arg("syscall-filter")
        .output()
        .expect("systemd-analyze runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut groups: HashMap<String, Vec<String>> = HashMap::new();
    let mut current: Option<String> = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if line.starts_with('@') {
            let name = line.trim().to_owned();
            groups.insert(name.clone(), Vec::new());
            current = Some(name);
        } else if line.starts_with(char::is_whitespace) {
            let entry = line.trim();
            if let (Some(g), false) = (&current, entry.is_empty() || entry.starts_with('#')) {
                groups.get_mut(g).expect("group").push(entry.to_owned());
            }
        } else {
            // A blank line or a comment at the margin ends the group.
            current = None;
        }
    }
    assert!(
        groups.contains_key("@system-service") && groups.contains_key("@default"),
        "systemd-analyze syscall-filter listed no groups: {:?}",
        groups.keys().collect::<Vec<_>>()
    );
    groups
}

/// `word` (a system call or a `@group`) as the system calls it names, groups in groups too.
fn expand(word: &str, groups: &HashMap<String, Vec<String>>, out: &mut BTreeSet<String>) {
    if word.starts_with('@') {
        let members = groups
            .get(word)
            .unwrap_or_else(|| panic!("{word}: not a group systemd-analyze knows"));
        for m in members {
            expand(m, groups, out);
        }
    } else {
        out.insert(word.to_owned());
    }
}

/// A unit's system call filter: allow-listing (everything else kills the process with SIGSYS,
/// or fails with an errno) or deny-listing.
#[derive(Debug)]
pub struct Filter {
    allow_list: bool,
    set: BTreeSet<String>,
}

impl Filter {
    /// The filter the unit's `SystemCallFilter=` lines make, applied in order: the first
    /// non-empty one decides the mode (allow-listing starts from `@default`, which systemd
    /// always allows); in allow-list mode a later `~` line removes from the set and a plain
    /// one adds to it, in deny-list mode the other way round; an empty value resets. A
    /// `:errno` suffix changes how a call fails, not whether. `None` when the unit has none.
    pub fn of_unit(unit: &str, groups: &HashMap<String, Vec<String>>) -> Option<Self> {
        let mut filter: Option<Self> = None;
        for value in unit_values(unit, "SystemCallFilter") {
            if value.is_empty() {
                filter = None;
                continue;
            }
            let (invert, list) = match value.strip_prefix('~') {
                Some(rest) => (true, rest),
                None => (false, value.as_str()),
            };
            let f = filter.get_or_insert_with(|| {
                let mut set = BTreeSet::new();
                if !invert {
                    expand("@default", groups, &mut set);
                }
                Self {
                    allow_list: !invert,
                    set,
                }
            });
            let mut named = BTreeSet::new();
            for word in list.split_whitespace() {
                let word = word.split_once(':').map_or(word, |(w, _errno)| w);
                expand(word, groups, &mut named);
            }
            if invert == f.allow_list {
                f.set.retain(|s| !named.contains(s));
            } else {
                f.set.extend(named);
            }
        }
        filter
    }

    pub fn allows(&self, syscall: &str) -> bool {
        self.set.contains(syscall) == self.allow_list
    }
}

/// The address families the unit's `RestrictAddressFamilies=` allows (`None`: no restriction).
/// Only the allow-list form is read; a `~` line fails the test, to be taught here first.
pub fn families_of_unit(unit: &str) -> Option<BTreeSet<String>> {
    let values = unit_values(unit, "RestrictAddressFamilies");
    if values.is_empty() {
        return None;
    }
    let mut set = BTreeSet::new();
    for v in values {
        assert!(
            !v.starts_with('~'),
            "a deny-list RestrictAddressFamilies={v}"
        );
        set.extend(v.split_whitespace().map(str::to_owned));
    }
    Some(set)
}

/// What a program asked the kernel for, from `strace -f -o` output: each system call's name,
/// and the address family of each `socket`/`socketpair`.
#[derive(Debug, Default)]
pub struct Traced {
    pub syscalls: BTreeSet<String>,
    pub families: BTreeSet<String>,
}

/// Reads `strace -f -qq -o FILE` output: `PID name(args) = result`, `PID name(args <unfinished
/// ...>`, `PID <... name resumed>…`; signal (`---`) and exit (`+++`) lines carry no call.
pub fn read_trace(path: &Path) -> Traced {
    let text = std::fs::read_to_string(path).expect("the trace");
    let mut t = Traced::default();
    for line in text.lines() {
        let rest = line
            .split_once(char::is_whitespace)
            .map_or("", |(_pid, r)| r)
            .trim_start();
        if rest.starts_with("---") || rest.starts_with("+++") || rest.is_empty() {
            continue;
        }
        let call = rest.strip_prefix("<... ").unwrap_or(rest);
        let name: String = call
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        assert!(!name.is_empty(), "a trace line not understood: {line}");
        if (name == "socket" || name == "socketpair") && call[name.len()..].starts_with('(') {
            let family: String = call[name.len() + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            t.families.insert(family);
        }
        t.syscalls.insert(name);
    }
    assert!(t.syscalls.contains("execve"), "an empty trace: {text}");
    t
}

/// Whether `systemd-analyze` is here; `false` after a skip notice for `test` (a failure under
/// CI=true) otherwise.
pub fn can_analyze(test: &str) -> bool {
    let ok = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip(
            test,
            "systemd-analyze is not installed",
            "apt-get install systemd, as .ci/run does",
        );
    }
    ok
}

/// Whether `systemd-analyze` and `strace` are here and tracing is permitted; `false` after a
/// skip notice for `test` (a failure under CI=true) otherwise.
pub fn can_trace(test: &str) -> bool {
    if !can_analyze(test) {
        return false;
    }
    match Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "true"])
        .output()
    {
        Ok(o) if o.status.success() => true,
        Err(_) => {
            skip(
                test,
                "strace is not installed",
                "apt-get install strace, as .ci/run does",
            );
            false
        }
        Ok(o) => {
            skip(
                test,
                &format!(
                    "strace cannot trace here (ptrace not permitted?): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                "run as root, or with CAP_SYS_PTRACE, or with kernel.yama.ptrace_scope=0",
            );
            false
        }
    }
}

/// The words of an `ExecStart=` as systemd splits them: on whitespace, a single- or
/// double-quoted word kept whole (its quotes dropped); `%i` already replaced by the caller.
pub fn exec_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut word = String::new();
        if c == '\'' || c == '"' {
            chars.next();
            for d in chars.by_ref() {
                if d == c {
                    break;
                }
                word.push(d);
            }
        } else {
            while let Some(&d) = chars.peek() {
                if d.is_whitespace() {
                    break;
                }
                word.push(d);
                chars.next();
            }
        }
        words.push(word);
    }
    words
}

/// The calls and families of `trace` that `unit` would refuse; empty when it allows them all.
pub fn refused(unit: &str, trace: &Traced) -> Vec<String> {
    let groups = groups();
    let filter = Filter::of_unit(unit, &groups).expect("the unit has a SystemCallFilter=");
    let mut refused: Vec<String> = trace
        .syscalls
        .iter()
        .filter(|s| !filter.allows(s))
        .cloned()
        .collect();
    if let Some(families) = families_of_unit(unit) {
        refused.extend(
            trace
                .families
                .iter()
                .filter(|f| !families.contains(*f))
                .map(|f| format!("socket family {f}")),
        );
    }
    refused
}

#[test]
fn the_filter_is_read_in_order_as_systemd_reads_it() {
    if !can_analyze("the_filter_is_read_in_order_as_systemd_reads_it") {
        return;
    }
    let g = groups();
    let unit = |lines: &str| format!("[Unit]\nDescription=x\n[Service]\n{lines}\n");
    let f = |lines: &str| Filter::of_unit(&unit(lines), &g).expect("a filter");
    let old = f("SystemCallFilter=@system-service\nSystemCallFilter=~@privileged @resources");
    assert!(old.allows("read") && old.allows("futex") && old.allows("clock_nanosleep"));
    assert!(!old.allows("fchownat") && !old.allows("setrlimit") && !old.allows("mount"));
    let fixed = f(
        "SystemCallFilter=@system-service\nSystemCallFilter=~@privileged @resources\nSystemCallFilter=@chown",
    );
    assert!(fixed.allows("fchownat") && fixed.allows("chown") && fixed.allows("fchown"));
    assert!(!fixed.allows("setrlimit") && !fixed.allows("setresuid"));
    let deny = f("SystemCallFilter=~@mount\nSystemCallFilter=umount2");
    assert!(deny.allows("read") && !deny.allows("mount") && deny.allows("umount2"));
    let reset = Filter::of_unit(&unit("SystemCallFilter=@basic-io\nSystemCallFilter="), &g);
    assert!(reset.is_none());
    let commented = unit("# SystemCallFilter=~@chown\nSystemCallFilter=@system-service");
    assert!(Filter::of_unit(&commented, &g)
        .expect("filter")
        .allows("fchownat"));
    assert_eq!(
        exec_words(r#"/bin/sh -c 'exec /x serve --key "$D/k"' --stack deer-flow"#),
        [
            "/bin/sh",
            "-c",
            r#"exec /x serve --key "$D/k""#,
            "--stack",
            "deer-flow"
        ]
    );
}
