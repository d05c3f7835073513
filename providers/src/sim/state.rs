//! What the simulator remembers: call counts, recorded requests, queued
//! scripts and released hold tags. One mutex keeps the counts exact under
//! any concurrency; watch channels turn state changes into signals.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use super::script::Script;

/// Calls seen since start or the last reset, counted on arrival (before any
/// scripted behaviour), so a hung or reset request counts too.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallCounts {
    pub total: u64,
    pub by_path: BTreeMap<String, u64>,
    /// Per `Idempotency-Key` header value; requests without one are not here.
    pub by_key: BTreeMap<String, u64>,
}

/// The last request seen for an `Idempotency-Key`, as it arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    pub path: String,
    /// Header names lowercase. Auth headers included: this is the provider side.
    pub headers: BTreeMap<String, String>,
    /// `None` when the script ended the request before the body was read.
    pub body: Option<Value>,
}

struct Queued {
    model: Option<String>,
    script: Script,
    left: u32,
}

#[derive(Default)]
struct Inner {
    counts: CallCounts,
    requests: HashMap<String, RecordedRequest>,
    queue: VecDeque<Queued>,
}

pub(crate) struct State {
    inner: Mutex<Inner>,
    released: watch::Sender<HashSet<String>>,
    total: watch::Sender<u64>,
}

impl State {
    pub(crate) fn new() -> Self {
        State { inner: Mutex::default(), released: watch::Sender::default(), total: watch::Sender::new(0) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere must not stop the simulator from counting.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn arrive(&self, path: &str, key: Option<&str>, headers: BTreeMap<String, String>) {
        let mut inner = self.lock();
        inner.counts.total += 1;
        *inner.counts.by_path.entry(path.to_owned()).or_default() += 1;
        if let Some(key) = key {
            *inner.counts.by_key.entry(key.to_owned()).or_default() += 1;
            inner
                .requests
                .insert(key.to_owned(), RecordedRequest { path: path.to_owned(), headers, body: None });
        }
        let total = inner.counts.total;
        drop(inner);
        self.total.send_replace(total);
    }

    pub(crate) fn record_body(&self, key: Option<&str>, body: &Value) {
        if let Some(key) = key
            && let Some(request) = self.lock().requests.get_mut(key)
        {
            request.body = Some(body.clone());
        }
    }

    pub(crate) fn last_request(&self, key: &str) -> Option<RecordedRequest> {
        self.lock().requests.get(key).cloned()
    }

    pub(crate) fn calls(&self) -> CallCounts {
        self.lock().counts.clone()
    }

    pub(crate) async fn wait_for_calls(&self, total: u64) {
        let _ = self.total.subscribe().wait_for(|seen| *seen >= total).await;
    }

    pub(crate) fn queue(&self, model: Option<String>, script: Script, times: u32) {
        if times > 0 {
            self.lock().queue.push_back(Queued { model, script, left: times });
        }
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
            released.insert(tag.to_owned());
        });
    }

    pub(crate) async fn wait_released(&self, tag: &str) {
        let _ = self.released.subscribe().wait_for(|released| released.contains(tag)).await;
    }

    /// Forgets counts, recordings, queued scripts and released tags.
    /// Requests already holding keep waiting for a new release.
    pub(crate) fn reset(&self) {
        *self.lock() = Inner::default();
        self.released.send_modify(HashSet::clear);
        self.total.send_replace(0);
    }
}
