//! The `intentgate` command line.

mod contract;
mod jobs;
mod keys;
mod terminal;
mod usage;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{Config, DEFAULT_CONFIG_PATH};
use crate::store::Store;

#[derive(Debug, Parser)]
#[command(name = "intentgate", version, about = "An AI inference gateway where one user intent is one job.")]
pub struct Cli {
    /// Log format: readable lines for people, JSON for machines.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ConfigArg {
    /// Path of the TOML config file.
    #[arg(long, short, default_value = DEFAULT_CONFIG_PATH, env = "INTENTGATE_CONFIG")]
    pub config: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    Serve(ConfigArg),
    /// Apply the database migrations and exit.
    Migrate(ConfigArg),
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Run the provider simulator on its own (both dialects, scripted per request).
    Sim {
        /// Address to serve both dialects on (the shipped config's providers expect 127.0.0.1:9101).
        #[arg(long, default_value = "127.0.0.1:9101")]
        listen: std::net::SocketAddr,
        /// Seed of every random choice the simulator makes.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Keep request bodies (prompts) for `GET /sim/requests/{key}`; off
        /// by default because the simulator's routes are unauthenticated.
        #[arg(long)]
        record_bodies: bool,
    },
    /// Find, inspect and settle jobs in the configured database.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Provider contract suites (R9): run them, and see who may serve what.
    #[command(subcommand)]
    Contract(ContractCommand),
    /// Work with API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// An owner's spend budgets and rate limits in their current windows.
    Usage {
        /// Whose usage (an owner as `[[principals]]` name them).
        owner: String,
        /// Print `GET /v1/usage`'s JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// What was charged, grouped by key, owner, team, tag, route, provider,
    /// model or day (what `GET /v1/usage/spend` answers).
    Spend {
        /// From this instant (RFC 3339) or day (`2026-12-01`); 30 days ago by default.
        #[arg(long)]
        from: Option<String>,
        /// Up to this instant or day (exclusive); now by default.
        #[arg(long)]
        to: Option<String>,
        /// Comma-separated dimensions.
        #[arg(long, default_value = "day")]
        group_by: String,
        /// One owner's spend only.
        #[arg(long)]
        owner: Option<String>,
        /// One team's spend only.
        #[arg(long)]
        team: Option<String>,
        /// Print CSV instead of a table.
        #[arg(long, conflicts_with = "json")]
        csv: bool,
        /// Print the JSON report instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the config file and exit non-zero with the reason if it is wrong.
    Check(ConfigArg),
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Jobs, newest first.
    List {
        #[command(flatten)]
        config: ConfigArg,
        /// pending, running, succeeded, failed, unknown or cancelled.
        #[arg(long, value_parser = jobs::parse_status)]
        status: Option<crate::jobs::JobStatus>,
        /// Only jobs of this owner (a principal's `owner`, as in the config).
        #[arg(long)]
        owner: Option<String>,
        /// Only jobs on this route.
        #[arg(long)]
        route: Option<String>,
        /// At most this many jobs.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One job and its attempt timeline.
    Show {
        #[command(flatten)]
        config: ConfigArg,
        /// The job id (a UUID, as in `jobs list` or the API's `id`).
        id: String,
    },
    /// Settle an unknown attempt as abandoned or failed (as the HTTP admin call does).
    Resolve {
        #[command(flatten)]
        config: ConfigArg,
        /// The job id.
        id: String,
        /// The attempt number (1 for the first attempt, as `jobs show` lists them).
        number: i32,
        /// abandoned: given up on (a late answer may still win); failed: the
        /// provider confirmed it did no work.
        #[arg(long = "as", value_name = "abandoned|failed", value_parser = parse_resolution)]
        resolution: crate::engine::Resolution,
        /// Why, recorded on the attempt with who resolved it (e.g. a ticket).
        #[arg(long)]
        reason: String,
    },
    /// Settle every unknown attempt of one provider (an outage).
    ResolveProvider {
        #[command(flatten)]
        config: ConfigArg,
        /// The provider's name, as in `[[providers]]`.
        provider: String,
        /// abandoned: given up on (a late answer may still win); failed: the
        /// provider confirmed it did no work.
        #[arg(long = "as", value_name = "abandoned|failed", value_parser = parse_resolution)]
        resolution: crate::engine::Resolution,
        /// Why, recorded on every attempt it settles (e.g. an incident id).
        #[arg(long)]
        reason: String,
    },
}

fn parse_resolution(value: &str) -> Result<crate::engine::Resolution, String> {
    value.parse()
}

#[derive(Debug, Subcommand)]
pub enum ContractCommand {
    /// Run the suites against providers and record the results; exits
    /// non-zero when any (route, provider) pair fails.
    Run {
        #[command(flatten)]
        config: ConfigArg,
        /// Only this route's suite.
        #[arg(long)]
        route: Option<String>,
        /// Only this provider.
        #[arg(long)]
        provider: Option<String>,
    },
    /// Each (route, provider) pair, its latest record, and whether it may serve.
    Status(ConfigArg),
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Print the SHA-256 of an API key, for `key_sha256` in the config.
    Hash {
        /// The API key; read from stdin when absent (keeps it out of shell history).
        key: Option<String>,
    },
    /// Make a stored API key and print it (once: only its SHA-256 is kept).
    Create {
        #[command(flatten)]
        config: ConfigArg,
        /// What the key is for, for people.
        #[arg(long)]
        name: String,
        /// The owner its jobs belong to.
        #[arg(long)]
        owner: String,
        /// user or admin.
        #[arg(long, default_value = "user", value_parser = parse_role)]
        role: crate::config::Role,
        /// The team its spend also counts against.
        #[arg(long)]
        team: Option<String>,
        /// A route the key may use (repeat it); none: every route.
        #[arg(long = "route")]
        routes: Vec<String>,
        /// How long the key works (`90d`); none: until revoked.
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Option<std::time::Duration>,
    },
    /// The stored API keys (never their secrets).
    List(ConfigArg),
    /// Make a key's successor; the old key works on for the overlap.
    Rotate {
        #[command(flatten)]
        config: ConfigArg,
        /// The key's id (as `keys list` shows it).
        id: String,
        /// How long the old key keeps working.
        #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
        overlap: std::time::Duration,
    },
    /// Revoke a key: serving gateways refuse it within a second.
    Revoke {
        #[command(flatten)]
        config: ConfigArg,
        /// The key's id (as `keys list` shows it).
        id: String,
    },
}

fn parse_role(value: &str) -> Result<crate::config::Role, String> {
    crate::config::Role::named(value).ok_or_else(|| format!("`{value}`: user or admin"))
}

pub async fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(args) => serve(&args).await,
        Command::Migrate(args) => migrate(&args).await,
        Command::Config(ConfigCommand::Check(args)) => match Config::load(&args.config)
            .map_err(|err| err.to_string())
            .and_then(|config| match crate::app::check(&config) {
                Ok(()) => Ok(config),
                Err(err) => Err(format!("{}: {err}", args.config.display())),
            }) {
            Ok(config) => {
                println!(
                    "{}: ok ({} principals, {} providers, {} routes, store {})",
                    args.config.display(),
                    config.principals.len(),
                    config.providers.len(),
                    config.routes.len(),
                    config.store.url.split(':').next().unwrap_or_default()
                );
                ExitCode::SUCCESS
            }
            Err(err) => fail(err),
        },
        Command::Sim { listen, seed, record_bodies } => sim(listen, seed, record_bodies).await,
        Command::Contract(command) => contract_command(command).await,
        Command::Jobs(command) => jobs_command(command).await,
        Command::Usage { owner, json, config } => match open_store(&config).await {
            Ok((config, store)) => usage::show(&config, store, &owner, json).await,
            Err(code) => code,
        },
        Command::Spend { from, to, group_by, owner, team, csv, json, config } => {
            match open_store(&config).await {
                Ok((config, store)) => {
                    let print = usage::Print { csv, json };
                    usage::spend(&config, store, usage::SpendArgs { from, to, group_by, owner, team }, print)
                        .await
                }
                Err(code) => code,
            }
        }
        Command::Keys(command) => keys_command(command).await,
    }
}

/// `keys hash`: the SHA-256 of a key given, or read from stdin.
fn hash(key: Option<&str>) -> ExitCode {
    let key = match key {
        Some(key) => key.to_owned(),
        None => {
            let mut line = String::new();
            if let Err(err) = std::io::stdin().read_line(&mut line) {
                return fail(err);
            }
            line.trim_end_matches(['\r', '\n']).to_owned()
        }
    };
    println!("{}", crate::auth::hash_key(&key));
    ExitCode::SUCCESS
}

async fn keys_command(command: KeysCommand) -> ExitCode {
    let args = match &command {
        KeysCommand::Hash { key } => return hash(key.as_deref()),
        KeysCommand::Create { config, .. }
        | KeysCommand::List(config)
        | KeysCommand::Rotate { config, .. }
        | KeysCommand::Revoke { config, .. } => config,
    };
    let store = match open_store(args).await {
        Ok((_, store)) => store,
        Err(code) => return code,
    };
    jobs::exit(match command {
        // Answered above, without a store.
        KeysCommand::Hash { .. } => Ok(()),
        KeysCommand::Create { name, owner, role, team, routes, ttl, .. } => {
            keys::create(store, keys::Create { name, owner, role, team, routes, ttl }).await
        }
        KeysCommand::List(_) => keys::list(store).await,
        KeysCommand::Rotate { id, overlap, .. } => keys::rotate(store, &id, overlap).await,
        KeysCommand::Revoke { id, .. } => keys::revoke(store, &id).await,
    })
}

async fn serve(args: &ConfigArg) -> ExitCode {
    let config = match Config::load(&args.config) {
        Ok(config) => config,
        Err(err) => return fail(err),
    };
    let config_drain: std::time::Duration = config.server.drain_timeout.into();
    let unready_delay: std::time::Duration = config.server.unready_delay.into();
    let gateway = match crate::app::start(config).await {
        Ok(gateway) => gateway,
        Err(err) => return fail(err),
    };
    let (stopper, engine) = (gateway.stopper(), gateway.engine.clone());
    if let Err(err) = reload_on_hangup(&gateway) {
        return fail(format!("cannot listen for SIGHUP: {err}"));
    }
    let (drain, unready) = (config_drain, unready_delay);
    // Listening from the start, so that neither signal can fall between
    // two listeners (a second one then would end nothing).
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(err) => return fail(format!("cannot listen for signals: {err}")),
    };
    let on_signals = async move {
        let first = signals.next().await;
        let began = std::time::Instant::now();
        tracing::info!(
            signal = first,
            unready_delay = ?unready,
            drain_timeout = ?drain,
            "shutdown: {first} received; /readyz answers 503 draining now, serving on for the unready_delay, \
             then drives and late answers drain for up to the drain_timeout (a second signal exits at once)"
        );
        // The first signal drains; a second one, whenever it comes (also
        // during `unready_delay`), ends the process now.
        let second = tokio::select! {
            () = stopper.stop(&engine) => signals.next().await,
            second = signals.next() => second,
        };
        let (drives, listeners, _) = engine.tasks().running();
        tracing::warn!(
            signal = second,
            drives,
            late_answer_listeners = listeners,
            after = ?began.elapsed(),
            "shutdown: second signal ({second}): exiting now with status 1, without draining; {drives} drive(s) \
             and {listeners} late-answer listener(s) still open are left to the recovery sweep of another \
             replica or of the next start (their leases expire)"
        );
    };
    // The server stops after the first signal, once drained.
    let served = tokio::select! {
        served = gateway.wait() => served,
        () = on_signals => {
            // At once: returning would drop the gateway, whose server and
            // drain would then begin their graceful steps while the runtime
            // shuts down. What is open is the recovery sweep's anyway.
            std::process::exit(1)
        }
    };
    match served {
        Ok(()) => {
            tracing::info!("intentgate stopped");
            ExitCode::SUCCESS
        }
        Err(err) => fail(err),
    }
}

