//! A program under test is waited for with a limit: past it the program is killed and the test
//! fails saying so, where an unbounded wait (`Command::output`, `Child::wait`) would let a
//! regression that keeps it running (a start-up error no longer reached, a signal no longer
//! heeded) hang the whole suite. `wait-timeout` waits without polling. sockproxy's and
//! netproxy's own tests include this file by path (they cannot depend on this crate, which
//! depends on them).

use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use wait_timeout::ChildExt;

/// Enough for a program to refuse its flags, or to answer a signal, on a loaded machine.
pub const SHORT: Duration = Duration::from_secs(60);
/// Enough for a command that works on an engine (a create, a teardown).
pub const LONG: Duration = Duration::from_secs(300);

/// `Command::output`, bounded.
pub trait OutputWithin {
    /// Runs the program as `output` does (stdin empty, stdout and stderr captured) and waits at
    /// most `limit` for it to exit; past it, kills it and panics with what it printed.
    fn output_within(&mut self, limit: Duration) -> io::Result<Output>;
}

impl OutputWithin for Command {
    fn output_within(&mut self, limit: Duration) -> io::Result<Output> {
        let what = format!("{self:?}");
        let child = self
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        output_of(child, limit, &what)
    }
}

/// `Child::wait` and `Child::wait_with_output`, bounded.
pub trait WaitWithin {
    /// Waits at most `limit` for the program to exit; past it, kills it and panics.
    fn wait_within(&mut self, limit: Duration) -> io::Result<ExitStatus>;
    /// `wait_with_output`, waiting at most `limit`; past it, kills it and panics.
    fn output_within(self, limit: Duration) -> io::Result<Output>;
}

impl WaitWithin for Child {
    fn wait_within(&mut self, limit: Duration) -> io::Result<ExitStatus> {
        match self.wait_timeout(limit)? {
            Some(status) => Ok(status),
            None => {
                let _ = self.kill();
                let _ = self.wait();
                panic!(
                    "process {} still running after {limit:?}: killed",
                    self.id()
                );
            }
        }
    }

    fn output_within(self, limit: Duration) -> io::Result<Output> {
        let what = format!("process {}", self.id());
        output_of(self, limit, &what)
    }
}

fn output_of(mut child: Child, limit: Duration, what: &str) -> io::Result<Output> {
    // Read while the program runs: one that fills a pipe nobody reads would never exit.
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let Some(status) = child.wait_timeout(limit)? else {
        let _ = child.kill();
        let _ = child.wait();
        let err = stderr.map(collect).unwrap_or_default();
        panic!(
            "{what}: still running after {limit:?}: killed; its stderr: {}",
            String::from_utf8_lossy(&err)
        );
    };
    Ok(Output {
        status,
        stdout: stdout.map(collect).unwrap_or_default(),
        stderr: stderr.map(collect).unwrap_or_default(),
    })
}

type Reader = std::thread::JoinHandle<Vec<u8>>;

fn drain(mut pipe: impl Read + Send + 'static) -> Reader {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = pipe.read_to_end(&mut out);
        out
    })
}

fn collect(reader: Reader) -> Vec<u8> {
    reader.join().unwrap_or_default()
}
