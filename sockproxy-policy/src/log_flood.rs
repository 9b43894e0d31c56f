//! The log-flood rule, without I/O: how many log lines a second one of the stack's containers
//! may write, for how long, before the proxy stops it (`--log-flood-lines`,
//! `--log-flood-seconds`). dockerd copies, splits and encodes every line a container writes on
//! the engine's own CPU, which every stack shares, whatever the logging driver: a sandbox
//! printing as fast as it can keeps dockerd near a whole core while the container itself is held
//! to its CPU limit. The transport samples each running container once a second (four times a
//! second within the repeat window) with
//! `GET /containers/{id}/logs?tail=LINES&since=<a second ago>`; `Lines` counts the answer
//! (dockerd's multiplexed stream, or the raw one of a TTY container) and `Streak::judge` says
//! whether the container goes on, is over the limit, or is stopped.

/// Lines a second a container may log, sustained, before it is stopped.
pub const DEFAULT_LINES: u32 = 1000;
/// Seconds in a row over the limit that stop a container.
pub const DEFAULT_SECONDS: u32 = 3;
/// The longest `--log-flood-seconds`.
pub const MAX_SECONDS: u32 = 600;
/// The most of one sample's answer that is read: reaching it is over the limit by itself
/// (a MiB of log in one second, whatever the line count; dockerd cuts lines at 16 KiB).
pub const SAMPLE_BYTES: usize = 1 << 20;
/// For this long after one of a stack's containers is stopped for flooding (seconds), any of
/// its containers is stopped at its first second over the limit: a tenant that starts its
/// flooder again, or makes another, gets a second of flood each time, not `--log-flood-seconds`.
pub const REPEAT_WINDOW_SECS: u64 = 600;
/// How often the stack's running containers are sampled (milliseconds): once a second, and
/// within the repeat window four times a second. Each sample still reaches back a whole
/// second, so the limit is the same; a repeat flooder is only seen sooner: its first second's
/// worth of lines is written within a fraction of a second, and every moment it runs holds
/// dockerd near a core.
pub const PERIOD_MS: u64 = 1000;
pub const REPEAT_PERIOD_MS: u64 = 250;

/// The pause before the next sample: `REPEAT_PERIOD_MS` while the stack is within the repeat
/// window, `PERIOD_MS` otherwise.
pub fn period_ms(repeat: bool) -> u64 {
    if repeat {
        REPEAT_PERIOD_MS
    } else {
        PERIOD_MS
    }
}

/// The file in `--state-dir` that holds when one of the stack's containers was last stopped
/// for flooding, so that a restarted proxy keeps the repeat window (a tenant whose proxy was
/// killed gets no second long flood).
pub const MEMORY_FILE: &str = "log-flood-stop";

/// What the memory file's text says: the Unix time (seconds) of the stack's last stop for
/// flooding, as `memory_text` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recalled {
    /// No file: no stop remembered.
    Nothing,
    At(u64),
    /// A file the proxy did not write as it is (cut short, edited): read as a stop just now.
    Unreadable,
}

/// The memory file's text for a stop at `unix_secs`.
pub fn memory_text(unix_secs: u64) -> String {
    format!("{unix_secs}\n")
}

/// Reads the memory file's text (`None`: no file).
pub fn recall(text: Option<&str>) -> Recalled {
    match text {
        None => Recalled::Nothing,
        Some(t) => t
            .strip_suffix('\n')
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
            .map_or(Recalled::Unreadable, Recalled::At),
    }
}

/// How much of the repeat window is left at `now` (Unix seconds) after what was recalled. A
/// file that cannot be read, or a stop later than `now` (the clock was set back), opens a whole
/// window: the guard errs towards stopping a flooder sooner, never towards a longer flood.
pub fn window_left(recalled: Recalled, now: u64) -> Option<u64> {
    match recalled {
        Recalled::Nothing => None,
        Recalled::Unreadable => Some(REPEAT_WINDOW_SECS),
        Recalled::At(at) if at > now => Some(REPEAT_WINDOW_SECS),
        Recalled::At(at) => REPEAT_WINDOW_SECS
            .checked_sub(now - at)
            .filter(|left| *left > 0),
    }
}

