//! The engine drives jobs: lease → next provider of the route's chain →
//! attempt row `starting` → provider call → classify → settle by
//! compare-and-swap, fail over, or stop at `unknown`.
//!
//! What passes through this seam: job ids in (from the API, the operator CLI
//! and the recovery sweep); calls out to [`Store`] (every state change) and
//! to [`Provider`]s (every upstream request). Nothing here speaks HTTP to
//! clients, and no SQL is written here.
//!
//! One driver per job (R10): a driver holds the job's lease while it starts
//! and awaits attempts, renewing it; another instance (or a second task in
//! this one) that fails to claim the lease leaves the job alone. An `unknown`
//! attempt is awaited after its driver stopped — by the late-answer listener
//! in `late.rs` — and settles through the same compare-and-swap.
//!
//! [`Engine`] is one handle with its methods in the file of their part:
//!
//! | part | files |
//! |---|---|
//! | taking a job in: create or find it, start its drive, wait | `submit.rs`, `waiters.rs`, `streams.rs` |
//! | driving: the chain's next provider, an attempt's call, the hedge | `driver.rs`, `plan.rs`, `hedge.rs`, `stream_attempt.rs`, `request.rs` |
//! | concluding: what an outcome means, settling it, late answers | `decide.rs`, `conclude.rs`, `late.rs` |
//! | recovery: leases, the sweep, jobs other replicas settle | `leases.rs`, `recovery.rs`, `remote.rs` |
//! | which provider may serve: contracts, health (shared between replicas), balance | `gate.rs`, `health.rs`, `shared_health.rs`, `balance.rs` |
//! | money and limits: an attempt's body and reservation, stored limits, token counts | `outgoing.rs`, `spend.rs`, `spend_limits.rs`, `token_counts.rs` |
//! | operators: attempts by hand, settling unknown ones | `operator.rs` |
//! | plumbing: tasks, configuration snapshots, clock, metrics | `tasks.rs`, `configured.rs`, `clock.rs`, `series.rs`, `random.rs` |

mod clock;
mod conclude;
mod configured;
mod continuation;
pub use conclude::{CONTENT_REFUSED, OUTCOME_UNKNOWN};
mod balance;
mod decide;
mod driver;
mod gate;
mod gathered;
mod handover;
mod health;
mod hedge;
mod late;
mod leases;
mod operator;
mod outgoing;
mod plan;
mod random;
mod recovery;
mod remote;
mod request;
mod series;
mod shared_health;
mod spend;
mod spend_limits;
mod stream_attempt;
mod stream_claim;
mod stream_hedge;
mod streams;
mod submit;
mod tasks;
mod token_counts;
mod waiters;

use std::sync::Arc;
use std::time::Duration;

use intentgate_providers::{AnswerBudget, Held, Provider};
use uuid::Uuid;

pub use clock::{Clock, millis};
pub use conclude::Completed;
pub use decide::{AfterFailure, Observed, Phase, RetryPolicy, Step, decide};
use driver::Kickoff;
pub use gate::Gate;
pub use health::HealthState;
pub use operator::{ManualStartError, Resolution, ResolveError};
pub use request::{PreparedRequest, Work};
pub use spend::MeterUsage;
pub use streams::{StreamEvent, StreamHub, Subscription};
pub use submit::{Submission, SubmitError, Submitted};
pub use tasks::{Drained, Tasks};
pub use token_counts::{CountError, TokenCountSlots};
pub use waiters::Waiters;

use crate::config::{Config, ProviderConfig, RouteConfig};
use crate::jobs::{Attempt, AttemptState, Job, JobResult};
use crate::store::{Lease, Store, StoreError};
use configured::Configured;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("provider `{name}`: {message}")]
    Provider { name: String, message: String },
    #[error("contract suites: {0}")]
    Contracts(String),
    #[error(transparent)]
    ProviderSettings(#[from] crate::config::ProviderSettingsError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A job request no provider request can be made of (the door's checks
    /// let through nothing such; a row from elsewhere might be one).
    #[error("the request cannot be sent to a provider: {0}")]
    Unsendable(String),
    /// The engine is shutting down: it starts nothing new.
    #[error("the gateway is shutting down")]
    Stopped,
}

