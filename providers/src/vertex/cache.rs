//! One access token shared by every request of a provider, fetched again
//! before it expires. Refreshing under the lock makes it single-flight:
//! requests that arrive while a token is being fetched wait for that one
//! instead of each asking for their own. The clock is injected, so the
//! refresh rule is tested without waiting.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::outcome::Failure;
use crate::secret::Secret;

/// How long before its expiry a token is replaced: a request sent with a
/// token about to expire may reach the model after it has.
pub(crate) const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// A token as granted: its value and how long it lives from the grant.
pub(crate) struct Token {
    pub(crate) value: Secret,
    pub(crate) lifetime: Duration,
}

struct Held {
    value: Secret,
    expires_at: Instant,
}

pub(crate) type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

pub(crate) struct TokenCache {
    held: Mutex<Option<Held>>,
    clock: Clock,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenCache")
    }
}

impl TokenCache {
    pub(crate) fn new(clock: Clock) -> Self {
        TokenCache { held: Mutex::new(None), clock }
    }

    /// The token to send now: the held one while more than
    /// [`REFRESH_MARGIN`] of it is left, else one `fetch` brings. A failed
    /// fetch still answers with the held token if it has not expired yet;
    /// otherwise the failure is the request's.
    pub(crate) async fn get<F, Fut>(&self, fetch: F) -> Result<Secret, Failure>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Token, Failure>>,
    {
        let mut held = self.held.lock().await;
        let asked_at = (self.clock)();
        if let Some(token) = held.as_ref().filter(|t| asked_at + REFRESH_MARGIN < t.expires_at) {
            return Ok(token.value.clone());
        }
        match fetch().await {
            Ok(token) => {
                tracing::debug!(lifetime = ?token.lifetime, "vertex access token refreshed");
                let value = token.value.clone();
                // From when it was asked for: the grant's clock started no earlier.
                *held = Some(Held { value: token.value, expires_at: asked_at + token.lifetime });
                Ok(value)
            }
            Err(failure) => match held.as_ref().filter(|t| (self.clock)() < t.expires_at) {
                Some(token) => Ok(token.value.clone()),
                None => Err(failure),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    use super::*;

    /// A clock that reads `start` plus the seconds in `offset`.
    fn clock(offset: Arc<AtomicU64>) -> Clock {
        let start = Instant::now();
        Arc::new(move || start + Duration::from_secs(offset.load(Ordering::SeqCst)))
    }

    fn granted(name: &str, secs: u64) -> Result<Token, Failure> {
        Ok(Token { value: Secret::new(name), lifetime: Duration::from_secs(secs) })
    }

    #[tokio::test]
    async fn a_token_is_kept_until_the_margin_then_replaced() {
        let offset = Arc::new(AtomicU64::new(0));
        let cache = TokenCache::new(clock(offset.clone()));
        let first = cache.get(|| async { granted("one", 3600) }).await.unwrap();
        assert_eq!(first.expose(), "one");
        offset.store(3600 - 301, Ordering::SeqCst);
        let kept = cache.get(|| async { granted("two", 3600) }).await.unwrap();
        assert_eq!(kept.expose(), "one", "more than the margin left");
        offset.store(3600 - 299, Ordering::SeqCst);
        let replaced = cache.get(|| async { granted("two", 3600) }).await.unwrap();
        assert_eq!(replaced.expose(), "two", "less than the margin left");
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_a_live_token_and_fails_once_it_is_dead() {
        let offset = Arc::new(AtomicU64::new(0));
        let cache = TokenCache::new(clock(offset.clone()));
        cache.get(|| async { granted("one", 3600) }).await.unwrap();
        let down = || async { Err(Failure::NotSent { reason: "down".into(), local: false }) };
        offset.store(3500, Ordering::SeqCst);
        assert_eq!(cache.get(down).await.unwrap().expose(), "one", "still alive for 100 s");
        offset.store(3600, Ordering::SeqCst);
        assert!(cache.get(down).await.is_err(), "expired: the failure is the request's");
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_refresh() {
        let cache = Arc::new(TokenCache::new(clock(Arc::new(AtomicU64::new(0)))));
        let fetches = Arc::new(AtomicU32::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let mut waiting = Vec::new();
        for _ in 0..8 {
            let (cache, fetches, mut released) = (cache.clone(), fetches.clone(), released.clone());
            waiting.push(tokio::spawn(async move {
                cache
                    .get(|| async move {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        let _ = released.wait_for(|go| *go).await;
                        granted("shared", 3600)
                    })
                    .await
            }));
        }
        release.send_replace(true);
        for task in waiting {
            assert_eq!(task.await.unwrap().unwrap().expose(), "shared");
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1, "one refresh for eight requests");
    }
}
