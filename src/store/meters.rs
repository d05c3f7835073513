//! Booking the holds of budgets and rate limits ([`crate::budgets`]) inside
//! the transaction that writes an attempt or a job, and reading meters.
//!
//! Settling needs nothing here: the `attempts_settle_holds` trigger of
//! migration 0004 moves a reservation into `used` when its attempt is
//! charged. The two backends book differently, side by side below: the
//! SQLite writer is the only writer, so it checks every hold first and
//! then books them; PostgreSQL books them all in one statement of
//! conditional upserts that serialise concurrent writers on each meter's
//! row, in meter order, and the caller rolls the whole transaction back if
//! one does not fit.

use rusqlite::Connection;
use sqlx::PgConnection;
use uuid::Uuid;

use super::sqlite_statements::{execute, fetch_optional};
use super::{Store, StoreError, sql};
use crate::budgets::{Hold, LimitKind, LimitRefusal};
use crate::jobs::Amounts;

/// What a new attempt reserves, and on which meters.
#[derive(Debug, Clone, Default)]
pub struct Reservation {
    pub amounts: Amounts,
    pub holds: Vec<Hold>,
}

/// `(used, held)` of a meter in the window starting at `window_start_ms`.
pub type MeterReading = (i64, i64);

/// The statement that books `hold`: into `held` for an attempt's
/// reservation, straight into `used` for a request.
fn booking(hold: &Hold) -> &'static str {
    match hold.kind {
        LimitKind::Requests => sql::COUNT_USE,
        LimitKind::Budget | LimitKind::Tokens => sql::RESERVE_HOLD,
    }
}

/// SQLite, inside a writer op, before it writes anything: the first hold
/// that does not fit. Nothing else writes meanwhile (the writer is the
/// only one), so holds that fit here still fit in [`book_sqlite`].
pub(super) fn check_sqlite(conn: &Connection, holds: &[Hold]) -> Result<Option<LimitRefusal>, StoreError> {
    for hold in holds {
        let reading =
            fetch_optional(conn, sql::SELECT_METER, &[&hold.meter, &hold.window_start_ms], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
            })?;
        let (used, held) = reading.unwrap_or((0, 0));
        if !hold.fits(used, held) {
            return Ok(Some(hold.refusal(used, held)));
        }
    }
    Ok(None)
}

/// SQLite, inside the same op, after [`check_sqlite`] and after the attempt
/// (if any) is inserted: books every hold.
pub(super) fn book_sqlite(conn: &Connection, attempt_id: Uuid, holds: &[Hold]) -> Result<(), StoreError> {
    for hold in holds {
        let args: [&dyn rusqlite::ToSql; 5] =
            [&hold.meter, &hold.window_start_ms, &hold.window_end_ms, &hold.amount, &hold.limit];
        // The check above ran in this same op, so the booking's condition holds.
        fetch_optional(conn, booking(hold), &args, |row| row.get::<_, i64>(0))?;
        if hold.kind != LimitKind::Requests {
            let args: [&dyn rusqlite::ToSql; 5] =
                [&attempt_id, &hold.meter, &hold.window_start_ms, &hold.kind.unit(), &hold.amount];
            execute(conn, sql::INSERT_HOLD, &args)?;
        }
    }
    Ok(())
}

/// PostgreSQL, inside the caller's transaction: books every hold in one
/// statement ([`sql::BOOK_HOLDS_PG`]), so the meter rows it locks stay locked
/// for one round trip and the commit, not for one round trip per hold.
/// On a refusal the caller must roll back (the holds that fitted are booked).
pub(super) async fn book_pg(
    tx: &mut PgConnection,
    attempt_id: Uuid,
    holds: &[Hold],
    named: bool,
) -> Result<Option<LimitRefusal>, StoreError> {
    if holds.is_empty() {
        return Ok(None);
    }
    if let Some(hold) = holds.iter().find(|hold| !hold.fits(0, 0)) {
        return Ok(Some(hold.refusal(0, 0)));
    }
    let mut holds = holds.to_vec();
    holds.sort_by(|a, b| (&a.meter, a.window_start_ms).cmp(&(&b.meter, b.window_start_ms)));
    let column = |field: fn(&Hold) -> i64| holds.iter().map(field).collect::<Vec<i64>>();
    let booked: Vec<(String, i64)> = sqlx::query_as(sql::BOOK_HOLDS_PG)
        .bind(holds.iter().map(|hold| hold.meter.clone()).collect::<Vec<String>>())
        .bind(column(|hold| hold.window_start_ms))
        .bind(column(|hold| hold.window_end_ms))
        .bind(column(|hold| hold.amount))
        .bind(column(|hold| hold.limit))
        .bind(holds.iter().map(|hold| hold.kind.unit()).collect::<Vec<&str>>())
        .bind(attempt_id)
        .persistent(named)
        .fetch_all(&mut *tx)
        .await?;
    if booked.len() == holds.len() {
        return Ok(None);
    }
    // The statement names the meters it booked; the refusal is one it did
    // not, read as it stands (unchanged by this statement). A meter is
    // never judged by subtracting an amount that may not have been added.
    let was_booked = |hold: &Hold| {
        booked.iter().any(|(meter, start)| *meter == hold.meter && *start == hold.window_start_ms)
    };
    for hold in holds.iter().filter(|hold| !was_booked(hold)) {
        let (used, held): (i64, i64) = sqlx::query_as(sql::SELECT_METER)
            .bind(&hold.meter)
            .bind(hold.window_start_ms)
            .persistent(named)
            .fetch_optional(&mut *tx)
            .await?
            .unwrap_or((0, 0));
        if !hold.fits(used, held) {
            return Ok(Some(hold.refusal(used, held)));
        }
    }
    // Unreachable unless a meter changed between the booking and the read
    // (the booking locked it): name the first unbooked hold all the same.
    let unbooked = holds.iter().find(|hold| !was_booked(hold)).unwrap_or(&holds[0]);
    Ok(Some(unbooked.refusal(unbooked.limit, 0)))
}

