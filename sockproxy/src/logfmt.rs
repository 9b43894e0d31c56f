//! The plain log format, byte for byte tracing-subscriber's default (`fmt::time::SystemTime`
//! timestamps, `DefaultFields`), written with less work per line: the decision line is written
//! once per request, and formatting it was a fifth of the proxy's instructions per `/_ping`
//! (callgrind). The timestamp's date and time of day are formatted once per second; string and
//! integer fields are written directly. Everything else (messages, `%`/`?` values, errors) goes
//! through tracing-subscriber's own visitor, so its escaping of control characters still holds.

use std::cell::RefCell;
use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::FormatFields;

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` in UTC, as `fmt::time::SystemTime` writes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timestamp;

thread_local! {
    /// The second last formatted, and its text up to the dot.
    static SECOND: RefCell<(i64, String)> = const { RefCell::new((i64::MIN, String::new())) };
}

impl FormatTime for Timestamp {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        let now = std::time::SystemTime::now();
        let Ok(since) = now.duration_since(std::time::UNIX_EPOCH) else {
            // Before 1970: leave it to the general formatter.
            return tracing_subscriber::fmt::time::SystemTime.format_time(w);
        };
        let secs = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
        SECOND.with(|cell| {
            let mut cell = cell.borrow_mut();
            if cell.0 != secs {
                cell.1.clear();
                write_second(&mut cell.1, secs)?;
                cell.0 = secs;
            }
            w.write_str(&cell.1)
        })?;
        let mut digits = [b'0'; 7];
        let mut micros = since.subsec_micros();
        for d in digits[..6].iter_mut().rev() {
            *d = b'0' + (micros % 10) as u8;
            micros /= 10;
        }
        digits[6] = b'Z';
        w.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
    }
}

/// `YYYY-MM-DDTHH:MM:SS.` for `secs` after the epoch (proleptic Gregorian, UTC).
fn write_second(out: &mut String, secs: i64) -> fmt::Result {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    if y > 9999 {
        write!(out, "+{y}")?;
    } else {
        write!(out, "{y:04}")?;
    }
    write!(
        out,
        "-{m:02}-{d:02}T{:02}:{:02}:{:02}.",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day): the days-from-civil algorithm run backwards
/// (H. Hinnant, "chrono-compatible low-level date algorithms").
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `DefaultFields`, with string and integer fields written directly.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fields;

impl<'writer> FormatFields<'writer> for Fields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut v = FieldVisitor {
            writer,
            is_empty: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }
}

struct FieldVisitor<'a> {
    writer: Writer<'a>,
    is_empty: bool,
    result: fmt::Result,
}

impl FieldVisitor<'_> {
    /// What the fast paths do not cover, written by tracing-subscriber's own visitor.
    fn delegate(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut inner = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut inner);
        self.result = inner.finish();
        self.is_empty = false;
    }

    /// `name=` after the separating space; `false` when the field is to go the general way.
    fn start(&mut self, field: &Field) -> bool {
        let name = field.name();
        if self.result.is_err() || name == "message" || name.starts_with("r#") {
            return false;
        }
        if name.starts_with("log.") {
            return false;
        }
        if !self.is_empty {
            self.result = self.writer.write_char(' ');
        }
        self.is_empty = false;
        self.result = self
            .result
            .and_then(|()| self.writer.write_str(name))
            .and_then(|()| self.writer.write_char('='));
        true
    }
}

/// Whether `{:?}` of `s` is `s` in quotes (no escape needed): printable ASCII but `"` and `\\`.
/// Eight bytes at a time, the tail padded with a plain byte: byte by byte this was a fifth of
/// the decision line's instructions (callgrind).
pub(crate) fn plain(s: &str) -> bool {
    let mut words = s.as_bytes().chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        if !plain_word(u64::from_le_bytes(b)) {
            return false;
        }
    }
    let tail = words.remainder();
    let mut b = [b'a'; 8];
    b[..tail.len()].copy_from_slice(tail);
    plain_word(u64::from_le_bytes(b))
}

const ONES: u64 = u64::from_le_bytes([0x01; 8]);
const HIGH: u64 = u64::from_le_bytes([0x80; 8]);

/// Whether some byte of `x` is below `n` (`n` at most 0x80; exact whenever no byte of `x` has
/// its high bit set, which `plain_word` rules out first).
const fn has_below(x: u64, n: u8) -> bool {
    x.wrapping_sub(ONES * n as u64) & !x & HIGH != 0
}

const fn has_byte(x: u64, b: u8) -> bool {
    has_below(x ^ (ONES * b as u64), 1)
}

fn plain_word(x: u64) -> bool {
    x & HIGH == 0
        && !has_below(x, 0x20)
        && !has_byte(x, 0x7f)
        && !has_byte(x, b'"')
        && !has_byte(x, b'\\')
}

