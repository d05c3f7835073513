//! Recording contract runs: where a suite's run against a provider (from
//! `contracts`, which touches no storage) becomes a record in the store,
//! which the eligibility gate reads. What `intentgate contract run` and
//! `[contracts] run_on_start` do.

use uuid::Uuid;

use crate::config::ProviderConfig;
use crate::contracts::{Progress, RunError, Suite, SuiteReport, run_pair};
use crate::store::{CaseRecord, ContractRecord, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Runs one suite against one provider and records the result.
pub async fn run_and_record(
    store: &Store,
    suite: &Suite,
    provider_config: &ProviderConfig,
    on_progress: &mut dyn FnMut(Progress),
) -> Result<SuiteReport, RecordError> {
    let run = run_pair(suite, provider_config, on_progress).await?;
    let report = run.report;
    let record = ContractRecord {
        id: Uuid::now_v7(),
        route: report.route.clone(),
        provider: report.provider.clone(),
        suite_fingerprint: run.suite_fingerprint,
        provider_fingerprint: run.provider_fingerprint,
        passed: report.passed,
        started_at: run.started_at,
        finished_at: run.finished_at,
        report: serde_json::to_string(&report).unwrap_or_default(),
    };
    let cases: Vec<CaseRecord<'_>> = report
        .cases
        .iter()
        .map(|case| CaseRecord {
            case_name: &case.case,
            passed: case.passed,
            reasons: serde_json::to_string(&case.reasons).unwrap_or_default(),
            duration_ms: i64::try_from(case.duration_ms).unwrap_or(i64::MAX),
            round_trips: i32::try_from(case.repeats).unwrap_or(i32::MAX),
        })
        .collect();
    store.record_contract_run(&record, &cases).await?;
    Ok(report)
}
