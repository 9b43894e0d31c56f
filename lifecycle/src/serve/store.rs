//! Who owns each sandbox, across provider processes (deer-flow's semantics). A key per sandbox
//! holds `own:<owner>` or `del:<owner>` with a TTL its owner renews on a heartbeat. take/claim
//! succeeds only when the key is unowned or already ours, and never over a `del:`; renew
//! answers renewed / lapsed (the key expired and was re-taken by us) / lost (someone else holds
//! it: never re-taken); release drops only our own value; a teardown runs under `del:<owner>`,
//! which its renewals keep (or re-take once lapsed) as `del:`.
//! `Store` is the one interface, with an in-process `Memory` and a shared `Redis`
//! implementation (`redis_store`); the decision of each change is the pure `claims::decide`,
//! which the memory store runs directly and the Redis store runs as one Lua script.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::claims::{claim_answer, decide, renew_answer, Change, Claim, Op, Renew, StoreError};
use super::redis_store::RedisStore;
use crate::BeforeUndo;

/// An in-process store: one provider process per stack.
#[derive(Debug, Default)]
pub struct Memory {
    keys: Mutex<HashMap<String, (String, Instant)>>,
}

impl Memory {
    fn apply(&self, key: &str, op: Op, me: &str, ttl: Duration) -> (&'static str, Option<String>) {
        let Ok(mut keys) = self.keys.lock() else {
            return ("unavailable", None);
        };
        let now = Instant::now();
        keys.retain(|_, (_, exp)| *exp > now);
        let current = keys.get(key).map(|(v, _)| v.clone());
        let (change, answer) = decide(op, current.as_deref(), me);
        match change {
            Change::Set(v) => {
                keys.insert(key.to_owned(), (v, now + ttl));
            }
            Change::Delete => {
                keys.remove(key);
            }
            Change::Keep => {}
        }
        (answer, current)
    }
}

/// The ownership store, memory or Redis.
#[derive(Debug)]
pub enum Store {
    Memory(Memory),
    Redis(RedisStore),
}

/// A store bound to this process's owner name and TTL.
#[derive(Debug)]
pub struct Ownership {
    pub store: Store,
    pub me: String,
    pub ttl: Duration,
    /// Keys this process holds as `del:` (a teardown under way or failed): their renewals
    /// keep `del:`, whoever asks for them.
    deleting: Mutex<HashSet<String>>,
}

impl Ownership {
    pub fn new(store: Store, me: impl Into<String>, ttl: Duration) -> Self {
        Self {
            store,
            me: me.into(),
            ttl,
            deleting: Mutex::default(),
        }
    }

