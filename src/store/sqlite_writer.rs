//! The SQLite writer: one connection, one thread, group commit.
//!
//! SQLite lets one connection write at a time, so every write of the
//! gateway goes through this connection. Callers hand it a closure (an
//! *op*: one insert-or-get, one attempt start, one compare-and-swap…) and
//! await its answer. The thread takes every op waiting in its queue, runs them in
//! ONE transaction, commits once and only then answers them all. Under
//! load a commit carries hundreds of ops (one WAL append, or one fsync
//! with `synchronous = FULL`, for all of them); when idle an op is its own
//! transaction, as before.
//!
//! What passes through this seam: ops in, their results out, each answered
//! after the commit that made it durable — or with the error that says it
//! was not. An op that fails does not disturb its batch: the batch is
//! rolled back and run again with each op in a savepoint of its own, so
//! that only the failed op's statements are undone (savepoints only then:
//! each copies every page its op touches into a sub-journal). An op may
//! therefore run more than once, and must give the same answer for the
//! same database. An error that ends the whole transaction (disk full,
//! I/O) fails every op of the batch, none of which is then reported done.
//!
//! An op's statements run synchronously where the op runs: no hop to
//! another thread per statement, which is what the benchmark showed
//! dominating.
//!
//! **An idle writer is not woken.** A write that finds no op queued and the
//! connection free runs on the caller's own thread, as its own transaction
//! (with `synchronous = NORMAL` a commit is a `write(2)` to the WAL, tens of
//! microseconds): one request at a time, handing each write to the thread
//! cost two thread wake-ups (the writer's, then the caller's), and on a
//! busy 2-core machine a wake-up can wait milliseconds for a core — the p99
//! at one client. Inline writes are group-committed too: the write that
//! finds nothing gathered yields once to the runtime, every other ready
//! task adds its write, and it commits them all (on one pinned core, where
//! the connection is always idle, this is what batches). When the
//! connection is busy, ops queue, and the thread batches them as above.
//! What may wait on the disk or on another process goes through the
//! thread, never an async worker: every commit with `FULL` (an `fsync`);
//! the first commit after a checkpoint emptied the WAL (SQLite `fsync`s the
//! WAL's new header even with `NORMAL`); and a write that finds the file's
//! write lock held by another process (the operator CLI), which an inline
//! write does not wait for.
//!
//! WAL checkpoints run on a thread of their own, with their own connection
//! ([`checkpoint_loop`]), never inside a commit. SQLite's automatic
//! checkpoint runs in the commit that crosses its threshold (1,000 pages):
//! traced at one client, that commit spent 4–6 ms in three `fsync`s and the
//! page copies, once every ~200 requests — the p99. A `PASSIVE` checkpoint
//! on another connection copies committed frames while the writer goes on
//! appending.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak, mpsc};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use super::sqlite_statements::execute;
use super::{DbError, StoreError};

/// The most ops one transaction carries; more wait for the next commit.
const MAX_BATCH: usize = 512;

/// The writer asks for a checkpoint after this many commits (a commit is a
/// few pages at light load, so about SQLite's default of 1,000 pages).
const CHECKPOINT_EVERY: u32 = 200;

/// A checkpoint runs at least this often (on an empty WAL it is a few
/// system calls).
const CHECKPOINT_IDLE: Duration = Duration::from_secs(1);

/// The WAL's length in frames (pages) after a `PASSIVE` checkpoint beyond
/// which a `RESTART` follows it. SQLite starts the WAL file over only when a
/// write begins after a checkpoint caught up with every frame; under
/// sustained load the writer appends while a `PASSIVE` checkpoint copies,
/// so it never quite catches up and the WAL (and the memory that maps its
/// index) grows without end — measured: RSS 38 → 57 MB over 60 s at 5,700
/// jobs/s (with the `RESTART`: 38 → 49 MB, as before this change, the
/// readers' page caches filling). A `RESTART` makes the writer wait while it copies what is left
/// (little: the passive ones did the rest) and starts the WAL over.
const WAL_RESTART_FRAMES: i64 = 4_000;

/// How the writer opens its connection.
#[derive(Debug, Clone)]
pub(super) struct WriterOptions {
    pub path: std::path::PathBuf,
    pub synchronous: &'static str,
    pub busy_timeout: std::time::Duration,
}

/// A handle on the writer (its connection and its thread); cloning shares
/// them.
#[derive(Debug, Clone)]
pub(super) struct Writer {
    ops: mpsc::Sender<Box<dyn Op>>,
    shared: Arc<Shared>,
}

