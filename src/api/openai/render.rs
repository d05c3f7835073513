//! OpenAI's response shapes, rendered from a job. Rendering is a pure
//! function of the stored job, so a replay is byte for byte the original:
//! same `id` (from the job id), same `created` (the job's creation second),
//! same chunks (stored with the result).

use serde::Serialize;
use serde_json::{Value, json};

use crate::jobs::{Job, JobResult};

/// The parts of a job an OpenAI response is made of.
pub struct Completion {
    pub id: String,
    pub created: i64,
    pub model: String,
}

impl Completion {
    pub fn of(job: &Job) -> Self {
        Completion {
            id: format!("chatcmpl-{}", job.id.simple()),
            created: job.created_at_ms / 1000,
            model: job.route.clone(),
        }
    }
}

/// `chat.completion` for a succeeded job's stored result: the provider's
/// completion as it answered (every choice, `tool_calls`, `refusal`,
/// `logprobs`, `usage` with its details, `system_fingerprint`, fields we do
/// not know), with the gateway's `id`, `created` and `model` (the route the
/// caller asked for; the provider's own model is in `x-intentgate-model`).
pub fn completion_body(completion: &Completion, result: &JobResult) -> Vec<u8> {
    let body = match &result.completion {
        Some(answer) => stamped(completion, answer, "chat.completion"),
        None => legacy_completion(completion, result),
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// `value` (a provider's completion or chunk) with this job's identity.
fn stamped(completion: &Completion, value: &Value, object: &str) -> Value {
    let mut value = value.clone();
    if let Some(fields) = value.as_object_mut() {
        fields.insert("id".into(), completion.id.clone().into());
        fields.insert("object".into(), object.into());
        fields.insert("created".into(), completion.created.into());
        fields.insert("model".into(), completion.model.clone().into());
    }
    value
}

/// A result stored before completions were kept whole: its text as the one
/// choice.
fn legacy_completion(completion: &Completion, result: &JobResult) -> Value {
    let mut body = json!({
        "id": completion.id, "object": "chat.completion", "created": completion.created, "model": completion.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                     "finish_reason": result.finish_reason.as_deref().unwrap_or("stop")}],
    });
    if let (Some(usage), Some(fields)) = (&result.usage, body.as_object_mut()) {
        let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
        let done = usage["completion_tokens"].as_u64().unwrap_or(0);
        let usage =
            json!({"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done});
        fields.insert("usage".into(), usage);
    }
    body
}

/// One server-sent event carrying a provider's chunk with this job's
/// identity. Live and replayed streams both go through here, so a replay
/// is the same bytes.
pub fn chunk_event(completion: &Completion, chunk: &Value) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    out.extend(serde_json::to_vec(&stamped(completion, chunk, "chat.completion.chunk")).unwrap_or_default());
    out.extend(b"\n\n");
    out
}

/// The end of a stream that ended well.
pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: [ChunkChoice<'a>; 1],
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    finish_reason: Option<&'a str>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

fn event(completion: &Completion, delta: Delta<'_>, finish_reason: Option<&str>) -> Vec<u8> {
    let chunk = Chunk {
        id: &completion.id,
        object: "chat.completion.chunk",
        created: completion.created,
        model: &completion.model,
        choices: [ChunkChoice { index: 0, delta, finish_reason }],
    };
    let mut out = b"data: ".to_vec();
    out.extend(serde_json::to_vec(&chunk).unwrap_or_default());
    out.extend(b"\n\n");
    out
}

/// The opening event: the assistant role, no content yet.
pub fn role_event(completion: &Completion) -> Vec<u8> {
    event(completion, Delta { role: Some("assistant"), content: Some("") }, None)
}

pub fn content_event(completion: &Completion, text: &str) -> Vec<u8> {
    event(completion, Delta { role: None, content: Some(text) }, None)
}

/// The closing events: the finish reason, then `[DONE]`.
pub fn finish_events(completion: &Completion, finish_reason: Option<&str>) -> Vec<u8> {
    let mut out =
        event(completion, Delta { role: None, content: None }, Some(finish_reason.unwrap_or("stop")));
    out.extend(b"data: [DONE]\n\n");
    out
}

/// An in-band error: the stream broke after it began. No `[DONE]` follows,
/// so no client mistakes it for a clean end.
pub fn error_event(code: &str, message: &str) -> Vec<u8> {
    let body = serde_json::json!({"error": {"message": message, "type": "upstream_error", "code": code}});
    let mut out = b"data: ".to_vec();
    out.extend(serde_json::to_vec(&body).unwrap_or_default());
    out.extend(b"\n\n");
    out
}

/// The whole stream of a succeeded job, from its stored chunks (or, for a
/// job that was not streamed or predates whole chunks, its text).
pub fn replay_stream(completion: &Completion, result: &JobResult) -> Vec<u8> {
    let chunks = result.chunks.as_deref().unwrap_or_default();
    if !chunks.is_empty() && chunks.iter().all(Value::is_object) {
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(chunk_event(completion, chunk));
        }
        out.extend(DONE_EVENT);
        return out;
    }
    let mut out = role_event(completion);
    if chunks.is_empty() {
        out.extend(content_event(completion, &result.text));
    }
    for text in chunks.iter().filter_map(Value::as_str) {
        out.extend(content_event(completion, text));
    }
    out.extend(finish_events(completion, result.finish_reason.as_deref()));
    out
}
