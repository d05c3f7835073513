//! The stored keys as the request path sees them: a cache by key hash, so
//! that a stored key costs what a config key costs (a hash and a map
//! lookup) once it has been seen.
//!
//! A hash not in the cache is read from the store once; a key that was
//! found is cached whatever its state, so a revoked or expired key is
//! refused from memory too. A hash the store does not hold is remembered
//! for [`ABSENT_FOR`] in a map of at most [`MAX_ABSENT`] entries, and only a
//! presented key shaped like one the gateway makes (`ig_` and 64 hex digits)
//! is looked up at all; at most [`CONCURRENT_LOOKUPS`] lookups run at once,
//! so a flood of made-up keys costs a bounded share of the database.
//!
//! Every change to a key drops it from the cache: at once on the replica
//! that made it ([`StoredKeys::forget`]), and on the others through the
//! change feed (`feed.rs`). As a safety net an entry is read again after
//! [`MAX_AGE`], or [`MAX_AGE_UNFED`] while the feed is down. A lookup that
//! began before a change is not cached (the generation counter), so it
//! cannot put back what the change removed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::Principal;
use crate::keys::{ApiKey, KeyRefusal, may_be_stored_key};
use crate::store::{Store, StoreError};

/// How long a cached key is trusted while the change feed runs.
const MAX_AGE: Duration = Duration::from_secs(60);
/// How long while it does not.
const MAX_AGE_UNFED: Duration = Duration::from_secs(1);
/// How long a hash the store does not hold is remembered.
const ABSENT_FOR: Duration = Duration::from_secs(2);
/// At most this many absent hashes are remembered.
const MAX_ABSENT: usize = 10_000;
/// At most this many store lookups at once.
const CONCURRENT_LOOKUPS: usize = 8;

/// What a presented key is.
#[derive(Debug, Clone)]
pub enum Lookup {
    Found(Principal),
    /// A stored key that no longer works.
    Refused(KeyRefusal),
    Unknown,
}

/// The cache of stored keys; cloned, it is the same cache.
#[derive(Clone)]
pub struct StoredKeys(Arc<Inner>);

struct Inner {
    store: Store,
    found: RwLock<HashMap<String, Cached>>,
    absent: Mutex<HashMap<String, Instant>>,
    lookups: tokio::sync::Semaphore,
    /// Bumped by every forget: a lookup that saw another value caches nothing.
    generation: AtomicU64,
    fed: AtomicBool,
}

#[derive(Clone)]
struct Cached {
    key: Arc<ApiKey>,
    principal: Principal,
    loaded: Instant,
}

impl StoredKeys {
    pub fn new(store: Store) -> StoredKeys {
        StoredKeys(Arc::new(Inner {
            store,
            found: RwLock::default(),
            absent: Mutex::default(),
            lookups: tokio::sync::Semaphore::new(CONCURRENT_LOOKUPS),
            generation: AtomicU64::new(0),
            fed: AtomicBool::new(false),
        }))
    }

    /// The stored key `presented` (whose SHA-256 is `key_hash`) at `now_ms`.
    pub async fn authenticate(
        &self,
        presented: &str,
        key_hash: &str,
        now_ms: i64,
    ) -> Result<Lookup, StoreError> {
        if !may_be_stored_key(presented) {
            return Ok(Lookup::Unknown);
        }
        if let Some(lookup) = self.cached(key_hash, now_ms) {
            return Ok(lookup);
        }
        if self.known_absent(key_hash) {
            return Ok(Lookup::Unknown);
        }
        let Ok(_permit) = self.0.lookups.acquire().await else { return Ok(Lookup::Unknown) };
        let generation = self.0.generation.load(Ordering::Acquire);
        let found = self.0.store.key_by_hash(key_hash).await?;
        let unchanged = self.0.generation.load(Ordering::Acquire) == generation;
        let Some(key) = found else {
            if unchanged {
                self.remember_absent(key_hash);
            }
            return Ok(Lookup::Unknown);
        };
        let cached =
            Cached { principal: Principal::stored(&key), key: Arc::new(key), loaded: Instant::now() };
        let lookup = judge(&cached, now_ms);
        if unchanged {
            write(&self.0.found).insert(key_hash.to_owned(), cached);
        }
        Ok(lookup)
    }

    /// Drops key `id` (and every remembered absence: it may just have been
    /// created) so that its next use reads it again.
    pub fn forget(&self, id: Uuid) {
        self.0.generation.fetch_add(1, Ordering::AcqRel);
        write(&self.0.found).retain(|_, cached| cached.key.id != id);
        lock(&self.0.absent).clear();
    }

    /// Drops everything: after the feed missed announcements.
    pub fn forget_all(&self) {
        self.0.generation.fetch_add(1, Ordering::AcqRel);
        write(&self.0.found).clear();
        lock(&self.0.absent).clear();
    }

    /// Whether the change feed runs (entries are trusted for [`MAX_AGE`]).
    pub fn set_fed(&self, fed: bool) {
        self.0.fed.store(fed, Ordering::Release);
    }

    pub(super) fn store(&self) -> &Store {
        &self.0.store
    }

    /// The cached key's verdict, judged under the read lock: the principal
    /// is cloned once, for the caller, and nothing else is.
    fn cached(&self, key_hash: &str, now_ms: i64) -> Option<Lookup> {
        let max_age = if self.0.fed.load(Ordering::Acquire) { MAX_AGE } else { MAX_AGE_UNFED };
        let found = self.0.found.read().unwrap_or_else(PoisonError::into_inner);
        found
            .get(key_hash)
            .filter(|cached| cached.loaded.elapsed() < max_age)
            .map(|cached| judge(cached, now_ms))
    }

    fn known_absent(&self, key_hash: &str) -> bool {
        lock(&self.0.absent).get(key_hash).is_some_and(|until| *until > Instant::now())
    }

    fn remember_absent(&self, key_hash: &str) {
        let now = Instant::now();
        let mut absent = lock(&self.0.absent);
        if absent.len() >= MAX_ABSENT {
            absent.retain(|_, until| *until > now);
            if absent.len() >= MAX_ABSENT {
                absent.clear();
            }
        }
        absent.insert(key_hash.to_owned(), now + ABSENT_FOR);
    }
}

fn judge(cached: &Cached, now_ms: i64) -> Lookup {
    match cached.key.refusal(now_ms) {
        Some(refusal) => Lookup::Refused(refusal),
        None => Lookup::Found(cached.principal.clone()),
    }
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
