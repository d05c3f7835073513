//! OpenAI's response shapes, rendered from a job. Rendering is a pure
//! function of the stored job, so a replay is byte for byte the original:
//! same `id` (from the job id), same `created` (the job's creation second),
//! same chunks (stored with the result).

use serde_json::{Map, Value, json};

use crate::api::door::{StreamRender, errors::slug};
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
/// not know), with the gateway's `id` and `created`, and the model that
/// answered as `model` (see [`stamped`]).
pub fn completion_body(completion: &Completion, result: JobResult) -> Option<Vec<u8>> {
    let mut body = stamped(completion, result.completion?, "chat.completion", result.model.as_deref());
    with_required_nulls(&mut body);
    serde_json::to_vec(&body).ok()
}

/// The members OpenAI's schema requires (nullable) that a provider, or a
/// translation from another dialect, may leave out: `choices[].logprobs`
/// and `choices[].message.refusal`.
fn with_required_nulls(body: &mut Value) {
    for choice in body.get_mut("choices").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(choice) = choice.as_object_mut() {
            choice.entry("logprobs").or_insert(Value::Null);
            if let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) {
                message.entry("refusal").or_insert(Value::Null);
            }
        }
    }
}

/// `value` (a provider's completion or chunk) with this job's identity:
/// its `id`, `created`, `object`, and as `model` the model that answered
/// when the provider named it (as OpenAI answers with the resolved model),
/// else `answering` (what an earlier chunk named), else the route.
fn stamped(completion: &Completion, mut value: Value, object: &str, answering: Option<&str>) -> Value {
    if let Some(fields) = value.as_object_mut() {
        let named = fields.get("model").and_then(Value::as_str).filter(|model| !model.is_empty());
        let model =
            named.map(str::to_owned).or(answering.map(str::to_owned)).unwrap_or(completion.model.clone());
        fields.insert("id".into(), completion.id.clone().into());
        fields.insert("object".into(), object.into());
        fields.insert("created".into(), completion.created.into());
        fields.insert("model".into(), model.into());
    }
    value
}

/// The end of a stream that ended well.
pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";

/// OpenAI's stream: each provider chunk as it came (every choice index,
/// tool-call fragments, the usage chunk), stamped with the job's identity,
/// then `[DONE]`.
pub struct ChunkStream {
    completion: Completion,
    /// The model the first chunk that named one named: every later chunk
    /// says the same, as a provider's own stream does.
    answering: Option<String>,
}

impl ChunkStream {
    pub fn new(completion: Completion) -> Self {
        ChunkStream { completion, answering: None }
    }
}

impl StreamRender for ChunkStream {
    fn chunk(&mut self, chunk: &Value) -> Vec<u8> {
        let stamped =
            stamped(&self.completion, chunk.clone(), "chat.completion.chunk", self.answering.as_deref());
        if self.answering.is_none()
            && chunk.get("model").and_then(Value::as_str).is_some_and(|m| !m.is_empty())
        {
            self.answering = stamped["model"].as_str().map(str::to_owned);
        }
        data_event(&stamped)
    }

    fn done(&mut self) -> Vec<u8> {
        DONE_EVENT.to_vec()
    }

    /// No `[DONE]` follows, so no client mistakes it for a clean end.
    fn failed(&mut self, code: &str, message: &str) -> Vec<u8> {
        data_event(&json!({"error": {"message": message, "type": "upstream_error", "code": code}}))
    }
}

fn data_event(value: &Value) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    out.extend(serde_json::to_vec(value).unwrap_or_default());
    out.extend(b"\n\n");
    out
}

/// A problem with OpenAI's `error` member beside its own members:
/// `message` (the detail), `type` (OpenAI's error type for the status),
/// `param` (the field at fault, when the problem names one) and `code`
/// (the problem's slug, what a client matches on).
pub fn error_body(mut problem: Map<String, Value>) -> Map<String, Value> {
    if problem.contains_key("error") {
        return problem;
    }
    // OpenAI's own code for a missing model, which its SDKs know.
    let code = slug(&problem)
        .map(|slug| if slug == "model-not-found" { "model_not_found" } else { slug })
        .map(str::to_owned);
    let kind = match (code.as_deref(), problem.get("status").and_then(Value::as_u64)) {
        (Some("budget-exhausted"), _) => "insufficient_quota",
        (_, Some(401)) => "authentication_error",
        (_, Some(403)) => "permission_error",
        (_, Some(429)) => "rate_limit_error",
        (_, Some(status)) if status >= 500 => "server_error",
        _ => "invalid_request_error",
    };
    let param = problem.get("path").and_then(Value::as_str).map(param_of_pointer);
    let message = problem.get("detail").cloned().unwrap_or(Value::Null);
    problem.insert("error".into(), json!({"message": message, "type": kind, "param": param, "code": code}));
    problem
}

/// A JSON pointer as OpenAI names a parameter: `/messages/0/content` →
/// `messages[0].content`.
fn param_of_pointer(pointer: &str) -> String {
    let mut param = String::new();
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        if token.parse::<u64>().is_ok() {
            param.push_str(&format!("[{token}]"));
        } else {
            if !param.is_empty() {
                param.push('.');
            }
            param.push_str(&token);
        }
    }
    param
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_carries_the_members_openai_requires() {
        let result = JobResult {
            provider: "p".into(),
            model: None,
            text: "hi".into(),
            json: None,
            usage: None,
            finish_reason: Some("stop".into()),
            completion: Some(
                json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                "finish_reason": "stop"}]}),
            ),
            chunks: None,
            native: None,
        };
        let completion = Completion { id: "chatcmpl-1".into(), created: 0, model: "chat".into() };
        let body: Value = serde_json::from_slice(&completion_body(&completion, result).unwrap_or_default())
            .unwrap_or_default();
        assert_eq!(body["choices"][0]["logprobs"], Value::Null);
        assert!(body["choices"][0]["logprobs"].is_null() && body["choices"][0].get("logprobs").is_some());
        assert!(body["choices"][0]["message"].get("refusal").is_some(), "{body}");
    }

    #[test]
    fn a_pointer_becomes_openais_param_name() {
        assert_eq!(param_of_pointer("/messages/0/content"), "messages[0].content");
        assert_eq!(param_of_pointer("/temperature"), "temperature");
        assert_eq!(param_of_pointer("/a~1b/1/2"), "a/b[1][2]");
    }

    #[test]
    fn the_error_member_says_openais_type_and_keeps_the_slug_as_code() {
        let problem = json!({"type": "https://intentgate.dev/problems/rate-limited", "status": 429,
            "detail": "slow down", "job_id": "j"});
        let Value::Object(problem) = problem else { unreachable!() };
        let body = error_body(problem);
        assert_eq!(
            body["error"],
            json!({"message": "slow down", "type": "rate_limit_error", "param": null,
            "code": "rate-limited"})
        );
        assert_eq!(body["job_id"], "j", "the problem's members stay");
    }
}
