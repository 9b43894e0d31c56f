//! `GET /events` through the proxy: the engine's newline-separated JSON events, streamed, each
//! kept only when its actor is one of the stack's containers or networks (by the actor's name).
//! A network event names the container that joined or left by ID; that attribute is kept only
//! for a container this stream has seen as the stack's own, so no other stack's ID leaks.
//! A line that cannot be read is dropped: fail closed. Under `--require-stack-label` a
//! container event passes only with the stack's label, and no network event passes.

use std::collections::HashSet;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};

use crate::scope::{Kind, Scope};

/// The line to pass on for one event (rewritten when a foreign container ID must go), or
/// `None` when it does not concern the stack. `own` collects the stack's container IDs seen.
pub fn keep(line: &[u8], scope: &Scope, own: &mut HashSet<String>) -> Option<Vec<u8>> {
    let mut v = serde_json::from_slice::<serde_json::Value>(line).ok()?;
    let kind = v["Type"].as_str().unwrap_or("");
    let name = v["Actor"]["Attributes"]["name"].as_str().unwrap_or("");
    if !matches!(kind, "container" | "network") || name.contains('/') || !scope.visible(name) {
        return None;
    }
    if kind == "container" {
        // A container event carries the container's labels among its attributes (set before
        // `name`, which a label cannot override). A network event carries none, so under
        // `--require-stack-label` no network event can be told the stack's: none passes.
        let label = v["Actor"]["Attributes"][crate::create_body::STACK_LABEL].as_str();
        if !scope.label_allows(Kind::Container, name, label) {
            return None;
        }
        if let Some(id) = v["Actor"]["ID"].as_str() {
            if own.len() < MAX_OWN {
                own.insert(id.to_owned());
            }
        }
        return Some(line.to_vec());
    }
    if scope.requires_label() {
        return None;
    }
    let attrs = v["Actor"]["Attributes"].as_object_mut()?;
    let foreign = attrs
        .get("container")
        .is_some_and(|c| !c.as_str().is_some_and(|c| own.contains(c)));
    if !foreign {
        return Some(line.to_vec());
    }
    attrs.remove("container");
    serde_json::to_vec(&v).ok()
}

/// Own container IDs remembered per stream (a long stream must not grow without bound).
const MAX_OWN: usize = 65_536;

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
    use crate::scope::Prefix;
    use http_body_util::BodyExt;

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

    #[test]
    fn network_events_name_only_the_stacks_containers() {
        let s = Scope::new(Prefix::parse("deer-flow-").expect("valid"), true);
        let mut own = HashSet::new();
        let started = br#"{"Type":"container","Action":"start","Actor":{"ID":"aaa","Attributes":{"name":"deer-flow-sandbox-1"}}}"#;
        assert!(keep(started, &s, &mut own).is_some());
        let ours = br#"{"Type":"network","Action":"connect","Actor":{"ID":"n","Attributes":{"container":"aaa","name":"deer-flow-net-1"}}}"#;
        assert_eq!(keep(ours, &s, &mut own).as_deref(), Some(&ours[..]));
        let theirs = br#"{"Type":"network","Action":"connect","Actor":{"ID":"n","Attributes":{"container":"bbb","name":"deer-flow-net-1"}}}"#;
        let out = keep(theirs, &s, &mut own).expect("kept without the ID");
        assert!(!String::from_utf8_lossy(&out).contains("bbb"));
    }

    /// Under `--require-stack-label`: a container event passes only with the stack's label
    /// among its attributes, and no network event passes (they carry no labels).
    #[test]
    fn under_the_label_rule_only_labelled_container_events_pass() {
        let s = scope().with_required_label(Some("atlas"));
        let mut own = HashSet::new();
        let container = |label: &str| {
            format!(
                r#"{{"Type":"container","Action":"start","Actor":{{"ID":"aaa","Attributes":{{{label}"name":"deer-flow-sandbox-1"}}}}}}"#
            )
        };
        let ours = container(r#""sockproxy.stack":"atlas","#);
        assert!(keep(ours.as_bytes(), &s, &mut own).is_some());
        for other in [
            r#""sockproxy.stack":"bravo","#,
            r#""sockproxy.stack":7,"#,
            "",
        ] {
            let line = container(other);
            assert_eq!(keep(line.as_bytes(), &s, &mut own), None, "{line}");
        }
        let net = br#"{"Type":"network","Action":"create","Actor":{"ID":"n","Attributes":{"name":"deer-flow-net-1","type":"bridge"}}}"#;
        assert_eq!(keep(net, &s, &mut own), None);
        assert!(keep(net, &scope(), &mut own).is_some(), "without the flag");
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
