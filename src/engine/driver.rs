//! Driving one job through its route's chain while holding its lease.

use std::time::Duration;

use intentgate_providers::{CallContext, ChatResponse, Failure, Outcome};
use serde_json::json;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::{Engine, EngineError, plan};
use crate::config::RouteConfig;
use crate::jobs::{Attempt, AttemptState, Job, JobRequest, JobStatus, NewJob, now_ms};
use crate::store::{CasOutcome, Created, Lease, Settle, StartOutcome, StoreError};
use crate::telemetry;
use tracing::Instrument;

/// The outcome recorded for an answer that breaks the route's contract.
pub(super) const CONTRACT_VIOLATION: &str = "contract_violation";

/// Where a driver begins.
pub(super) enum First {
    /// The next provider of the chain after the last attempt.
    Plan,
    /// A job this instance has just inserted: the driver starts from it
    /// (and from its attempt 1, if inserted with it) without reading back.
    New(Job, Kickoff),
    /// This provider (a manual attempt).
    Provider(String),
    /// An attempt already started (and committed) by the caller.
    Started(Attempt),
}

/// What [`Engine::create`] did.
pub enum Creation {
    /// A new job, committed (with its attempt 1 when the gate allowed one):
    /// hand it to [`Engine::spawn_drive_new`].
    New(Job, Kickoff),
    /// The owner's key already named this job.
    Existing(Job),
}

/// How a job created by [`Engine::create`] starts: its attempt 1, inserted
/// with it, and the providers the gate refused before that one.
pub struct Kickoff {
    attempt: Option<Box<Attempt>>,
    refused: Vec<String>,
}

impl Kickoff {
    /// The attempt inserted with the job, if any.
    pub fn attempt(&self) -> Option<&Attempt> {
        self.attempt.as_deref()
    }
}

/// The gate's choice among positions of a chain (see `pick_provider`).
pub(super) struct Pick {
    pub provider: Option<String>,
    /// `(provider, reason)` of every provider passed over.
    pub refused: Vec<(String, String)>,
}

/// A job this drive completed: the job as the winning write left it, and
/// the number of the attempt that won.
#[derive(Debug)]
pub struct Completed {
    pub job: Box<Job>,
    pub attempt_number: i32,
}

/// What the driver does after one attempt.
pub(super) enum Next {
    /// The job is settled, or waits on an unknown attempt: stop driving.
    Stop,
    /// This attempt's answer won the compare-and-swap, which also released
    /// the lease: stop driving, nothing left to release.
    Completed(Completed),
    /// Proven failure: the next provider of the chain, at once.
    FailOver,
    /// A retryable rejection: the same provider again after a pause.
    Retry { provider: String, after: Duration },
}

impl Engine {
    /// R2 + R4 at once for a new intent: inserts the job unless its key
    /// exists and, when the gate lets a provider of the chain serve it,
    /// attempt 1 on that provider in the same transaction. A job created
    /// here is leased to this instance; [`Engine::spawn_drive_new`] drives it.
    pub async fn create(&self, new: &NewJob) -> Result<Creation, EngineError> {
        let pick = match self.route(&new.route) {
            Some(route) => Some((route, self.pick_provider(route, 0..route.chain.len()).await?)),
            None => None,
        };
        let first_provider = pick.as_ref().and_then(|(_, pick)| pick.provider.as_deref());
        let created = self.store().create_job(new, self.new_job_lease(), first_provider, now_ms()).await?;
        Ok(match created {
            Created::Existing(job) => Creation::Existing(job),
            Created::New(job) => Creation::New(job, Kickoff { attempt: None, refused: Vec::new() }),
            Created::Started(job, attempt) => {
                let refused = match &pick {
                    Some((route, pick)) => self.report_refused(route, &pick.refused),
                    None => Vec::new(),
                };
                Creation::New(job, Kickoff { attempt: Some(Box::new(attempt)), refused })
            }
        })
    }

    /// Claims the job's lease and drives it; returns at once if another
    /// driver holds the lease.
    pub async fn drive(&self, job_id: Uuid, start_with: Option<String>) -> Result<(), EngineError> {
        if !self.claim(job_id).await? {
            tracing::debug!(%job_id, "another driver holds the lease");
            return Ok(());
        }
        self.drive_claimed(job_id, start_with.map_or(First::Plan, First::Provider)).await.map(drop)
    }

