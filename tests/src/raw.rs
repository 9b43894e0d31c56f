//! A blocking HTTP/1.1 client over a Unix socket that sends bytes exactly as given, for
//! malformed requests and for byte-exact checks of answers.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The `message` of a dockerd-shaped error body.
    pub fn message(&self) -> String {
        self.json()
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or("")
            .to_owned()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `request` as is (it should say `Connection: close`) and reads the answer to EOF.
pub fn send(sock: &Path, request: &[u8]) -> io::Result<RawResponse> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.write_all(request)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    parse(&out)
}

/// A well-formed request with `Connection: close`.
pub fn request(
    sock: &Path,
    method: &str,
    target: &str,
    body: Option<&[u8]>,
) -> io::Result<RawResponse> {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n");
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    if let Some(b) = body {
        bytes.extend_from_slice(b);
    }
    send(sock, &bytes)
}

pub fn get(sock: &Path, target: &str) -> io::Result<RawResponse> {
    request(sock, "GET", target, None)
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

/// Writes `stream` (several requests, kept alive) on one connection, reads to EOF and parses
/// every answer in it, in order.
pub fn exchange(sock: &Path, stream: &[u8]) -> io::Result<Vec<RawResponse>> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.write_all(stream)?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)?;
    let mut rest = &out[..];
    let mut answers = Vec::new();
    while !rest.is_empty() {
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| bad("no end of headers"))?;
        let (status, headers) = parse_head(&rest[..end])?;
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .ok_or_else(|| bad("an answer without Content-Length on a kept-alive connection"))?;
        let body = rest
            .get(end + 4..end + 4 + len)
            .ok_or_else(|| bad("truncated body"))?;
        answers.push(RawResponse {
            status,
            headers,
            body: body.to_vec(),
        });
        rest = &rest[end + 4 + len..];
    }
    Ok(answers)
}

pub fn parse(raw: &[u8]) -> io::Result<RawResponse> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let (status, headers) = parse_head(&raw[..end])?;
    let rest = &raw[end + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(RawResponse {
        status,
        headers,
        body,
    })
}

/// Status code and headers of a response head (without the final blank line).
fn parse_head(raw: &[u8]) -> io::Result<(u16, Vec<(String, String)>)> {
    let head = std::str::from_utf8(raw).map_err(|_| bad("head not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Ok((status, headers))
}

fn dechunk(mut data: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("truncated chunk size"))?;
        let size_str = std::str::from_utf8(&data[..line_end]).map_err(|_| bad("chunk size"))?;
        let size = usize::from_str_radix(size_str.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad("chunk size"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err(bad("truncated chunk"));
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// `POST /exec/{id}/start` attached (not detached, no TTY), asking to upgrade the connection to
/// the exec's raw stream, as the docker CLI's `exec` sends it.
pub fn exec_start_request(id: &str) -> Vec<u8> {
    let body = br#"{"Detach":false,"Tty":false}"#;
    let mut req = format!(
        "POST /exec/{id}/start HTTP/1.1\r\nHost: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// A request whose answer is read incrementally: the head first, then the body or the upgraded
/// stream as it arrives; writes and half-close for upgraded connections.
#[derive(Debug)]
pub struct Conn {
    stream: UnixStream,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    buffered: Vec<u8>,
}

impl Conn {
    /// Sends `request` and reads up to the end of the answer's head (deadline: 60 s).
    pub fn open(sock: &Path, request: &[u8]) -> io::Result<Self> {
        let mut stream = UnixStream::connect(sock)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        stream.write_all(request)?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            let n = stream.read(&mut chunk)?;
            if n == 0 {
                return Err(bad("closed before the end of the head"));
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let (status, headers) = parse_head(&buf[..end])?;
        Ok(Self {
            stream,
            status,
            headers,
            buffered: buf[end + 4..].to_vec(),
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Reads until `done(bytes so far)` holds, EOF, or `deadline`; returns what was read.
    pub fn read_until(&mut self, deadline: Duration, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        let start = std::time::Instant::now();
        let mut out = std::mem::take(&mut self.buffered);
        let mut chunk = [0u8; 65536];
        let _ = self
            .stream
            .set_read_timeout(Some(Duration::from_millis(200)));
        while !done(&out) && start.elapsed() < deadline {
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        out
    }

    /// Reads to EOF (bounded by `deadline`).
    pub fn read_to_end(&mut self, deadline: Duration) -> Vec<u8> {
        self.read_until(deadline, |_| false)
    }

    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.stream.write_all(data)
    }

    /// A second handle on the stream, to write from another thread while this one reads.
    pub fn writer(&self) -> io::Result<UnixStream> {
        self.stream.try_clone()
    }

    /// Half-close: the peer sees EOF on its read side; we can still read.
    pub fn close_write(&mut self) -> io::Result<()> {
        self.stream.shutdown(std::net::Shutdown::Write)
    }
}

/// Splits a non-TTY attach/exec/logs stream (8-byte stdcopy headers) into stdout and stderr;
/// a trailing partial frame is left out.
pub fn demux(mut data: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while data.len() >= 8 {
        let len = u32::from_be_bytes([data[4], data[5], data[6], data[7]]) as usize;
        if data.len() < 8 + len {
            break;
        }
        let payload = &data[8..8 + len];
        match data[0] {
            2 => err.extend_from_slice(payload),
            _ => out.extend_from_slice(payload),
        }
        data = &data[8 + len..];
    }
    (out, err)
}

/// Removes HTTP/1.1 chunked framing from a complete or partial body (what has arrived so far).
pub fn dechunk_partial(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let Ok(size_str) = std::str::from_utf8(&rest[..line_end]) else {
            break;
        };
        let Ok(size) = usize::from_str_radix(size_str.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < line_end + 2 + size {
            break;
        }
        out.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
        rest = &rest[(line_end + 4 + size).min(rest.len())..];
    }
    out
}
