//! Google's Gemini API (`generateContent`), a translated dialect: the
//! OpenAI-shaped request becomes a `GenerateContentRequest` (see
//! [`request`]), and the answer, whole or streamed, comes back in OpenAI's
//! `chat.completion` shape, so clients and the engine never see Gemini's.
//!
//! Gemini says a refusal in a 200: a prompt blocked (`promptFeedback.blockReason`)
//! or a candidate stopped for safety with nothing said. Both become the
//! content-policy refusal the other dialects answer with a 400
//! ([`Failure::content_refusal`]), so the engine ends the job with
//! `content-refused` instead of shopping the next provider for a laxer
//! policy. A candidate stopped for safety after it said something is an
//! answer with `finish_reason: "content_filter"`, as OpenAI gives one.

mod request;
mod schema;
mod untranslatable;

use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::decoded::{Decoded, StreamEvent};
use crate::outcome::Failure;
use crate::transport::Paths;
use crate::types::{ChatRequest, StreamChunk, Usage};

pub(crate) use request::request_body;

/// The key's header. Never `Authorization`, never the URL's `?key=`: a
/// URL is logged and echoed in errors, a sensitive header is neither.
pub(crate) fn auth(key: &str) -> Vec<(&'static str, String)> {
    vec![("x-goog-api-key", key.to_owned())]
}

/// Where a model's methods are under the base URL (the API's origin).
/// Gemini names the model in the path, so its name is percent-encoded
/// there: everything but the characters a path segment may hold as they are.
pub(crate) fn paths(model: &str) -> Paths {
    let base = format!("/v1beta/models/{}", path_segment(model));
    Paths {
        chat: format!("{base}:generateContent"),
        chat_stream: Some(format!("{base}:streamGenerateContent?alt=sse")),
        embeddings: format!("{base}:embedContent"),
    }
}

/// `name` as one path segment: percent-encoded but for the characters a
/// path segment may hold as they are (Google's APIs name models, projects
/// and locations in their paths).
pub(crate) fn path_segment(name: &str) -> String {
    let mut segment = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&byte) {
            segment.push(char::from(byte));
        } else {
            segment.push_str(&format!("%{byte:02X}"));
        }
    }
    segment
}

/// Why `req` cannot be said in Gemini's API (see [`request`]), if so.
pub(crate) fn cannot_express(req: &ChatRequest) -> Option<String> {
    request_body(req).err().map(|why| why.to_string())
}

/// A rejection with the wait Google puts in its body rather than a
/// `Retry-After` header: `error.details[]` of type `RetryInfo`, whose
/// `retryDelay` is a protobuf duration (`"37s"`, `"1.5s"`). A header, when
/// there is one, wins.
pub(crate) fn with_retry_delay(failure: Failure) -> Failure {
    match failure {
        Failure::Rejected { status, retry_after: None, body } => {
            Failure::Rejected { status, retry_after: retry_delay(&body), body }
        }
        other => other,
    }
}

fn retry_delay(body: &str) -> Option<Duration> {
    let error: Value = serde_json::from_str(body).ok()?;
    let details = error.pointer("/error/details")?.as_array()?;
    let info = details.iter().find(|d| {
        d.get("@type").and_then(Value::as_str).is_some_and(|t| t.ends_with("google.rpc.RetryInfo"))
    })?;
    let seconds: f64 = info.get("retryDelay")?.as_str()?.strip_suffix('s')?.trim().parse().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// Why a 2xx answer is not an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AnswerError {
    /// Not a `GenerateContentResponse`, or one that says nothing.
    #[error("{0}")]
    Shape(String),
    /// `promptFeedback.blockReason`: the prompt was refused, no candidate made.
    #[error("Gemini blocked the prompt (blockReason {0})")]
    PromptBlocked(String),
    /// A candidate ended for safety (or recitation…) before it said anything.
    #[error("Gemini stopped the answer before it said anything (finishReason {0})")]
    Stopped(String),
}

