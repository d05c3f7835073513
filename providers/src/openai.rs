//! The OpenAI chat-completions dialect (also spoken by vLLM, Together, Groq…).

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use crate::outcome::Failure;
use crate::stream::{Decoded, Step};
use crate::types::{ChatRequest, StreamChunk, Usage};

pub(crate) const PATH: &str = "/chat/completions";

pub(crate) fn auth(key: &str) -> Vec<(&'static str, String)> {
    vec![("authorization", format!("Bearer {key}"))]
}

/// The caller's request as is, with the configured model and our stream flag.
pub(crate) fn request_body(req: &ChatRequest, model: &str, stream: bool) -> Result<Value, serde_json::Error> {
    let mut body = serde_json::to_value(req)?;
    if let Some(object) = body.as_object_mut() {
        object.insert("model".into(), model.into());
        object.remove("stream");
        if stream {
            object.insert("stream".into(), true.into());
        }
    }
    Ok(body)
}

#[derive(Deserialize)]
struct Completion {
    model: Option<String>,
    choices: Vec<Choice>,
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    content: Option<String>,
}

pub(crate) fn decode_response(body: &[u8]) -> Result<Decoded, String> {
    let completion: Completion =
        serde_json::from_slice(body).map_err(|err| format!("not a chat completion: {err}"))?;
    let choice = completion.choices.into_iter().next().ok_or("no choices in the completion")?;
    let text = choice.message.content.ok_or("choices[0].message.content is missing")?;
    Ok(Decoded {
        text,
        usage: completion.usage,
        finish_reason: choice.finish_reason,
        model: completion.model,
    })
}

#[derive(Deserialize)]
struct ChunkBody {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    usage: Option<Usage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Delta,
    finish_reason: Option<String>,
}

#[derive(Default, Deserialize)]
struct Delta {
    content: Option<String>,
}

/// One `data:` payload of a stream; `[DONE]` ends it.
pub(crate) fn decode_event(data: Bytes) -> Result<Step, Failure> {
    if data.as_ref() == b"[DONE]" {
        return Ok(Step::End);
    }
    let chunk: ChunkBody = match serde_json::from_slice(&data) {
        Ok(chunk) => chunk,
        Err(err) => return Err(Failure::bad_output(format!("stream event is not a chunk: {err}"), data)),
    };
    if let Some(error) = chunk.error {
        // An explicit error event ends the stream: a definite answer (see
        // `Step` for why this is `rejected`, not `unknown`).
        let status = error.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
        let status = status.filter(|s| (400..600).contains(s)).unwrap_or(500);
        return Err(Failure::Rejected {
            status,
            retry_after: None,
            body: String::from_utf8_lossy(&data).into_owned(),
        });
    }
    let first = chunk.choices.into_iter().next();
    let (delta, finish_reason) = match first {
        Some(choice) => (choice.delta.content.unwrap_or_default(), choice.finish_reason),
        None => (String::new(), None),
    };
    Ok(Step::Chunk(StreamChunk { delta, finish_reason, usage: chunk.usage, raw: data }))
}