/// The limit: `lines` a second for `seconds` seconds in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFlood {
    pub lines: u32,
    pub seconds: u32,
}

impl Default for LogFlood {
    fn default() -> Self {
        Self {
            lines: DEFAULT_LINES,
            seconds: DEFAULT_SECONDS,
        }
    }
}

impl LogFlood {
    /// The flags, validated: `None` when `lines` is 0 (the guard is off).
    pub fn from_flags(lines: Option<u32>, seconds: Option<u32>) -> Result<Option<Self>, String> {
        let d = Self::default();
        let seconds = seconds.unwrap_or(d.seconds);
        if !(1..=MAX_SECONDS).contains(&seconds) {
            return Err(format!(
                "--log-flood-seconds {seconds}: must be 1 to {MAX_SECONDS}"
            ));
        }
        Ok(match lines.unwrap_or(d.lines) {
            0 => None,
            lines => Some(Self { lines, seconds }),
        })
    }
}

/// What one second's sample of a container's log held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// Log messages (dockerd's lines) in the answer.
    pub lines: u64,
    /// Bytes of the answer read (at most `SAMPLE_BYTES`).
    pub bytes: usize,
}

impl Sample {
    /// Whether this second was over `limit`: the sample asked for the last `limit.lines` lines
    /// logged since a second ago, so a full answer means at least that many.
    pub fn over(&self, limit: &LogFlood) -> bool {
        self.lines >= u64::from(limit.lines) || self.bytes >= SAMPLE_BYTES
    }
}

/// What the guard does with a container after a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Under the limit this second.
    Quiet,
    /// Over the limit for `seconds` seconds in a row, not yet long enough to stop it.
    Over { seconds: u32 },
    /// Stop it: over the limit for `seconds` seconds in a row (1 for a repeat offender).
    Stop { seconds: u32 },
}

/// One container's seconds over the limit in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Streak {
    seconds: u32,
}

impl Streak {
    /// Folds one sample in. `repeat`: one of the stack's containers was stopped for flooding
    /// within `REPEAT_WINDOW_SECS`, so one second over stops it.
    pub fn judge(&mut self, limit: &LogFlood, sample: Sample, repeat: bool) -> Verdict {
        if !sample.over(limit) {
            self.seconds = 0;
            return Verdict::Quiet;
        }
        self.seconds = self.seconds.saturating_add(1);
        let needed = if repeat { 1 } else { limit.seconds };
        if self.seconds >= needed {
            let seconds = self.seconds;
            self.seconds = 0;
            Verdict::Stop { seconds }
        } else {
            Verdict::Over {
                seconds: self.seconds,
            }
        }
    }
}

/// The words of a stop, for the decision line and the operator.
pub fn stop_message(name: &str, limit: &LogFlood, seconds: u32) -> String {
    format!(
        "sockproxy: containers.stop: {name} logged at least {} lines a second for {seconds} s \
         (--log-flood-lines {}, --log-flood-seconds {}); stopped",
        limit.lines, limit.lines, limit.seconds
    )
}

/// Counts the log messages in a `GET /containers/{id}/logs` answer, fed as it arrives. A
/// container without a TTY is answered in dockerd's multiplexed stream: an 8-byte header (the
/// stream, three zero bytes, the payload's length big-endian) before each message, so a
/// message is a frame whatever it holds. A TTY container's answer is the messages joined, so
/// its lines are its newlines. Whether the container has a TTY is the engine's inspect's word,
/// never the answer's: a TTY container's output could mimic a frame header.
#[derive(Debug, Clone)]
pub struct Lines {
    tty: bool,
    header: [u8; 8],
    have: usize,
    left: u64,
    sample: Sample,
    broken: bool,
}

impl Lines {
    pub fn new(tty: bool) -> Self {
        Self {
            tty,
            header: [0; 8],
            have: 0,
            left: 0,
            sample: Sample::default(),
            broken: false,
        }
    }