impl AnswerError {
    /// The outcome: a refusal is the content-policy refusal the engine
    /// knows (not failed over by default), a shape error `bad_output`.
    pub(crate) fn into_failure(self, raw: Bytes) -> Failure {
        match self {
            AnswerError::Shape(reason) => Failure::bad_output(reason, raw),
            refusal => Failure::content_refusal(&refusal.to_string(), &raw),
        }
    }
}

/// Gemini's finish reasons that mean a policy stopped the candidate.
const FILTERED: [&str; 6] =
    ["SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII", "IMAGE_SAFETY"];

/// `finishReason` in OpenAI's vocabulary; `called` when the candidate
/// called a function (Gemini says `STOP` then, OpenAI `tool_calls`).
fn finish_reason(reason: &str, called: bool) -> String {
    match reason {
        "STOP" if called => "tool_calls".into(),
        "STOP" => "stop".into(),
        "MAX_TOKENS" => "length".into(),
        filtered if FILTERED.contains(&filtered) => "content_filter".into(),
        other => other.to_ascii_lowercase(),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    #[serde(default)]
    candidates: Vec<Candidate>,
    prompt_feedback: Option<PromptFeedback>,
    usage_metadata: Option<UsageMetadata>,
    model_version: Option<String>,
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    content: Option<CandidateContent>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct CandidateContent {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    text: Option<String>,
    /// A thought summary of a thinking model: not part of the answer.
    #[serde(default)]
    thought: bool,
    function_call: Option<FunctionCall>,
    thought_signature: Option<String>,
}

#[derive(Deserialize)]
struct FunctionCall {
    id: Option<String>,
    name: String,
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    block_reason: Option<String>,
}

#[derive(Debug, Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase", default)]
struct UsageMetadata {
    prompt_token_count: u64,
    candidates_token_count: u64,
    thoughts_token_count: u64,
    tool_use_prompt_token_count: u64,
    cached_content_token_count: u64,
    total_token_count: Option<u64>,
}

impl UsageMetadata {
    /// Thinking is billed as output, as OpenAI's reasoning tokens are.
    fn usage(self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_token_count + self.tool_use_prompt_token_count,
            completion_tokens: self.candidates_token_count + self.thoughts_token_count,
        }
    }

    /// OpenAI's `usage` member, with the details OpenAI carries them in.
    fn openai(self) -> Value {
        let usage = self.usage();
        json!({
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": self.total_token_count.unwrap_or(usage.prompt_tokens + usage.completion_tokens),
            "prompt_tokens_details": {"cached_tokens": self.cached_content_token_count},
            "completion_tokens_details": {"reasoning_tokens": self.thoughts_token_count},
        })
    }
}

/// What one candidate's parts say: text, and calls in OpenAI's shape.
struct Said {
    text: Option<String>,
    calls: Vec<Value>,
}

/// The parts of a candidate as text and OpenAI tool calls, numbered from
/// `first_call`. A call gets Gemini's id if it has one, else `call_…`.
fn said(content: Option<&CandidateContent>, first_call: usize) -> Said {
    let mut text: Option<String> = None;
    let mut calls = Vec::new();
    for part in content.map(|c| c.parts.as_slice()).unwrap_or_default() {
        if let Some(piece) = part.text.as_deref().filter(|_| !part.thought) {
            text.get_or_insert_with(String::new).push_str(piece);
        }
        if let Some(call) = &part.function_call {
            let id = call.id.clone().unwrap_or_else(|| format!("call_{}", uuid::Uuid::now_v7().simple()));
            let arguments = call.args.clone().unwrap_or_else(|| json!({})).to_string();
            let mut out = json!({"index": first_call + calls.len(), "id": id, "type": "function",
                "function": {"name": call.name, "arguments": arguments}});
            if let (Some(signature), Some(object)) = (&part.thought_signature, out.as_object_mut()) {
                object.insert("extra_content".into(), json!({"google": {"thought_signature": signature}}));
            }
            calls.push(out);
        }
    }
    Said { text, calls }
}

/// The refusal, if the answer is one: a blocked prompt, or a candidate a
/// policy stopped before anything was said (`said_before`: in a stream,
/// earlier chunks said something).
fn refusal(response: &Response, said_now: &Said, said_before: bool) -> Option<AnswerError> {
    if let Some(reason) = response.prompt_feedback.as_ref().and_then(|f| f.block_reason.clone()) {
        return Some(AnswerError::PromptBlocked(reason));
    }
    let reason = response.candidates.first()?.finish_reason.as_deref()?;
    let silent =
        !said_before && said_now.text.as_deref().is_none_or(str::is_empty) && said_now.calls.is_empty();
    (silent && FILTERED.contains(&reason)).then(|| AnswerError::Stopped(reason.to_owned()))
}

/// The answer in OpenAI's `chat.completion` shape: candidate 0's text as
/// `content`, its function calls as `tool_calls`, `modelVersion` as
/// `model`, `usageMetadata` as `usage`.
pub(crate) fn decode_response(body: &[u8]) -> Result<Decoded, AnswerError> {
    let response: Response = serde_json::from_slice(body)
        .map_err(|err| AnswerError::Shape(format!("not a GenerateContentResponse: {err}")))?;
    let candidate = response.candidates.first();
    let said = said(candidate.and_then(|c| c.content.as_ref()), 0);
    if let Some(refusal) = refusal(&response, &said, false) {
        return Err(refusal);
    }
    let candidate = candidate.ok_or_else(|| AnswerError::Shape("no candidates in the answer".into()))?;
    if said.text.is_none() && said.calls.is_empty() {
        let why = candidate.finish_reason.as_deref().unwrap_or("none");
        return Err(AnswerError::Shape(format!(
            "the candidate has neither text nor a functionCall (finishReason {why})"
        )));
    }
    let called = !said.calls.is_empty();
    let finish_reason = candidate.finish_reason.as_deref().map(|r| finish_reason(r, called));
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert("content".into(), said.text.clone().map_or(Value::Null, Value::String));
    if called {
        let calls = said.calls.into_iter().map(without_index).collect();
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut completion = json!({
        "object": "chat.completion",
        "model": response.model_version,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    });
    if let (Some(usage), Some(object)) = (response.usage_metadata, completion.as_object_mut()) {
        object.insert("usage".into(), usage.openai());
    }
    Ok(Decoded {
        completion,
        text: said.text.unwrap_or_default(),
        usage: response.usage_metadata.map(UsageMetadata::usage),
        finish_reason,
        model: response.model_version,
    })
}

/// A whole answer's tool call carries no stream `index`.
fn without_index(mut call: Value) -> Value {
    if let Some(object) = call.as_object_mut() {
        object.remove("index");
    }
    call
}

/// A streamed answer: each SSE event is a whole `GenerateContentResponse`
/// holding the next piece of candidate 0 (text, or whole function calls),
/// the last one its `finishReason`; every one may carry `usageMetadata`,
/// the latest being the totals. Gemini's stream has no terminator: it ends
/// with the body after the chunk that finishes (see [`StreamState::end_of_body`]).
///
/// Usage is shown as OpenAI shows it, only when the request asked
/// (`stream_options.include_usage`), in a last chunk with no choices; the
/// finish chunk's [`StreamChunk::usage`] carries it for the charge either way.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    include_usage: bool,
    /// Tool calls sent so far (OpenAI numbers them across the stream).
    calls: usize,
    /// A chunk a client sees went out (the first carries the role).
    started: bool,
    /// A chunk with text or a call went out (so no refusal can follow).
    said: bool,
    /// The chunk with the finish reason came: the body may end.
    finished: bool,
    usage: Option<UsageMetadata>,
}

impl StreamState {
    pub(crate) fn new(include_usage: bool) -> StreamState {
        StreamState { include_usage, ..StreamState::default() }
    }

    pub(crate) fn decode_event(&mut self, data: Bytes) -> Result<StreamEvent, Failure> {
        let response: Response = match serde_json::from_slice(&data) {
            Ok(response) => response,
            Err(err) => {
                return Err(Failure::bad_output(
                    format!("stream event is not a GenerateContentResponse: {err}"),
                    data,
                ));
            }
        };
        if let Some(error) = &response.error {
            // An explicit error event: a definite answer (see `StreamEvent`).
            let status = error.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok());
            let body = String::from_utf8_lossy(&data).into_owned();
            let status = status.filter(|s| (400..600).contains(s)).unwrap_or(500);
            return Err(with_retry_delay(Failure::Rejected { status, retry_after: None, body }));
        }
        let candidate = response.candidates.first();
        let said = said(candidate.and_then(|c| c.content.as_ref()), self.calls);
        if let Some(refusal) = refusal(&response, &said, self.said) {
            return Err(refusal.into_failure(data));
        }
        self.usage = response.usage_metadata.or(self.usage);
        self.calls += said.calls.len();
        let finish =
            candidate.and_then(|c| c.finish_reason.as_deref()).map(|r| finish_reason(r, self.calls > 0));
        self.finished |= finish.is_some();
        let text = said.text.unwrap_or_default();
        let called = !said.calls.is_empty();
        let mut chunk = StreamChunk {
            chunk: Value::Null,
            delta: text,
            finish_reason: finish,
            usage: None,
            raw: data,
            native: None,
            skipped: None,
        };
        if chunk.delta.is_empty() && !called && chunk.finish_reason.is_none() {
            return Ok(StreamEvent::Chunk(chunk)); // nothing a client would see (usage so far)
        }
        let mut delta = Map::new();
        if !self.started {
            delta.insert("role".into(), "assistant".into());
        }
        if !chunk.delta.is_empty() || (!self.started && !called) {
            delta.insert("content".into(), chunk.delta.clone().into());
        }
        if called {
            delta.insert("tool_calls".into(), Value::Array(said.calls));
        }
        self.started = true;
        self.said |= !chunk.delta.is_empty() || called;
        chunk.chunk = json!({"object": "chat.completion.chunk", "model": response.model_version,
            "choices": [{"index": 0, "delta": delta, "finish_reason": chunk.finish_reason}]});
        if chunk.finish_reason.is_some() {
            chunk.usage = self.usage.map(UsageMetadata::usage);
        }
        Ok(StreamEvent::Chunk(chunk))
    }

    /// The body ended cleanly: after the finishing chunk that is the end
    /// (with the usage chunk, if the request asked for one); before it,
    /// `None`: the answer is not whole.
    pub(crate) fn end_of_body(&mut self) -> Option<Option<StreamChunk>> {
        if !self.finished {
            return None;
        }
        let usage = self.usage.take().filter(|_| self.include_usage);
        Some(usage.map(|usage| StreamChunk::usage_only(usage.openai(), Some(usage.usage()), Bytes::new())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(body: Value) -> Result<Decoded, AnswerError> {
        decode_response(body.to_string().as_bytes())
    }

    #[test]
    fn an_answer_becomes_a_chat_completion() -> Result<(), AnswerError> {
        let answer = decoded(json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"text": "thinking…", "thought": true}, {"text": "Hello"}, {"text": " there"}]},
                "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 2, "thoughtsTokenCount": 3,
                "cachedContentTokenCount": 1, "totalTokenCount": 9},
            "modelVersion": "gemini-2.5-flash"
        }))?;
        assert_eq!(answer.text, "Hello there");
        assert_eq!(answer.finish_reason.as_deref(), Some("stop"));
        assert_eq!(answer.model.as_deref(), Some("gemini-2.5-flash"));
        assert_eq!(answer.usage, Some(Usage { prompt_tokens: 4, completion_tokens: 5 }));
        assert_eq!(
            answer.completion,
            json!({"object": "chat.completion", "model": "gemini-2.5-flash",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Hello there"}}],
                "usage": {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9,
                    "prompt_tokens_details": {"cached_tokens": 1}, "completion_tokens_details": {"reasoning_tokens": 3}}})
        );
        Ok(())
    }

    #[test]
    fn function_calls_become_tool_calls() -> Result<(), AnswerError> {
        let answer = decoded(json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}, "thoughtSignature": "c2ln"},
            {"functionCall": {"name": "now"}}]}, "finishReason": "STOP"}]}))?;
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        let message = &answer.completion["choices"][0]["message"];
        assert!(message["content"].is_null(), "{message}");
        let calls = message["tool_calls"].as_array().cloned().unwrap_or_default();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["function"], json!({"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}));
        assert_eq!(calls[0]["extra_content"], json!({"google": {"thought_signature": "c2ln"}}));
        assert_eq!(calls[1]["function"], json!({"name": "now", "arguments": "{}"}));
        for call in &calls {
            assert!(call["id"].as_str().is_some_and(|id| id.starts_with("call_")), "{call}");
            assert_eq!(call["type"], "function");
            assert!(call.get("index").is_none());
        }
        assert_ne!(calls[0]["id"], calls[1]["id"]);
        Ok(())
    }

    #[test]
    fn finish_reasons_speak_openai() {
        for (gemini, openai) in [
            ("STOP", "stop"),
            ("MAX_TOKENS", "length"),
            ("SAFETY", "content_filter"),
            ("RECITATION", "content_filter"),
            ("PROHIBITED_CONTENT", "content_filter"),
            ("BLOCKLIST", "content_filter"),
            ("SPII", "content_filter"),
            ("MALFORMED_FUNCTION_CALL", "malformed_function_call"),
        ] {
            assert_eq!(finish_reason(gemini, false), openai);
        }
        assert_eq!(finish_reason("STOP", true), "tool_calls");
    }

    #[test]
    fn a_block_is_a_content_refusal_and_partial_text_is_content_filter() {
        let blocked = decoded(json!({"promptFeedback": {"blockReason": "SAFETY"}}));
        assert_eq!(blocked.as_ref().err(), Some(&AnswerError::PromptBlocked("SAFETY".into())));
        let failure = blocked.err().map(|e| e.into_failure(Bytes::from_static(b"{}")));
        assert!(failure.is_some_and(|f| f.is_content_refusal()));
        let stopped = decoded(json!({"candidates": [{"finishReason": "SAFETY", "safetyRatings": []}]}));
        assert_eq!(stopped.err(), Some(AnswerError::Stopped("SAFETY".into())));
        let partial = decoded(
            json!({"candidates": [{"content": {"parts": [{"text": "Once"}]}, "finishReason": "RECITATION"}]}),
        );
        assert_eq!(partial.ok().and_then(|d| d.finish_reason).as_deref(), Some("content_filter"));
        for shape in
            [json!({"candidates": []}), json!({"candidates": [{"finishReason": "MAX_TOKENS"}]}), json!([1])]
        {
            let failure = decoded(shape.clone()).err().map(|e| e.into_failure(Bytes::new()));
            assert!(matches!(failure, Some(Failure::BadOutput { .. })), "{shape}: {failure:?}");
        }
    }

    #[test]
    fn a_retry_delay_in_the_body_is_the_wait() {
        let body = json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}})
        .to_string();
        let rejected = Failure::Rejected { status: 429, retry_after: None, body: body.clone() };
        assert!(
            matches!(with_retry_delay(rejected), Failure::Rejected { retry_after: Some(d), .. } if d == Duration::from_millis(1500))
        );
        let header = Failure::Rejected { status: 429, retry_after: Some(Duration::from_secs(3)), body };
        assert!(
            matches!(with_retry_delay(header), Failure::Rejected { retry_after: Some(d), .. } if d == Duration::from_secs(3))
        );
        let plain = Failure::Rejected { status: 503, retry_after: None, body: "nope".into() };
        assert!(matches!(with_retry_delay(plain), Failure::Rejected { retry_after: None, .. }));
    }

    fn chunk(state: &mut StreamState, event: Value) -> Result<StreamEvent, Failure> {
        state.decode_event(Bytes::from(event.to_string()))
    }

    fn shown(event: Result<StreamEvent, Failure>) -> Value {
        match event {
            Ok(StreamEvent::Chunk(chunk)) => chunk.chunk,
            _ => Value::Null,
        }
    }

    #[test]
    fn a_stream_becomes_openai_chunks_and_ends_with_its_body() {
        let mut state = StreamState::new(true);
        let usage = json!({"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5});
        let first = shown(chunk(
            &mut state,
            json!({"candidates": [{"content": {"parts": [{"text": "Hel"}]}}], "modelVersion": "g"}),
        ));
        assert_eq!(first["choices"][0]["delta"], json!({"role": "assistant", "content": "Hel"}));
        assert_eq!(first["model"], "g");
        assert!(state.end_of_body().is_none(), "not finished: the answer is not whole");
        let call = shown(chunk(
            &mut state,
            json!({"candidates": [{"content": {"parts": [
            {"functionCall": {"name": "f", "args": {"a": 1}}}]}}]}),
        ));
        assert_eq!(call["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(call["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        let last = chunk(
            &mut state,
            json!({"candidates": [{"content": {"parts": [{"text": "lo"}]}, "finishReason": "STOP"}], "usageMetadata": usage}),
        );
        let Ok(StreamEvent::Chunk(last)) = last else { panic!("a chunk") };
        assert_eq!(last.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(last.usage, Some(Usage { prompt_tokens: 3, completion_tokens: 2 }));
        assert_eq!(last.chunk["choices"][0]["delta"], json!({"content": "lo"}));
        let end = state.end_of_body().flatten().map(|c| c.chunk);
        assert_eq!(end.map(|c| c["usage"]["total_tokens"].clone()), Some(json!(5)));
    }

    #[test]
    fn a_stream_refused_before_it_said_anything_is_a_content_refusal() {
        let blocked = chunk(
            &mut StreamState::new(false),
            json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}),
        );
        assert!(blocked.err().is_some_and(|f| f.is_content_refusal()));
        let stopped =
            chunk(&mut StreamState::new(false), json!({"candidates": [{"finishReason": "SAFETY"}]}));
        assert!(stopped.err().is_some_and(|f| f.is_content_refusal()));
        let mut state = StreamState::new(false);
        let _ = chunk(&mut state, json!({"candidates": [{"content": {"parts": [{"text": "Once"}]}}]}));
        let late = shown(chunk(&mut state, json!({"candidates": [{"finishReason": "SAFETY"}]})));
        assert_eq!(late["choices"][0]["finish_reason"], "content_filter");
        assert_eq!(state.end_of_body(), Some(None), "whole, no usage asked for");
        let error =
            chunk(&mut StreamState::new(false), json!({"error": {"code": 503, "status": "UNAVAILABLE"}}));
        assert!(matches!(error, Err(Failure::Rejected { status: 503, .. })));
    }

    #[test]
    fn a_model_name_is_a_path_segment() {
        let paths = paths("sim:status=429;retry_after=0");
        assert_eq!(paths.chat, "/v1beta/models/sim:status=429;retry_after=0:generateContent");
        assert_eq!(
            paths.chat_stream.as_deref(),
            Some("/v1beta/models/sim:status=429;retry_after=0:streamGenerateContent?alt=sse")
        );
        assert_eq!(super::paths("a b/c").chat, "/v1beta/models/a%20b%2Fc:generateContent");
    }
}
