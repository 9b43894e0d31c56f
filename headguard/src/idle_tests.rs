//! The idle limit on the paused clock: when a kept-alive connection ends for hyper, and when
//! it must not.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::time::{timeout, Instant};

use crate::{Answered, HeadLimits, Scanner, Verdicts};

const LIMIT: Duration = Duration::from_secs(10);
const HEAD: &[u8] = b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n";

fn scanner() -> (Scanner<DuplexStream>, DuplexStream, Answered) {
    let (client, server) = tokio::io::duplex(4096);
    let limits = HeadLimits {
        max_bytes: 16384,
        max_headers: 100,
        // Longer than the idle limit: only the idle limit may end these connections.
        timeout: Duration::from_secs(60),
        upgrades: false,
    };
    let answered = Answered::default();
    let s =
        Scanner::new(server, Verdicts::default(), limits).close_when_idle(LIMIT, answered.clone());
    (s, client, answered)
}

/// One request through: the client sends its head and hyper reads it whole.
async fn request(s: &mut Scanner<DuplexStream>, client: &mut DuplexStream) {
    client.write_all(HEAD).await.expect("send");
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).await.expect("read");
    assert_eq!(&buf[..n], HEAD);
}

/// Whether the stream ends for hyper within `d`.
async fn ends_within(s: &mut Scanner<DuplexStream>, d: Duration) -> bool {
    let mut buf = [0u8; 256];
    match timeout(d, s.read(&mut buf)).await {
        Ok(read) => {
            assert_eq!(read.expect("read"), 0, "only an end of input is expected");
            true
        }
        Err(_) => false,
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_ends_at_the_limit_after_its_last_answer() {
    let (mut s, mut client, answered) = scanner();
    request(&mut s, &mut client).await;
    // Answer still being sent (a long stream): never idle, however long.
    assert!(!ends_within(&mut s, LIMIT * 3).await);
    answered.one();
    let from = Instant::now();
    assert!(!ends_within(&mut s, LIMIT - Duration::from_millis(100)).await);
    assert!(ends_within(&mut s, LIMIT).await);
    assert_eq!(from.elapsed(), LIMIT);
    // Ended for good: hyper reads the end of input again.
    assert!(ends_within(&mut s, Duration::from_millis(1)).await);
}

#[tokio::test(start_paused = true)]
async fn a_connection_in_use_is_timed_from_its_latest_idle_start() {
    let (mut s, mut client, answered) = scanner();
    request(&mut s, &mut client).await;
    answered.one();
    // Idle for most of the limit, then a second request: the sleep set for the first idle
    // period fires 4 s into the second one and must not end it.
    assert!(!ends_within(&mut s, Duration::from_secs(6)).await);
    request(&mut s, &mut client).await;
    answered.one();
    let from = Instant::now();
    assert!(!ends_within(&mut s, LIMIT - Duration::from_millis(100)).await);
    assert!(ends_within(&mut s, LIMIT).await);
    assert_eq!(from.elapsed(), LIMIT);
}

#[tokio::test(start_paused = true)]
async fn a_begun_head_is_the_head_limits_not_the_idle_ones() {
    let (mut s, mut client, answered) = scanner();
    request(&mut s, &mut client).await;
    answered.one();
    client.write_all(b"GET /_ping HT").await.expect("send");
    // Half a head: the idle limit passes without an end; the head limit (60 s) answers it.
    assert!(!ends_within(&mut s, LIMIT * 2).await);
}
