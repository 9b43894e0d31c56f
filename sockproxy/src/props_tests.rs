use http::Method;

use super::{engine_answer, read_answer, ANSWER_CAP};

fn read(raw: &str, method: Method) -> Result<usize, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(read_answer(raw.as_bytes(), method))
}

#[test]
fn the_upstream_path_reads_what_the_engine_frames() {
    let ping = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK";
    assert_eq!(read(ping, Method::GET), Ok(2));
    assert_eq!(read(ping, Method::HEAD), Ok(0), "a HEAD answer has no body");
    let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n[{}, \r\n3;x=y\r\n{}]\r\n0\r\n\r\n";
    assert_eq!(read(chunked, Method::GET), Ok(8));
    let to_the_end = "HTTP/1.1 200 OK\r\n\r\nraw";
    assert_eq!(read(to_the_end, Method::GET), Ok(3));
    let after_continue = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
    assert_eq!(read(after_continue, Method::GET), Ok(0));
}

#[test]
fn over_the_cap_or_cut_short_is_an_error_not_a_longer_answer() {
    let big = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n{}",
        "x".repeat(ANSWER_CAP + 1),
        n = ANSWER_CAP + 1
    );
    let e = read(&big, Method::GET).expect_err("announced over the cap");
    assert!(e.contains("larger than"), "{e}");
    let unannounced = format!(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
        ANSWER_CAP + 1,
        "x".repeat(ANSWER_CAP + 1)
    );
    let e = read(&unannounced, Method::GET).expect_err("read over the cap");
    assert!(e.contains("larger than"), "{e}");
    let cut = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nOK";
    assert!(
        read(cut, Method::GET).is_err(),
        "the engine hung up mid-body"
    );
    assert!(read("garbage\r\n\r\n", Method::GET).is_err());
    assert!(read("", Method::GET).is_err(), "no answer at all");
}

#[test]
fn the_property_holds_on_answers_larger_than_the_connection_buffer() {
    let mut data = b"GHTTP/1.1 200 OK\r\n\r\n".to_vec();
    data.extend(std::iter::repeat_n(b'x', 100 * 1024));
    assert_eq!(engine_answer(&data), Ok(()));
}
