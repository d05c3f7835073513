//! SQLite reads: read-only connections used on the caller's own thread.
//!
//! A read of a few rows by key takes microseconds inside SQLite, less than
//! handing it to another thread and waking back up (what a sqlx SQLite pool
//! does per statement, and what the benchmark's profile showed costing more
//! than the reads). WAL lets these connections read while the writer
//! writes, so a read does not wait on the writer; only a checkpoint's rare
//! WAL reset can make one wait, up to `busy_timeout`.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::StoreError;

#[derive(Debug)]
pub(super) struct Readers {
    path: PathBuf,
    busy_timeout: Duration,
    /// Connections not in use; at most `max_idle` are kept.
    idle: Mutex<Vec<Connection>>,
    max_idle: usize,
}

impl Readers {
    pub(super) fn new(path: PathBuf, busy_timeout: Duration, max_idle: usize) -> Readers {
        Readers { path, busy_timeout, idle: Mutex::new(Vec::new()), max_idle }
    }

    /// Runs `read` on an idle connection (or a new one).
    pub(super) fn with<R>(
        &self,
        read: impl FnOnce(&Connection) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let conn = match self.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            Some(conn) => conn,
            None => self.open()?,
        };
        let result = read(&conn);
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_idle
        {
            idle.push(conn);
        }
        result
    }

    fn open(&self) -> Result<Connection, StoreError> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(self.busy_timeout)?;
        conn.set_prepared_statement_cache_capacity(32);
        Ok(conn)
    }
}
