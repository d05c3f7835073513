//! What people do to jobs by hand — through the HTTP admin API or the
//! operator CLI, which both call these (one code path for both).

use uuid::Uuid;

use super::driver::First;
use super::{Engine, EngineError};
use crate::jobs::{Attempt, AttemptState, Job, JobStatus, StartBlocked, may_start_attempt};
use crate::store::{StartOutcome, StoreError};

/// How an operator settles an `unknown` attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum Resolution {
    /// Given up on: its late answer may still arrive and is still honoured.
    Abandoned,
    /// Known to have failed (e.g. the provider's dashboard says so).
    Failed,
}

impl Resolution {
    pub fn state(self) -> AttemptState {
        match self {
            Resolution::Abandoned => AttemptState::Abandoned,
            Resolution::Failed => AttemptState::Failed,
        }
    }
}

impl std::str::FromStr for Resolution {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "abandoned" => Ok(Resolution::Abandoned),
            "failed" => Ok(Resolution::Failed),
            other => Err(format!("`{other}` is not a resolution (abandoned or failed)")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ManualStartError {
    /// The job's route is not configured (any more): there is no chain
    /// to start an attempt on.
    #[error("the job's route `{0}` is not configured")]
    RouteGone(String),
    #[error("a new attempt is blocked: {0:?}")]
    Blocked(StartBlocked),
    #[error("another gateway instance is driving this job")]
    Driven,
    #[error("provider `{0}` is not in the route's chain")]
    NotInChain(String),
    #[error("no provider of the chain is eligible: {}", .0.join("; "))]
    NoEligibleProvider(Vec<String>),
    /// A budget or rate limit refused the attempt's reservation.
    #[error(transparent)]
    Refused(crate::budgets::LimitRefusal),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl From<StoreError> for ManualStartError {
    fn from(err: StoreError) -> Self {
        ManualStartError::Engine(err.into())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("no such attempt")]
    NotFound,
    #[error("attempt {number} is `{state}`, not `unknown`: there is nothing to resolve")]
    NotUnknown { number: i32, state: AttemptState },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl From<StoreError> for ResolveError {
    fn from(err: StoreError) -> Self {
        ResolveError::Engine(err.into())
    }
}

impl Engine {
    /// `POST /v1/jobs/{id}/attempts`: starts the next attempt now — the next
    /// provider of the chain, or `provider`, or (after the chain was
    /// exhausted) a new pass from its first provider — refused while another
    /// attempt is `starting` or `unknown` (R4). The attempt row is committed
    /// before this returns; its call runs in the background.
    pub async fn start_attempt_by_hand(
        &self,
        job: &Job,
        provider: Option<String>,
    ) -> Result<Attempt, ManualStartError> {
        // The job's own state first: a job that can take no attempt says why,
        // whether or not its route is still configured.
        let attempts = self.store().attempts(job.id).await?;
        may_start_attempt(job.status, &attempts, 1).map_err(ManualStartError::Blocked)?;
        let route = self.route(&job.route).ok_or_else(|| ManualStartError::RouteGone(job.route.clone()))?;
        let request = super::PreparedRequest::from_stored(&job.request)
            .map_err(|err| ManualStartError::Engine(super::EngineError::Unsendable(err.to_string())))?;
        let provider = match provider {
            Some(name) if route.chain.contains(&name) => name,
            Some(name) => return Err(ManualStartError::NotInChain(name)),
            None => {
                // The next provider of the chain, or a new pass from its start.
                let mut positions = super::plan::remaining(&route, &attempts);
                if positions.is_empty() {
                    positions = (0..route.chain.len()).collect();
                }
                match self.choose_provider(&route, positions, &request).await? {
                    Ok(chosen) => chosen.name,
                    Err(refused) => return Err(ManualStartError::NoEligibleProvider(refused)),
                }
            }
        };
        if !self.claim(job.id).await? {
            return Err(ManualStartError::Driven);
        }
        let outgoing = Box::new(self.outgoing(job.payer(), &request, &provider));
        let reservation = &outgoing.reservation;
        let attempt = match self
            .store()
            .start_attempt(job.id, &provider, reservation, (1, None), self.now_ms())
            .await
        {
            Ok(StartOutcome::Started(attempt)) => attempt,
            refused => {
                let _ = self.store().release_lease(job.id, self.instance()).await;
                return Err(match refused {
                    Ok(StartOutcome::Blocked(blocked)) => ManualStartError::Blocked(blocked),
                    Ok(StartOutcome::Refused(refusal)) => {
                        self.record_refusal(&job.owner, &job.route, &refusal);
                        ManualStartError::Refused(refusal)
                    }
                    Ok(StartOutcome::Started(_)) => ManualStartError::Driven,
                    Err(err) => err.into(),
                });
            }
        };
        let engine = self.clone();
        let started = attempt.clone();
        self.tasks().spawn_drive(self.keep_config(async move {
            if let Err(err) = engine.drive_claimed(started.job_id, First::Started(started, outgoing)).await {
                tracing::error!(error = %err, "driving a manual attempt failed");
            }
        }));
        Ok(attempt)
    }

    /// Settles attempt `number` of a job, which must be `unknown`, and lets
    /// the job go on with its chain.
    pub async fn resolve(
        &self,
        job_id: Uuid,
        number: i32,
        resolution: Resolution,
        reason: &str,
        by: &str,
    ) -> Result<Attempt, ResolveError> {
        let attempt = self.store().attempt(job_id, number).await?.ok_or(ResolveError::NotFound)?;
        if attempt.state != AttemptState::Unknown {
            return Err(ResolveError::NotUnknown { number, state: attempt.state });
        }
        let detail = format!("resolved by {by}: {reason}");
        if !self.settle_open(&attempt, resolution.state(), &detail, Some(by)).await? {
            let now = self.store().attempt(job_id, number).await?.ok_or(ResolveError::NotFound)?;
            return Err(ResolveError::NotUnknown { number, state: now.state });
        }
        self.store().attempt(job_id, number).await?.ok_or(ResolveError::NotFound)
    }

    /// Settles every `unknown` attempt of one provider (an outage).
    pub async fn resolve_provider(
        &self,
        provider: &str,
        resolution: Resolution,
        reason: &str,
        by: &str,
    ) -> Result<Vec<Attempt>, EngineError> {
        let mut settled = Vec::new();
        for attempt in self.store().unknown_attempts_of(provider, i64::MAX).await? {
            match self.resolve(attempt.job_id, attempt.number, resolution, reason, by).await {
                Ok(done) => settled.push(done),
                Err(ResolveError::Engine(err)) => return Err(err),
                Err(_) => {} // settled meanwhile by its late answer
            }
        }
        Ok(settled)
    }

    /// `POST /v1/jobs/{id}/cancel`. An attempt still running keeps running
    /// (its provider cannot be recalled); its answer will not complete the
    /// job. `Err(status)` when the job was already terminal.
    pub async fn cancel(&self, job_id: Uuid) -> Result<Option<Job>, StoreError> {
        for _ in 0..5 {
            let Some(job) = self.store().job(job_id).await? else { return Ok(None) };
            if !job.status.can_become(JobStatus::Cancelled) {
                return Ok(Some(job));
            }
            if self
                .store()
                .set_job_status(job_id, job.status, JobStatus::Cancelled, None, self.now_ms())
                .await?
            {
                tracing::info!(%job_id, "job cancelled");
                self.notify(job_id);
                let message = "the job was cancelled".to_owned();
                self.streams().publish(
                    job_id,
                    super::StreamEvent::Failed { attempt: 0, code: "job-cancelled", message },
                );
                return self.store().job(job_id).await;
            }
        }
        self.store().job(job_id).await
    }
}
