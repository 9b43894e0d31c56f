//! The shared ownership store on Redis (`--ownership redis://…` or `unix:///…/redis.sock`).
//! Every change is one Lua script implementing `claims::decide`, so a read and the write that
//! depends on it are atomic on the server; every call is bounded by a timeout, and any failure
//! is returned as `Unavailable` so the caller fails closed (no adopt, no destroy of another's).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::Mutex;

use super::claims::{Op, StoreError};

/// `claims::decide` in Lua. KEYS[1] the sandbox key; ARGV: op, owner, ttl in ms.
/// Returns {answer, value before the change or ""}.
const SCRIPT: &str = r#"
local cur = redis.call('GET', KEYS[1])
local op, me, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local own, del = 'own:' .. me, 'del:' .. me
local ours = (cur == own) or (cur == del)
local before = cur or ''
if op == 'claim' then
  if not cur or cur == own then redis.call('SET', KEYS[1], own, 'PX', ttl) return {'ours', before} end
  if string.sub(cur, 1, 4) == 'del:' then return {'deleting', before} end
  return {'owned', before}
elseif op == 'begin_delete' then
  if not cur or ours then redis.call('SET', KEYS[1], del, 'PX', ttl) return {'ours', before} end
  if string.sub(cur, 1, 4) == 'del:' then return {'deleting', before} end
  return {'owned', before}
elseif op == 'end_delete' then
  if not cur or ours then redis.call('SET', KEYS[1], own, 'PX', ttl) return {'ours', before} end
  if string.sub(cur, 1, 4) == 'del:' then return {'deleting', before} end
  return {'owned', before}
elseif op == 'renew' then
  if not cur then redis.call('SET', KEYS[1], own, 'PX', ttl) return {'lapsed', before} end
  if ours then redis.call('PEXPIRE', KEYS[1], ttl) return {'renewed', before} end
  return {'lost', before}
elseif op == 'renew_fenced' then
  if not cur then redis.call('SET', KEYS[1], del, 'PX', ttl) return {'lapsed', before} end
  if ours then redis.call('SET', KEYS[1], del, 'PX', ttl) return {'renewed', before} end
  return {'lost', before}
elseif op == 'release' then
  if ours then redis.call('DEL', KEYS[1]) return {'released', before} end
  return {'not-ours', before}
end
return {'unknown-op', before}
"#;

#[derive(Debug)]
pub struct RedisStore {
    client: redis::Client,
    /// Prepended to every sandbox ID to make its key (`key_prefix`).
    namespace: String,
    timeout: Duration,
    conn: Mutex<Option<MultiplexedConnection>>,
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Claim => "claim",
        Op::BeginDelete => "begin_delete",
        Op::EndDelete => "end_delete",
        Op::Renew => "renew",
        Op::RenewFenced => "renew_fenced",
        Op::Release => "release",
    }
}

/// The static answers `claims::decide` gives, so the script's words map back to `&'static str`.
fn intern(answer: &str) -> Option<&'static str> {
    [
        "ours", "owned", "deleting", "renewed", "lapsed", "lost", "released", "not-ours",
    ]
    .into_iter()
    .find(|a| *a == answer)
}

/// Why a `--ownership-key-prefix` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyPrefixError {
    #[error("{0:?} is empty once its trailing ':' are dropped")]
    Empty(String),
    #[error("{0:?} holds whitespace or a control character")]
    Unprintable(String),
    #[error("{0:?} is longer than {MAX_KEY_PREFIX} bytes")]
    TooLong(String),
}

const MAX_KEY_PREFIX: usize = 200;

/// The key prefix a stack gets when none is given: stacks sharing a Redis never meet.
pub fn default_key_prefix(stack_prefix: &str) -> String {
    format!("lifecycle:{stack_prefix}:sandbox")
}

/// The string every sandbox ID is appended to, from a key prefix as deer-flow's
/// `sandbox.ownership.key_prefix` reads one: trailing colons dropped, then joined with one, so
/// `deerflow:sandbox:owner` and `deerflow:sandbox:owner:` both give deer-flow's own keys.
pub fn key_namespace(prefix: &str) -> Result<String, KeyPrefixError> {
    let trimmed = prefix.trim_end_matches(':');
    if trimmed.is_empty() {
        return Err(KeyPrefixError::Empty(prefix.to_owned()));
    }
    if trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(KeyPrefixError::Unprintable(prefix.to_owned()));
    }
    if trimmed.len() > MAX_KEY_PREFIX {
        return Err(KeyPrefixError::TooLong(prefix.to_owned()));
    }
    Ok(format!("{trimmed}:"))
}

