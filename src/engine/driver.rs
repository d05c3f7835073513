//! Driving one job through its route's chain while holding its lease.

use std::time::Duration;

use intentgate_providers::{CallContext, Failure};
use uuid::Uuid;

use super::conclude::{Completed, LateCall, Next, Seen};
use super::continuation::{Continuation, Cut};
use super::decide::Phase;
use super::outgoing::Outgoing;
use super::{Engine, EngineError, PreparedRequest, Work, plan};
use crate::budgets::LimitRefusal;
use crate::config::RouteConfig;
use crate::jobs::{Attempt, AttemptOutcome, AttemptState, IdempotencyKey, Job, JobFailure, NewJob};
use crate::store::{Created, Lease, StartOutcome, StoreError};
use crate::telemetry;
use tracing::Instrument;

/// Where a driver begins.
pub(super) enum First {
    /// The next provider of the chain after the last attempt.
    Plan,
    /// A job this instance has just inserted: the driver starts from it
    /// (and from its attempt 1, if inserted with it) without reading back.
    New(Box<Job>, Option<Box<Attempt>>, Kickoff),
    /// This provider (a manual attempt).
    Provider(String),
    /// An attempt already started (and committed) by the caller, and what
    /// it sends.
    Started(Attempt, Box<Outgoing>),
    /// The chain's next provider, continuing what the client received of a
    /// cut stream (`continuation.rs`).
    Continue(Box<Cut>),
}

/// An attempt started, what it sends, and the cut stream it continues.
pub(super) type Begun = (Attempt, Box<Outgoing>, Option<Continuation>);

/// How a job created by [`Engine::create`] starts: its request as the
/// door parsed it, the providers the gate refused before its attempt 1,
/// and what that attempt sends (when one was inserted with the job).
pub(super) struct Kickoff {
    request: PreparedRequest,
    refused: Vec<String>,
    outgoing: Option<Box<Outgoing>>,
}

/// The gate's choice among positions of a chain (see `pick_provider`).
pub(super) struct Pick {
    pub provider: Option<String>,
    /// The provider was let through as its circuit's probe.
    pub probe: bool,
    /// `(provider, reason)` of every provider passed over.
    pub refused: Vec<(String, String)>,
}

/// A plain provider call under way, and its attempt.
pub(super) struct RunningCall {
    pub attempt: Attempt,
    pub call: tokio::task::JoinHandle<Option<intentgate_providers::Outcome>>,
    pub sent_at: tokio::time::Instant,
    /// Its `attempt_timeout` from when it was sent.
    pub deadline: tokio::time::Instant,
    pub offer: super::conclude::Offered,
    /// Its attempt's span (the one it was spawned in).
    pub span: tracing::Span,
}

/// What a provider call task ended with, as the executor sees it.
fn seen_of(
    joined: Result<Option<intentgate_providers::Outcome>, tokio::task::JoinError>,
    offer: super::conclude::Offered,
) -> Seen {
    match joined {
        Ok(Some(Ok(response))) => Seen::Answer { response: Box::new(response), streamed: false, offer },
        Ok(Some(Err(failure))) => Seen::Failure(failure),
        Ok(None) => Seen::Failure(Failure::Unknown { reason: "the gateway is shutting down".into() }),
        Err(join) => {
            Seen::Failure(Failure::Unknown { reason: format!("the provider call task failed: {join}") })
        }
    }
}

pub(super) fn call_context(attempt: &Attempt) -> CallContext {
    let number = u32::try_from(attempt.number).unwrap_or(u32::MAX);
    let traceparent = crate::traces::current_parent();
    CallContext { job_id: attempt.job_id, attempt: number, expect_json: false, traceparent }
}

/// The provider [`Engine::choose_provider`] chose, the refusals on the way
/// to it, and whether it was let through as its circuit's probe.
pub(super) struct Chosen {
    pub name: String,
    pub refused: Vec<String>,
    pub probe: bool,
}

