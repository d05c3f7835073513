//! Owned statement arguments, so one single-statement write is written once
//! and runs on either backend: on the SQLite writer's thread (which needs
//! `'static` values) or on the PostgreSQL pool.

use rusqlite::types::{ToSql, ToSqlOutput};
use uuid::Uuid;

use super::{Store, StoreError, sqlite_writer};

#[derive(Debug, Clone)]
pub(super) enum Arg {
    Uuid(Uuid),
    /// Typed even when NULL: PostgreSQL refuses a text NULL for a BIGINT.
    Int(Option<i64>),
    Text(Option<String>),
}

impl From<Uuid> for Arg {
    fn from(value: Uuid) -> Self {
        Arg::Uuid(value)
    }
}

impl From<i64> for Arg {
    fn from(value: i64) -> Self {
        Arg::Int(Some(value))
    }
}

impl From<Option<i64>> for Arg {
    fn from(value: Option<i64>) -> Self {
        Arg::Int(value)
    }
}

impl From<&str> for Arg {
    fn from(value: &str) -> Self {
        Arg::Text(Some(value.to_owned()))
    }
}

impl From<Option<String>> for Arg {
    fn from(value: Option<String>) -> Self {
        Arg::Text(value)
    }
}

impl From<Option<&str>> for Arg {
    fn from(value: Option<&str>) -> Self {
        Arg::Text(value.map(str::to_owned))
    }
}

impl ToSql for Arg {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        match self {
            Arg::Uuid(value) => value.to_sql(),
            Arg::Int(value) => value.to_sql(),
            Arg::Text(value) => value.to_sql(),
        }
    }
}

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

fn bind_pg(mut query: PgQuery<'_>, args: Vec<Arg>) -> PgQuery<'_> {
    for arg in args {
        query = match arg {
            Arg::Uuid(value) => query.bind(value),
            Arg::Int(value) => query.bind(value),
            Arg::Text(value) => query.bind(value),
        };
    }
    query
}

impl Store {
    /// Runs one writing statement of [`super::sql`]; returns the rows it changed.
    pub(super) async fn execute(&self, sql: &'static str, args: Vec<Arg>) -> Result<u64, StoreError> {
        match self {
            Store::Sqlite(store) => {
                store
                    .writer
                    .write(move |conn| {
                        let refs: Vec<&dyn ToSql> = args.iter().map(|arg| arg as &dyn ToSql).collect();
                        sqlite_writer::execute(conn, sql, &refs).map(|rows| rows as u64)
                    })
                    .await
            }
            Store::Postgres(store) => {
                Ok(bind_pg(sqlx::query(sql), args).execute(&store.pool).await?.rows_affected())
            }
        }
    }
}
