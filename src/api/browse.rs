//! Reading many jobs at once: a filtered page of jobs (newest first,
//! paginated on the server), the counts that need attention, and per-minute
//! activity. What the operator console's Jobs and Overview pages show, and
//! any API client may call. A user sees their own jobs, an admin every
//! owner's: the scope is the store query's, as for `GET /v1/jobs/{id}`.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use std::collections::BTreeMap;

use super::extract::QueryParams;
use super::{AppState, Caller, Problem, ProblemType, StoreStage};
use crate::jobs::{AttemptOutcome, JobStatus, now_ms, rfc3339};
use crate::store::{JobQuery, JobSummary, MinuteCount};

/// Page size when `limit` is not given, and the largest one allowed.
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 200;

/// Query of `GET /v1/jobs/search`. Empty values are "any", as an HTML form
/// sends them.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct Search {
    /// One job status.
    status: Option<String>,
    /// Jobs of this owner (admins; a user may only name themself).
    owner: Option<String>,
    /// Jobs of this route.
    route: Option<String>,
    /// Jobs with an attempt on this provider.
    provider: Option<String>,
    /// The job this Idempotency-Key created (of the owner(s) in scope).
    idempotency_key: Option<String>,
    /// Created at or after this RFC 3339 time.
    created_after: Option<String>,
    /// Created before this RFC 3339 time.
    created_before: Option<String>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Jobs per page, 1–200 (default 50).
    limit: Option<i64>,
}

/// A page of jobs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobPage {
    pub jobs: Vec<JobSummaryView>,
    /// Pass as `cursor` for the next (older) page; absent on the last page.
    pub next_cursor: Option<Uuid>,
}

/// One job of a page, without its request and result.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobSummaryView {
    pub id: Uuid,
    pub owner: String,
    pub idempotency_key: String,
    pub route: String,
    pub status: String,
    pub version: i64,
    pub attempts: i64,
    /// The provider of the latest attempt.
    pub last_provider: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl From<JobSummary> for JobSummaryView {
    fn from(job: JobSummary) -> Self {
        JobSummaryView {
            id: job.id,
            owner: job.owner_id,
            idempotency_key: job.idempotency_key,
            route: job.route,
            status: job.status,
            version: job.version,
            attempts: job.attempt_count,
            last_provider: job.last_provider,
            created_at: rfc3339(job.created_at),
            updated_at: rfc3339(job.updated_at),
        }
    }
}

/// `GET /v1/jobs/search`: keyset pagination on the UUIDv7 id (newest
/// first), so a page never shifts when new jobs arrive meanwhile.
#[utoipa::path(
    get,
    path = "/v1/jobs/search",
    tag = "jobs",
    operation_id = "search_jobs",
    summary = "A page of jobs, newest first, under filters",
    description = "Keyset pagination on the job id (UUIDv7, so newest first): pass `next_cursor` as \
        `cursor` for the next page. A user sees their own jobs; an admin every owner's, or one owner's \
        with `owner`.",
    security(("bearer" = [])),
    params(Search),
    responses(
        (status = 200, description = "The page", body = JobPage),
        (status = 400, description = "`malformed-request`: an unknown status, a time that is not RFC 3339, \
            a bad cursor or limit; `idempotency-key-invalid`",
            body = Problem, content_type = "application/problem+json"),
        (status = 401, response = super::problem::Unauthorized),
        (status = 403, description = "`forbidden`: a user naming another owner",
            body = Problem, content_type = "application/problem+json"),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(search): QueryParams<Search>,
) -> Result<Json<JobPage>, Problem> {
    let query = job_query(&caller, search)?;
    let limit = query.limit;
    // One more than asked says whether another page follows.
    let mut rows = state
        .store
        .job_page(&JobQuery { limit: limit + 1, ..query })
        .await
        .map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    let more = i64::try_from(rows.len()).unwrap_or(i64::MAX) > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(0));
    let next_cursor = if more { rows.last().map(|job| job.id) } else { None };
    Ok(Json(JobPage { jobs: rows.into_iter().map(JobSummaryView::from).collect(), next_cursor }))
}

/// The store query for `search`, every parameter checked: a bad one is a
/// problem naming it, never silently "any".
fn job_query(caller: &Caller, search: Search) -> Result<JobQuery, Problem> {
    let given = |value: Option<String>| value.filter(|v| !v.trim().is_empty());
    let bad = |detail: String| Problem::new(ProblemType::MalformedRequest, detail);
    let status = given(search.status)
        .map(|status| {
            status.parse::<JobStatus>().map_err(|_| {
                let all: Vec<_> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
                bad(format!("`status` must be one of {}, not `{status}`", all.join(", ")))
            })
        })
        .transpose()?;
    let principal = &caller.0;
    let owner = match given(search.owner) {
        Some(owner) if principal.is_admin() || owner == principal.owner => Some(owner),
        Some(_) => {
            return Err(Problem::new(ProblemType::Forbidden, "only an admin can list another owner's jobs"));
        }
        None if principal.is_admin() => None,
        None => Some(principal.owner.clone()),
    };
    let idempotency_key = given(search.idempotency_key)
        .map(|key| {
            crate::jobs::IdempotencyKey::parse(&key)
                .map(|key| key.as_str().to_owned())
                .map_err(|err| Problem::new(ProblemType::IdempotencyKeyInvalid, err.to_string()))
        })
        .transpose()?;
    let time = |name: &str, value: Option<String>| -> Result<Option<i64>, Problem> {
        given(value)
            .map(|text| {
                chrono::DateTime::parse_from_rfc3339(text.trim()).map(|t| t.timestamp_millis()).map_err(
                    |_| {
                        bad(format!(
                            "`{name}` must be an RFC 3339 time such as 2026-11-30T13:00:00Z, not `{text}`"
                        ))
                    },
                )
            })
            .transpose()
    };
    let created_from_ms = time("created_after", search.created_after)?;
    let created_until_ms = time("created_before", search.created_before)?;
    if let (Some(from), Some(until)) = (created_from_ms, created_until_ms)
        && from >= until
    {
        return Err(bad("`created_after` must be earlier than `created_before`".into()));
    }
    let before = given(search.cursor)
        .map(|cursor| {
            Uuid::parse_str(cursor.trim()).map_err(|_| {
                bad(format!("`cursor` must be a `next_cursor` of an earlier page, not `{cursor}`"))
            })
        })
        .transpose()?;
    let limit = search.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(bad(format!("`limit` must be between 1 and {MAX_LIMIT}, not {limit}")));
    }
    for (name, value) in [("route", &search.route), ("provider", &search.provider)] {
        if let Some(value) = value {
            super::text::refuse_nul(name, value)?;
        }
    }
    Ok(JobQuery {
        owner,
        status,
        route: given(search.route),
        provider: given(search.provider),
        idempotency_key,
        created_from_ms,
        created_until_ms,
        before,
        limit,
    })
}