/// A cheap handle on the engine; clones share one state.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    /// The current configuration's providers, routes, gate and limits
    /// (see `configured.rs`); a reload swaps it.
    configured: std::sync::RwLock<Arc<Configured>>,
    instance: String,
    /// False for the operator CLI: a job it lets go on is driven by a
    /// serving instance's sweep, not by a process about to exit.
    drives: bool,
    lease_ttl: Duration,
    sweep_interval: Duration,
    waiters: Waiters,
    leases: leases::HeldLeases,
    streams: StreamHub,
    health: health::Health,
    /// The newest circuit change read from the store (`shared_health.rs`).
    shared_seen: shared_health::SharedSeen,
    /// Each provider's time to first byte, for least-latency pools.
    latencies: balance::Latencies,
    events: tokio::sync::broadcast::Sender<EngineEvent>,
    clock: Clock,
    tasks: Tasks,
    /// Bounds the token counts clients ask for (see `token_counts.rs`).
    token_counts: TokenCountSlots,
    /// The stored budgets and rate limits (see `spend_limits.rs`).
    spend_limits: spend_limits::LimitBook,
    /// Room for provider answers, shared by every provider of every
    /// configuration this engine builds (`[server] max_answer_bytes_held`).
    answers: AnswerBudget,
}

/// How the drive of a new job ended, for the request that created it:
/// [`Engine::wait_drive`].
pub(super) struct DriveOutcome(tokio::sync::oneshot::Receiver<DriveReport>);

/// What the drive of a new job reports when it ends.
#[derive(Debug)]
pub struct DriveReport {
    /// The job as the winning write left it, when this drive completed it.
    pub completed: Option<Completed>,
    /// The number of the attempt that completed it.
    pub winner: Option<i32>,
    /// Time spent waiting on providers during the drive.
    pub provider_time: Duration,
}

tokio::task_local! {
    /// Provider time of the drive running on this task (see `DriveReport`).
    static PROVIDER_TIME: std::cell::Cell<Duration>;
}

/// What the engine did, for whoever listens (tests wait on these instead of
/// sleeping; metrics count them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineEvent {
    /// An attempt reached `state` (anything but `starting`).
    AttemptSettled { job_id: Uuid, number: i32, provider: String, state: AttemptState },
    /// The contract gate refused a provider for a route (R9).
    ProviderRefused { route: String, provider: String },
    /// An attempt row was committed as `starting`.
    AttemptStarted { job_id: Uuid, number: i32, provider: String },
    /// The store was unreachable when the outcome of this attempt was to be
    /// recorded: the engine holds on to it and retries.
    Holding { job_id: Uuid, number: i32 },
    /// A request here waits on this job, which another process drives: the
    /// job's settle will be announced to this process.
    Awaiting { job_id: Uuid },
    /// Another process announced that this job left `pending`/`running`
    /// (PostgreSQL `NOTIFY`); this one's waiters on it were woken.
    Announced { job_id: Uuid },
}

/// A callable provider with the settings the engine needs beside it.
struct ProviderEntry {
    provider: Arc<Provider>,
    config: ProviderConfig,
    /// How reservations count its prompts.
    prompt_counter: std::sync::OnceLock<spend::PromptCounter>,
    series: Arc<series::ProviderSeries>,
}

impl Engine {
    pub fn new(config: &Config, store: Store) -> Result<Engine, EngineError> {
        let answers = AnswerBudget::new(config.server.max_answer_bytes_held);
        let configured = std::sync::RwLock::new(Arc::new(Configured::build(config, &answers)?));
        let instance = config.engine.instance_id.clone().unwrap_or_else(|| format!("gw-{}", Uuid::now_v7()));
        Ok(Engine {
            inner: Arc::new(Inner {
                store,
                configured,
                instance,
                drives: true,
                lease_ttl: config.engine.lease_ttl.into(),
                sweep_interval: config.engine.sweep_interval.into(),
                waiters: Waiters::default(),
                leases: leases::HeldLeases::default(),
                streams: StreamHub::default(),
                health: health::Health::default(),
                shared_seen: shared_health::SharedSeen::default(),
                latencies: balance::Latencies::default(),
                events: tokio::sync::broadcast::channel(4096).0,
                clock: Clock::default(),
                tasks: Tasks::default(),
                token_counts: TokenCountSlots::default(),
                spend_limits: spend_limits::LimitBook::default(),
                answers,
            }),
        })
    }

    /// Everything [`Engine::new`] refuses that needs no database and no
    /// network — providers (their API key variables, their clients) and the
    /// contract gate (its suites) — so `intentgate config check` refuses
    /// what `serve` would.
    pub fn preflight(config: &Config) -> Result<(), EngineError> {
        Configured::build(config, &AnswerBudget::default()).map(drop)
    }

