//! A lane: concurrent writes of one kind, sent to the database together.
//!
//! Callers [`Lane::write`] one item each and wait for its own result. The
//! lane's task takes whatever is waiting (up to [`BatchLimits`]) and hands
//! it to the lane's write function as one batch, with at most `in_flight`
//! batches running at once; items that arrive meanwhile wait for the next
//! batch. There is no timer: an item that finds a free slot and nothing
//! queued is written at once, alone, from its caller's own task, so a lane
//! adds latency only when its slots are all busy — when the item would have
//! waited for a database connection anyway.
//!
//! The write function answers every item of its batch, in order; an item it
//! leaves unanswered (or a task that stopped) reaches its caller as
//! [`StoreError::Unavailable`]. What a batch is, and what happens when the
//! database refuses one, is the write function's business (`pg_batches.rs`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt as _, StreamExt as _};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{DbError, StoreError};
use crate::telemetry;

type Reply<O> = oneshot::Sender<Result<O, StoreError>>;

/// How much one batch may hold.
#[derive(Debug, Clone, Copy)]
pub(super) struct BatchLimits {
    pub items: usize,
    /// Of the items' estimated encoded size; an item larger than this on
    /// its own still forms a batch (of one).
    pub bytes: usize,
}

pub(super) struct Lane<I, O> {
    name: &'static str,
    queue: mpsc::UnboundedSender<(I, Reply<O>)>,
    /// Items sent to the task and not yet taken into a batch.
    queued: Arc<AtomicUsize>,
    /// One permit per batch that may run at once.
    slots: Arc<Semaphore>,
    write: Arc<dyn BatchWrite<I, O>>,
}

/// The lane's write function, boxed so that callers and the task share it.
trait BatchWrite<I, O>: Send + Sync {
    fn write(&self, items: Vec<I>) -> BoxFuture<'static, Vec<Result<O, StoreError>>>;
}

impl<I, O, W, F> BatchWrite<I, O> for W
where
    W: Fn(Vec<I>) -> F + Send + Sync,
    F: Future<Output = Vec<Result<O, StoreError>>> + Send + 'static,
{
    fn write(&self, items: Vec<I>) -> BoxFuture<'static, Vec<Result<O, StoreError>>> {
        Box::pin(self(items))
    }
}

impl<I, O> std::fmt::Debug for Lane<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane").field("queued", &self.queued).field("free_slots", &self.slots).finish()
    }
}

impl<I: Send + 'static, O: Send + 'static> Lane<I, O> {
    /// Starts the lane's task on the current tokio runtime. `name` labels
    /// the lane's metrics; `size` estimates an item's encoded size, for
    /// [`BatchLimits::bytes`].
    ///
    /// The one task outside `engine::Tasks` (the store sits below the
    /// engine): it holds no work of its own. Every batch it runs is awaited
    /// by the callers of its items, so a shutdown that drains the engine's
    /// drives drains the lane too; the task ends once the last handle to the
    /// lane is dropped and its running batches are answered.
    #[allow(clippy::disallowed_methods)]
    pub(super) fn spawn<W, F>(
        name: &'static str,
        in_flight: usize,
        limits: BatchLimits,
        size: fn(&I) -> usize,
        write: W,
    ) -> Self
    where
        W: Fn(Vec<I>) -> F + Send + Sync + 'static,
        F: Future<Output = Vec<Result<O, StoreError>>> + Send + 'static,
    {
        let (queue, waiting) = mpsc::unbounded_channel::<(I, Reply<O>)>();
        let lane = Lane {
            name,
            queue,
            queued: Arc::default(),
            slots: Arc::new(Semaphore::new(in_flight.max(1))),
            write: Arc::new(write),
        };
        let pump = Pump {
            waiting,
            queued: Arc::clone(&lane.queued),
            slots: Arc::clone(&lane.slots),
            write: Arc::clone(&lane.write),
            name,
            limits,
            size,
        };
        tokio::spawn(pump.run());
        lane
    }

    /// Writes one item as part of the next batch; its own result. An item
    /// that finds a slot free and nothing queued is written at once, from
    /// the caller's task (a batch of one, without the two task switches of
    /// a trip through the lane's task).
    pub(super) async fn write(&self, item: I) -> Result<O, StoreError> {
        if self.queued.load(Ordering::Acquire) == 0
            && let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned()
        {
            counted(self.name, 1);
            let mut results = self.write.write(vec![item]).await;
            drop(slot);
            return results.pop().unwrap_or_else(|| Err(stopped()));
        }
        self.enqueue(item)?.await.map_err(|_| stopped())?
    }

    fn enqueue(&self, item: I) -> Result<oneshot::Receiver<Result<O, StoreError>>, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queued.fetch_add(1, Ordering::AcqRel);
        self.queue.send((item, reply)).map_err(|_| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            stopped()
        })?;
        Ok(answer)
    }
}

