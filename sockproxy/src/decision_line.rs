//! The one log line per decision: its fields (`Decided`) and the one `tracing` event that
//! carries them, formatted and written like every other line by tracing-subscriber's `fmt`
//! layer (plain or JSON), one write to stderr (`main`). The field
//! names and their order are what operators and the tests in `tests/` read. A refusal's line
//! carries what the client was told (`refusal`, its message cut to `MAX_MESSAGE_BYTES`: the field, the
//! value and the flag that would allow it, as the refusal words them) and the rule it applied
//! (`rule`, the metric's label); a request naming its object in `?name=` (a create) carries it.

use http::StatusCode;

/// The fields of a decision's line besides the stack and the peer.
#[derive(Debug, Clone, Copy)]
pub struct Decided<'a> {
    pub method: &'a str,
    pub op: &'a str,
    pub target: &'a str,
    pub decision: &'static str,
    pub reason: &'static str,
    /// The rule applied, from a fixed set (`Refusal::rule`; an allow's reason).
    pub rule: &'static str,
    /// The object a create names (`?name=`), if any.
    pub name: Option<&'a str>,
    /// A refusal's message, as the client got it.
    pub message: Option<&'a str>,
    pub status: StatusCode,
    /// Whole microseconds, in milliseconds (`millis`).
    pub duration_ms: f64,
}

/// The most of a refusal's message the line carries; longer ones are cut at a character
/// boundary and end in `…`.
pub const MAX_MESSAGE_BYTES: usize = 512;

/// The most of a `?name=` the line carries (a valid name is at most 128 bytes).
pub const MAX_NAME_BYTES: usize = 160;

/// `s` cut to at most `max` bytes at a character boundary, `…` marking a cut.
pub fn cut(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end]).into()
}

/// `d` in milliseconds, to the microsecond: finer is noise in a log line.
pub fn millis(d: std::time::Duration) -> f64 {
    // Below 2^53 µs (285 years) the count is exact as an f64.
    d.as_micros() as f64 / 1000.0
}

/// Logs the line of one decision. The peer's uid and pid (`proxy::Peer`, taken apart so this
/// file does not import `proxy`, which imports it): a field that is `None` is left out.
pub fn log(stack: &str, peer_uid: Option<u32>, peer_pid: Option<i32>, d: &Decided<'_>) {
    tracing::info!(
        target: "sockproxy::proxy",
        stack = stack,
        peer_uid = peer_uid,
        peer_pid = peer_pid,
        method = d.method,
        op = d.op,
        target = d.target,
        decision = d.decision,
        reason = d.reason,
        rule = d.rule,
        name = d.name.map(|n| cut(n, MAX_NAME_BYTES)).as_deref(),
        refusal = d.message.map(|m| cut(m, MAX_MESSAGE_BYTES)).as_deref(),
        status = d.status.as_u16(),
        duration_ms = d.duration_ms,
        "decision"
    );
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What a subscriber writes, kept for the test to read.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

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

    fn line(json: bool, peer: (Option<u32>, Option<i32>)) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let b = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_target(false)
            .with_ansi(false);
        let d = Decided {
            method: "POST",
            op: "container.stop",
            target: "/containers/a \"b\"/stop",
            decision: "deny",
            reason: "not_owned",
            rule: "not_owned",
            name: None,
            message: Some(
                "sockproxy: container.stop: a \"b\" is not one of this stack's sandboxes",
            ),
            status: StatusCode::NOT_FOUND,
            duration_ms: millis(std::time::Duration::from_micros(1_250)),
        };
        if json {
            let sub = b.json().flatten_event(true).finish();
            tracing::subscriber::with_default(sub, || log("deer-flow-", peer.0, peer.1, &d));
        } else {
            let sub = b.finish();
            tracing::subscriber::with_default(sub, || log("deer-flow-", peer.0, peer.1, &d));
        }
        let bytes = buf.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The plain line as deployed (no target, no colours): the fields in their order, strings
    /// quoted, an absent peer field left out.
    #[test]
    fn the_plain_line_has_every_field_in_order() {
        let text = line(false, (Some(1000), None));
        let (time, rest) = text.split_at(27);
        assert!(time.ends_with('Z') && time.as_bytes()[19] == b'.', "{text}");
        assert_eq!(
            rest,
            concat!(
                "  INFO decision stack=\"deer-flow-\" peer_uid=1000 method=\"POST\"",
                " op=\"container.stop\" target=\"/containers/a \\\"b\\\"/stop\" decision=\"deny\"",
                " reason=\"not_owned\" rule=\"not_owned\"",
                " refusal=\"sockproxy: container.stop: a \\\"b\\\" is not one of this stack's sandboxes\"",
                " status=404 duration_ms=1.25\n"
            )
        );
    }

    /// The JSON line: one object with the same fields at its top level.
    #[test]
    fn the_json_line_has_the_same_fields() {
        let text = line(true, (Some(0), Some(4307)));
        let v: serde_json::Value = serde_json::from_str(text.trim_end()).expect("one JSON line");
        assert_eq!(v["message"], "decision");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["stack"], "deer-flow-");
        assert_eq!(v["peer_uid"], 0);
        assert_eq!(v["peer_pid"], 4307);
        assert_eq!(v["target"], "/containers/a \"b\"/stop");
        assert_eq!(v["status"], 404);
        assert_eq!(v["rule"], "not_owned");
        assert_eq!(v.get("name"), None, "an absent name is left out");
        assert_eq!(
            v["refusal"],
            "sockproxy: container.stop: a \"b\" is not one of this stack's sandboxes"
        );
        assert_eq!(v["duration_ms"], 1.25);
    }

    #[test]
    fn long_values_are_cut_at_a_character_boundary() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc…");
        // 'é' is two bytes: a cut inside it steps back.
        assert_eq!(cut("aéb", 2), "a…");
        let long = "x".repeat(10_000);
        assert_eq!(
            cut(&long, MAX_MESSAGE_BYTES).len(),
            MAX_MESSAGE_BYTES + "…".len()
        );
    }
}
