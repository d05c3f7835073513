//! One engine entry per request: [`Engine::submit`] for an answer in one
//! piece, [`Engine::submit_streamed`] for a stream. A handler validates and
//! authenticates, makes one of these calls, and renders what it gets back.
//!
//! What passes through: a validated [`NewJob`] and how long the caller may
//! wait; back comes the job as it stands (created by this request, or the
//! one its key already named), or the conflict of a key bound to another
//! intent (R3). Errors say whether the job was committed: before the commit
//! nothing was stored and no provider called; after it, the job exists and
//! may have been sent, and only a retry under the same key is safe.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{DriveOutcome, Engine, EngineError, Subscription};
use crate::budgets::LimitRefusal;
use crate::jobs::{Attempt, Job, JobResult, JobStatus, NewJob};
use crate::store::{Created, StoreError};
use crate::telemetry;

/// What a request gets back.
pub enum Submission {
    /// The job of this request's key: new, or the same intent again.
    Accepted(Box<Submitted>),
    /// The key is bound to another intent (R3): the job it names.
    Conflict { job_id: Uuid },
    /// A budget or rate limit refused the new job: nothing was stored and
    /// nothing sent.
    Refused(LimitRefusal),
}

/// A job this request created or found, as it stood when the wait ended.
pub struct Submitted {
    pub job: Job,
    /// True when the key named this job before (a replay, not a creation).
    pub replayed: bool,
    /// The attempt inserted with a new job, for an answer given at once.
    pub first_attempt: Option<Attempt>,
    /// The number of the attempt that completed the job, when this
    /// request's own drive did (spares a read).
    pub winner: Option<i32>,
    /// Provider time spent by this request's own drive, when it ended
    /// within the wait: the request's overhead is its time minus this.
    pub provider_time: Option<Duration>,
    /// `submit_streamed` only: the live stream to follow, while the job runs.
    pub live: Option<Subscription>,
    /// The job's result as this request's own drive stored it, when that
    /// drive completed the job: answered from as it is, not decoded again
    /// from the job's row.
    pub result: Option<Box<JobResult>>,
    /// The room that result holds in the answer budget, given back when
    /// this is dropped, once the request has rendered its answer.
    pub room: intentgate_providers::Held,
}

/// Why a submission failed, and whether its job exists.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// Nothing was stored and no provider was called.
    #[error(transparent)]
    BeforeCommit(#[from] EngineError),
    /// The job is committed (and may have been sent to a provider); its
    /// state could not be read or waited for.
    #[error("job {job_id} exists, but: {source}")]
    AfterCommit { job_id: Uuid, source: StoreError },
}

/// What [`Engine::create_and_start`] found or began.
enum Started {
    New(Job, Option<Box<Attempt>>, DriveOutcome),
    Existing(Job),
    Refused(LimitRefusal),
}

impl Engine {
    /// Creates the job (or finds the one its key names) and starts a new
    /// one's drive, as one piece of work of its own: a job once committed
    /// is driven at once even if the request that asked is gone (its
    /// client hung up while the commit was in flight), never left with a
    /// `starting` attempt for the sweep to find.
    async fn create_and_start(&self, new: &Arc<NewJob>) -> Result<Started, EngineError> {
        let (engine, new) = (self.clone(), new.clone());
        let work = async move {
            Ok(match engine.create(&new).await? {
                (Created::New(job, attempt), kickoff) => {
                    let first = attempt.clone();
                    let drive = engine.spawn_drive_new(job.clone(), attempt, kickoff);
                    Started::New(job, first, drive)
                }
                (Created::Existing(job), _) => Started::Existing(job),
                (Created::Refused(refusal), _) => Started::Refused(refusal),
            })
        };
        // In the request's span, so the drive it starts joins the request's trace.
        let work = tracing::Instrument::instrument(work, tracing::Span::current());
        match self.inner.tasks.spawn_drive(work).await {
            Ok(Some(started)) => started,
            _ => Err(EngineError::Stopped),
        }
    }