/// The lane's task: forms batches from what is queued, runs each as soon as
/// a slot is free, and answers each item.
struct Pump<I, O> {
    waiting: mpsc::UnboundedReceiver<(I, Reply<O>)>,
    queued: Arc<AtomicUsize>,
    slots: Arc<Semaphore>,
    write: Arc<dyn BatchWrite<I, O>>,
    name: &'static str,
    limits: BatchLimits,
    size: fn(&I) -> usize,
}

impl<I: Send + 'static, O: Send + 'static> Pump<I, O> {
    async fn run(mut self) {
        let mut running = FuturesUnordered::new();
        // An item that did not fit the last batch opens the next one.
        let mut carried = None;
        loop {
            let first = match carried.take() {
                Some(item) => item,
                None => tokio::select! {
                    item = self.waiting.recv() => match item {
                        Some(item) => self.took(item),
                        None => break,
                    },
                    Some(()) = running.next(), if !running.is_empty() => continue,
                },
            };
            // Wait for a slot (items queue meanwhile: a bigger batch).
            let slot = loop {
                tokio::select! {
                    slot = Arc::clone(&self.slots).acquire_owned() => break slot,
                    Some(()) = running.next(), if !running.is_empty() => {}
                }
            };
            let Ok(slot) = slot else { break };
            let mut bytes = (self.size)(&first.0);
            let mut batch = vec![first];
            while batch.len() < self.limits.items {
                let Ok(item) = self.waiting.try_recv() else { break };
                let item = self.took(item);
                bytes += (self.size)(&item.0);
                if bytes > self.limits.bytes {
                    carried = Some(item);
                    break;
                }
                batch.push(item);
            }
            counted(self.name, batch.len());
            let (items, replies): (Vec<I>, Vec<Reply<O>>) = batch.into_iter().unzip();
            let written = self.write.write(items);
            let answered = async move {
                let results = written.await;
                drop(slot);
                for (reply, result) in replies.into_iter().zip(results) {
                    // A caller that stopped waiting no longer needs its answer.
                    let _ = reply.send(result);
                }
            };
            // A batch that panics fails its own items (their replies are
            // dropped: "the lane stopped"), not the lane and every later batch.
            running.push(AssertUnwindSafe(answered).catch_unwind().map(drop));
        }
        // Every handle is gone: answer what is running, then stop.
        while running.next().await.is_some() {}
    }

    fn took(&self, item: (I, Reply<O>)) -> (I, Reply<O>) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
        item
    }
}

/// One statement written, for `items` jobs.
fn counted(name: &'static str, items: usize) {
    metrics::counter!(telemetry::STORE_BATCHES, "write" => name).increment(1);
    metrics::counter!(telemetry::STORE_BATCHED_WRITES, "write" => name).increment(items as u64);
}

