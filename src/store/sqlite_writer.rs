//! The SQLite writer: one thread, one connection, group commit.
//!
//! SQLite lets one connection write at a time, so every write of the
//! gateway goes through this thread. Callers hand it a closure (an *op*:
//! one insert-or-get, one attempt start, one compare-and-swap…) and await
//! its answer. The thread takes every op waiting in its queue, runs them in
//! ONE transaction, each inside its own savepoint, commits once and only
//! then answers them all. Under load a commit carries hundreds of ops (one
//! WAL append, or one fsync with `synchronous = FULL`, for all of them);
//! when idle an op is its own transaction, as before.
//!
//! What passes through this seam: ops in, their results out, each answered
//! after the commit that made it durable — or with the error that says it
//! was not. An op that fails is rolled back to its savepoint and does not
//! disturb its batch; an error that ends the whole transaction (disk full,
//! I/O) fails every op of the batch, none of which is then reported done.
//!
//! The statements run synchronously on this thread: no hop to another
//! thread per statement, which is what the benchmark showed dominating.
//!
//! WAL checkpoints run on a thread of their own, with their own connection
//! ([`checkpoint_loop`]), never inside a commit. SQLite's automatic
//! checkpoint runs in the commit that crosses its threshold (1,000 pages):
//! traced at one client, that commit spent 4–6 ms in three `fsync`s and the
//! page copies, once every ~200 requests — the p99. A `PASSIVE` checkpoint
//! on another connection copies committed frames while the writer goes on
//! appending.

use std::sync::mpsc;
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

/// A handle on the writer thread; cloning shares the thread.
#[derive(Debug, Clone)]
pub(super) struct Writer {
    ops: mpsc::Sender<Box<dyn Op>>,
}

impl Writer {
    /// Opens the connection (creating the file, switching it to WAL) and
    /// starts the thread.
    pub(super) fn open(options: &WriterOptions) -> Result<Writer, StoreError> {
        let conn = Connection::open_with_flags(
            &options.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(StoreError::from)?;
        conn.busy_timeout(options.busy_timeout)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", options.synchronous)?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.set_prepared_statement_cache_capacity(64);
        // Checkpoints are the checkpoint thread's, not a commit's.
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        let checkpointer = Connection::open_with_flags(
            &options.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(StoreError::from)?;
        checkpointer.busy_timeout(options.busy_timeout)?;
        let (ops, queue) = mpsc::channel();
        let (wanted, checkpoints) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || checkpoint_loop(&checkpointer, &checkpoints))
            .map_err(|err| StoreError::Unavailable(DbError::Writer(format!("cannot start: {err}"))))?;
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || run(&conn, &queue, &wanted))
            .map_err(|err| StoreError::Unavailable(DbError::Writer(format!("cannot start: {err}"))))?;
        Ok(Writer { ops })
    }

    /// Answers once an op that writes nothing has gone through a batch —
    /// the proof `/readyz` needs that writes go through, which a read on
    /// another connection cannot give. `Unavailable` when the thread has
    /// stopped, or has not answered within `timeout` (stuck on the file
    /// lock, or on a disk that hangs). Under load the op joins a batch of
    /// others and costs no commit of its own.
    pub(super) async fn check(&self, timeout: Duration) -> Result<(), StoreError> {
        match tokio::time::timeout(timeout, self.write(|_| Ok(()))).await {
            Ok(answer) => answer,
            // The op stays queued; when it runs at last, nobody waits for it.
            Err(_) => Err(StoreError::Unavailable(DbError::Writer(format!(
                "the SQLite writer did not answer within {}ms",
                timeout.as_millis()
            )))),
        }
    }

