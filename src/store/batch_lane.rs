//! A lane: concurrent writes of one kind, sent to the database together.
//!
//! Callers [`Lane::write`] one item each and wait for its own result. The
//! lane's task takes whatever is waiting (up to [`BatchLimits`]) and hands
//! it to the lane's write function as one batch, with at most `in_flight`
//! batches running at once; items that arrive meanwhile wait for the next
//! batch. There is no timer: an item that finds a free slot is sent at once,
//! alone, so a lane adds latency only when its slots are all busy — when the
//! item would have waited for a database connection anyway.
//!
//! The write function answers every item of its batch, in order; an item it
//! leaves unanswered (or a task that stopped) reaches its caller as
//! [`StoreError::Unavailable`]. What a batch is, and what happens when the
//! database refuses one, is the write function's business (`pg_batches.rs`).

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt as _, StreamExt as _};
use tokio::sync::{mpsc, oneshot};

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

#[derive(Debug)]
pub(super) struct Lane<I, O> {
    queue: mpsc::UnboundedSender<(I, Reply<O>)>,
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
        W: Fn(Vec<I>) -> F + Send + 'static,
        F: Future<Output = Vec<Result<O, StoreError>>> + Send + 'static,
    {
        let (queue, waiting) = mpsc::unbounded_channel::<(I, Reply<O>)>();
        tokio::spawn(pump(waiting, name, in_flight.max(1), limits, size, write));
        Lane { queue }
    }

    /// Writes one item as part of the next batch; its own result.
    pub(super) async fn write(&self, item: I) -> Result<O, StoreError> {
        self.enqueue(item)?.await.map_err(|_| stopped())?
    }

    fn enqueue(&self, item: I) -> Result<oneshot::Receiver<Result<O, StoreError>>, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.queue.send((item, reply)).map_err(|_| stopped())?;
        Ok(answer)
    }
}

/// The lane's task: forms batches from what waits, runs up to `in_flight`
/// of them at once, and answers each item.
async fn pump<I, O, W, F>(
    mut waiting: mpsc::UnboundedReceiver<(I, Reply<O>)>,
    name: &'static str,
    in_flight: usize,
    limits: BatchLimits,
    size: fn(&I) -> usize,
    write: W,
) where
    W: Fn(Vec<I>) -> F,
    F: Future<Output = Vec<Result<O, StoreError>>>,
{
    let mut running = FuturesUnordered::new();
    // An item that did not fit the last batch opens the next one.
    let mut carried = None;
    loop {
        if running.len() >= in_flight {
            running.next().await;
            continue;
        }
        let first = match carried.take() {
            Some(item) => item,
            None => tokio::select! {
                item = waiting.recv() => match item {
                    Some(item) => item,
                    None => break,
                },
                Some(()) = running.next(), if !running.is_empty() => continue,
            },
        };
        let mut bytes = size(&first.0);
        let mut batch = vec![first];
        while batch.len() < limits.items {
            let Ok(item) = waiting.try_recv() else { break };
            bytes += size(&item.0);
            if bytes > limits.bytes {
                carried = Some(item);
                break;
            }
            batch.push(item);
        }
        metrics::counter!(telemetry::STORE_BATCHES, "write" => name).increment(1);
        metrics::counter!(telemetry::STORE_BATCHED_WRITES, "write" => name).increment(batch.len() as u64);
        let (items, replies): (Vec<I>, Vec<Reply<O>>) = batch.into_iter().unzip();
        let written = write(items);
        let answered = async move {
            let results = written.await;
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

fn stopped() -> StoreError {
    StoreError::Unavailable(DbError::Batch("the store's write lane stopped".to_owned()))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::sync::Semaphore;

    use super::*;

    /// What each batch held; every batch waits for a permit of `gate`.
    struct Probe {
        batches: Mutex<Vec<Vec<u32>>>,
        gate: Semaphore,
    }

    fn lane(in_flight: usize, max_batch: usize) -> (Lane<u32, u32>, Arc<Probe>) {
        let probe = Arc::new(Probe { batches: Mutex::new(Vec::new()), gate: Semaphore::new(0) });
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
        assert!(matches!(lane.write(13).await, Err(StoreError::Unavailable(_))));
        assert_eq!(lane.write(14).await.unwrap(), 14);
    }

    #[tokio::test]
    async fn an_unanswered_item_is_an_error_not_a_hang() {
        let limits = BatchLimits { items: 4, bytes: 100 };
        let lane: Lane<u32, u32> =
            Lane::spawn("test", 1, limits, |_| 1, |_items: Vec<u32>| async { Vec::new() });
        assert!(matches!(lane.write(1).await, Err(StoreError::Unavailable(_))));
    }
}