    /// Folds in the next bytes; false once `SAMPLE_BYTES` are read (read no more).
    pub fn feed(&mut self, mut chunk: &[u8]) -> bool {
        let room = SAMPLE_BYTES.saturating_sub(self.sample.bytes);
        chunk = chunk.get(..room.min(chunk.len())).unwrap_or(chunk);
        self.sample.bytes += chunk.len();
        if self.tty {
            self.sample.lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        } else {
            self.frames(chunk);
        }
        self.sample.bytes < SAMPLE_BYTES
    }

    fn frames(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() && !self.broken {
            if self.left > 0 {
                let take = usize::try_from(self.left).map_or(chunk.len(), |l| l.min(chunk.len()));
                self.left -= take as u64;
                chunk = chunk.get(take..).unwrap_or_default();
                continue;
            }
            let take = (8 - self.have).min(chunk.len());
            if let (Some(to), Some(from)) = (
                self.header.get_mut(self.have..self.have + take),
                chunk.get(..take),
            ) {
                to.copy_from_slice(from);
            }
            self.have += take;
            chunk = chunk.get(take..).unwrap_or_default();
            if self.have < 8 {
                continue;
            }
            self.have = 0;
            let [stream, a, b, c, l0, l1, l2, l3] = self.header;
            if stream > 3 || (a, b, c) != (0, 0, 0) {
                // Not dockerd's framing: counted by its size alone from here on.
                self.broken = true;
                continue;
            }
            self.sample.lines += 1;
            self.left = u64::from(u32::from_be_bytes([l0, l1, l2, l3]));
        }
    }

