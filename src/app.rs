//! Assembling a running gateway from a [`Config`]: store (connected and
//! migrated), principals, router, listener. `intentgate serve` and the
//! integration tests start the gateway the same way.

use std::net::SocketAddr;

use intentgate_providers::sim::{SimHandle, Simulator};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::api::{self, AppState};
use crate::auth::{MissingKeyEnv, Principals};
use crate::config::Config;
use crate::engine::Engine;
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Opening the database failed; `key` says where its URL came from (the
    /// file, or the environment variable that overrode it).
    #[error("{key}: {source}")]
    Database { key: String, source: StoreError },
    #[error(transparent)]
    Principals(#[from] MissingKeyEnv),
    #[error(transparent)]
    Engine(#[from] crate::engine::EngineError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
}

/// A gateway serving on a bound socket, stopped by [`RunningGateway::shutdown`].
pub struct RunningGateway {
    pub addr: SocketAddr,
    pub store: Store,
    pub engine: Engine,
    /// The in-process simulator, when enabled; dropping it stops it.
    pub simulator: Option<SimHandle>,
    /// The configuration the doors read; [`api::reload::reload`] swaps it.
    pub live: api::Live,
    stopper: Stopper,
    task: JoinHandle<std::io::Result<()>>,
}

/// Begins a graceful shutdown of a running gateway; cheap to clone.
#[derive(Clone)]
pub struct Stopper {
    shutdown: watch::Sender<bool>,
    unready_delay: std::time::Duration,
}

impl Stopper {
    /// Not ready at once (`/readyz` 503), still serving for `unready_delay`
    /// so a load balancer moves traffic away, then the listener closes and
    /// the drain begins (see [`RunningGateway::shutdown`]).
    pub async fn stop(&self, engine: &Engine) {
        engine.tasks().begin_drain();
        if !self.unready_delay.is_zero() {
            tracing::info!(delay = ?self.unready_delay, "shutdown: not ready; still serving while the load balancer moves away");
            tokio::time::sleep(self.unready_delay).await;
        }
        tracing::info!("shutdown: closing the listener; in-flight requests finish");
        let _ = self.shutdown.send(true);
    }
}

/// What the drain starts with: one line, the tasks it waits for (their
/// counts are returned).
fn report_drain_start(tasks: &crate::engine::Tasks, bound: std::time::Duration) -> (usize, usize) {
    let (drives, listeners, _) = tasks.running();
    tracing::info!(
        drives,
        late_answer_listeners = listeners,
        "shutdown: no new connections, in-flight requests answered; draining {drives} drive(s) and \
         {listeners} late-answer listener(s) for up to {bound:?}"
    );
    (drives, listeners)
}

/// One line for the drain's end, and one per attempt handed over.
fn report_drain(
    drained: &crate::engine::Drained,
    bound: std::time::Duration,
    took: std::time::Duration,
    (drives, listeners): (usize, usize),
) {
    for what in &drained.listeners_cut {
        tracing::warn!(
            "shutdown: {what} is still unknown after the drain ({bound:?}); handed to the other replicas' \
             recovery sweep (its lease expires; max_execution settles it)"
        );
    }
    if drained.drives_cut > 0 {
        tracing::warn!(
            drives = drained.drives_cut,
            "shutdown: drives still running after the drain were stopped; their leases expire and another \
             replica's recovery sweep takes them over"
        );
    }
    if drained.listeners_cut.is_empty() && drained.drives_cut == 0 {
        tracing::info!(
            took = ?took,
            drives,
            late_answer_listeners = listeners,
            "shutdown: drained; every drive and late answer settled"
        );
    }
}

impl RunningGateway {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops being ready, then accepting; lets in-flight requests finish
    /// and drains drives and late-answer listeners up to `[server]
    /// drain_timeout` (what is open then goes to the recovery sweep of
    /// another replica); and waits.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.stopper.stop(&self.engine).await;
        self.task.await.unwrap_or_else(|join| Err(std::io::Error::other(join)))
    }

    /// Resolves when the server stops on its own (it should not).
    pub async fn wait(self) -> std::io::Result<()> {
        self.task.await.unwrap_or_else(|join| Err(std::io::Error::other(join)))
    }

    pub fn stopper(&self) -> Stopper {
        self.stopper.clone()
    }
}

/// Connects and migrates the store, starts the provider simulator if the
/// config asks for it, then serves on `config.server.listen`.
pub async fn start(config: Config) -> Result<RunningGateway, StartError> {
    let simulator = if config.simulator.enabled {
        let addr = config.simulator.listen;
        let handle =
            simulator(&config).spawn(addr).await.map_err(|source| StartError::Listen { addr, source })?;
        tracing::info!(addr = %handle.addr(), "provider simulator listening");
        Some(handle)
    } else {
        None
    };
    start_with_simulator(config, simulator).await
}

/// The simulator `config` asks for, its body limit twice the doors' unless
/// it says otherwise: room for what the gateway renders, translated, from
/// the largest request a door takes.
fn simulator(config: &Config) -> Simulator {
    let max_body = config.simulator.max_body_bytes.unwrap_or(config.server.max_body_bytes.saturating_mul(2));
    Simulator::new(config.simulator.seed)
        .record_bodies(config.simulator.record_bodies)
        .max_body_bytes(max_body)
}

/// Starts the configured simulator unless its address is taken (by a
/// running gateway's simulator, which then serves instead): `Ok(None)`.
pub async fn start_simulator(config: &Config) -> std::io::Result<Option<SimHandle>> {
    match simulator(config).spawn(config.simulator.listen).await {
        Ok(handle) => Ok(Some(handle)),
        Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => Ok(None),
        Err(err) => Err(err),
    }
}

async fn start_with_simulator(
    config: Config,
    simulator: Option<SimHandle>,
) -> Result<RunningGateway, StartError> {
    check(&config)?;
    // Before anything can be counted: nothing is lost before the first scrape.
    crate::telemetry::install(&config);
    let store = open_store(&config.store).await?;
    let principals = Principals::from_config(&config)?;
    let engine = Engine::new(&config, store.clone())?;
    // Bound before anything is recorded: a `serve` that cannot serve (its
    // port taken) writes nothing. Clients that arrive during the contract
    // runs wait in the listen backlog.
    let addr = config.server.listen;
    let listener = TcpListener::bind(addr).await.map_err(|source| StartError::Listen { addr, source })?;
    let addr = listener.local_addr().map_err(|source| StartError::Listen { addr, source })?;
    if config.contracts.run_on_start {
        run_contracts_on_start(&config, &store).await?;
        engine.gate().reload(&store).await?;
    }
    let limits = crate::server::ConnectionLimits::from_config(&config.server);
    let drain_timeout: std::time::Duration = config.server.drain_timeout.into();
    let unready_delay = config.server.unready_delay.into();
    let keys = crate::auth::StoredKeys::new(store.clone());
    keys.spawn_feed(engine.tasks(), engine.instance());
    let state = AppState::new(api::Shared {
        max_body_bytes: config.server.max_body_bytes,
        live: api::Live::new(config, principals),
        keys,
        store: store.clone(),
        engine: engine.clone(),
    });
    engine.load_spend_limits().await?;
    engine.spawn_spend_limit_feed();
    // What the other replicas know of the providers, before serving.
    if let Err(err) = engine.read_shared_health().await {
        tracing::warn!(error = %err, "shared provider health not read; starting with none");
    }
    engine.spawn_health_feed();
    engine.spawn_sweeper();
    engine.spawn_settled_listener();
    engine.tasks().spawn_watch(crate::telemetry::upkeep());
    let (shutdown, mut stopped) = watch::channel(false);
    let live = state.live.clone();
    let app = api::router(state);
    let tasks = engine.tasks().clone();
    // The root task: the server, then the engine's drain. (Every other task
    // is spawned through the engine's `Tasks`.)
    #[allow(clippy::disallowed_methods)]
    let task = tokio::spawn(async move {
        let served = crate::server::serve(listener, app, limits, async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        })
        .await;
        let waited_for = report_drain_start(&tasks, drain_timeout);
        let began = std::time::Instant::now();
        let drained = tasks.shutdown(drain_timeout).await;
        report_drain(&drained, drain_timeout, began.elapsed(), waited_for);
        served
    });
    tracing::info!(%addr, store = store.backend(), "intentgate listening");
    let stopper = Stopper { shutdown, unready_delay };
    Ok(RunningGateway { addr, store, engine, simulator, live, stopper, task })
}

