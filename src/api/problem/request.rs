//! A request body a door cannot read as its protocol: `invalid-body`, with
//! the JSON pointer of the fault both in the detail (for people) and as
//! `path` (for code), so a client can point at what it built wrong.

use super::{Problem, ProblemType};
use crate::jobs::{InvalidMessage, InvalidParam};

impl Problem {
    /// A field of the request is missing or not what it must be.
    pub fn invalid_field(title: &'static str, detail: impl Into<String>, path: impl Into<String>) -> Problem {
        Problem::new(ProblemType::InvalidBody, detail).titled(title).with("path", path.into())
    }

    /// A message does not follow the chat schema.
    pub fn invalid_messages(err: InvalidMessage, title: &'static str) -> Problem {
        let detail = format!("the messages do not follow OpenAI's chat schema: {err}");
        Problem::invalid_field(title, detail, err.path)
    }

    /// A request that cannot be written in canonical form (RFC 8785), so
    /// it cannot be fingerprinted: a number JSON can say but JCS cannot.
    pub fn not_canonical(err: serde_json::Error) -> Problem {
        Problem::new(ProblemType::MalformedJson, format!("the body cannot be canonicalised: {err}"))
    }

    /// A generation parameter of the wrong type or out of range.
    pub fn invalid_params(err: InvalidParam, title: &'static str) -> Problem {
        Problem::invalid_field(title, format!("a generation parameter is invalid: {err}"), err.path)
    }
}
