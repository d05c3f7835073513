use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Amounts, AttemptOutcome, UnknownState};

/// Lifecycle of one attempt (`docs/design.md`, "State machines": "Attempt").
///
/// `starting` is written before the provider request leaves, so a crash can
/// never hide a call that was made. `unknown` is an attempt that may have done
/// the work; it is never treated as failed (R5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptState {
    Starting,
    Succeeded,
    Failed,
    Unknown,
    Abandoned,
    Superseded,
}

impl AttemptState {
    pub const ALL: [AttemptState; 6] = [
        AttemptState::Starting,
        AttemptState::Succeeded,
        AttemptState::Failed,
        AttemptState::Unknown,
        AttemptState::Abandoned,
        AttemptState::Superseded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Starting => "starting",
            AttemptState::Succeeded => "succeeded",
            AttemptState::Failed => "failed",
            AttemptState::Unknown => "unknown",
            AttemptState::Abandoned => "abandoned",
            AttemptState::Superseded => "superseded",
        }
    }

    /// Open attempts block any new attempt of the same job beyond its bound
    /// (R4). The schema's partial unique index `attempts_one_open_per_lane`
    /// lists the same states.
    pub fn is_open(self) -> bool {
        matches!(self, AttemptState::Starting | AttemptState::Unknown)
    }
}

impl std::str::FromStr for AttemptState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UnknownState::parse("attempt", &AttemptState::ALL, AttemptState::as_str, s)
    }
}

impl std::fmt::Display for AttemptState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One try at fulfilling a job (R1).
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub id: Uuid,
    pub job_id: Uuid,
    pub number: i32,
    pub provider: String,
    pub state: AttemptState,
    /// The job version read when the attempt started (R6).
    pub job_version: i64,
    pub outcome: Option<AttemptOutcome>,
    pub detail: Option<String>,
    pub resolved_by: Option<String>,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    /// Its worst case, reserved before it was sent (zero when nothing
    /// meters it and its provider has no price).
    pub reserved: Amounts,
    /// What it was charged once settled (see [`super::charge`]).
    pub charged: Option<Amounts>,
    /// The usage the provider reported (OpenAI's `usage` object, JSON).
    pub usage: Option<String>,
    /// Which of the job's lanes it holds while open (1 unless a hedged
    /// route opened it beside another; see `may_start_attempt`).
    pub lane: i32,
    /// When it became `unknown`, if it ever did.
    pub unknown_at_ms: Option<i64>,
    /// Whether its request has left the gateway (see [`Sent`]).
    pub sent: Sent,
    /// The attempt whose stream, cut after part of it reached the client,
    /// this one continues (a route's `continue_cut_streams`).
    pub continues: Option<i32>,
}

/// What the store knows of whether an attempt's request left the gateway:
/// the difference between an attempt recovery may start again (never sent)
/// and one whose outcome is unknown (it may have run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Not recorded (written by a release that did not record it): it may
    /// have been sent.
    Unrecorded,
    /// Written and not yet handed to its provider.
    NotYet,
    /// Marked, and committed, before it was handed to its provider, at this
    /// time: it may have been received.
    At(i64),
}

impl Sent {
    /// From the row's `sent` and `sent_at` (whose CHECK ties them).
    pub fn of_columns(sent: Option<bool>, at: Option<i64>) -> Result<Sent, UnknownState> {
        match (sent, at) {
            (None, _) => Ok(Sent::Unrecorded),
            (Some(false), _) => Ok(Sent::NotYet),
            (Some(true), Some(at)) => Ok(Sent::At(at)),
            (Some(true), None) => Err(UnknownState { kind: "send", value: "sent, with no `sent_at`".into() }),
        }
    }

    /// When it was handed over, if it was marked.
    pub fn at_ms(self) -> Option<i64> {
        match self {
            Sent::At(at) => Some(at),
            Sent::Unrecorded | Sent::NotYet => None,
        }
    }
}

impl Attempt {
    /// Attempt 1 of a job just inserted with it, as the insert wrote it.
    pub fn first(id: Uuid, job: &super::Job, provider: &str, reserved: Amounts, now_ms: i64) -> Attempt {
        Attempt {
            id,
            job_id: job.id,
            number: 1,
            provider: provider.to_owned(),
            state: AttemptState::Starting,
            job_version: job.version,
            outcome: None,
            detail: None,
            resolved_by: None,
            started_at_ms: now_ms,
            finished_at_ms: None,
            reserved,
            charged: None,
            usage: None,
            lane: 1,
            unknown_at_ms: None,
            sent: Sent::NotYet,
            continues: None,
        }
    }
}
