//! Recorded contract runs (R9): what the failover gate consults.

use uuid::Uuid;

use super::sqlite_statements::execute;
use super::{Store, StoreError};

/// The latest run of one route's suite against one provider.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ContractRecord {
    pub id: Uuid,
    pub route: String,
    pub provider: String,
    pub suite_fingerprint: String,
    pub provider_fingerprint: String,
    pub passed: bool,
    pub started_at: i64,
    pub finished_at: i64,
    /// The run's report as JSON.
    pub report: String,
}

/// One case of a run, as recorded.
#[derive(Debug, Clone)]
pub struct CaseRecord<'a> {
    pub case_name: &'a str,
    pub passed: bool,
    /// JSON list of reasons.
    pub reasons: String,
    pub duration_ms: i64,
    pub round_trips: i32,
}

const INSERT_RUN: &str = "INSERT INTO contract_runs (id, route, provider, suite_fingerprint, provider_fingerprint, \
     passed, started_at, finished_at, report) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

const INSERT_CASE: &str = "INSERT INTO contract_case_results (run_id, case_name, passed, reasons, duration_ms, \
     round_trips) VALUES ($1, $2, $3, $4, $5, $6)";

/// The latest run of each (route, provider, provider fingerprint): a run is
/// evidence about one fingerprint, so a replica whose provider differs (its
/// own simulator, another base URL) adds its own record beside the others'
/// instead of replacing them.
const LATEST_RUNS: &str = "SELECT id, route, provider, suite_fingerprint, provider_fingerprint, passed, started_at, \
     finished_at, report FROM contract_runs r WHERE finished_at = (SELECT MAX(finished_at) FROM contract_runs \
     WHERE route = r.route AND provider = r.provider AND provider_fingerprint = r.provider_fingerprint) \
     ORDER BY route, provider, finished_at";

impl Store {
    /// Records one run and its cases in one transaction.
    pub async fn record_contract_run(
        &self,
        run: &ContractRecord,
        cases: &[CaseRecord<'_>],
    ) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(store) => {
                let run = run.clone();
                let cases: Vec<OwnedCase> = cases.iter().map(OwnedCase::from).collect();
                store
                    .writer
                    .write(move |conn| {
                        execute(
                            conn,
                            INSERT_RUN,
                            &[
                                &run.id,
                                &run.route,
                                &run.provider,
                                &run.suite_fingerprint,
                                &run.provider_fingerprint,
                                &run.passed,
                                &run.started_at,
                                &run.finished_at,
                                &run.report,
                            ],
                        )?;
                        for case in &cases {
                            execute(
                                conn,
                                INSERT_CASE,
                                &[
                                    &run.id,
                                    &case.case_name,
                                    &case.passed,
                                    &case.reasons,
                                    &case.duration_ms,
                                    &case.round_trips,
                                ],
                            )?;
                        }
                        Ok(())
                    })
                    .await
            }
            Store::Postgres(store) => {
                let mut tx = super::pg_statements::begin(&store.pool).await?;
                sqlx::query(INSERT_RUN)
                    .bind(run.id)
                    .bind(&run.route)
                    .bind(&run.provider)
                    .bind(&run.suite_fingerprint)
                    .bind(&run.provider_fingerprint)
                    .bind(run.passed)
                    .bind(run.started_at)
                    .bind(run.finished_at)
                    .bind(&run.report)
                    .persistent(store.named())
                    .execute(&mut *tx)
                    .await?;
                for case in cases {
                    sqlx::query(INSERT_CASE)
                        .bind(run.id)
                        .bind(case.case_name)
                        .bind(case.passed)
                        .bind(&case.reasons)
                        .bind(case.duration_ms)
                        .bind(case.round_trips)
                        .persistent(store.named())
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(())
            }
        }
    }

    /// The latest run of every (route, provider, provider fingerprint) ever
    /// run, oldest first within a pair.
    pub async fn latest_contract_runs(&self) -> Result<Vec<ContractRecord>, StoreError> {
        let rows = self.read_all(LATEST_RUNS, vec![], ContractRecord::from_sqlite).await?;
        Ok(rows)
    }
}

/// A [`CaseRecord`] the SQLite writer's thread can own.
struct OwnedCase {
    case_name: String,
    passed: bool,
    reasons: String,
    duration_ms: i64,
    round_trips: i32,
}

impl From<&CaseRecord<'_>> for OwnedCase {
    fn from(case: &CaseRecord<'_>) -> Self {
        OwnedCase {
            case_name: case.case_name.to_owned(),
            passed: case.passed,
            reasons: case.reasons.clone(),
            duration_ms: case.duration_ms,
            round_trips: case.round_trips,
        }
    }
}

impl ContractRecord {
    fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<ContractRecord> {
        Ok(ContractRecord {
            id: row.get(0)?,
            route: row.get(1)?,
            provider: row.get(2)?,
            suite_fingerprint: row.get(3)?,
            provider_fingerprint: row.get(4)?,
            passed: row.get(5)?,
            started_at: row.get(6)?,
            finished_at: row.get(7)?,
            report: row.get(8)?,
        })
    }
}
