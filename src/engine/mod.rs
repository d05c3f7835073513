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

mod driver;
mod gate;
mod late;
mod operator;
mod plan;
mod recovery;
mod request;
mod stream_attempt;
mod streams;
mod waiters;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use intentgate_providers::Provider;
use uuid::Uuid;

pub use driver::{Completed, Creation, Kickoff};
pub use gate::Gate;
pub use operator::{ManualStartError, Resolution, ResolveError};
pub use request::to_chat_request;
pub use streams::{StreamEvent, StreamHub, Subscription};
pub use waiters::Waiters;

use crate::config::{Config, ProviderConfig, RouteConfig};
use crate::jobs::{Attempt, AttemptState, Job, now_ms};
use crate::store::{Lease, Store, StoreError};

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
}

/// A cheap handle on the engine; clones share one state.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    providers: HashMap<String, ProviderEntry>,
    routes: HashMap<String, RouteConfig>,
    instance: String,
    /// False for the operator CLI: a job it lets go on is driven by a
    /// serving instance's sweep, not by a process about to exit.
    drives: bool,
    lease_ttl: Duration,
    sweep_interval: Duration,
    waiters: Waiters,
    streams: StreamHub,
    gate: Gate,
    /// Provider time spent on jobs whose request is measuring its overhead.
    provider_time: std::sync::Mutex<HashMap<Uuid, Duration>>,
    events: tokio::sync::broadcast::Sender<EngineEvent>,
}

/// How the drive of a new job ended, for the request that created it:
/// [`Engine::wait_drive`].
pub struct DriveOutcome(tokio::sync::oneshot::Receiver<Completed>);

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
}

/// A callable provider with the settings the engine needs beside it.
struct ProviderEntry {
    provider: Arc<Provider>,
    config: ProviderConfig,
}

impl Engine {
    pub fn new(config: &Config, store: Store) -> Result<Engine, EngineError> {
        let mut providers = HashMap::new();
        for provider in &config.providers {
            let built = Provider::new(provider.to_provider_config()?).map_err(|err| {
                EngineError::Provider { name: provider.name.clone(), message: err.to_string() }
            })?;
            providers.insert(
                provider.name.clone(),
                ProviderEntry { provider: Arc::new(built), config: provider.clone() },
            );
        }
        let routes = config.routes.iter().map(|route| (route.name.clone(), route.clone())).collect();
        let gate = Gate::load(config).map_err(EngineError::Contracts)?;
        let instance = config.engine.instance_id.clone().unwrap_or_else(|| format!("gw-{}", Uuid::now_v7()));
        Ok(Engine {
            inner: Arc::new(Inner {
                store,
                providers,
                routes,
                instance,
                drives: true,
                lease_ttl: config.engine.lease_ttl.into(),
                sweep_interval: config.engine.sweep_interval.into(),
                waiters: Waiters::default(),
                streams: StreamHub::default(),
                gate,
                provider_time: std::sync::Mutex::default(),
                events: tokio::sync::broadcast::channel(4096).0,
            }),
        })
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
        now_ms() + i64::try_from(self.inner.lease_ttl.as_millis()).unwrap_or(i64::MAX / 2)
    }

    /// Drives the job in the background, starting with the route's next
    /// provider (or `start_with`).
    pub fn spawn_drive(&self, job_id: Uuid, start_with: Option<String>) {
        let engine = self.clone();
        tokio::spawn(async move {
            if let Err(err) = engine.drive(job_id, start_with).await {
                tracing::error!(%job_id, error = %err, "driving the job failed; the recovery sweep will retry");
            }
        });
    }

    /// Drives a job this instance has just created: it was inserted already
    /// leased to this instance, so no claim is needed. The returned
    /// [`DriveOutcome`] yields the job if this drive completes it.
    pub fn spawn_drive_new(&self, job: Job, kickoff: Kickoff) -> DriveOutcome {
        let engine = self.clone();
        let job_id = job.id;
        let (report, outcome) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            match engine.drive_claimed(job_id, driver::First::New(job, kickoff)).await {
                Ok(Some(completed)) => {
                    let _ = report.send(completed);
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::error!(%job_id, error = %err, "driving the job failed; the recovery sweep will retry");
                }
            }
        });
        DriveOutcome(outcome)
    }

    /// The job once settled, or as it is after `timeout`, for the request
    /// that created it: from its own drive when that completed it (no
    /// read), else as [`Engine::wait_settled`] finds it. With the winning
    /// attempt's number when the drive knows it.
    pub async fn wait_drive(
        &self,
        job: Job,
        drive: DriveOutcome,
        timeout: Duration,
    ) -> Result<(Job, Option<i32>), StoreError> {
        let started = tokio::time::Instant::now();
        if let Ok(Ok(completed)) = tokio::time::timeout(timeout, drive.0).await {
            return Ok((*completed.job, Some(completed.attempt_number)));
        }
        let left = timeout.saturating_sub(started.elapsed());
        let job = self.wait_settled(job.id, left).await?.unwrap_or(job);
        Ok((job, None))
    }

    /// Waits until the job is no longer `pending` or `running` (R4's
    /// `Prefer: wait`), woken by the transition itself; `None` if the job
    /// does not exist.
    pub async fn wait_settled(&self, job_id: Uuid, timeout: Duration) -> Result<Option<Job>, StoreError> {
        self.inner.waiters.wait_settled(&self.inner.store, job_id, timeout).await
    }

    /// The failover gate: contract records and runtime shape checks.
    pub fn gate(&self) -> &Gate {
        &self.inner.gate
    }

    /// The live stream of a streamed job (see [`StreamHub`]).
    pub fn streams(&self) -> &StreamHub {
        &self.inner.streams
    }

    /// Every event from now on. A receiver that falls more than 4096 events
    /// behind loses the oldest.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        self.inner.events.subscribe()
    }

    /// Starts adding up the provider time of `job_id`, for a request that
    /// reports its own overhead (request time minus provider time).
    pub fn track_provider_time(&self, job_id: Uuid) {
        if let Ok(mut map) = self.inner.provider_time.lock() {
            map.insert(job_id, Duration::ZERO);
        }
    }

    /// The provider time added up since `track_provider_time`, and stops.
    pub fn take_provider_time(&self, job_id: Uuid) -> Duration {
        self.inner.provider_time.lock().ok().and_then(|mut map| map.remove(&job_id)).unwrap_or_default()
    }

    fn add_provider_time(&self, job_id: Uuid, spent: Duration) {
        if let Ok(mut map) = self.inner.provider_time.lock()
            && let Some(total) = map.get_mut(&job_id)
        {
            *total += spent;
        }
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

    fn route(&self, name: &str) -> Option<&RouteConfig> {
        self.inner.routes.get(name)
    }

    fn provider(&self, name: &str) -> Option<&ProviderEntry> {
        self.inner.providers.get(name)
    }
}
