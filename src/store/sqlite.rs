//! SQLite backend: the embedded default. One file, WAL journal, foreign
//! keys on. Writes go through ONE connection, on its own thread, which
//! commits them in groups, or on the caller's when it is idle ([`Writer`]):
//! SQLite has one writer at a time anyway, and several writing connections
//! only add busy-wait sleeps, page-cache invalidation and starved WAL
//! checkpoints (the benchmark saw all three). Reads run on read-only connections beside it, on the
//! caller's thread ([`Readers`]), which WAL lets proceed while the writer
//! writes.

use std::path::PathBuf;
use std::sync::Arc;

use super::sqlite_readers::Readers;
use super::sqlite_writer::{Writer, WriterOptions};
use super::{DbError, StoreError};
use crate::config::StoreConfig;

/// The migration files, embedded; run by `sqlite_migrate.rs`.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

#[derive(Debug, Clone)]
pub struct SqliteStore {
    /// The writer: one connection, one thread (idle writes run inline).
    pub(super) writer: Writer,
    /// The database file, which migrations open a connection of their own to.
    path: Arc<PathBuf>,
    /// Read-only connections, up to `[store] max_connections` kept open.
    pub(super) readers: Arc<Readers>,
    /// How long `/readyz` waits for the writer (`[store] acquire_timeout`:
    /// the writer is the one connection a write waits for).
    ready_timeout: std::time::Duration,
    busy_timeout: std::time::Duration,
    /// `[store] record_sends`.
    pub(super) record_sends: bool,
}

impl SqliteStore {
    pub(super) async fn connect(config: &StoreConfig) -> Result<Self, StoreError> {
        let path = StoreConfig::sqlite_path(&config.url).map_err(|why| {
            StoreError::Database(DbError::Sqlx(sqlx::Error::Configuration(format!("store.url {why}").into())))
        })?;
        // Directory 0700, file 0600 (and so its -wal and -shm) before
        // SQLite creates anything.
        super::sqlite_files::prepare(&path)
            .map_err(|err| StoreError::Unavailable(DbError::Sqlx(sqlx::Error::Io(err))))?;
        // The writer opens first: it creates the file and switches it to WAL.
        // NORMAL in WAL mode survives a process crash; FULL also survives
        // power loss at the cost of an fsync per commit.
        let writer = Writer::open(&WriterOptions {
            path: path.clone(),
            synchronous: match config.sqlite_synchronous {
                crate::config::SqliteSynchronous::Normal => "NORMAL",
                crate::config::SqliteSynchronous::Full => "FULL",
            },
            busy_timeout: config.busy_timeout.into(),
        })?;
        let readers = Readers::new(path.clone(), config.busy_timeout.into(), config.max_connections as usize);
        Ok(SqliteStore {
            writer,
            path: Arc::new(path),
            readers: Arc::new(readers),
            ready_timeout: config.acquire_timeout.into(),
            busy_timeout: config.busy_timeout.into(),
            record_sends: config.record_sends,
        })
    }

    /// Answers when the writer thread does: a reader that answers says
    /// nothing about the writer, through which every write goes.
    pub(super) async fn check_writer(&self) -> Result<(), StoreError> {
        self.writer.check(self.ready_timeout).await
    }

    /// Runs the migrations on a connection of their own, closed after.
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        let (path, busy_timeout) = (Arc::clone(&self.path), self.busy_timeout);
        tokio::task::spawn_blocking(move || super::sqlite_migrate::run(&path, &MIGRATOR, busy_timeout))
            .await
            .map_err(|err| {
                StoreError::Unavailable(DbError::Writer(format!("the migrations did not run: {err}")))
            })?
    }
}

#[cfg(test)]
mod tests {
    use super::super::sql;
    use super::*;

    /// The statements a job runs on its way through: created with its
    /// first attempt, answered, settled, failed, renewed, looked up again.
    const HOT_PATH: [(&str, &str); 11] = [
        ("INSERT_JOB", sql::INSERT_JOB),
        ("INSERT_FIRST_ATTEMPT", sql::INSERT_FIRST_ATTEMPT),
        ("MARK_SENT", sql::MARK_SENT),
        ("COMPLETE_JOB_CAS", sql::COMPLETE_JOB_CAS),
        ("SELECT_JOB_BY_ID", sql::SELECT_JOB_BY_ID),
        ("SETTLE_DELIVERED", sql::SETTLE_DELIVERED),
        ("SETTLE_ATTEMPT", sql::SETTLE_ATTEMPT),
        ("SET_JOB_STATUS", sql::SET_JOB_STATUS),
        ("FAIL_JOB", sql::FAIL_JOB),
        ("SELECT_JOB_BY_KEY", sql::SELECT_JOB_BY_KEY),
        ("RENEW_LEASE", sql::RENEW_LEASE),
    ];

