//! `cargo bench --bench gateway -- [options]`: what intentgate adds to every
//! call, measured against the provider simulator called directly, in one run.
//!
//! The benchmark starts the provider simulator with zero latency (its own
//! process by default: `intentgate sim`), then one gateway process per store
//! — the release binary, `intentgate serve --config <generated toml>` on a
//! fresh SQLite file per durability setting, and on a fresh PostgreSQL
//! schema — and drives them in turn, alternating within each round:
//!
//! - `direct`: `POST {sim}/v1/chat/completions`, the baseline;
//! - `sqlite-normal`, `sqlite-full`, `postgres`: `POST {gateway}/v1/chat/completions`
//!   (`Authorization: Bearer demo-alice`, an `Idempotency-Key`), which answers
//!   once the job is settled: the latency includes every durable write and
//!   the upstream call. `--endpoints chat,jobs` adds `POST /v1/jobs` with
//!   `Prefer: wait=10`.
//!
//! Closed loop (default): `--clients` tasks each send one request at a time
//! for `--duration` after `--warmup`. Open loop (`--rate R`): requests are
//! scheduled every 1/R s whatever happens and latency is measured from the
//! scheduled time, so a stall is not hidden by fewer requests being sent.
//!
//! Mixes (`--mix new,replay,race` or `all`):
//! - `new`: every request a fresh key — every request is a new job;
//! - `replay`: every other request repeats the key of a recently completed
//!   job (a random one of the last 1024), i.e. 50 % replays;
//! - `race`: clients go in groups of 4 that send the same fresh key at the
//!   same instant (four requests polled together on four connections), so the
//!   database's unique constraint decides which one creates the job; the other
//!   three attach to it, wait for it, and answer the same completion. Every
//!   job's result is then written by the compare-and-swap of its attempt.
//!
//! Reported per (target, mix): requests/s, jobs/s (requests that were not
//! answered as replays), p50/p90/p99 latency, the added latency against
//! `direct` at the same percentile (same round), errors (transport errors and
//! non-2xx), the gateway's CPU milliseconds per request (utime+stime of its
//! process from `/proc/<pid>/stat` over the measured window ÷ requests), its
//! peak RSS over the window (VmHWM after a reset through `clear_refs`) and its
//! RSS at `--rss-at` against the end of the window (`--rss-every 10s` adds the
//! whole series to the progress line: what a flat RSS is shown with). The `direct` row's CPU and
//! RSS are the simulator's. With `--rounds N` every figure is the median of
//! the N rounds. A second table gives the CPU per request of the rest of the
//! machine: the load generator (this process), the simulator, and every
//! process named `postgres` (on a shared server, other clients count too).
//! Per-cell progress lines on stderr add the gateway's context switches per
//! request (all its threads, from `/proc/<pid>/task/*/status`).
//!
//! The markdown tables go to stdout, ready to paste into docs/benchmarks.md:
//!
//! ```text
//! cargo bench --bench gateway -- --duration 10s --rounds 3              # the closed-loop matrix
//! cargo bench --bench gateway -- --rate 500 --mix new --rounds 3        # added latency at 500 req/s
//! cargo bench --bench gateway -- --duration 60s --mix new --no-direct   # RSS flat over a minute
//! cargo bench --bench gateway -- --signing                              # SigV4 cost per Bedrock request
//! cargo bench --bench gateway -- --key-lookup                           # a stored key against a config key
//! cargo bench --bench gateway -- --help                                 # every option
//! ```
//!
//! One core per gateway, as an operator deploys a replica: `--gateway-cpus 1
//! --load-cpus 0` runs each gateway under `taskset -c 1` and this process
//! and the simulator on core 0, so the gateway's figures are its own core's.
//! `--floor` adds HAProxy on the gateway's core in front of the simulator:
//! the same trips between cores, no other work — what the machine charges
//! any gateway before it does anything.
//! `--replicas N` starts N PostgreSQL gateways on one schema and spreads the
//! clients over them (a scaling table); `--streams N` replaces the load with
//! N streams held open at once and reports the RSS they cost. What a
//! feature costs when on: `--limits` (budgets), `--hedge`, `--no-health`
//! (health is on by default), `--keyless` (the route mints the key).
//!
//! Other knobs: `--pool N` sets `[store] max_connections` (default 8, as
//! shipped); `--gateway-bin PATH` measures another build; `--pause 5s` prints
//! the pids and waits, to attach `perf record -p PID`; `--keep` keeps the
//! generated configs, databases and gateway logs (`INTENTGATE_LOG=warn`).
//!
//! PostgreSQL: `--pg-url` (default `INTENTGATE_TEST_PG_URL`, else
//! `postgres://postgres@127.0.0.1:5432/test`); each run creates a schema and
//! drops it at the end. When unreachable, its cells are skipped with a loud note.
//!
//! Noise: the gateway, the simulator, the load generator (and PostgreSQL)
//! share the machine; anything else running moves the figures. CPU per
//! request is steadier than requests/s; take `--rounds 3` and read medians.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;

#[path = "gateway/floor.rs"]
mod floor;
#[path = "gateway/key_lookup.rs"]
mod key_lookup;
#[path = "gateway/signing.rs"]
mod signing;
#[path = "gateway/streams.rs"]
mod streams;

/// Key `demo-alice`, as in config/gateway.toml.
const ALICE_KEY: &str = "demo-alice";
const ALICE_SHA256: &str = "c3fe0b469a6d4f19a25fbec114762d2186aa2c22888f52c5550a77fc104bcff3";
const CHAT_BODY: &str = r#"{"model":"chat","messages":[{"role":"user","content":"hi"}]}"#;
const JOBS_BODY: &str = r#"{"route":"chat","input":{"messages":[{"role":"user","content":"hi"}]}}"#;
const SIM_BODY: &str = r#"{"model":"sim:ok","messages":[{"role":"user","content":"hi"}]}"#;
const RACE_GROUP: usize = 4;
const REPLAY_POOL: usize = 1024;