    /// Creates the job (or finds the one its key names), drives a new one,
    /// and waits up to `wait` for it to settle.
    pub async fn submit(&self, new: &Arc<NewJob>, wait: Duration) -> Result<Submission, SubmitError> {
        let (job, first_attempt, drive) = match self.create_and_start(new).await? {
            Started::New(job, attempt, drive) => (job, attempt, drive),
            Started::Existing(job) => return self.replay(new, job, wait, false).await,
            Started::Refused(refusal) => return Ok(Submission::Refused(refusal)),
        };
        let mut submitted = Submitted::created(job, first_attempt.map(|attempt| *attempt));
        if !wait.is_zero() {
            let job_id = submitted.job.id;
            let (job, report, result) = self
                .wait_drive(submitted.job, drive, wait)
                .await
                .map_err(|source| SubmitError::AfterCommit { job_id, source })?;
            submitted.job = job;
            if let Some((result, room)) = result {
                submitted.result = Some(result);
                submitted.room = room;
            }
            if let Some(report) = report {
                submitted.winner = report.winner;
                submitted.provider_time = Some(report.provider_time);
            }
        }
        Ok(Submission::Accepted(Box::new(submitted)))
    }

    /// As [`Engine::submit`], for a streamed answer: the job's live stream
    /// is opened before its drive can publish to it, and a duplicate
    /// attaches to the live stream of a job still running.
    pub async fn submit_streamed(
        &self,
        new: &Arc<NewJob>,
        wait: Duration,
    ) -> Result<Submission, SubmitError> {
        let opened = self.streams().open(new.id);
        // A stream's readers follow the hub, not the drive's outcome.
        let (job, first_attempt) = match self.create_and_start(new).await {
            Ok(Started::New(job, attempt, _)) => (job, attempt),
            Ok(Started::Existing(job)) => {
                self.streams().discard(new.id);
                return self.replay(new, job, wait, true).await;
            }
            Ok(Started::Refused(refusal)) => {
                self.streams().discard(new.id);
                return Ok(Submission::Refused(refusal));
            }
            Err(err) => {
                self.streams().discard(new.id);
                return Err(err.into());
            }
        };
        let mut submitted = Submitted::created(job, first_attempt.map(|attempt| *attempt));
        match opened {
            Some(live) => submitted.live = Some(live),
            None => submitted.job = self.after_wait(submitted.job, wait).await?,
        }
        Ok(Submission::Accepted(Box::new(submitted)))
    }

    /// The job a key already named: the same intent is replayed (after
    /// waiting for it, or attached to its live stream), another is a
    /// conflict. Public for a caller that found the job itself (a request
    /// whose route is not configured any more, for which no job can be
    /// created).
    pub async fn replay(
        &self,
        new: &NewJob,
        job: Job,
        wait: Duration,
        stream: bool,
    ) -> Result<Submission, SubmitError> {
        if job.fingerprint != new.fingerprint {
            metrics::counter!(telemetry::JOBS, "result" => "conflicted").increment(1);
            return Ok(Submission::Conflict { job_id: job.id });
        }
        metrics::counter!(telemetry::JOBS, "result" => "replayed").increment(1);
        let live = if stream && is_running(&job) { self.streams().attach(job.id) } else { None };
        let job = if live.is_some() { job } else { self.after_wait(job, wait).await? };
        Ok(Submission::Accepted(Box::new(Submitted {
            job,
            replayed: true,
            first_attempt: None,
            winner: None,
            provider_time: None,
            live,
            result: None,
            room: intentgate_providers::Held::default(),
        })))
    }

    /// The job once it left `pending`/`running`, or as it is after `wait`.
    async fn after_wait(&self, job: Job, wait: Duration) -> Result<Job, SubmitError> {
        if wait.is_zero() || !is_running(&job) {
            return Ok(job);
        }
        let job_id = job.id;
        let settled = self.wait_settled(job_id, wait).await;
        Ok(settled.map_err(|source| SubmitError::AfterCommit { job_id, source })?.unwrap_or(job))
    }
}

impl Submitted {
    fn created(job: Job, first_attempt: Option<Attempt>) -> Submitted {
        metrics::counter!(telemetry::JOBS, "result" => "created").increment(1);
        tracing::debug!(job_id = %job.id, owner = %job.owner, route = %job.route, "job created");
        Submitted {
            job,
            replayed: false,
            first_attempt,
            winner: None,
            provider_time: None,
            live: None,
            result: None,
            room: intentgate_providers::Held::default(),
        }
    }
}

fn is_running(job: &Job) -> bool {
    matches!(job.status, JobStatus::Pending | JobStatus::Running)
}
