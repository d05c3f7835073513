//! Running the shared `$N` SQL of [`super::sql`] on a rusqlite connection:
//! the writer's (inside its ops) and the readers' alike.

use rusqlite::types::ToSql;
use rusqlite::{Connection, Row};

use super::StoreError;

/// Binds `args[N-1]` to every `$N` of the statement: SQLite numbers named
/// parameters in order of first appearance, not by their digits, so a
/// statement reading `$3` before `$1` needs this mapping.
fn prepare_bound<'c>(
    conn: &'c Connection,
    sql: &str,
    args: &[&dyn ToSql],
) -> Result<rusqlite::CachedStatement<'c>, StoreError> {
    let mut statement = conn.prepare_cached(sql)?;
    for index in 1..=statement.parameter_count() {
        let number: usize = statement
            .parameter_name(index)
            .and_then(|name| name.strip_prefix('$'))
            .and_then(|digits| digits.parse().ok())
            .ok_or_else(|| StoreError::Corrupt(format!("parameter {index} of `{sql}` is not $N")))?;
        let value = args
            .get(number - 1)
            .ok_or_else(|| StoreError::Corrupt(format!("no argument for ${number} of `{sql}`")))?;
        statement.raw_bind_parameter(index, value)?;
    }
    Ok(statement)
}

/// Runs a statement; returns the number of rows it changed.
pub(super) fn execute(conn: &Connection, sql: &str, args: &[&dyn ToSql]) -> Result<usize, StoreError> {
    let mut statement = prepare_bound(conn, sql, args)?;
    Ok(statement.raw_execute()?)
}

/// The first row, decoded by `decode`, if there is one.
pub(super) fn fetch_optional<T>(
    conn: &Connection,
    sql: &str,
    args: &[&dyn ToSql],
    decode: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<Option<T>, StoreError> {
    let mut statement = prepare_bound(conn, sql, args)?;
    let mut rows = statement.raw_query();
    match rows.next()? {
        Some(row) => Ok(Some(decode(row)?)),
        None => Ok(None),
    }
}

/// Every row, decoded by `decode`.
pub(super) fn fetch_all<T>(
    conn: &Connection,
    sql: &str,
    args: &[&dyn ToSql],
    mut decode: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>, StoreError> {
    let mut statement = prepare_bound(conn, sql, args)?;
    let mut rows = statement.raw_query();
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode(row)?);
    }
    Ok(out)
}
