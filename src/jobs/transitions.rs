//! The state machines, defined once. Every store UPDATE that changes a state
//! names the state it leaves in its WHERE clause, and the migrations' triggers
//! (`jobs_status_transition`, `attempts_state_transition`) refuse any pair not
//! listed here; `tests/transitions.rs` proves the two lists agree.

use super::{AttemptState, JobStatus};

impl JobStatus {
    /// Whether `self → next` is a legal job transition.
    ///
    /// `failed → running` is a new attempt started by hand after the chain
    /// was exhausted; `unknown → running` resumes the chain once the unknown
    /// attempt is settled; `unknown → succeeded` is the late answer winning.
    /// `failed → succeeded` is a late answer too: the chain ran out while an
    /// attempt was `unknown` or `abandoned`, and that attempt's provider did
    /// the work after all — it was paid for, so it is the job's result.
    /// `cancelled` has no way out: an answer that arrives after a cancel is
    /// kept on its attempt (`superseded`), never made the job's result.
    pub fn can_become(self, next: JobStatus) -> bool {
        use JobStatus::*;
        matches!(
            (self, next),
            (Pending, Running | Failed | Cancelled)
                | (Running, Succeeded | Failed | Unknown | Cancelled)
                | (Unknown, Running | Succeeded | Failed | Cancelled)
                | (Failed, Running | Succeeded)
        )
    }
}

impl AttemptState {
    /// Whether `self → next` is a legal attempt transition.
    ///
    /// An `abandoned` attempt was given up on, not proven dead: its late
    /// answer may still arrive and win the compare-and-swap (R7), or lose it.
    pub fn can_become(self, next: AttemptState) -> bool {
        use AttemptState::*;
        matches!(
            (self, next),
            (Starting, Succeeded | Failed | Unknown | Superseded)
                | (Unknown, Succeeded | Failed | Abandoned | Superseded)
                | (Abandoned, Succeeded | Superseded)
        )
    }
}

/// Why a new attempt may not start now (R4). The answer of the domain; the
/// schema's partial unique index gives the same answer to racing writers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartBlocked {
    /// Another attempt is `starting`: its request may be in flight.
    InFlight { attempt_id: uuid::Uuid, number: i32 },
    /// Another attempt is `unknown`: it may have done the work.
    OutcomeUnknown { attempt_id: uuid::Uuid, number: i32 },
    /// The job already has its final answer (or was cancelled).
    Completed { status: JobStatus },
}

/// May a new attempt of a job in `status`, with these attempts, start?
pub fn may_start_attempt(status: JobStatus, attempts: &[super::Attempt]) -> Result<(), StartBlocked> {
    if let Some(open) = attempts.iter().find(|a| a.state.is_open()) {
        return Err(match open.state {
            AttemptState::Starting => StartBlocked::InFlight { attempt_id: open.id, number: open.number },
            _ => StartBlocked::OutcomeUnknown { attempt_id: open.id, number: open.number },
        });
    }
    if status.can_become(JobStatus::Running) || status == JobStatus::Running {
        Ok(())
    } else {
        Err(StartBlocked::Completed { status })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_have_no_way_out() {
        for next in JobStatus::ALL {
            assert!(!JobStatus::Succeeded.can_become(next));
            assert!(!JobStatus::Cancelled.can_become(next));
        }
        for next in AttemptState::ALL {
            for done in [AttemptState::Succeeded, AttemptState::Failed, AttemptState::Superseded] {
                assert!(!done.can_become(next), "{done} → {next}");
            }
        }
    }

    #[test]
    fn an_unknown_attempt_is_never_failed_over_from_while_open() {
        let attempt = crate::jobs::Attempt {
            id: uuid::Uuid::nil(),
            job_id: uuid::Uuid::nil(),
            number: 1,
            provider: "p".into(),
            state: AttemptState::Unknown,
            job_version: 0,
            outcome: None,
            detail: None,
            response: None,
            resolved_by: None,
            started_at_ms: 0,
            finished_at_ms: None,
            reserved: Default::default(),
            charged: None,
            usage: None,
        };
        assert_eq!(
            may_start_attempt(JobStatus::Unknown, std::slice::from_ref(&attempt)),
            Err(StartBlocked::OutcomeUnknown { attempt_id: attempt.id, number: 1 })
        );
        let settled = crate::jobs::Attempt { state: AttemptState::Abandoned, ..attempt };
        assert_eq!(may_start_attempt(JobStatus::Unknown, &[settled]), Ok(()));
        assert!(matches!(may_start_attempt(JobStatus::Succeeded, &[]), Err(StartBlocked::Completed { .. })));
    }
}