/// What the thread and the callers that write inline share.
#[derive(Debug)]
struct Shared {
    /// The one writing connection: the thread holds it for a batch, an
    /// inline write for its op.
    conn: Mutex<Connection>,
    /// Ops sent to the thread and not yet taken by it: an inline write
    /// would overtake them.
    queued: AtomicUsize,
    /// Commits since the last checkpoint was asked for.
    commits: AtomicU32,
    /// `synchronous = NORMAL`: a commit does not `fsync`, so an op may run
    /// on an async worker.
    inline: bool,
    /// The last checkpoint copied every frame of the WAL (or found it
    /// empty): the next commit starts the WAL over and `fsync`s its header,
    /// so it goes through the thread. Cleared by the thread's next commit.
    wal_restarts: AtomicBool,
    /// The connection's busy timeout, which an inline `BEGIN` sets aside.
    busy_timeout: Duration,
    /// Ops gathered on the async workers for the next inline commit; the
    /// write that found it empty commits them all ([`Writer::write`]).
    gathered: Mutex<Vec<Box<dyn Op>>>,
    /// Asks the checkpoint thread for a checkpoint (never waits).
    checkpoint: mpsc::SyncSender<()>,
}

impl Writer {
    /// Opens the connection (creating the file, switching it to WAL) and
    /// starts the thread.
    pub(super) fn open(options: &WriterOptions) -> Result<Writer, StoreError> {
        let conn = open_writing(options)?;
        let checkpointer = Connection::open_with_flags(
            &options.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(StoreError::from)?;
        checkpointer.busy_timeout(options.busy_timeout)?;
        let (ops, queue) = mpsc::channel();
        let (wanted, checkpoints) = mpsc::sync_channel(1);
        let shared = Arc::new(Shared {
            conn: Mutex::new(conn),
            queued: AtomicUsize::new(0),
            commits: AtomicU32::new(0),
            inline: options.synchronous == "NORMAL",
            wal_restarts: AtomicBool::new(true),
            busy_timeout: options.busy_timeout,
            gathered: Mutex::new(Vec::new()),
            checkpoint: wanted,
        });
        // Weak: the checkpoint thread must not keep the writer alive (it
        // stops when the last handle and the writer thread are gone).
        let writing = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || checkpoint_loop(&checkpointer, &checkpoints, &writing))
            .map_err(|err| StoreError::Unavailable(DbError::Writer(format!("cannot start: {err}"))))?;
        let thread = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || run(&thread, &queue))
            .map_err(|err| StoreError::Unavailable(DbError::Writer(format!("cannot start: {err}"))))?;
        Ok(Writer { ops, shared })
    }

    /// Answers once an op that writes nothing has gone through a batch —
    /// the proof `/readyz` needs that writes go through, which a read on
    /// another connection cannot give. `Unavailable` when the thread has
    /// stopped, or has not answered within `timeout` (stuck on the file
    /// lock, or on a disk that hangs). Under load the op joins a batch of
    /// others and costs no commit of its own.
    pub(super) async fn check(&self, timeout: Duration) -> Result<(), StoreError> {
        // Through the thread, never inline: the proof is that the thread
        // answers (and an inline op on a hung disk would block the very
        // worker that runs this timeout).
        let (op, answer) = pending(|_| Ok(()));
        self.enqueue(op)?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(answer) => answer.map_err(|_| stopped())?,
            // The op stays queued; when it runs at last, nobody waits for it.
            Err(_) => Err(StoreError::Unavailable(DbError::Writer(format!(
                "the SQLite writer did not answer within {}ms",
                timeout.as_millis()
            )))),
        }
    }

    /// Runs `work` in a transaction on the caller's thread if the writer is
    /// idle, else in the thread's next batch; answers once the transaction
    /// that holds it is committed. `work` may run more than once (its
    /// batch runs again if another op of it failed) and must then give
    /// the same answer for the same database.
    ///
    /// Inline writes are gathered too: the write that finds none gathered
    /// yields once, so that every other task ready on the runtime runs and
    /// adds its own, then commits them all in one transaction. On one core
    /// (a replica pinned to it has one async worker) every write finds the
    /// connection idle; committed one by one, each would pay its own WAL
    /// append and file locks. Alone (one request at a time) the yield
    /// costs a turn of the scheduler, not a wake-up of another thread.
    pub(super) async fn write<R, F>(&self, work: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnMut(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (op, answer) = pending(work);
        if self.shared.inline {
            if self.gather(op) {
                // Dropped while it yields (its request went away), the
                // guard hands what was gathered to the thread.
                let leader = Gathering(Some(self));
                tokio::task::yield_now().await;
                leader.commit();
            }
        } else {
            self.enqueue(op)?;
        }
        // Committed inline, it was answered before this: no wake-up.
        answer.await.map_err(|_| stopped())?
    }

    /// Adds `op` to the gathered ops: whether it is the first (its write
    /// commits them).
    fn gather(&self, op: Box<dyn Op>) -> bool {
        let mut gathered = lock(&self.shared.gathered);
        gathered.push(op);
        gathered.len() == 1
    }

    /// Takes the gathered ops: committed here if the writer is idle, else
    /// sent to the thread in the order they came. At most [`MAX_BATCH`]
    /// are committed here, as the thread takes at most as many: the rest
    /// follow through the thread, after them, so that one worker is not
    /// held by an unbounded transaction.
    fn commit_gathered(&self, inline: bool) {
        let mut batch = std::mem::take(&mut *lock(&self.shared.gathered));
        let rest = batch.split_off(batch.len().min(MAX_BATCH));
        if !batch.is_empty() {
            let batch = if inline { self.try_inline(batch) } else { Err(batch) };
            if let Err(batch) = batch {
                self.enqueue_all(batch);
            }
        }
        self.enqueue_all(rest);
    }

    /// Sends `ops` to the thread in order; a stopped thread drops them, and
    /// their callers are told so.
    fn enqueue_all(&self, ops: Vec<Box<dyn Op>>) {
        for op in ops {
            let _ = self.enqueue(op);
        }
    }

    /// Runs `batch` as one transaction on this thread if the writer is
    /// idle and the file's write lock free at once; gives it back otherwise.
    fn try_inline(&self, mut batch: Vec<Box<dyn Op>>) -> Result<(), Vec<Box<dyn Op>>> {
        let Some(conn) = self.idle_connection() else { return Err(batch) };
        // Another process holding the write lock would make `BEGIN` sleep in
        // SQLite's busy handler, up to the busy timeout: the thread waits
        // for it instead.
        let begun =
            conn.busy_timeout(Duration::ZERO).map_err(|err| err.to_string()).and_then(|()| begin(&conn));
        let _ = conn.busy_timeout(self.shared.busy_timeout);
        if begun.is_err() {
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            return Err(batch);
        }
        let failure = run_begun(&conn, &mut batch).err();
        answer_batch(&self.shared, &conn, batch, failure);
        Ok(())
    }

    fn enqueue(&self, op: Box<dyn Op>) -> Result<(), StoreError> {
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        self.ops.send(op).map_err(|_| {
            self.shared.queued.fetch_sub(1, Ordering::AcqRel);
            stopped()
        })
    }

    /// The connection, if a write may run on the caller's thread now: the
    /// store allows it, nothing is queued (which it would overtake), and
    /// nobody holds the connection (the thread, another inline write, or a
    /// `RESTART` checkpoint, during which a write would wait in SQLite's
    /// busy handler).
    fn idle_connection(&self) -> Option<MutexGuard<'_, Connection>> {
        let shared = &self.shared;
        if !shared.inline
            || shared.queued.load(Ordering::Acquire) > 0
            || shared.wal_restarts.load(Ordering::Acquire)
        {
            return None;
        }
        match shared.conn.try_lock() {
            Ok(conn) => Some(conn),
            // As `lock`: a panic the op caught leaves the connection usable.
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// The write that gathers the next inline commit, until it commits.
struct Gathering<'a>(Option<&'a Writer>);

impl Gathering<'_> {
    fn commit(mut self) {
        if let Some(writer) = self.0.take() {
            writer.commit_gathered(true);
        }
    }
}