#[derive(Debug, Parser)]
#[command(
    name = "gateway-bench",
    about = "intentgate's overhead and durable throughput against direct calls"
)]
struct Args {
    /// Measured time per cell.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Unmeasured load before each cell's measured window.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    warmup: Duration,
    /// Concurrent clients (closed loop).
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Comma-separated: new, replay, race, or all.
    #[arg(long, default_value = "all")]
    mix: String,
    /// Stores to run the gateway on: sqlite, postgres.
    #[arg(long, default_value = "sqlite,postgres")]
    stores: String,
    /// SQLite durability settings: normal, full.
    #[arg(long, default_value = "normal,full")]
    sqlite_sync: String,
    /// Gateway endpoints: chat (`/v1/chat/completions`), jobs (`/v1/jobs` + `Prefer: wait=10`).
    #[arg(long, default_value = "chat")]
    endpoints: String,
    /// Skip the direct-to-simulator baseline.
    #[arg(long)]
    no_direct: bool,
    /// Rounds: every cell runs this many times, alternating; figures are medians.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Open loop at this many requests/s instead of closed loop with `--clients`.
    #[arg(long)]
    rate: Option<u32>,
    /// `[store] max_connections` of the gateways.
    #[arg(long, default_value_t = 8)]
    pool: u32,
    /// When to sample the "RSS at" figure, from the start of the measured window.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    rss_at: Duration,
    /// Also sample the RSS this often over the window, printed as a series
    /// on each cell's progress line.
    #[arg(long, value_parser = nonzero_duration)]
    rss_every: Option<Duration>,
    /// PostgreSQL base URL (a schema is created in it).
    #[arg(long, env = "INTENTGATE_TEST_PG_URL", default_value = "postgres://postgres@127.0.0.1:5432/test")]
    pg_url: String,
    /// Run the simulator inside this process instead of its own (`intentgate sim`).
    #[arg(long)]
    sim_inprocess: bool,
    /// The gateway binary (default: the one cargo built for this bench).
    #[arg(long, default_value = env!("CARGO_BIN_EXE_intentgate"))]
    gateway_bin: PathBuf,
    /// Print each gateway's pid and wait this long before the first cell (to attach perf).
    #[arg(long, value_parser = humantime::parse_duration)]
    pause: Option<Duration>,
    /// Keep the temporary directory (configs, SQLite files, gateway logs).
    #[arg(long)]
    keep: bool,
    /// Price the providers (with a tokenizer to count prompts) and configure
    /// one budget and one rate limit that never run out: the cost of
    /// budgets on the hot path (a reservation per attempt, a request count
    /// per job, a charge per answer).
    #[arg(long)]
    limits: bool,
    /// Run each gateway on these CPUs only (`taskset -c LIST`), the way an
    /// operator gives a replica its own core: e.g. `--gateway-cpus 1`.
    #[arg(long)]
    gateway_cpus: Option<String>,
    /// Run the load generator (this process, every thread) and the simulator
    /// on these CPUs only: e.g. `--load-cpus 0`, beside `--gateway-cpus 1`.
    #[arg(long)]
    load_cpus: Option<String>,
    /// PostgreSQL gateways: this many replicas on the one schema, the load
    /// spread over them client by client; their CPU is summed (a scaling
    /// table is 1, 2, 3).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    replicas: u32,
    /// Send no `Idempotency-Key`: the route mints one (`keyless = "mint"`),
    /// as an SDK that knows nothing of keys gets.
    #[arg(long)]
    keyless: bool,
    /// Give the route a hedge (`after = "2s"`, two open attempts) that the
    /// zero-latency simulator never lets fire: what the machinery costs.
    #[arg(long)]
    hedge: bool,
    /// Turn provider health off (`health = { failures = 0 }`): what the
    /// default's bookkeeping costs.
    #[arg(long)]
    no_health: bool,
    /// Instead of the load cells: hold this many streams open at once on
    /// each gateway (a route whose provider stalls mid-answer) and report
    /// its RSS per stream. The gateway's file limit is raised to fit.
    #[arg(long, default_value_t = 0)]
    streams: usize,
    /// Also measure HAProxy forwarding to the simulator from the gateway's
    /// CPUs (`--gateway-cpus`): the same trips between cores as a gateway,
    /// no other work — the floor this machine sets (`gateway/floor.rs`).
    #[arg(long)]
    floor: bool,
    /// Instead of the load cells: the cost of signing one Bedrock request
    /// (SigV4), in this process (`gateway/signing.rs`).
    #[arg(long)]
    signing: bool,
    /// Instead of the load cells: the cost of authenticating a request
    /// with a stored key against a config key (`gateway/key_lookup.rs`).
    #[arg(long)]
    key_lookup: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn nonzero_duration(text: &str) -> Result<Duration, String> {
    match humantime::parse_duration(text) {
        Ok(every) if every.is_zero() => Err("must be more than zero".into()),
        parsed => parsed.map_err(|err| err.to_string()),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mix {
    New,
    Replay,
    Race,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::New => "new",
            Mix::Replay => "replay",
            Mix::Race => "race",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Endpoint {
    /// The simulator itself.
    Sim,
    /// The simulator through a proxy that does nothing (`--floor`).
    Floor,
    Chat,
    Jobs,
}

/// Where requests go.
#[derive(Clone)]
struct Target {
    label: String,
    endpoint: Endpoint,
    /// One per replica; client `i` sends to `urls[i % len]`.
    urls: Vec<String>,
    /// The process whose CPU and memory are accounted (the gateway, or the
    /// simulator when called directly and running as its own process).
    pid: Option<u32>,
    /// The other replicas: their CPU is added to `pid`'s.
    other_pids: Vec<u32>,
    /// Keys of completed jobs are per database: shared by the targets of one gateway.
    pool: Arc<Mutex<VecDeque<String>>>,
    /// The gateway's store is PostgreSQL: account the server's CPU too.
    postgres: bool,
    /// `--keyless`: chat requests go without a key (the route mints one).
    keyless: bool,
}

/// One gateway process, killed on drop.
struct Gateway {
    /// What its target is called: every replica of one store has the same.
    label: String,
    file: String,
    child: Child,
    url: String,
    pool: Arc<Mutex<VecDeque<String>>>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct SimProcess(Child);

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What one cell measured.
#[derive(Debug, Clone, Default)]
struct Cell {
    requests: u64,
    errors: u64,
    replayed: u64,
    secs: f64,
    /// Latencies in microseconds, sorted.
    all: Vec<u32>,
    new_only: Vec<u32>,
    replays_only: Vec<u32>,
    cpu_ms: Option<f64>,
    switches: Option<u64>,
    gen_cpu_ms: f64,
    db_cpu_ms: Option<f64>,
    sim_cpu_ms: Option<f64>,
    peak_rss_kb: Option<u64>,
    rss_at_kb: Option<u64>,
    rss_end_kb: Option<u64>,
    /// Every `--rss-every` from the start of the window.
    rss_series_kb: Vec<u64>,
    first_errors: Vec<String>,
}

impl Cell {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.secs
    }
    fn jobs_per_s(&self) -> f64 {
        (self.requests - self.replayed) as f64 / self.secs
    }
    fn cpu_per_req(&self) -> Option<f64> {
        self.cpu_ms.map(|ms| ms / self.requests.max(1) as f64)
    }
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    f64::from(sorted[rank.clamp(1, sorted.len()) - 1]) / 1000.0
}

fn median(mut values: Vec<f64>) -> f64 {
    values.retain(|v| !v.is_nan());
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 }
}

// ---- /proc ------------------------------------------------------------------

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .unwrap_or(100.0)
}

/// utime + stime of the whole process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

fn status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// Context switches (voluntary and not) of every live thread of the process.
fn context_switches(pid: u32) -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else { continue };
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    Some(total)
}

/// utime + stime of every process named `postgres` (the server and its
/// backends; other clients' backends too, if any are busy).
fn postgres_ticks() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut total = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) else { continue };
        if comm.trim() == "postgres" {
            total += cpu_ticks(pid).unwrap_or(0);
        }
    }
    total
}