/// What needs attention now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobCounts {
    /// Jobs `running`.
    pub running: i64,
    /// Jobs `unknown`: each waits on an attempt someone must settle.
    pub unknown: i64,
}

/// `GET /v1/jobs/counts`: cheap enough to poll.
#[utoipa::path(
    get,
    path = "/v1/jobs/counts",
    tag = "jobs",
    operation_id = "job_counts",
    summary = "How many jobs are running and unknown",
    description = "The caller's jobs; an admin's counts cover every owner. Cheap enough to poll.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The counts", body = JobCounts),
        (status = 401, response = super::problem::Unauthorized),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn counts(State(state): State<AppState>, caller: Caller) -> Result<Json<JobCounts>, Problem> {
    let (running, unknown) = state
        .store
        .attention_counts(scope(&caller))
        .await
        .map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    Ok(Json(JobCounts { running, unknown }))
}

/// The owner a caller's reads are scoped to: `None` (every owner) for an admin.
pub(super) fn scope(caller: &Caller) -> Option<&str> {
    (!caller.0.is_admin()).then_some(caller.0.owner.as_str())
}

/// The last hour, minute by minute.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Overview {
    /// The start of each minute, oldest first (60 of them, the last one now).
    pub minutes: Vec<String>,
    /// Jobs created in each minute, by their status now.
    #[schema(value_type = Object)]
    pub jobs: BTreeMap<String, Vec<i64>>,
    /// Attempts started in each minute, by outcome class (`open` while
    /// they have none).
    #[schema(value_type = Object)]
    pub attempts: BTreeMap<String, Vec<i64>>,
}

/// Minutes in the overview.
const MINUTES: i64 = 60;

/// `GET /v1/overview`.
#[utoipa::path(
    get,
    path = "/v1/overview",
    tag = "operations",
    operation_id = "overview",
    summary = "Jobs per minute by status and attempts by outcome, over the last hour",
    description = "Each series has one number per minute, oldest first; every status and outcome class \
        is present, zero or not. A user's overview counts their own jobs; an admin's every owner's.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The last hour", body = Overview),
        (status = 401, response = super::problem::Unauthorized),
        (status = 500, response = super::problem::Internal),
        (status = 503, response = super::problem::StoreUnavailable),
    )
)]
pub async fn overview(State(state): State<AppState>, caller: Caller) -> Result<Json<Overview>, Problem> {
    let this_minute = now_ms() / 60_000;
    let first = this_minute - (MINUTES - 1);
    let (jobs, attempts) = state
        .store
        .activity_since(first * 60_000, scope(&caller))
        .await
        .map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    let statuses = JobStatus::ALL.iter().map(|s| s.as_str());
    let outcomes = AttemptOutcome::ALL.iter().map(|o| o.as_str()).chain(["open"]);
    Ok(Json(Overview {
        minutes: (first..=this_minute).map(|minute| rfc3339(minute * 60_000)).collect(),
        jobs: series(statuses, &jobs, first),
        attempts: series(outcomes, &attempts, first),
    }))
}

/// One zero-filled series per label, counts placed at their minute.
fn series<'a>(
    labels: impl Iterator<Item = &'a str>,
    counts: &[MinuteCount],
    first: i64,
) -> BTreeMap<String, Vec<i64>> {
    let mut out: BTreeMap<String, Vec<i64>> =
        labels.map(|label| (label.to_owned(), vec![0; MINUTES as usize])).collect();
    for count in counts {
        let Ok(index) = usize::try_from(count.minute - first) else { continue };
        if let Some(slot) = out.get_mut(&count.label).and_then(|series| series.get_mut(index)) {
            *slot += count.count;
        }
    }
    out
}

/// The principal behind the caller's key.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WhoAmI {
    pub name: String,
    /// The owner their jobs belong to.
    pub owner: String,
    /// `admin` (sees every owner's jobs, settles attempts), `team_admin`
    /// (manages its team's keys) or `user`.
    pub role: &'static str,
}

/// `GET /v1/whoami`: lets a client (the console's sign-in) check a key and
/// learn what it may do, without reading any job.
#[utoipa::path(
    get,
    path = "/v1/whoami",
    tag = "operations",
    operation_id = "whoami",
    summary = "Who the API key belongs to",
    description = "The principal's name, the owner its jobs belong to, and its role.",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The principal", body = WhoAmI),
        (status = 401, response = super::problem::Unauthorized),
    )
)]
pub async fn whoami(caller: Caller) -> Json<WhoAmI> {
    let principal = caller.0;
    Json(WhoAmI { name: principal.name, owner: principal.owner, role: principal.role.as_str() })
}
