//! Live fan-out of a streamed job's chunks to every client attached to it.
//!
//! The first request of a streamed job and any duplicate that arrives while
//! it runs read the same events: the backlog so far, then live ones. One
//! upstream stream, however many readers. Once the job has its result the
//! entry closes and later duplicates replay the stored chunks instead.
//! In-process only: a duplicate reaching another replica waits for the
//! result and replays it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;
use uuid::Uuid;

/// What a stream reader sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// A piece of the answer of attempt `attempt`.
    /// One chunk in OpenAI's `chat.completion.chunk` shape, as the provider
    /// sent it (or its dialect translated it).
    Chunk { attempt: i32, chunk: serde_json::Value },
    /// The answer is complete and is the job's result.
    Done { attempt: i32, finish_reason: Option<String> },
    /// The stream broke after it began; no failover happens any more.
    Failed { attempt: i32, code: &'static str, message: String },
}

impl StreamEvent {
    pub fn is_final(&self) -> bool {
        !matches!(self, StreamEvent::Chunk { .. })
    }
}

#[derive(Default)]
struct Entry {
    backlog: Vec<StreamEvent>,
    sender: Option<broadcast::Sender<StreamEvent>>,
}

/// A reader's view: what happened so far, then what happens next.
pub struct Subscription {
    pub backlog: Vec<StreamEvent>,
    pub live: broadcast::Receiver<StreamEvent>,
}

#[derive(Default)]
pub struct StreamHub {
    entries: Mutex<HashMap<Uuid, Arc<Mutex<Entry>>>>,
}

const CAPACITY: usize = 1024;

impl StreamHub {
    /// Subscribes to the job's stream, opening it if nobody has yet. Open
    /// before the job is driven so no event is missed.
    pub fn open(&self, job_id: Uuid) -> Option<Subscription> {
        let entry = self.entries.lock().ok()?.entry(job_id).or_default().clone();
        Self::subscribe(&entry)
    }

    /// Subscribes only if the job's stream is open in this process.
    pub fn attach(&self, job_id: Uuid) -> Option<Subscription> {
        let entry = self.entries.lock().ok()?.get(&job_id).cloned()?;
        Self::subscribe(&entry)
    }

    fn subscribe(entry: &Mutex<Entry>) -> Option<Subscription> {
        let mut entry = entry.lock().ok()?;
        let sender = entry.sender.get_or_insert_with(|| broadcast::channel(CAPACITY).0);
        let live = sender.subscribe();
        Some(Subscription { backlog: entry.backlog.clone(), live })
    }

    /// Drops a stream opened under an id that did not become a job (its key
    /// named an existing job).
    pub fn discard(&self, job_id: Uuid) {
        if let Ok(mut map) = self.entries.lock() {
            map.remove(&job_id);
        }
    }

    /// Publishes to the job's readers, if any; a final event closes the entry.
    pub fn publish(&self, job_id: Uuid, event: StreamEvent) {
        let Some(entry) = self.entries.lock().ok().and_then(|map| map.get(&job_id).cloned()) else {
            return;
        };
        let is_final = event.is_final();
        if let Ok(mut entry) = entry.lock() {
            entry.backlog.push(event.clone());
            if let Some(sender) = &entry.sender {
                let _ = sender.send(event);
            }
        }
        if is_final && let Ok(mut map) = self.entries.lock() {
            map.remove(&job_id);
        }
    }
}
