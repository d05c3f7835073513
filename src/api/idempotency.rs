//! The `Idempotency-Key` request header (`docs/design.md`, "HTTP semantics of the jobs API").

use axum::http::HeaderMap;

use super::{Problem, ProblemType};
use crate::jobs::IdempotencyKey;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Exactly one header, 1–255 visible ASCII characters, plain or RFC 8941
/// quoted. Missing and malformed are different problems so that clients can
/// tell "you forgot it" from "it is wrong".
pub fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, Problem> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Err(Problem::new(
            ProblemType::IdempotencyKeyMissing,
            "a job-creating request needs an `Idempotency-Key` header naming this intent",
        ));
    };
    let invalid = |detail: String| Problem::new(ProblemType::IdempotencyKeyInvalid, detail);
    if values.next().is_some() {
        return Err(invalid("the `Idempotency-Key` header was sent more than once".into()));
    }
    let text = value
        .to_str()
        .map_err(|_| invalid("the Idempotency-Key may only contain visible ASCII characters".into()))?;
    IdempotencyKey::parse(text).map_err(|err| invalid(err.to_string()))
}
