//! The SQLite schema's migrations, run through the one SQLite driver the
//! store uses (rusqlite). The migration files are embedded by sqlx's
//! `migrate!`, and their record is sqlx's own table (`_sqlx_migrations`:
//! version, checksum, success), so a database migrated by either agrees:
//! an applied migration whose file changed since, a migration that failed
//! half-way, or a version this build does not know is refused, as sqlx
//! refuses them. A file marked `-- no-transaction` runs as written (it
//! opens its own transaction); every other runs in one with its record.

use std::path::Path;
use std::time::{Duration, Instant};

use sqlx::migrate::{MigrateError, Migrator};

use super::StoreError;

const CREATE_RECORD: &str = "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    success BOOLEAN NOT NULL,
    checksum BLOB NOT NULL,
    execution_time BIGINT NOT NULL
)";
const SELECT_APPLIED: &str = "SELECT version, success, checksum FROM _sqlx_migrations ORDER BY version";
const INSERT_RECORD: &str = "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
     VALUES (?1, ?2, TRUE, ?3, ?4)";

/// Applies `migrator`'s migrations that the database at `path` lacks.
/// Blocking: run it off the async workers.
pub(super) fn run(path: &Path, migrator: &Migrator, busy_timeout: Duration) -> Result<(), StoreError> {
    let mut conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(busy_timeout)?;
    // As every connection of the store has it; a migration that must
    // rebuild tables turns it off for itself.
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.execute_batch(CREATE_RECORD)?;
    let applied: Vec<(i64, bool, Vec<u8>)> = conn
        .prepare(SELECT_APPLIED)?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<Result<_, _>>()?;
    if let Some((version, ..)) = applied.iter().find(|(_, success, _)| !success) {
        return Err(MigrateError::Dirty(*version).into());
    }
    let known =
        |version: i64| migrator.iter().any(|m| m.version == version && m.migration_type.is_up_migration());
    if let Some((version, ..)) = applied.iter().find(|(version, ..)| !known(*version)) {
        return Err(MigrateError::VersionMissing(*version).into());
    }
    for migration in migrator.iter().filter(|m| m.migration_type.is_up_migration()) {
        match applied.iter().find(|(version, ..)| *version == migration.version) {
            Some((_, _, checksum)) if *checksum != *migration.checksum => {
                return Err(MigrateError::VersionMismatch(migration.version).into());
            }
            Some(_) => {}
            None => apply(&mut conn, migration)?,
        }
    }
    Ok(())
}

/// Runs one migration and records it.
fn apply(conn: &mut rusqlite::Connection, migration: &sqlx::migrate::Migration) -> Result<(), StoreError> {
    let started = Instant::now();
    let record = |conn: &rusqlite::Connection| {
        let nanos = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
        let args = (migration.version, migration.description.as_ref(), migration.checksum.as_ref(), nanos);
        conn.execute(INSERT_RECORD, args).map(drop)
    };
    if migration.no_tx {
        conn.execute_batch(migration.sql.as_ref())?;
        record(conn)?;
    } else {
        let tx = conn.transaction()?;
        tx.execute_batch(migration.sql.as_ref())?;
        record(&tx)?;
        tx.commit()?;
    }
    tracing::info!(version = migration.version, description = %migration.description, "migration applied");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

    fn scratch() -> PathBufGuard {
        let dir = std::env::temp_dir().join(format!("intentgate-migrate-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        PathBufGuard(dir)
    }

    struct PathBufGuard(std::path::PathBuf);

    impl Drop for PathBufGuard {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn records(path: &Path) -> Vec<(i64, bool, Vec<u8>)> {
        let conn = rusqlite::Connection::open(path).unwrap();
        let mut statement = conn.prepare(SELECT_APPLIED).unwrap();
        let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?))).unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn every_migration_is_applied_once_and_recorded_as_sqlx_records_it() {
        let dir = scratch();
        let path = dir.0.join("jobs.db");
        run(&path, &MIGRATOR, Duration::from_secs(5)).unwrap();
        let recorded = records(&path);
        let expected: Vec<(i64, bool, Vec<u8>)> =
            MIGRATOR.iter().map(|m| (m.version, true, m.checksum.to_vec())).collect();
        assert_eq!(recorded, expected, "sqlx's versions and checksums");
        run(&path, &MIGRATOR, Duration::from_secs(5)).unwrap();
        assert_eq!(records(&path).len(), expected.len(), "nothing applied twice");
    }

    #[test]
    fn a_changed_failed_or_unknown_migration_is_refused() {
        let dir = scratch();
        let path = dir.0.join("jobs.db");
        run(&path, &MIGRATOR, Duration::from_secs(5)).unwrap();
        let conn = rusqlite::Connection::open(&path).unwrap();
        let refused = |sql: &str| {
            conn.execute_batch(sql).unwrap();
            run(&path, &MIGRATOR, Duration::from_secs(5)).unwrap_err().to_string()
        };
        let changed = refused("UPDATE _sqlx_migrations SET checksum = x'00' WHERE version = 1");
        assert!(changed.contains("migration 1") && changed.contains("modified"), "{changed}");
        let unknown = refused(
            "DELETE FROM _sqlx_migrations WHERE version = 1; INSERT INTO _sqlx_migrations \
             (version, description, success, checksum, execution_time) VALUES (9999, 'later', TRUE, x'00', 0)",
        );
        assert!(unknown.contains("9999") && unknown.contains("missing"), "{unknown}");
        let dirty = refused("UPDATE _sqlx_migrations SET success = FALSE WHERE version = 2");
        assert!(dirty.contains("migration 2") && dirty.contains("partially applied"), "{dirty}");
    }
}
