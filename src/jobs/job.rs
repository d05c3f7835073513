use serde::{Deserialize as _, Serialize};
use uuid::Uuid;

use super::{Attribution, Entrance, Fingerprint, IdempotencyKey, JobRequest, Payer, UnknownState};

/// Lifecycle of a job (`docs/design.md`, "State machines": "Job").
///
/// `unknown` is not terminal for the job: it means the job is blocked on an
/// attempt whose outcome is not known, and a late answer can still make it
/// `succeeded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
    Cancelled,
}

impl JobStatus {
    pub const ALL: [JobStatus; 6] = [
        JobStatus::Pending,
        JobStatus::Running,
        JobStatus::Succeeded,
        JobStatus::Failed,
        JobStatus::Unknown,
        JobStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "pending",
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Unknown => "unknown",
            JobStatus::Cancelled => "cancelled",
        }
    }

    /// Terminal states never change again.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Succeeded | JobStatus::Failed | JobStatus::Cancelled)
    }
}

impl std::str::FromStr for JobStatus {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UnknownState::parse("job", &JobStatus::ALL, JobStatus::as_str, s)
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a caller asked for, before it is stored. The owner comes from the
/// authenticated principal, never from the request body.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: Uuid,
    pub owner: String,
    pub idempotency_key: IdempotencyKey,
    pub fingerprint: Fingerprint,
    /// The request, parsed once at the door.
    pub request: JobRequest,
    /// The request body in its canonical (RFC 8785) form: what is stored,
    /// and what a driver that picks the job up reads back.
    pub canonical: String,
    /// Its key, team and tags: not part of the intent.
    pub attribution: Attribution,
    /// The door it came through: not part of the intent either.
    pub entered_through: Entrance,
}

impl NewJob {
    /// The job of `request`, parsed and checked at its door. The fingerprint
    /// is taken of the intent alone: the request without the fields that say
    /// how the answer is delivered ([`JobRequest::DELIVERY_PARAMS`]), so a
    /// streamed request and its plain retry are one intent, while the stored
    /// form keeps them, for the driver to stream as the first request asked.
    /// Both are written from the typed request, as RFC 8785 canonical JSON.
    pub fn new(
        owner: String,
        idempotency_key: IdempotencyKey,
        mut request: JobRequest,
    ) -> Result<Self, serde_json::Error> {
        let delivery = request.take_delivery();
        let intent = super::canonical_json(&request)?;
        let fingerprint = Fingerprint::of_canonical(&intent);
        let canonical = match delivery.is_empty() {
            true => intent,
            false => {
                request.params.extend(delivery);
                super::canonical_json(&request)?
            }
        };
        Ok(NewJob {
            id: Uuid::now_v7(),
            owner,
            idempotency_key,
            fingerprint,
            request,
            canonical,
            attribution: Attribution::default(),
            entered_through: Entrance::Jobs,
        })
    }

    /// The job, its spend attributed to `attribution` as well as its owner.
    pub fn attributed(self, attribution: Attribution) -> Self {
        NewJob { attribution, ..self }
    }

    /// The job, come through `entrance` (the jobs API unless said).
    pub fn entered_through(self, entrance: Entrance) -> Self {
        NewJob { entered_through: entrance, ..self }
    }

    /// A job of `body` (a job request as JSON), for callers that build
    /// one in code rather than receive it at a door.
    pub fn of_body(
        owner: String,
        idempotency_key: IdempotencyKey,
        body: &serde_json::Value,
    ) -> Result<Self, serde_json::Error> {
        NewJob::new(owner, idempotency_key, JobRequest::deserialize(body)?)
    }

    /// The route that serves it.
    pub fn route(&self) -> &str {
        &self.request.route
    }

    /// Whom its attempts are charged to.
    pub fn payer(&self) -> Payer<'_> {
        Payer { owner: &self.owner, attribution: &self.attribution }
    }
}

/// The durable record of one user intent (R1). Its identity, owner, key,
/// fingerprint and request never change; attempts accumulate under it.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: Uuid,
    pub owner: String,
    pub idempotency_key: String,
    pub fingerprint: Fingerprint,
    pub route: String,
    pub request: String,
    pub status: JobStatus,
    pub version: i64,
    pub completed_by: Option<Uuid>,
    pub result: Option<String>,
    pub error: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub attribution: Attribution,
    /// The door the request that made it came through; `None` for a job
    /// made before doors were recorded.
    pub entered_through: Option<Entrance>,
}

impl Job {
    /// Whom its attempts are charged to.
    pub fn payer(&self) -> Payer<'_> {
        Payer { owner: &self.owner, attribution: &self.attribution }
    }
}