    /// The room provider answers take, shared by every provider.
    pub fn answer_budget(&self) -> &AnswerBudget {
        &self.inner.answers
    }

    /// Makes `config` the configuration of every job created from now on:
    /// its providers built, its gate's records read, then swapped in whole.
    /// A job being driven keeps the snapshot it started with. Nothing is
    /// swapped if any part cannot be built.
    pub async fn reload(&self, config: &Config) -> Result<(), EngineError> {
        let configured = Configured::build(config, &self.inner.answers)?;
        configured.gate.reload(&self.inner.store).await?;
        let mut current = self.inner.configured.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = Arc::new(configured);
        Ok(())
    }

    /// The configuration this task works under: its drive's snapshot if it
    /// is a drive (or a task a drive started), else the current one.
    fn configured(&self) -> Arc<Configured> {
        Configured::of_this_drive().unwrap_or_else(|| {
            Arc::clone(&self.inner.configured.read().unwrap_or_else(std::sync::PoisonError::into_inner))
        })
    }

    /// `work` under this task's configuration, to be spawned: a drive or a
    /// listener keeps the snapshot it started with.
    fn keep_config<F: std::future::Future>(
        &self,
        work: F,
    ) -> impl std::future::Future<Output = F::Output> + use<F> {
        Configured::scope(self.configured(), work)
    }

    /// An engine for the operator CLI: same rules, but it never drives a
    /// job itself (see `resume`).
    pub fn operator(config: &Config, store: Store) -> Result<Engine, EngineError> {
        let mut engine = Engine::new(config, store)?;
        if let Some(inner) = Arc::get_mut(&mut engine.inner) {
            inner.drives = false;
        }
        Ok(engine)
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// The lease a job is created with: this instance drives it, and if this
    /// instance dies before it does, the recovery sweep of another will.
    pub fn new_job_lease(&self) -> Lease<'_> {
        Lease { owner: &self.inner.instance, expires_at_ms: self.lease_expiry() }
    }

    fn lease_expiry(&self) -> i64 {
        self.now_ms() + clock::millis(self.inner.lease_ttl)
    }

