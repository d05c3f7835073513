//! Counting a prompt's tokens for a client that asks before it sends
//! (`POST /v1/messages/count_tokens`), off the async workers.
//!
//! Tokenizing is CPU work proportional to the body — a megabyte takes a
//! noticeable part of a second — and a worker thread busy with it serves no
//! other request meanwhile. So a count runs on tokio's blocking pool, and at
//! most [`TokenCountSlots::bound`] counts run at once (one per CPU: more
//! would only queue for the cores). A count that finds every slot taken is
//! refused at once ([`CountError::Busy`]) rather than queued without bound.

use std::sync::Arc;

use tokio::sync::Semaphore;

use super::{Engine, PreparedRequest};

/// The slots counts run in; clones share them.
#[derive(Debug, Clone)]
pub struct TokenCountSlots {
    slots: Arc<Semaphore>,
    bound: usize,
}

impl Default for TokenCountSlots {
    /// One slot per CPU this process may use.
    fn default() -> TokenCountSlots {
        let bound = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        TokenCountSlots { slots: Arc::new(Semaphore::new(bound)), bound }
    }
}

impl TokenCountSlots {
    /// How many counts may run at once.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// The semaphore itself: a count holds one permit while it runs (a
    /// test holds them all to see a count refused).
    pub fn semaphore(&self) -> &Arc<Semaphore> {
        &self.slots
    }
}

/// Why a count could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CountError {
    /// Every slot is taken; worth retrying in a moment.
    #[error("{0} token counts are running already, as many as this gateway runs at once; retry shortly")]
    Busy(usize),
    /// The blocking task ended without a count (it panicked or the runtime
    /// is shutting down).
    #[error("counting the prompt's tokens failed: {0}")]
    Failed(String),
}

impl Engine {
    /// The prompt tokens `request` would be sent as to the first provider
    /// of `route`, as that provider counts them: an upper bound (see
    /// [`Engine::count_prompt_tokens_now`]). `None` when the route or its
    /// first provider is not configured (any more).
    pub async fn count_prompt_tokens(
        &self,
        route: &str,
        request: PreparedRequest,
    ) -> Result<Option<u64>, CountError> {
        let slots = &self.inner.token_counts;
        let permit =
            Arc::clone(&slots.slots).try_acquire_owned().map_err(|_| CountError::Busy(slots.bound))?;
        let Some(route) = self.route(route) else { return Ok(None) };
        let Some(entry) = route.chain.first().and_then(|name| self.provider(name)) else { return Ok(None) };
        let counted = self.tasks().spawn_blocking(move || {
            let _slot = permit; // held until the count is done, even if its client has gone
            Self::count_with(&entry, &request)
        });
        counted.await.map_err(|err| CountError::Failed(err.to_string()))
    }

    /// The slots counts run in (see the module's doc).
    pub fn token_count_slots(&self) -> &TokenCountSlots {
        &self.inner.token_counts
    }
}