impl Drop for Gathering<'_> {
    fn drop(&mut self) {
        if let Some(writer) = self.0.take() {
            writer.commit_gathered(false);
        }
    }
}

/// An op for `work`, and where its answer will come.
fn pending<R, F>(work: F) -> (Box<dyn Op>, oneshot::Receiver<Result<R, StoreError>>)
where
    R: Send + 'static,
    F: FnMut(&Connection) -> Result<R, StoreError> + Send + 'static,
{
    let (reply, answer) = oneshot::channel();
    (Box::new(QueuedOp { work, result: None, reply }), answer)
}

fn stopped() -> StoreError {
    StoreError::Unavailable(DbError::Writer("the SQLite writer thread has stopped".into()))
}

/// One queued op, its result type erased so that one queue carries all.
trait Op: Send {
    /// Runs inside the batch's transaction, in a savepoint of its own if
    /// `guarded` (its failure then undoes its statements only; unguarded,
    /// the caller rolls the transaction back). Returns whether it failed.
    /// An op may run more than once: a batch that one op failed is run
    /// again, guarded, and each op's last run is its answer.
    fn run(&mut self, conn: &Connection, guarded: bool) -> bool;
    /// Answers the caller: the op's result if the batch committed (`None`),
    /// else the batch's failure.
    fn finish(self: Box<Self>, failure: Option<&str>);
}

impl std::fmt::Debug for dyn Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Op")
    }
}

struct QueuedOp<F, R> {
    work: F,
    result: Option<Result<R, StoreError>>,
    reply: oneshot::Sender<Result<R, StoreError>>,
}

