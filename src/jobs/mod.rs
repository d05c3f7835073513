//! The domain: what a user wants (a [`Job`]) and each try at it (an [`Attempt`]).
//!
//! Pure Rust: no HTTP and no SQL live here. The state names defined here are
//! the ones the migrations' CHECK constraints allow, and the questions "may a
//! new attempt start?" and "which state may follow which?" are answered here
//! before the database answers them again.

mod attempt;
mod attribution;
mod charge;
mod embedding;
mod entrance;
mod fingerprint;
mod idempotency_key;
mod job;
mod messages;
mod outcome;
mod params;
mod request;
mod result;
mod transitions;

pub use attempt::{Attempt, AttemptState, Sent};
pub use attribution::{Attribution, InvalidTags, Payer, Tags};
pub use charge::{Amounts, charge};
pub use embedding::validate_embedding;
pub use entrance::Entrance;
pub use fingerprint::{Fingerprint, canonical_json, sha256_hex};
pub use idempotency_key::{IdempotencyKey, InvalidIdempotencyKey};
pub use job::{Job, JobStatus, NewJob};
/// Every message shape the door accepts, for tests elsewhere in the crate.
#[cfg(test)]
pub(crate) use messages::tests::accepted_shapes as accepted_message_shapes;
pub use messages::{InvalidMessage, json_kind, validate_messages};
pub use outcome::AttemptOutcome;
pub use params::{InvalidParam, validate_params};
pub use request::{ChatMessage, DoorName, InputKind, JobInput, JobRequest, NativeRequest};
pub use result::{AttemptSummary, JobFailure, JobResult};
pub use transitions::{StartBlocked, may_start_attempt};

/// Milliseconds since the unix epoch: the one clock format of the store.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Milliseconds since the epoch as RFC 3339, as the API and CLI print times.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// Unknown state name read from storage; the schema's CHECK makes this a bug.
#[derive(Debug, thiserror::Error)]
#[error("unknown {kind} state `{value}`")]
pub struct UnknownState {
    pub kind: &'static str,
    pub value: String,
}

impl UnknownState {
    /// The one of `all` whose stored `name` is `value`, else the error
    /// naming `kind`: every stored name reads back the same way.
    fn parse<T: Copy>(
        kind: &'static str,
        all: &[T],
        name: fn(T) -> &'static str,
        value: &str,
    ) -> Result<T, Self> {
        all.iter()
            .copied()
            .find(|each| name(*each) == value)
            .ok_or_else(|| UnknownState { kind, value: value.to_owned() })
    }
}
