//! Anthropic's shapes, rendered from a job: a `message` from its stored
//! completion, the Messages stream's events from its chunks, and errors.
//! Pure functions of the stored job (the stream renderer runs the same
//! over live chunks and a replay's stored ones), so a replay is the
//! original byte for byte.

use serde_json::{Map, Value, json};

use crate::api::door::{StreamRender, errors::slug};
use crate::jobs::{Job, JobResult};

/// The parts of a job a message is made of.
#[derive(Clone)]
pub struct Identity {
    id: String,
    model: String,
}

impl Identity {
    pub fn of(job: &Job) -> Identity {
        Identity { id: format!("msg_{}", job.id.simple()), model: job.route.clone() }
    }
}

/// OpenAI's `finish_reason` → Anthropic's `stop_reason`.
fn stop_reason(finish: Option<&str>) -> Value {
    match finish {
        None => Value::Null,
        Some("length") => "max_tokens".into(),
        Some("tool_calls" | "function_call") => "tool_use".into(),
        Some("content_filter") => "refusal".into(),
        Some(_) => "end_turn".into(),
    }
}

/// OpenAI usage → Anthropic's (`input_tokens`, `output_tokens`).
fn usage_of(usage: Option<&Value>) -> Value {
    let tokens = |name: &str| usage.and_then(|u| u[name].as_u64()).unwrap_or(0);
    json!({"input_tokens": tokens("prompt_tokens"), "output_tokens": tokens("completion_tokens")})
}

/// A succeeded job's `message`: choice 0's text as a text block, its tool
/// calls as `tool_use` blocks (arguments parsed; a call whose arguments
/// are not a JSON object keeps them as `{"arguments": "<text>"}`).
pub fn message_body(identity: &Identity, result: &JobResult) -> Option<Vec<u8>> {
    // The provider's own message, when the request passed through to it.
    if let Some(native) = &result.native {
        return serde_json::to_vec(native).ok();
    }
    let completion = result.completion.as_ref()?;
    let choice = &completion["choices"][0];
    let message = &choice["message"];
    let mut content = Vec::new();
    if let Some(text) = message["content"].as_str().filter(|text| !text.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in message["tool_calls"].as_array().into_iter().flatten() {
        let arguments = call["function"]["arguments"].as_str().unwrap_or("{}");
        content.push(json!({"type": "tool_use", "id": call["id"], "name": call["function"]["name"],
            "input": tool_input(arguments)}));
    }
    let body = json!({
        "id": identity.id, "type": "message", "role": "assistant", "model": identity.model,
        "content": content, "stop_reason": stop_reason(choice["finish_reason"].as_str()),
        "stop_sequence": null, "usage": usage_of(completion.get("usage")),
    });
    serde_json::to_vec(&body).ok()
}

fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(input @ Value::Object(_)) => input,
        _ => json!({"arguments": arguments}),
    }
}

/// Which content block is open in the stream.
#[derive(PartialEq)]
enum Open {
    None,
    Text,
    /// The tool call of this chunk index.
    Tool(u64),
}

/// The Messages stream: `message_start`, `ping`, then per content block
/// `content_block_start`, its deltas (`text_delta`, `input_json_delta`)
/// and `content_block_stop`, then `message_delta` (the stop reason and
/// usage) and `message_stop`. Chunks carry choice 0 only (`n` is 1 here).
pub struct EventStream {
    identity: Identity,
    started: bool,
    open: Open,
    blocks: u64,
    stop_reason: Option<String>,
    usage: Option<Value>,
    /// The stream is the provider's own events, passed on as they came.
    native: bool,
}

impl EventStream {
    pub fn new(identity: Identity) -> EventStream {
        EventStream {
            identity,
            started: false,
            open: Open::None,
            blocks: 0,
            stop_reason: None,
            usage: None,
            native: false,
        }
    }

    /// A provider's own event, as it sent it; a whole `message` (a plain
    /// answer replayed as a stream) as the events that stream it.
    fn native_event(&mut self, native: &Value) -> Vec<u8> {
        self.native = true;
        let mut out = Vec::new();
        match native["type"].as_str() {
            Some("message") => message_events(&mut out, native),
            Some(name) => event(&mut out, name, native),
            None => {}
        }
        out
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let message = json!({"id": self.identity.id, "type": "message", "role": "assistant",
            "model": self.identity.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0}});
        event(out, "message_start", &json!({"type": "message_start", "message": message}));
        event(out, "ping", &json!({"type": "ping"}));
    }

    /// Opens `block` unless it is the one open, closing that one first.
    fn open(&mut self, out: &mut Vec<u8>, block: Open, start: Value) {
        if self.open == block {
            return;
        }
        self.close(out);
        self.open = block;
        let index = self.blocks;
        event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        );
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.open != Open::None {
            event(out, "content_block_stop", &json!({"type": "content_block_stop", "index": self.blocks}));
            self.open = Open::None;
            self.blocks += 1;
        }
    }

    fn delta(&self, out: &mut Vec<u8>, delta: Value) {
        event(
            out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": self.blocks, "delta": delta}),
        );
    }
}