    /// The sample: an answer that was not dockerd's framing counts as over the limit only
    /// by its size.
    pub fn sample(&self) -> Sample {
        self.sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(stream: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![stream, 0, 0, 0];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn the_flags_table() {
        let cases = [
            (None, None, Ok(Some(LogFlood::default()))),
            (Some(0), None, Ok(None)),
            (
                Some(50),
                Some(2),
                Ok(Some(LogFlood {
                    lines: 50,
                    seconds: 2,
                })),
            ),
            (
                None,
                Some(0),
                Err("--log-flood-seconds 0: must be 1 to 600".to_owned()),
            ),
            (
                Some(0),
                Some(601),
                Err("--log-flood-seconds 601: must be 1 to 600".to_owned()),
            ),
        ];
        for (lines, seconds, want) in cases {
            assert_eq!(
                LogFlood::from_flags(lines, seconds),
                want,
                "{lines:?} {seconds:?}"
            );
        }
    }

    /// Frames are counted however the answer is cut into chunks, a header split included.
    #[test]
    fn frames_are_counted_across_chunk_boundaries() {
        let mut all = Vec::new();
        for i in 0..5u8 {
            all.extend(frame(1 + i % 2, &vec![b'y'; usize::from(i) * 7]));
        }
        for cut in 1..all.len() {
            let mut l = Lines::new(false);
            for piece in all.chunks(cut) {
                assert!(l.feed(piece));
            }
            assert_eq!(l.sample().lines, 5, "chunks of {cut}");
            assert_eq!(l.sample().bytes, all.len());
        }
    }

    /// A TTY answer: lines are newlines, and bytes that look like a frame header do not hide
    /// any (the inspect said TTY, so no header is read).
    #[test]
    fn a_tty_answer_counts_newlines_even_behind_a_forged_header() {
        let mut body = vec![1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        body.extend(b"y\n".repeat(300));
        let mut l = Lines::new(true);
        l.feed(&body);
        assert_eq!(l.sample().lines, 300);
    }

    /// Reading stops at `SAMPLE_BYTES`, and that much is over any line limit.
    #[test]
    fn a_mebibyte_in_a_second_is_over_whatever_the_lines() {
        let mut l = Lines::new(false);
        let big = frame(1, &vec![b'x'; 16 * 1024]);
        let mut fed = 0;
        while l.feed(&big) {
            fed += 1;
            assert!(fed < 100, "stops by itself");
        }
        let s = l.sample();
        assert_eq!(s.bytes, SAMPLE_BYTES);
        assert!(s.lines < 100);
        assert!(s.over(&LogFlood::default()));
    }

    /// Garbage that is not dockerd's framing stops the count; only its size can make it over.
    #[test]
    fn an_answer_that_is_not_framed_is_judged_by_its_size() {
        let mut l = Lines::new(false);
        l.feed(b"this is not a multiplexed stream\n".repeat(10).as_slice());
        assert_eq!(l.sample().lines, 0);
        assert!(!l.sample().over(&LogFlood::default()));
    }

    #[test]
    fn the_streak_table() {
        let limit = LogFlood {
            lines: 100,
            seconds: 3,
        };
        let over = Sample {
            lines: 100,
            bytes: 1000,
        };
        let under = Sample {
            lines: 99,
            bytes: 1000,
        };
        // (samples, repeat offender, verdict after the last)
        let cases: [(&[Sample], bool, Verdict); 6] = [
            (&[under], false, Verdict::Quiet),
            (&[over], false, Verdict::Over { seconds: 1 }),
            (&[over, over], false, Verdict::Over { seconds: 2 }),
            (&[over, over, over], false, Verdict::Stop { seconds: 3 }),
            // A quiet second starts the count again: bursts are not a flood.
            (
                &[over, over, under, over, over],
                false,
                Verdict::Over { seconds: 2 },
            ),
            (&[over], true, Verdict::Stop { seconds: 1 }),
        ];
        for (samples, repeat, want) in cases {
            let mut s = Streak::default();
            let got = samples.iter().map(|x| s.judge(&limit, *x, repeat)).last();
            assert_eq!(got, Some(want), "{samples:?} repeat={repeat}");
        }
    }

    #[test]
    fn a_repeat_flooder_is_sampled_four_times_as_often_over_the_same_second() {
        assert_eq!(period_ms(false), 1000);
        assert_eq!(period_ms(true), 250);
        // Within the repeat window a sample over the limit stops at once, whatever the period.
        let mut s = Streak::default();
        let over = Sample {
            lines: 1000,
            bytes: 9000,
        };
        assert_eq!(
            s.judge(&LogFlood::default(), over, true),
            Verdict::Stop { seconds: 1 }
        );
    }

    /// A restarted proxy reads back the last stop: what is left of its window, a whole window
    /// for a file it cannot read or a time in the future, none once the window has passed.
    #[test]
    fn the_memory_table() {
        let now = 1_800_000_000;
        let w = REPEAT_WINDOW_SECS;
        let cases: [(Option<&str>, Option<u64>); 11] = [
            (None, None),
            (Some(&memory_text(now)), Some(w)),
            (Some(&memory_text(now - 1)), Some(w - 1)),
            (Some(&memory_text(now - w + 1)), Some(1)),
            (Some(&memory_text(now - w)), None),
            (Some(&memory_text(0)), None),
            (Some(&memory_text(now + 3600)), Some(w)),
            (Some(""), Some(w)),
            (Some("1800000000"), Some(w)),
            (Some("-5\n"), Some(w)),
            (Some("99999999999999999999999\n"), Some(w)),
        ];
        for (text, want) in cases {
            assert_eq!(window_left(recall(text), now), want, "{text:?}");
        }
        assert_eq!(recall(Some("42\n")), Recalled::At(42));
        assert_eq!(recall(Some(" 42\n")), Recalled::Unreadable);
    }

    #[test]
    fn the_stop_names_the_container_and_the_flags() {
        let limit = LogFlood::default();
        assert_eq!(
            stop_message("deer-flow-sandbox-1", &limit, 3),
            "sockproxy: containers.stop: deer-flow-sandbox-1 logged at least 1000 lines a second \
             for 3 s (--log-flood-lines 1000, --log-flood-seconds 3); stopped"
        );
    }
}
