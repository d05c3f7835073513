//! `intentgate jobs …`: find and settle jobs straight from the configured
//! database. Settling goes through the same engine code as the HTTP admin
//! calls; a job let go on here is driven by a serving instance's next sweep.

use std::process::ExitCode;

use uuid::Uuid;

use super::contract::print_table;
use super::terminal::printable;
use crate::config::Config;
use crate::engine::{Engine, Resolution};
use crate::jobs::{Attempt, AttemptState, JobStatus, rfc3339};
use crate::store::{JobFilter, Store};

pub async fn list(store: &Store, filter: JobFilter) -> Result<(), String> {
    let jobs = store.list_jobs(&filter).await.map_err(|e| e.to_string())?;
    let rows: Vec<[String; 6]> = jobs
        .iter()
        .map(|job| {
            [
                job.id.to_string(),
                job.owner.clone(),
                job.route.clone(),
                job.status.to_string(),
                job.idempotency_key.clone(),
                rfc3339(job.created_at_ms),
            ]
        })
        .collect();
    print_table(&["ID", "OWNER", "ROUTE", "STATUS", "IDEMPOTENCY KEY", "CREATED"], &rows);
    Ok(())
}

/// The job and its attempt timeline: who ran, how it ended, who won, what
/// was superseded, who resolved what.
pub async fn show(store: &Store, id: &str) -> Result<(), String> {
    let id = Uuid::parse_str(id).map_err(|_| format!("`{id}` is not a job id"))?;
    let job = store.job(id).await.map_err(|e| e.to_string())?.ok_or_else(|| format!("no job {id}"))?;
    let attempts = store.attempts(id).await.map_err(|e| e.to_string())?;
    println!("job      {}", job.id);
    println!("owner    {}   key {}", printable(&job.owner), printable(job.idempotency_key.as_str()));
    println!("route    {}", printable(&job.route));
    println!("status   {}   version {}", job.status, job.version);
    println!("created  {}   updated {}", rfc3339(job.created_at_ms), rfc3339(job.updated_at_ms));
    if let Some(error) = &job.error {
        println!("error    {}", printable(&error.to_string()));
    }
    println!();
    let rows: Vec<[String; 7]> = attempts
        .iter()
        .map(|attempt| {
            [
                attempt.number.to_string(),
                attempt.provider.clone(),
                attempt.state.to_string(),
                attempt.outcome.map(|o| o.as_str().to_owned()).unwrap_or_default(),
                rfc3339(attempt.started_at_ms),
                attempt
                    .finished_at_ms
                    .map(|end| format!("{} ms", end - attempt.started_at_ms))
                    .unwrap_or("open".into()),
                note(&job.completed_by, attempt),
            ]
        })
        .collect();
    print_table(&["#", "PROVIDER", "STATE", "OUTCOME", "STARTED", "DURATION", "NOTE"], &rows);
    for attempt in attempts.iter().filter(|a| a.detail.is_some()) {
        println!("  #{}: {}", attempt.number, printable(attempt.detail.as_deref().unwrap_or_default()));
    }
    Ok(())
}

fn note(winner: &Option<Uuid>, attempt: &Attempt) -> String {
    match attempt.state {
        _ if *winner == Some(attempt.id) => "won: its answer is the job's result".into(),
        AttemptState::Superseded => "lost the race: answer kept for audit only".into(),
        AttemptState::Unknown => "may have done the work: settle it (jobs resolve)".into(),
        AttemptState::Abandoned | AttemptState::Failed if attempt.resolved_by.is_some() => {
            format!("resolved by {}", attempt.resolved_by.as_deref().unwrap_or_default())
        }
        _ => String::new(),
    }
}

pub async fn resolve(
    config: &Config,
    store: Store,
    id: &str,
    number: i32,
    resolution: Resolution,
    reason: &str,
) -> Result<(), String> {
    let id = Uuid::parse_str(id).map_err(|_| format!("`{id}` is not a job id"))?;
    let engine = Engine::operator(config, store).map_err(|e| e.to_string())?;
    let attempt =
        engine.resolve(id, number, resolution, reason, &operator()).await.map_err(|e| e.to_string())?;
    println!(
        "attempt {} of job {id} is now {}; a serving gateway goes on with the job's chain",
        attempt.number, attempt.state
    );
    Ok(())
}

pub async fn resolve_provider(
    config: &Config,
    store: Store,
    provider: &str,
    resolution: Resolution,
    reason: &str,
) -> Result<(), String> {
    let engine = Engine::operator(config, store).map_err(|e| e.to_string())?;
    let settled = engine
        .resolve_provider(provider, resolution, reason, &operator())
        .await
        .map_err(|e| e.to_string())?;
    for attempt in &settled {
        println!("job {} attempt {}: {}", attempt.job_id, attempt.number, attempt.state);
    }
    println!("{} unknown attempt(s) of `{}` settled", settled.len(), printable(provider));
    Ok(())
}

/// Who resolved it, as recorded on the attempt.
fn operator() -> String {
    format!("cli:{}", std::env::var("USER").unwrap_or_else(|_| "operator".into()))
}

pub fn parse_status(value: &str) -> Result<JobStatus, String> {
    value.parse().map_err(|e: crate::jobs::UnknownState| e.to_string())
}

pub fn exit(result: Result<(), String>) -> ExitCode {
    super::contract::exit(result.map(|()| true))
}