/// Reloads the configuration file on every SIGHUP, as
/// `POST /v1/admin/reload` does; a refused file is logged and changes
/// nothing.
fn reload_on_hangup(gateway: &crate::app::RunningGateway) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        let (live, engine) = (gateway.live.clone(), gateway.engine.clone());
        gateway.engine.tasks().spawn_watch(async move {
            while hangups.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading the configuration file");
                if let Err(err) = crate::api::reload::reload(&live, &engine).await {
                    tracing::error!(error = %err, "configuration reload refused; the running configuration stays");
                }
            }
        });
    }
    Ok(())
}

/// SIGTERM and SIGINT (Ctrl-C), listened for once for the whole process.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.int.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        }
    }
}

async fn sim(listen: std::net::SocketAddr, seed: u64, record_bodies: bool) -> ExitCode {
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(err) => return fail(format!("cannot listen on {listen}: {err}")),
    };
    tracing::info!(addr = %listen, "provider simulator listening");
    tokio::select! {
        () = intentgate_providers::sim::serve(listener, intentgate_providers::sim::Simulator::new(seed).record_bodies(record_bodies)) => ExitCode::SUCCESS,
        () = shutdown_signal() => ExitCode::SUCCESS,
    }
}

async fn jobs_command(command: JobsCommand) -> ExitCode {
    let args = match &command {
        JobsCommand::List { config, .. }
        | JobsCommand::Show { config, .. }
        | JobsCommand::Resolve { config, .. }
        | JobsCommand::ResolveProvider { config, .. } => config,
    };
    let (config, store) = match open_store(args).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    jobs::exit(match command {
        JobsCommand::List { status, owner, route, limit, .. } => {
            jobs::list(&store, crate::store::JobFilter { status, owner, route, limit }).await
        }
        JobsCommand::Show { id, .. } => jobs::show(&store, &id).await,
        JobsCommand::Resolve { id, number, resolution, reason, .. } => {
            jobs::resolve(&config, store, &id, number, resolution, &reason).await
        }
        JobsCommand::ResolveProvider { provider, resolution, reason, .. } => {
            jobs::resolve_provider(&config, store, &provider, resolution, &reason).await
        }
    })
}