    fn deleting(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.deleting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this process's last word on `key` was a `del:` it still holds.
    pub fn holds_del(&self, key: &str) -> bool {
        self.deleting().contains(key)
    }

    async fn run(&self, key: &str, op: Op) -> Result<(&'static str, Option<String>), StoreError> {
        match &self.store {
            Store::Memory(m) => Ok(m.apply(key, op, &self.me, self.ttl)),
            Store::Redis(r) => r.apply(key, op, &self.me, self.ttl).await,
        }
    }

    pub fn is_shared(&self) -> bool {
        matches!(self.store, Store::Redis(_))
    }

    pub async fn claim(&self, key: &str) -> Result<Claim, StoreError> {
        let (answer, value) = self.run(key, Op::Claim).await?;
        claim_answer(answer, value.as_deref())
    }

    pub async fn begin_delete(&self, key: &str) -> Result<Claim, StoreError> {
        let (answer, value) = self.run(key, Op::BeginDelete).await?;
        let claim = claim_answer(answer, value.as_deref())?;
        if claim == Claim::Ours {
            self.deleting().insert(key.to_owned());
        }
        Ok(claim)
    }

    pub async fn end_delete(&self, key: &str) -> Result<Claim, StoreError> {
        let (answer, value) = self.run(key, Op::EndDelete).await?;
        let claim = claim_answer(answer, value.as_deref())?;
        if claim == Claim::Ours {
            self.deleting().remove(key);
        }
        Ok(claim)
    }

    /// Renews our claim: as `del:` while a teardown of ours holds it (`renew_fenced`).
    pub async fn renew(&self, key: &str) -> Result<Renew, StoreError> {
        if self.holds_del(key) {
            return self.renew_fenced(key).await;
        }
        let (answer, _) = self.run(key, Op::Renew).await?;
        renew_answer(answer)
    }

    /// `renew` for a sandbox this process is tearing down or holds fenced: what it keeps, or
    /// takes back once lapsed, is `del:`.
    pub async fn renew_fenced(&self, key: &str) -> Result<Renew, StoreError> {
        let (answer, _) = self.run(key, Op::RenewFenced).await?;
        let renewed = renew_answer(answer)?;
        if renewed == Renew::Lost {
            self.deleting().remove(key);
        }
        Ok(renewed)
    }

    /// `true` when our value was dropped.
    pub async fn release(&self, key: &str) -> Result<bool, StoreError> {
        let (answer, _) = self.run(key, Op::Release).await?;
        // Released, or not ours to release: either way we hold no `del:` there any more.
        self.deleting().remove(key);
        Ok(answer == "released")
    }

    /// The key's current value (`own:x`/`del:x`), or `None` when unowned.
    pub async fn value(&self, key: &str) -> Result<Option<String>, StoreError> {
        match &self.store {
            Store::Memory(m) => {
                let now = Instant::now();
                Ok(m.keys
                    .lock()
                    .ok()
                    .and_then(|k| k.get(key).filter(|(_, e)| *e > now).map(|(v, _)| v.clone())))
            }
            Store::Redis(r) => r.get(key).await,
        }
    }
}

/// A failed create's undo is a teardown: it runs only once our claim is `del:`, so no other
/// process takes the ID while what was made is half gone; refused or unanswered, nothing is
/// torn down (the create reports it left and quarantined).
impl BeforeUndo for Ownership {
    fn before_undo<'a>(
        &'a self,
        id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move {
            match self.begin_delete(id).await {
                Ok(Claim::Ours) => Ok(()),
                Ok(Claim::Owned(owner) | Claim::Deleting(owner)) => {
                    Err(format!("ownership: sandbox {id} is now {owner}'s"))
                }
                Err(e) => Err(e.to_string()),
            }
        })
    }

    fn after_teardown<'a>(
        &'a self,
        id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>> {
        Box::pin(async move {
            match self.end_delete(id).await {
                Ok(Claim::Ours) => Ok(()),
                Ok(Claim::Owned(owner) | Claim::Deleting(owner)) => {
                    Err(format!("ownership: sandbox {id} is now {owner}'s"))
                }
                Err(e) => Err(e.to_string()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn memory_store_claims_renews_and_releases_only_its_own() {
        let shared = Memory::default();
        let a = Ownership::new(
            Store::Memory(Memory::default()),
            "a",
            Duration::from_secs(60),
        );
        assert_eq!(a.claim("k").await.ok(), Some(Claim::Ours));
        assert_eq!(a.renew("k").await.ok(), Some(Renew::Renewed));
        assert_eq!(a.begin_delete("k").await.ok(), Some(Claim::Ours));
        assert_eq!(a.claim("k").await.ok(), Some(Claim::Deleting("a".into())));
        assert_eq!(a.release("k").await.ok(), Some(true));
        assert_eq!(a.value("k").await.ok(), Some(None));
        drop(shared);
    }

    async fn lapsed(a: &Ownership) -> bool {
        for _ in 0..100 {
            if a.value("k").await.ok() == Some(None) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// A teardown's `del:` survives a lapse whoever renews it: `renew` takes it back as `del:`
    /// while this process holds it, and as `own:` once the teardown ended or the key went.
    #[tokio::test]
    async fn a_lapsed_key_comes_back_as_what_this_process_holds() {
        let ttl = Duration::from_millis(20);
        let a = Ownership::new(Store::Memory(Memory::default()), "a", ttl);
        assert_eq!(a.begin_delete("k").await.ok(), Some(Claim::Ours));
        assert!(a.holds_del("k"));
        assert!(lapsed(&a).await, "the key lapses");
        assert_eq!(a.renew("k").await.ok(), Some(Renew::Lapsed));
        assert_eq!(a.value("k").await.ok(), Some(Some("del:a".into())));
        assert_eq!(a.release("k").await.ok(), Some(true));
        assert!(!a.holds_del("k"), "released: no del: held");
        assert_eq!(a.claim("k").await.ok(), Some(Claim::Ours));
        assert!(lapsed(&a).await, "the key lapses");
        assert_eq!(a.renew("k").await.ok(), Some(Renew::Lapsed));
        assert_eq!(a.value("k").await.ok(), Some(Some("own:a".into())));
        assert_eq!(a.begin_delete("k").await.ok(), Some(Claim::Ours));
        assert_eq!(a.end_delete("k").await.ok(), Some(Claim::Ours));
        assert!(!a.holds_del("k"), "a teardown that ended holds no del:");
    }
}
