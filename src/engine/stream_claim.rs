//! The claim a hedged stream's first chunk makes on the client's stream
//! (see `stream_hedge.rs`): first asked, first served in this process, and
//! the store agreeing (`Store::claim_stream`), so that replicas and the
//! result's compare-and-swap agree too. Read by the stream task as its first
//! chunk arrives (`stream_attempt.rs`), and by the race.

use std::sync::{Arc, Mutex, PoisonError};

use super::Engine;
use crate::jobs::Attempt;

/// Which attempt of a race may stream to the client.
#[derive(Debug, Default)]
pub(super) struct StreamClaim(Mutex<ClaimState>);

#[derive(Debug, Default)]
struct ClaimState {
    /// The attempt (by number) that asked first, and whether the store
    /// agreed.
    taken_by: Option<i32>,
    won: bool,
    /// Attempts past their `attempt_timeout`: they may not claim.
    withdrawn: Vec<i32>,
}

/// One attempt's part in a race, handed to its stream task.
pub(super) struct Claimant {
    claim: Arc<StreamClaim>,
    attempt: Attempt,
}

impl Claimant {
    pub(super) fn new(claim: Arc<StreamClaim>, attempt: Attempt) -> Claimant {
        Claimant { claim, attempt }
    }

    /// Whether this attempt's first chunk may go out: the first of the
    /// race to ask, not withdrawn, and the store agreeing.
    pub(super) async fn claim(&self, engine: &Engine) -> bool {
        {
            let mut state = self.claim.0.lock().unwrap_or_else(PoisonError::into_inner);
            if state.taken_by.is_some() || state.withdrawn.contains(&self.attempt.number) {
                return false;
            }
            state.taken_by = Some(self.attempt.number);
        }
        let (job_id, number) = (self.attempt.job_id, self.attempt.number);
        match engine.store().claim_stream(&self.attempt, engine.now_ms()).await {
            Ok(true) => {
                tracing::info!(%job_id, attempt = number, "hedged stream: this attempt's first chunk claimed the client's stream");
                self.claim.0.lock().unwrap_or_else(PoisonError::into_inner).won = true;
                true
            }
            Ok(false) => {
                tracing::info!(%job_id, attempt = number, "hedged stream: the job moved on before this attempt's first chunk");
                false
            }
            Err(err) => {
                tracing::warn!(%job_id, attempt = number, error = %err, "hedged stream: cannot claim the stream; read unseen");
                false
            }
        }
    }
}

impl StreamClaim {
    /// The attempt whose claim the store agreed to.
    pub(super) fn won_by(&self) -> Option<i32> {
        let state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.taken_by.filter(|_| state.won)
    }

    /// Attempt `number` may no longer claim. False when it already asked.
    pub(super) fn withdraw(&self, number: i32) -> bool {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if state.taken_by == Some(number) {
            return false;
        }
        state.withdrawn.push(number);
        true
    }
}