impl Visit for FieldVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" || !plain(value) {
            return self.delegate(|v| v.record_str(field, value));
        }
        if self.start(field) {
            let w = &mut self.writer;
            self.result = self
                .result
                .and_then(|()| w.write_char('"'))
                .and_then(|()| w.write_str(value))
                .and_then(|()| w.write_char('"'));
        } else {
            self.delegate(|v| v.record_str(field, value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.start(field) {
            self.integer_after_start(false, value);
        } else {
            self.delegate(|v| v.record_u64(field, value));
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.start(field) {
            self.integer_after_start(value < 0, value.unsigned_abs());
        } else {
            self.delegate(|v| v.record_i64(field, value));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(|v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.delegate(|v| v.record_debug(field, value));
    }
}

impl FieldVisitor<'_> {
    fn integer_after_start(&mut self, negative: bool, n: u64) {
        let mut buf = [0u8; 21];
        let text = decimal(negative, n, &mut buf);
        self.result = self.result.and_then(|()| self.writer.write_str(text));
    }
}

/// `n` (negated if `negative`) in decimal as `{}` writes it, in the end of `buf`.
pub(crate) fn decimal(negative: bool, mut n: u64, buf: &mut [u8; 21]) -> &str {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if negative {
        at -= 1;
        buf[at] = b'-';
    }
    // Only ASCII digits and '-' were written.
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_match_a_day_by_day_count() {
        // 1970, leap days, a century rule, the end of a year, today.
        for secs in [
            0i64,
            951_782_400,
            951_868_799,
            4_107_542_399,
            1_709_164_800,
            1_798_761_599,
            1_796_025_332,
        ] {
            let mut ours = String::new();
            write_second(&mut ours, secs).expect("format");
            let t = std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(u64::try_from(secs).expect("positive"));
            let theirs = counted(t);
            assert_eq!(ours, theirs, "{secs}");
        }
    }

    /// The timestamp up to the dot for `t`, counted a year and a month at a time.
    fn counted(t: std::time::SystemTime) -> String {
        let secs = t
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after epoch")
            .as_secs();
        let mut days = secs / 86_400;
        let mut year = 1970u64;
        let leap = |y: u64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        while days >= if leap(year) { 366 } else { 365 } {
            days -= if leap(year) { 366 } else { 365 };
            year += 1;
        }
        let lengths = [
            31,
            if leap(year) { 29 } else { 28 },
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ];
        let mut month = 1;
        for l in lengths {
            if days < l {
                break;
            }
            days -= l;
            month += 1;
        }
        let rem = secs % 86_400;
        format!(
            "{year:04}-{month:02}-{:02}T{:02}:{:02}:{:02}.",
            days + 1,
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }

    #[test]
    fn plain_is_byte_by_byte_printable_ascii_but_quote_and_backslash() {
        let by_byte = |s: &[u8]| {
            s.iter()
                .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
        };
        // Every byte value at every place of a word and of a tail, among plain neighbours.
        for len in [1, 5, 8, 9, 16, 23] {
            for at in 0..len {
                for b in 0u8..=0x7f {
                    let mut v = vec![b'x'; len];
                    v[at] = b;
                    let s = std::str::from_utf8(&v).expect("ASCII");
                    assert_eq!(plain(s), by_byte(&v), "{v:?}");
                }
                let mut v = "x".repeat(len);
                v.replace_range(at..=at, "é");
                assert!(!plain(&v), "{v:?}");
            }
        }
        assert!(plain(""));
    }

    proptest::proptest! {
        #[test]
        fn plain_agrees_with_debug(s in "\\PC{0,40}|[ -~]{0,40}|[\\x00-\\x7f]{0,40}") {
            // Printable non-ASCII is left as it is by `{:?}` too, but never called plain.
            let unescaped = format!("{s:?}") == format!("\"{s}\"");
            proptest::prop_assert!(!plain(&s) || unescaped);
            if s.is_ascii() {
                proptest::prop_assert_eq!(plain(&s), unescaped);
            }
        }
    }

    #[test]
    fn plain_strings_need_no_escape() {
        assert!(plain("always_allowed"));
        assert!(plain("/containers/x y"));
        assert!(!plain("a\"b"));
        assert!(!plain("a\\b"));
        assert!(!plain("a\nb"));
        assert!(!plain("\u{1b}[31m"));
        assert!(!plain("é"));
    }
}

/// A log writer that keeps what it is given, for tests that compare lines.
#[cfg(test)]
pub(crate) mod capture {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    pub(crate) struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Buf {
        pub(crate) fn text(&self) -> String {
            let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }
}

#[cfg(test)]
mod same_lines {
    use super::capture::Buf;

    fn events() {
        let (stack, method, target) = ("deer-flow-".to_owned(), http::Method::GET, "/_ping");
        tracing::info!(
            stack = %stack,
            peer_uid = Some(0u32),
            peer_pid = Some(-4307i32),
            method = %method,
            op = "system.ping",
            target = %target,
            decision = "allow",
            reason = "always_allowed",
            status = 200u16,
            duration_ms = 0.46454,
            "decision"
        );
        tracing::warn!(
            odd = "quote \" and \u{1b}[31m escape",
            none = None::<u32>,
            "message with {} args",
            2
        );
        tracing::info!(
            r#type = "raw",
            flag = true,
            big = u64::MAX,
            small = i64::MIN,
            "x"
        );
    }

    fn lines(ours: bool) -> String {
        let buf = Buf::default();
        let b = tracing_subscriber::fmt()
            .with_writer(buf.clone())
            .with_target(false)
            .with_ansi(false);
        if ours {
            let sub = b
                .fmt_fields(super::Fields)
                .with_timer(super::Timestamp)
                .finish();
            tracing::subscriber::with_default(sub, events);
        } else {
            tracing::subscriber::with_default(b.finish(), events);
        }
        buf.text()
    }

    #[test]
    fn lines_are_the_default_formatters_but_for_the_time() {
        let (ours, theirs) = (lines(true), lines(false));
        let strip = |s: &str| -> Vec<String> {
            s.lines()
                .map(|l| {
                    let (time, rest) = l.split_at(27);
                    assert!(
                        time.len() == 27 && time.ends_with('Z') && time.as_bytes()[19] == b'.',
                        "{l}"
                    );
                    rest.to_owned()
                })
                .collect()
        };
        assert_eq!(strip(&ours), strip(&theirs));
        assert_eq!(ours.lines().count(), 3);
        // Same second, or the next: the timestamps agree up to it.
        assert_eq!(ours[..16], theirs[..16]);
    }
}