    /// Runs `work` in the next batch; answers once that batch is committed.
    pub(super) async fn write<R, F>(&self, work: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let op = Pending { work: Some(work), result: None, reply };
        self.ops.send(Box::new(op)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable(DbError::Writer("the SQLite writer thread has stopped".into()))
}

/// One queued op, its result type erased so that one queue carries all.
trait Op: Send {
    /// Runs inside the batch's transaction.
    fn run(&mut self, conn: &Connection);
    /// Answers the caller: the op's result if the batch committed (`None`),
    /// else the batch's failure.
    fn finish(self: Box<Self>, failure: Option<&str>);
}

struct Pending<F, R> {
    work: Option<F>,
    result: Option<Result<R, StoreError>>,
    reply: oneshot::Sender<Result<R, StoreError>>,
}

impl<F, R> Op for Pending<F, R>
where
    R: Send + 'static,
    F: FnOnce(&Connection) -> Result<R, StoreError> + Send + 'static,
{
    fn run(&mut self, conn: &Connection) {
        if let Some(work) = self.work.take() {
            // A panicking op must not take the writer (and every later
            // write) down with it: it fails alone, its statements undone.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| in_savepoint(conn, work)));
            self.result = Some(ran.unwrap_or_else(|_| {
                if !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK TO op; RELEASE op");
                }
                Err(StoreError::Corrupt("a write panicked; it was undone".into()))
            }));
        }
    }

    fn finish(self: Box<Self>, failure: Option<&str>) {
        let answer = match (failure, self.result) {
            (None, Some(result)) => result,
            (Some(failure), _) => Err(StoreError::Unavailable(DbError::Writer(failure.to_owned()))),
            (None, None) => Err(StoreError::Unavailable(DbError::Writer("the op was not run".into()))),
        };
        // The caller may have gone (its request was dropped): the write
        // stands, as it would had the answer arrived a moment earlier.
        let _ = self.reply.send(answer);
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

/// The thread: take a batch, run it in one transaction, commit, answer;
/// every [`CHECKPOINT_EVERY`] commits, ask the checkpoint thread for one
/// (never waiting for it). It stops when the last [`Writer`] is dropped,
/// and the checkpoint thread with it.
fn run(conn: &Connection, queue: &mpsc::Receiver<Box<dyn Op>>, checkpoint: &mpsc::SyncSender<()>) {
    let mut commits = 0u32;
    while let Ok(first) = queue.recv() {
        let mut batch = Vec::with_capacity(16);
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let failure = run_batch(conn, &mut batch).err();
        if failure.is_some() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        if let Some(failure) = &failure {
            tracing::warn!(error = %failure, ops = batch.len(), "a SQLite write batch failed; none of its ops is stored");
        }
        for op in batch {
            op.finish(failure.as_deref());
        }
        commits += 1;
        if commits >= CHECKPOINT_EVERY {
            commits = 0;
            // Full: one is asked for already.
            let _ = checkpoint.try_send(());
        }
    }
}

/// The checkpoint thread: a `PASSIVE` checkpoint when the writer asks, and
/// at least every [`CHECKPOINT_IDLE`]. `PASSIVE` takes no lock the writer
/// waits for; when the WAL still holds more than [`WAL_RESTART_FRAMES`]
/// afterwards, a `RESTART` starts it over. A checkpoint that fails is
/// retried at the next turn.
fn checkpoint_loop(conn: &Connection, wanted: &mpsc::Receiver<()>) {
    loop {
        match wanted.recv_timeout(CHECKPOINT_IDLE) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        // (busy, frames in the WAL, frames checkpointed)
        let frames = |mode: &str| {
            conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| row.get::<_, i64>(1))
        };
        let checkpointed = match frames("PASSIVE") {
            Ok(left) if left > WAL_RESTART_FRAMES => frames("RESTART").map(drop),
            other => other.map(drop),
        };
        if let Err(err) = checkpointed {
            tracing::warn!(error = %err, "a SQLite WAL checkpoint failed; retrying at the next turn");
        }
    }
}

fn run_batch(conn: &Connection, batch: &mut [Box<dyn Op>]) -> Result<(), String> {
    execute(conn, "BEGIN IMMEDIATE", &[]).map_err(|err| err.to_string())?;
    for op in batch.iter_mut() {
        op.run(conn);
        if conn.is_autocommit() {
            return Err("the transaction was rolled back by SQLite (I/O error, disk full or the like)".into());
        }
    }
    execute(conn, "COMMIT", &[]).map_err(|err| err.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stopped_writer_fails_the_check() {
        let (ops, queue) = mpsc::channel();
        drop(queue);
        let writer = Writer { ops };
        let err = writer.check(Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    }

    #[tokio::test]
    async fn a_writer_that_does_not_answer_fails_the_check_in_time() {
        let (ops, _queue) = mpsc::channel(); // nobody serves the queue
        let writer = Writer { ops };
        let err = writer.check(Duration::from_millis(50)).await.unwrap_err();
        assert!(err.to_string().contains("did not answer within 50ms"), "{err}");
    }

    #[tokio::test]
    async fn a_running_writer_passes_the_check() {
        let dir = std::env::temp_dir().join(format!("intentgate-writer-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let options = WriterOptions {
            path: dir.join("check.db"),
            synchronous: "NORMAL",
            busy_timeout: Duration::from_secs(1),
        };
        let writer = Writer::open(&options).unwrap();
        writer.check(Duration::from_secs(5)).await.unwrap();
        drop(writer);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
