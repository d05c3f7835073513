//! One statement of [`super::sql`], written once, run on either backend: a
//! write on the SQLite writer's thread (which needs owned, `'static`
//! arguments: [`Arg`]) or on the PostgreSQL pool; a read on a SQLite reader
//! connection or on the pool. Rows decode through `sqlx::FromRow` on
//! PostgreSQL and through the row type's `from_sqlite` on SQLite. Through a
//! transaction pooler a PostgreSQL statement is unnamed and runs in a
//! transaction of its own (`postgres.rs`).

use rusqlite::types::{ToSql, ToSqlOutput};
use uuid::Uuid;

use sqlx::Arguments as _;
use sqlx::postgres::{PgArguments, PgRow};

use super::{Store, StoreError, sqlite_statements};

#[derive(Debug, Clone)]
pub(super) enum Arg {
    Uuid(Uuid),
    /// A UUID column that may be NULL.
    MaybeUuid(Option<Uuid>),
    /// Typed even when NULL: PostgreSQL refuses a text NULL for a BIGINT.
    Int(Option<i64>),
    Text(Option<String>),
}

impl From<Uuid> for Arg {
    fn from(value: Uuid) -> Self {
        Arg::Uuid(value)
    }
}

impl From<Option<Uuid>> for Arg {
    fn from(value: Option<Uuid>) -> Self {
        Arg::MaybeUuid(value)
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
            Arg::MaybeUuid(value) => value.to_sql(),
            Arg::Int(value) => value.to_sql(),
            Arg::Text(value) => value.to_sql(),
        }
    }
}

fn pg_arguments(args: Vec<Arg>) -> Result<PgArguments, StoreError> {
    let mut out = PgArguments::default();
    for arg in args {
        let added = match arg {
            Arg::Uuid(value) => out.add(value),
            Arg::MaybeUuid(value) => out.add(value),
            Arg::Int(value) => out.add(value),
            Arg::Text(value) => out.add(value),
        };
        added.map_err(|err| StoreError::Corrupt(format!("cannot encode an argument: {err}")))?;
    }
    Ok(out)
}

fn sqlite_refs(args: &[Arg]) -> Vec<&dyn ToSql> {
    args.iter().map(|arg| arg as &dyn ToSql).collect()
}

/// How a SQLite row becomes `R`.
pub(super) type SqliteDecode<R> = fn(&rusqlite::Row<'_>) -> rusqlite::Result<R>;

impl Store {
    /// Runs one writing statement of [`super::sql`]; returns the rows it changed.
    pub(super) async fn execute(&self, sql: &'static str, args: Vec<Arg>) -> Result<u64, StoreError> {
        match self {
            Store::Sqlite(store) => {
                store
                    .writer
                    .write(move |conn| {
                        sqlite_statements::execute(conn, sql, &sqlite_refs(&args)).map(|rows| rows as u64)
                    })
                    .await
            }
            Store::Postgres(store) => {
                let query = sqlx::query_with(sql, pg_arguments(args)?).persistent(store.named());
                let mut one = store.one_statement().await?;
                let done = query.execute(one.conn()).await?;
                one.finish().await?;
                Ok(done.rows_affected())
            }
        }
    }

    /// Runs one reading statement; the first row, if any.
    pub(super) async fn read_optional<R>(
        &self,
        sql: &'static str,
        args: Vec<Arg>,
        decode: SqliteDecode<R>,
    ) -> Result<Option<R>, StoreError>
    where
        R: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        match self {
            Store::Sqlite(store) => store
                .readers
                .with(|conn| sqlite_statements::fetch_optional(conn, sql, &sqlite_refs(&args), decode)),
            Store::Postgres(store) => {
                let query = sqlx::query_as_with(sql, pg_arguments(args)?).persistent(store.named());
                let mut one = store.one_statement().await?;
                let row = query.fetch_optional(one.conn()).await?;
                one.finish().await?;
                Ok(row)
            }
        }
    }

    /// Runs one reading statement; every row.
    pub(super) async fn read_all<R>(
        &self,
        sql: &'static str,
        args: Vec<Arg>,
        decode: SqliteDecode<R>,
    ) -> Result<Vec<R>, StoreError>
    where
        R: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        match self {
            Store::Sqlite(store) => store
                .readers
                .with(|conn| sqlite_statements::fetch_all(conn, sql, &sqlite_refs(&args), decode)),
            Store::Postgres(store) => {
                let query = sqlx::query_as_with(sql, pg_arguments(args)?).persistent(store.named());
                let mut one = store.one_statement().await?;
                let rows = query.fetch_all(one.conn()).await?;
                one.finish().await?;
                Ok(rows)
            }
        }
    }
}

/// One statement of a guarded write ([`Store::execute_guarded`]) with its arguments.
pub(super) type Step = (&'static str, Vec<Arg>);

impl Store {
    /// Runs `steps` in one transaction, provided the first one changes a
    /// row: when it changes none (its conditional `WHERE` found the row in
    /// another state), nothing is written and this returns false. The first
    /// step is the change, the rest are what goes with it (its audit).
    pub(super) async fn execute_guarded(&self, steps: Vec<Step>) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(store) => {
                store
                    .writer
                    .write(move |conn| {
                        for (i, (sql, args)) in steps.iter().enumerate() {
                            let changed = sqlite_statements::execute(conn, sql, &sqlite_refs(args))?;
                            if i == 0 && changed == 0 {
                                return Ok(false);
                            }
                        }
                        Ok(true)
                    })
                    .await
            }
            Store::Postgres(store) => {
                let mut tx = super::pg_statements::begin(&store.pool).await?;
                for (i, (sql, args)) in steps.into_iter().enumerate() {
                    let query = sqlx::query_with(sql, pg_arguments(args)?).persistent(store.named());
                    if query.execute(&mut *tx).await?.rows_affected() == 0 && i == 0 {
                        tx.rollback().await?;
                        return Ok(false);
                    }
                }
                tx.commit().await?;
                Ok(true)
            }
        }
    }
}
