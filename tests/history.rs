//! A seeded, randomized history checker: R2–R10 under one roof, on both
//! stores. Concurrent clients send colliding keys for two owners to two
//! gateway *processes* (the real binary) sharing the store; every request's
//! route runs a chain of scripted provider behaviours (answers, late
//! answers, hangs, 500s, 429s, garbage, resets, cut bodies); an operator
//! resolves unknown attempts now and then; one gateway is killed with
//! `kill -9`, or stopped with SIGTERM as a rolling deploy does (it drains),
//! in the middle and restarted. On PostgreSQL the gateways reach the
//! database through a TCP proxy that, at the plan's moments, stalls
//! (nothing passes), resets every connection, or lets one statement run and
//! loses its reply (a transaction's `COMMIT`, a job's insert): the
//! ambiguous commit. Most providers have a price, and one owner (alice) a
//! budget and a per-route rate limit, both small enough to refuse during
//! the run: new jobs with a 429, and retries and failovers (the job fails
//! with the limit's code). Then every job must settle, and the invariants
//! below are checked on what the HTTP API answered along the way, on what
//! reached the provider, and on the final state.
//!
//! Black box only: the HTTP API, the simulator's call counts, a TCP proxy
//! in front of the simulator that logs each upstream request's
//! `Idempotency-Key` and `X-Intentgate-Attempt` (the simulator itself only
//! counts per key), and, once all is settled, two reads of the store the
//! API cannot give: how many jobs it holds, and each meter's past windows
//! (`GET /v1/usage` shows the current one only). The engine's internals
//! may change under this test.
//!
//! The seed (`INTENTGATE_HISTORY_SEED=<u64>`, random otherwise, printed at
//! the start and in every failure) fixes the plan: routes, keys, bodies,
//! owners, gateways, pauses, operator choices, when the kill happens and how
//! the victim comes back, and the store faults. The interleaving is the
//! machine's, so a replay runs the same plan, not necessarily the same
//! schedule.
//!
//! Invariants (each failure names one):
//! - I1 one job per (owner, key): every 200/201 for it names one job, at
//!   most one 201, the bound body is the only one accepted, another body is
//!   `409 idempotency-key-reused` naming that job, the metered owner may be
//!   refused (I10); owners never share a job; the store holds no other job,
//!   and a create of its body was sent for each.
//! - I2 no re-sent attempt: the provider saw each (job, attempt number) at
//!   most once, only for attempts the job records, on that attempt's
//!   provider; every attempt that got an answer or a proven failure was seen,
//!   and none the gateway failed as never sent (`not_sent`, no `sent_at`).
//! - I3 the winner's answer: a succeeded job's `completed_by` is its only
//!   `succeeded` attempt, the result is that provider's echo of the prompt,
//!   and the version rose once past the winner's; no other job has a winner.
//! - I3b no answer thrown away: a `superseded` attempt lost to another
//!   attempt of a succeeded job (or its job was cancelled).
//! - I3c classification: an attempt ends only in states its provider's
//!   script allows (an error is never `succeeded`, silence never `failed`,
//!   an answer never `failed`), or failed by the gateway as never sent — and
//!   then (I7) the chain may go on on the same provider.
//! - I4 nothing stuck: every job ends succeeded, failed or cancelled, with
//!   no attempt `starting` or `unknown` (every provider has `max_execution`).
//! - I5 no panic, no 5xx but 503 while a gateway is down or the store
//!   faulted (and a moment after), no transport error but from the killed
//!   process. A 503 to a create says "nothing was stored" only when nothing
//!   was: no job was created while only such 503s (or refusals) of its body
//!   were in flight. Any other says the job may exist, names the key or the
//!   job, and asks for a retry under the same key, which the clients do.
//! - I6 history: what clients observed of a job only moves forward along the
//!   documented state machines (job, attempts, version, result).
//! - I7 chain order: attempts follow the route's chain; only a failure of a
//!   retry class (the 429s and 5xx here) repeats a provider, at most
//!   `retries` times; a failed job exhausted its chain, or a limit refused
//!   its next attempt (a provider not behind the ones it tried).
//! - I8 cancel: a job whose cancel answered 200 ends cancelled; only a job
//!   someone tried to cancel is cancelled.
//! - I9 drain bound: a gateway stopped with SIGTERM exits within its
//!   `drain_timeout` (and a moment to close), having drained what it could.
//! - I10 limits: each meter `GET /v1/usage` shows is one of the metered
//!   owner's, reads as the store does, and in every window of the run holds
//!   nothing once all settled and used at most its limit; its windows add
//!   up to its attempts' charges (`usage.cost_nanos` for the budget, one
//!   call per attempt for a rate limit). Every refusal (`429
//!   budget-exhausted` / `rate-limited`, a job's error code) names a limit
//!   of its owner and route of that kind; a rate limit's window it refused
//!   in ended full; a create of a key whose job was already answered is
//!   answered, not refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use common::proxy::ToggleProxy;
use common::{ADMIN, ALICE, BOB, TestStore};
use intentgate_providers::sim::Simulator;
use reqwest::RequestBuilder;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Barrier, watch};

store_matrix!(randomized_history);

const CLIENTS: usize = 10;
const OPS_PER_CLIENT: usize = 40;
const KEYS: usize = 40;
const ROUTES: usize = 8;
const ATTEMPT_TIMEOUT: &str = "300ms";
const MAX_EXECUTION: &str = "1500ms";
const LEASE_TTL: &str = "1s";
const SWEEP_INTERVAL: &str = "250ms";
const RETRIES: usize = 1;
/// `[server] drain_timeout` of the gateways: how long a SIGTERM may take.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(4);
/// The chaos providers whose failures are of the shipped retry classes.
const RETRIED: [&str; 2] = ["status-429", "status-500"];
/// How long every job gets, after the last client op, to settle.
const DRAIN: Duration = Duration::from_secs(25);
/// 503s are allowed from the kill until this long after the restart, and
/// from a store fault until this long after it ended.
const OUTAGE_GRACE: Duration = Duration::from_secs(3);
/// How often a client sends one create before it gives up (a 503 or a
/// broken exchange is retried under the same key).
const CREATE_TRIES: usize = 20;
/// How long an armed lost reply waits for its statement to pass.
const LOST_REPLY_WAIT: Duration = Duration::from_secs(1);
/// A request's interval, widened by this, holds the `created_at` of a job
/// it created (the gateway's clock against this process's, in whole ms).
const CLOCK_SLACK_MS: i64 = 10;

/// The owner whose attempts are metered: a budget and a rate limit.
const METERED: usize = 0;
/// The providers with a price; the others' attempts cost nothing.
const PRICED: [&str; 5] = ["ok", "slow", "late", "hang", "garbage"];
/// Per million prompt and completion tokens, in USD.
const PRICE: (f64, f64) = (1.0, 2.0);
/// `[billing] default_max_tokens`: what a priced attempt reserves (and is
/// sent) as its completion limit, so a worst case is about 0.002 USD.
const DEFAULT_MAX_TOKENS: i64 = 1000;
/// The metered owner's budget over all routes, `1h`: a few worst cases,
/// which abandoned attempts are charged and attempts in flight hold.
const BUDGET_USD: f64 = 0.025;
const BUDGET_WINDOW: &str = "1h";
/// The metered owner's upstream calls per minute, per route: a route's
/// few keys, with their retries and failovers, run into it.
const REQUESTS_PER_MINUTE: i64 = 5;
/// The refusals a client can be answered with.
const LIMIT_SLUGS: [&str; 2] = ["budget-exhausted", "rate-limited"];

/// (API key, owner) of the two users.
const OWNERS: [(&str, &str); 2] = [(ALICE, "alice"), (BOB, "bob")];

/// What a provider's script makes of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A usable answer (maybe after the attempt timeout).
    Answers,
    /// A proven failure: an error status or an unusable body.
    Errors,
    /// No complete answer, ever: a hang, a reset, a body cut halfway.
    Silent,
}

struct Chaos {
    name: &'static str,
    dialect: &'static str,
    script: &'static str,
    kind: Kind,
}

/// The providers, one simulator script each (the model name scripts it).
const CHAOS: &[Chaos] = &[
    Chaos { name: "ok", dialect: "openai", script: "ok", kind: Kind::Answers },
    Chaos { name: "ok-anthropic", dialect: "anthropic", script: "ok", kind: Kind::Answers },
    Chaos { name: "slow", dialect: "openai", script: "delay=100ms", kind: Kind::Answers },
    // Longer than the attempt timeout, shorter than max_execution.
    Chaos { name: "late", dialect: "anthropic", script: "delay=700ms", kind: Kind::Answers },
    Chaos { name: "hang", dialect: "openai", script: "hang", kind: Kind::Silent },
    Chaos { name: "reset", dialect: "anthropic", script: "reset-after-body", kind: Kind::Silent },
    Chaos { name: "cut", dialect: "openai", script: "stream-cut", kind: Kind::Silent },
    Chaos { name: "status-500", dialect: "anthropic", script: "status=500", kind: Kind::Errors },
    Chaos { name: "status-429", dialect: "openai", script: "status=429;retry_after=0", kind: Kind::Errors },
    Chaos { name: "garbage", dialect: "openai", script: "malformed-json", kind: Kind::Errors },
];

fn chaos(name: &str) -> Option<&'static Chaos> {
    CHAOS.iter().find(|c| c.name == name)
}

// ---------------------------------------------------------------- the seed

/// splitmix64: tiny, good enough, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

/// One seed per test process, shared by both stores' runs.
fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| match std::env::var("INTENTGATE_HISTORY_SEED") {
        Ok(text) => {
            text.trim().parse().unwrap_or_else(|_| panic!("INTENTGATE_HISTORY_SEED={text:?} is not a u64"))
        }
        Err(_) => {
            let nanos =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
            Rng(nanos as u64 ^ (u64::from(std::process::id()) << 40)).next()
        }
    })
}

/// Everything the seed decides before the run.
struct Plan {
    /// Chains of routes `r0`, `r1`, …
    routes: Vec<Vec<&'static str>>,
    /// The route each key's bodies name.
    key_route: Vec<usize>,
    /// The gateway that is killed, after how many client ops, and how it
    /// comes back.
    victim: usize,
    kill_after_ops: usize,
    restart_pause: Duration,
    restart_same_id: bool,
    /// SIGTERM (a graceful stop that drains) rather than SIGKILL.
    graceful: bool,
    clients: Vec<Rng>,
    operator: Rng,
    /// PostgreSQL only: what the proxy in front of it does, after how many
    /// client ops.
    store_faults: Vec<(usize, StoreFault)>,
}

