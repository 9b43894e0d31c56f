//! `GET /events`'s answer as a stream: the engine's body cut into lines, each passed on only
//! when `sockproxy_policy::events::keep` keeps it. A line longer than `MAX_LINE` is dropped
//! whole rather than held.

use std::collections::HashSet;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use sockproxy_policy::filters::keep_event as keep;
use sockproxy_policy::Scope;

/// Longest event line kept in memory; a longer one is dropped.
const MAX_LINE: usize = 1 << 20;

/// A body that passes on only the kept lines of `inner`.
#[derive(Debug)]
pub struct Filtered<B> {
    inner: B,
    scope: Scope,
    pending: BytesMut,
    skipping: bool,
    own: HashSet<String>,
}

impl<B> Filtered<B> {
    pub fn new(inner: B, scope: Scope) -> Self {
        Self {
            inner,
            scope,
            pending: BytesMut::new(),
            skipping: false,
            own: HashSet::new(),
        }
    }

    /// Complete lines out of `pending`, filtered; the partial tail stays.
    fn drain_lines(&mut self) -> Bytes {
        let mut out = BytesMut::new();
        while let Some(pos) = self.pending.iter().position(|b| *b == b'\n') {
            let line = self.pending.split_to(pos + 1);
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            if let Some(kept) = keep(&line[..pos], &self.scope, &mut self.own) {
                out.extend_from_slice(&kept);
                out.extend_from_slice(b"\n");
            }
        }
        if self.pending.len() > MAX_LINE {
            self.pending.clear();
            self.skipping = true;
        }
        out.freeze()
    }
}

impl<B> Body for Filtered<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        loop {
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    self.pending.extend_from_slice(&data);
                    let out = self.drain_lines();
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use sockproxy_policy::Prefix;

    fn scope() -> Scope {
        Scope::new(Prefix::parse("deer-flow-").expect("valid"), false)
    }

    fn ev(kind: &str, name: &str) -> String {
        format!("{{\"Type\":\"{kind}\",\"Action\":\"start\",\"Actor\":{{\"ID\":\"x\",\"Attributes\":{{\"name\":\"{name}\"}}}}}}\n")
    }

    #[tokio::test]
    async fn only_the_stacks_events_pass_even_when_split_across_chunks() {
        let all = [
            ev("container", "deer-flow-sandbox-1"),
            ev("container", "other"),
            ev("network", "deer-flow-net-1"),
            ev("image", "deer-flow-sandbox-1"),
            ev("network", "bridge"),
            "not json\n".to_owned(),
            ev("container", "x/deer-flow-y"),
        ]
        .concat();
        // Feed it in 7-byte pieces so lines straddle chunks.
        let pieces = all
            .as_bytes()
            .chunks(7)
            .map(Bytes::copy_from_slice)
            .collect();
        let out = Filtered::new(Chunks(pieces), scope())
            .collect()
            .await
            .expect("ok")
            .to_bytes();
        assert_eq!(
            String::from_utf8_lossy(&out),
            [
                ev("container", "deer-flow-sandbox-1"),
                ev("network", "deer-flow-net-1")
            ]
            .concat()
        );
    }

    /// A body that yields the given chunks, then ends.
    struct Chunks(std::collections::VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }
}
