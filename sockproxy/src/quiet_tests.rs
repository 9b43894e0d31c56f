use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn pair() -> (QuietStream, UnixStream) {
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    ours.set_nonblocking(true).expect("non-blocking");
    (QuietStream::new(ours).expect("watch"), theirs)
}

#[tokio::test]
async fn small_writes_never_watch_for_room_and_read_back_whole() {
    let (mut ours, mut theirs) = pair();
    for _ in 0..100 {
        ours.write_all(b"HEAD /_ping HTTP/1.1\r\n\r\n")
            .await
            .expect("write");
        let mut got = [0u8; 24];
        theirs.read_exact(&mut got).expect("peer read");
        assert_eq!(&got, b"HEAD /_ping HTTP/1.1\r\n\r\n");
    }
    assert!(
        ours.room.0.is_none(),
        "no write blocked, so nothing watched"
    );
    theirs
        .write_all(b"HTTP/1.1 200 OK\r\n\r\n")
        .expect("peer write");
    let mut got = BytesMut::new();
    let n = std::future::poll_fn(|cx| ours.poll_fill(cx, &mut got))
        .await
        .expect("fill");
    assert_eq!((n, &got[..]), (19, &b"HTTP/1.1 200 OK\r\n\r\n"[..]));
}

#[tokio::test]
async fn a_write_larger_than_the_socket_buffer_waits_for_room_and_loses_nothing() {
    let (mut ours, theirs) = pair();
    let sent: Vec<u8> = (0..8 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    let reader = std::thread::spawn(move || {
        let mut theirs = theirs;
        let mut got = Vec::new();
        // Slowly at first, so the writer's buffer fills and it has to wait.
        std::thread::sleep(Duration::from_millis(100));
        theirs.read_to_end(&mut got).expect("peer read");
        got
    });
    ours.write_all(&sent).await.expect("write");
    assert!(
        ours.room.0.is_some(),
        "the write blocked, so room is watched"
    );
    ours.shutdown().await.expect("shutdown");
    let got = reader.join().expect("reader");
    assert!(got == sent, "{} bytes read of {}", got.len(), sent.len());
}

#[tokio::test]
async fn a_read_waits_for_data_then_sees_the_end() {
    let (ours, theirs) = pair();
    let (mut rd, _wr) = ours.into_split();
    let read = tokio::spawn(async move {
        let mut all = Vec::new();
        rd.read_to_end(&mut all).await.map(|_| all)
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut theirs = theirs;
    theirs.write_all(b"late").expect("peer write");
    drop(theirs);
    let got = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .expect("the read ends")
        .expect("task")
        .expect("read");
    assert_eq!(got, b"late");
}

#[tokio::test]
async fn dropping_the_writing_half_ends_the_stream_for_the_other_end() {
    let (ours, mut theirs) = pair();
    let (rd, mut wr) = ours.into_split();
    wr.write_all(b"bye").await.expect("write");
    drop(wr);
    let mut got = Vec::new();
    theirs.read_to_end(&mut got).expect("peer read to its end");
    assert_eq!(got, b"bye");
    // The reading half still reads.
    theirs.write_all(b"still").expect("peer write");
    drop(theirs);
    let mut rd = rd;
    let mut back = Vec::new();
    rd.read_to_end(&mut back).await.expect("read");
    assert_eq!(back, b"still");
}

#[tokio::test]
async fn a_read_takes_no_more_than_the_buffer_has_room_for() {
    let (ours, mut theirs) = pair();
    let (mut rd, _wr) = ours.into_split();
    theirs.write_all(b"0123456789").expect("peer write");
    let mut small = [0u8; 4];
    rd.read_exact(&mut small).await.expect("read");
    assert_eq!(&small, b"0123");
    let mut rest = [0u8; 6];
    rd.read_exact(&mut rest).await.expect("read the rest");
    assert_eq!(&rest, b"456789");
}
