//! A Responses event stream read into chat chunks: text deltas become
//! `content` deltas, a function call's item and argument deltas
//! `tool_calls` deltas, and `response.completed` (or `.incomplete`) the
//! finish with the usage — the stream's end, as Responses streams have no
//! `[DONE]`. A passed-through request keeps every event as sent.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::decoded::StreamEvent;
use crate::outcome::Failure;
use crate::types::StreamChunk;

/// Stream state: which output items are function calls (chat numbers
/// tool calls apart from text), whether the role went out.
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    /// The `output_index` of each function call, in tool-call order.
    calls: Vec<u64>,
    started: bool,
    /// After `response.completed`: the stream is over, with this last
    /// chunk (the usage, when asked for) still to go out.
    end: Option<Option<StreamChunk>>,
    include_usage: bool,
    /// Every event is kept as sent ([`StreamChunk::native`]).
    passthrough: bool,
}

/// A chat chunk of choice 0 with this `delta` (and `finish_reason`).
fn chat_chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({"object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})
}

impl StreamState {
    pub(crate) fn new(include_usage: bool, passthrough: bool) -> StreamState {
        StreamState { include_usage, passthrough, ..StreamState::default() }
    }

    pub(crate) fn decode_event(&mut self, data: Bytes) -> Result<StreamEvent, Failure> {
        let event: Value = serde_json::from_slice(&data).map_err(|err| {
            Failure::bad_output(format!("stream event is not an event: {err}"), data.clone())
        })?;
        let kind = event.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
        let mut chunk = StreamChunk {
            chunk: Value::Null,
            delta: String::new(),
            finish_reason: None,
            usage: None,
            raw: data.clone(),
            native: None,
            skipped: None,
        };
        match kind.as_str() {
            "response.completed" | "response.incomplete" => return self.finish(event, chunk),
            "response.failed" | "error" => return Err(rejected(&event, &data)),
            "response.created" if !self.started => {
                self.started = true;
                chunk.chunk = chat_chunk(json!({"role": "assistant", "content": ""}), None);
                if let (Some(model), Some(fields)) =
                    (event.pointer("/response/model"), chunk.chunk.as_object_mut())
                {
                    fields.insert("model".into(), model.clone());
                }
            }
            "response.output_text.delta" => {
                chunk.delta = event["delta"].as_str().unwrap_or_default().to_owned();
                chunk.chunk = chat_chunk(json!({"content": chunk.delta}), None);
            }
            "response.refusal.delta" => chunk.chunk = chat_chunk(json!({"refusal": event["delta"]}), None),
            "response.output_item.added" if event.pointer("/item/type") == Some(&json!("function_call")) => {
                let index = self.calls.len();
                self.calls.push(event["output_index"].as_u64().unwrap_or(0));
                let item = &event["item"];
                chunk.chunk = chat_chunk(
                    json!({"tool_calls": [{"index": index, "id": item["call_id"], "type": "function",
                        "function": {"name": item["name"], "arguments": ""}}]}),
                    None,
                );
            }
            "response.function_call_arguments.delta" => {
                let output_index = event["output_index"].as_u64().unwrap_or(0);
                if let Some(index) = self.calls.iter().position(|i| *i == output_index) {
                    chunk.chunk = chat_chunk(
                        json!({"tool_calls": [{"index": index, "function": {"arguments": event["delta"]}}]}),
                        None,
                    );
                }
            }
            _ => {}
        }
        if self.passthrough {
            chunk.native = Some(event);
        }
        Ok(StreamEvent::Chunk(chunk))
    }

    /// The last event: the whole response, read for how it ended (the
    /// finish chunk) and its usage (a chunk with no choices, as OpenAI
    /// ends a stream that asked for it, or the client's own last event
    /// when passed through). The stream is over: [`StreamState::take_end`].
    fn finish(&mut self, event: Value, mut chunk: StreamChunk) -> Result<StreamEvent, Failure> {
        let response = &event["response"];
        let decoded =
            super::chat_view(response).map_err(|reason| Failure::bad_output(reason, chunk.raw.clone()))?;
        let finish = decoded.finish_reason.unwrap_or_else(|| "stop".into());
        chunk.chunk = chat_chunk(json!({}), Some(&finish));
        chunk.finish_reason = Some(finish);
        chunk.usage = decoded.usage;
        let usage = response.get("usage").filter(|u| u.is_object());
        let usage_chunk = usage
            .filter(|_| self.include_usage && !self.passthrough)
            .map(|usage| StreamChunk::usage_only(super::chat_usage(usage), decoded.usage, chunk.raw.clone()));
        self.end = Some(usage_chunk);
        if self.passthrough {
            chunk.native = Some(event);
        }
        Ok(StreamEvent::Chunk(chunk))
    }

    /// Once the last event was read: the stream is over, with this last
    /// chunk (if any) — whatever the connection does next.
    pub(crate) fn take_end(&mut self) -> Option<Option<StreamChunk>> {
        self.end.take()
    }
}

/// `response.failed` or an `error` event: the provider answered, and will
/// send nothing more (see `StreamEvent`).
fn rejected(event: &Value, data: &Bytes) -> Failure {
    let code = event
        .pointer("/response/error/code")
        .or_else(|| event.get("code"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let status = match code {
        "rate_limit_exceeded" => 429,
        "invalid_prompt" | "invalid_request_error" => 400,
        _ => 500,
    };
    Failure::Rejected { status, retry_after: None, body: String::from_utf8_lossy(data).into_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(state: &mut StreamState, event: Value) -> Result<StreamEvent, Failure> {
        state.decode_event(Bytes::from(event.to_string()))
    }

    #[test]
    fn a_function_call_stream_becomes_tool_call_deltas_and_ends_on_completed() -> Result<(), Failure> {
        let mut state = StreamState::new(true, true);
        let call =
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w", "arguments": ""});
        let events = [
            json!({"type": "response.created", "response": {"model": "m", "status": "in_progress"}}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": call}),
            json!({"type": "response.function_call_arguments.delta", "output_index": 1, "delta": "{}"}),
        ];
        let mut chunks = Vec::new();
        for event in events {
            match decode(&mut state, event)? {
                StreamEvent::Chunk(chunk) => chunks.push(chunk),
                StreamEvent::End(_) => panic!("not the end yet"),
            }
        }
        assert_eq!(chunks[1].chunk["choices"][0]["delta"]["tool_calls"][0]["id"], "call_1");
        assert_eq!(chunks[2].chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{}");
        assert!(chunks.iter().all(|c| c.native.is_some()), "passed through: every event kept");
        let done = json!({"type": "response.completed", "response": {"object": "response", "status": "completed",
            "output": [{"type": "function_call", "call_id": "call_1", "name": "w", "arguments": "{}"}],
            "usage": {"input_tokens": 2, "output_tokens": 3}}});
        let StreamEvent::Chunk(last) = decode(&mut state, done)? else { panic!("the finish") };
        assert_eq!(last.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(last.usage.map(|u| u.completion_tokens), Some(3));
        assert!(
            matches!(state.take_end(), Some(None)),
            "over; passed through, the event itself carried the usage"
        );
        Ok(())
    }

    #[test]
    fn a_failed_response_is_a_rejection() {
        let mut state = StreamState::new(false, false);
        let failed =
            json!({"type": "response.failed", "response": {"error": {"code": "rate_limit_exceeded"}}});
        assert!(matches!(decode(&mut state, failed), Err(Failure::Rejected { status: 429, .. })));
    }
}
