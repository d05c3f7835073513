//! The outcome classes of a provider call — the one vocabulary the gateway,
//! its database and its metrics share (R5 in `docs/design.md`).
//!
//! The split that matters is *proof*: `not_sent`, `rejected` and `bad_output`
//! prove that no usable work is pending at the provider, so the attempt is
//! `failed` and the job may fail over at once. `unknown` proves nothing: the
//! provider may still be working, and a late answer may still arrive. When
//! the evidence is ambiguous we say `unknown`, because failing over on a false
//! `failed` is exactly the double execution this gateway exists to prevent.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::redact;
use crate::types::ChatResponse;

/// What one call ended with: the response, or a classified [`Failure`].
pub type Outcome = Result<ChatResponse, Failure>;

/// Why a call produced no usable response, classified by what it proves.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Failure {
    /// Nothing reached the provider: DNS failure, refused connection, connect
    /// timeout, TLS failure before the request was written.
    ///
    /// `local` when it was refused here, before any connection was tried
    /// (the request cannot be encoded, the provider is not configured):
    /// no sign of the provider's health, and not worth a retry.
    #[error("not sent: {reason}")]
    NotSent { reason: String, local: bool },
    /// The provider answered with an error status (or an explicit error event
    /// in a stream): it told us it will not deliver this answer.
    #[error("rejected with status {status}{}", provider_says(body))]
    Rejected { status: u16, retry_after: Option<Duration>, body: String },
    /// A 2xx whose body is unusable: not JSON, the wrong shape, or not the
    /// JSON the caller asked for. `raw` is the exact body, kept for audit.
    #[error("bad output: {reason}")]
    BadOutput { reason: String, raw: Bytes },
    /// The request may have reached the provider and no complete answer came
    /// back. Never to be treated as failed.
    #[error("outcome unknown: {reason}")]
    Unknown { reason: String },
}

/// What a rejection's body says, as `: <message>` (the `error.message` or
/// `message` every dialect's error carries, at most 300 characters), so
/// the reason a job failed reaches its client; empty when it says nothing.
fn provider_says(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|body| {
        body.pointer("/error/message").or_else(|| body.get("message")).and_then(serde_json::Value::as_str)
    });
    match message.map(str::trim).filter(|m| !m.is_empty()) {
        Some(message) => format!(": {}", message.chars().take(300).collect::<String>()),
        None => String::new(),
    }
}

impl Failure {
    pub fn class(&self) -> OutcomeClass {
        match self {
            Failure::NotSent { .. } => OutcomeClass::NotSent,
            Failure::Rejected { .. } => OutcomeClass::Rejected,
            Failure::BadOutput { .. } => OutcomeClass::BadOutput,
            Failure::Unknown { .. } => OutcomeClass::Unknown,
        }
    }

    /// True when the failure proves no work is pending, so a fallback may
    /// start at once; false only for `Unknown`.
    pub fn may_fail_over(&self) -> bool {
        !matches!(self, Failure::Unknown { .. })
    }

    /// A 400 in which the provider says its content policy refused the
    /// request (OpenAI's `content_policy_violation` and Azure's
    /// `content_filter`, Anthropic's "content filtering policy", Gemini's
    /// in-band block as [`Failure::content_refusal`] words it): a verdict
    /// on the request, which another provider may well share.
    pub fn is_content_refusal(&self) -> bool {
        let Failure::Rejected { status: 400, body, .. } = self else { return false };
        let body = body.to_ascii_lowercase();
        [
            "content_policy_violation",
            "content_filter",
            "content filtering policy",
            "content management policy",
        ]
        .iter()
        .any(|marker| body.contains(marker))
    }

    /// A refusal a provider says inside a 2xx answer (Gemini's blocked
    /// prompt, its candidate stopped for safety) as the refusal the other
    /// dialects answer: a 400 whose body says `content_filter`, so that
    /// [`Failure::is_content_refusal`] and everything built on it (the job
    /// fails `content-refused`, no failover, no charge, no mark against the
    /// provider's health) treat both alike. The body keeps the provider's
    /// answer for audit, as far as a rejection body is kept.
    pub(crate) fn content_refusal(reason: &str, answer: &[u8]) -> Self {
        const KEPT: usize = 16 * 1024;
        let answer = serde_json::from_slice::<serde_json::Value>(answer)
            .unwrap_or_else(|_| String::from_utf8_lossy(&answer[..answer.len().min(KEPT)]).into());
        let body = serde_json::json!({
            "error": {"code": "content_filter", "message": reason},
            "answer": answer,
        });
        let mut body = body.to_string();
        if body.len() > KEPT {
            let cut = (0..=KEPT).rev().find(|&i| body.is_char_boundary(i)).unwrap_or(0);
            body.truncate(cut);
        }
        Failure::Rejected { status: 400, retry_after: None, body }
    }

