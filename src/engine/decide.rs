//! What an attempt's outcome means, decided in one place (R5–R7, R9).
//!
//! Three places observe the end of a provider call: the driver (a plain
//! call, live), the stream reader (before or after its first chunk reached a
//! client) and the late listener (an answer to an attempt already declared
//! `unknown`). They all ask [`decide`] what the outcome means *now* and carry
//! out its [`Step`]; none of them decides anything itself. The function is
//! pure — no store, no clock, no I/O — so every edge of the state machine it
//! encodes is unit-tested below.

use std::time::Duration;

use intentgate_providers::Failure;

use crate::jobs::AttemptOutcome;

/// When the outcome is observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The attempt is `starting` and no byte of its answer reached a client:
    /// it may still fail over. `retries` is how often the same provider was
    /// already retried after a rejection. `collectable`: a client can still
    /// come back for the job's result (its key was the client's own, not
    /// minted by a door), so resuming the chain after an unknown outcome
    /// serves someone.
    Live { retries: u32, collectable: bool },
    /// The attempt is `starting` and part of its streamed answer already
    /// reached a client: whatever happens now, the answer is this attempt's.
    Streamed,
    /// The attempt is `starting`, part of the job's streamed answer reached
    /// a client, the stream broke, and the route lets the chain's next
    /// provider continue it (`continue_cut_streams`, `continuation.rs`).
    Continuable,
    /// The attempt was declared `unknown` (and may have been abandoned since):
    /// its answer, or its failure, arrives late.
    Late,
    /// The attempt is `starting`, nothing of it reached a client, and a
    /// route's hedge opened another attempt of the job beside it (which may
    /// have won already): its outcome settles this attempt alone, and the
    /// other carries the job on.
    Hedged,
}

/// What was observed of the call.
#[derive(Debug, Clone, Copy)]
pub enum Observed<'a> {
    /// A complete answer; `breaks_contract` when the route's runtime shape
    /// check refused it.
    Answer { breaks_contract: bool },
    /// A classified failure.
    Failure(&'a Failure),
    /// No answer in the time allowed: `attempt_timeout` (live, streamed) or
    /// the provider's `max_execution` (late).
    Silence,
}

/// The route's retry policy: which proven failures retry the same
/// provider (its retry classes), how often and how long to wait; anything
/// else proven fails over at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    pub retries: u32,
    pub backoff: Duration,
    pub max_wait: Duration,
    /// Rejections with these statuses retry.
    pub statuses: Vec<u16>,
    /// A request that provably never left (`not_sent`) retries.
    pub not_sent: bool,
    /// A content-policy refusal fails over instead of ending the job.
    pub content_fails_over: bool,
}

impl RetryPolicy {
    /// No retries at all (a route that is no longer configured).
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            retries: 0,
            backoff: Duration::ZERO,
            max_wait: Duration::ZERO,
            statuses: Vec::new(),
            not_sent: false,
            content_fails_over: false,
        }
    }

    fn retries(&self, failure: &Failure) -> bool {
        match failure {
            Failure::Rejected { status, .. } => self.statuses.contains(status),
            // Only a connection that could not be made is worth a retry; a
            // request refused here (unencodable, an unknown provider) fails
            // the same way again.
            Failure::NotSent { local, .. } => self.not_sent && !local,
            _ => false,
        }
    }
}

