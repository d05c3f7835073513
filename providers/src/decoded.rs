//! What a dialect makes of a provider's answer: a whole one decoded, or one
//! event of a stream. The dialects produce these and `stream` drives them,
//! so they sit below both.

use crate::types::{StreamChunk, Usage};

/// A decoded non-streamed answer, before the `expect_json` check.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The answer in OpenAI's `chat.completion` shape.
    pub(crate) completion: serde_json::Value,
    pub(crate) text: String,
    pub(crate) usage: Option<Usage>,
    pub(crate) finish_reason: Option<String>,
    pub(crate) model: Option<String>,
}

/// What one SSE event means. Failures a dialect reports mid-stream are
/// classified by what they prove, not by position: an undecodable event is
/// `bad_output` (the bytes are the proof), and an explicit error event is
/// `rejected` — the provider has answered and will send nothing more, so
/// `unknown` would block the job waiting for an answer that cannot come.
/// Only transport trouble after the headers (cut, stall, missing
/// terminator) is `unknown`.
pub(crate) enum StreamEvent {
    Chunk(StreamChunk),
    /// The terminator, with the last chunk a dialect makes of it (the
    /// usage chunk a translated stream ends with), if any.
    End(Option<StreamChunk>),
}