    /// An in-memory database with every migration applied.
    fn migrated() -> rusqlite::Connection {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for migration in MIGRATOR.iter() {
            conn.execute_batch(migration.sql.as_ref()).unwrap();
        }
        conn
    }

    /// The lists of three or more constants after `IN` in `sql`: SQLite
    /// builds each as a table (an ephemeral b-tree), filled and freed every
    /// time the statement runs.
    fn constant_lists(sql: &str) -> Vec<String> {
        let mut lists = Vec::new();
        let upper = sql.to_ascii_uppercase();
        for (at, _) in upper.match_indices(" IN (") {
            let rest = &sql[at + 5..];
            let Some(end) = rest.find(')') else { continue };
            let items = &rest[..end];
            if items.trim_start().starts_with('\'') && items.split(',').count() >= 3 {
                lists.push(items.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
        lists
    }

    /// Every rule a job's writes run through — the CHECKs of `jobs` and
    /// `attempts`, their triggers and partial indexes — and every statement
    /// of the hot path compares with constants one by one: none has a list
    /// SQLite would build a table for on each insert and state change.
    #[test]
    fn a_jobs_writes_build_no_table() {
        let conn = migrated();
        let mut schema = conn
            .prepare("SELECT name, sql FROM sqlite_master WHERE tbl_name IN ('jobs', 'attempts') AND sql IS NOT NULL")
            .unwrap();
        let rules: Vec<(String, String)> =
            schema.query_map([], |row| Ok((row.get(0)?, row.get(1)?))).unwrap().map(Result::unwrap).collect();
        assert!(rules.len() >= 10, "the tables, their indexes and triggers");
        let statements = HOT_PATH.into_iter().chain([("INSERT_ATTEMPT", sql::INSERT_ATTEMPT)]);
        let all = rules.iter().map(|(name, sql)| (name.as_str(), sql.as_str())).chain(statements);
        for (name, sql) in all {
            assert_eq!(
                constant_lists(sql),
                Vec::<String>::new(),
                "{name} has a list SQLite builds a table for"
            );
        }
    }

    /// The tables SQLite's bytecode for `sql` opens as ephemeral b-trees
    /// (built, filled and freed each time it runs: an `IN` list of three or
    /// more constants, a `RETURNING`, an `IN (SELECT …)`), by the program
    /// they are in: the statement's own (its CHECKs and indexes), or a
    /// trigger's. `EXPLAIN` lists a trigger's program after the statement's,
    /// each starting with an `Init` whose comment names the trigger.
    fn ephemeral_tables(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
        let mut explain = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
        let mut rows = explain.raw_query();
        let (mut program, mut found) = ("the statement".to_owned(), Vec::new());
        while let Some(row) = rows.next().unwrap() {
            let opcode: String = row.get(1).unwrap();
            let comment: Option<String> = row.get(5).unwrap();
            match (opcode.as_str(), comment) {
                ("Init", Some(trigger)) if trigger.starts_with("-- TRIGGER") => program = trigger,
                ("OpenEphemeral", _) => found.push(program.clone()),
                _ => {}
            }
        }
        found
    }

    /// A job's writes and reads on its way through, as SQLite runs them —
    /// with the CHECKs, triggers and index upkeep each one sets off — open
    /// no ephemeral table. The one exception is the trigger that moves a
    /// settled attempt's holds into their meters: its body runs only when
    /// the attempt booked holds (budgets on), and what that costs is
    /// measured apart (docs/benchmarks.md).
    #[test]
    fn a_jobs_statements_open_no_ephemeral_table() {
        let conn = migrated();
        for (name, sql) in HOT_PATH {
            let tables: Vec<String> = ephemeral_tables(&conn, sql)
                .into_iter()
                .filter(|program| program != "-- TRIGGER attempts_settle_holds")
                .collect();
            assert_eq!(tables, Vec::<String>::new(), "{name} opens an ephemeral table");
        }
        assert_eq!(
            ephemeral_tables(&conn, "INSERT INTO jobs (id) VALUES (x'00') RETURNING id"),
            ["the statement"],
            "the check sees a RETURNING's table"
        );
    }

    /// The read that replaces `RETURNING` after a compare-and-swap seeks its
    /// row by primary key, never a scan of `jobs`.
    #[test]
    fn a_won_job_is_read_back_by_a_seek() {
        let conn = migrated();
        let read = sql::SELECT_JOB_BY_ID;
        let mut explain = conn.prepare(&format!("EXPLAIN QUERY PLAN {read}")).unwrap();
        let nulls = vec![rusqlite::types::Value::Null; explain.parameter_count()];
        let plan: Vec<String> = explain
            .query_map(rusqlite::params_from_iter(nulls), |row| row.get(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(plan.iter().all(|step| step.starts_with("SEARCH jobs USING")), "{read}: {plan:?}");
    }
}