impl Engine {
    /// R2 + R4 at once for a new intent: inserts the job unless its key
    /// exists and, when the gate lets a provider of the chain serve it,
    /// attempt 1 on that provider in the same transaction. A job created
    /// here is leased to this instance; [`Engine::spawn_drive_new`] drives
    /// it from the [`Kickoff`] (which the other answers do not need).
    pub(super) async fn create(&self, new: &NewJob) -> Result<(Created, Kickoff), EngineError> {
        let request = PreparedRequest::new(&new.request, new.canonical.len())
            .map_err(|err| EngineError::Unsendable(err.to_string()))?;
        let pick = match self.route(new.route()) {
            Some(route) => {
                let pick = self.pick_provider(&route, (0..route.chain.len()).collect(), &request).await?;
                Some((route, pick))
            }
            None => None,
        };
        let first_provider = pick.as_ref().and_then(|(_, pick)| pick.provider.as_deref());
        let outgoing =
            first_provider.map(|provider| Box::new(self.outgoing(new.payer(), &request, provider)));
        let first = first_provider.zip(outgoing.as_ref().map(|outgoing| &outgoing.reservation));
        let open_attempts = pick.as_ref().map_or(1, |(route, _)| route.open_attempts());
        let created =
            self.store().create_job(new, self.new_job_lease(), first, open_attempts, self.now_ms()).await;
        // A probe that sends nothing (a duplicate, a refusal, a failed write) is given back.
        if let Some((_, pick)) = pick.as_ref().filter(|(_, pick)| pick.probe)
            && !matches!(created, Ok(Created::New(_, Some(_))))
            && let Some(provider) = &pick.provider
        {
            self.inner.health.release_probe(provider);
        }
        let created = created?;
        let refused = match (&created, &pick) {
            (Created::New(_, Some(_)), Some((route, pick))) => self.report_refused(route, &pick.refused),
            (Created::Refused(refusal), _) => {
                self.record_refusal(&new.owner, new.route(), refusal);
                Vec::new()
            }
            _ => Vec::new(),
        };
        Ok((created, Kickoff { request, refused, outgoing }))
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
        self.store().claim_lease(job_id, lease, self.now_ms()).await
    }

