//! The shared registry of hosts and sandboxes on Redis, for one provisioner URL over several
//! Docker hosts (`--advertise-url`): each host's advertised address (`{ns}hosts:{owner}`), and
//! each provisioner sandbox's answer (`{ns}registry:{id}`, a hash of `owner` and `answer`), both
//! with the ownership TTL and renewed on the heartbeat, so a dead host's entries go within a
//! TTL. A sandbox is published only while its claim (`{ns}{id}`) is `own:` its owner, in the
//! same Lua script, so the registry never names an owner the claim does not. Every call is
//! bounded by the store's timeout; a failure is `Unavailable` (the caller answers 503).

use std::time::Duration;

use super::claims::StoreError;
use super::redis_store::RedisStore;

/// KEYS[1] the claim, KEYS[2] the registry entry; ARGV owner, answer, ttl ms. 1 when published.
const PUBLISH: &str = r#"
if redis.call('GET', KEYS[1]) ~= 'own:' .. ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'owner', ARGV[1], 'answer', ARGV[2])
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[3]))
return 1
"#;

/// KEYS[1] the registry entry; ARGV owner. Drops the entry only if it is that owner's.
const UNPUBLISH: &str = r#"
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then redis.call('DEL', KEYS[1]) return 1 end
return 0
"#;

/// A glob's special characters escaped, so a key prefix matches only itself in `SCAN MATCH`.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl RedisStore {
    async fn bounded<T>(
        &self,
        f: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout(), f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.forget_connection().await;
                Err(unavailable(e))
            }
            Err(_) => {
                self.forget_connection().await;
                Err(unavailable(format!("no answer in {:?}", self.timeout())))
            }
        }
    }

    /// Says where `owner` answers, for a TTL.
    pub async fn announce(&self, owner: &str, url: &str, ttl: Duration) -> Result<(), StoreError> {
        let mut c = self.connection().await?;
        let cmd = redis::cmd("SET")
            .arg(format!("{}hosts:{owner}", self.namespace()))
            .arg(url)
            .arg("PX")
            .arg(ttl.as_millis().max(1) as u64)
            .clone();
        self.bounded(cmd.query_async::<()>(&mut c)).await
    }

    /// Drops `owner`'s address (at shutdown).
    pub async fn withdraw(&self, owner: &str) -> Result<(), StoreError> {
        let mut c = self.connection().await?;
        let cmd = redis::cmd("DEL")
            .arg(format!("{}hosts:{owner}", self.namespace()))
            .clone();
        self.bounded(cmd.query_async::<()>(&mut c)).await
    }

    /// Where `owner` answers, if it announced itself within a TTL.
    pub async fn host_url(&self, owner: &str) -> Result<Option<String>, StoreError> {
        let mut c = self.connection().await?;
        let cmd = redis::cmd("GET")
            .arg(format!("{}hosts:{owner}", self.namespace()))
            .clone();
        self.bounded(cmd.query_async::<Option<String>>(&mut c))
            .await
    }

    /// Milliseconds the sandbox's claim still lives (`None`: no claim, or no expiry).
    pub async fn claim_ttl(&self, id: &str) -> Result<Option<u64>, StoreError> {
        let mut c = self.connection().await?;
        let cmd = redis::cmd("PTTL")
            .arg(format!("{}{id}", self.namespace()))
            .clone();
        let ms = self.bounded(cmd.query_async::<i64>(&mut c)).await?;
        Ok(u64::try_from(ms).ok())
    }

    /// Publishes `answer` as `owner`'s sandbox `id`, only while the claim is `own:owner`.
    pub async fn publish(
        &self,
        id: &str,
        owner: &str,
        answer: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut c = self.connection().await?;
        let script = redis::Script::new(PUBLISH);
        let mut call = script.key(format!("{}{id}", self.namespace()));
        call.key(format!("{}registry:{id}", self.namespace()))
            .arg(owner)
            .arg(answer)
            .arg(ttl.as_millis().max(1) as u64);
        let done = self.bounded(call.invoke_async::<i64>(&mut c)).await?;
        Ok(done == 1)
    }

    /// Drops the registry entry of `id` if it is `owner`'s (a new owner's is left alone).
    pub async fn unpublish(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        let mut c = self.connection().await?;
        let script = redis::Script::new(UNPUBLISH);
        let mut call = script.key(format!("{}registry:{id}", self.namespace()));
        call.arg(owner);
        self.bounded(call.invoke_async::<i64>(&mut c))
            .await
            .map(|_| ())
    }

    /// One sandbox's entry: (owner, answer as JSON text).
    pub async fn entry(&self, id: &str) -> Result<Option<(String, String)>, StoreError> {
        let mut c = self.connection().await?;
        let cmd = redis::cmd("HMGET")
            .arg(format!("{}registry:{id}", self.namespace()))
            .arg("owner")
            .arg("answer")
            .clone();
        let (owner, answer) = self
            .bounded(cmd.query_async::<(Option<String>, Option<String>)>(&mut c))
            .await?;
        Ok(owner.zip(answer))
    }

    /// Every published sandbox: (owner, answer as JSON text). `SCAN` walks the keyspace in
    /// steps, so a large registry never blocks the server; entries that lapse meanwhile are
    /// skipped.
    pub async fn entries(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut c = self.connection().await?;
        let pattern = format!("{}registry:*", glob_escape(self.namespace()));
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        // Bounded: SCAN ends when the cursor comes back to 0; 100000 steps is a registry of
        // millions, far beyond one stack.
        for _ in 0..100_000 {
            let cmd = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .clone();
            let (next, batch) = self
                .bounded(cmd.query_async::<(u64, Vec<String>)>(&mut c))
                .await?;
            keys.extend(batch);
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(200) {
            let mut pipe = redis::pipe();
            for k in chunk {
                pipe.cmd("HMGET").arg(k).arg("owner").arg("answer");
            }
            let got = self
                .bounded(pipe.query_async::<Vec<(Option<String>, Option<String>)>>(&mut c))
                .await?;
            out.extend(got.into_iter().filter_map(|(o, a)| o.zip(a)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::glob_escape;

    #[test]
    fn key_prefixes_match_only_themselves() {
        assert_eq!(
            glob_escape("lifecycle:deer-flow-:sandbox:"),
            "lifecycle:deer-flow-:sandbox:"
        );
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