impl Store {
    /// A meter's `(used, held)` in one window; `(0, 0)` if nothing counted yet.
    pub async fn meter(&self, meter: &str, window_start_ms: i64) -> Result<MeterReading, StoreError> {
        let args = vec![meter.into(), window_start_ms.into()];
        let reading = self
            .read_optional(sql::SELECT_METER, args, |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)))
            .await?;
        Ok(reading.unwrap_or((0, 0)))
    }
}

/// The charges of settled attempts that settled in `[$1, $2)`, summed by
/// day and attribution (`$3`: one owner's only, `$4` one team's; NULL:
/// everyone's).
const SELECT_SPEND: &str = "SELECT a.finished_at / 86400000 AS day, j.owner_id, j.key_id, j.team, j.tags, \
     j.route, a.provider, CAST(SUM(a.cost_nanos) AS BIGINT) AS nanos, CAST(SUM(a.tokens) AS BIGINT) AS tokens, \
     COUNT(*) AS attempts FROM attempts a JOIN jobs j ON j.id = a.job_id \
     WHERE a.cost_nanos IS NOT NULL AND a.finished_at >= $1 AND a.finished_at < $2 \
     AND (CAST($3 AS TEXT) IS NULL OR j.owner_id = CAST($3 AS TEXT)) \
     AND (CAST($4 AS TEXT) IS NULL OR j.team = CAST($4 AS TEXT)) \
     GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 2";

#[derive(Debug, sqlx::FromRow)]
struct SpendRow {
    day: i64,
    owner_id: String,
    key_id: Option<Uuid>,
    team: Option<String>,
    tags: Option<String>,
    route: String,
    provider: String,
    nanos: i64,
    tokens: i64,
    attempts: i64,
}

impl SpendRow {
    fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<SpendRow> {
        Ok(SpendRow {
            day: row.get(0)?,
            owner_id: row.get(1)?,
            key_id: row.get(2)?,
            team: row.get(3)?,
            tags: row.get(4)?,
            route: row.get(5)?,
            provider: row.get(6)?,
            nanos: row.get(7)?,
            tokens: row.get(8)?,
            attempts: row.get(9)?,
        })
    }
}

impl Store {
    /// What attempts settled in `[from_ms, to_ms)` were charged, by day and
    /// attribution; only `owner`'s and `team`'s when given.
    pub async fn spend(
        &self,
        from_ms: i64,
        to_ms: i64,
        owner: Option<&str>,
        team: Option<&str>,
    ) -> Result<Vec<crate::budgets::report::SpendRecord>, StoreError> {
        let args = vec![from_ms.into(), to_ms.into(), owner.into(), team.into()];
        let rows = self.read_all(SELECT_SPEND, args, SpendRow::from_sqlite).await?;
        rows.into_iter()
            .map(|row| {
                Ok(crate::budgets::report::SpendRecord {
                    day: row.day,
                    owner: row.owner_id,
                    key_id: row.key_id,
                    team: row.team,
                    tags: crate::jobs::Tags::from_stored(row.tags.as_deref())
                        .map_err(|err| StoreError::Corrupt(format!("a job's tags: {err}")))?,
                    route: row.route,
                    provider: row.provider,
                    nanos: row.nanos,
                    tokens: row.tokens,
                    attempts: row.attempts,
                })
            })
            .collect()
    }
}