fn stopped() -> StoreError {
    StoreError::Unavailable(DbError::Batch("the store's write lane stopped".to_owned()))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// What each batch held; every batch waits for a permit of `gate`.
    struct Probe {
        batches: Mutex<Vec<Vec<u32>>>,
        /// The task each batch was written from.
        tasks: Mutex<Vec<Option<tokio::task::Id>>>,
        gate: Semaphore,
    }

    fn lane(in_flight: usize, max_batch: usize) -> (Lane<u32, u32>, Arc<Probe>) {
        let probe = Arc::new(Probe {
            batches: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            gate: Semaphore::new(0),
        });
        let seen = Arc::clone(&probe);
        let limits = BatchLimits { items: max_batch, bytes: 100 };
        let lane = Lane::spawn(
            "test",
            in_flight,
            limits,
            |item| *item as usize,
            move |items: Vec<u32>| {
                let probe = Arc::clone(&seen);
                async move {
                    probe.tasks.lock().unwrap().push(tokio::task::try_id());
                    probe.batches.lock().unwrap().push(items.clone());
                    probe.gate.acquire().await.unwrap().forget();
                    items.into_iter().map(|item| Ok(item * 10)).collect()
                }
            },
        );
        (lane, probe)
    }

    async fn batches_started(probe: &Probe, count: usize) -> Vec<Vec<u32>> {
        loop {
            let batches = probe.batches.lock().unwrap().clone();
            if batches.len() >= count {
                return batches;
            }
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_lone_item_is_sent_alone_and_at_once() {
        let (lane, probe) = lane(1, 16);
        let answer = lane.enqueue(7).unwrap();
        assert_eq!(batches_started(&probe, 1).await, vec![vec![7]]);
        probe.gate.add_permits(1);
        assert_eq!(answer.await.unwrap().unwrap(), 70);
    }

    #[tokio::test]
    #[allow(clippy::disallowed_methods)] // two callers, each in a task of its own
    async fn a_write_that_finds_the_lane_idle_runs_in_its_callers_task() {
        let (lane, probe) = lane(1, 16);
        let lane = Arc::new(lane);
        let caller = tokio::spawn({
            let lane = Arc::clone(&lane);
            async move { (tokio::task::id(), lane.write(7).await.unwrap()) }
        });
        batches_started(&probe, 1).await;
        // The only slot is taken by that write: this one queues for the
        // task. (A current-thread runtime: the spawned task runs until its
        // write awaits, so the write has chosen its path once `asked` is
        // seen.)
        let (ask, asked) = oneshot::channel();
        let queued = tokio::spawn({
            let lane = Arc::clone(&lane);
            async move {
                let _ = ask.send(());
                (tokio::task::id(), lane.write(8).await.unwrap())
            }
        });
        asked.await.unwrap();
        tokio::task::yield_now().await;
        probe.gate.add_permits(2);
        let ((alone, seventy), (waited, eighty)) = (caller.await.unwrap(), queued.await.unwrap());
        assert_eq!((seventy, eighty), (70, 80));
        let tasks = probe.tasks.lock().unwrap().clone();
        assert_eq!(tasks[0], Some(alone), "written from the caller's task");
        assert_ne!(tasks[1], Some(waited), "written from the lane's task");
        assert_eq!(*probe.batches.lock().unwrap(), vec![vec![7], vec![8]]);
    }

    #[tokio::test]
    async fn items_arriving_while_the_slots_are_busy_form_the_next_batch() {
        let (lane, probe) = lane(1, 3);
        let first = lane.enqueue(1).unwrap();
        batches_started(&probe, 1).await;
        // The only slot is busy: these four wait, and the next batch takes
        // three of them (its maximum), the one after that the last.
        let queued: Vec<_> = (2..=5).map(|item| lane.enqueue(item).unwrap()).collect();
        probe.gate.add_permits(1);
        assert_eq!(first.await.unwrap().unwrap(), 10);
        assert_eq!(batches_started(&probe, 2).await[1], vec![2, 3, 4]);
        probe.gate.add_permits(1);
        assert_eq!(batches_started(&probe, 3).await[2], vec![5]);
        probe.gate.add_permits(1);
        for (item, answer) in (2..=5).zip(queued) {
            assert_eq!(answer.await.unwrap().unwrap(), item * 10);
        }
    }

    #[tokio::test]
    async fn a_batch_stops_before_its_byte_limit_and_the_next_starts_with_the_rest() {
        // Sizes are the items themselves; the limit is 100 bytes.
        let (lane, probe) = lane(1, 16);
        let first = lane.enqueue(1).unwrap();
        batches_started(&probe, 1).await;
        let queued: Vec<_> =
            [60, 30, 20, 150, 5].into_iter().map(|item| lane.enqueue(item).unwrap()).collect();
        probe.gate.add_permits(5);
        assert_eq!(first.await.unwrap().unwrap(), 10);
        for answer in queued {
            answer.await.unwrap().unwrap();
        }
        let batches = batches_started(&probe, 5).await;
        // 60 + 30 fit, 20 would make 110; 150 is too big for any batch but
        // is sent alone; 5 follows it.
        assert_eq!(batches, vec![vec![1], vec![60, 30], vec![20], vec![150], vec![5]]);
    }

    #[tokio::test]
    async fn free_slots_send_items_without_waiting_for_a_busy_batch() {
        let (lane, probe) = lane(2, 16);
        let first = lane.enqueue(1).unwrap();
        batches_started(&probe, 1).await;
        let second = lane.enqueue(2).unwrap();
        assert_eq!(batches_started(&probe, 2).await, vec![vec![1], vec![2]]);
        probe.gate.add_permits(2);
        assert_eq!(first.await.unwrap().unwrap(), 10);
        assert_eq!(second.await.unwrap().unwrap(), 20);
    }

    #[tokio::test]
    async fn a_batch_that_panics_fails_its_items_and_the_lane_goes_on() {
        let limits = BatchLimits { items: 1, bytes: 100 };
        let lane: Lane<u32, u32> = Lane::spawn(
            "test",
            1,
            limits,
            |_| 1,
            |items: Vec<u32>| async move {
                assert_ne!(items, [13], "the write function panics on 13");
                items.into_iter().map(Ok).collect()
            },
        );
        // Through the lane's task (a write alone would run, and panic, in
        // its caller's task, as any other code of its caller).
        let (panics, after) = (lane.enqueue(13).unwrap(), lane.enqueue(14).unwrap());
        assert!(panics.await.is_err(), "its reply was dropped: the caller gets \"the lane stopped\"");
        assert_eq!(after.await.unwrap().unwrap(), 14);
    }

    #[tokio::test]
    async fn an_unanswered_item_is_an_error_not_a_hang() {
        let limits = BatchLimits { items: 4, bytes: 100 };
        let lane: Lane<u32, u32> =
            Lane::spawn("test", 1, limits, |_| 1, |_items: Vec<u32>| async { Vec::new() });
        assert!(matches!(lane.write(1).await, Err(StoreError::Unavailable(_))));
    }
}