impl RedisStore {
    /// `namespace`: what `key_namespace` made of the key prefix.
    pub fn new(url: &str, namespace: String, timeout: Duration) -> Result<Self, StoreError> {
        let client =
            redis::Client::open(url).map_err(|e| StoreError::Unavailable(format!("{url}: {e}")))?;
        Ok(Self {
            client,
            namespace,
            timeout,
            conn: Mutex::new(None),
        })
    }

    pub(super) fn namespace(&self) -> &str {
        &self.namespace
    }

    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(super) async fn connection(&self) -> Result<MultiplexedConnection, StoreError> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let c = tokio::time::timeout(self.timeout, self.client.get_multiplexed_async_connection())
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!("connect: no answer in {:?}", self.timeout))
            })?
            .map_err(|e| StoreError::Unavailable(format!("connect: {e}")))?;
        *guard = Some(c.clone());
        Ok(c)
    }

    pub(super) async fn forget_connection(&self) {
        *self.conn.lock().await = None;
    }

    pub async fn apply(
        &self,
        key: &str,
        op: Op,
        me: &str,
        ttl: Duration,
    ) -> Result<(&'static str, Option<String>), StoreError> {
        let mut conn = self.connection().await?;
        let script = redis::Script::new(SCRIPT);
        let mut call = script.key(format!("{}{key}", self.namespace));
        call.arg(op_name(op))
            .arg(me)
            .arg(ttl.as_millis().max(1) as u64);
        let result: Result<(String, String), _> =
            match tokio::time::timeout(self.timeout, call.invoke_async(&mut conn)).await {
                Ok(r) => r.map_err(|e| StoreError::Unavailable(e.to_string())),
                Err(_) => Err(StoreError::Unavailable(format!(
                    "no answer in {:?}",
                    self.timeout
                ))),
            };
        let (answer, before) = match result {
            Ok(v) => v,
            Err(e) => {
                self.forget_connection().await;
                return Err(e);
            }
        };
        let answer = intern(&answer).ok_or(StoreError::Unreadable(answer))?;
        Ok((answer, Some(before).filter(|b| !b.is_empty())))
    }

    pub async fn get(&self, key: &str) -> Result<Option<String>, StoreError> {
        let mut conn = self.connection().await?;
        let cmd = redis::cmd("GET")
            .arg(format!("{}{key}", self.namespace))
            .clone();
        match tokio::time::timeout(self.timeout, cmd.query_async::<Option<String>>(&mut conn)).await
        {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.forget_connection().await;
                Err(StoreError::Unavailable(e.to_string()))
            }
            Err(_) => {
                self.forget_connection().await;
                Err(StoreError::Unavailable(format!(
                    "no answer in {:?}",
                    self.timeout
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_prefixes_are_read_as_deer_flow_reads_them() {
        let default = default_key_prefix("deer-flow-");
        let ok = [
            ("deerflow:sandbox:owner", "deerflow:sandbox:owner:"),
            ("deerflow:sandbox:owner:", "deerflow:sandbox:owner:"),
            ("deerflow:sandbox:owner::", "deerflow:sandbox:owner:"),
            (default.as_str(), "lifecycle:deer-flow-:sandbox:"),
        ];
        for (given, want) in ok {
            assert_eq!(key_namespace(given).as_deref(), Ok(want), "{given}");
        }
        let long = "k".repeat(MAX_KEY_PREFIX + 1);
        let bad = [
            ("", KeyPrefixError::Empty(String::new())),
            (":::", KeyPrefixError::Empty(":::".into())),
            ("a b", KeyPrefixError::Unprintable("a b".into())),
            ("a\nb", KeyPrefixError::Unprintable("a\nb".into())),
            (long.as_str(), KeyPrefixError::TooLong(long.clone())),
        ];
        for (given, want) in bad {
            assert_eq!(key_namespace(given), Err(want), "{given:?}");
        }
    }
}