async fn contract_command(command: ContractCommand) -> ExitCode {
    let args = match &command {
        ContractCommand::Run { config, .. } | ContractCommand::Status(config) => config,
    };
    let (config, store) = match open_store(args).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    match command {
        ContractCommand::Run { route, provider, .. } => {
            // The simulator's providers need the simulator; one already
            // running (a gateway on this config) is used as it is.
            let _simulator = if config.simulator.enabled {
                crate::app::start_simulator(&config).await.ok().flatten()
            } else {
                None
            };
            contract::exit(contract::run(&config, &store, route.as_deref(), provider.as_deref()).await)
        }
        ContractCommand::Status(_) => contract::exit(contract::status(&config, &store).await.map(|()| true)),
    }
}

/// Loads the config and opens (and migrates) its store, for the operator commands.
async fn open_store(args: &ConfigArg) -> Result<(Config, Store), ExitCode> {
    let config = Config::load(&args.config).map_err(fail)?;
    let store = crate::app::open_store(&config.store).await.map_err(fail)?;
    Ok((config, store))
}

async fn migrate(args: &ConfigArg) -> ExitCode {
    let config = match Config::load(&args.config) {
        Ok(config) => config,
        Err(err) => return fail(err),
    };
    match crate::app::open_store(&config.store).await {
        Ok(_) => {
            println!("migrations applied");
            ExitCode::SUCCESS
        }
        Err(err) => fail(err),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

fn fail(err: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {}", terminal::printable(&err.to_string()));
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every argument of every subcommand says what it is for in `--help`.
    #[test]
    fn every_argument_is_described() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.get_help().is_none() && !matches!(id, "help" | "version") {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {} (the command itself)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "intentgate", &mut missing);
        assert!(missing.is_empty(), "arguments without a description: {missing:?}");
    }
}