impl StreamRender for EventStream {
    fn chunk(&mut self, chunk: &Value) -> Vec<u8> {
        if let Some(native) = JobResult::native_event(chunk) {
            return self.native_event(native);
        }
        if self.native {
            // The provider's own events said it all; a translated usage
            // chunk after them would start a second message.
            return Vec::new();
        }
        let mut out = Vec::new();
        self.start(&mut out);
        if let Some(usage) = chunk.get("usage").filter(|usage| usage.is_object()) {
            self.usage = Some(usage.clone());
        }
        let choice = &chunk["choices"][0];
        if let Some(finish) = choice["finish_reason"].as_str() {
            self.stop_reason = Some(finish.to_owned());
        }
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|text| !text.is_empty()) {
            self.open(&mut out, Open::Text, json!({"type": "text", "text": ""}));
            self.delta(&mut out, json!({"type": "text_delta", "text": text}));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(0);
            let start =
                json!({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": {}});
            self.open(&mut out, Open::Tool(index), start);
            if let Some(fragment) = call["function"]["arguments"].as_str().filter(|f| !f.is_empty()) {
                self.delta(&mut out, json!({"type": "input_json_delta", "partial_json": fragment}));
            }
        }
        out
    }

    fn done(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.native {
            // The provider's `message_delta` went by; only the end is ours.
            event(&mut out, "message_stop", &json!({"type": "message_stop"}));
            return out;
        }
        self.start(&mut out);
        self.close(&mut out);
        let delta = json!({"stop_reason": stop_reason(self.stop_reason.as_deref()), "stop_sequence": null});
        let usage = usage_of(self.usage.as_ref());
        event(&mut out, "message_delta", &json!({"type": "message_delta", "delta": delta, "usage": usage}));
        event(&mut out, "message_stop", &json!({"type": "message_stop"}));
        out
    }

    /// Anthropic's in-band `error` event; no `message_stop` follows.
    fn failed(&mut self, code: &str, message: &str) -> Vec<u8> {
        let mut out = Vec::new();
        let error =
            json!({"type": "error", "error": {"type": "api_error", "message": message, "code": code}});
        event(&mut out, "error", &error);
        out
    }
}

/// A whole `message` as the events that stream it: its start (content
/// empty), each block started whole and stopped, and its stop reason and
/// usage. `message_stop` is [`StreamRender::done`]'s.
fn message_events(out: &mut Vec<u8>, message: &Value) {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    event(out, "message_start", &json!({"type": "message_start", "message": start}));
    for (index, block) in message["content"].as_array().into_iter().flatten().enumerate() {
        let started = json!({"type": "content_block_start", "index": index, "content_block": block});
        event(out, "content_block_start", &started);
        event(out, "content_block_stop", &json!({"type": "content_block_stop", "index": index}));
    }
    let delta = json!({"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]});
    event(out, "message_delta", &json!({"type": "message_delta", "delta": delta, "usage": message["usage"]}));
}

fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend(format!("event: {name}\ndata: ").as_bytes());
    out.extend(serde_json::to_vec(data).unwrap_or_default());
    out.extend(b"\n\n");
}

/// A problem as Anthropic's SDKs read an error:
/// `{"type": "error", "error": {"type", "message"}}`, with the problem's
/// other members beside it and its own type URI as `problem_type`.
pub fn error_body(mut problem: Map<String, Value>) -> Map<String, Value> {
    let code = slug(&problem).map(str::to_owned);
    let kind = match (code.as_deref(), problem.get("status").and_then(Value::as_u64)) {
        (Some("budget-exhausted"), _) => "billing_error",
        (Some("tokenizer-busy"), _) => "overloaded_error",
        (_, Some(401)) => "authentication_error",
        (_, Some(403)) => "permission_error",
        (_, Some(404)) => "not_found_error",
        (_, Some(413)) => "request_too_large",
        (_, Some(429)) => "rate_limit_error",
        (_, Some(529)) => "overloaded_error",
        (_, Some(status)) if status >= 500 => "api_error",
        _ => "invalid_request_error",
    };
    if let Some(kind) = problem.remove("type") {
        problem.insert("problem_type".into(), kind);
    }
    let message = problem.get("detail").cloned().unwrap_or(Value::Null);
    problem.insert("type".into(), "error".into());
    problem.insert("error".into(), json!({"type": kind, "message": message, "code": code}));
    problem
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity { id: "msg_1".into(), model: "chat".into() }
    }

    fn events(bytes: &[u8]) -> Vec<Value> {
        String::from_utf8_lossy(bytes)
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str(data).ok())
            .collect()
    }

    #[test]
    fn text_then_a_tool_call_opens_and_closes_two_blocks() {
        let mut stream = EventStream::new(identity());
        let mut out = Vec::new();
        for chunk in [
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me look."}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1",
                "function": {"name": "get_weather", "arguments": ""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"x\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3}}),
        ] {
            out.extend(stream.chunk(&chunk));
        }
        out.extend(stream.done());
        let kinds: Vec<String> =
            events(&out).iter().map(|e| e["type"].as_str().unwrap_or("").to_owned()).collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "ping",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let all = events(&out);
        assert_eq!(all[5]["index"], 1);
        assert_eq!(all[5]["content_block"]["name"], "get_weather");
        assert_eq!(all[9]["delta"]["stop_reason"], "tool_use");
        assert_eq!(all[9]["usage"], json!({"input_tokens": 7, "output_tokens": 3}));
    }

    #[test]
    fn an_error_keeps_the_problem_and_speaks_anthropic() {
        let Value::Object(problem) = json!({"type": "https://intentgate.dev/problems/idempotency-key-reused",
            "status": 409, "detail": "bound", "job_id": "j"})
        else {
            unreachable!()
        };
        let body = error_body(problem);
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["message"], "bound");
        assert_eq!(body["problem_type"], "https://intentgate.dev/problems/idempotency-key-reused");
        assert_eq!(body["job_id"], "j");
    }
}
