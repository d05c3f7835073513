//! OpenAI's Responses API as an upstream dialect (`POST {base}/responses`,
//! streamed as semantic events): where OpenAI's reasoning models keep their
//! reasoning across turns, as encrypted reasoning items a stateless client
//! sends back (`store: false`, `include: ["reasoning.encrypted_content"]`).
//!
//! A request that came through the Responses door is sent as the client
//! sent it ([`passthrough_body`]); any other is the job's chat view said in
//! Responses terms ([`request`]). Either way the answer is read into the
//! chat view the engine checks and charges ([`decode_response`], the
//! [`stream`] of events), and a passed-through answer is also kept as the
//! provider gave it, for the Responses door to replay.

mod request;
mod stream;

use serde_json::{Map, Value, json};

use crate::decoded::Decoded;
use crate::types::{ChatRequest, Usage};

pub(crate) use request::{cannot_express, request_body};
pub(crate) use stream::StreamState;

pub(crate) const PATH: &str = "/responses";

/// The client's own Responses request (see [`crate::Native`]) as this
/// provider is sent it: what the client sent, with only what the gateway
/// must set — the provider's model, the output limit the attempt reserves,
/// and whether it streams.
pub(crate) fn passthrough_body(
    native: &crate::Native,
    req: &ChatRequest,
    model: &str,
    stream: bool,
) -> Value {
    let mut body = native.body.clone();
    body.insert("model".into(), model.into());
    if let Some(limit) = req.max_tokens {
        body.insert("max_output_tokens".into(), limit.into());
    }
    body.remove("stream");
    if stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

/// A whole `response` object → the chat view: its message text, its
/// function calls as `tool_calls`, how it ended, its usage. Reasoning and
/// other items have no chat form; they stay in the provider's own answer.
pub(crate) fn decode_response(body: &[u8]) -> Result<Decoded, String> {
    let response: Value = serde_json::from_slice(body).map_err(|err| format!("not a response: {err}"))?;
    chat_view(&response)
}

/// [`decode_response`] of an already parsed `response` (a stream's last
/// event carries one whole).
pub(crate) fn chat_view(response: &Value) -> Result<Decoded, String> {
    if response.get("object").and_then(Value::as_str) != Some("response") {
        return Err("the answer is not a `response` object".into());
    }
    let status = response.get("status").and_then(Value::as_str).unwrap_or_default();
    if !matches!(status, "completed" | "incomplete") {
        return Err(format!("the response's status is `{status}`, not completed or incomplete"));
    }
    let output = response.get("output").and_then(Value::as_array).ok_or("no `output` in the response")?;
    let said = Said::of(output)?;
    let finish_reason = finish_reason(response, &said);
    if status == "completed" && said.is_empty() {
        return Err("the response has no message, refusal or function call".into());
    }
    let usage = usage_of(response.get("usage"));
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    let content =
        if said.text.is_empty() && !said.calls.is_empty() { Value::Null } else { said.text.clone().into() };
    message.insert("content".into(), content);
    if let Some(refusal) = &said.refusal {
        message.insert("refusal".into(), refusal.clone().into());
    }
    if !said.calls.is_empty() {
        message.insert("tool_calls".into(), said.calls.clone().into());
    }
    let model = response.get("model").and_then(Value::as_str).map(str::to_owned);
    let mut completion = json!({
        "id": response.get("id"),
        "object": "chat.completion",
        "created": response.get("created_at"),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    });
    if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
        completion["usage"] = chat_usage(usage);
    }
    Ok(Decoded { completion, text: said.text, usage, finish_reason: Some(finish_reason.into()), model })
}

/// What a response's output items say in chat terms.
#[derive(Default)]
struct Said {
    text: String,
    refusal: Option<String>,
    /// Chat `tool_calls`.
    calls: Vec<Value>,
}