    pub(super) async fn claim(&self, job_id: Uuid) -> Result<bool, StoreError> {
        let lease = Lease { owner: self.instance(), expires_at_ms: self.lease_expiry() };
        self.store().claim_lease(job_id, lease, now_ms()).await
    }

    /// Drives with the lease already held, renewing it, and releases it at
    /// the end. Returns the job if this drive completed it.
    pub(super) async fn drive_claimed(
        &self,
        job_id: Uuid,
        first: First,
    ) -> Result<Option<Completed>, EngineError> {
        let renewer = self.spawn_lease_renewer(job_id);
        let result = self.drive_chain(job_id, first).await;
        renewer.abort();
        if !matches!(result, Ok(Next::Completed(_)))
            && let Err(err) = self.store().release_lease(job_id, self.instance()).await
        {
            tracing::warn!(%job_id, error = %err, "cannot release the lease; it will expire");
        }
        result.map(|next| match next {
            Next::Completed(completed) => Some(completed),
            _ => None,
        })
    }

    fn spawn_lease_renewer(&self, job_id: Uuid) -> JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            let period = engine.inner.lease_ttl / 3;
            loop {
                tokio::time::sleep(period).await;
                let lease = Lease { owner: engine.instance(), expires_at_ms: engine.lease_expiry() };
                match engine.store().renew_lease(job_id, lease).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(%job_id, "lease lost to another instance");
                        return;
                    }
                    Err(err) => tracing::warn!(%job_id, error = %err, "cannot renew the lease"),
                }
            }
        })
    }

    /// Returns how the drive ended: `Next::Completed` when the job's result
    /// is written (and its lease with it released), `Next::Stop` otherwise.
    async fn drive_chain(&self, job_id: Uuid, first: First) -> Result<Next, EngineError> {
        // Every provider the gate refused during this drive, for the job's
        // error if the chain runs out (not only the last selection's).
        let mut refused_so_far: Vec<String> = Vec::new();
        let (mut next, mut just_created) = match first {
            First::New(job, Kickoff { attempt, refused }) => {
                refused_so_far = refused;
                (attempt.map_or(First::Plan, |attempt| First::Started(*attempt)), Some(job))
            }
            other => (other, None),
        };
        let mut retries = 0u32;
        loop {
            let fresh = just_created.take();
            let is_fresh = fresh.is_some();
            let job = match fresh {
                Some(job) => job,
                None => match self.store().job(job_id).await? {
                    Some(job) => job,
                    None => return Ok(Next::Stop),
                },
            };
            if matches!(job.status, JobStatus::Succeeded | JobStatus::Cancelled) {
                return Ok(Next::Stop);
            }
            let Some(route) = self.route(&job.route).cloned() else {
                let error = json!({"reason": format!("route `{}` is no longer configured", job.route)});
                self.fail_job(&job, &error.to_string()).await?;
                return Ok(Next::Stop);
            };
            let attempt = match std::mem::replace(&mut next, First::Plan) {
                First::Started(attempt) => attempt,
                first => {
                    let provider = match first {
                        First::Provider(name) => name,
                        _ => {
                            let attempts =
                                if is_fresh { Vec::new() } else { self.store().attempts(job_id).await? };
                            match self
                                .choose_provider(&route, plan::remaining(&route.chain, &attempts))
                                .await?
                            {
                                Ok((name, refused)) => {
                                    refused_so_far.extend(refused);
                                    if let Some(last) = attempts.last().filter(|last| last.provider != name) {
                                        metrics::counter!(
                                            telemetry::FAILOVERS,
                                            "from" => last.provider.clone(),
                                            "to" => name.clone()
                                        )
                                        .increment(1);
                                    }
                                    name
                                }
                                Err(refused) => {
                                    refused_so_far.extend(refused);
                                    self.fail_exhausted(&job, &attempts, &refused_so_far).await?;
                                    return Ok(Next::Stop);
                                }
                            }
                        }
                    };
                    match self.store().start_attempt(job_id, &provider, now_ms()).await? {
                        StartOutcome::Started(attempt) => attempt,
                        StartOutcome::Blocked(blocked) => {
                            tracing::debug!(%job_id, ?blocked, "no new attempt");
                            return Ok(Next::Stop);
                        }
                    }
                }
            };
            let _ = self.inner.events.send(super::EngineEvent::AttemptStarted {
                job_id,
                number: attempt.number,
                provider: attempt.provider.clone(),
            });
            let span = tracing::info_span!(
                "attempt",
                job_id = %job_id,
                attempt = attempt.number,
                provider = %attempt.provider,
                outcome = tracing::field::Empty,
            );
            match self.run_attempt(&job, &route, attempt, retries).instrument(span).await? {
                done @ (Next::Stop | Next::Completed(_)) => return Ok(done),
                Next::FailOver => retries = 0,
                Next::Retry { provider, after } => {
                    retries += 1;
                    tokio::time::sleep(after).await;
                    next = First::Provider(provider);
                }
            }
        }
    }

    /// Provider time of one call: its latency histogram (for calls that
    /// ended) and the job's overhead accounting.
    pub(super) fn record_call_time(&self, attempt: &Attempt, spent: Duration, ended: bool) {
        if ended {
            metrics::histogram!(telemetry::PROVIDER_LATENCY, "provider" => attempt.provider.clone())
                .record(spent.as_secs_f64());
        }
        self.add_provider_time(attempt.job_id, spent);
    }

    /// The first provider in `positions` of the chain that the gate lets
    /// serve the route, with the refusals on the way to it; `Err` with every
    /// refusal when none does. A refused
    /// provider is skipped, loudly — never a silent fallback (R9).
    pub(super) async fn choose_provider(
        &self,
        route: &RouteConfig,
        positions: std::ops::Range<usize>,
    ) -> Result<Result<(String, Vec<String>), Vec<String>>, EngineError> {
        let pick = self.pick_provider(route, positions).await?;
        let refused = self.report_refused(route, &pick.refused);
        Ok(match pick.provider {
            Some(name) => Ok((name, refused)),
            None => Err(refused),
        })
    }

    /// What [`Engine::choose_provider`] decides, without telling anyone yet
    /// (a duplicate request must not log its would-be job's refusals).
    pub(super) async fn pick_provider(
        &self,
        route: &RouteConfig,
        positions: std::ops::Range<usize>,
    ) -> Result<Pick, EngineError> {
        self.gate().refresh(self.store()).await?;
        let mut refused = Vec::new();
        for index in positions {
            let name = &route.chain[index];
            match self.gate().check(route, name, index) {
                Some(verdict) if !verdict.is_eligible() => {
                    refused.push((name.clone(), verdict.reason().to_owned()))
                }
                _ => return Ok(Pick { provider: Some(name.clone()), refused }),
            }
        }
        Ok(Pick { provider: None, refused })
    }

    /// Logs, counts and announces the gate's refusals; returns them as the
    /// job's error lists them.
    pub(super) fn report_refused(&self, route: &RouteConfig, refused: &[(String, String)]) -> Vec<String> {
        refused
            .iter()
            .map(|(name, reason)| {
                tracing::warn!(route = %route.name, provider = %name, reason, "provider refused by the contract gate");
                let _ = self.inner.events.send(super::EngineEvent::ProviderRefused {
                    route: route.name.clone(),
                    provider: name.clone(),
                });
                metrics::counter!(telemetry::FAILOVERS_REFUSED, "route" => route.name.clone(), "provider" => name.clone())
                    .increment(1);
                format!("{name}: {reason}")
            })
            .collect()
    }

    /// One attempt, whose row is already `starting`: call, classify, settle.
    async fn run_attempt(
        &self,
        job: &Job,
        route: &RouteConfig,
        attempt: Attempt,
        retries: u32,
    ) -> Result<Next, EngineError> {
        let Some(entry) = self.provider(&attempt.provider) else {
            self.settle_failed(
                &attempt,
                "not_sent",
                &format!("provider `{}` is not configured", attempt.provider),
            )
            .await?;
            return Ok(Next::FailOver);
        };
        let request: JobRequest = serde_json::from_str(&job.request)
            .map_err(|err| StoreError::Corrupt(format!("job {} request: {err}", job.id)))?;
        let chat = super::to_chat_request(&request)
            .map_err(|err| StoreError::Corrupt(format!("job {} request: {err}", job.id)))?;
        let context = CallContext {
            job_id: job.id,
            attempt: u32::try_from(attempt.number).unwrap_or(u32::MAX),
            expect_json: false,
        };
        if request.params.get("stream").and_then(serde_json::Value::as_bool) == Some(true) {
            return self.run_stream_attempt(job, route, attempt, chat, context, retries).await;
        }
        let provider = entry.provider.clone();
        let call_started = std::time::Instant::now();
        let mut call: JoinHandle<Outcome> = tokio::spawn(async move { provider.chat(&chat, &context).await });
        let attempt_timeout: Duration = route.attempt_timeout.into();
        let joined = tokio::select! {
            joined = &mut call => Some(joined),
            () = tokio::time::sleep(attempt_timeout) => None,
        };
        self.record_call_time(&attempt, call_started.elapsed(), joined.is_some());
        match joined {
            Some(Ok(Ok(response))) => {
                if let Err(violations) = self.gate().check_output(&job.route, &response.text) {
                    let detail = format!("the answer breaks the route's contract: {}", violations.join("; "));
                    self.settle_failed(&attempt, CONTRACT_VIOLATION, &detail).await?;
                    return Ok(Next::FailOver);
                }
                match self.deliver(&attempt, &response, false).await? {
                    CasOutcome::Won(job) => {
                        Ok(Next::Completed(Completed { job, attempt_number: attempt.number }))
                    }
                    _ => Ok(Next::Stop),
                }
            }
            Some(Ok(Err(failure))) if failure.may_fail_over() => {
                self.settle_failed(&attempt, failure.class().as_str(), &failure.to_string()).await?;
                Ok(self.after_failure(route, &attempt, &failure, retries))
            }
            Some(Ok(Err(unknown))) => {
                self.declare_unknown(job, &attempt, &unknown.to_string()).await?;
                self.spawn_late_listener(attempt, None, false);
                Ok(Next::Stop)
            }
            Some(Err(join)) => {
                self.declare_unknown(job, &attempt, &format!("the provider call task failed: {join}"))
                    .await?;
                self.spawn_late_listener(attempt, None, false);
                Ok(Next::Stop)
            }
            None => {
                let reason =
                    format!("no answer within the route's attempt_timeout of {}", route.attempt_timeout);
                self.declare_unknown(job, &attempt, &reason).await?;
                self.spawn_late_listener(attempt, Some(call), false);
                Ok(Next::Stop)
            }
        }
    }

    /// A 429 is retried on the same provider, backing off and honouring
    /// `Retry-After`, up to the route's `retries`; anything else proven
    /// fails over at once.
    pub(super) fn after_failure(
        &self,
        route: &RouteConfig,
        attempt: &Attempt,
        failure: &Failure,
        retries: u32,
    ) -> Next {
        let Failure::Rejected { status, retry_after, .. } = failure else { return Next::FailOver };
        // Only "too many requests" is worth waiting for: a 5xx provider is
        // better replaced by the next one at once.
        let retryable = *status == 429;
        if !retryable || retries >= route.retries {
            return Next::FailOver;
        }
        let max_wait: Duration = route.max_retry_wait.into();
        let backoff =
            Duration::from(route.retry_backoff).saturating_mul(2u32.saturating_pow(retries)).min(max_wait);
        let after = match retry_after {
            Some(wait) if *wait > max_wait => return Next::FailOver,
            Some(wait) => (*wait).max(backoff),
            None => backoff,
        };
        tracing::info!(job_id = %attempt.job_id, attempt = attempt.number, provider = %attempt.provider, status, ?after, "retrying after rejection");
        Next::Retry { provider: attempt.provider.clone(), after }
    }

    /// R6: an answer is offered to the job through the compare-and-swap.
    /// For a streamed answer, `raw` is the JSON list of its chunks, stored
    /// in the result so that a replay sends them again byte for byte.
    pub(super) async fn deliver(
        &self,
        attempt: &Attempt,
        response: &ChatResponse,
        streamed: bool,
    ) -> Result<CasOutcome, EngineError> {
        let chunks: Option<serde_json::Value> =
            if streamed { serde_json::from_slice(&response.raw).ok() } else { None };
        let result = json!({
            "chunks": chunks,
            "provider": attempt.provider,
            "model": response.model,
            "text": response.text,
            "json": response.json,
            "usage": response.usage,
            "finish_reason": response.finish_reason,
        });
        let raw = String::from_utf8_lossy(&response.raw);
        let outcome = self.store().complete_job(attempt, &result.to_string(), &raw, now_ms()).await?;
        metrics::counter!(telemetry::ATTEMPTS, "provider" => attempt.provider.clone(), "outcome" => "ok")
            .increment(1);
        tracing::Span::current().record("outcome", "ok");
        match &outcome {
            CasOutcome::Won(_) => {
                tracing::debug!(job_id = %attempt.job_id, attempt = attempt.number, provider = %attempt.provider, "job succeeded");
            }
            CasOutcome::Superseded { winner } => {
                metrics::counter!(telemetry::RACES_LOST).increment(1);
                tracing::warn!(
                    job_id = %attempt.job_id, attempt = attempt.number, attempt_id = %attempt.id,
                    winner = ?winner, "race lost: another attempt completed the job first; this result is kept on the attempt only"
                );
            }
            CasOutcome::NotDeliverable => {
                tracing::warn!(job_id = %attempt.job_id, attempt = attempt.number, "answer of an attempt already settled as failed; ignored");
            }
        }
        self.notify(attempt.job_id);
        match outcome {
            CasOutcome::Won(_) => self.emit_settled(attempt, AttemptState::Succeeded),
            CasOutcome::Superseded { .. } => self.emit_settled(attempt, AttemptState::Superseded),
            CasOutcome::NotDeliverable => {}
        }
        Ok(outcome)
    }

    pub(super) async fn settle_failed(
        &self,
        attempt: &Attempt,
        outcome: &str,
        detail: &str,
    ) -> Result<bool, EngineError> {
        let settle = Settle {
            from: AttemptState::Starting,
            to: AttemptState::Failed,
            outcome: Some(outcome),
            detail: Some(detail),
            response: None,
            resolved_by: None,
        };
        tracing::info!(job_id = %attempt.job_id, attempt = attempt.number, provider = %attempt.provider, outcome, detail, "attempt failed");
        let settled = self.store().settle_attempt(attempt.id, settle, now_ms()).await?;
        if settled {
            metrics::counter!(telemetry::ATTEMPTS, "provider" => attempt.provider.clone(), "outcome" => outcome.to_owned())
                .increment(1);
            tracing::Span::current().record("outcome", outcome);
            self.emit_settled(attempt, AttemptState::Failed);
        }
        Ok(settled)
    }

    /// R5: the attempt may have done the work. It and its job become
    /// `unknown`, and nothing else starts until it is settled.
    pub(super) async fn declare_unknown(
        &self,
        job: &Job,
        attempt: &Attempt,
        reason: &str,
    ) -> Result<(), EngineError> {
        let settle = Settle {
            from: AttemptState::Starting,
            to: AttemptState::Unknown,
            outcome: Some("unknown"),
            detail: Some(reason),
            response: None,
            resolved_by: None,
        };
        tracing::warn!(job_id = %job.id, attempt = attempt.number, provider = %attempt.provider, reason, "attempt outcome unknown");
        if self.store().settle_attempt(attempt.id, settle, now_ms()).await? {
            self.store()
                .set_job_status(job.id, JobStatus::Running, JobStatus::Unknown, None, now_ms())
                .await?;
            metrics::counter!(telemetry::ATTEMPTS, "provider" => attempt.provider.clone(), "outcome" => "unknown")
                .increment(1);
            tracing::Span::current().record("outcome", "unknown");
            self.emit_settled(attempt, AttemptState::Unknown);
        }
        let event = super::StreamEvent::Failed {
            attempt: attempt.number,
            code: "outcome-unknown",
            message: reason.to_owned(),
        };
        self.streams().publish(job.id, event);
        self.notify(job.id);
        Ok(())
    }

    async fn fail_exhausted(
        &self,
        job: &Job,
        attempts: &[Attempt],
        refused: &[String],
    ) -> Result<(), EngineError> {
        let reasons: Vec<_> = attempts
            .iter()
            .map(|a| json!({"attempt": a.number, "provider": a.provider, "state": a.state, "outcome": a.outcome, "detail": a.detail}))
            .collect();
        let reason = if refused.is_empty() {
            "every provider of the route's chain failed"
        } else {
            "no provider left in the route's chain that failed over may go to (see `refused`)"
        };
        let error = json!({"reason": reason, "attempts": reasons, "refused": refused});
        self.fail_job(job, &error.to_string()).await
    }

    /// Fails the job from whatever state it is in now (the caller's copy
    /// may predate its last transition).
    pub(super) async fn fail_job(&self, job: &Job, error: &str) -> Result<(), EngineError> {
        let status = self.store().job(job.id).await?.map_or(job.status, |current| current.status);
        if status.can_become(JobStatus::Failed) {
            self.store().set_job_status(job.id, status, JobStatus::Failed, Some(error), now_ms()).await?;
            tracing::warn!(job_id = %job.id, error, "job failed");
        }
        self.streams().publish(
            job.id,
            super::StreamEvent::Failed { attempt: 0, code: "upstream-failed", message: error.to_owned() },
        );
        self.notify(job.id);
        Ok(())
    }
}
