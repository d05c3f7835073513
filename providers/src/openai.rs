//! The OpenAI chat-completions dialect (also spoken by vLLM, Together, Groq…).

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use crate::decoded::{Decoded, StreamEvent};
use crate::outcome::Failure;
use crate::types::{ChatRequest, StreamChunk, Usage};

pub(crate) const PATH: &str = "/chat/completions";

pub(crate) fn auth(key: &str) -> Vec<(&'static str, String)> {
    vec![("authorization", format!("Bearer {key}"))]
}

/// Azure OpenAI's key header (it takes no `Authorization` for a key).
pub(crate) fn azure_auth(key: &str) -> Vec<(&'static str, String)> {
    vec![("api-key", key.to_owned())]
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

/// The provider's completion, kept whole: only what the gateway must
/// understand is checked (there are choices, each with a message; choice 0
/// says something or calls a tool), the rest passes through untouched.
pub(crate) fn decode_response(body: &[u8]) -> Result<Decoded, String> {
    let completion: Value =
        serde_json::from_slice(body).map_err(|err| format!("not a chat completion: {err}"))?;
    let choices =
        completion.get("choices").and_then(Value::as_array).ok_or("no `choices` in the completion")?;
    let first = choices.first().ok_or("no choices in the completion")?;
    for (index, choice) in choices.iter().enumerate() {
        if !choice.get("message").is_some_and(Value::is_object) {
            return Err(format!("choices[{index}].message is missing"));
        }
    }
    let message = &first["message"];
    let text = match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        None | Some(Value::Null) => String::new(),
        Some(_) => return Err("choices[0].message.content is neither a string nor null".into()),
    };
    let says_something = !text.is_empty()
        || message.get("tool_calls").and_then(Value::as_array).is_some_and(|calls| !calls.is_empty())
        || message.get("refusal").is_some_and(Value::is_string)
        || message.get("content").is_some_and(Value::is_string);
    if !says_something {
        return Err("choices[0].message has neither content nor tool_calls nor a refusal".into());
    }
    let usage = completion.get("usage").and_then(|usage| Usage::deserialize(usage).ok());
    Ok(Decoded {
        text,
        usage,
        finish_reason: first.get("finish_reason").and_then(Value::as_str).map(str::to_owned),
        model: completion.get("model").and_then(Value::as_str).map(str::to_owned),
        completion,
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
    index: u32,
    #[serde(default)]
    delta: Delta,
    finish_reason: Option<String>,
}

#[derive(Default, Deserialize)]
struct Delta {
    content: Option<String>,
}

/// One `data:` payload of a stream; `[DONE]` ends it.
pub(crate) fn decode_event(data: Bytes) -> Result<StreamEvent, Failure> {
    if data.as_ref() == b"[DONE]" {
        return Ok(StreamEvent::End(None));
    }
    let chunk: ChunkBody = match serde_json::from_slice(&data) {
        Ok(chunk) => chunk,
        Err(err) => return Err(Failure::bad_output(format!("stream event is not a chunk: {err}"), data)),
    };
    if let Some(error) = chunk.error {
        // An explicit error event ends the stream: a definite answer (see
        // `StreamEvent` for why this is `rejected`, not `unknown`).
        let status = error.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
        let status = status.filter(|s| (400..600).contains(s)).unwrap_or(500);
        return Err(Failure::Rejected {
            status,
            retry_after: None,
            body: String::from_utf8_lossy(&data).into_owned(),
        });
    }
    let first = chunk.choices.into_iter().find(|choice| choice.index == 0);
    let (delta, finish_reason) = match first {
        Some(choice) => (choice.delta.content.unwrap_or_default(), choice.finish_reason),
        None => (String::new(), None),
    };
    let whole: Value = serde_json::from_slice(&data)
        .map_err(|err| Failure::bad_output(format!("stream event is not a chunk: {err}"), data.clone()))?;
    Ok(StreamEvent::Chunk(StreamChunk {
        chunk: whole,
        delta,
        finish_reason,
        usage: chunk.usage,
        raw: data,
        native: None,
        skipped: None,
    }))
}
