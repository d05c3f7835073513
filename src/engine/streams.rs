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

use tokio::sync::Notify;
use uuid::Uuid;

/// What a stream reader sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// A piece of the answer of attempt `attempt`.
    /// One chunk in OpenAI's `chat.completion.chunk` shape, as the provider
    /// sent it (or its dialect translated it). Shared: the list of events,
    /// every reader and the attempt's assembled answer hold the one value.
    Chunk { attempt: i32, chunk: Arc<serde_json::Value> },
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

/// One job's stream: every event so far, and a wake-up for readers.
#[derive(Default)]
struct Entry {
    events: Mutex<Events>,
    published: Notify,
}

#[derive(Default)]
struct Events {
    all: Vec<StreamEvent>,
    /// The final event is among `all`: nothing more comes.
    ended: bool,
}

/// A reader of one job's stream: what happened so far, then what happens
/// next, in order. Each reader keeps its own place in the one list of
/// events, so however far behind it falls it misses nothing, and a stream
/// costs its events and no buffer per reader (a broadcast channel's ring,
/// allocated whole when the stream opened, was a third of a held stream's
/// memory).
pub struct Subscription {
    entry: Arc<Entry>,
    next: usize,
}

impl Subscription {
    /// The next event; `None` after the final one.
    pub async fn next(&mut self) -> Option<StreamEvent> {
        loop {
            // Registered before the look, so a publish in between wakes it.
            let published = self.entry.published.notified();
            let mut published = std::pin::pin!(published);
            published.as_mut().enable();
            {
                let events = self.entry.events.lock().ok()?;
                if let Some(event) = events.all.get(self.next) {
                    self.next += 1;
                    return Some(event.clone());
                }
                if events.ended {
                    return None;
                }
            }
            published.await;
        }
    }
}

#[derive(Default)]
pub struct StreamHub {
    entries: Mutex<HashMap<Uuid, Arc<Entry>>>,
}

impl StreamHub {
    /// Subscribes to the job's stream, opening it if nobody has yet. Open
    /// before the job is driven so no event is missed.
    pub fn open(&self, job_id: Uuid) -> Option<Subscription> {
        let entry = self.entries.lock().ok()?.entry(job_id).or_default().clone();
        Some(Subscription { entry, next: 0 })
    }

    /// Subscribes only if the job's stream is open in this process.
    pub fn attach(&self, job_id: Uuid) -> Option<Subscription> {
        let entry = self.entries.lock().ok()?.get(&job_id).cloned()?;
        Some(Subscription { entry, next: 0 })
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
        if let Ok(mut events) = entry.events.lock() {
            events.all.push(event);
            events.ended |= is_final;
        }
        entry.published.notify_waiters();
        if is_final && let Ok(mut map) = self.entries.lock() {
            map.remove(&job_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt as _;

    fn chunk(n: i64) -> StreamEvent {
        StreamEvent::Chunk { attempt: 1, chunk: Arc::new(serde_json::json!({ "n": n })) }
    }

    /// Every reader gets the chunk that was published, not a copy of it: a
    /// held stream keeps each chunk once however many hold it.
    #[tokio::test]
    async fn readers_share_the_published_chunk() {
        let hub = StreamHub::default();
        let job = Uuid::now_v7();
        let (mut first, mut second) = (hub.open(job).unwrap(), hub.attach(job).unwrap());
        let published = Arc::new(serde_json::json!({ "choices": [] }));
        hub.publish(job, StreamEvent::Chunk { attempt: 1, chunk: published.clone() });
        for reader in [&mut first, &mut second] {
            let Some(StreamEvent::Chunk { chunk, .. }) = reader.next().await else { panic!("a chunk") };
            assert!(Arc::ptr_eq(&chunk, &published));
        }
    }

    /// A reader that has read nothing while thousands of chunks went by
    /// (a slow client) still reads every one of them, in order; a reader
    /// attached late starts from the first; both end with the final event.
    #[tokio::test]
    async fn a_reader_however_far_behind_reads_every_event_once_in_order() {
        let hub = StreamHub::default();
        let job = Uuid::now_v7();
        let mut slow = hub.open(job).unwrap();
        for n in 0..5_000 {
            hub.publish(job, chunk(n));
        }
        let mut late = hub.attach(job).unwrap();
        #[allow(clippy::disallowed_methods)]
        let waiting = tokio::spawn(async move {
            let mut read = Vec::new();
            while let Some(event) = late.next().await {
                read.push(event);
            }
            read
        });
        hub.publish(job, StreamEvent::Done { attempt: 1, finish_reason: None });
        assert!(hub.attach(job).is_none(), "the final event closed the entry");
        let mut read = Vec::new();
        while let Some(event) = slow.next().await {
            read.push(event);
        }
        let expected: Vec<StreamEvent> =
            (0..5_000).map(chunk).chain([StreamEvent::Done { attempt: 1, finish_reason: None }]).collect();
        assert_eq!(read, expected);
        assert_eq!(waiting.await.unwrap(), expected);
    }

    /// A reader waiting for the next event is woken by its publication.
    #[tokio::test]
    async fn a_waiting_reader_is_woken_by_the_next_event() {
        let hub = StreamHub::default();
        let job = Uuid::now_v7();
        let mut reader = hub.open(job).unwrap();
        let mut next = Box::pin(reader.next());
        assert!((&mut next).now_or_never().is_none(), "nothing published yet");
        hub.publish(job, chunk(1));
        assert_eq!(next.await, Some(chunk(1)));
    }
}