impl<F, R> Op for QueuedOp<F, R>
where
    R: Send + 'static,
    F: FnMut(&Connection) -> Result<R, StoreError> + Send + 'static,
{
    fn run(&mut self, conn: &Connection, guarded: bool) -> bool {
        let work = &mut self.work;
        // A panicking op must not take the writer (and every later write)
        // down with it: it fails alone, its statements undone.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if guarded { in_savepoint(conn, work) } else { work(conn) }
        }));
        let result = ran.unwrap_or_else(|_| {
            if guarded && !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK TO op; RELEASE op");
            }
            Err(StoreError::Corrupt("a write panicked; it was undone".into()))
        });
        let failed = result.is_err();
        self.result = Some(result);
        failed
    }

    fn finish(self: Box<Self>, failure: Option<&str>) {
        let QueuedOp { work, result, reply } = *self;
        // What the op holds goes before its answer: a caller that shared
        // a value with it finds itself the value's only owner again.
        drop(work);
        let answer = match (failure, result) {
            (None, Some(result)) => result,
            (Some(failure), _) => Err(StoreError::Unavailable(DbError::Writer(failure.to_owned()))),
            (None, None) => Err(StoreError::Unavailable(DbError::Writer("the op was not run".into()))),
        };
        // The caller may have gone (its request was dropped): the write
        // stands, as it would had the answer arrived a moment earlier.
        let _ = reply.send(answer);
    }
}

/// Runs `work` so that its failure undoes its own statements only.
fn in_savepoint<R>(
    conn: &Connection,
    work: impl FnOnce(&Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    execute(conn, "SAVEPOINT op", &[])?;
    let result = work(conn);
    if conn.is_autocommit() {
        // The error ended the transaction itself; the batch reports it.
        return result;
    }
    match &result {
        Ok(_) => execute(conn, "RELEASE op", &[])?,
        Err(_) => {
            execute(conn, "ROLLBACK TO op", &[])?;
            execute(conn, "RELEASE op", &[])?
        }
    };
    result
}

/// Opens the writing connection: WAL, its frames gathered into one write a
/// commit ([`super::sqlite_wal_vfs`]), checkpoints left to the checkpoint
/// thread.
fn open_writing(options: &WriterOptions) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags_and_vfs(
        &options.path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        super::sqlite_wal_vfs::name(),
    )?;
    conn.busy_timeout(options.busy_timeout)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", options.synchronous)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.set_prepared_statement_cache_capacity(64);
    // Checkpoints are the checkpoint thread's, not a commit's.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    Ok(conn)
}

/// The thread: take a batch, run it in one transaction, commit, answer.
/// It stops when the last [`Writer`] is dropped, and the checkpoint thread
/// with it.
fn run(shared: &Shared, queue: &mpsc::Receiver<Box<dyn Op>>) {
    while let Ok(first) = queue.recv() {
        // Taken before the count goes down (only here, under the lock): a
        // write that sees the count at zero finds the connection held until
        // these ops are committed, so it cannot run before them.
        let conn = lock(&shared.conn);
        let mut batch = Vec::with_capacity(16);
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        shared.queued.fetch_sub(batch.len(), Ordering::AcqRel);
        let failure = begin(&conn).and_then(|()| run_begun(&conn, &mut batch)).err();
        // Whatever it was, this commit was not the first after the last
        // checkpoint (a checkpoint that ends later sets it again).
        shared.wal_restarts.store(false, Ordering::Release);
        answer_batch(shared, &conn, batch, failure);
    }
}

/// After a batch ran in one transaction on `conn`: rolls it back if it
/// failed, then answers every op — its own result if the transaction
/// committed, else the batch's failure. Every [`CHECKPOINT_EVERY`] commits,
/// asks the checkpoint thread for one.
fn answer_batch(shared: &Shared, conn: &Connection, batch: Vec<Box<dyn Op>>, failure: Option<String>) {
    if failure.is_some() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    if let Some(failure) = &failure {
        tracing::warn!(error = %failure, ops = batch.len(), "a SQLite write batch failed; none of its ops is stored");
    }
    for op in batch {
        op.finish(failure.as_deref());
    }
    if shared.commits.fetch_add(1, Ordering::AcqRel) + 1 >= CHECKPOINT_EVERY {
        shared.commits.store(0, Ordering::Release);
        // Full: one is asked for already.
        let _ = shared.checkpoint.try_send(());
    }
}

/// A poisoned lock only says an op panicked while holding it; ops catch
/// their own panics and roll back, so the connection (or the gathered ops,
/// pushed and taken whole) is fine to use.
fn lock<T>(guarded: &Mutex<T>) -> MutexGuard<'_, T> {
    guarded.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The checkpoint thread: a `PASSIVE` checkpoint when the writer asks, and
