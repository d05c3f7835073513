//! What a finished job holds: its result (the winning attempt's answer) or
//! its error (why no attempt could answer). Both are stored as JSON text in
//! the job row and returned as they are; these types are the one place that
//! says what that JSON looks like.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Attempt, AttemptOutcome, AttemptState};

/// The winning attempt's answer, normalised across dialects.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobResult {
    /// The provider whose attempt won the compare-and-swap.
    pub provider: String,
    /// The model the provider says answered.
    pub model: Option<String>,
    pub text: String,
    /// `text` parsed as JSON, when the route asked for JSON.
    #[schema(value_type = Option<Object>)]
    pub json: Option<Value>,
    #[schema(value_type = Option<Object>)]
    pub usage: Option<Value>,
    pub finish_reason: Option<String>,
    /// The whole answer in OpenAI's `chat.completion` shape (every choice,
    /// `tool_calls`, `refusal`, `logprobs`, `usage` with its details,
    /// `system_fingerprint`…); for a streamed answer, its chunks assembled.
    #[schema(value_type = Option<Object>)]
    pub completion: Option<Value>,
    /// A streamed answer's chunks (`chat.completion.chunk` objects) in the
    /// order they arrived, so that a replay sends the same stream again.
    #[schema(value_type = Option<Vec<Object>>)]
    pub chunks: Option<Vec<std::sync::Arc<Value>>>,
    /// The answer as the provider gave it, when the job's request was
    /// passed through in its own protocol (Anthropic's `message`, thinking
    /// blocks with their signatures and cache usage included): what the
    /// job's door answers with. A streamed one keeps its provider's events
    /// in `chunks` instead, each as [`JobResult::native_chunk`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub native: Option<Value>,
}

impl JobResult {
    /// A provider's own stream event among a job's chunks (see
    /// [`JobResult::native`]), told apart from a `chat.completion.chunk`.
    pub fn native_chunk(event: Value) -> Value {
        let mut wrapped = serde_json::Map::new();
        wrapped.insert(NATIVE_EVENT.into(), event);
        Value::Object(wrapped)
    }

    /// The provider's own event, if `chunk` is one (see [`JobResult::native_chunk`]).
    pub fn native_event(chunk: &Value) -> Option<&Value> {
        chunk.get(NATIVE_EVENT)
    }

    /// The stored form of a result; `None` if it does not decode (the
    /// writers never produce such a row).
    pub fn decode(stored: &str) -> Option<JobResult> {
        serde_json::from_str(stored).ok()
    }
}

/// Why a job failed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobFailure {
    pub reason: String,
    /// The attempt whose failure ended the job, when one attempt did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
    /// Every attempt tried, with how it ended.
    #[serde(default)]
    pub attempts: Vec<AttemptSummary>,
    /// Providers the contract gate refused, each as `name: reason` (R9).
    #[serde(default)]
    pub refused: Vec<String>,
    /// A machine-readable cause where one applies: `budget-exhausted` or
    /// `rate-limited` when a limit refused the chain's next attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// One attempt as a job's error lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttemptSummary {
    pub attempt: i32,
    pub provider: String,
    pub state: AttemptState,
    pub outcome: Option<AttemptOutcome>,
    pub detail: Option<String>,
}

impl JobFailure {
    pub fn new(reason: impl Into<String>) -> JobFailure {
        JobFailure { reason: reason.into(), ..JobFailure::default() }
    }

    /// The job failed because of this one attempt.
    pub fn of_attempt(reason: impl Into<String>, number: i32) -> JobFailure {
        JobFailure { attempt: Some(number), ..JobFailure::new(reason) }
    }

    /// What failed, in one line a client's SDK prints: each attempt's
    /// provider and how it ended, then each provider passed over and why,
    /// every part cut at a few hundred characters (the job's error has them
    /// whole).
    pub fn summary(&self) -> String {
        const PART: usize = 300;
        let cut = |text: &str| match text.char_indices().nth(PART) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text.to_owned(),
        };
        let tried = self.attempts.iter().map(|a| {
            let how = a.outcome.map_or_else(|| a.state.as_str().to_owned(), |outcome| outcome.to_string());
            match &a.detail {
                Some(detail) => format!("{} ({how}): {}", a.provider, cut(detail)),
                None => format!("{} ({how})", a.provider),
            }
        });
        let passed = self.refused.iter().map(|refused| format!("passed over {}", cut(refused)));
        let parts: Vec<String> = tried.chain(passed).collect();
        match parts.is_empty() {
            true => cut(&self.reason),
            false => parts.join("; "),
        }
    }

    pub fn with_attempts(mut self, attempts: &[Attempt]) -> JobFailure {
        self.attempts = attempts
            .iter()
            .map(|a| AttemptSummary {
                attempt: a.number,
                provider: a.provider.clone(),
                state: a.state,
                outcome: a.outcome,
                detail: a.detail.clone(),
            })
            .collect();
        self
    }

    pub fn with_refused(mut self, refused: Vec<String>) -> JobFailure {
        self.refused = refused;
        self
    }

    /// The stored form.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| format!("{{\"reason\":{:?}}}", self.reason))
    }
}

impl JobResult {
    /// The stored form.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The member a native stream event is wrapped in among a job's chunks.
const NATIVE_EVENT: &str = "native_event";