    pub(crate) fn unknown(reason: impl Into<String>) -> Self {
        Failure::Unknown { reason: reason.into() }
    }

    pub(crate) fn bad_output(reason: impl Into<String>, raw: Bytes) -> Self {
        Failure::BadOutput { reason: reason.into(), raw }
    }

    /// Replaces every occurrence of `secret`, raw bytes of a bad 2xx body
    /// included (they are stored): a provider error body may echo the key
    /// ("invalid key sk-..."), and so may a 2xx one (see `crate::redact`).
    pub(crate) fn redact(mut self, secret: &str) -> Self {
        if secret.is_empty() {
            return self;
        }
        match &mut self {
            Failure::NotSent { reason, .. } | Failure::Unknown { reason } => redact::text(reason, secret),
            Failure::BadOutput { reason, raw } => {
                redact::text(reason, secret);
                redact::bytes(raw, secret);
            }
            Failure::Rejected { body, .. } => redact::text(body, secret),
        }
        self
    }
}

/// The class of an [`Outcome`], as stored in the database and in metrics.
/// The snake_case names are a stable contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeClass {
    Ok,
    NotSent,
    Rejected,
    BadOutput,
    Unknown,
}

impl OutcomeClass {
    pub const ALL: [OutcomeClass; 5] = [
        OutcomeClass::Ok,
        OutcomeClass::NotSent,
        OutcomeClass::Rejected,
        OutcomeClass::BadOutput,
        OutcomeClass::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeClass::Ok => "ok",
            OutcomeClass::NotSent => "not_sent",
            OutcomeClass::Rejected => "rejected",
            OutcomeClass::BadOutput => "bad_output",
            OutcomeClass::Unknown => "unknown",
        }
    }
}

impl fmt::Display for OutcomeClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an outcome class")]
pub struct ParseOutcomeClassError(String);

impl FromStr for OutcomeClass {
    type Err = ParseOutcomeClassError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OutcomeClass::ALL
            .into_iter()
            .find(|class| class.as_str() == s)
            .ok_or_else(|| ParseOutcomeClassError(s.to_owned()))
    }
}

/// The class of a whole outcome, `ok` included.
pub fn class_of(outcome: &Outcome) -> OutcomeClass {
    match outcome {
        Ok(_) => OutcomeClass::Ok,
        Err(failure) => failure.class(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_are_stable_and_round_trip() {
        let names: Vec<_> = OutcomeClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names, ["ok", "not_sent", "rejected", "bad_output", "unknown"]);
        for class in OutcomeClass::ALL {
            assert_eq!(class.as_str().parse::<OutcomeClass>(), Ok(class));
            assert_eq!(serde_json::to_value(class).ok(), Some(serde_json::json!(class.as_str())));
        }
        assert!("failed".parse::<OutcomeClass>().is_err());
    }

    #[test]
    fn only_unknown_blocks_failover() {
        assert!(Failure::NotSent { reason: String::new(), local: false }.may_fail_over());
        assert!(Failure::Rejected { status: 503, retry_after: None, body: String::new() }.may_fail_over());
        assert!(Failure::bad_output("x", Bytes::new()).may_fail_over());
        assert!(!Failure::unknown("x").may_fail_over());
    }

    #[test]
    fn an_in_band_refusal_is_a_content_refusal_with_the_answer_kept() {
        let answer = br#"{"promptFeedback":{"blockReason":"SAFETY"}}"#;
        let failure = Failure::content_refusal("Gemini blocked the prompt (blockReason SAFETY)", answer);
        assert!(failure.is_content_refusal(), "{failure:?}");
        assert_eq!(failure.class(), OutcomeClass::Rejected);
        let Failure::Rejected { body, .. } = failure else { panic!("a rejection") };
        let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        assert_eq!(body["answer"]["promptFeedback"]["blockReason"], "SAFETY");
        let huge = Failure::content_refusal("x", "y".repeat(100_000).as_bytes());
        assert!(matches!(huge, Failure::Rejected { body, .. } if body.len() <= 16 * 1024));
    }

    #[test]
    fn redact_scrubs_reasons_and_bodies() {
        let body = r#"{"error":"bad key sk-abc"}"#.to_owned();
        let failure = Failure::Rejected { status: 401, retry_after: None, body }.redact("sk-abc");
        assert!(!format!("{failure:?}").contains("sk-abc"));
        let failure = Failure::unknown("sk-abc in reason").redact("sk-abc");
        assert_eq!(failure, Failure::unknown("[redacted] in reason"));
    }
}