    /// The engine's time source (see [`Clock`]).
    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// Every task this engine started (see [`Tasks`]).
    pub fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }

    /// Drives the job in the background, starting with the route's next
    /// provider (or `start_with`).
    pub fn spawn_drive(&self, job_id: Uuid, start_with: Option<String>) {
        let engine = self.clone();
        self.inner.tasks.spawn_drive(self.keep_config(async move {
            if let Err(err) = engine.drive(job_id, start_with).await {
                tracing::error!(%job_id, error = %err, "driving the job failed; the recovery sweep will retry");
            }
        }));
    }

    /// Drives a job this instance has just created: it was inserted already
    /// leased to this instance, so no claim is needed. The returned
    /// [`DriveOutcome`] reports how the drive ended.
    fn spawn_drive_new(&self, job: Job, attempt: Option<Box<Attempt>>, kickoff: Kickoff) -> DriveOutcome {
        let engine = self.clone();
        let job_id = job.id;
        let (report, outcome) = tokio::sync::oneshot::channel();
        let drive = async move {
            let completed = match engine
                .drive_claimed(job_id, driver::First::New(Box::new(job), attempt, kickoff))
                .await
            {
                Ok(completed) => completed,
                Err(err) => {
                    tracing::error!(%job_id, error = %err, "driving the job failed; the recovery sweep will retry");
                    None
                }
            };
            let provider_time = PROVIDER_TIME.with(std::cell::Cell::get);
            let winner = completed.as_ref().map(|done| done.attempt_number);
            let _ = report.send(DriveReport { completed, winner, provider_time });
        };
        let drive = PROVIDER_TIME.scope(std::cell::Cell::new(Duration::ZERO), drive);
        self.inner.tasks.spawn_drive(self.keep_config(drive));
        DriveOutcome(outcome)
    }

    /// The job once settled, or as it is after `timeout`, for the request
    /// that created it: from its own drive when that completed it (no
    /// read), else as [`Engine::wait_settled`] finds it. With the drive's
    /// report when the drive ended within `timeout`.
    async fn wait_drive(
        &self,
        job: Job,
        drive: DriveOutcome,
        timeout: Duration,
    ) -> Result<(Job, Option<DriveReport>, Option<(Box<JobResult>, Held)>), StoreError> {
        let started = tokio::time::Instant::now();
        let mut report = tokio::time::timeout(timeout, drive.0).await.ok().and_then(Result::ok);
        if let Some(completed) = report.as_mut().and_then(|report| report.completed.take()) {
            return Ok((*completed.job, report, Some((completed.result, completed.room))));
        }
        let left = timeout.saturating_sub(started.elapsed());
        let job = self.wait_settled(job.id, left).await?.unwrap_or(job);
        Ok((job, report, None))
    }

    /// Waits until the job is no longer `pending` or `running` (R4's
    /// `Prefer: wait`), woken by the transition itself; `None` if the job
    /// does not exist.
    pub async fn wait_settled(&self, job_id: Uuid, timeout: Duration) -> Result<Option<Job>, StoreError> {
        // A job this process drives is announced here by its drive; one
        // driven elsewhere is announced through the store, once asked.
        let mark = || async move {
            if self.inner.leases.holds(job_id) {
                return Ok(false);
            }
            let marked = self.store().mark_awaited(job_id, self.instance()).await?;
            if marked {
                let _ = self.inner.events.send(EngineEvent::Awaiting { job_id });
            }
            Ok(marked)
        };
        self.inner.waiters.wait_settled(&self.inner.store, job_id, timeout, mark).await
    }

    /// The failover gate: contract records and runtime shape checks.
    pub fn gate(&self) -> Arc<Gate> {
        Arc::clone(&self.configured().gate)
    }

    /// Providers whose circuit is open now (cooling down or probing).
    pub fn unhealthy_providers(&self) -> Vec<String> {
        self.inner.health.unhealthy()
    }

    /// `provider`'s circuit as it stands (for `GET /v1/routes` and the console).
    pub fn provider_health(&self, provider: &str) -> health::HealthState {
        self.inner.health.state(provider, self.now_ms())
    }

    /// Records what a call to `provider` said about its health.
    pub(super) fn observe_health(&self, provider: &str, sign: health::Sign) {
        let Some(entry) = self.provider(provider) else { return };
        let Some(change) = self.inner.health.observe(provider, &entry.config.health, sign, self.now_ms())
        else {
            return;
        };
        if let health::Change::Opened { .. } = change {
            tracing::warn!(provider, failures = entry.config.health.failures, cooldown = %entry.config.health.cooldown,
                "provider unhealthy: passed over while it cools down");
            metrics::counter!(crate::telemetry::PROVIDER_OPENED, "provider" => provider.to_owned())
                .increment(1);
        }
        self.share_circuit(provider, change);
    }

    /// Whether `provider` may be sent the next attempt now.
    pub(super) fn health_of(&self, provider: &str) -> health::Verdict {
        match self.provider(provider) {
            Some(entry) => self.inner.health.check(provider, &entry.config.health, self.now_ms()),
            None => health::Verdict::Healthy,
        }
    }

    /// The live stream of a streamed job (see [`StreamHub`]).
    pub fn streams(&self) -> &StreamHub {
        &self.inner.streams
    }

    /// `Some(n)` while jobs settled by other processes wake this one's
    /// waiters at once (the `n`th `LISTEN` connection is up), `None` while
    /// they are found by polling (SQLite always; PostgreSQL while the
    /// listener reconnects).
    pub fn announcements(&self) -> tokio::sync::watch::Receiver<Option<u64>> {
        self.inner.waiters.announcements()
    }

    /// Every event from now on. A receiver that falls more than 4096 events
    /// behind loses the oldest.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        self.inner.events.subscribe()
    }

    /// Adds provider time to the drive running on this task, if any.
    fn add_provider_time(spent: Duration) {
        let _ = PROVIDER_TIME.try_with(|total| total.set(total.get() + spent));
    }

    fn notify(&self, job_id: Uuid) {
        self.inner.waiters.notify(job_id);
    }

    fn emit_settled(&self, attempt: &Attempt, state: AttemptState) {
        let _ = self.inner.events.send(EngineEvent::AttemptSettled {
            job_id: attempt.job_id,
            number: attempt.number,
            provider: attempt.provider.clone(),
            state,
        });
    }

    fn route(&self, name: &str) -> Option<Arc<RouteConfig>> {
        self.configured().routes.get(name).cloned()
    }

    fn provider(&self, name: &str) -> Option<Arc<ProviderEntry>> {
        self.configured().providers.get(name).cloned()
    }

    /// `name`'s answer series: its entry's, or registered now for a
    /// provider a reload removed while one of its attempts was open.
    fn series(&self, name: &str) -> Arc<series::ProviderSeries> {
        self.provider(name)
            .map_or_else(|| Arc::new(series::ProviderSeries::new(name)), |entry| entry.series.clone())
    }
}
