//! What a fake container or exec "runs". The fake has no kernel, so it understands the handful
//! of busybox commands the tests use — `echo`, `sleep N`, `cat`, `true`, `false`, `exit N`,
//! `sh` (drains stdin) and `sh -c "a; b && c"` sequences of them — and fails anything else the
//! way a missing binary does (exit 127 with a message on stderr). That is a deliberate difference
//! from dockerd: the contract cases only use these commands.

use std::time::Duration;

use tokio::sync::{mpsc, watch};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Echo(String),
    Sleep(Duration),
    /// Copy stdin to stdout until stdin closes.
    Cat,
    /// Read stdin until it closes, writing nothing (`sh` with a closed or empty script).
    Drain,
    Exit(i64),
    Missing(String),
}

pub fn parse(cmd: &[String]) -> Vec<Step> {
    match cmd {
        [sh, c, script] if (sh == "sh" || sh == "/bin/sh") && c == "-c" => script
            .split([';', '\n'])
            .flat_map(|part| part.split("&&"))
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| simple(&words(p)))
            .collect(),
        other => vec![simple(other)],
    }
}

/// Splits a shell fragment into words, honouring single and double quotes (no escapes).
pub fn words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for ch in s.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(ch);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn simple(argv: &[String]) -> Step {
    let name = argv
        .first()
        .map(|s| s.rsplit('/').next().unwrap_or(s))
        .unwrap_or("");
    match name {
        "echo" => Step::Echo(format!("{}\n", argv[1..].join(" "))),
        "sleep" => {
            let secs: f64 = argv.get(1).and_then(|s| s.parse().ok()).unwrap_or(0.0);
            Step::Sleep(Duration::from_secs_f64(secs.clamp(0.0, 86_400.0)))
        }
        "cat" => Step::Cat,
        "sh" | "" => Step::Drain,
        "true" => Step::Exit(0),
        "false" => Step::Exit(1),
        "exit" => Step::Exit(argv.get(1).and_then(|s| s.parse().ok()).unwrap_or(0)),
        other => Step::Missing(other.to_owned()),
    }
}

/// Runs `steps`; `out(stream, bytes)` receives output (1 = stdout, 2 = stderr). A value sent on
/// `stop` ends the program at once with that exit code (a signal). Returns the exit code.
pub async fn run<F: FnMut(u8, Vec<u8>)>(
    steps: &[Step],
    mut stdin: Option<mpsc::UnboundedReceiver<Vec<u8>>>,
    mut out: F,
    mut stop: watch::Receiver<Option<i64>>,
) -> i64 {
    if let Some(code) = *stop.borrow() {
        return code;
    }
    let mut code = 0;
    for step in steps {
        match step {
            Step::Echo(s) => out(1, s.clone().into_bytes()),
            Step::Sleep(d) => {
                tokio::select! {
                    () = tokio::time::sleep(*d) => {}
                    c = signalled(&mut stop) => return c,
                }
            }
            Step::Cat | Step::Drain => loop {
                let next = async {
                    match stdin.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => None,
                    }
                };
                tokio::select! {
                    chunk = next => match chunk {
                        Some(bytes) if *step == Step::Cat => out(1, bytes),
                        Some(_) => {}
                        None => break,
                    },
                    c = signalled(&mut stop) => return c,
                }
            },
            Step::Exit(c) => return *c,
            Step::Missing(name) => {
                out(
                    2,
                    format!("fake-dockerd: {name}: not a command this fake engine runs\n")
                        .into_bytes(),
                );
                code = 127;
                break;
            }
        }
    }
    code
}

async fn signalled(stop: &mut watch::Receiver<Option<i64>>) -> i64 {
    loop {
        if let Some(code) = *stop.borrow_and_update() {
            return code;
        }
        if stop.changed().await.is_err() {
            // The sender is gone: nobody can stop us any more, so wait forever.
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn parses_the_commands_tests_use() {
        assert_eq!(
            parse(&s(&["echo", "hi", "there"])),
            [Step::Echo("hi there\n".into())]
        );
        assert_eq!(
            parse(&s(&["sh", "-c", "echo 'first line'; sleep 2 && exit 3"])),
            [
                Step::Echo("first line\n".into()),
                Step::Sleep(Duration::from_secs(2)),
                Step::Exit(3)
            ]
        );
        assert_eq!(parse(&s(&["/bin/cat"])), [Step::Cat]);
        assert_eq!(parse(&s(&["nginx"])), [Step::Missing("nginx".into())]);
    }

    #[tokio::test]
    async fn cat_echoes_until_stdin_closes_and_stop_interrupts_sleep() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (_stop_tx, stop_rx) = watch::channel(None);
        tx.send(b"abc".to_vec()).expect("send");
        drop(tx);
        let mut got = Vec::new();
        let code = run(&[Step::Cat], Some(rx), |_, b| got.extend(b), stop_rx).await;
        assert_eq!((code, got), (0, b"abc".to_vec()));

        let (stop_tx, stop_rx) = watch::channel(None);
        let task = tokio::spawn(async move {
            run(
                &[Step::Sleep(Duration::from_secs(600))],
                None,
                |_, _| {},
                stop_rx,
            )
            .await
        });
        stop_tx.send(Some(137)).expect("signal");
        assert_eq!(task.await.expect("joins"), 137);
    }
}