/// One fault of the proxy between the gateways and PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreFault {
    /// Nothing passes either way for this long: the database hangs.
    Stall(Duration),
    /// Every connection is reset, and new ones refused for this long.
    Reset(Duration),
    /// The server runs a statement, its reply is lost and the connection
    /// reset: the client cannot know whether its write landed.
    LostReply(LostReply),
}

/// Whose reply a [`StoreFault::LostReply`] loses: the next one to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LostReply {
    /// A transaction's `COMMIT`: a metered job's insert with its holds, an
    /// attempt's start, a settling.
    Commit,
    /// A job's insert, told by its arguments (the stored request).
    JobInsert,
    /// The job insert run right after a connection prepared it: every
    /// connection is reset first, so the next one to insert a job
    /// prepares the statement anew.
    Prepared,
}

impl LostReply {
    fn arm(self, proxy: &ToggleProxy) {
        match self {
            LostReply::Commit => proxy.cut_reply_to("COMMIT"),
            // The canonical request, as only the insert of a job binds it.
            LostReply::JobInsert => proxy.cut_reply_to(r#"{"input":{"messages":"#),
            LostReply::Prepared => {
                proxy.set_up(false);
                proxy.set_up(true);
                proxy.cut_reply_after("INSERT INTO jobs");
            }
        }
    }
}

impl Plan {
    fn new(seed: u64) -> Plan {
        let mut rng = Rng(seed);
        // Two fixed stories, the rest at random: a late answer racing an
        // exhausted chain (when an operator gives up on it), and the plain path.
        let mut routes = vec![vec!["late", "status-500"], vec!["ok"]];
        let answers: Vec<&str> = CHAOS.iter().filter(|c| c.kind == Kind::Answers).map(|c| c.name).collect();
        while routes.len() < ROUTES {
            let mut chain: Vec<&'static str> = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let pick = CHAOS[rng.below(CHAOS.len())].name;
                if !chain.contains(&pick) {
                    chain.push(pick);
                }
            }
            if rng.chance(60) {
                let pick = answers[rng.below(answers.len())];
                if !chain.contains(&pick) {
                    chain.push(pick);
                }
            }
            routes.push(chain);
        }
        let key_route = (0..KEYS).map(|_| rng.below(ROUTES)).collect();
        let total = CLIENTS * OPS_PER_CLIENT;
        let victim = rng.below(2);
        let kill_after_ops = total * (25 + rng.below(30)) / 100;
        let restart_pause = Duration::from_millis(200 + rng.below(600) as u64);
        let restart_same_id = rng.chance(50);
        let graceful = rng.chance(50);
        let clients = (0..CLIENTS).map(|_| rng.fork()).collect();
        let operator = rng.fork();
        let mut store_faults: Vec<(usize, StoreFault)> = (0..2 + rng.below(11))
            .map(|_| {
                let after = total * rng.below(90) / 100;
                let fault = match rng.below(5) {
                    0 => StoreFault::Stall(Duration::from_millis(100 + rng.below(1400) as u64)),
                    1 => StoreFault::Reset(Duration::from_millis(rng.below(500) as u64)),
                    2 => StoreFault::LostReply(LostReply::Commit),
                    3 => StoreFault::LostReply(LostReply::JobInsert),
                    _ => StoreFault::LostReply(LostReply::Prepared),
                };
                (after, fault)
            })
            .collect();
        store_faults.sort_by_key(|(after, _)| *after);
        Plan {
            routes,
            key_route,
            victim,
            kill_after_ops,
            restart_pause,
            restart_same_id,
            graceful,
            clients,
            operator,
            store_faults,
        }
    }

    fn route_name(index: usize) -> String {
        format!("r{index}")
    }

    fn key_name(key: usize) -> String {
        format!("history-{key}")
    }

    /// The prompt of a (key, variant): unique, so a job's stored request
    /// tells which body it was bound to.
    fn content(key: usize, variant: usize) -> String {
        format!("intent {key} variant {variant}")
    }

    fn body(&self, key: usize, variant: usize) -> Value {
        json!({
            "route": Plan::route_name(self.key_route[key]),
            "input": {"messages": [{"role": "user", "content": Plan::content(key, variant)}]},
        })
    }
}

// ------------------------------------------- the provider side: a sniffer

/// One request that reached the provider.
#[derive(Debug, Clone)]
struct UpstreamCall {
    job_id: String,
    attempt: String,
    path: String,
}

/// A TCP proxy in front of the simulator that logs each HTTP/1.1 request's
/// job and attempt headers before passing its bytes on. It forwards bytes
/// only, so resets, hangs and cut bodies reach the gateway as they are.
struct Sniffer {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<UpstreamCall>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sniffer {
    async fn start(target: SocketAddr) -> Sniffer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls: Arc<Mutex<Vec<UpstreamCall>>> = Arc::default();
        let log = calls.clone();
        let task = tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else { return };
                    let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
                    let (mut in_read, mut in_write) = inbound.into_split();
                    let (mut out_read, mut out_write) = outbound.into_split();
                    let upstream = async {
                        let mut parser = RequestHeads::default();
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match in_read.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            // Logged before the provider can see it.
                            log.lock().unwrap().extend(parser.feed(&buf[..n]));
                            if out_write.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    let downstream = async {
                        let _ = tokio::io::copy(&mut out_read, &mut in_write).await;
                    };
                    // Either side closing closes both: a provider that drops
                    // the connection drops it for the gateway too.
                    tokio::select! {
                        () = upstream => {}
                        () = downstream => {}
                    }
                });
            }
        });
        Sniffer { addr, calls, task }
    }

    fn calls(&self) -> Vec<UpstreamCall> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for Sniffer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Splits a client-to-server HTTP/1.1 byte stream into request heads,
/// skipping bodies by `Content-Length`.
#[derive(Default)]
struct RequestHeads {
    buf: Vec<u8>,
    body_left: usize,
}

impl RequestHeads {
    fn feed(&mut self, bytes: &[u8]) -> Vec<UpstreamCall> {
        self.buf.extend_from_slice(bytes);
        let mut calls = Vec::new();
        loop {
            if self.body_left > 0 {
                let n = self.body_left.min(self.buf.len());
                self.buf.drain(..n);
                self.body_left -= n;
                if self.body_left > 0 {
                    break;
                }
            }
            let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else { break };
            let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
            self.buf.drain(..end + 4);
            let mut lines = head.split("\r\n");
            let path = lines.next().and_then(|line| line.split(' ').nth(1)).unwrap_or_default().to_owned();
            let (mut job_id, mut attempt) = (None, None);
            for line in lines {
                let Some((name, value)) = line.split_once(':') else { continue };
                let value = value.trim().to_owned();
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => self.body_left = value.parse().unwrap(),
                    "transfer-encoding" => {
                        panic!("harness: a chunked upstream request ({value}) is not parsed")
                    }
                    "idempotency-key" => job_id = Some(value),
                    "x-intentgate-attempt" => attempt = Some(value),
                    _ => {}
                }
            }
            if let Some(job_id) = job_id {
                calls.push(UpstreamCall { job_id, attempt: attempt.unwrap_or_default(), path });
            }
        }
        calls
    }
}

// ------------------------------------------------------ what was observed

/// A job as some response showed it, and when that request was in flight.
struct Snapshot {
    sent: Duration,
    received: Duration,
    job: Value,
}

/// One answered `POST /v1/jobs`.
struct Post {
    owner: usize,
    key: usize,
    variant: usize,
    status: u16,
    sent: Duration,
    received: Duration,
    job_id: Option<String>,
    /// The problem type's slug, for an error.
    problem: Option<String>,
    body: Value,
}

/// One try of a `POST /v1/jobs` that settled nothing for its client: it
/// broke off (`reply` is `None`) or answered 503; the client tried again
/// under the same key.
struct Unsettled {
    owner: usize,
    key: usize,
    variant: usize,
    sent: Duration,
    received: Duration,
    reply: Option<Value>,
}

impl Unsettled {
    /// Whether it said the store holds nothing of this request, which lets
    /// a client send the intent again under a new key.
    fn says_nothing_stored(&self) -> bool {
        self.reply.as_ref().is_some_and(|body| str_of(&body["detail"]).contains("nothing was stored"))
    }
}

/// One store fault as it happened.
struct FaultWindow {
    fault: StoreFault,
    start: Duration,
    end: Duration,
    /// For a lost reply: whether a statement passed while it was armed.
    fired: bool,
}

/// One answered `GET /v1/jobs?idempotency_key=`.
struct Lookup {
    owner: usize,
    key: usize,
    sent: Duration,
    found: Option<String>,
}

struct ServerError {
    at: Duration,
    gateway: usize,
    status: u16,
    body: Value,
}

struct TransportError {
    at: Duration,
    gateway: usize,
    generation: u32,
    error: String,
}

#[derive(Default)]
struct Record {
    posts: Vec<Post>,
    unsettled: Vec<Unsettled>,
    store_faults: Vec<FaultWindow>,
    lookups: Vec<Lookup>,
    snapshots: Vec<Snapshot>,
    server_errors: Vec<ServerError>,
    transport_errors: Vec<TransportError>,
    cancel_tried: HashSet<String>,
    cancelled: HashSet<String>,
    resolved: usize,
    known: Vec<String>,
    violations: Vec<String>,
}

#[derive(Clone)]
struct Target {
    url: String,
    generation: u32,
}

struct Reply {
    status: u16,
    body: Value,
    sent: Duration,
    received: Duration,
}

/// What every task shares: the gateways' addresses, the HTTP client, and
/// the record of everything observed.
struct Shared {
    tag: String,
    start: Instant,
    /// `start` on the wall clock the gateways stamp jobs with, in ms.
    start_utc_ms: i64,
    http: reqwest::Client,
    targets: RwLock<[Target; 2]>,
    record: Mutex<Record>,
    ops_done: watch::Sender<usize>,
}

impl Shared {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn violation(&self, invariant: &str, message: String) {
        let line = format!("[{}] {invariant}: {message}", self.tag);
        self.record.lock().unwrap().violations.push(line);
    }