/// What the caller does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Offer the answer to the job's compare-and-swap (R6): it wins, or is
    /// `superseded`, or (the attempt was settled `failed` meanwhile) is not
    /// deliverable.
    Deliver,
    /// Proven no (usable) work: the attempt becomes `failed` with `outcome`,
    /// then the job goes on as `then` says.
    Fail { outcome: AttemptOutcome, then: AfterFailure },
    /// The work may have been done (R5): the attempt becomes `unknown`,
    /// nothing else starts, and a late answer is listened for (it may still
    /// win). With `fail_job` the job fails at once and its chain never
    /// resumes: no other provider may answer it (a client already read part
    /// of this attempt's stream), or no client could collect a second
    /// execution (its key was minted). Without, the job is `unknown` and its
    /// chain resumes once the attempt is settled.
    Unknown { fail_job: bool },
    /// The work may have been done and part of it reached the client (phase
    /// `Continuable`): the attempt becomes `unknown`, counted as a possible
    /// duplicate, and the chain's next provider continues the answer.
    Continue,
    /// Late and still nothing proven (the provider connection broke after the
    /// attempt was declared unknown): keep it `unknown` until `max_execution`
    /// or an operator settles it.
    KeepWaiting,
    /// Late and `max_execution` passed: the provider can no longer be working
    /// on it. The attempt is `abandoned` (its answer, should one still come,
    /// is honoured) and the chain goes on.
    Abandon,
}

/// How the job goes on after an attempt proved it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// The next provider of the chain, at once.
    FailOver,
    /// The same provider again after a pause (a 429).
    RetryAfter(Duration),
    /// The job fails: a client already received part of this attempt's
    /// answer, so no other provider may answer it.
    FailJob,
    /// The chain's next provider continues the answer a client received
    /// part of (phase `Continuable`).
    Continue,
    /// Nothing more: another attempt of the job is open beside this one
    /// (a hedge) and carries the job on.
    Beside,
    /// The job fails with the provider's content-policy refusal as its
    /// reason: a verdict on the request, not on the provider (unless the
    /// route opts into failing over).
    Refused,
    /// The attempt was `unknown`: the job leaves `unknown` and its chain
    /// resumes where it stopped.
    Resume,
}

/// The one decision: given the phase and what was observed, what now.
pub fn decide(phase: Phase, observed: Observed<'_>, policy: &RetryPolicy) -> Step {
    let fail = |outcome: AttemptOutcome, then: AfterFailure| Step::Fail { outcome, then };
    match (phase, observed) {
        (_, Observed::Answer { breaks_contract: false }) => Step::Deliver,
        (phase, Observed::Answer { breaks_contract: true }) => {
            fail(AttemptOutcome::ContractViolation, after_proven_failure(phase, None, policy))
        }
        (Phase::Live { .. }, Observed::Failure(failure))
            if failure.is_content_refusal() && !policy.content_fails_over =>
        {
            fail(failure.class().into(), AfterFailure::Refused)
        }
        (phase, Observed::Failure(failure)) if failure.may_fail_over() => {
            fail(failure.class().into(), after_proven_failure(phase, Some(failure), policy))
        }
        (Phase::Hedged, Observed::Failure(_) | Observed::Silence) => Step::Unknown { fail_job: false },
        (Phase::Live { collectable, .. }, Observed::Failure(_) | Observed::Silence) => {
            Step::Unknown { fail_job: !collectable }
        }
        (Phase::Streamed, Observed::Failure(_) | Observed::Silence) => Step::Unknown { fail_job: true },
        (Phase::Continuable, Observed::Failure(_) | Observed::Silence) => Step::Continue,
        (Phase::Late, Observed::Failure(_)) => Step::KeepWaiting,
        (Phase::Late, Observed::Silence) => Step::Abandon,
    }
}

/// What may follow a proven failure in `phase`.
fn after_proven_failure(phase: Phase, failure: Option<&Failure>, policy: &RetryPolicy) -> AfterFailure {
    match phase {
        Phase::Live { retries, .. } => match failure.and_then(|f| retry_wait(f, retries, policy)) {
            Some(wait) => AfterFailure::RetryAfter(wait),
            None => AfterFailure::FailOver,
        },
        Phase::Streamed => AfterFailure::FailJob,
        // A whole answer that breaks the contract is not continued.
        Phase::Continuable if failure.is_some() => AfterFailure::Continue,
        Phase::Continuable => AfterFailure::FailJob,
        Phase::Late => AfterFailure::Resume,
        Phase::Hedged => AfterFailure::Beside,
    }
}