impl Said {
    fn of(output: &[Value]) -> Result<Said, String> {
        let mut said = Said::default();
        for (index, item) in output.iter().enumerate() {
            match item.get("type").and_then(Value::as_str) {
                Some("message") => {
                    let parts = item.get("content").and_then(Value::as_array).into_iter().flatten();
                    for part in parts {
                        match part.get("type").and_then(Value::as_str) {
                            Some("output_text") => {
                                said.text.push_str(part["text"].as_str().unwrap_or_default())
                            }
                            Some("refusal") => {
                                said.refusal = part["refusal"].as_str().map(str::to_owned);
                            }
                            _ => {}
                        }
                    }
                }
                Some("function_call") => {
                    let (Some(id), Some(name)) = (item["call_id"].as_str(), item["name"].as_str()) else {
                        return Err(format!("output[{index}]: a function_call without `call_id` or `name`"));
                    };
                    let arguments = item["arguments"].as_str().unwrap_or("{}");
                    said.calls.push(
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}),
                    );
                }
                Some("custom_tool_call") => {
                    said.calls.push(json!({"id": item["call_id"], "type": "custom",
                        "custom": {"name": item["name"], "input": item["input"]}}));
                }
                // Reasoning and server-side tool calls have no chat form.
                _ => {}
            }
        }
        Ok(said)
    }

    fn is_empty(&self) -> bool {
        self.text.is_empty() && self.refusal.is_none() && self.calls.is_empty()
    }
}

/// How a response ended, in chat's words.
fn finish_reason(response: &Value, said: &Said) -> &'static str {
    match response.pointer("/incomplete_details/reason").and_then(Value::as_str) {
        Some("max_output_tokens") => "length",
        Some("content_filter") => "content_filter",
        _ if !said.calls.is_empty() => "tool_calls",
        _ => "stop",
    }
}

/// The Responses `usage` as token counts.
pub(crate) fn usage_of(usage: Option<&Value>) -> Option<Usage> {
    let usage = usage.filter(|u| u.is_object())?;
    Some(Usage {
        prompt_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
        completion_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
    })
}

/// The Responses `usage` in chat's shape, details (cached input, reasoning
/// output) kept.
pub(crate) fn chat_usage(usage: &Value) -> Value {
    let tokens = |name: &str| usage[name].as_u64().unwrap_or(0);
    json!({
        "prompt_tokens": tokens("input_tokens"),
        "completion_tokens": tokens("output_tokens"),
        "total_tokens": tokens("input_tokens") + tokens("output_tokens"),
        "prompt_tokens_details": {"cached_tokens": usage.pointer("/input_tokens_details/cached_tokens").and_then(Value::as_u64).unwrap_or(0)},
        "completion_tokens_details": {"reasoning_tokens": usage.pointer("/output_tokens_details/reasoning_tokens").and_then(Value::as_u64).unwrap_or(0)},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_becomes_the_chat_view_and_reasoning_stays_out_of_it() -> Result<(), String> {
        let body = json!({"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "m",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "hello", "annotations": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}"}],
            "usage": {"input_tokens": 5, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 3},
                "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 12}});
        let decoded = decode_response(body.to_string().as_bytes())?;
        assert_eq!(decoded.text, "hello");
        assert_eq!(decoded.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(decoded.usage, Some(Usage { prompt_tokens: 5, completion_tokens: 7 }));
        let completion = &decoded.completion;
        assert_eq!(completion["choices"][0]["message"]["tool_calls"][0]["id"], "call_1");
        assert_eq!(completion["usage"]["completion_tokens_details"]["reasoning_tokens"], 4);
        assert_eq!(completion["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
        Ok(())
    }

    #[test]
    fn an_empty_or_failed_response_is_not_an_answer() {
        let empty = json!({"object": "response", "status": "completed", "output": []});
        assert!(decode_response(empty.to_string().as_bytes()).is_err());
        let failed = json!({"object": "response", "status": "failed", "output": [], "error": {"code": "server_error"}});
        assert!(decode_response(failed.to_string().as_bytes()).is_err());
        let cut = json!({"object": "response", "status": "incomplete", "output": [],
            "incomplete_details": {"reason": "max_output_tokens"}});
        assert_eq!(
            decode_response(cut.to_string().as_bytes()).ok().and_then(|d| d.finish_reason),
            Some("length".into())
        );
    }
}