/// at least every [`CHECKPOINT_IDLE`]. `PASSIVE` takes no lock the writer
/// waits for; when the WAL still holds more than [`WAL_RESTART_FRAMES`]
/// afterwards, a `RESTART` starts it over, holding the writer's connection
/// meanwhile (writes could not proceed anyway: this way they wait on the
/// lock, not in SQLite's sleeping busy handler, and none waits inline on an
/// async worker). A checkpoint that fails is retried at the next turn.
fn checkpoint_loop(conn: &Connection, wanted: &mpsc::Receiver<()>, writer: &Weak<Shared>) {
    yield_to_requests();
    loop {
        match wanted.recv_timeout(CHECKPOINT_IDLE) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        // (busy, frames in the WAL, frames checkpointed)
        let checkpoint = |mode: &str| {
            conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
                Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
            })
        };
        let checkpointed = match checkpoint("PASSIVE") {
            Ok((frames, _)) if frames > WAL_RESTART_FRAMES => {
                let Some(writer) = writer.upgrade() else { return };
                let _writes_wait = lock(&writer.conn);
                checkpoint("RESTART")
            }
            other => other,
        };
        match checkpointed {
            // Every frame copied (or none there): the next commit starts the
            // WAL over, and `fsync`s its header.
            Ok((frames, copied)) if frames == copied => {
                let Some(writer) = writer.upgrade() else { return };
                writer.wal_restarts.store(true, Ordering::Release);
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "a SQLite WAL checkpoint failed; retrying at the next turn")
            }
        }
    }
}

/// The nice value of the checkpoint thread.
const CHECKPOINT_NICE: i32 = 10;

/// Lowers this thread's priority. A checkpoint copies pages that are
/// durable in the WAL already, and no request waits for it; on a core it
/// shares with the async workers (a replica pinned to one core), at equal
/// priority its page copies take turns with requests in flight — measured:
/// the one-client p99. At nice 10 it runs in their gaps and still gets a
/// tenth of the core when it is saturated (never starved: it must keep the
/// WAL short).
fn yield_to_requests() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority takes plain integers and touches no memory; on
        // Linux, `who = 0` with PRIO_PROCESS is the calling thread alone.
        let set = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, CHECKPOINT_NICE) };
        if set != 0 {
            tracing::debug!("the checkpoint thread keeps its priority (setpriority refused)");
        }
    }
}

fn begin(conn: &Connection) -> Result<(), String> {
    execute(conn, "BEGIN IMMEDIATE", &[]).map(drop).map_err(|err| err.to_string())
}

/// Runs every op of `batch` in the transaction begun on `conn`, and
/// commits. First without savepoints: a savepoint's sub-journal copies
/// every page its op touches, and an op almost never fails (its own
/// outcomes, a lost compare-and-swap or a refused budget, are answers, not
/// failures). If one fails, the transaction is rolled back. Alone, the op
/// is answered with its error, as if rolled back to a savepoint; among
/// others, the batch runs again in a new transaction, each op in a
/// savepoint of its own, so that a failure undoes its op's statements only
/// (that `BEGIN` may wait out another process's write lock: this happens
/// only after an op failed).
fn run_begun(conn: &Connection, batch: &mut [Box<dyn Op>]) -> Result<(), String> {
    if !run_ops(conn, batch, false)? {
        execute(conn, "ROLLBACK", &[]).map_err(|err| err.to_string())?;
        if batch.len() == 1 {
            return Ok(());
        }
        begin(conn)?;
        run_ops(conn, batch, true)?;
    }
    execute(conn, "COMMIT", &[]).map_err(|err| err.to_string())?;
    Ok(())
}