    /// One HTTP exchange with gateway `gateway`; `None` when it broke off
    /// (recorded as a transport error).
    async fn call(
        &self,
        gateway: usize,
        build: impl FnOnce(&reqwest::Client, &str) -> RequestBuilder,
    ) -> Option<Reply> {
        let target = self.targets.read().unwrap()[gateway].clone();
        let sent = self.now();
        let exchange = async {
            let response = build(&self.http, &target.url).timeout(Duration::from_secs(20)).send().await?;
            let status = response.status().as_u16();
            let bytes = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, bytes))
        };
        match exchange.await {
            Ok((status, bytes)) => {
                let received = self.now();
                let body = serde_json::from_slice(&bytes)
                    .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
                if status >= 500 {
                    let error = ServerError { at: received, gateway, status, body: body.clone() };
                    self.record.lock().unwrap().server_errors.push(error);
                }
                Some(Reply { status, body, sent, received })
            }
            Err(err) => {
                let mut error = err.to_string();
                let mut source = std::error::Error::source(&err);
                while let Some(cause) = source {
                    error.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                let at = self.now();
                let error = TransportError { at, gateway, generation: target.generation, error };
                self.record.lock().unwrap().transport_errors.push(error);
                None
            }
        }
    }

    fn snapshot(&self, reply: &Reply) {
        let snapshot = Snapshot { sent: reply.sent, received: reply.received, job: reply.body.clone() };
        self.record.lock().unwrap().snapshots.push(snapshot);
    }

    fn learn(&self, job_id: &str) {
        let mut record = self.record.lock().unwrap();
        if !record.known.iter().any(|known| known == job_id) {
            record.known.push(job_id.to_owned());
        }
    }
}

fn slug(body: &Value) -> Option<String> {
    body["type"].as_str().and_then(|t| t.rsplit('/').next()).map(str::to_owned)
}

