//! How many bytes of provider answers a process holds at once.
//!
//! Each provider bounds one answer (`max_response_bytes`), but nothing in
//! that bounds how many are read at once: ten 15 MB answers in parallel,
//! parsed, held well over a gigabyte. So every provider of a gateway shares
//! one [`AnswerBudget`], and an answer larger than [`UNCOUNTED`] takes room
//! in it before it is read further. An answer that announces its length
//! takes all of it at once, so it never holds part and waits for the rest;
//! a stream, or a body of unannounced length, takes room as it grows,
//! twice what it has read each time (so a few takes, at most twice what it
//! holds). An answer that finds no room waits, unread: the provider's
//! connection is not read (TCP holds the provider back) until another
//! answer gives its room back, within the call's own deadline — which also
//! ends a wait among growing answers that together outgrew the budget. An
//! answer larger than the whole budget takes the whole budget.
//!
//! An answer's room is [`COPIES`] times its bytes: the forms it takes
//! between the provider and the store — its bytes, their parse, the
//! decoded chat view, the stored result and the stored raw answer, the
//! client's — measured, ten 15 MB answers at once held 1.15 GB over an idle
//! gateway, 7.7 times their bytes. A plain answer's room travels with it
//! ([`Held`], in its `ChatResponse` and on to the request it answers) until
//! its last copy is gone: its reading, decoding, storing and rendering for
//! that request. A stream's is held while the stream is read.
//!
//! The first [`UNCOUNTED`] bytes of every answer are not counted: nearly
//! every answer is smaller, and waiting on a shared count would cost each
//! of them; what they hold together is bounded by the calls in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What every answer may hold without taking room in the budget.
pub const UNCOUNTED: usize = 64 * 1024;

/// The budget counts in units of this many bytes.
const UNIT: usize = 1024;

/// How many times its bytes an answer is counted (see the module doc).
pub const COPIES: usize = 8;

/// The bytes of answers a process may hold at once, shared by its
/// providers (clones share it).
#[derive(Debug, Clone)]
pub struct AnswerBudget {
    room: Arc<Semaphore>,
    units: u32,
    waits: Arc<AtomicU64>,
}

/// Room taken in an [`AnswerBudget`], given back when dropped.
#[derive(Debug, Default)]
pub struct Room {
    permit: Option<OwnedSemaphorePermit>,
    /// The bytes it covers (beyond [`UNCOUNTED`], which needs none).
    covers: usize,
}

impl AnswerBudget {
    /// A budget of `bytes` (at least one unit).
    pub fn new(bytes: usize) -> AnswerBudget {
        let units = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX).max(1);
        AnswerBudget { room: Arc::new(Semaphore::new(units as usize)), units, waits: Arc::default() }
    }

    /// Room for an answer of `bytes` (counted [`COPIES`] times), taken at
    /// once (see [`AnswerBudget::grow`]).
    pub async fn room_for(&self, bytes: usize) -> Room {
        let mut room = Room::default();
        self.grow(&mut room, bytes).await;
        room
    }

    /// Makes `room` cover an answer of `bytes`: nothing to take within
    /// [`UNCOUNTED`] or what it covers already; else waits until all the
    /// rest is free at once. An answer larger than the budget is given the
    /// whole budget.
    pub async fn grow(&self, room: &mut Room, bytes: usize) {
        if bytes <= UNCOUNTED.max(room.covers) {
            return;
        }
        let held = room.permit.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        let counted = bytes.saturating_mul(COPIES);
        let wanted = u32::try_from(counted.div_ceil(UNIT)).unwrap_or(u32::MAX).min(self.units);
        let more = wanted.saturating_sub(u32::try_from(held).unwrap_or(u32::MAX));
        if more == 0 {
            room.covers = bytes;
            return;
        }
        let permit = match Arc::clone(&self.room).try_acquire_many_owned(more) {
            Ok(permit) => permit,
            Err(_) => {
                self.waits.fetch_add(1, Ordering::Relaxed);
                // The semaphore is never closed, so this cannot fail.
                let Ok(permit) = Arc::clone(&self.room).acquire_many_owned(more).await else { return };
                permit
            }
        };
        match &mut room.permit {
            Some(taken) => taken.merge(permit),
            None => room.permit = Some(permit),
        }
        // Only now: a wait given up (its deadline passed) covers nothing more.
        room.covers = bytes;
    }

    /// The bytes the budget allows at once.
    pub fn bytes(&self) -> u64 {
        u64::from(self.units) * UNIT as u64
    }

    /// The bytes taken now.
    pub fn held_bytes(&self) -> u64 {
        let free = u64::try_from(self.room.available_permits()).unwrap_or(u64::MAX);
        self.bytes().saturating_sub(free * UNIT as u64)
    }

    /// How many times an answer has had to wait for room, since start.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }
}

