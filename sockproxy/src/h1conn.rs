//! The engine connections `h1` frames requests and answers on (the I/O half): one Unix stream
//! and what has been read from it but not yet used. A request is written whole and its answer's
//! head read inline, by the task that sent it, with no task or channel of its own; the answer's
//! body (`OwnBody`) reads the rest as it is polled and hands the connection back to its pool
//! when the answer has ended cleanly. Dropped earlier, or after anything that does not frame,
//! the connection is closed with it.

use std::pin::Pin;
use std::sync::Weak;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http::Method;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::io::AsyncWriteExt;

use crate::h1::{self, Chunked, Framing, H1Error, Head};
use crate::heads::LastHead;
use crate::pool::Pool;
use crate::quiet::QuietStream;
use crate::upstream::BoxError;

/// A concrete error as a body error; a plain function, so the futures that call it stay `Send`.
fn boxed<E: std::error::Error + Send + Sync + 'static>(e: E) -> BoxError {
    BoxError::new(e)
}

pub(crate) struct Conn {
    io: QuietStream,
    /// Read and not yet used: the rest of a head, or body bytes that came with it.
    buf: BytesMut,
    /// The last bodiless answer head, to read the next one like it without a parse.
    last: LastHead,
}

/// Why a request could not be sent; `unsent` when no byte of it reached the engine, so it may
/// be sent again on another connection.
pub(crate) struct SendError {
    pub unsent: bool,
    pub error: BoxError,
}

impl Conn {
    pub(crate) fn new(io: QuietStream) -> Self {
        Self {
            io,
            buf: BytesMut::new(),
            last: LastHead::default(),
        }
    }

    /// Writes `request` and reads its answer's head.
    pub(crate) async fn exchange(
        &mut self,
        request: &[u8],
        method: &Method,
    ) -> Result<Head, SendError> {
        let mut written = 0;
        while written < request.len() {
            match self.io.write(&request[written..]).await {
                Ok(0) => {
                    return Err(SendError {
                        unsent: written == 0,
                        error: boxed(H1Error::Closed),
                    })
                }
                Ok(n) => written += n,
                // A Unix socket whose other end has closed refuses the first write whole
                // (EPIPE), so nothing was delivered.
                Err(e) => {
                    return Err(SendError {
                        unsent: written == 0,
                        error: boxed(e),
                    })
                }
            }
        }
        let sent = |e: BoxError| SendError {
            unsent: false,
            error: e,
        };
        loop {
            let parsed = match self.buf.is_empty() {
                true => None,
                false => self
                    .last
                    .parse(&mut self.buf, method)
                    .map_err(|e| sent(boxed(e)))?,
            };
            if let Some(head) = parsed {
                if head.status.is_informational() {
                    continue;
                }
                return Ok(head);
            }
            match std::future::poll_fn(|cx| self.poll_fill(cx)).await {
                Ok(0) => return Err(sent(boxed(H1Error::Closed))),
                Ok(_) => {}
                Err(e) => return Err(sent(e)),
            }
        }
    }

    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<Result<usize, BoxError>> {
        self.io.poll_fill(cx, &mut self.buf).map_err(boxed)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Length(u64),
    Chunked(Chunked),
    Close,
    Done,
}

/// An answer's body on an own connection.
pub struct OwnBody {
    conn: Option<Conn>,
    state: State,
    reusable: bool,
    pool: Weak<Pool>,
}

impl std::fmt::Debug for OwnBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnBody")
            .field("state", &self.state)
            .finish()
    }
}

impl OwnBody {
    pub(crate) fn new(conn: Conn, head: &Head, pool: Weak<Pool>) -> Self {
        let state = match head.framing {
            Framing::Empty => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Chunked(Chunked::Size),
            Framing::Close => State::Close,
        };
        let mut body = Self {
            conn: Some(conn),
            state,
            reusable: head.reusable,
            pool,
        };
        if body.state == State::Done {
            body.give_back();
        }
        body
    }

    /// The answer has ended: its connection goes back if nothing is left over on it.
    fn give_back(&mut self) {
        self.state = State::Done;
        let Some(conn) = self.conn.take() else { return };
        if self.reusable && conn.buf.is_empty() {
            if let Some(pool) = self.pool.upgrade() {
                pool.put_own(conn);
            }
        }
    }

    fn fail(&mut self, e: BoxError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.state = State::Done;
        self.conn = None;
        Poll::Ready(Some(Err(e)))
    }
}

impl HttpBody for OwnBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.state {
                State::Done => {
                    this.give_back();
                    return Poll::Ready(None);
                }
                State::Length(left) if !conn.buf.is_empty() => {
                    let n = usize::try_from(left).map_or(conn.buf.len(), |l| l.min(conn.buf.len()));
                    let data = conn.buf.split_to(n).freeze();
                    this.state = State::Length(left - n as u64);
                    if left == n as u64 {
                        this.give_back();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                State::Chunked(mut c) => match h1::decode_chunked(&mut c, &mut conn.buf) {
                    Err(e) => return this.fail(boxed(e)),
                    Ok(Some(data)) => {
                        this.state = State::Chunked(c);
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Ok(None) if c == Chunked::Done => {
                        this.give_back();
                        return Poll::Ready(None);
                    }
                    Ok(None) => this.state = State::Chunked(c),
                },
                State::Close if !conn.buf.is_empty() => {
                    let data = conn.buf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                State::Length(_) | State::Close => {}
            }
            // Nothing usable buffered: read more.
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match ready!(conn.poll_fill(cx)) {
                Err(e) => return this.fail(e),
                Ok(0) if this.state == State::Close => {
                    this.state = State::Done;
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(boxed(H1Error::Closed)),
                Ok(_) => {}
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == State::Done
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Length(n) => SizeHint::with_exact(n),
            State::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