/// Every check `start` makes before it opens the database, and that needs
/// neither the database nor the network: API keys from the environment,
/// providers, the contract gate, and the suites `run_on_start` runs.
/// `intentgate config check` runs exactly this, so a config it passes is
/// not refused by `serve` for a reason a check could have seen.
pub fn check(config: &Config) -> Result<(), StartError> {
    Principals::from_config(config)?;
    Engine::preflight(config)?;
    if config.contracts.run_on_start {
        load_suites(config)?;
    }
    Ok(())
}

/// Connects and migrates the store; errors name where its URL was set
/// (the migrations run on `direct_url` when there is one).
pub async fn open_store(config: &crate::config::StoreConfig) -> Result<Store, StartError> {
    let store = Store::connect(config)
        .await
        .map_err(|source| StartError::Database { key: config.url_key(), source })?;
    let migrating = |source| StartError::Database { key: config.session_url().1, source };
    store.migrate().await.map_err(migrating)?;
    Ok(store)
}

fn load_suites(config: &Config) -> Result<Vec<crate::contracts::Suite>, StartError> {
    crate::contracts::Suite::load_dir(&config.contracts.dir)
        .map_err(|err| crate::engine::EngineError::Contracts(err.to_string()).into())
}

/// `[contracts] run_on_start`: every suite against its route's providers,
/// recorded like `intentgate contract run` does.
async fn run_contracts_on_start(config: &Config, store: &Store) -> Result<(), StartError> {
    let suites = load_suites(config)?;
    for (suite, provider) in crate::contracts::pairs(config, &suites, None, None) {
        match crate::contract_runs::run_and_record(store, suite, provider, &mut |_| {}).await {
            Ok(report) => tracing::info!(
                route = %report.route, provider = %report.provider, passed = report.passed,
                first_failure = report.failures().next().unwrap_or_default(), "contract run recorded"
            ),
            Err(err) => {
                tracing::warn!(route = suite.route(), provider = %provider.name, error = %err, "contract run failed")
            }
        }
    }
    Ok(())
}
