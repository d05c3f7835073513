//! What the simulator remembers: call counts, recorded requests, queued
//! scripts and released hold tags. One mutex keeps the counts exact under
//! any concurrency; watch channels turn state changes into signals.
//!
//! Memory is bounded: per-key counts and recorded requests keep only the
//! most recent keys ([`COUNTED_KEYS`], [`RECORDED_REQUESTS`]), and request
//! bodies — the prompts — are kept only when asked for
//! ([`super::Simulator::record_bodies`]): the simulator's admin routes have
//! no authentication, so a shipped demo must not hand prompts to any local
//! process.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use super::recent::Recent;
use super::script::Script;

/// How many keys' last requests are kept (the most recent ones).
pub const RECORDED_REQUESTS: usize = 1024;
/// How many keys' call counts are kept (the most recent ones). Larger than
/// [`RECORDED_REQUESTS`]: a count is a few dozen bytes, and exact-count
/// assertions over many jobs need them.
pub const COUNTED_KEYS: usize = 16 * 1024;
/// How many scripts may wait in the queue; more are refused.
pub const QUEUED_SCRIPTS: usize = 1024;
/// How many released hold tags are remembered (the most recent ones): a
/// tag is released for a call that holds now or soon.
pub const RELEASED_TAGS: usize = 1024;

/// Calls seen since start or the last reset, counted on arrival (before any
/// scripted behaviour), so a hung or reset request counts too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCounts {
    pub total: u64,
    pub by_path: BTreeMap<String, u64>,
    /// Per `Idempotency-Key` header value; requests without one are not
    /// here. Only the [`COUNTED_KEYS`] most recently seen keys are kept.
    pub by_key: BTreeMap<String, u64>,
}

/// The last request seen for an `Idempotency-Key`, as it arrived (for the
/// [`RECORDED_REQUESTS`] most recent keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    pub path: String,
    /// The query string, if any (Azure's `api-version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Header names lowercase. Auth headers included: this is the provider side.
    pub headers: BTreeMap<String, String>,
    /// `None` when the simulator does not record bodies (the default), or
    /// when the script ended the request before the body was read.
    pub body: Option<Value>,
}

struct Queued {
    model: Option<String>,
    script: Script,
    left: u32,
}

struct Inner {
    total: u64,
    by_path: BTreeMap<String, u64>,
    by_key: Recent<u64>,
    requests: Recent<RecordedRequest>,
    queue: VecDeque<Queued>,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            total: 0,
            by_path: BTreeMap::new(),
            by_key: Recent::new(COUNTED_KEYS),
            requests: Recent::new(RECORDED_REQUESTS),
            queue: VecDeque::new(),
        }
    }
}

pub(crate) struct State {
    inner: Mutex<Inner>,
    /// Vertex AI's access tokens; kept across resets, as a client's cached
    /// token outlives them.
    pub(crate) tokens: super::vertex::tokens::Tokens,
    record_bodies: AtomicBool,
    released: watch::Sender<VecDeque<String>>,
    total: watch::Sender<u64>,
}

impl State {
    pub(crate) fn new() -> Self {
        State {
            inner: Mutex::default(),
            tokens: super::vertex::tokens::Tokens::new(),
            record_bodies: AtomicBool::new(false),
            released: watch::Sender::default(),
            total: watch::Sender::new(0),
        }
    }

