//! The stored budgets and rate limits as this replica knows them: all of
//! them in memory (there are few, and every metered attempt asks), read
//! again whenever the store's `limit_audit` has grown.
//!
//! A change made here is applied at once ([`Engine::refresh_spend_limits`]
//! after the write); a change made elsewhere — another replica, the CLI —
//! within `POLL`. Until the first read succeeds a serving gateway does
//! not start ([`Engine::load_spend_limits`]); a failed read later keeps the
//! limits it had.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use super::Engine;
use crate::budgets::SpendLimit;
use crate::store::StoreError;

/// How often the audit's head is read.
const POLL: Duration = Duration::from_millis(250);

#[derive(Debug, Default)]
pub(super) struct LimitBook {
    limits: RwLock<Arc<[SpendLimit]>>,
    /// The audit's `seq` the limits were read after.
    seen: AtomicI64,
}

impl Engine {
    /// The stored limits in force.
    pub(super) fn spend_limits(&self) -> Arc<[SpendLimit]> {
        Arc::clone(&self.inner.spend_limits.limits.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Reads every stored limit.
    pub async fn load_spend_limits(&self) -> Result<(), StoreError> {
        let head = self.store().limit_audit_head().await?;
        let limits = self.store().spend_limits().await?;
        let book = &self.inner.spend_limits;
        *book.limits.write().unwrap_or_else(PoisonError::into_inner) = limits.into();
        book.seen.fetch_max(head, Ordering::AcqRel);
        Ok(())
    }

    /// Reads the limits again if any changed since they were read.
    pub async fn refresh_spend_limits(&self) -> Result<(), StoreError> {
        let head = self.store().limit_audit_head().await?;
        if head > self.inner.spend_limits.seen.load(Ordering::Acquire) {
            self.load_spend_limits().await?;
        }
        Ok(())
    }

    /// Keeps the limits current, reading the audit's head every `POLL`.
    pub fn spawn_spend_limit_feed(&self) {
        let engine = self.clone();
        self.tasks().spawn_poll(POLL, "stored limits not read; keeping the ones in force", move || {
            let engine = engine.clone();
            async move { engine.refresh_spend_limits().await }
        });
    }
}
