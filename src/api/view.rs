//! The JSON shape of a job as the API returns it.

use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::jobs::{Attempt, AttemptOutcome, AttemptState, Job, JobStatus, rfc3339};

/// The response header naming the job a response is about: on OpenAI
/// answers (whose body has no job id), and on a problem met after the job
/// was stored.
pub const JOB_ID_HEADER: &str = "x-intentgate-job-id";

/// A job and its attempts, as `POST /v1/jobs`, `GET /v1/jobs/{id}` and the
/// attempt calls answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobView<'a> {
    pub id: Uuid,
    pub owner: &'a str,
    pub idempotency_key: &'a str,
    pub route: &'a str,
    pub status: JobStatus,
    pub version: i64,
    /// The request as stored (canonical form), embedded without re-parsing.
    #[schema(value_type = Option<crate::jobs::JobRequest>)]
    pub request: Option<&'a RawValue>,
    /// The winning attempt's normalised answer, once the job succeeded.
    #[schema(value_type = Option<Object>)]
    pub result: Option<&'a RawValue>,
    /// Why the job failed: every attempt's reason.
    #[schema(value_type = Option<Object>)]
    pub error: Option<&'a RawValue>,
    pub completed_by: Option<Uuid>,
    pub created_at: String,
    pub updated_at: String,
    pub attempts: Vec<AttemptView<'a>>,
}

/// One attempt of a job, on one provider.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptView<'a> {
    pub id: Uuid,
    pub number: i32,
    pub provider: &'a str,
    pub state: AttemptState,
    pub job_version: i64,
    pub outcome: Option<AttemptOutcome>,
    pub detail: Option<&'a str>,
    pub resolved_by: Option<&'a str>,
    pub started_at: String,
    pub finished_at: Option<String>,
}

impl<'a> JobView<'a> {
    pub fn new(job: &'a Job, attempts: &'a [Attempt]) -> Self {
        JobView {
            id: job.id,
            owner: &job.owner,
            idempotency_key: &job.idempotency_key,
            route: &job.route,
            status: job.status,
            version: job.version,
            request: raw_json(Some(&job.request)),
            result: raw_json(job.result.as_deref()),
            error: raw_json(job.error.as_deref()),
            completed_by: job.completed_by,
            created_at: rfc3339(job.created_at_ms),
            updated_at: rfc3339(job.updated_at_ms),
            attempts: attempts.iter().map(AttemptView::new).collect(),
        }
    }
}

impl<'a> AttemptView<'a> {
    pub fn new(attempt: &'a Attempt) -> Self {
        AttemptView {
            id: attempt.id,
            number: attempt.number,
            provider: &attempt.provider,
            state: attempt.state,
            job_version: attempt.job_version,
            outcome: attempt.outcome,
            detail: attempt.detail.as_deref(),
            resolved_by: attempt.resolved_by.as_deref(),
            started_at: rfc3339(attempt.started_at_ms),
            finished_at: attempt.finished_at_ms.map(rfc3339),
        }
    }
}

/// Stored JSON text, embedded as-is. Text that is not JSON (which the
/// writers never produce) is left out rather than failing the response.
fn raw_json(text: Option<&str>) -> Option<&RawValue> {
    text.and_then(|t| serde_json::from_str(t).ok())
}
