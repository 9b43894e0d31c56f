//! The body hyper is given for every answer: the proxy's own body, which counts its request as
//! answered on the connection when it is dropped (sent whole, or given up). `headguard` closes a
//! kept-alive connection only after every request on it has been answered and no head has
//! begun for the idle limit, so a long stream (`logs -f`, `wait`, `events`) is never cut.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::upstream::{Body, BoxError};

#[derive(Debug)]
pub struct ClientBody {
    body: Body,
    answered: headguard::Answered,
}

impl ClientBody {
    pub fn new(body: Body, answered: headguard::Answered) -> Self {
        Self { body, answered }
    }
}

impl http_body::Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for ClientBody {
    fn drop(&mut self) {
        self.answered.one();
    }
}