/// Resets VmHWM to the current RSS (Linux ≥ 4.0, own processes).
fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

// ---- processes ----------------------------------------------------------------

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn wait_until_ready(
    client: &reqwest::Client,
    url: &str,
    child: &mut Child,
    log: &Path,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(response) = client.get(url).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("exited with {status} before it was ready:\n{log}"));
        }
        if Instant::now() > deadline {
            return Err(format!("{url} not ready after 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct GatewaySpec {
    label: String,
    /// Its config and log files are named after this (one per replica).
    file: String,
    store_url: String,
    sqlite_sync: Option<&'static str>,
}

/// `--streams`: a route whose provider sends half its answer, then nothing
/// for ten minutes.
const STALL: &str = r#"
[[providers]]
name = "sim-stall"
dialect = "openai"
base_url = "http://{SIM}/v1"
model = "sim:stream-stall"
stream_idle_timeout = "10m"
total_timeout = "10m"

[[routes]]
name = "stall"
chain = ["sim-stall"]
attempt_timeout = "10m"
require_contract_for_primary = false
"#;

/// `--limits`: prices, one budget and one rate limit, none of which runs out.
const LIMITS: &str = r#"
[[budgets]]
owner = "alice"
limit = 1000000.0
window = "1d"

[[rate_limits]]
owner = "*"
route = "chat"
requests_per_minute = 100000000
tokens_per_minute = 1000000000000
"#;

fn gateway_config(spec: &GatewaySpec, port: u16, sim: SocketAddr, args: &Args) -> String {
    let suites = Path::new(env!("CARGO_MANIFEST_DIR")).join("contract-tests");
    let (pool, limits) = (args.pool, args.limits);
    let health = if args.no_health { "health = { failures = 0 }\n" } else { "" };
    let mut route = String::new();
    if args.keyless {
        route.push_str("keyless = \"mint\"\n");
    }
    if args.hedge {
        route.push_str("hedge = { after = \"2s\", open_attempts = 2 }\n");
    }
    let sync = spec.sqlite_sync.map(|s| format!("sqlite_synchronous = \"{s}\"\n")).unwrap_or_default();
    format!(
        r#"# generated by benches/gateway.rs
[server]
listen = "127.0.0.1:{port}"
{served}
[store]
url = "{url}"
max_connections = {pool}
{sync}
[engine]
instance_id = "bench-{label}-{port}"

[simulator]
enabled = false

[contracts]
dir = "{suites}"
run_on_start = false

[[principals]]
name = "alice"
owner = "alice"
role = "user"
key_sha256 = "{ALICE_SHA256}"

[[providers]]
name = "sim-primary"
dialect = "openai"
base_url = "http://{sim}/v1"
model = "sim:ok"
{health}{price}

[[providers]]
name = "sim-fallback"
dialect = "anthropic"
base_url = "http://{sim}"
model = "sim:ok"
{health}
[[routes]]
name = "chat"
chain = ["sim-primary", "sim-fallback"]
attempt_timeout = "10s"
require_contract_for_primary = false
require_contract_for_fallback = false
{route}{limits}{stall}"#,
        served = if args.streams > 0 {
            // The load comes from one address: it may hold every slot.
            format!("max_connections = {0}\nmax_connections_per_peer = {0}\n", args.streams + 64)
        } else {
            String::new()
        },
        stall = if args.streams > 0 { STALL.replace("{SIM}", &sim.to_string()) } else { String::new() },
        limits = if limits { LIMITS } else { "" },
        price = if limits {
            "tokenizer = \"o200k_base\"\nprice = { input_per_mtok = 0.15, output_per_mtok = 0.60 }"
        } else {
            ""
        },
        url = spec.store_url,
        label = spec.label,
        suites = suites.display(),
    )
}

/// `program`, on `cpus` only when given (`taskset` execs it: the pid is the
/// program's).
fn pinned(program: &Path, cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut command = Command::new("taskset");
            command.args(["-c", cpus]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// `command` with its open-file limit raised to `files` (`prlimit`), or to
/// this process's hard limit if that is lower (raising a hard limit needs
/// CAP_SYS_RESOURCE, which a container may not give even to root): a
/// stream holds two sockets.
fn with_files(command: Command, files: u64) -> Command {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 && limit.rlim_max < files {
        eprintln!(
            "the open-file limit is {}: streams past about {} will fail",
            limit.rlim_max,
            limit.rlim_max / 2
        );
    }
    let files = if limit.rlim_max > 0 { files.min(limit.rlim_max) } else { files };
    let mut raised = Command::new("prlimit");
    raised.arg(format!("--nofile={files}:{files}")).arg(command.get_program()).args(command.get_args());
    raised
}

/// Pins every thread of this process to `cpus` (threads started later
/// inherit it).
fn pin_self(cpus: &str) {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status();
    assert!(status.is_ok_and(|s| s.success()), "taskset -a -p -c {cpus} failed (is util-linux installed?)");
}

async fn start_gateway(
    args: &Args,
    client: &reqwest::Client,
    dir: &Path,
    spec: GatewaySpec,
    sim: SocketAddr,
) -> Result<Gateway, String> {
    let port = free_port();
    let config_path = dir.join(format!("{}.toml", spec.file));
    std::fs::write(&config_path, gateway_config(&spec, port, sim, args)).map_err(|e| e.to_string())?;
    let log_path = dir.join(format!("{}.log", spec.file));
    let log = File::create(&log_path).map_err(|e| e.to_string())?;
    let mut command = pinned(&args.gateway_bin, args.gateway_cpus.as_deref());
    if args.streams > 0 {
        command = with_files(command, 2 * args.streams as u64 + 4096);
    }
    let mut child = command
        .arg("serve")
        .arg("--config")
        .arg(&config_path)
        .env("INTENTGATE_LOG", "warn")
        .env_remove("INTENTGATE_DATABASE_URL")
        .env_remove("INTENTGATE_LISTEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", args.gateway_bin.display()))?;
    let url = format!("http://127.0.0.1:{port}");
    wait_until_ready(client, &format!("{url}/readyz"), &mut child, &log_path)
        .await
        .map_err(|e| format!("gateway {}: {e}", spec.label))?;
    Ok(Gateway { label: spec.label, file: spec.file, child, url, pool: Arc::default() })
}

async fn pg_schema(base: &str) -> Result<(String, String), String> {
    use sqlx::Connection as _;
    let mut conn = tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(base))
        .await
        .map_err(|_| "timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let schema = format!("bench_{}", uuid::Uuid::now_v7().simple());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    let separator = if base.contains('?') { '&' } else { '?' };
    Ok((schema.clone(), format!("{base}{separator}options=-c%20search_path%3D{schema}")))
}

async fn drop_pg_schema(base: &str, schema: &str) {
    use sqlx::Connection as _;
    if let Ok(mut conn) = sqlx::PgConnection::connect(base).await {
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE")))
            .execute(&mut conn)
            .await;
    }
}

// ---- load -------------------------------------------------------------------

/// Per-run key source: unique across runs and clients.
struct Keys {
    prefix: String,
    next: AtomicU64,
}

impl Keys {
    fn fresh(&self) -> String {
        format!("{}-{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed))
    }
}

/// xorshift64*: picks replay keys without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[derive(Default)]
struct Sample {
    all: Vec<u32>,
    new_only: Vec<u32>,
    replays_only: Vec<u32>,
    requests: u64,
    errors: u64,
    replayed: u64,
    first_errors: Vec<String>,
}

impl Sample {
    fn merge(&mut self, other: Sample) {
        self.all.extend(other.all);
        self.new_only.extend(other.new_only);
        self.replays_only.extend(other.replays_only);
        self.requests += other.requests;
        self.errors += other.errors;
        self.replayed += other.replayed;
        for e in other.first_errors {
            if self.first_errors.len() < 5 {
                self.first_errors.push(e);
            }
        }
    }

    fn record(&mut self, outcome: &Outcome, micros: u32, sent_as_replay: bool) {
        self.requests += 1;
        self.all.push(micros);
        if sent_as_replay {
            self.replays_only.push(micros);
        } else {
            self.new_only.push(micros);
        }
        match outcome {
            Outcome::Ok { replayed } => {
                if *replayed {
                    self.replayed += 1;
                }
            }
            Outcome::Err(message) => {
                self.errors += 1;
                if self.first_errors.len() < 5 {
                    self.first_errors.push(message.clone());
                }
            }
        }
    }
}

enum Outcome {
    Ok { replayed: bool },
    Err(String),
}

/// Sends one request and reads the whole answer.
async fn send(client: &reqwest::Client, target: &Target, url: &str, key: Option<&str>) -> Outcome {
    let mut request = match target.endpoint {
        Endpoint::Sim | Endpoint::Floor => client.post(format!("{url}/v1/chat/completions")).body(SIM_BODY),
        Endpoint::Chat => {
            client.post(format!("{url}/v1/chat/completions")).bearer_auth(ALICE_KEY).body(CHAT_BODY)
        }
        Endpoint::Jobs => client
            .post(format!("{url}/v1/jobs"))
            .bearer_auth(ALICE_KEY)
            .header("prefer", "wait=10")
            .body(JOBS_BODY),
    };
    request = request.header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            let replayed = response.headers().contains_key("idempotent-replayed");
            match response.bytes().await {
                Ok(_) if status.is_success() => Outcome::Ok { replayed },
                Ok(body) => Outcome::Err(format!(
                    "{status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                )),
                Err(err) => Outcome::Err(format!("reading the body: {err}")),
            }
        }
        Err(err) => Outcome::Err(format!("{err:?}")),
    }
}

fn remember(pool: &Mutex<VecDeque<String>>, key: String) {
    let mut pool = pool.lock().unwrap();
    if pool.len() == REPLAY_POOL {
        pool.pop_front();
    }
    pool.push_back(key);
}

fn recent(pool: &Mutex<VecDeque<String>>, rng: &mut Rng) -> Option<String> {
    let pool = pool.lock().unwrap();
    if pool.is_empty() {
        return None;
    }
    let index = (rng.next() % pool.len() as u64) as usize;
    pool.get(index).cloned()
}

/// Picks the key of the `n`-th request of a client: `(key, sent as a replay)`.
fn pick_key(target: &Target, mix: Mix, keys: &Keys, rng: &mut Rng, n: u64) -> (Option<String>, bool) {
    if matches!(target.endpoint, Endpoint::Sim | Endpoint::Floor)
        || (target.keyless && target.endpoint == Endpoint::Chat)
    {
        return (None, false);
    }
    if mix == Mix::Replay
        && n % 2 == 1
        && let Some(key) = recent(&target.pool, rng)
    {
        return (Some(key), true);
    }
    (Some(keys.fresh()), false)
}

/// Closed loop: `clients` tasks, each one request at a time, until `until`.
/// Only requests that start after `measure_from` are recorded.
async fn closed_loop(
    client: &reqwest::Client,
    target: &Target,
    mix: Mix,
    keys: &Arc<Keys>,
    clients: usize,
    measure_from: Instant,
    until: Instant,
) -> Sample {
    let mut tasks = Vec::new();
    let race = mix == Mix::Race && !matches!(target.endpoint, Endpoint::Sim | Endpoint::Floor);
    let tasks_n = if race { (clients / RACE_GROUP).max(1) } else { clients };
    for index in 0..tasks_n {
        let client = client.clone();
        let target = target.clone();
        let keys = keys.clone();
        let url = target.urls[index % target.urls.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut sample = Sample::default();
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
            let mut n = 0u64;
            loop {
                let start = Instant::now();
                if start >= until {
                    break;
                }
                if race {
                    let key = keys.fresh();
                    let sends = (0..RACE_GROUP).map(|_| {
                        let (client, target, key, url) = (&client, &target, &key, &url);
                        async move {
                            let outcome = send(client, target, url, Some(key)).await;
                            (outcome, start.elapsed())
                        }
                    });
                    let results = futures_util::future::join_all(sends).await;
                    if start >= measure_from {
                        for (outcome, elapsed) in &results {
                            sample.record(outcome, micros(*elapsed), false);
                        }
                    }
                } else {
                    let (key, as_replay) = pick_key(&target, mix, &keys, &mut rng, n);
                    let outcome = send(&client, &target, &url, key.as_deref()).await;
                    let elapsed = start.elapsed();
                    if let (Outcome::Ok { .. }, Some(key), false, Mix::Replay) =
                        (&outcome, key, as_replay, mix)
                    {
                        remember(&target.pool, key);
                    }
                    if start >= measure_from {
                        sample.record(&outcome, micros(elapsed), as_replay);
                    }
                }
                n += 1;
            }
            sample
        }));
    }
    let mut total = Sample::default();
    for task in tasks {
        total.merge(task.await.unwrap());
    }
    total
}

/// Open loop: one request every `1/rate` s from `start` to `until`, each in
/// its own task, latency measured from its scheduled time. Requests
/// scheduled before `measure_from` are not recorded.
async fn open_loop(
    client: &reqwest::Client,
    target: &Target,
    mix: Mix,
    keys: &Arc<Keys>,
    rate: u32,
    measure_from: Instant,
    until: Instant,
) -> Sample {
    let start = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let sample = Arc::new(Mutex::new(Sample::default()));
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0u64;
    loop {
        let scheduled = start + interval.mul_f64(n as f64);
        if scheduled >= until {
            break;
        }
        tokio::time::sleep_until(scheduled.into()).await;
        let (key, as_replay) = pick_key(target, mix, keys, &mut rng, n);
        let (client, target, sample) = (client.clone(), target.clone(), sample.clone());
        let url = target.urls[n as usize % target.urls.len()].clone();
        // Timed from the send, not from `scheduled`: no request waits for
        // another's answer here (each has its own task), so there is no
        // coordinated omission to correct, and tokio's timer wakes up to a
        // millisecond after `scheduled` — noise as large as the figure.
        tasks.spawn(async move {
            let sent = Instant::now();
            let outcome = send(&client, &target, &url, key.as_deref()).await;
            let elapsed = sent.elapsed();
            if let (Outcome::Ok { .. }, Some(key), false, Mix::Replay) = (&outcome, key, as_replay, mix) {
                remember(&target.pool, key);
            }
            if scheduled >= measure_from {
                sample.lock().unwrap().record(&outcome, micros(elapsed), as_replay);
            }
        });
        // Reap finished tasks so the set does not grow with the run.
        while tasks.try_join_next().is_some() {}
        n += 1;
    }
    while tasks.join_next().await.is_some() {}
    Arc::try_unwrap(sample).ok().unwrap().into_inner().unwrap()
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Runs one cell: warm-up, then the measured window with the process
/// accounting around it.
#[allow(clippy::too_many_arguments)]
async fn run_cell(
    args: &Args,
    client: &reqwest::Client,
    target: &Target,
    mix: Mix,
    keys: &Arc<Keys>,
    sim: &SimSide,
    ticks_per_s: f64,
) -> Cell {
    // The simulator remembers every request by key: forget them between cells.
    let _ = client.post(format!("http://{}/sim/reset", sim.addr)).send().await;
    let begin = Instant::now();
    let measure_from = begin + args.warmup;
    let until = measure_from + args.duration;

    let sampler = {
        let pid = target.pid;
        let others = target.other_pids.clone();
        let sim_pid = if target.endpoint == Endpoint::Sim { None } else { sim.pid };
        let postgres = target.postgres;
        let rss_at = args.rss_at.min(args.duration);
        let rss_every = args.rss_every;
        tokio::spawn(async move {
            tokio::time::sleep_until(measure_from.into()).await;
            let me = std::process::id();
            let reset = pid.is_some_and(reset_peak_rss);
            let all_cpu = move || {
                pid.and_then(cpu_ticks)
                    .map(|own| own + others.iter().filter_map(|p| cpu_ticks(*p)).sum::<u64>())
            };
            let cpu0 = all_cpu();
            let ctx0 = pid.and_then(context_switches);
            let gen0 = cpu_ticks(me);
            let db0 = postgres.then(postgres_ticks);
            let sim0 = sim_pid.and_then(cpu_ticks);
            let rss = move || pid.and_then(|pid| status_kb(pid, "VmRSS:"));
            let (mut rss_at_kb, mut rss_series_kb) = (None, Vec::new());
            let mut next = (Some(measure_from + rss_at), rss_every.map(|every| measure_from + every));
            loop {
                // The "RSS at" sample may fall on the window's end (`--rss-at`
                // is capped at `--duration`); the series' last one is the end's.
                let wake = [next.0.filter(|at| *at <= until), next.1.filter(|at| *at < until)]
                    .into_iter()
                    .flatten()
                    .min();
                let Some(wake) = wake else { break };
                tokio::time::sleep_until(wake.into()).await;
                if next.0 == Some(wake) {
                    rss_at_kb = rss();
                    next.0 = None;
                }
                if let (Some(at), Some(every)) = (next.1, rss_every)
                    && at == wake
                {
                    rss_series_kb.extend(rss());
                    next.1 = Some(at + every);
                }
            }
            tokio::time::sleep_until(until.into()).await;
            let cpu1 = all_cpu();
            let ctx1 = pid.and_then(context_switches);
            let gen1 = cpu_ticks(me);
            let db1 = postgres.then(postgres_ticks);
            let sim1 = sim_pid.and_then(cpu_ticks);
            let rss_end_kb = rss();
            rss_series_kb.extend(rss_end_kb.filter(|_| rss_every.is_some()));
            let peak_kb = if reset { pid.and_then(|pid| status_kb(pid, "VmHWM:")) } else { None };
            let delta = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| b.saturating_sub(a));
            Accounting {
                cpu: delta(cpu0, cpu1),
                switches: delta(ctx0, ctx1),
                generator: delta(gen0, gen1).unwrap_or(0),
                db: delta(db0, db1),
                sim: delta(sim0, sim1),
                rss_at_kb,
                rss_end_kb,
                rss_series_kb,
                peak_kb,
            }
        })
    };
    let sample = match args.rate {
        Some(rate) => open_loop(client, target, mix, keys, rate, measure_from, until).await,
        None => closed_loop(client, target, mix, keys, args.clients, measure_from, until).await,
    };
    let accounting = sampler.await.unwrap();
    let mut all = sample.all;
    let mut new_only = sample.new_only;
    let mut replays_only = sample.replays_only;
    all.sort_unstable();
    new_only.sort_unstable();
    replays_only.sort_unstable();
    Cell {
        requests: sample.requests,
        errors: sample.errors,
        replayed: sample.replayed,
        secs: args.duration.as_secs_f64(),
        all,
        new_only,
        replays_only,
        cpu_ms: accounting.cpu.map(|t| t as f64 / ticks_per_s * 1000.0),
        switches: accounting.switches,
        gen_cpu_ms: accounting.generator as f64 / ticks_per_s * 1000.0,
        db_cpu_ms: accounting.db.map(|t| t as f64 / ticks_per_s * 1000.0),
        sim_cpu_ms: accounting.sim.map(|t| t as f64 / ticks_per_s * 1000.0),
        peak_rss_kb: accounting.peak_kb,
        rss_at_kb: accounting.rss_at_kb,
        rss_end_kb: accounting.rss_end_kb,
        rss_series_kb: accounting.rss_series_kb,
        first_errors: sample.first_errors,
    }
}

struct Accounting {
    cpu: Option<u64>,
    switches: Option<u64>,
    generator: u64,
    db: Option<u64>,
    sim: Option<u64>,
    rss_at_kb: Option<u64>,
    rss_end_kb: Option<u64>,
    rss_series_kb: Vec<u64>,
    peak_kb: Option<u64>,
}

struct SimSide {
    addr: SocketAddr,
    pid: Option<u32>,
}

// ---- report -----------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct CellKey {
    mix: Mix,
    order: usize,
    label: String,
}

fn fmt_ms(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.filter(|v| !v.is_nan()).map_or("–".into(), f)
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn print_progress(label: &str, mix: Mix, round: usize, cell: &Cell, direct: Option<&Cell>) {
    let added = direct.map_or(String::new(), |d| {
        format!(
            " added p50 {} p99 {}",
            fmt_ms(pct(&cell.all, 50.0) - pct(&d.all, 50.0)),
            fmt_ms(pct(&cell.all, 99.0) - pct(&d.all, 99.0))
        )
    });
    eprintln!(
        "[round {round}] {label:<22} {mix:<6} {rps:>8.0} req/s {jobs:>8.0} jobs/s  p50 {p50} p90 {p90} p99 {p99} max {max} ms{added}  errors {errors}  replayed {replayed}  gw cpu {cpu} ms/req  {switches} ctx switches/req  gen cpu {gen:.3} ms/req  sim cpu {sim} ms/req  postgres cpu {db} ms/req  rss peak {peak} at {at} end {end} MB{series}",
        mix = mix.name(),
        rps = cell.rps(),
        jobs = cell.jobs_per_s(),
        p50 = fmt_ms(pct(&cell.all, 50.0)),
        p90 = fmt_ms(pct(&cell.all, 90.0)),
        p99 = fmt_ms(pct(&cell.all, 99.0)),
        max = fmt_ms(pct(&cell.all, 100.0)),
        errors = cell.errors,
        replayed = cell.replayed,
        cpu = fmt_opt(cell.cpu_per_req(), |v| format!("{v:.3}")),
        switches = fmt_opt(cell.switches.map(|n| n as f64 / cell.requests.max(1) as f64), |v| format!("{v:.1}")),
        gen = cell.gen_cpu_ms / cell.requests.max(1) as f64,
        sim = fmt_opt(cell.sim_cpu_ms.map(|ms| ms / cell.requests.max(1) as f64), |v| format!("{v:.3}")),
        db = fmt_opt(cell.db_cpu_ms.map(|ms| ms / cell.requests.max(1) as f64), |v| format!("{v:.3}")),
        peak = fmt_opt(cell.peak_rss_kb.map(mb), |v| format!("{v:.1}")),
        at = fmt_opt(cell.rss_at_kb.map(mb), |v| format!("{v:.1}")),
        end = fmt_opt(cell.rss_end_kb.map(mb), |v| format!("{v:.1}")),
        series = if cell.rss_series_kb.is_empty() {
            String::new()
        } else {
            let mbs: Vec<String> = cell.rss_series_kb.iter().map(|kb| format!("{:.1}", mb(*kb))).collect();
            format!("  rss series {} MB", mbs.join(" "))
        },
    );
    for e in &cell.first_errors {
        eprintln!("    error: {e}");
    }
}

fn print_table(args: &Args, results: &BTreeMap<CellKey, Vec<Cell>>, directs: &[Cell]) {
    let rounds = args.rounds;
    let mode = match args.rate {
        Some(rate) => format!("open loop at {rate} req/s"),
        None => format!("{} concurrent clients", args.clients),
    };
    println!();
    println!(
        "{mode}, {} s per cell after {} s warm-up, {} round(s){}; SQLite/PostgreSQL pool {}; zero-latency simulator{}.",
        args.duration.as_secs_f64(),
        args.warmup.as_secs_f64(),
        rounds,
        if rounds > 1 { " (each figure the median of the rounds)" } else { "" },
        args.pool,
        if args.sim_inprocess { " in the benchmark process" } else { " in its own process" },
    );
    println!();
    println!(
        "| target | mix | req/s | jobs/s | p50 ms | p90 ms | p99 ms | added p50 / p90 / p99 ms | errors | CPU ms/req | peak RSS MB | RSS @{}s → end MB |",
        args.rss_at.as_secs()
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    let med = |cells: &[Cell], f: &dyn Fn(&Cell) -> f64| median(cells.iter().map(f).collect());
    let medopt = |cells: &[Cell], f: &dyn Fn(&Cell) -> Option<f64>| {
        let v: Vec<f64> = cells.iter().filter_map(f).collect();
        if v.is_empty() { None } else { Some(median(v)) }
    };
    let added = |cells: &[Cell], p: f64, which: &dyn Fn(&Cell) -> &Vec<u32>| {
        if directs.is_empty() {
            return f64::NAN;
        }
        median(
            cells
                .iter()
                .zip(directs.iter().cycle())
                .map(|(c, d)| pct(which(c), p) - pct(&d.all, p))
                .collect(),
        )
    };
    for (key, cells) in results {
        let row = |name: &str, which: &dyn Fn(&Cell) -> &Vec<u32>, full: bool| {
            let count = med(cells, &|c| which(c).len() as f64 / c.secs);
            let p = |q: f64| med(cells, &|c| pct(which(c), q));
            let added_cell = if key.label == "direct" {
                "–".to_owned()
            } else {
                format!(
                    "{} / {} / {}",
                    fmt_ms(added(cells, 50.0, which)),
                    fmt_ms(added(cells, 90.0, which)),
                    fmt_ms(added(cells, 99.0, which))
                )
            };
            let (jobs, errors, cpu, peak, rss) = if full {
                (
                    if key.label == "direct" {
                        "–".to_owned()
                    } else {
                        format!("{:.0}", med(cells, &|c| c.jobs_per_s()))
                    },
                    format!("{:.0}", med(cells, &|c| c.errors as f64)),
                    fmt_opt(medopt(cells, &|c| c.cpu_per_req()), |v| format!("{v:.3}")),
                    fmt_opt(medopt(cells, &|c| c.peak_rss_kb.map(mb)), |v| format!("{v:.1}")),
                    match (medopt(cells, &|c| c.rss_at_kb.map(mb)), medopt(cells, &|c| c.rss_end_kb.map(mb)))
                    {
                        (Some(a), Some(b)) => format!("{a:.1} → {b:.1}"),
                        _ => "–".into(),
                    },
                )
            } else {
                ("".into(), "".into(), "".into(), "".into(), "".into())
            };
            println!(
                "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                if full { key.label.as_str() } else { "" },
                name,
                count,
                jobs,
                fmt_ms(p(50.0)),
                fmt_ms(p(90.0)),
                fmt_ms(p(99.0)),
                added_cell,
                errors,
                cpu,
                peak,
                rss,
            );
        };
        let mix = if key.label == "direct" { "–" } else { key.mix.name() };
        row(mix, &|c| &c.all, true);
        if key.mix == Mix::Replay && key.label != "direct" {
            row("↳ its replays", &|c| &c.replays_only, false);
            row("↳ its new jobs", &|c| &c.new_only, false);
        }
    }
    println!();
    // The rest of the machine: what the load generator and simulator cost.
    println!(
        "The rest of the machine, CPU ms per request (medians): the load generator, the simulator, PostgreSQL's processes:"
    );
    println!();
    println!("| target | mix | generator | simulator | postgres |");
    println!("|---|---|--:|--:|--:|");
    for (key, cells) in results {
        println!(
            "| {} | {} | {:.3} | {} | {} |",
            key.label,
            if key.label == "direct" { "–" } else { key.mix.name() },
            med(cells, &|c| c.gen_cpu_ms / c.requests.max(1) as f64),
            if key.label == "direct" {
                fmt_opt(medopt(cells, &|c| c.cpu_per_req()), |v| format!("{v:.3}"))
            } else {
                fmt_opt(medopt(cells, &|c| c.sim_cpu_ms.map(|ms| ms / c.requests.max(1) as f64)), |v| {
                    format!("{v:.3}")
                })
            },
            fmt_opt(medopt(cells, &|c| c.db_cpu_ms.map(|ms| ms / c.requests.max(1) as f64)), |v| format!(
                "{v:.3}"
            )),
        );
    }
}

// ---- main -------------------------------------------------------------------

/// The load cells: every round, the baseline then every target, mix by mix.
async fn run_rounds(
    args: &Args,
    client: &reqwest::Client,
    targets: &[Target],
    direct: &Target,
    sim: &SimSide,
    mixes: &[Mix],
) {
    let ticks = clock_ticks();
    let keys =
        Arc::new(Keys { prefix: format!("b{}", uuid::Uuid::now_v7().simple()), next: AtomicU64::new(0) });
    let mut results: BTreeMap<CellKey, Vec<Cell>> = BTreeMap::new();
    let mut directs: Vec<Cell> = Vec::new();
    let started = Instant::now();
    for round in 1..=args.rounds {
        // Alternating: the baseline, then every gateway target, mix by mix.
        let mut round_direct = None;
        if !args.no_direct {
            let cell = run_cell(args, client, direct, Mix::New, &keys, sim, ticks).await;
            print_progress("direct", Mix::New, round, &cell, None);
            round_direct = Some(cell.clone());
            directs.push(cell.clone());
            results
                .entry(CellKey { mix: Mix::New, order: 0, label: "direct".into() })
                .or_default()
                .push(cell);
        }
        for mix in mixes {
            for (order, target) in targets.iter().enumerate() {
                if target.endpoint == Endpoint::Floor && *mix != Mix::New {
                    continue; // a proxy keeps no jobs to replay or race
                }
                let cell = run_cell(args, client, target, *mix, &keys, sim, ticks).await;
                print_progress(&target.label, *mix, round, &cell, round_direct.as_ref());
                results
                    .entry(CellKey { mix: *mix, order: order + 1, label: target.label.clone() })
                    .or_default()
                    .push(cell);
            }
        }
    }
    eprintln!("measured in {:.0} s", started.elapsed().as_secs_f64());
    print_table(args, &results, &directs);
}

/// `--streams`: holds that many streams open on each target's gateway in
/// turn and prints their memory.
async fn hold_streams(args: &Args, targets: &[Target]) {
    println!();
    println!(
        "{} streams held open at once on each gateway (provider stalled after half its answer).",
        args.streams
    );
    println!();
    println!(
        "| gateway | streams open | failed | RSS before MB | RSS with them open MB | KB per stream | opened in s |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|");
    let prefix = format!("s{}", uuid::Uuid::now_v7().simple());
    for target in targets.iter().filter(|t| t.endpoint == Endpoint::Chat) {
        let pid = target.pid;
        let rss = move || pid.and_then(|pid| status_kb(pid, "VmRSS:"));
        let held = streams::hold(
            &target.urls[0],
            ALICE_KEY,
            &format!("{prefix}-{}", target.label),
            args.streams,
            rss,
        )
        .await;
        let per_stream =
            held.rss_held_kb.saturating_sub(held.rss_before_kb) as f64 / held.opened.max(1) as f64;
        println!(
            "| {} | {} | {} | {:.1} | {:.1} | {per_stream:.1} | {:.1} |",
            target.label,
            held.opened,
            held.failed,
            mb(held.rss_before_kb),
            mb(held.rss_held_kb),
            held.took.as_secs_f64()
        );
    }
}

fn list(s: &str) -> Vec<String> {
    s.split(',').map(|p| p.trim().to_ascii_lowercase()).filter(|p| !p.is_empty()).collect()
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if args.signing {
        signing::run(20_000);
        return;
    }
    if args.key_lookup {
        key_lookup::run(200_000).await;
        return;
    }
    if let Some(cpus) = &args.load_cpus {
        pin_self(cpus);
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mixes: Vec<Mix> = {
        let names = list(&args.mix);
        let mut mixes = Vec::new();
        for name in &names {
            match name.as_str() {
                "all" => mixes.extend([Mix::New, Mix::Replay, Mix::Race]),
                "new" => mixes.push(Mix::New),
                "replay" => mixes.push(Mix::Replay),
                "race" => mixes.push(Mix::Race),
                other => panic!("unknown mix `{other}` (new, replay, race, all)"),
            }
        }
        mixes.dedup();
        if args.rate.is_some() && mixes.contains(&Mix::Race) {
            eprintln!("note: the race mix has no open-loop form; skipped with --rate");
            mixes.retain(|m| *m != Mix::Race);
        }
        mixes
    };
    let stores = list(&args.stores);
    let syncs = list(&args.sqlite_sync);
    let endpoints: Vec<Endpoint> = list(&args.endpoints)
        .iter()
        .map(|e| match e.as_str() {
            "chat" => Endpoint::Chat,
            "jobs" => Endpoint::Jobs,
            other => panic!("unknown endpoint `{other}` (chat, jobs)"),
        })
        .collect();

    let dir = std::env::temp_dir().join(format!("intentgate-bench-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(4096)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    // The simulator.
    let mut _sim_process = None;
    let mut _sim_handle = None;
    let sim = if args.sim_inprocess {
        let handle =
            intentgate_providers::sim::Simulator::new(1).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = handle.addr();
        _sim_handle = Some(handle);
        SimSide { addr, pid: None }
    } else {
        let port = free_port();
        let log_path = dir.join("sim.log");
        let mut child = pinned(&args.gateway_bin, args.load_cpus.as_deref())
            .args(["sim", "--listen", &format!("127.0.0.1:{port}"), "--seed", "1"])
            .env("INTENTGATE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log_path).unwrap())
            .spawn()
            .unwrap();
        wait_until_ready(&client, &format!("http://127.0.0.1:{port}/sim/calls"), &mut child, &log_path)
            .await
            .unwrap_or_else(|e| panic!("simulator: {e}"));
        let pid = child.id();
        _sim_process = Some(SimProcess(child));
        SimSide { addr: SocketAddr::from(([127, 0, 0, 1], port)), pid: Some(pid) }
    };

    // The gateways.
    let mut gateways = Vec::new();
    let mut pg_schema_name = None;
    for store in &stores {
        match store.as_str() {
            "sqlite" => {
                for sync in &syncs {
                    let sync: &'static str = match sync.as_str() {
                        "normal" => "normal",
                        "full" => "full",
                        other => panic!("unknown --sqlite-sync `{other}` (normal, full)"),
                    };
                    let spec = GatewaySpec {
                        label: format!("sqlite-{sync}"),
                        file: format!("sqlite-{sync}"),
                        store_url: format!("sqlite://{}", dir.join(format!("sqlite-{sync}.db")).display()),
                        sqlite_sync: Some(sync),
                    };
                    gateways.push(start_gateway(&args, &client, &dir, spec, sim.addr).await.unwrap());
                }
            }
            "postgres" => match pg_schema(&args.pg_url).await {
                Ok((schema, url)) => {
                    pg_schema_name = Some(schema);
                    for replica in 1..=args.replicas {
                        let file =
                            if replica == 1 { "postgres".into() } else { format!("postgres-{replica}") };
                        let spec = GatewaySpec {
                            label: "postgres".into(),
                            file,
                            store_url: url.clone(),
                            sqlite_sync: None,
                        };
                        gateways.push(start_gateway(&args, &client, &dir, spec, sim.addr).await.unwrap());
                    }
                }
                Err(err) => eprintln!(
                    "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                     !!! SKIPPED: PostgreSQL cells — {} is unreachable: {err}\n\
                     !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n",
                    args.pg_url
                ),
            },
            other => panic!("unknown store `{other}` (sqlite, postgres)"),
        }
    }

    let mut targets = Vec::new();
    for (index, gateway) in gateways.iter().enumerate() {
        // The first replica of a store stands for all of them.
        if gateways[..index].iter().any(|earlier| earlier.label == gateway.label) {
            continue;
        }
        let replicas: Vec<&Gateway> = gateways.iter().filter(|g| g.label == gateway.label).collect();
        let name = match replicas.len() {
            1 => gateway.label.clone(),
            n => format!("{} ×{n}", gateway.label),
        };
        for endpoint in &endpoints {
            let label = match endpoint {
                Endpoint::Jobs => format!("{name} /v1/jobs"),
                _ => name.clone(),
            };
            targets.push(Target {
                label,
                endpoint: *endpoint,
                urls: replicas.iter().map(|g| g.url.clone()).collect(),
                pid: Some(gateway.child.id()),
                other_pids: replicas[1..].iter().map(|g| g.child.id()).collect(),
                pool: gateway.pool.clone(),
                postgres: gateway.label == "postgres",
                keyless: args.keyless,
            });
        }
    }
    let direct = Target {
        label: "direct".into(),
        endpoint: Endpoint::Sim,
        urls: vec![format!("http://{}", sim.addr)],
        pid: sim.pid,
        other_pids: Vec::new(),
        pool: Arc::default(),
        postgres: false,
        keyless: false,
    };
    let floor_proxy = if args.floor {
        let haproxy = pinned(Path::new("haproxy"), args.gateway_cpus.as_deref());
        let proxy =
            floor::start(haproxy, &dir, free_port(), sim.addr).unwrap_or_else(|err| panic!("--floor: {err}"));
        targets.insert(
            0,
            Target {
                label: "haproxy (floor)".into(),
                endpoint: Endpoint::Floor,
                urls: vec![proxy.url.clone()],
                pid: Some(proxy.pid()),
                other_pids: Vec::new(),
                pool: Arc::default(),
                postgres: false,
                keyless: false,
            },
        );
        Some(proxy)
    } else {
        None
    };
    eprintln!(
        "simulator {} (pid {}); gateways: {}; temp dir {}",
        sim.addr,
        sim.pid.map_or("in-process".into(), |p| p.to_string()),
        gateways
            .iter()
            .map(|g| format!("{} {} (pid {})", g.label, g.url, g.child.id()))
            .collect::<Vec<_>>()
            .join(", "),
        dir.display()
    );
    if let Some(pause) = args.pause {
        eprintln!("pausing {pause:?}");
        tokio::time::sleep(pause).await;
    }

    if args.streams > 0 {
        hold_streams(&args, &targets).await;
    } else {
        run_rounds(&args, &client, &targets, &direct, &sim, &mixes).await;
    }

    for gateway in &gateways {
        let log = std::fs::read_to_string(dir.join(format!("{}.log", gateway.file))).unwrap_or_default();
        let lines = log.lines().count();
        if lines > 0 {
            eprintln!(
                "{}: {lines} log lines at warn and above; first: {}",
                gateway.label,
                log.lines().next().unwrap_or("")
            );
        }
    }
    drop(gateways);
    drop(floor_proxy);
    drop(_sim_process);
    if let Some(schema) = pg_schema_name {
        drop_pg_schema(&args.pg_url, &schema).await;
    }
    if args.keep {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::io::stdout().flush();
}
