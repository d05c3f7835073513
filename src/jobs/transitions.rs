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

/// May a new attempt of a job in `status`, with these attempts, start while
/// at most `open_attempts` of them may be open at once (1, or a hedged
/// route's bound)? If so, the lane it takes: the lowest one no open attempt
/// holds. The schema gives each open attempt its own lane up to the job's
/// bound, so this answer and the database's are the same rule.
pub fn may_start_attempt(
    status: JobStatus,
    attempts: &[super::Attempt],
    open_attempts: i32,
) -> Result<i32, StartBlocked> {
    let bound = open_attempts.max(1);
    let open: Vec<&super::Attempt> = attempts.iter().filter(|a| a.state.is_open()).collect();
    if let Some(blocking) = open.first().filter(|_| open.len() >= usize::try_from(bound).unwrap_or(1)) {
        return Err(match blocking.state {
            AttemptState::Starting => {
                StartBlocked::InFlight { attempt_id: blocking.id, number: blocking.number }
            }
            _ => StartBlocked::OutcomeUnknown { attempt_id: blocking.id, number: blocking.number },
        });
    }
    if !(status.can_become(JobStatus::Running) || status == JobStatus::Running) {
        return Err(StartBlocked::Completed { status });
    }
    Ok((1..=bound).find(|&lane| !open.iter().any(|a| a.lane == lane)).unwrap_or(1))
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

    /// Attempt `number` of a job, in `lane`, in `state`.
    fn attempt(number: i32, lane: i32, state: AttemptState) -> crate::jobs::Attempt {
        crate::jobs::Attempt {
            id: uuid::Uuid::from_u128(u128::try_from(number).unwrap_or(0)),
            job_id: uuid::Uuid::nil(),
            number,
            provider: "p".into(),
            state,
            job_version: 0,
            outcome: None,
            detail: None,
            resolved_by: None,
            started_at_ms: 0,
            finished_at_ms: None,
            reserved: Default::default(),
            charged: None,
            usage: None,
            lane,
            unknown_at_ms: None,
            sent: crate::jobs::Sent::NotYet,
            continues: None,
        }
    }

    #[test]
    fn an_unknown_attempt_is_never_failed_over_from_while_open() {
        let attempt = attempt(1, 1, AttemptState::Unknown);
        assert_eq!(
            may_start_attempt(JobStatus::Unknown, std::slice::from_ref(&attempt), 1),
            Err(StartBlocked::OutcomeUnknown { attempt_id: attempt.id, number: 1 })
        );
        let settled = crate::jobs::Attempt { state: AttemptState::Abandoned, ..attempt };
        assert_eq!(may_start_attempt(JobStatus::Unknown, &[settled], 1), Ok(1));
        assert!(matches!(
            may_start_attempt(JobStatus::Succeeded, &[], 1),
            Err(StartBlocked::Completed { .. })
        ));
    }

    /// A hedged job's bound: each open attempt holds a lane, a new one takes
    /// the lowest free lane, and none starts while every lane is held.
    #[test]
    fn a_hedged_job_opens_attempts_up_to_its_bound_in_free_lanes() {
        let first = attempt(1, 1, AttemptState::Starting);
        let running = JobStatus::Running;
        assert_eq!(may_start_attempt(running, std::slice::from_ref(&first), 2), Ok(2));
        let both = [first.clone(), attempt(2, 2, AttemptState::Unknown)];
        assert_eq!(
            may_start_attempt(running, &both, 2),
            Err(StartBlocked::InFlight { attempt_id: first.id, number: 1 }),
            "both lanes held"
        );
        assert_eq!(may_start_attempt(running, &both, 3), Ok(3));
        let lane_one_free = [attempt(1, 1, AttemptState::Failed), attempt(2, 2, AttemptState::Starting)];
        assert_eq!(may_start_attempt(running, &lane_one_free, 2), Ok(1));
        assert!(may_start_attempt(running, std::slice::from_ref(&first), 1).is_err(), "no hedge: one lane");
    }
}