    pub(crate) fn set_record_bodies(&self, on: bool) {
        self.record_bodies.store(on, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere must not stop the simulator from counting.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn arrive(&self, uri: &axum::http::Uri, key: Option<&str>, headers: BTreeMap<String, String>) {
        let path = uri.path();
        let mut inner = self.lock();
        inner.total += 1;
        // Only the simulator's own model and token routes arrive here.
        *inner.by_path.entry(path.to_owned()).or_default() += 1;
        if let Some(key) = key {
            *inner.by_key.touch(key, || 0) += 1;
            let query = uri.query().map(str::to_owned);
            inner.requests.put(key, RecordedRequest { path: path.to_owned(), query, headers, body: None });
        }
        let total = inner.total;
        drop(inner);
        self.total.send_replace(total);
    }

    pub(crate) fn record_body(&self, key: Option<&str>, body: &Value) {
        if let Some(key) = key
            && self.record_bodies.load(Ordering::Relaxed)
            && let Some(request) = self.lock().requests.get_mut(key)
        {
            request.body = Some(body.clone());
        }
    }

    pub(crate) fn last_request(&self, key: &str) -> Option<RecordedRequest> {
        self.lock().requests.get(key).cloned()
    }

    pub(crate) fn calls(&self) -> CallCounts {
        let inner = self.lock();
        CallCounts {
            total: inner.total,
            by_path: inner.by_path.clone(),
            by_key: inner.by_key.iter().map(|(key, n)| (key.clone(), *n)).collect(),
        }
    }

    /// How many requests are recorded now (at most [`RECORDED_REQUESTS`]).
    pub(crate) fn recorded(&self) -> usize {
        self.lock().requests.len()
    }

    pub(crate) async fn wait_for_calls(&self, total: u64) {
        let _ = self.total.subscribe().wait_for(|seen| *seen >= total).await;
    }

    pub(crate) fn queue(&self, model: Option<String>, script: Script, times: u32) -> Result<(), String> {
        if times == 0 {
            return Ok(());
        }
        let mut inner = self.lock();
        if inner.queue.len() >= QUEUED_SCRIPTS {
            return Err(format!("{QUEUED_SCRIPTS} scripts are queued already; reset or let them run"));
        }
        inner.queue.push_back(Queued { model, script, left: times });
        Ok(())
    }

    /// The first queued script for `model` (or for any model), used up once.
    pub(crate) fn take_script(&self, model: &str) -> Option<Script> {
        let mut inner = self.lock();
        let index = inner.queue.iter().position(|q| q.model.as_deref().is_none_or(|m| m == model))?;
        let queued = inner.queue.get_mut(index)?;
        queued.left -= 1;
        let script = queued.script.clone();
        if queued.left == 0 {
            inner.queue.remove(index);
        }
        Some(script)
    }

    pub(crate) fn release(&self, tag: &str) {
        self.released.send_modify(|released| {
            if !released.iter().any(|seen| seen == tag) {
                if released.len() >= RELEASED_TAGS {
                    released.pop_front();
                }
                released.push_back(tag.to_owned());
            }
        });
    }

    pub(crate) async fn wait_released(&self, tag: &str) {
        let _ = self.released.subscribe().wait_for(|released| released.iter().any(|seen| seen == tag)).await;
    }

    /// Forgets counts, recordings, queued scripts and released tags (the
    /// whether-to-record-bodies setting stays).
    /// Requests already holding keep waiting for a new release.
    pub(crate) fn reset(&self) {
        *self.lock() = Inner::default();
        self.released.send_modify(VecDeque::clear);
        self.total.send_replace(0);
    }
}

#[cfg(test)]
mod tests {
    use super::{COUNTED_KEYS, QUEUED_SCRIPTS, RECORDED_REQUESTS, RELEASED_TAGS, State};

    #[test]
    fn queued_scripts_and_released_tags_are_bounded() {
        let state = State::new();
        for _ in 0..QUEUED_SCRIPTS {
            state.queue(None, "ok".parse().unwrap(), 1).unwrap();
        }
        assert!(state.queue(None, "ok".parse().unwrap(), 1).is_err(), "a full queue refuses more");
        for i in 0..RELEASED_TAGS * 3 {
            state.release(&format!("tag-{i}"));
        }
        assert_eq!(state.released.borrow().len(), RELEASED_TAGS, "only the most recent tags are kept");
    }

    #[test]
    fn per_key_counts_and_recordings_are_bounded() {
        let state = State::new();
        let n = COUNTED_KEYS + 10;
        for i in 0..n {
            state.arrive(
                &axum::http::Uri::from_static("/v1/messages"),
                Some(&format!("k{i}")),
                Default::default(),
            );
        }
        let calls = state.calls();
        assert_eq!(calls.total, n as u64);
        assert_eq!(calls.by_key.len(), COUNTED_KEYS);
        assert!(!calls.by_key.contains_key("k0"));
        assert_eq!(calls.by_key.get(&format!("k{}", n - 1)), Some(&1));
        assert_eq!(state.recorded(), RECORDED_REQUESTS);
    }
}
