use super::*;
use crate::logfmt::capture::Buf;

/// What tracing-subscriber's default plain format writes for the decision event, as deployed
/// (no target, no colours), without its time.
fn theirs(stack: &str, peer: Peer, d: &Decided<'_>) -> String {
    let buf = Buf::default();
    let sub = tracing_subscriber::fmt()
        .with_writer(buf.clone())
        .with_target(false)
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(sub, || log(stack, peer, d));
    buf.text().split_at(27).1.to_owned()
}

fn ours(stack: &str, peer: Peer, d: &Decided<'_>) -> String {
    let mut line = String::new();
    format(&mut line, stack, peer, d).expect("formats");
    let (time, rest) = line.split_at(27);
    assert!(time.ends_with('Z') && time.as_bytes()[19] == b'.', "{line}");
    rest.to_owned()
}

#[test]
fn the_direct_line_is_the_default_formatters() {
    let d = Decided {
        method: "GET",
        op: "system.ping",
        target: "/_ping",
        decision: "allow",
        reason: "always_allowed",
        status: StatusCode::OK,
        duration_ms: 0.46454,
    };
    let peers = [
        Peer {
            uid: Some(0),
            pid: Some(4307),
        },
        Peer {
            uid: Some(1000),
            pid: None,
        },
        Peer::default(),
    ];
    let odd = Decided {
        method: "POST",
        target: "/containers/a \"b\"\\c\u{1b}[31m é\u{7f}\n/stop",
        op: "",
        decision: "deny",
        reason: "bad_request",
        status: StatusCode::FORBIDDEN,
        duration_ms: 1.0,
    };
    for (stack, d) in [("deer-flow-", d), ("deer \"flow\"", odd)] {
        for peer in peers {
            for ms in [
                d.duration_ms,
                0.0,
                12_345.678,
                1e-7,
                0.001,
                0.087,
                1.5,
                -0.0,
                f64::NAN,
            ] {
                let d = Decided {
                    duration_ms: ms,
                    ..d
                };
                assert_eq!(ours(stack, peer, &d), theirs(stack, peer, &d));
            }
        }
    }
}

proptest::proptest! {
    /// The copy without formatting agrees with `{:?}` on any text, and so does the number with
    /// `{}`.
    #[test]
    fn quoted_text_and_numbers_are_debug_and_display(v in ".*", bytes in "[ -~]{0,40}", n in proptest::num::i64::ANY) {
        for v in [v.as_str(), bytes.as_str()] {
            let mut out = String::new();
            quoted(&mut out, v).expect("formats");
            proptest::prop_assert_eq!(out, format!("{v:?}"));
        }
        let mut out = String::new();
        decimal(&mut out, n);
        proptest::prop_assert_eq!(out, n.to_string());
    }

    /// A duration to the microsecond, and any other number, is written as `{:?}` writes it.
    #[test]
    fn milliseconds_are_debug(micros in 0u64..1_000_000_000_000_000, small in 0u64..100_000_000, any in proptest::num::f64::ANY) {
        for ms in [
            millis(std::time::Duration::from_micros(micros)),
            millis(std::time::Duration::from_micros(small)),
            millis(std::time::Duration::from_nanos(small)),
            any,
        ] {
            let mut out = String::new();
            milliseconds(&mut out, ms).expect("formats");
            proptest::prop_assert_eq!(out, format!("{ms:?}"));
        }
    }
}