fn str_of(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

// ------------------------------------------------------------- the clients

async fn client(shared: Arc<Shared>, plan: Arc<Plan>, mut rng: Rng, barrier: Arc<Barrier>) {
    barrier.wait().await;
    let mut mine: Vec<(usize, String)> = Vec::new();
    for _ in 0..OPS_PER_CLIENT {
        tokio::time::sleep(Duration::from_millis(rng.below(80) as u64)).await;
        client_op(&shared, &plan, &mut rng, &mut mine).await;
        shared.ops_done.send_modify(|done| *done += 1);
    }
}

/// One client op: mostly creates (colliding keys, two owners, now and then
/// another body), reads of its own jobs, and lookups by key.
async fn client_op(shared: &Shared, plan: &Plan, rng: &mut Rng, mine: &mut Vec<(usize, String)>) {
    let roll = rng.below(100);
    if roll < 70 || mine.is_empty() {
        let owner = rng.below(2);
        let key = rng.below(KEYS);
        let variant = usize::from(rng.chance(12));
        if let Some(id) = create(shared, plan, rng, owner, key, variant).await {
            if rng.chance(10) {
                read_as_stranger(shared, rng, owner, &id).await;
            }
            if rng.chance(4) {
                cancel(shared, rng, owner, &id).await;
            }
            mine.push((owner, id));
        }
    } else if roll < 88 {
        let (owner, id) = mine[rng.below(mine.len())].clone();
        let wait = rng.chance(30);
        let reply = shared
            .call(rng.below(2), |http, url| {
                let request = http.get(format!("{url}/v1/jobs/{id}")).bearer_auth(OWNERS[owner].0);
                if wait { request.header("prefer", "wait=1") } else { request }
            })
            .await;
        let Some(reply) = reply else { return };
        if reply.status == 200 && reply.body["id"] == id.as_str() {
            shared.snapshot(&reply);
        } else if reply.status != 503 {
            let message = format!("GET of its own job {id} answered {}: {}", reply.status, reply.body);
            shared.violation("I1", message);
        }
    } else {
        let owner = rng.below(2);
        let key = rng.below(KEYS);
        let reply = shared
            .call(rng.below(2), |http, url| {
                http.get(format!("{url}/v1/jobs?idempotency_key={}", Plan::key_name(key)))
                    .bearer_auth(OWNERS[owner].0)
            })
            .await;
        let Some(reply) = reply else { return };
        let found = match reply.status {
            200 => {
                shared.snapshot(&reply);
                Some(str_of(&reply.body["id"]))
            }
            404 => None,
            503 => return,
            other => {
                shared.violation("I1", format!("GET by key answered {other}: {}", reply.body));
                return;
            }
        };
        let lookup = Lookup { owner, key, sent: reply.sent, found };
        shared.record.lock().unwrap().lookups.push(lookup);
    }
}

/// `POST /v1/jobs`, retried like a careful client: the same intent again
/// under the same key, on the other gateway when the exchange broke off,
/// and after a 503 (which, when the job may have been stored, asks for
/// exactly that). A refusal by a limit is not retried: its window would
/// outlast the run.
async fn create(
    shared: &Shared,
    plan: &Plan,
    rng: &mut Rng,
    owner: usize,
    key: usize,
    variant: usize,
) -> Option<String> {
    let body = plan.body(key, variant);
    let wait = rng.chance(35);
    let mut gateway = rng.below(2);
    for _ in 0..CREATE_TRIES {
        let sent = shared.now();
        let reply = shared
            .call(gateway, |http, url| {
                let request = http
                    .post(format!("{url}/v1/jobs"))
                    .bearer_auth(OWNERS[owner].0)
                    .header("idempotency-key", Plan::key_name(key))
                    .json(&body);
                if wait { request.header("prefer", "wait=2") } else { request }
            })
            .await;
        let Some(reply) = reply else {
            let unsettled = Unsettled { owner, key, variant, sent, received: shared.now(), reply: None };
            shared.record.lock().unwrap().unsettled.push(unsettled);
            gateway = 1 - gateway;
            continue;
        };
        if reply.status == 503 {
            let unsettled = Unsettled {
                owner,
                key,
                variant,
                sent: reply.sent,
                received: reply.received,
                reply: Some(reply.body),
            };
            shared.record.lock().unwrap().unsettled.push(unsettled);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let ok = matches!(reply.status, 200 | 201);
        let job_id = if ok {
            Some(str_of(&reply.body["id"]))
        } else {
            reply.body["job_id"].as_str().map(str::to_owned)
        };
        if ok {
            shared.snapshot(&reply);
            shared.learn(job_id.as_deref().unwrap_or_default());
        }
        let post = Post {
            owner,
            key,
            variant,
            status: reply.status,
            sent: reply.sent,
            received: reply.received,
            job_id: job_id.clone(),
            problem: if ok { None } else { slug(&reply.body) },
            body: reply.body,
        };
        shared.record.lock().unwrap().posts.push(post);
        return if ok { job_id } else { None };
    }
    shared.violation("I5", format!("POST of key {key} for {} never got an answer", OWNERS[owner].1));
    None
}

/// The other owner must not see the job.
async fn read_as_stranger(shared: &Shared, rng: &mut Rng, owner: usize, id: &str) {
    let stranger = OWNERS[1 - owner].0;
    let reply = shared
        .call(rng.below(2), |http, url| http.get(format!("{url}/v1/jobs/{id}")).bearer_auth(stranger))
        .await;
    if let Some(reply) = reply
        && !matches!(reply.status, 404 | 503)
    {
        let message = format!(
            "{} read {}'s job {id}: {} {}",
            OWNERS[1 - owner].1,
            OWNERS[owner].1,
            reply.status,
            reply.body
        );
        shared.violation("I1", message);
    }
}

async fn cancel(shared: &Shared, rng: &mut Rng, owner: usize, id: &str) {
    shared.record.lock().unwrap().cancel_tried.insert(id.to_owned());
    let reply = shared
        .call(rng.below(2), |http, url| {
            http.post(format!("{url}/v1/jobs/{id}/cancel")).bearer_auth(OWNERS[owner].0)
        })
        .await;
    let Some(reply) = reply else { return };
    match reply.status {
        200 if reply.body["status"] == "cancelled" => {
            shared.snapshot(&reply);
            shared.record.lock().unwrap().cancelled.insert(id.to_owned());
        }
        409 if slug(&reply.body).as_deref() == Some("job-completed") => {}
        503 => {}
        _ => shared.violation("I8", format!("cancel of {id} answered {}: {}", reply.status, reply.body)),
    }
}

/// Now and then an admin looks at a known job and gives up on its unknown
/// attempt (`abandoned`: its late answer, if any, must still count).
async fn operator(shared: Arc<Shared>, mut rng: Rng, stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        tokio::time::sleep(Duration::from_millis(80 + rng.below(120) as u64)).await;
        let ids: Vec<String> = {
            let record = shared.record.lock().unwrap();
            if record.known.is_empty() {
                continue;
            }
            (0..2).map(|_| record.known[rng.below(record.known.len())].clone()).collect()
        };
        for id in ids {
            let gateway = rng.below(2);
            let reply = shared
                .call(gateway, |http, url| http.get(format!("{url}/v1/jobs/{id}")).bearer_auth(ADMIN))
                .await;
            let Some(reply) = reply.filter(|reply| reply.status == 200) else { continue };
            shared.snapshot(&reply);
            let unknown: Vec<i64> = reply.body["attempts"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|attempt| attempt["state"] == "unknown")
                .filter_map(|attempt| attempt["number"].as_i64())
                .collect();
            for number in unknown {
                if !rng.chance(60) {
                    continue;
                }
                let reason = json!({"as": "abandoned", "reason": "history test: operator gives up"});
                let reply = shared
                    .call(gateway, |http, url| {
                        http.post(format!("{url}/v1/jobs/{id}/attempts/{number}/resolve"))
                            .bearer_auth(ADMIN)
                            .json(&reason)
                    })
                    .await;
                let Some(reply) = reply else { continue };
                match reply.status {
                    // Abandoned, or already past it: its late answer came in since.
                    200 if reachable(ATTEMPT_EDGES, "abandoned", &str_of(&reply.body["state"])) => {
                        shared.record.lock().unwrap().resolved += 1;
                    }
                    409 if slug(&reply.body).as_deref() == Some("attempt-not-unknown") => {}
                    503 => {}
                    _ => shared.violation(
                        "I5",
                        format!("resolve of {id}/{number} answered {}: {}", reply.status, reply.body),
                    ),
                }
            }
        }
    }
}

/// The proxy in front of PostgreSQL does the plan's faults, each when the
/// clients have done its number of ops, until they are all done. None
/// while a gateway starts (`quiet`): a store fault at start-up is a failed
/// start, which a supervisor retries and this test does not.
async fn store_faults(
    shared: Arc<Shared>,
    proxy: Arc<ToggleProxy>,
    faults: Vec<(usize, StoreFault)>,
    quiet: Arc<tokio::sync::RwLock<()>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut ops = shared.ops_done.subscribe();
    for (after, fault) in faults {
        tokio::select! {
            reached = ops.wait_for(|done| *done >= after) => reached.map(|_| ()).unwrap(),
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let _quiet = quiet.read().await;
        let start = shared.now();
        let mut fired = false;
        match fault {
            StoreFault::Stall(length) => {
                proxy.set_stalled(true);
                tokio::time::sleep(length).await;
                proxy.set_stalled(false);
            }
            StoreFault::Reset(length) => {
                proxy.set_up(false);
                tokio::time::sleep(length).await;
                proxy.set_up(true);
            }
            StoreFault::LostReply(which) => {
                let mut cuts = proxy.cuts();
                let before = *cuts.borrow_and_update();
                which.arm(&proxy);
                let passed = tokio::time::timeout(LOST_REPLY_WAIT, cuts.wait_for(|n| *n > before)).await;
                // Not fired in time: take it back, unless it fires meanwhile.
                fired = passed.is_ok() || !proxy.disarm();
            }
        }
        let window = FaultWindow { fault, start, end: shared.now(), fired };
        shared.record.lock().unwrap().store_faults.push(window);
    }
}

// ------------------------------------------------------------ the gateways

fn write_config(store_url: &str, upstream: SocketAddr, plan: &Plan, instance: &str, dir: &Path) -> PathBuf {
    let mut doc = common::test_config_doc(store_url, Some(upstream));
    let providers: Vec<toml::Value> = CHAOS
        .iter()
        .map(|chaos| {
            let base_url = match chaos.dialect {
                "openai" | "openai-responses" => format!("http://{upstream}/v1"),
                _ => format!("http://{upstream}"),
            };
            let mut provider = toml::Table::new();
            provider.insert("name".into(), chaos.name.into());
            provider.insert("dialect".into(), chaos.dialect.into());
            provider.insert("base_url".into(), base_url.into());
            provider.insert("model".into(), format!("sim:{}", chaos.script).into());
            provider.insert("max_execution".into(), MAX_EXECUTION.into());
            if PRICED.contains(&chaos.name) {
                let mut price = toml::Table::new();
                price.insert("input_per_mtok".into(), PRICE.0.into());
                price.insert("output_per_mtok".into(), PRICE.1.into());
                provider.insert("price".into(), price.into());
            }
            provider.into()
        })
        .collect();
    doc.insert("providers".into(), providers.into());
    let mut billing = toml::Table::new();
    billing.insert("currency".into(), "USD".into());
    billing.insert("default_max_tokens".into(), DEFAULT_MAX_TOKENS.into());
    doc.insert("billing".into(), billing.into());
    let metered = OWNERS[METERED].1;
    let mut budget = toml::Table::new();
    budget.insert("owner".into(), metered.into());
    budget.insert("limit".into(), BUDGET_USD.into());
    budget.insert("window".into(), BUDGET_WINDOW.into());
    doc.insert("budgets".into(), vec![toml::Value::from(budget)].into());
    let mut rate_limit = toml::Table::new();
    rate_limit.insert("owner".into(), metered.into());
    rate_limit.insert("route".into(), "*".into());
    rate_limit.insert("requests_per_minute".into(), REQUESTS_PER_MINUTE.into());
    doc.insert("rate_limits".into(), vec![toml::Value::from(rate_limit)].into());
    let routes: Vec<toml::Value> = plan
        .routes
        .iter()
        .enumerate()
        .map(|(index, chain)| {
            let mut route = toml::Table::new();
            route.insert("name".into(), Plan::route_name(index).into());
            let chain: Vec<toml::Value> = chain.iter().map(|name| (*name).into()).collect();
            route.insert("chain".into(), chain.into());
            route.insert("attempt_timeout".into(), ATTEMPT_TIMEOUT.into());
            route.insert("retries".into(), (RETRIES as i64).into());
            route.insert("retry_backoff".into(), "20ms".into());
            route.insert("max_retry_wait".into(), "1s".into());
            route.insert("require_contract_for_primary".into(), false.into());
            route.insert("require_contract_for_fallback".into(), false.into());
            route.into()
        })
        .collect();
    doc.insert("routes".into(), routes.into());
    let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
    server.insert("drain_timeout".into(), format!("{}ms", DRAIN_TIMEOUT.as_millis()).into());
    let mut engine = toml::Table::new();
    engine.insert("instance_id".into(), instance.into());
    engine.insert("lease_ttl".into(), LEASE_TTL.into());
    engine.insert("sweep_interval".into(), SWEEP_INTERVAL.into());
    doc.insert("engine".into(), engine.into());
    let path = dir.join(format!("{instance}-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    path
}

async fn spawn_gateway(config: &Path) -> common::Spawned {
    common::spawn_serve(config).await
}

// ----------------------------------------------------------- the scenario

async fn randomized_history(store: TestStore) {
    let seed = seed();
    let backend = match store.backend {
        common::Backend::Sqlite => "sqlite",
        common::Backend::Postgres => "postgres",
    };
    let tag = format!("seed={seed} {backend}");
    common::loud(&format!(
        "\n=== history [{tag}]: replay with INTENTGATE_HISTORY_SEED={seed} cargo test --test history ===\n"
    ));
    let began = Instant::now();
    let plan = Arc::new(Plan::new(seed));
    let chains: Vec<String> =
        plan.routes.iter().enumerate().map(|(i, chain)| format!("r{i}={}", chain.join(">"))).collect();
    common::loud(&format!(
        "=== history [{tag}]: routes {}; {} gateway {} after {} ops, back after {:?} as {} instance id\n",
        chains.join(" "),
        if plan.graceful { "SIGTERM" } else { "kill -9" },
        plan.victim,
        plan.kill_after_ops,
        plan.restart_pause,
        if plan.restart_same_id { "the same" } else { "a new" },
    ));

    let sim = Simulator::new(seed).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let sniffer = Sniffer::start(sim.addr()).await;
    // PostgreSQL is reached through a proxy that faults; in clear text, so
    // it can see which statement passes it.
    let proxy = match store.backend {
        common::Backend::Postgres => Some(Arc::new(ToggleProxy::start(store.pg_host_port()).await)),
        common::Backend::Sqlite => None,
    };
    let store_url = match &proxy {
        Some(proxy) => {
            let url = store.url_via(&proxy.addr.to_string());
            format!("{url}{}sslmode=disable", if url.contains('?') { '&' } else { '?' })
        }
        None => store.url.clone(),
    };
    if proxy.is_some() {
        let faults: Vec<String> =
            plan.store_faults.iter().map(|(after, fault)| format!("{fault:?} after {after}")).collect();
        common::loud(&format!("=== history [{tag}]: store faults {}\n", faults.join(", ")));
    }
    let dir = std::env::temp_dir().join(format!("intentgate-history-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let names = ["history-a", "history-b"];
    let mut processes = Vec::new();
    for name in names {
        let config = write_config(&store_url, sniffer.addr, &plan, name, &dir);
        processes.push(spawn_gateway(&config).await);
    }
    let shared = Arc::new(Shared {
        tag: tag.clone(),
        start: Instant::now(),
        start_utc_ms: chrono::Utc::now().timestamp_millis(),
        http: common::client(),
        targets: RwLock::new([0, 1].map(|i| Target { url: processes[i].url.clone(), generation: 0 })),
        record: Mutex::default(),
        ops_done: watch::Sender::new(0),
    });

    // The run: clients from a barrier, an operator, and the kill.
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let clients: Vec<_> = plan
        .clients
        .iter()
        .map(|rng| {
            let task = client(shared.clone(), plan.clone(), Rng(rng.0), barrier.clone());
            tokio::spawn(task)
        })
        .collect();
    let (stop, stopped) = watch::channel(false);
    let operator = tokio::spawn(operator(shared.clone(), Rng(plan.operator.0), stopped.clone()));
    let quiet = Arc::new(tokio::sync::RwLock::new(()));
    let faults = proxy.clone().map(|proxy| {
        let faults = plan.store_faults.clone();
        tokio::spawn(store_faults(shared.clone(), proxy, faults, quiet.clone(), stopped))
    });

    shared.ops_done.subscribe().wait_for(|done| *done >= plan.kill_after_ops).await.unwrap();
    let killed_at = shared.now();
    let killed_utc = chrono::Utc::now();
    let victim = &mut processes[plan.victim];
    if plan.graceful {
        // A rolling deploy's stop: not ready, then it drains and exits.
        let pid = victim.child.id().unwrap().to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let bound = DRAIN_TIMEOUT + Duration::from_secs(3);
        match tokio::time::timeout(bound, victim.child.wait()).await {
            Ok(status) => assert!(status.unwrap().success(), "[{tag}] a SIGTERM'd gateway exits cleanly"),
            Err(_) => {
                shared.violation(
                    "I9",
                    format!("gateway {} did not exit within {bound:?} of SIGTERM", plan.victim),
                );
                victim.child.start_kill().unwrap();
                victim.child.wait().await.unwrap();
            }
        }
    } else {
        victim.child.start_kill().unwrap(); // SIGKILL: no shutdown, no cleanup
        victim.child.wait().await.unwrap();
    }
    tokio::time::sleep(plan.restart_pause).await;
    let instance = if plan.restart_same_id {
        names[plan.victim].to_owned()
    } else {
        format!("{}-reborn", names[plan.victim])
    };
    let config = write_config(&store_url, sniffer.addr, &plan, &instance, &dir);
    let reborn = {
        let _quiet = quiet.write().await;
        spawn_gateway(&config).await
    };
    shared.targets.write().unwrap()[plan.victim] = Target { url: reborn.url.clone(), generation: 1 };
    let restarted_at = shared.now();
    let restarted_utc = chrono::Utc::now();
    processes.push(reborn);

    for client in clients {
        client.await.unwrap();
    }
    stop.send_replace(true);
    operator.await.unwrap();
    if let Some(faults) = faults {
        faults.await.unwrap();
    }
    let ops_ended = began.elapsed();

    // Drain: every job found, by the ids clients learned and by every
    // (owner, key) of the pool, must settle. A 503 (a store fault just
    // over; I5 judges it) is asked again.
    let mut ids: Vec<String> = shared.record.lock().unwrap().known.clone();
    let mut by_key: HashMap<(usize, usize), String> = HashMap::new();
    let live = 1 - plan.victim;
    let deadline = Instant::now() + DRAIN;
    for (owner, (api_key, _)) in OWNERS.iter().enumerate() {
        for key in 0..KEYS {
            let reply = loop {
                let reply = shared
                    .call(live, |http, url| {
                        http.get(format!("{url}/v1/jobs?idempotency_key={}", Plan::key_name(key)))
                            .bearer_auth(api_key)
                    })
                    .await
                    .unwrap_or_else(|| panic!("[{tag}] the live gateway does not answer"));
                if reply.status != 503 || Instant::now() > deadline {
                    break reply;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            match reply.status {
                200 => {
                    let id = str_of(&reply.body["id"]);
                    if !ids.contains(&id) {
                        ids.push(id.clone());
                    }
                    by_key.insert((owner, key), id);
                }
                404 => {}
                other => shared.violation("I1", format!("GET by key answered {other}: {}", reply.body)),
            }
        }
    }
    let mut finals: BTreeMap<String, Value> = BTreeMap::new();
    for id in &ids {
        loop {
            let reply = shared
                .call(live, |http, url| {
                    http.get(format!("{url}/v1/jobs/{id}")).bearer_auth(ADMIN).header("prefer", "wait=2")
                })
                .await
                .unwrap_or_else(|| panic!("[{tag}] the live gateway does not answer"));
            if reply.status == 503 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(reply.status, 200, "[{tag}] GET /v1/jobs/{id}: {}", reply.body);
            shared.snapshot(&reply);
            if settled(&reply.body) || Instant::now() > deadline {
                finals.insert(id.clone(), reply.body);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let drained = began.elapsed();

    // The store holds no job the API did not show.
    let config = common::config_from_doc(&common::test_config_doc(&store.url, None));
    let direct = intentgate::store::Store::connect(&config.store).await.unwrap();
    let stored = direct.count_jobs(None).await.unwrap();
    if stored != finals.len() as i64 {
        shared.violation("I1", format!("the store holds {stored} jobs, the API showed {}", finals.len()));
    }
    let meters = read_meters(&shared, live, &direct).await;

    let logs: Vec<String> = processes.iter().map(|p| p.logs.lock().unwrap().clone()).collect();
    for mut process in processes {
        let _ = process.child.start_kill();
        let _ = process.child.wait().await;
    }

    let check = Check {
        shared: &shared,
        plan: &plan,
        finals: &finals,
        by_key: &by_key,
        upstream: sniffer.calls(),
        sim_by_key: sim.calls().by_key,
        killed_at,
        restarted_at,
        victim: plan.victim,
        logs,
        meters,
        found: Mutex::default(),
    };
    check.all();
    let (armed, fired) = {
        let record = shared.record.lock().unwrap();
        let lost = record.store_faults.iter().filter(|f| matches!(f.fault, StoreFault::LostReply(_)));
        lost.fold((0, 0), |(armed, fired), f| (armed + 1, fired + usize::from(f.fired)))
    };
    // A lost reply fires on a statement as the driver sends it: were that
    // to change, none would fire, and the run would test less than it says.
    if armed >= 3 && fired == 0 {
        let message = format!("none of {armed} lost replies fired: the proxy no longer sees the statements");
        shared.violation("harness", message);
    }

    let record = shared.record.lock().unwrap();
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    let mut attempt_states: BTreeMap<String, usize> = BTreeMap::new();
    for job in finals.values() {
        *statuses.entry(str_of(&job["status"])).or_default() += 1;
        for attempt in job["attempts"].as_array().unwrap() {
            *attempt_states.entry(str_of(&attempt["state"])).or_default() += 1;
        }
    }
    common::loud(&format!(
        "=== history [{tag}]: {} posts, {} jobs {statuses:?}, attempts {attempt_states:?}, {} upstream calls, \
         {} resolved by the operator, {} cancelled, {} transport errors, {} 5xx; ops {:.1?}, drained {:.1?}; \
         gateway {} killed at {killed_utc}, back at {restarted_utc}\n",
        record.posts.len(),
        finals.len(),
        check.upstream.len(),
        record.resolved,
        record.cancelled.len(),
        record.transport_errors.len(),
        record.server_errors.len(),
        ops_ended,
        drained,
        plan.victim,
    ));
    let mut refused: BTreeMap<String, usize> = BTreeMap::new();
    for post in record.posts.iter().filter(|post| post.status == 429) {
        *refused.entry(post.problem.clone().unwrap_or_default()).or_default() += 1;
    }
    let mut ended_by_limits: BTreeMap<String, usize> = BTreeMap::new();
    for job in finals.values() {
        if let Some(code) = job["error"]["code"].as_str().filter(|code| LIMIT_SLUGS.contains(code)) {
            *ended_by_limits.entry(code.to_owned()).or_default() += 1;
        }
    }
    let nothing_stored = record.unsettled.iter().filter(|try_| try_.says_nothing_stored()).count();
    common::loud(&format!(
        "=== history [{tag}]: refused creates {refused:?}, chains ended by a limit {ended_by_limits:?}; \
         {} store faults ({fired} of {armed} lost replies fired); creates unsettled: {} (broke off {}, \
         503 nothing stored {nothing_stored}, 503 otherwise {})\n",
        record.store_faults.len(),
        record.unsettled.len(),
        record.unsettled.iter().filter(|try_| try_.reply.is_none()).count(),
        record.unsettled.iter().filter(|try_| try_.reply.is_some() && !try_.says_nothing_stored()).count(),
    ));
    if record.violations.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // Kept for the post-mortem: the configs and every process's log.
    let process_names =
        [names[0].to_owned(), names[1].to_owned(), format!("{}-restarted", names[plan.victim])];
    for (name, log) in process_names.iter().zip(&check.logs) {
        std::fs::write(dir.join(format!("{name}.log")), log).unwrap();
    }
    panic!(
        "history seed={seed} ({backend}): {} invariant violation(s); replay with INTENTGATE_HISTORY_SEED={seed}; \
         gateway logs in {}\n  {}",
        record.violations.len(),
        dir.display(),
        record.violations.join("\n  ")
    );
}

/// Terminal, with no attempt left open, and no late answer still possible:
/// an `abandoned` attempt may still answer (and must still count) until its
/// provider's `max_execution` has passed since it started.
fn settled(job: &Value) -> bool {
    let max_execution = humantime::parse_duration(MAX_EXECUTION).unwrap() + Duration::from_millis(500);
    let quiet_since = chrono::Utc::now() - chrono::Duration::from_std(max_execution).unwrap();
    matches!(job["status"].as_str(), Some("succeeded" | "failed" | "cancelled"))
        && job["attempts"].as_array().unwrap().iter().all(|a| match a["state"].as_str() {
            Some("starting" | "unknown") => false,
            Some("abandoned") => chrono::DateTime::parse_from_rfc3339(&str_of(&a["started_at"]))
                .is_ok_and(|started| started < quiet_since),
            _ => true,
        })
}

// ------------------------------------------------------------- the meters

/// One budget or rate limit as `GET /v1/usage` names it, and each of its
/// windows of the run as the store holds it.
struct MeterSeen {
    name: String,
    budget: bool,
    /// Whose and which route's attempts it counts; `None`: all of them.
    owner: Option<String>,
    route: Option<String>,
    limit: i64,
    window_ms: i64,
    /// `(window start, used, held)` of every window from the run's start.
    windows: Vec<(i64, i64, i64)>,
    /// What the API said of the window it was in: `(start, used, held)`.
    current: (i64, i64, i64),
}

impl MeterSeen {
    /// From its name, `budget/owner=alice/route=all/1h` or
    /// `rate0-requests/owner=alice/route=r3/1m` (docs/budgets.md): whom
    /// and what it counts, `all` being everyone.
    fn new(name: &str, budget: bool, limit: i64, window_ms: i64, current: (i64, i64, i64)) -> MeterSeen {
        let part = |prefix: &str| {
            name.split('/')
                .find_map(|part| part.strip_prefix(prefix))
                .filter(|v| *v != "all")
                .map(str::to_owned)
        };
        MeterSeen {
            name: name.to_owned(),
            budget,
            owner: part("owner="),
            route: part("route="),
            limit,
            window_ms,
            windows: Vec::new(),
            current,
        }
    }

    fn applies(&self, owner: &str, route: &str) -> bool {
        self.owner.as_deref().is_none_or(|o| o == owner) && self.route.as_deref().is_none_or(|r| r == route)
    }

    /// `(used, held)` in the window starting at `start_ms`, if the run had it.
    fn window(&self, start_ms: i64) -> Option<(i64, i64)> {
        self.windows.iter().find(|w| w.0 == start_ms).map(|w| (w.1, w.2))
    }

    /// What `attempt` counts on it: its charge, or one upstream call.
    fn charge(&self, attempt: &Value) -> i64 {
        if self.budget { attempt["usage"]["cost_nanos"].as_i64().unwrap_or(0) } else { 1 }
    }
}

fn window_ms(window: &str) -> i64 {
    match window {
        "1m" => 60_000,
        "1h" => 3_600_000,
        "1d" => 86_400_000,
        other => panic!("harness: a `{other}` window is not read"),
    }
}

fn rfc3339_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text).ok().map(|at| at.timestamp_millis())
}

/// Every owner's meters, named by `GET /v1/usage` (as an admin), and read
/// in each window since the run began from the store (the API shows the
/// current window only, and a run may straddle a minute).
async fn read_meters(shared: &Shared, gateway: usize, store: &intentgate::store::Store) -> Vec<MeterSeen> {
    let tag = &shared.tag;
    let mut meters: Vec<MeterSeen> = Vec::new();
    for (_, owner) in OWNERS {
        let reply = shared
            .call(gateway, |http, url| http.get(format!("{url}/v1/usage?owner={owner}")).bearer_auth(ADMIN))
            .await
            .unwrap_or_else(|| panic!("[{tag}] the live gateway does not answer"));
        assert_eq!(reply.status, 200, "[{tag}] GET /v1/usage?owner={owner}: {}", reply.body);
        let ms =
            |value: &Value| rfc3339_ms(&str_of(value)).unwrap_or_else(|| panic!("[{tag}] {}", reply.body));
        let int = |value: &Value| value.as_i64().unwrap_or_else(|| panic!("[{tag}] {}", reply.body));
        for budget in reply.body["budgets"].as_array().unwrap() {
            let current =
                (ms(&budget["window_start"]), int(&budget["spent_nanos"]), int(&budget["reserved_nanos"]));
            let length = window_ms(&str_of(&budget["window"]));
            meters.push(MeterSeen::new(
                &str_of(&budget["meter"]),
                true,
                int(&budget["limit_nanos"]),
                length,
                current,
            ));
        }
        for rate in reply.body["rate_limits"].as_array().unwrap() {
            assert_eq!(rate["per_minute"], "requests", "[{tag}] harness: only requests are limited: {rate}");
            let current = (ms(&rate["resets_at"]) - 60_000, int(&rate["used"]), int(&rate["reserved"]));
            meters.push(MeterSeen::new(&str_of(&rate["meter"]), false, int(&rate["limit"]), 60_000, current));
        }
    }
    meters.sort_by(|a, b| a.name.cmp(&b.name));
    meters.dedup_by(|a, b| a.name == b.name);
    let now_ms = chrono::Utc::now().timestamp_millis();
    for meter in &mut meters {
        let mut start = shared.start_utc_ms.div_euclid(meter.window_ms) * meter.window_ms;
        while start <= now_ms {
            let (used, held) = store.meter(&meter.name, start).await.unwrap();
            meter.windows.push((start, used, held));
            start += meter.window_ms;
        }
    }
    meters
}

// ------------------------------------------------------------- the checks

struct Check<'a> {
    shared: &'a Shared,
    plan: &'a Plan,
    finals: &'a BTreeMap<String, Value>,
    by_key: &'a HashMap<(usize, usize), String>,
    upstream: Vec<UpstreamCall>,
    sim_by_key: BTreeMap<String, u64>,
    killed_at: Duration,
    restarted_at: Duration,
    victim: usize,
    logs: Vec<String>,
    meters: Vec<MeterSeen>,
    /// Found here, handed to the record at the end (the record's lock is
    /// held while checking).
    found: Mutex<Vec<String>>,
}

impl Check<'_> {
    fn fail(&self, invariant: &str, message: String) {
        self.found.lock().unwrap().push(format!("[{}] {invariant}: {message}", self.shared.tag));
    }

    fn all(&self) {
        self.one_job_per_key();
        self.no_resent_attempt();
        for (id, job) in self.finals {
            self.job_final_state(id, job);
        }
        self.history_moves_forward();
        self.no_server_trouble();
        self.store_503s_tell_the_truth();
        self.limits_hold();
        let found = std::mem::take(&mut *self.found.lock().unwrap());
        self.shared.record.lock().unwrap().violations.extend(found);
    }

    /// I1.
    fn one_job_per_key(&self) {
        let record = self.shared.record.lock().unwrap();
        let mut posts: HashMap<(usize, usize), Vec<&Post>> = HashMap::new();
        for post in &record.posts {
            posts.entry((post.owner, post.key)).or_default().push(post);
        }
        for ((owner, key), posts) in &posts {
            let who = format!("{}/{}", OWNERS[*owner].1, Plan::key_name(*key));
            let Some(id) = self.by_key.get(&(*owner, *key)) else {
                if posts.iter().any(|p| matches!(p.status, 200 | 201 | 409)) {
                    self.fail("I1", format!("{who}: answered with a job, but no job has this key"));
                }
                continue;
            };
            let Some(job) = self.finals.get(id) else { continue };
            let bound = str_of(&job["request"]["input"]["messages"][0]["content"]);
            let bound_variant = (0..2).find(|v| Plan::content(*key, *v) == bound);
            if job["owner"] != OWNERS[*owner].1 || job["idempotency_key"] != Plan::key_name(*key).as_str() {
                self.fail("I1", format!("{who}: job {id} is {}/{}", job["owner"], job["idempotency_key"]));
            }
            if job["request"]["route"] != Plan::route_name(self.plan.key_route[*key]).as_str() {
                self.fail("I1", format!("{who}: job {id} stored request {}", job["request"]));
            }
            let created = posts.iter().filter(|p| p.status == 201).count();
            if created > 1 {
                self.fail("I1", format!("{who}: {created} responses were 201 Created"));
            }
            for post in posts {
                let same_body = Some(post.variant) == bound_variant;
                let fine = match post.status {
                    200 | 201 => same_body && post.job_id.as_deref() == Some(id.as_str()),
                    409 => {
                        !same_body
                            && post.problem.as_deref() == Some("idempotency-key-reused")
                            && post.job_id.as_deref() == Some(id.as_str())
                    }
                    // Which limit, and whether it could refuse: I10.
                    429 => {
                        *owner == METERED && post.problem.as_deref().is_some_and(|p| LIMIT_SLUGS.contains(&p))
                    }
                    _ => false,
                };
                if !fine {
                    self.fail(
                        "I1",
                        format!(
                            "{who}: body variant {} (the job is bound to {bound:?}, job {id}) answered {} at {:?}: {}",
                            post.variant, post.status, post.received, post.body
                        ),
                    );
                }
                if matches!(post.status, 200 | 201) && post.body["owner"] != OWNERS[*owner].1 {
                    self.fail("I1", format!("{who}: a response showed owner {}", post.body["owner"]));
                }
            }
            // Once a create was answered, the key finds the job.
            let first_answer =
                posts.iter().filter(|p| matches!(p.status, 200 | 201)).map(|p| p.received).min();
            for lookup in record.lookups.iter().filter(|l| (l.owner, l.key) == (*owner, *key)) {
                let late_miss = lookup.found.is_none() && first_answer.is_some_and(|at| lookup.sent > at);
                if late_miss || lookup.found.as_ref().is_some_and(|found| found != id) {
                    self.fail(
                        "I1",
                        format!("{who}: GET by key sent at {:?} found {:?}", lookup.sent, lookup.found),
                    );
                }
            }
        }
        for key in 0..KEYS {
            if let (Some(a), Some(b)) = (self.by_key.get(&(0, key)), self.by_key.get(&(1, key)))
                && a == b
            {
                self.fail("I1", format!("alice and bob share job {a} for key {}", Plan::key_name(key)));
            }
        }
    }

    /// I2.
    fn no_resent_attempt(&self) {
        let mut seen: HashMap<(&str, &str), Vec<&UpstreamCall>> = HashMap::new();
        let mut per_job: HashMap<&str, u64> = HashMap::new();
        for call in &self.upstream {
            seen.entry((&call.job_id, &call.attempt)).or_default().push(call);
            *per_job.entry(&call.job_id).or_default() += 1;
        }
        for ((job_id, number), calls) in &seen {
            if calls.len() > 1 {
                self.fail("I2", format!("job {job_id} attempt {number} was sent {} times", calls.len()));
            }
            let attempt = self.finals.get(*job_id).and_then(|job| {
                job["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|a| a["number"].as_u64().is_some_and(|n| number.parse() == Ok(n)))
                    .cloned()
            });
            let Some(attempt) = attempt else {
                self.fail(
                    "I2",
                    format!("the provider saw job {job_id} attempt {number:?}, which no job records"),
                );
                continue;
            };
            let expected_path = match chaos(&str_of(&attempt["provider"])).map(|c| c.dialect) {
                Some("openai") => "/v1/chat/completions",
                _ => "/v1/messages",
            };
            if calls.iter().any(|call| call.path != expected_path) {
                self.fail(
                    "I2",
                    format!(
                        "job {job_id} attempt {number} is on {} but went to {}",
                        attempt["provider"], calls[0].path
                    ),
                );
            }
        }
        for (id, job) in self.finals {
            for attempt in job["attempts"].as_array().unwrap() {
                let state = str_of(&attempt["state"]);
                let number = attempt["number"].to_string();
                let sent = seen.get(&(id.as_str(), number.as_str())).map_or(0, Vec::len);
                // An answer or a proven failure came from the provider.
                // The gateway's own proof that nothing left: never seen.
                if never_sent(attempt) {
                    if sent > 0 {
                        self.fail(
                            "I2",
                            format!("job {id} attempt {number} is not_sent but was seen {sent} times"),
                        );
                    }
                    continue;
                }
                if matches!(state.as_str(), "succeeded" | "superseded" | "failed") && sent == 0 {
                    self.fail(
                        "I2",
                        format!(
                            "job {id} attempt {number} is {state} but never reached the provider: {attempt}"
                        ),
                    );
                }
            }
            let proxied = per_job.get(id.as_str()).copied().unwrap_or(0);
            let counted = self.sim_by_key.get(id).copied().unwrap_or(0);
            if proxied != counted {
                self.fail("I2", format!("job {id}: the proxy saw {proxied} calls, the simulator {counted}"));
            }
        }
    }

    /// I3, I3b, I3c, I4, I7, I8 on one job's final state.
    fn job_final_state(&self, id: &str, job: &Value) {
        let status = str_of(&job["status"]);
        let mut attempts: Vec<&Value> = job["attempts"].as_array().unwrap().iter().collect();
        attempts.sort_by_key(|a| a["number"].as_i64());
        let show = |a: &Value| {
            format!(
                "#{} {} {} ({})",
                a["number"],
                str_of(&a["provider"]),
                str_of(&a["state"]),
                str_of(&a["detail"])
            )
        };
        let history: Vec<String> = attempts.iter().map(|a| show(a)).collect();
        let about = format!("job {id} ({} {}, attempts [{}])", job["route"], status, history.join("; "));

        // I4.
        if !matches!(status.as_str(), "succeeded" | "failed" | "cancelled") {
            self.fail("I4", format!("{about} did not settle within {DRAIN:?} of the last op"));
        }
        for attempt in &attempts {
            if matches!(attempt["state"].as_str(), Some("starting" | "unknown")) {
                self.fail("I4", format!("{about}: attempt {} stayed open", show(attempt)));
            }
        }
        for (i, attempt) in attempts.iter().enumerate() {
            if attempt["number"].as_i64() != Some(i as i64 + 1) {
                self.fail("I4", format!("{about}: attempt numbers are not 1..n"));
                break;
            }
        }

        // I3.
        let winners: Vec<&&Value> = attempts.iter().filter(|a| a["state"] == "succeeded").collect();
        if status == "succeeded" {
            match winners.as_slice() {
                [winner] => {
                    let content = str_of(&job["request"]["input"]["messages"][0]["content"]);
                    let result = &job["result"];
                    if job["completed_by"] != winner["id"] {
                        self.fail(
                            "I3",
                            format!("{about}: completed_by {} is not the winner", job["completed_by"]),
                        );
                    }
                    if result["provider"] != winner["provider"]
                        || result["text"] != format!("echo: {content}").as_str()
                    {
                        self.fail(
                            "I3",
                            format!("{about}: result {result} is not {}'s answer", winner["provider"]),
                        );
                    }
                    if job["version"].as_i64() != winner["job_version"].as_i64().map(|v| v + 1) {
                        self.fail(
                            "I3",
                            format!(
                                "{about}: version {} after a winner that read {}",
                                job["version"], winner["job_version"]
                            ),
                        );
                    }
                }
                _ => self.fail("I3", format!("{about}: {} succeeded attempts", winners.len())),
            }
        } else if !winners.is_empty() || !job["completed_by"].is_null() || !job["result"].is_null() {
            self.fail(
                "I3",
                format!("{about}: a winner or result on a job that did not succeed: {}", job["result"]),
            );
        }

        // I3b: `superseded` means another attempt's answer won.
        for attempt in &attempts {
            if attempt["state"] == "superseded" {
                let lost_to_another = status == "succeeded" && job["completed_by"] != attempt["id"];
                if !lost_to_another && status != "cancelled" {
                    self.fail(
                        "I3b",
                        format!("{about}: attempt {} answered and its answer was thrown away", show(attempt)),
                    );
                }
            }
        }

        // I3c.
        for attempt in &attempts {
            let state = str_of(&attempt["state"]);
            let Some(chaos) = chaos(&str_of(&attempt["provider"])) else {
                self.fail("I3c", format!("{about}: unknown provider {}", attempt["provider"]));
                continue;
            };
            let allowed: &[&str] = match chaos.kind {
                Kind::Answers => &["succeeded", "superseded", "abandoned"],
                Kind::Errors => &["failed", "abandoned"],
                Kind::Silent => &["abandoned"],
            };
            let open = matches!(state.as_str(), "starting" | "unknown");
            if !allowed.contains(&state.as_str()) && !open && !never_sent(attempt) {
                self.fail(
                    "I3c",
                    format!(
                        "{about}: attempt {} on `{}` ({:?}) cannot be {state}",
                        show(attempt),
                        chaos.script,
                        chaos.kind
                    ),
                );
            }
        }

        // I7.
        let route = str_of(&job["route"]);
        let chain = route
            .strip_prefix('r')
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| self.plan.routes.get(i));
        let Some(chain) = chain else {
            self.fail("I7", format!("{about}: route {route} is not one of the test's"));
            return;
        };
        let positions: Vec<Option<usize>> =
            attempts.iter().map(|a| chain.iter().position(|p| a["provider"] == *p)).collect();
        let mut run = 0;
        for (i, position) in positions.iter().enumerate() {
            let Some(position) = position else {
                self.fail("I7", format!("{about}: attempt {} is not on the chain {chain:?}", i + 1));
                continue;
            };
            let previous = if i == 0 { None } else { positions[i - 1] };
            // After an attempt never sent, recovery sends it again there,
            // and the drive it starts counts its retries afresh.
            let restarted = i > 0 && never_sent(attempts[i - 1]);
            run = if previous == Some(*position) && !restarted { run + 1 } else { 0 };
            let in_order = previous.is_none_or(|p| {
                p < *position || (p == *position && (RETRIED.contains(&chain[p]) || restarted))
            });
            if !in_order || run > RETRIES {
                self.fail("I7", format!("{about}: attempts out of the chain's order {chain:?}"));
                break;
            }
        }
        // A limit may end the chain: its next attempt was refused, not sent.
        let limit_ended = job["error"]["code"].as_str().is_some_and(|code| LIMIT_SLUGS.contains(&code));
        let last = positions.last().copied().flatten();
        if status == "failed" && !limit_ended && last != Some(chain.len() - 1) {
            self.fail("I7", format!("{about}: failed before its chain {chain:?} was exhausted"));
        }
        if limit_ended {
            // The refused attempt was the chain's next (or a retry of the last).
            let reason = str_of(&job["error"]["reason"]);
            let refused = reason.split('`').nth(1).and_then(|name| chain.iter().position(|p| *p == name));
            if let Some(refused) = refused
                && last.is_some_and(|last| refused < last)
            {
                self.fail(
                    "I7",
                    format!("{about}: a limit refused `{}`, behind the chain {chain:?}", chain[refused]),
                );
            }
        }
        if status == "failed" && job["error"].is_null() {
            self.fail("I7", format!("{about}: failed without an error"));
        }

        // I8.
        let record = self.shared.record.lock().unwrap();
        if record.cancelled.contains(id) && status != "cancelled" {
            self.fail("I8", format!("{about}: its cancel answered 200"));
        }
        if status == "cancelled" && !record.cancel_tried.contains(id) {
            self.fail("I8", format!("{about}: cancelled, but nobody asked"));
        }
    }

    /// I6: no observation of a job shows it younger than an observation
    /// that had been received before it was sent.
    fn history_moves_forward(&self) {
        let record = self.shared.record.lock().unwrap();
        let mut per_job: HashMap<String, Vec<&Snapshot>> = HashMap::new();
        for snapshot in &record.snapshots {
            per_job.entry(str_of(&snapshot.job["id"])).or_default().push(snapshot);
        }
        for (id, snapshots) in per_job {
            let mut reported = false;
            for before in &snapshots {
                for after in snapshots.iter().filter(|s| s.sent > before.received) {
                    if let Err(why) = moves_forward(&before.job, &after.job) {
                        self.fail(
                            "I6",
                            format!(
                                "job {id}: seen at {:?} then at {:?}: {why}\n    before: {}\n    after:  {}",
                                before.received, after.sent, before.job, after.job
                            ),
                        );
                        reported = true;
                        break;
                    }
                }
                if reported {
                    break;
                }
            }
        }
    }

    /// Whether `at` is in an outage: from the kill to a moment after the
    /// restart, or from a store fault to a moment after it ended.
    fn in_outage(&self, at: Duration, faults: &[FaultWindow]) -> bool {
        (self.killed_at..self.restarted_at + OUTAGE_GRACE).contains(&at)
            || faults.iter().any(|fault| (fault.start..fault.end + OUTAGE_GRACE).contains(&at))
    }

    /// I5.
    fn no_server_trouble(&self) {
        let record = self.shared.record.lock().unwrap();
        for error in &record.server_errors {
            if error.status != 503 || !self.in_outage(error.at, &record.store_faults) {
                let faults: Vec<String> = record
                    .store_faults
                    .iter()
                    .map(|f| format!("{:?} {:?}..{:?}", f.fault, f.start, f.end))
                    .collect();
                self.fail(
                    "I5",
                    format!(
                        "gateway {} answered {} at {:?} (kill at {:?}, back at {:?}; store faults [{}]): {}",
                        error.gateway,
                        error.status,
                        error.at,
                        self.killed_at,
                        self.restarted_at,
                        faults.join(", "),
                        error.body
                    ),
                );
            }
        }
        for error in &record.transport_errors {
            let from_the_killed =
                error.gateway == self.victim && error.generation == 0 && error.at >= self.killed_at;
            if !from_the_killed {
                self.fail(
                    "I5",
                    format!(
                        "request to gateway {} (generation {}) broke off at {:?} (kill at {:?}): {}",
                        error.gateway, error.generation, error.at, self.killed_at, error.error
                    ),
                );
            }
        }
        for (i, log) in self.logs.iter().enumerate() {
            if let Some(at) = log.find("panicked") {
                let line_start = log[..at].rfind('\n').map_or(0, |n| n + 1);
                let excerpt: String = log[line_start..].chars().take(600).collect();
                self.fail("I5", format!("gateway process {i} panicked: {excerpt}"));
            }
        }
    }

    /// I5, what a 503 to a create says of the store: "nothing was stored"
    /// only when nothing was (a client may then send the intent again under
    /// a new key); else it asks for a retry under the same key, naming the
    /// key or the job. The two are told apart by the detail alone: both
    /// are `store-unavailable`, and both name the key.
    fn store_503s_tell_the_truth(&self) {
        let record = self.shared.record.lock().unwrap();
        for try_ in &record.unsettled {
            let Some(body) = &try_.reply else { continue };
            if slug(body).as_deref() != Some("store-unavailable") || try_.says_nothing_stored() {
                continue;
            }
            let names =
                body["idempotency_key"] == Plan::key_name(try_.key).as_str() || body["job_id"].is_string();
            if !str_of(&body["detail"]).contains("same Idempotency-Key") || !names {
                self.fail(
                    "I5",
                    format!(
                        "{}/{}: a 503 at {:?} that does not say nothing was stored does not ask for a retry \
                         under the same key, naming it or the job: {body}",
                        OWNERS[try_.owner].1,
                        Plan::key_name(try_.key),
                        try_.received
                    ),
                );
            }
        }
        // Which request made each job: one of its body whose interval holds
        // its `created_at`. A denial cannot be it: a 503 saying nothing was
        // stored, or a 429 (a refused job stores nothing).
        for ((owner, key), id) in self.by_key {
            let Some(job) = self.finals.get(id) else { continue };
            let who = format!("{}/{}", OWNERS[*owner].1, Plan::key_name(*key));
            let bound = str_of(&job["request"]["input"]["messages"][0]["content"]);
            let Some(variant) = (0..2).find(|v| Plan::content(*key, *v) == bound) else { continue };
            let Some(created) = rfc3339_ms(&str_of(&job["created_at"])) else {
                self.fail("I1", format!("{who}: job {id} has no created_at"));
                continue;
            };
            let created = created - self.shared.start_utc_ms;
            let during = |sent: Duration, received: Duration| {
                sent.as_millis() as i64 - CLOCK_SLACK_MS <= created
                    && created <= received.as_millis() as i64 + CLOCK_SLACK_MS
            };
            let posts =
                record.posts.iter().filter(|p| (p.owner, p.key, p.variant) == (*owner, *key, variant));
            let tries =
                record.unsettled.iter().filter(|t| (t.owner, t.key, t.variant) == (*owner, *key, variant));
            // (sent, received, what it said if it was a denial)
            let mut requests: Vec<(Duration, Duration, Option<String>)> = Vec::new();
            for post in posts.filter(|p| matches!(p.status, 201 | 429)) {
                let denial = (post.status == 429).then(|| format!("429 {}", post.body));
                requests.push((post.sent, post.received, denial));
            }
            for try_ in tries {
                let denial =
                    try_.says_nothing_stored().then(|| format!("503 {}", try_.reply.as_ref().unwrap()));
                requests.push((try_.sent, try_.received, denial));
            }
            let in_flight: Vec<&(Duration, Duration, Option<String>)> =
                requests.iter().filter(|(sent, received, _)| during(*sent, *received)).collect();
            // All of them, should the clocks disagree by more than the slack.
            let makers = if in_flight.is_empty() { requests.iter().collect() } else { in_flight };
            if makers.is_empty() {
                self.fail("I1", format!("{who}: job {id} exists, but no create of its body was sent"));
            } else if makers.iter().all(|(_, _, denial)| denial.is_some()) {
                let denials: Vec<String> = makers
                    .iter()
                    .filter_map(|(sent, received, denial)| {
                        denial.as_ref().map(|d| format!("{sent:?}..{received:?}: {d}"))
                    })
                    .collect();
                let invariant = if denials.iter().any(|d| d.contains(": 503")) { "I5" } else { "I10" };
                self.fail(
                    invariant,
                    format!(
                        "{who}: job {id} was created at {created} ms, but every create of it that could have \
                         made it said that nothing was stored:\n      {}",
                        denials.join("\n      ")
                    ),
                );
            }
        }
    }

    /// I10: each meter's windows add up to what its attempts were charged,
    /// hold nothing once every attempt settled, and stay within the limit;
    /// each refusal names a limit that applies and was full.
    fn limits_hold(&self) {
        let record = self.shared.record.lock().unwrap();
        let metered = OWNERS[METERED].1;
        let names: Vec<&str> = self.meters.iter().map(|m| m.name.as_str()).collect();
        for budget in [true, false] {
            if !self.meters.iter().any(|m| m.budget == budget && m.owner.as_deref() == Some(metered)) {
                let what = if budget { "budget" } else { "rate limit" };
                self.fail("I10", format!("GET /v1/usage shows no {what} of {metered}: {names:?}"));
            }
        }
        for meter in &self.meters {
            let name = &meter.name;
            if meter.owner.as_deref() != Some(metered) {
                self.fail("I10", format!("{name} meters {:?}, for whom no limit is configured", meter.owner));
            }
            let (start, used, held) = meter.current;
            if meter.window(start) != Some((used, held)) {
                self.fail(
                    "I10",
                    format!(
                        "GET /v1/usage: {name} from {start} has {used} used, {held} held; the store {:?}",
                        meter.window(start)
                    ),
                );
            }
            for (start, used, held) in &meter.windows {
                if *held != 0 || *used > meter.limit {
                    self.fail(
                        "I10",
                        format!(
                            "{name} from {start}: {used} used, {held} held of {}, with every attempt settled",
                            meter.limit
                        ),
                    );
                }
            }
            let used: i64 = meter.windows.iter().map(|w| w.1).sum();
            let charged: i64 = self
                .finals
                .values()
                .filter(|job| meter.applies(&str_of(&job["owner"]), &str_of(&job["route"])))
                .flat_map(|job| job["attempts"].as_array().unwrap())
                .map(|attempt| meter.charge(attempt))
                .sum();
            if used != charged {
                self.fail(
                    "I10",
                    format!("{name}: {used} used over the run, but its attempts add up to {charged}"),
                );
            }
        }
        for post in record.posts.iter().filter(|post| post.status == 429) {
            self.refusal_names_its_limit(post, &record.posts);
        }
        for (id, job) in self.finals {
            if job["error"]["code"].as_str().is_some_and(|code| LIMIT_SLUGS.contains(&code)) {
                self.limit_ended_the_chain(id, job);
            }
        }
    }

    /// The meter a refusal names, if it is one that applies to `owner` and
    /// `route` and refuses with `slug`.
    fn refusing_meter(&self, names: &[&str], slug: &str, owner: &str, route: &str) -> Option<&MeterSeen> {
        self.meters.iter().find(|m| {
            names.contains(&m.name.as_str())
                && m.budget == (slug == "budget-exhausted")
                && m.applies(owner, route)
        })
    }

    /// A rate limit refuses only when full, and a request counts as used
    /// at once and for good: the window it refused in ended full.
    fn was_full(&self, meter: &MeterSeen, start_ms: i64) -> Result<(), String> {
        match meter.window(start_ms) {
            Some((used, _)) if meter.budget || used == meter.limit => Ok(()),
            Some((used, _)) => {
                Err(format!("its window from {start_ms} ended with {used} of {} used", meter.limit))
            }
            None => Err(format!("its window from {start_ms} is not one of the run's")),
        }
    }

    /// I10 on a `429` to a create.
    fn refusal_names_its_limit(&self, post: &Post, posts: &[Post]) {
        let (owner, key) = (OWNERS[post.owner].1, Plan::key_name(post.key));
        let route = Plan::route_name(self.plan.key_route[post.key]);
        let slug = post.problem.clone().unwrap_or_default();
        let about = format!("{owner}/{key}: 429 {slug} at {:?} ({})", post.received, post.body);
        let name = str_of(&post.body["meter"]);
        let Some(meter) = self.refusing_meter(&[name.as_str()], &slug, owner, &route) else {
            self.fail("I10", format!("{about} names no limit of {owner} on {route} that refuses so"));
            return;
        };
        match rfc3339_ms(&str_of(&post.body["resets_at"])) {
            Some(end) => {
                if let Err(why) = self.was_full(meter, end - meter.window_ms) {
                    self.fail("I10", format!("{about}: {why}"));
                }
            }
            None => self.fail("I10", format!("{about} has no resets_at")),
        }
        // A create of a job that exists is answered from the store.
        let answered = posts
            .iter()
            .filter(|p| (p.owner, p.key) == (post.owner, post.key) && matches!(p.status, 200 | 201 | 409))
            .map(|p| p.received)
            .min();
        if let Some(answered) = answered.filter(|at| post.sent > *at) {
            self.fail("I10", format!("{about}: sent after the key's job was answered at {answered:?}"));
        }
    }

    /// I10 on a job whose chain a limit ended.
    fn limit_ended_the_chain(&self, id: &str, job: &Value) {
        let (owner, route) = (str_of(&job["owner"]), str_of(&job["route"]));
        let code = str_of(&job["error"]["code"]);
        let reason = str_of(&job["error"]["reason"]);
        let about = format!("job {id} ({owner}, {route}, {}): {code}, {reason:?}", job["status"]);
        if job["status"] != "failed" {
            self.fail("I10", format!("{about}: a limit's error on a job that did not fail"));
        }
        let named: Vec<&str> = reason.split('`').skip(1).step_by(2).collect();
        let Some(meter) = self.refusing_meter(&named, &code, &owner, &route) else {
            self.fail("I10", format!("{about} names no limit of {owner} on {route} that refuses so"));
            return;
        };
        // Refused after its last attempt started and before the job failed:
        // the window is known when both fall in the same one.
        let attempts = job["attempts"].as_array().unwrap();
        let after = attempts.iter().map(|a| &a["started_at"]).chain([&job["created_at"]]);
        let after = after.filter_map(|at| rfc3339_ms(&str_of(at))).max();
        let before = rfc3339_ms(&str_of(&job["updated_at"]));
        if let (Some(after), Some(before)) = (after, before) {
            let window = |at: i64| at.div_euclid(meter.window_ms) * meter.window_ms;
            if window(after) == window(before)
                && let Err(why) = self.was_full(meter, window(after))
            {
                self.fail("I10", format!("{about}: {why}"));
            }
        }
    }
}

/// Whether `after` can follow `before` along the documented state machines.
fn moves_forward(before: &Value, after: &Value) -> Result<(), String> {
    let (from, to) = (str_of(&before["status"]), str_of(&after["status"]));
    if !reachable(JOB_EDGES, &from, &to) {
        return Err(format!("status {from} → {to}"));
    }
    if after["version"].as_i64() < before["version"].as_i64() {
        return Err(format!("version {} → {}", before["version"], after["version"]));
    }
    if from == "succeeded"
        && (after["completed_by"] != before["completed_by"] || after["result"] != before["result"])
    {
        return Err("the result changed after success".into());
    }
    let later = after["attempts"].as_array().unwrap();
    for attempt in before["attempts"].as_array().unwrap() {
        let Some(now) = later.iter().find(|a| a["number"] == attempt["number"]) else {
            return Err(format!("attempt {} disappeared", attempt["number"]));
        };
        let (from, to) = (str_of(&attempt["state"]), str_of(&now["state"]));
        if now["id"] != attempt["id"]
            || now["provider"] != attempt["provider"]
            || !reachable(ATTEMPT_EDGES, &from, &to)
        {
            return Err(format!(
                "attempt {} {from} → {to} ({} → {})",
                attempt["number"], attempt["provider"], now["provider"]
            ));
        }
    }
    Ok(())
}

/// README, "Jobs and attempts"; docs/design.md, "State machines".
const JOB_EDGES: &[(&str, &str)] = &[
    ("pending", "running"),
    ("pending", "failed"),
    ("pending", "cancelled"),
    ("running", "succeeded"),
    ("running", "failed"),
    ("running", "unknown"),
    ("running", "cancelled"),
    ("unknown", "running"),
    ("unknown", "succeeded"),
    ("unknown", "failed"),
    ("unknown", "cancelled"),
    ("failed", "running"),
];

const ATTEMPT_EDGES: &[(&str, &str)] = &[
    ("starting", "succeeded"),
    ("starting", "failed"),
    ("starting", "unknown"),
    ("starting", "superseded"),
    ("unknown", "succeeded"),
    ("unknown", "failed"),
    ("unknown", "abandoned"),
    ("unknown", "superseded"),
    ("abandoned", "succeeded"),
    ("abandoned", "superseded"),
];

fn reachable(edges: &[(&str, &str)], from: &str, to: &str) -> bool {
    let mut seen = vec![from.to_owned()];
    let mut i = 0;
    while i < seen.len() {
        if seen[i] == to {
            return true;
        }
        for (a, b) in edges {
            if *a == seen[i] && !seen.iter().any(|s| s == b) {
                seen.push((*b).to_owned());
            }
        }
        i += 1;
    }
    false
}

/// An attempt the gateway failed before sending it (its send never marked):
/// no provider can have seen it, and its job may go on on the same provider.
fn never_sent(attempt: &Value) -> bool {
    attempt["outcome"] == "not_sent" && attempt["sent_at"].is_null()
}
