//! The engine's one time source for what it stores and compares: attempt
//! start and finish times, lease expiry, and `max_execution` measured from
//! an attempt's start.
//!
//! Real wall-clock time plus an offset that only moves forward. Tests
//! [`Clock::advance`] it to make a lease expire or a provider's
//! `max_execution` pass at once, instead of sleeping through them. The
//! engine's own timers (`attempt_timeout`, the late listener's deadline,
//! lease renewal) are tokio timers on real time: they bound how long the
//! engine waits for a provider, and a jump of this clock makes the recovery
//! sweep (which reads this clock) act on what is overdue.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    /// Milliseconds since the unix epoch, as the store keeps time.
    pub fn now_ms(&self) -> i64 {
        crate::jobs::now_ms() + self.offset_ms.load(Ordering::Relaxed)
    }

    /// Moves this clock (and only this engine's) forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX / 4);
        self.offset_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// `ms` as a `Duration` from now; zero if it lies in the past.
    pub fn until(&self, ms: i64) -> Duration {
        Duration::from_millis(u64::try_from(ms - self.now_ms()).unwrap_or(0))
    }
}

/// A duration as whole milliseconds, saturating.
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX / 4)
}