/// A failure of one of the route's retry classes is worth waiting for, up
/// to `policy.retries` times, backing off and honouring `Retry-After`
/// (unless it asks for more than `max_wait`, which fails over instead).
/// The wait returned is the most to wait: the executor jitters it
/// (see `conclude`), so that clients rejected together do not return
/// together; a `Retry-After` is a floor the jitter keeps.
pub fn retry_wait(failure: &Failure, retries: u32, policy: &RetryPolicy) -> Option<Duration> {
    if retries >= policy.retries || !policy.retries(failure) {
        return None;
    }
    let backoff = policy.backoff.saturating_mul(2u32.saturating_pow(retries)).min(policy.max_wait);
    let retry_after = match failure {
        Failure::Rejected { retry_after, .. } => *retry_after,
        _ => None,
    };
    match retry_after {
        Some(wait) if wait > policy.max_wait => None,
        Some(wait) => Some(wait.max(backoff)),
        None => Some(backoff),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &RetryPolicy = &RetryPolicy {
        retries: 2,
        backoff: Duration::from_millis(100),
        max_wait: Duration::from_secs(5),
        statuses: Vec::new(),
        not_sent: false,
        content_fails_over: false,
    };

    fn classes(statuses: &[u16], not_sent: bool) -> RetryPolicy {
        RetryPolicy { statuses: statuses.to_vec(), not_sent, ..POLICY.clone() }
    }

    const LIVE: Phase = Phase::Live { retries: 0, collectable: true };

    fn rejected(status: u16, retry_after: Option<Duration>) -> Failure {
        Failure::Rejected { status, retry_after, body: String::new() }
    }

    fn unknown() -> Failure {
        Failure::Unknown { reason: "cut".into() }
    }

    #[test]
    fn a_good_answer_is_delivered_in_every_phase() {
        for phase in [LIVE, Phase::Streamed, Phase::Late] {
            assert_eq!(decide(phase, Observed::Answer { breaks_contract: false }, POLICY), Step::Deliver);
        }
    }

    #[test]
    fn a_contract_violation_fails_the_attempt_and_what_follows_depends_on_the_phase() {
        let violation = Observed::Answer { breaks_contract: true };
        let then = |phase| match decide(phase, violation, POLICY) {
            Step::Fail { outcome: AttemptOutcome::ContractViolation, then } => then,
            other => panic!("{other:?}"),
        };
        assert_eq!(then(LIVE), AfterFailure::FailOver);
        assert_eq!(then(Phase::Streamed), AfterFailure::FailJob, "a client saw part of it");
        assert_eq!(then(Phase::Late), AfterFailure::Resume);
    }

    #[test]
    fn proven_failures_fail_over_live_and_resume_late() {
        let not_sent = Failure::NotSent { reason: "refused".into(), local: false };
        let bad = Failure::BadOutput { reason: "garbage".into(), raw: Default::default() };
        for failure in [&not_sent, &bad, &rejected(500, None)] {
            let live = decide(LIVE, Observed::Failure(failure), POLICY);
            assert_eq!(live, Step::Fail { outcome: failure.class().into(), then: AfterFailure::FailOver });
            let late = decide(Phase::Late, Observed::Failure(failure), POLICY);
            assert_eq!(late, Step::Fail { outcome: failure.class().into(), then: AfterFailure::Resume });
            let streamed = decide(Phase::Streamed, Observed::Failure(failure), POLICY);
            assert_eq!(streamed, Step::Fail { outcome: failure.class().into(), then: AfterFailure::FailJob });
        }
    }

    #[test]
    fn what_proves_nothing_is_unknown_never_failed() {
        let open = Step::Unknown { fail_job: false };
        assert_eq!(decide(LIVE, Observed::Failure(&unknown()), POLICY), open);
        assert_eq!(decide(LIVE, Observed::Silence, POLICY), open);
        assert_eq!(decide(Phase::Late, Observed::Failure(&unknown()), POLICY), Step::KeepWaiting);
        assert_eq!(decide(Phase::Late, Observed::Silence, POLICY), Step::Abandon);
    }

    #[test]
    fn an_unknown_outcome_nobody_can_collect_again_ends_the_job() {
        let ends = Step::Unknown { fail_job: true };
        // A client read part of this attempt: no other provider may answer.
        assert_eq!(decide(Phase::Streamed, Observed::Failure(&unknown()), POLICY), ends);
        assert_eq!(decide(Phase::Streamed, Observed::Silence, POLICY), ends);
        // A minted key: no retry can ever collect a second execution.
        let minted = Phase::Live { retries: 0, collectable: false };
        assert_eq!(decide(minted, Observed::Failure(&unknown()), POLICY), ends);
        assert_eq!(decide(minted, Observed::Silence, POLICY), ends);
        // Proven failures still fail over: nothing was executed.
        let refused = Failure::NotSent { reason: "refused".into(), local: false };
        let over = Step::Fail { outcome: refused.class().into(), then: AfterFailure::FailOver };
        assert_eq!(decide(minted, Observed::Failure(&refused), POLICY), over);
    }

    #[test]
    fn too_many_requests_is_retried_with_backoff_then_fails_over() {
        let policy = classes(&[429], false);
        let step = |retries, failure: &Failure| {
            decide(Phase::Live { retries, collectable: true }, Observed::Failure(failure), &policy)
        };
        let retry =
            |wait| Step::Fail { outcome: AttemptOutcome::Rejected, then: AfterFailure::RetryAfter(wait) };
        let fail_over = Step::Fail { outcome: AttemptOutcome::Rejected, then: AfterFailure::FailOver };
        assert_eq!(step(0, &rejected(429, None)), retry(Duration::from_millis(100)));
        assert_eq!(step(1, &rejected(429, None)), retry(Duration::from_millis(200)), "doubles");
        assert_eq!(step(2, &rejected(429, None)), fail_over, "retries used up");
        assert_eq!(step(0, &rejected(429, Some(Duration::from_secs(1)))), retry(Duration::from_secs(1)));
        assert_eq!(step(0, &rejected(429, Some(Duration::from_secs(60)))), fail_over, "too long to wait");
        assert_eq!(step(0, &rejected(503, None)), fail_over, "a status outside the classes fails over");
    }

    #[test]
    fn each_retry_class_retries_the_same_provider_and_nothing_else_does() {
        let policy = classes(&[429, 500, 502, 503, 529], true);
        let then = |failure: &Failure| match decide(LIVE, Observed::Failure(failure), &policy) {
            Step::Fail { then, .. } => then,
            other => panic!("{other:?}"),
        };
        let retry = AfterFailure::RetryAfter(Duration::from_millis(100));
        for status in [429, 500, 502, 503, 529] {
            assert_eq!(then(&rejected(status, None)), retry, "{status}");
        }
        assert_eq!(then(&Failure::NotSent { reason: "connection refused".into(), local: false }), retry);
        let unencodable = Failure::NotSent { reason: "cannot encode the request".into(), local: true };
        assert_ne!(then(&unencodable), retry, "a request that cannot be encoded is not retried");
        assert_eq!(
            then(&rejected(400, None)),
            AfterFailure::FailOver,
            "a 400 is the request's, not a hiccup"
        );
        let bad = Failure::BadOutput { reason: "garbage".into(), raw: Default::default() };
        assert_eq!(then(&bad), AfterFailure::FailOver, "an unusable answer is not retried on its provider");
        let too_many = rejected(503, Some(Duration::from_secs(2)));
        assert_eq!(then(&too_many), AfterFailure::RetryAfter(Duration::from_secs(2)), "Retry-After honoured");
    }

    #[test]
    fn a_content_refusal_ends_the_job_unless_the_route_fails_over() {
        let refusal = Failure::Rejected {
            status: 400,
            retry_after: None,
            body: r#"{"error":{"code":"content_policy_violation"}}"#.into(),
        };
        let ends = Step::Fail { outcome: AttemptOutcome::Rejected, then: AfterFailure::Refused };
        assert_eq!(decide(LIVE, Observed::Failure(&refusal), POLICY), ends);
        let opted = RetryPolicy { content_fails_over: true, ..POLICY.clone() };
        let over = Step::Fail { outcome: AttemptOutcome::Rejected, then: AfterFailure::FailOver };
        assert_eq!(decide(LIVE, Observed::Failure(&refusal), &opted), over);
        assert_eq!(
            decide(LIVE, Observed::Failure(&rejected(400, None)), POLICY),
            over,
            "another 400 fails over"
        );
    }

    /// Beside a hedge, an attempt's outcome moves nothing but itself: a
    /// proven failure neither fails over nor retries (the other attempt
    /// is the job's way on), and what proves nothing leaves it `unknown`
    /// without ending the job.
    #[test]
    fn an_attempt_beside_a_hedge_settles_only_itself() {
        let policy = classes(&[429, 500], true);
        let beside = |failure: &Failure| decide(Phase::Hedged, Observed::Failure(failure), &policy);
        assert_eq!(
            decide(Phase::Hedged, Observed::Answer { breaks_contract: false }, &policy),
            Step::Deliver
        );
        assert_eq!(
            beside(&rejected(429, None)),
            Step::Fail { outcome: AttemptOutcome::Rejected, then: AfterFailure::Beside },
            "no retry while the other attempt runs"
        );
        let refusal = Failure::Rejected {
            status: 400,
            retry_after: None,
            body: r#"{"error":{"code":"content_policy_violation"}}"#.into(),
        };
        assert_eq!(
            beside(&refusal),
            Step::Fail { outcome: AttemptOutcome::Rejected, then: AfterFailure::Beside }
        );
        assert_eq!(beside(&unknown()), Step::Unknown { fail_job: false });
        assert_eq!(decide(Phase::Hedged, Observed::Silence, &policy), Step::Unknown { fail_job: false });
    }

    /// A cut the route lets another provider continue: whatever broke,
    /// the chain's next provider continues — but a whole answer that
    /// breaks the contract is not continued.
    #[test]
    fn a_continuable_cut_continues_on_the_next_provider() {
        let bad = Failure::BadOutput { reason: "diverged".into(), raw: Default::default() };
        assert_eq!(decide(Phase::Continuable, Observed::Failure(&unknown()), POLICY), Step::Continue);
        assert_eq!(decide(Phase::Continuable, Observed::Silence, POLICY), Step::Continue);
        assert_eq!(
            decide(Phase::Continuable, Observed::Failure(&bad), POLICY),
            Step::Fail { outcome: bad.class().into(), then: AfterFailure::Continue }
        );
        let violation = decide(Phase::Continuable, Observed::Answer { breaks_contract: true }, POLICY);
        assert_eq!(
            violation,
            Step::Fail { outcome: AttemptOutcome::ContractViolation, then: AfterFailure::FailJob }
        );
        assert_eq!(
            decide(Phase::Streamed, Observed::Failure(&unknown()), POLICY),
            Step::Unknown { fail_job: true }
        );
    }

    #[test]
    fn a_rejection_of_a_streamed_or_late_attempt_is_never_retried() {
        let too_many = rejected(429, None);
        assert_eq!(
            decide(Phase::Streamed, Observed::Failure(&too_many), POLICY),
            Step::Fail { outcome: AttemptOutcome::Rejected, then: AfterFailure::FailJob }
        );
        assert_eq!(
            decide(Phase::Late, Observed::Failure(&too_many), POLICY),
            Step::Fail { outcome: AttemptOutcome::Rejected, then: AfterFailure::Resume }
        );
    }
}
