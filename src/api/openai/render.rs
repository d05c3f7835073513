//! OpenAI's response shapes, rendered from a job. Rendering is a pure
//! function of the stored job, so a replay is byte for byte the original:
//! same `id` (from the job id), same `created` (the job's creation second),
//! same chunks (stored with the result).

use serde::Serialize;
use serde_json::Value;

use crate::jobs::Job;

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

#[derive(Serialize)]
struct Body<'a> {
    id: &'a str,
    object: &'static str,
    created: i64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: Message<'a>,
    finish_reason: &'a str,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

/// `chat.completion` for a succeeded job's stored `result`.
pub fn completion_body(completion: &Completion, result: &Value) -> Vec<u8> {
    let usage = result.get("usage").filter(|u| !u.is_null()).map(|u| {
        let prompt = u["prompt_tokens"].as_u64().unwrap_or(0);
        let completion = u["completion_tokens"].as_u64().unwrap_or(0);
        Usage { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
    });
    let body = Body {
        id: &completion.id,
        object: "chat.completion",
        created: completion.created,
        model: &completion.model,
        choices: [Choice {
            index: 0,
            message: Message { role: "assistant", content: result["text"].as_str().unwrap_or_default() },
            finish_reason: result["finish_reason"].as_str().unwrap_or("stop"),
        }],
        usage,
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

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
/// job that was not streamed, its text as one chunk).
pub fn replay_stream(completion: &Completion, result: &Value) -> Vec<u8> {
    let mut out = role_event(completion);
    match result.get("chunks").and_then(Value::as_array) {
        Some(chunks) => {
            for chunk in chunks.iter().filter_map(Value::as_str) {
                out.extend(content_event(completion, chunk));
            }
        }
        None => out.extend(content_event(completion, result["text"].as_str().unwrap_or_default())),
    }
    out.extend(finish_events(completion, result["finish_reason"].as_str()));
    out
}