/// Runs the ops of `batch` in order, each in a savepoint if `guarded`:
/// whether the transaction may commit. Unguarded, it stops at the first op
/// that fails (`false`). An error that ended the transaction itself fails
/// the batch.
fn run_ops(conn: &Connection, batch: &mut [Box<dyn Op>], guarded: bool) -> Result<bool, String> {
    for op in batch.iter_mut() {
        let failed = op.run(conn, guarded);
        if conn.is_autocommit() {
            return Err("the transaction was rolled back by SQLite (I/O error, disk full or the like)".into());
        }
        if failed && !guarded {
            return Ok(false);
        }
    }
    Ok(true)
}
#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt as _;

    /// A writer whose thread never runs: what is sent to it stays in
    /// `queue` (or fails, once `queue` is dropped).
    fn unserved(inline: bool) -> (Writer, mpsc::Receiver<Box<dyn Op>>) {
        let (ops, queue) = mpsc::channel();
        let (checkpoint, _) = mpsc::sync_channel(1);
        let shared = Arc::new(Shared {
            conn: Mutex::new(Connection::open_in_memory().unwrap()),
            queued: AtomicUsize::new(0),
            commits: AtomicU32::new(0),
            inline,
            wal_restarts: AtomicBool::new(false),
            busy_timeout: Duration::from_secs(1),
            gathered: Mutex::new(Vec::new()),
            checkpoint,
        });
        (Writer { ops, shared }, queue)
    }

    fn open(dir: &std::path::Path, synchronous: &'static str) -> Writer {
        std::fs::create_dir_all(dir).unwrap();
        let options =
            WriterOptions { path: dir.join("writer.db"), synchronous, busy_timeout: Duration::from_secs(1) };
        Writer::open(&options).unwrap()
    }

    fn temp_dir() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("intentgate-writer-{}", uuid::Uuid::now_v7()))
    }

    #[tokio::test]
    async fn a_stopped_writer_fails_the_check() {
        let (writer, queue) = unserved(true);
        drop(queue);
        let err = writer.check(Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    }

    #[tokio::test]
    async fn a_writer_that_does_not_answer_fails_the_check_in_time() {
        // Idle and inline: the check goes through the thread all the same.
        let (writer, _queue) = unserved(true);
        let err = writer.check(Duration::from_millis(50)).await.unwrap_err();
        assert!(err.to_string().contains("did not answer within 50ms"), "{err}");
    }

    #[tokio::test]
    async fn a_running_writer_passes_the_check() {
        let dir = temp_dir();
        let writer = open(&dir, "NORMAL");
        writer.check(Duration::from_secs(5)).await.unwrap();
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn dropping_the_last_handle_closes_the_connection_and_stops_the_threads() {
        let dir = temp_dir();
        let writer = open(&dir, "NORMAL");
        writer.write(|_| Ok(())).await.unwrap();
        let shared = Arc::downgrade(&writer.shared);
        drop(writer);
        // The writer thread lets go of it once its queue disconnects; the
        // checkpoint thread holds it only weakly (and stops once it is gone).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while shared.upgrade().is_some() {
            assert!(std::time::Instant::now() < deadline, "the writer's connection is still held");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_idle_writer_runs_a_normal_write_on_the_callers_thread_and_a_full_one_on_its_own() {
        let dir = temp_dir();
        let here = std::thread::current().id();
        let on = |writer: Writer| async move {
            writer
                .write(|conn| {
                    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (x INTEGER)")?;
                    Ok((std::thread::current().id(), std::thread::current().name().map(str::to_owned)))
                })
                .await
                .unwrap()
        };
        let normal = open(&dir.join("normal"), "NORMAL");
        let (first, _) = on(normal.clone()).await;
        assert_ne!(first, here, "the first commit writes and fsyncs the WAL's header: through the thread");
        normal.shared.wal_restarts.store(false, Ordering::SeqCst);
        // The thread answers the op before it lets go of the connection:
        // idle means it has let go.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while normal.shared.conn.try_lock().is_err() {
            assert!(std::time::Instant::now() < deadline, "the writer thread keeps the connection");
            std::thread::yield_now();
        }
        let (then, _) = on(normal).await;
        assert_eq!(then, here, "NORMAL: an idle writer's op runs inline");
        let (full, name) = on(open(&dir.join("full"), "FULL")).await;
        assert_ne!(full, here, "FULL: the commit's fsync must not run on an async worker");
        assert_eq!(name.as_deref(), Some("sqlite-writer"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Polls `write` past its yield (what a runtime does at its next
    /// turn): its answer if it came without waiting for the thread.
    fn past_the_yield<R>(write: impl std::future::Future<Output = R>) -> Option<R> {
        let mut write = Box::pin(write);
        assert!((&mut write).now_or_never().is_none(), "the first write yields before it commits");
        write.now_or_never()
    }

    #[test]
    fn a_write_does_not_overtake_queued_ops_nor_wait_for_a_held_connection() {
        let (writer, queue) = unserved(true);
        let ran = Arc::new(AtomicUsize::new(0));
        let write = |writer: &Writer| {
            let ran = Arc::clone(&ran);
            past_the_yield(writer.write(move |_| {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }))
        };
        // Queued ops: the write joins them instead of running first.
        let (op, _answer) = pending(|_| Ok(()));
        writer.enqueue(op).unwrap();
        assert!(write(&writer).is_none(), "it waits for the thread");
        assert_eq!(queue.try_iter().count(), 2);
        assert_eq!(ran.load(Ordering::SeqCst), 0, "it did not run inline");
        // Nothing queued, but the connection held (by the thread's batch or
        // a checkpoint's RESTART): queued, not blocked on the lock.
        writer.shared.queued.store(0, Ordering::SeqCst);
        let held = writer.shared.conn.lock().unwrap();
        assert!(write(&writer).is_none());
        assert_eq!(queue.try_iter().count(), 1);
        drop(held);
        // Idle: it runs at once, answered before anyone waits.
        writer.shared.queued.store(0, Ordering::SeqCst);
        assert!(matches!(write(&writer), Some(Ok(()))));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(queue.try_iter().count(), 0);
    }

    #[tokio::test]
    async fn a_write_lock_held_by_another_connection_sends_the_write_to_the_thread_instead_of_waiting() {
        let dir = temp_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let busy_timeout = Duration::from_secs(10);
        let options = WriterOptions { path: dir.join("writer.db"), synchronous: "NORMAL", busy_timeout };
        let writer = Writer::open(&options).unwrap();
        writer.shared.wal_restarts.store(false, Ordering::SeqCst);
        let other = Connection::open(dir.join("writer.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let mut write = Box::pin(writer.write(|_| Ok(std::thread::current().name().map(str::to_owned))));
        let started = std::time::Instant::now();
        assert!((&mut write).now_or_never().is_none(), "it yields first");
        assert!((&mut write).now_or_never().is_none(), "the write waits for the lock on the thread");
        // Not a speed check: an inline `BEGIN` would have slept in SQLite's
        // busy handler for the whole busy timeout first.
        assert!(started.elapsed() < busy_timeout / 2, "the caller waited for the lock");
        other.execute_batch("COMMIT").unwrap();
        assert_eq!(write.await.unwrap().as_deref(), Some("sqlite-writer"));
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn after_a_checkpoint_emptied_the_wal_the_next_write_goes_through_the_thread() {
        let (writer, queue) = unserved(true);
        writer.shared.wal_restarts.store(true, Ordering::SeqCst);
        assert!(past_the_yield(writer.write(|_| Ok(()))).is_none());
        assert_eq!(queue.try_iter().count(), 1);
    }

    /// One async worker (a replica pinned to one core): writes that are
    /// ready together are committed together, on the worker, in the order
    /// they came.
    #[tokio::test]
    async fn writes_ready_together_commit_in_one_transaction_on_the_worker() {
        let dir = temp_dir();
        let writer = open(&dir, "NORMAL");
        writer.write(|conn| Ok(conn.execute_batch("CREATE TABLE t (x INTEGER)")?)).await.unwrap();
        writer.shared.wal_restarts.store(false, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while writer.shared.conn.try_lock().is_err() {
            assert!(std::time::Instant::now() < deadline, "the writer thread keeps the connection");
            std::thread::yield_now();
        }
        let here = std::thread::current().id();
        let commits = writer.shared.commits.load(Ordering::SeqCst);
        let writes = (0..10).map(|x| {
            writer.write(move |conn| {
                conn.execute("INSERT INTO t VALUES (?1)", [x])?;
                Ok(std::thread::current().id())
            })
        });
        let ran_on = futures_util::future::join_all(writes).await;
        assert!(ran_on.iter().all(|on| on.as_ref().is_ok_and(|on| *on == here)), "{ran_on:?}");
        assert_eq!(writer.shared.commits.load(Ordering::SeqCst), commits + 1, "ten writes, one commit");
        let order: Vec<i64> = writer
            .write(|conn| {
                let mut statement = conn.prepare("SELECT x FROM t ORDER BY rowid")?;
                let rows = statement.query_map([], |row| row.get(0))?;
                Ok(rows.collect::<Result<_, _>>()?)
            })
            .await
            .unwrap();
        assert_eq!(order, (0..10).collect::<Vec<_>>());
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// More writes ready at once than one batch carries: the first
    /// [`MAX_BATCH`] are committed on the worker, the rest go to the thread.
    #[test]
    fn a_gathered_batch_beyond_the_cap_sends_the_rest_to_the_thread() {
        let (writer, queue) = unserved(true);
        let ran = Arc::new(AtomicUsize::new(0));
        let write = || {
            let ran = Arc::clone(&ran);
            Box::pin(writer.write(move |_| {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }))
        };
        let mut first = write();
        assert!((&mut first).now_or_never().is_none());
        let mut others: Vec<_> = (0..MAX_BATCH + 9).map(|_| write()).collect();
        for other in &mut others {
            assert!(other.as_mut().now_or_never().is_none(), "it joins the first one's commit");
        }
        assert!(matches!(first.now_or_never(), Some(Ok(()))), "the first is in the committed part");
        assert_eq!(ran.load(Ordering::SeqCst), MAX_BATCH);
        assert_eq!(queue.try_iter().count(), 10, "the rest went to the thread");
    }

    /// A write dropped while it gathers (its request went away) leaves the
    /// gathered ops to the thread: none is lost.
    #[test]
    fn a_gathering_write_dropped_hands_its_batch_to_the_thread() {
        let (writer, queue) = unserved(true);
        let mut first = Box::pin(writer.write(|_| Ok(1)));
        assert!((&mut first).now_or_never().is_none());
        let mut second = Box::pin(writer.write(|_| Ok(2)));
        assert!((&mut second).now_or_never().is_none(), "it joins the first one's commit");
        drop(first);
        assert_eq!(queue.try_iter().count(), 2, "both went to the thread");
    }

    /// An op, and where its answer comes.
    type Queued<R = ()> = (Box<dyn Op>, oneshot::Receiver<Result<R, StoreError>>);

    /// The rows of the tests' table `t`, in order.
    fn rows(conn: &Connection) -> Vec<i64> {
        let mut statement = conn.prepare("SELECT x FROM t ORDER BY x").unwrap();
        statement.query_map([], |row| row.get(0)).unwrap().map(Result::unwrap).collect()
    }

    /// An op that wrote and then failed leaves nothing behind, alone in its
    /// transaction (no savepoint: the transaction is rolled back) or among
    /// others (its savepoint is), and the others of its batch are kept.
    #[test]
    fn a_failing_op_is_undone_alone_or_in_a_batch_and_its_batch_kept() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let insert = |x: i64, fail: bool| {
            pending(move |conn: &Connection| {
                conn.execute("INSERT INTO t VALUES (?1)", [x])?;
                if fail { Err(StoreError::Corrupt("refused".into())) } else { Ok(()) }
            })
        };
        let run = |conn: &Connection, batch: Vec<Queued>| {
            let (mut ops, mut answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            begin(conn).unwrap();
            let failure = run_begun(conn, &mut ops).err();
            assert!(conn.is_autocommit(), "the transaction ended");
            for op in ops {
                op.finish(failure.as_deref());
            }
            answers.iter_mut().map(|answer| answer.try_recv().unwrap().is_ok()).collect::<Vec<_>>()
        };
        assert_eq!(run(&conn, vec![insert(1, true)]), [false]);
        assert_eq!(rows(&conn), Vec::<i64>::new(), "alone: its insert was rolled back");
        assert_eq!(run(&conn, vec![insert(2, false)]), [true]);
        assert_eq!(
            run(&conn, vec![insert(3, false), insert(4, true), insert(5, false)]),
            [true, false, true]
        );
        assert_eq!(rows(&conn), [2, 3, 5], "in a batch: only its own insert was undone");
    }

    /// A batch runs its ops outside savepoints, each once; a batch one op of
    /// which failed is rolled back and run again, every op in a savepoint,
    /// and each op is answered by its last run.
    #[test]
    fn a_batch_runs_without_savepoints_until_an_op_fails() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        // (op, whether it ran in a savepoint), one entry a run.
        let runs = Arc::new(Mutex::new(Vec::<(i64, bool)>::new()));
        let insert = |x: i64, fail: bool| {
            let runs = Arc::clone(&runs);
            pending(move |conn: &Connection| {
                // Undoes nothing, and succeeds only inside the op's savepoint.
                let guarded = conn.execute_batch("ROLLBACK TO op").is_ok();
                lock(&runs).push((x, guarded));
                conn.execute("INSERT INTO t VALUES (?1)", [x])?;
                if fail { Err(StoreError::Corrupt("refused".into())) } else { Ok(x) }
            })
        };
        let run = |batch: Vec<Queued<i64>>| {
            let (mut ops, mut answers): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
            begin(&conn).unwrap();
            assert_eq!(run_begun(&conn, &mut ops), Ok(()));
            for op in ops {
                op.finish(None);
            }
            let answers: Vec<_> = answers.iter_mut().map(|answer| answer.try_recv().unwrap().ok()).collect();
            (answers, std::mem::take(&mut *lock(&runs)))
        };
        let (answers, ran) = run(vec![insert(1, false), insert(2, false), insert(3, false)]);
        assert_eq!(answers, [Some(1), Some(2), Some(3)]);
        assert_eq!(ran, [(1, false), (2, false), (3, false)], "once each, no savepoint");

        let (answers, ran) = run(vec![insert(4, false), insert(5, true), insert(6, false)]);
        assert_eq!(answers, [Some(4), None, Some(6)]);
        assert_eq!(ran, [(4, false), (5, false), (4, true), (5, true), (6, true)], "run again, guarded");
        assert_eq!(rows(&conn), [1, 2, 3, 4, 6], "the failed op's insert alone was undone, once");
    }

    /// Many writers at once, some inline and some batched by the thread:
    /// every increment lands exactly once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_inline_and_batched_all_land_once() {
        let dir = temp_dir();
        let writer = open(&dir, "NORMAL");
        writer
            .write(|conn| {
                Ok(conn.execute_batch(
                    "CREATE TABLE n (id INTEGER PRIMARY KEY, v INTEGER); INSERT INTO n VALUES (1, 0)",
                )?)
            })
            .await
            .unwrap();
        let tasks = 32;
        let each = 50;
        let barrier = Arc::new(tokio::sync::Barrier::new(tasks));
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let (writer, barrier) = (writer.clone(), Arc::clone(&barrier));
            #[allow(clippy::disallowed_methods)]
            handles.push(tokio::spawn(async move {
                barrier.wait().await;
                let mut inline = 0;
                for _ in 0..each {
                    let here = std::thread::current().id();
                    let there = writer
                        .write(|conn| {
                            conn.execute("UPDATE n SET v = v + 1 WHERE id = 1", [])?;
                            Ok(std::thread::current().id())
                        })
                        .await
                        .unwrap();
                    inline += usize::from(there == here);
                }
                inline
            }));
        }
        let mut inline = 0;
        for handle in handles {
            inline += handle.await.unwrap();
        }
        let total: i64 =
            writer.write(|conn| Ok(conn.query_row("SELECT v FROM n", [], |row| row.get(0))?)).await.unwrap();
        assert_eq!(total, (tasks * each) as i64);
        // How many went each way depends on the scheduler; the test above
        // pins down when a write may run inline.
        eprintln!("{inline} of {} writes ran inline", tasks * each);
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
