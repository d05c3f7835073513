//! The JSON shape of a job as the API returns it.

use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::budgets::{TokenUsage, nanos_to_decimal};
use crate::jobs::{Attempt, AttemptOutcome, AttemptState, Entrance, Job, JobStatus, rfc3339};

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
    /// The door its request came through (`jobs`, `chat-completions`,
    /// `responses`, `messages`, `embeddings`); absent for a job made before
    /// doors were recorded. Not part of the intent: the first door is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entered_through: Option<Entrance>,
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
    /// The stored key that created it (none for a config principal).
    pub key_id: Option<Uuid>,
    /// The team its spend also counts against.
    pub team: Option<&'a str>,
    /// The tags its request carried (`Intentgate-Tags`).
    #[schema(value_type = Vec<String>)]
    pub tags: &'a crate::jobs::Tags,
    pub executions: Executions,
    pub attempts: Vec<AttemptView<'a>>,
}

/// How many times the job's intent ran, as far as the gateway knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Executions {
    /// Attempts whose answer came (`succeeded`, `superseded`): more than
    /// one means the intent ran twice, and was paid for twice.
    pub answered: usize,
    /// Attempts that may have run without an answer coming back
    /// (`unknown`, `abandoned`): beside an answered one, the intent may
    /// have run twice.
    pub may_have_run: usize,
}

impl Executions {
    fn of(attempts: &[Attempt]) -> Executions {
        let count = |states: &[AttemptState]| attempts.iter().filter(|a| states.contains(&a.state)).count();
        Executions {
            answered: count(&[AttemptState::Succeeded, AttemptState::Superseded]),
            may_have_run: count(&[AttemptState::Unknown, AttemptState::Abandoned]),
        }
    }
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
    /// When its request was handed to the provider (marked, and committed,
    /// just before); null while it was not, if it never was, or if the
    /// release that sent it did not record it.
    pub sent_at: Option<String>,
    /// When it became `unknown` (the gateway stopped knowing whether it
    /// ran), if it ever did; `finished_at` is then when that was settled.
    pub unknown_at: Option<String>,
    pub finished_at: Option<String>,
    pub usage: AttemptUsage<'a>,
    /// It started while another attempt of the job was still open: a
    /// route's hedge sent it beside a silent one, so the intent may have
    /// run twice (the later answer, if any, is `superseded`, and charged).
    /// Shown in a job's view; `false` where an attempt is shown alone, and
    /// for one that `continues` a cut stream.
    pub hedged: bool,
    /// The attempt whose stream, cut after part of it reached the client,
    /// this one continued (a route's `continue_cut_streams`): a second
    /// execution the route accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continues: Option<i32>,
    /// The job's lane it held while open (1 unless hedged; see
    /// `attempts_one_open_per_lane` in the schema).
    pub lane: i32,
}

/// What an attempt used and cost, in `[billing] currency` (and exactly,
/// in nano-units).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AttemptUsage<'a> {
    /// The provider's own `usage` object, when it reported one.
    #[schema(value_type = Option<Object>)]
    pub reported: Option<&'a RawValue>,
    /// `reported` read the way it is priced; `null` when it does not say
    /// how many tokens went in and out.
    pub counted: Option<CountedTokens>,
    /// What it was charged once settled (`null` while open): what it
    /// reported, priced; nothing if it provably did no work; its
    /// reservation if it may have been billed without saying how much.
    pub cost: Option<f64>,
    pub cost_nanos: Option<i64>,
    /// Tokens charged to tokens-per-minute limits.
    pub tokens: Option<i64>,
    /// Its worst case, reserved before it was sent.
    pub reserved: f64,
    pub reserved_nanos: i64,
    pub reserved_tokens: i64,
}

/// An attempt's tokens by the rate each is priced at (`[providers.price]`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CountedTokens {
    /// Every prompt token, cached ones included.
    pub input: u64,
    /// Of `input`, those read from the provider's cache.
    pub cached_input: u64,
    /// Of `input`, those written to the provider's cache.
    pub cache_write: u64,
    /// Every completion token, reasoning included.
    pub output: u64,
    /// Of `output`, those spent reasoning.
    pub reasoning: u64,
}

impl From<TokenUsage> for CountedTokens {
    fn from(usage: TokenUsage) -> Self {
        CountedTokens {
            input: usage.prompt_tokens,
            cached_input: usage.cached_tokens,
            cache_write: usage.cache_write_tokens,
            output: usage.completion_tokens,
            reasoning: usage.reasoning_tokens,
        }
    }
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
            key_id: job.attribution.key_id,
            team: job.attribution.team.as_deref(),
            tags: &job.attribution.tags,
            entered_through: job.entered_through,
            executions: Executions::of(attempts),
            attempts: attempts
                .iter()
                .map(|attempt| AttemptView {
                    hedged: attempt.continues.is_none() && started_beside(attempt, attempts),
                    ..AttemptView::new(attempt)
                })
                .collect(),
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
            sent_at: attempt.sent.at_ms().map(rfc3339),
            unknown_at: attempt.unknown_at_ms.map(rfc3339),
            finished_at: attempt.finished_at_ms.map(rfc3339),
            hedged: false,
            continues: attempt.continues,
            lane: attempt.lane,
            usage: AttemptUsage {
                reported: raw_json(attempt.usage.as_deref()),
                counted: counted_tokens(attempt.usage.as_deref()),
                cost: attempt.charged.map(|c| nanos_to_decimal(c.nanos)),
                cost_nanos: attempt.charged.map(|c| c.nanos),
                tokens: attempt.charged.map(|c| c.tokens),
                reserved: nanos_to_decimal(attempt.reserved.nanos),
                reserved_nanos: attempt.reserved.nanos,
                reserved_tokens: attempt.reserved.tokens,
            },
        }
    }
}

/// Whether `attempt` started while an earlier attempt of its job was open.
fn started_beside(attempt: &Attempt, attempts: &[Attempt]) -> bool {
    attempts.iter().any(|earlier| {
        earlier.number < attempt.number
            && earlier.finished_at_ms.is_none_or(|done| done > attempt.started_at_ms)
    })
}

/// The stored usage object's token counts, when it has them.
fn counted_tokens(usage: Option<&str>) -> Option<CountedTokens> {
    let usage: serde_json::Value = serde_json::from_str(usage?).ok()?;
    TokenUsage::from_openai(&usage).map(CountedTokens::from)
}

/// Stored JSON text, embedded as-is. Text that is not JSON (which the
/// writers never produce) is left out rather than failing the response.
fn raw_json(text: Option<&str>) -> Option<&RawValue> {
    text.and_then(|t| serde_json::from_str(t).ok())
}