    /// Drives with the lease already held, renewing it, and releases it at
    /// the end. Returns the job if this drive completed it.
    pub(super) async fn drive_claimed(
        &self,
        job_id: Uuid,
        first: First,
    ) -> Result<Option<Completed>, EngineError> {
        let held = self.hold_lease(job_id);
        let result = self.drive_chain(job_id, first).await;
        drop(held);
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

    /// Returns how the drive ended: `Next::Completed` when the job's result
    /// is written (and its lease with it released), `Next::Stop` otherwise.
    async fn drive_chain(&self, job_id: Uuid, first: First) -> Result<Next, EngineError> {
        // Every provider the gate refused during this drive, for the job's
        // error if the chain runs out (not only the last selection's).
        let mut refused_so_far: Vec<String> = Vec::new();
        // The request is parsed once per drive: handed over by the door for
        // a job this instance created, read from the first row otherwise.
        let (mut next, mut just_created, mut request) = match first {
            First::New(job, attempt, Kickoff { request, refused, outgoing }) => {
                refused_so_far = refused;
                let next = self.first_of_new(&job, attempt, outgoing, &request);
                (next, Some(*job), Some(request))
            }
            other => (other, None, None),
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
            // A job that succeeded, failed or was cancelled is not driven
            // on (a new attempt on a failed job starts by hand, which moves
            // it to `running` first).
            if job.status.is_terminal() {
                if let First::Started(attempt, _) = &next {
                    let reason = format!("the job became `{}` before this attempt was sent", job.status);
                    self.settle_failed(attempt, AttemptState::Starting, AttemptOutcome::NotSent, &reason)
                        .await?;
                }
                return Ok(Next::Stop);
            }
            let Some(route) = self.route(&job.route) else {
                let reason = format!("route `{}` is no longer configured", job.route);
                return self.cannot_drive(&job, &next, reason).await;
            };
            let request = match request.take().map_or_else(|| PreparedRequest::from_stored(&job.request), Ok)
            {
                Ok(parsed) => &*request.insert(parsed),
                Err(err) => {
                    let reason = format!("the stored request cannot be sent: {err}");
                    return self.cannot_drive(&job, &next, reason).await;
                }
            };
            let first = std::mem::replace(&mut next, First::Plan);
            let Some((attempt, outgoing, continuation)) =
                self.next_attempt(&job, &route, request, first, is_fresh, &mut refused_so_far).await?
            else {
                return Ok(Next::Stop);
            };
            let span = self.attempt_started(&attempt, request);
            let running =
                self.run_attempt(&job, &route, request, (attempt, *outgoing), (retries, continuation));
            match running.instrument(span).await? {
                done @ (Next::Stop | Next::Completed(_) | Next::Wait) => return Ok(done),
                Next::FailOver => retries = 0,
                Next::Continue(cut) => {
                    retries = 0;
                    next = First::Continue(cut);
                }
                Next::Retry { provider, after } => {
                    retries += 1;
                    tokio::time::sleep(after).await;
                    next = First::Provider(provider);
                }
            }
        }
    }

    /// Where the drive of a job this instance just created begins: its
    /// attempt 1 with what it sends, when one was inserted with it.
    fn first_of_new(
        &self,
        job: &Job,
        attempt: Option<Box<Attempt>>,
        outgoing: Option<Box<Outgoing>>,
        request: &PreparedRequest,
    ) -> First {
        match (attempt, outgoing) {
            (Some(attempt), Some(outgoing)) => First::Started(*attempt, outgoing),
            // Never inserted without its provider's body: rendered here if so.
            (Some(attempt), None) => {
                let outgoing = self.outgoing(job.payer(), request, &attempt.provider);
                First::Started(*attempt, Box::new(outgoing))
            }
            (None, _) => First::Plan,
        }
    }

    /// Announces an attempt about to be sent and opens its span.
    fn attempt_started(&self, attempt: &Attempt, request: &PreparedRequest) -> tracing::Span {
        let _ = self.inner.events.send(super::EngineEvent::AttemptStarted {
            job_id: attempt.job_id,
            number: attempt.number,
            provider: attempt.provider.clone(),
        });
        let span = tracing::info_span!(
            "attempt",
            job_id = %attempt.job_id,
            attempt = attempt.number,
            provider = %attempt.provider,
            outcome = tracing::field::Empty,
        );
        self.describe_attempt(&span, attempt, request);
        span
    }

    /// The job cannot be driven (its route is gone, its stored request
    /// unreadable): nothing is sent, the attempt about to start (if any) is
    /// settled unsent, and the job fails with `reason`.
    async fn cannot_drive(&self, job: &Job, next: &First, reason: String) -> Result<Next, EngineError> {
        if let First::Started(attempt, _) = next {
            self.settle_failed(attempt, AttemptState::Starting, AttemptOutcome::NotSent, &reason).await?;
        }
        let error = match next {
            First::Started(attempt, _) => JobFailure::of_attempt(reason, attempt.number),
            _ => JobFailure::new(reason),
        };
        self.fail_job(job.id, &error).await?;
        Ok(Next::Stop)
    }

    /// The drive's next attempt, started: the one `first` started already,
    /// one continuing a cut stream (`continuation.rs`), one on the provider
    /// `first` names (a retry, a manual attempt) or on the chain's next
    /// eligible one. `None` when the drive stops here: an attempt is open,
    /// the chain is exhausted (the job failed), or a limit refused the
    /// attempt.
    async fn next_attempt(
        &self,
        job: &Job,
        route: &RouteConfig,
        request: &PreparedRequest,
        first: First,
        is_fresh: bool,
        refused_so_far: &mut Vec<String>,
    ) -> Result<Option<Begun>, EngineError> {
        let job_id = job.id;
        let chosen = match first {
            First::Started(attempt, outgoing) => return Ok(Some((attempt, outgoing, None))),
            First::Continue(cut) => {
                return self.next_continuation(job, route, request, *cut, refused_so_far).await;
            }
            First::Provider(name) => Chosen { name, refused: Vec::new(), probe: false },
            _ => {
                let attempts = if is_fresh { Vec::new() } else { self.store().attempts(job_id).await? };
                if let Some(open) = attempts.iter().find(|a| a.state.is_open()) {
                    // Only one driver holds the lease, but say it here too: an
                    // attempt in flight is never counted as a failed link of the chain.
                    tracing::debug!(%job_id, attempt = open.number, state = %open.state, "an attempt is open; not driving on");
                    if !attempts.iter().any(|a| a.state == AttemptState::Starting) {
                        // A hedged job resumed when one of its unknown
                        // attempts was settled: it still waits on another.
                        self.wait_on_unknown(job_id).await?;
                    }
                    return Ok(None);
                }
                let remaining = plan::remaining(route, &attempts);
                match self.choose_provider(route, remaining, request).await? {
                    Ok(chosen) => {
                        refused_so_far.extend(chosen.refused.iter().cloned());
                        if let Some(last) = attempts.last().filter(|last| last.provider != chosen.name) {
                            metrics::counter!(telemetry::FAILOVERS, "from" => last.provider.clone(), "to" => chosen.name.clone())
                                .increment(1);
                        }
                        chosen
                    }
                    Err(refused) => {
                        refused_so_far.extend(refused);
                        self.fail_exhausted(job, &attempts, std::mem::take(refused_so_far)).await?;
                        return Ok(None);
                    }
                }
            }
        };
        let outgoing = Box::new(self.outgoing(job.payer(), request, &chosen.name));
        let started = self.start_chosen(job, &chosen, &outgoing, (1, None), refused_so_far).await?;
        Ok(started.map(|attempt| (attempt, outgoing, None)))
    }

    /// Starts an attempt on the provider `chosen`, in one of `open_attempts`
    /// lanes (continuing attempt `continues`' cut stream, if it names one);
    /// `None` when none started: another is open (blocked), or a limit
    /// refused it (the job failed).
    pub(super) async fn start_chosen(
        &self,
        job: &Job,
        chosen: &Chosen,
        outgoing: &Outgoing,
        (open_attempts, continues): (i32, Option<i32>),
        refused_so_far: &mut Vec<String>,
    ) -> Result<Option<Attempt>, EngineError> {
        let lanes = (open_attempts, continues);
        let started = self
            .store()
            .start_attempt(job.id, &chosen.name, &outgoing.reservation, lanes, self.now_ms())
            .await;
        if !matches!(started, Ok(StartOutcome::Started(_))) {
            self.sent_nothing(chosen);
        }
        Ok(match started? {
            StartOutcome::Started(attempt) => Some(attempt),
            StartOutcome::Blocked(blocked) => {
                tracing::debug!(job_id = %job.id, ?blocked, "no new attempt");
                None
            }
            StartOutcome::Refused(refusal) => {
                self.end_chain_refused(job, &chosen.name, &refusal, std::mem::take(refused_so_far)).await?;
                None
            }
        })
    }

    /// A budget or rate limit refused the chain's next attempt: nothing was
    /// sent, and the job fails with that reason (a later attempt by hand
    /// may go ahead once the window resets).
    async fn end_chain_refused(
        &self,
        job: &Job,
        provider: &str,
        refusal: &LimitRefusal,
        refused: Vec<String>,
    ) -> Result<(), EngineError> {
        self.record_refusal(&job.owner, &job.route, refusal);
        let attempts = self.store().attempts(job.id).await?;
        let error = JobFailure {
            code: Some(refusal.code().to_owned()),
            refused,
            ..JobFailure::new(format!("no attempt on `{provider}`: {refusal}")).with_attempts(&attempts)
        };
        self.fail_job(job.id, &error).await
    }

    /// Provider time of one call: its latency histogram (for calls that
    /// ended) and the job's overhead accounting.
    pub(super) fn record_call_time(&self, attempt: &Attempt, spent: Duration, ended: bool) {
        if ended {
            self.series(&attempt.provider).latency.record(spent.as_secs_f64());
            self.inner.latencies.observe(&attempt.provider, spent, self.now_ms());
        }
        Engine::add_provider_time(spent);
    }

    /// The first provider in `positions` of the chain that the gate lets
    /// serve the route, with the refusals on the way to it; `Err` with every
    /// refusal when none does. A refused
    /// provider is skipped, loudly — never a silent fallback (R9).
    pub(super) async fn choose_provider(
        &self,
        route: &RouteConfig,
        positions: Vec<usize>,
        request: &PreparedRequest,
    ) -> Result<Result<Chosen, Vec<String>>, EngineError> {
        let pick = self.pick_provider(route, positions, request).await?;
        let refused = self.report_refused(route, &pick.refused);
        Ok(match pick.provider {
            Some(name) => Ok(Chosen { name, refused, probe: pick.probe }),
            None => Err(refused),
        })
    }

    /// Nothing was sent to the provider `chosen` named (its attempt was
    /// blocked or refused): a probe it was let through as goes back, so the
    /// next request probes instead of waiting out a cool-down more.
    pub(super) fn sent_nothing(&self, chosen: &Chosen) {
        if chosen.probe {
            self.inner.health.release_probe(&chosen.name);
        }
    }

    /// What [`Engine::choose_provider`] decides, without telling anyone yet
    /// (a duplicate request must not log its would-be job's refusals).
    /// `request` is the job's stored request: a provider whose dialect
    /// cannot express it (`n` > 1 on Anthropic, say) is passed over with the
    /// reason, never sent the request with the field dropped.
    pub(super) async fn pick_provider(
        &self,
        route: &RouteConfig,
        positions: Vec<usize>,
        request: &PreparedRequest,
    ) -> Result<Pick, EngineError> {
        self.gate().refresh(self.store()).await?;
        let positions = super::balance::order(route, positions, &self.inner.latencies);
        let mut refused = Vec::new();
        // Providers passed over only for their health: the first of them
        // serves when no healthy one can (see `health`).
        let mut cooling: Option<String> = None;
        for index in positions {
            let name = &route.chain[index];
            if let Some(verdict) = self.gate().check(route, name, index).filter(|v| !v.is_eligible()) {
                refused.push((name.clone(), verdict.reason().to_owned()));
                continue;
            }
            if let Some(reason) = self.cannot_express(name, request) {
                refused.push((name.clone(), format!("its dialect cannot express this request: {reason}")));
                continue;
            }
            if let Some(reason) = self.too_long_for(name, request) {
                refused.push((name.clone(), reason));
                continue;
            }
            let probe = match self.health_of(name) {
                super::health::Verdict::CoolingDown(reason) => {
                    refused.push((name.clone(), reason));
                    cooling.get_or_insert_with(|| name.clone());
                    continue;
                }
                super::health::Verdict::Probe => true,
                super::health::Verdict::Healthy => false,
            };
            return Ok(Pick { provider: Some(name.clone()), probe, refused });
        }
        if let Some(name) = cooling {
            refused.retain(|(refused, _)| *refused != name);
            return Ok(Pick { provider: Some(name), probe: false, refused });
        }
        Ok(Pick { provider: None, probe: false, refused })
    }

    /// Why provider `name` cannot be sent `request`, if it cannot.
    fn cannot_express(&self, name: &str, request: &PreparedRequest) -> Option<String> {
        let entry = self.provider(name)?;
        request.work.cannot_express(&entry.provider)
    }

    /// Why provider `name`'s context window cannot hold `request`, if so.
    /// A request whose stored bytes (plus the provider's overrides and a
    /// margin for the dialect's own fields) fit the window fits in tokens
    /// too, a token being at least a byte: only a long one is counted.
    fn too_long_for(&self, name: &str, request: &PreparedRequest) -> Option<String> {
        const DIALECT_MARGIN: usize = 4096;
        let entry = self.provider(name)?;
        let window = u64::from(entry.config.context_window?);
        let overrides = serde_json::to_string(&entry.config.request).map_or(0, |text| text.len());
        let bytes = request.canonical_len + overrides + DIALECT_MARGIN;
        let completion = request.completion_limit().unwrap_or(0);
        if u64::try_from(bytes).unwrap_or(u64::MAX).saturating_add(completion) <= window {
            return None;
        }
        self.context_refusal(request, name)
    }

    /// Logs, counts and announces the gate's refusals; returns them as the
    /// job's error lists them.
    pub(super) fn report_refused(&self, route: &RouteConfig, refused: &[(String, String)]) -> Vec<String> {
        refused
            .iter()
            .map(|(name, reason)| {
                tracing::warn!(route = %route.name, provider = %name, reason, "provider passed over");
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

    /// One attempt, whose row is already `starting`: send what it was
    /// started with, then conclude what its outcome means — raced against
    /// hedges if its route hedges and the request is not streamed (see
    /// `hedge.rs`).
    async fn run_attempt(
        &self,
        job: &Job,
        route: &RouteConfig,
        request: &PreparedRequest,
        (mut attempt, outgoing): (Attempt, Outgoing),
        (retries, continuation): (u32, Option<Continuation>),
    ) -> Result<Next, EngineError> {
        let live = Phase::Live { retries, collectable: !IdempotencyKey::was_minted(&job.idempotency_key) };
        let Some(entry) = self.provider(&attempt.provider) else {
            let failure = Failure::NotSent {
                reason: format!("provider `{}` is not configured", attempt.provider),
                local: true,
            };
            return self.conclude(&attempt, &route.name, live, Seen::Failure(failure)).await;
        };
        if !self.hand_over(&mut attempt).await? {
            return Ok(Next::Stop);
        }
        if request.stream
            && let Outgoing { work: Work::Chat(chat), body, .. } = outgoing
        {
            let provider = entry.provider.clone();
            if let Some(hedge) = route.hedge.filter(|hedge| hedge.streams && continuation.is_none()) {
                let first = (attempt, provider, chat, body);
                return self.race_streams((job, route, request), first, hedge, live).await;
            }
            let context = call_context(&attempt);
            let sending = (provider, (chat, body));
            return self.run_stream_attempt(route, attempt, sending, context, (live, continuation)).await;
        }
        let running = self.spawn_call(route, entry.provider.clone(), outgoing, attempt);
        match route.hedge {
            Some(hedge) => self.race(job, route, request, running, hedge, live).await,
            None => {
                let (attempt, seen) = self.await_call(route, running).await;
                self.conclude(&attempt, &route.name, live, seen).await
            }
        }
    }

    /// The attempt span's GenAI attributes (see `traces.rs`).
    pub(super) fn describe_attempt(
        &self,
        span: &tracing::Span,
        attempt: &Attempt,
        request: &PreparedRequest,
    ) {
        let operation = match request.work {
            Work::Chat(_) => "chat",
            Work::Embed(_) => "embeddings",
        };
        let (provider, model) = match self.provider(&attempt.provider) {
            Some(entry) => (crate::traces::provider_name(entry.config.dialect), entry.config.model.clone()),
            None => ("unknown", String::new()),
        };
        crate::traces::attempt_started(
            span,
            (attempt.job_id, attempt.number.into()),
            operation,
            provider,
            &model,
        );
    }

    /// Sends a plain (not streamed) call of `attempt` in the background.
    pub(super) fn spawn_call(
        &self,
        route: &RouteConfig,
        provider: std::sync::Arc<intentgate_providers::Provider>,
        outgoing: Outgoing,
        attempt: Attempt,
    ) -> RunningCall {
        let offer = match &outgoing.work {
            Work::Chat(chat) => self.gate().offer(&route.name, chat),
            Work::Embed(_) => None,
        };
        let context = call_context(&attempt);
        let call = self.tasks().spawn_watch(async move { outgoing.call(&provider, &context).await });
        let sent_at = tokio::time::Instant::now();
        RunningCall {
            attempt,
            call,
            sent_at,
            deadline: sent_at + Duration::from(route.attempt_timeout),
            offer,
            span: tracing::Span::current(),
        }
    }

    /// Waits for `running` until its `attempt_timeout` and says what was
    /// seen of it.
    pub(super) async fn await_call(&self, route: &RouteConfig, mut running: RunningCall) -> (Attempt, Seen) {
        tokio::select! {
            joined = &mut running.call => self.ended(running, joined),
            () = tokio::time::sleep_until(running.deadline) => self.timed_out(route, running),
        }
    }

    /// `running`'s call ended with `joined`.
    pub(super) fn ended(
        &self,
        running: RunningCall,
        joined: Result<Option<intentgate_providers::Outcome>, tokio::task::JoinError>,
    ) -> (Attempt, Seen) {
        self.record_call_time(&running.attempt, running.sent_at.elapsed(), true);
        (running.attempt, seen_of(joined, running.offer))
    }

    /// `running` reached its `attempt_timeout`: its call goes on, and its
    /// answer may yet come.
    pub(super) fn timed_out(&self, route: &RouteConfig, running: RunningCall) -> (Attempt, Seen) {
        self.record_call_time(&running.attempt, running.sent_at.elapsed(), false);
        let reason = format!("no answer within the route's attempt_timeout of {}", route.attempt_timeout);
        let call = Some(LateCall { call: running.call, streamed: false, offer: running.offer });
        (running.attempt, Seen::Silence { reason, call })
    }

    pub(super) async fn fail_exhausted(
        &self,
        job: &Job,
        attempts: &[Attempt],
        refused: Vec<String>,
    ) -> Result<(), EngineError> {
        let reason = if refused.is_empty() {
            "every provider of the route's chain failed"
        } else {
            "no provider left in the route's chain that failed over may go to (see `refused`)"
        };
        let error = JobFailure::new(reason).with_attempts(attempts).with_refused(refused);
        self.fail_job(job.id, &error).await
    }
}
