//! `--streams N`: the memory of N streams held open at once.
//!
//! Each stream is a `stream: true` chat completion on route `stall`, whose
//! provider (`sim:stream-stall`) sends half its answer and then goes
//! silent: the gateway holds the client's connection, the provider's, the
//! job's attempt and its stream state until the bench lets go. The figure
//! is the gateway's RSS once all N have delivered their first chunk, against
//! its RSS before the first was opened.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use tokio::sync::Semaphore;

/// How many streams are being opened at any moment (each waits for its
/// first chunk before the next takes its place).
const OPENING: usize = 256;

const STREAM_BODY: &str = r#"{"model":"stall","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// What `--streams` measured on one gateway.
pub struct Held {
    pub opened: usize,
    pub failed: usize,
    pub rss_before_kb: u64,
    pub rss_held_kb: u64,
    pub took: Duration,
}

/// Opens `n` streams on `url` (key `key`), waits until each has sent its
/// first chunk, samples `rss` and lets them all go.
pub async fn hold(url: &str, key: &str, prefix: &str, n: usize, rss: impl Fn() -> Option<u64>) -> Held {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .tcp_nodelay(true)
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let rss_before_kb = rss().unwrap_or(0);
    let started = Instant::now();
    let opening = Arc::new(Semaphore::new(OPENING));
    let (ready, mut readies) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..n {
        let permit = opening.clone().acquire_owned().await.unwrap();
        let (client, ready) = (client.clone(), ready.clone());
        let request = client
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .header("idempotency-key", format!("{prefix}-stream-{index}"))
            .body(STREAM_BODY);
        tasks.spawn(async move {
            let held = async {
                let response = request.send().await.ok()?;
                if !response.status().is_success() {
                    return None;
                }
                let mut body = response.bytes_stream();
                body.next().await?.ok()?;
                Some(body)
            }
            .await;
            drop(permit);
            let _ = ready.send(held.is_some());
            // Held until the bench lets go: it aborts this task.
            if held.is_some() {
                std::future::pending::<()>().await;
            }
            drop(held);
        });
    }
    drop(ready);
    let (mut opened, mut failed) = (0, 0);
    while let Some(ok) = readies.recv().await {
        if ok {
            opened += 1
        } else {
            failed += 1
        }
        if opened + failed == n {
            break;
        }
    }
    let took = started.elapsed();
    // Let the gateway's side settle (buffers flushed, tasks parked).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_held_kb = rss().unwrap_or(0);
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    Held { opened, failed, rss_before_kb, rss_held_kb, took }
}