impl Default for AnswerBudget {
    /// 256 MiB: sixteen answers at the default `max_response_bytes`.
    fn default() -> Self {
        AnswerBudget::new(256 * 1024 * 1024)
    }
}

/// The room an answer holds, shared by its copies: given back when the
/// last is dropped. Equal to any other: it says nothing of the answer.
#[derive(Debug, Clone, Default)]
pub struct Held {
    /// Kept only to be dropped with the last copy.
    _room: Option<Arc<Room>>,
}

impl Held {
    pub fn of(room: Room) -> Held {
        Held { _room: room.is_taken().then(|| Arc::new(room)) }
    }
}

impl PartialEq for Held {
    fn eq(&self, _: &Held) -> bool {
        true
    }
}

impl Room {
    /// Whether this room counts in the budget (its answer passed
    /// [`UNCOUNTED`]).
    pub fn is_taken(&self) -> bool {
        self.permit.is_some()
    }

    /// The bytes it covers: past them, its answer must grow it.
    pub fn covers(&self) -> usize {
        self.covers.max(UNCOUNTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn small_answers_take_no_room_and_large_ones_wait_for_it() {
        let budget = AnswerBudget::new(300 * 1024 * COPIES);
        assert!(!budget.room_for(UNCOUNTED).await.is_taken());
        let first = budget.room_for(200 * 1024).await;
        assert_eq!(budget.held_bytes(), 200 * 1024 * COPIES as u64);
        let second = tokio::spawn({
            let budget = budget.clone();
            async move { budget.room_for(200 * 1024).await }
        });
        tokio::task::yield_now().await;
        assert!(!second.is_finished(), "no room until the first gives it back");
        assert_eq!(budget.waits(), 1);
        drop(first);
        let second = second.await.unwrap();
        assert!(second.is_taken());
        assert_eq!(budget.held_bytes(), 200 * 1024 * COPIES as u64);
    }

    #[tokio::test]
    async fn a_room_grows_by_what_it_lacks() {
        let budget = AnswerBudget::new(1024 * 1024 * COPIES);
        let mut room = budget.room_for(128 * 1024).await;
        budget.grow(&mut room, 100 * 1024).await;
        assert_eq!(budget.held_bytes(), 128 * 1024 * COPIES as u64, "covered already");
        budget.grow(&mut room, 512 * 1024).await;
        assert_eq!((budget.held_bytes(), room.covers()), (512 * 1024 * COPIES as u64, 512 * 1024));
        drop(room);
        assert_eq!(budget.held_bytes(), 0);
    }

    #[tokio::test]
    async fn an_answer_larger_than_the_budget_takes_all_of_it() {
        let budget = AnswerBudget::new(100 * 1024);
        let room = budget.room_for(10 * 1024 * 1024).await;
        assert!(room.is_taken());
        assert_eq!(budget.held_bytes(), budget.bytes());
        drop(room);
        assert_eq!(budget.held_bytes(), 0);
    }
}
