//! The API socket's limits on its clients, so that a local process able to connect cannot starve
//! the gateway of it: a header timeout (a request head must arrive within it, then its body, and
//! a kept-alive connection idle that long is closed), a write timeout (an answer the client
//! takes no bytes of for that long closes the connection; `write_timeout` enforces it) and a cap
//! on the connections served at once (over it a client is answered 503 and closed).
//! `Limits::new` checks the flags once, at start-up.

use std::time::Duration;

/// `--header-timeout`'s default, in seconds: a gateway on the same host sends a head in far less.
pub const DEFAULT_HEADER_TIMEOUT_SECS: f64 = 10.0;
/// `--write-timeout`'s default, in seconds: a gateway reading its answers empties the socket's
/// buffer in far less.
pub const DEFAULT_WRITE_TIMEOUT_SECS: f64 = 10.0;
/// `--max-connections`'s default, as sockproxy's.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// Below this a timeout would close connections before a loaded host lets the client write
/// (or read).
const MIN_TIMEOUT_SECS: f64 = 0.1;
/// Above this a timeout no longer protects anything; it also keeps the deadlines (now +
/// timeout, hyper's and the write timeout's) far from an `Instant` overflow, which would panic.
const MAX_TIMEOUT_SECS: f64 = 3600.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a request head may take to arrive, counted from the accept or from the previous
    /// answer on a kept-alive connection, and then its body; never applied while a request is
    /// being served.
    pub header_timeout: Duration,
    /// How long an answer's write may wait without the client taking any of it; the clock runs
    /// only while a write is pending, so neither reading nor serving a request is timed by it.
    pub write_timeout: Duration,
    /// Client connections served at once.
    pub max_connections: usize,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitError {
    #[error(
        "--header-timeout: {0}: expected seconds from {MIN_TIMEOUT_SECS} to {MAX_TIMEOUT_SECS}"
    )]
    HeaderTimeout(f64),
    #[error(
        "--write-timeout: {0}: expected seconds from {MIN_TIMEOUT_SECS} to {MAX_TIMEOUT_SECS}"
    )]
    WriteTimeout(f64),
    #[error("--max-connections: {0}: expected at least 1 and at most {max}", max = tokio::sync::Semaphore::MAX_PERMITS)]
    MaxConnections(usize),
}

impl Limits {
    pub fn new(
        header_timeout_secs: f64,
        write_timeout_secs: f64,
        max_connections: usize,
    ) -> Result<Self, LimitError> {
        // NaN fails every comparison, so it is out of range too.
        if !(MIN_TIMEOUT_SECS..=MAX_TIMEOUT_SECS).contains(&header_timeout_secs) {
            return Err(LimitError::HeaderTimeout(header_timeout_secs));
        }
        if !(MIN_TIMEOUT_SECS..=MAX_TIMEOUT_SECS).contains(&write_timeout_secs) {
            return Err(LimitError::WriteTimeout(write_timeout_secs));
        }
        // 0 would refuse every client; above MAX_PERMITS the semaphore would panic.
        if max_connections == 0 || max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(LimitError::MaxConnections(max_connections));
        }
        Ok(Self {
            header_timeout: Duration::from_secs_f64(header_timeout_secs),
            write_timeout: Duration::from_secs_f64(write_timeout_secs),
            max_connections,
        })
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs_f64(DEFAULT_HEADER_TIMEOUT_SECS),
            write_timeout: Duration::from_secs_f64(DEFAULT_WRITE_TIMEOUT_SECS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_accepted_and_are_the_default() {
        assert_eq!(
            Limits::new(
                DEFAULT_HEADER_TIMEOUT_SECS,
                DEFAULT_WRITE_TIMEOUT_SECS,
                DEFAULT_MAX_CONNECTIONS
            ),
            Ok(Limits::default())
        );
    }

    #[test]
    fn sane_values_are_kept_as_given() {
        let cases = [
            (0.1, 1, Duration::from_millis(100)),
            (1.0, 2, Duration::from_secs(1)),
            (2.5, 256, Duration::from_millis(2500)),
            (3600.0, 100_000, Duration::from_secs(3600)),
        ];
        for (secs, max, want) in cases {
            let l = Limits::new(secs, 1.0, max).expect("accepted");
            assert_eq!(l.header_timeout, want, "{secs}");
            assert_eq!(l.max_connections, max);
            let l = Limits::new(1.0, secs, max).expect("accepted");
            assert_eq!(l.write_timeout, want, "{secs}");
        }
    }

    const NONSENSE_SECS: [f64; 10] = [
        0.0,
        -0.0,
        -1.0,
        0.05,
        1e-300,
        3600.5,
        1e300,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];

    #[test]
    fn nonsense_header_timeouts_are_refused_by_name() {
        for secs in NONSENSE_SECS {
            let e = Limits::new(secs, 1.0, 1).expect_err("refused");
            assert!(matches!(e, LimitError::HeaderTimeout(_)), "{secs}: {e}");
            assert!(e.to_string().starts_with("--header-timeout: "), "{e}");
        }
    }

    #[test]
    fn nonsense_write_timeouts_are_refused_by_name() {
        for secs in NONSENSE_SECS {
            let e = Limits::new(1.0, secs, 1).expect_err("refused");
            assert!(matches!(e, LimitError::WriteTimeout(_)), "{secs}: {e}");
            assert!(e.to_string().starts_with("--write-timeout: "), "{e}");
        }
    }

    #[test]
    fn a_cap_of_zero_or_beyond_a_semaphore_is_refused_by_name() {
        for max in [0, tokio::sync::Semaphore::MAX_PERMITS + 1, usize::MAX] {
            let e = Limits::new(1.0, 1.0, max).expect_err("refused");
            assert_eq!(e, LimitError::MaxConnections(max));
            assert!(
                e.to_string()
                    .starts_with(&format!("--max-connections: {max}: expected at least 1")),
                "{e}"
            );
        }
    }
}
