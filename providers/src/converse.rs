//! Amazon Bedrock's `Converse` API (`POST /model/{modelId}/converse`, and
//! `…/converse-stream`), the one request shape Bedrock gives every model it
//! hosts: Llama, Mistral, Amazon Nova, Claude too. A translated dialect
//! like Gemini's: the OpenAI-shaped request becomes a Converse request
//! ([`request`]), and the answer, whole or streamed, comes back in
//! OpenAI's `chat.completion` shape. Signing, addressing and the binary
//! event stream are Bedrock's (see `crate::bedrock`); a streamed event is
//! handed over as `{"<event type>": <payload>}`, the shape of Converse's
//! stream union.
//!
//! A guardrail that stopped the answer before it said anything is the
//! content-policy refusal the other dialects answer with a 400.

mod request;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::bedrock::sigv4;
use crate::decoded::{Decoded, StreamEvent};
use crate::outcome::Failure;
use crate::transport::Paths;
use crate::types::{ChatRequest, StreamChunk, Usage};

use request::JSON_ANSWER;
pub(crate) use request::{asks_json, request_body};

/// Where a model's Converse operations are (the id one path segment).
pub(crate) fn paths(model: &str) -> Paths {
    let base = format!("/model/{}", sigv4::encode(model.as_bytes()));
    Paths {
        chat: format!("{base}/converse"),
        chat_stream: Some(format!("{base}/converse-stream")),
        embeddings: format!("{base}/invoke"),
    }
}

/// Why `req` cannot be said in Converse, if so.
pub(crate) fn cannot_express(req: &ChatRequest) -> Option<String> {
    request_body(req).err()
}

/// Converse's token counts. Cache reads and writes are apart from
/// `inputTokens`, as Anthropic reports them.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConverseUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
    #[serde(default)]
    cache_write_input_tokens: u64,
}

impl ConverseUsage {
    fn usage(self) -> Usage {
        let prompt_tokens = self.input_tokens + self.cache_read_input_tokens + self.cache_write_input_tokens;
        Usage { prompt_tokens, completion_tokens: self.output_tokens }
    }

    /// OpenAI's `usage` member, cache reads and writes in its details.
    fn openai(self) -> Value {
        self.usage().openai_with_cache(self.cache_read_input_tokens, self.cache_write_input_tokens)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Response {
    output: Output,
    stop_reason: String,
    usage: Option<ConverseUsage>,
}

#[derive(Debug, Deserialize)]
struct Output {
    message: OutMessage,
}

#[derive(Debug, Deserialize)]
struct OutMessage {
    content: Vec<Value>,
}

/// `stopReason` in OpenAI's vocabulary.
fn finish_reason(reason: &str) -> String {
    match reason {
        "end_turn" | "stop_sequence" => "stop".into(),
        "max_tokens" | "model_context_window_exceeded" => "length".into(),
        "tool_use" => "tool_calls".into(),
        "guardrail_intervened" | "content_filtered" => "content_filter".into(),
        other => other.into(),
    }
}

/// A `toolUse` block as an OpenAI tool call.
fn tool_call(block: &Value) -> Option<Value> {
    let tool = block.get("toolUse")?;
    let arguments = tool.get("input").cloned().unwrap_or_else(|| json!({})).to_string();
    Some(json!({"id": tool.get("toolUseId"), "type": "function",
        "function": {"name": tool.get("name"), "arguments": arguments}}))
}

/// Whether `block` is the call of [`JSON_ANSWER`], whose input is the
/// answer a JSON request asked for.
fn is_json_answer(block: &Value) -> bool {
    block.pointer("/toolUse/name").and_then(Value::as_str) == Some(JSON_ANSWER)
}

/// The answer in OpenAI's `chat.completion` shape: `text` blocks as
/// `content`, `toolUse` blocks as `tool_calls` — but for a request that
/// asked for JSON (`json_answer`), whose [`JSON_ANSWER`] call's input is
/// the content; reasoning blocks are the model's own and are left out
/// (their tokens are in the output's).
pub(crate) fn decode_response(raw: &Bytes, json_answer: bool) -> Result<Decoded, Failure> {
    let bad = |reason: String| Failure::bad_output(reason, raw.clone());
    let response: Response =
        serde_json::from_slice(raw).map_err(|err| bad(format!("not a Converse response: {err}")))?;
    let blocks = &response.output.message.content;
    let answered = blocks.iter().find(|block| json_answer && is_json_answer(block));
    let text: Option<String> = match answered {
        Some(block) => block.pointer("/toolUse/input").map(Value::to_string),
        None => blocks
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .fold(None, |text, piece| Some(text.unwrap_or_default() + piece)),
    };
    let calls: Vec<Value> =
        blocks.iter().filter(|b| answered.is_none() || !is_json_answer(b)).filter_map(tool_call).collect();
    let finish = match answered {
        Some(_) if response.stop_reason == "tool_use" => "stop".to_owned(),
        _ => finish_reason(&response.stop_reason),
    };
    if text.as_deref().is_none_or(str::is_empty) && calls.is_empty() {
        if finish == "content_filter" {
            let why =
                format!("Bedrock stopped the answer before it said anything ({})", response.stop_reason);
            return Err(Failure::content_refusal(&why, raw));
        }
        if text.is_none() {
            return Err(bad(format!("the answer has neither text nor a toolUse (stopReason {finish})")));
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert("content".into(), text.clone().map_or(Value::Null, Value::String));
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    let mut completion = json!({"object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}]});
    if let (Some(usage), Some(object)) = (response.usage, completion.as_object_mut()) {
        object.insert("usage".into(), usage.openai());
    }
    Ok(Decoded {
        completion,
        text: text.unwrap_or_default(),
        usage: response.usage.map(ConverseUsage::usage),
        finish_reason: Some(finish),
        model: None,
    })
}

/// A streamed answer: `messageStart`, then per content block an optional
/// `contentBlockStart` (a tool's id and name), `contentBlockDelta`s (text,
/// or a tool's input in JSON pieces) and `contentBlockStop`, then
/// `messageStop` (the stop reason) and `metadata` (the usage), the last
/// event: the stream is over with it. The finish chunk is sent with the
/// usage, so the charge sees it; a usage chunk follows when the request
/// asked (`stream_options.include_usage`).
#[derive(Debug, Default)]
pub(crate) struct StreamState {
    include_usage: bool,
    /// The request asked for JSON: [`JSON_ANSWER`]'s input is the text.
    json_answer: bool,
    /// The content block the JSON answer is said in.
    json_block: Option<u64>,
    /// Tool calls started so far (OpenAI numbers them across the stream),
    /// and the content block each was started in.
    calls: Vec<u64>,
    /// Something a client sees was said (so no refusal can follow).
    said: bool,
    finish: Option<String>,
    /// `metadata` came: the stream is over, with this usage chunk (if any).
    end: Option<Option<StreamChunk>>,
}

impl StreamState {
    pub(crate) fn new(include_usage: bool, json_answer: bool) -> StreamState {
        StreamState { include_usage, json_answer, ..StreamState::default() }
    }

    pub(crate) fn decode_event(&mut self, data: Bytes) -> Result<StreamEvent, Failure> {
        let event: Map<String, Value> = serde_json::from_slice(&data).map_err(|err| {
            Failure::bad_output(format!("a Converse stream event is not JSON: {err}"), data.clone())
        })?;
        let Some((kind, payload)) = event.iter().next() else {
            return Err(Failure::bad_output("an empty Converse stream event", data));
        };
        let index = payload.get("contentBlockIndex").and_then(Value::as_u64).unwrap_or(0);
        let delta = match kind.as_str() {
            "messageStart" => json!({"role": "assistant", "content": ""}),
            "contentBlockStart" => match payload.pointer("/start/toolUse") {
                Some(tool)
                    if self.json_answer && tool.get("name").and_then(Value::as_str) == Some(JSON_ANSWER) =>
                {
                    self.json_block = Some(index);
                    return Ok(self.quiet(data));
                }
                Some(tool) => {
                    self.calls.push(index);
                    self.said = true;
                    json!({"tool_calls": [{"index": self.calls.len() - 1, "id": tool.get("toolUseId"),
                        "type": "function", "function": {"name": tool.get("name"), "arguments": ""}}]})
                }
                None => return Ok(self.quiet(data)),
            },
            "contentBlockDelta" => {
                match (payload.pointer("/delta/text"), payload.pointer("/delta/toolUse/input")) {
                    (Some(Value::String(text)), _) => {
                        self.said |= !text.is_empty();
                        return Ok(self.text(text.clone(), data));
                    }
                    (_, Some(Value::String(input))) if self.json_block == Some(index) => {
                        self.said |= !input.is_empty();
                        return Ok(self.text(input.clone(), data));
                    }
                    (_, Some(Value::String(input))) => {
                        let call = self.calls.iter().position(|block| *block == index).unwrap_or(0);
                        json!({"tool_calls": [{"index": call, "function": {"arguments": input}}]})
                    }
                    _ => return Ok(self.quiet(data)), // reasoning: the model's own
                }
            }
            "messageStop" => {
                let reason = payload.get("stopReason").and_then(Value::as_str).unwrap_or_default();
                let finish = match reason {
                    "tool_use" if self.json_block.is_some() && self.calls.is_empty() => "stop".to_owned(),
                    reason => finish_reason(reason),
                };
                if finish == "content_filter" && !self.said {
                    let why = format!("Bedrock stopped the answer before it said anything ({reason})");
                    return Err(Failure::content_refusal(&why, &data));
                }
                self.finish = Some(finish);
                return Ok(self.quiet(data));
            }
            "metadata" => return Ok(self.metadata(payload, data)),
            "contentBlockStop" => return Ok(self.quiet(data)),
            other => {
                let why = format!("`{other}` is not a Converse stream event");
                return Err(Failure::bad_output(why, data));
            }
        };
        Ok(StreamEvent::Chunk(chunk(delta, None, data)))
    }

    /// The stream is over after `metadata` (see `crate::stream`).
    pub(crate) fn take_end(&mut self) -> Option<Option<StreamChunk>> {
        self.end.take()
    }

    fn text(&self, text: String, data: Bytes) -> StreamEvent {
        let mut chunk = chunk(json!({"content": text}), None, data);
        chunk.delta = text;
        StreamEvent::Chunk(chunk)
    }

    /// An event that means nothing to a client.
    fn quiet(&self, data: Bytes) -> StreamEvent {
        StreamEvent::Chunk(StreamChunk {
            chunk: Value::Null,
            delta: String::new(),
            finish_reason: None,
            usage: None,
            raw: data,
            native: None,
            skipped: None,
        })
    }

    /// `metadata`: the finish chunk, with the usage; the stream ends after it.
    fn metadata(&mut self, payload: &Value, data: Bytes) -> StreamEvent {
        let usage: Option<ConverseUsage> =
            payload.get("usage").and_then(|usage| serde_json::from_value(usage.clone()).ok());
        let mut finish = chunk(json!({}), self.finish.clone(), data);
        finish.usage = usage.map(ConverseUsage::usage);
        let usage_chunk =
            |usage: ConverseUsage| StreamChunk::usage_only(usage.openai(), Some(usage.usage()), Bytes::new());
        self.end = Some(usage.filter(|_| self.include_usage).map(usage_chunk));
        StreamEvent::Chunk(finish)
    }
}

/// A chat chunk of choice 0 with `delta`.
fn chunk(delta: Value, finish_reason: Option<String>, raw: Bytes) -> StreamChunk {
    StreamChunk {
        chunk: json!({"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}),
        delta: String::new(),
        finish_reason,
        usage: None,
        raw,
        native: None,
        skipped: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_becomes_a_chat_completion() {
        let raw = Bytes::from(
            json!({"output": {"message": {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "hm"}}},
                {"text": "Checking."},
                {"toolUse": {"toolUseId": "tooluse_1", "name": "weather", "input": {"city": "Oslo"}}}]}},
                "stopReason": "tool_use",
                "usage": {"inputTokens": 10, "outputTokens": 4, "totalTokens": 24, "cacheReadInputTokens": 8,
                    "cacheWriteInputTokens": 2},
                "metrics": {"latencyMs": 120}})
            .to_string(),
        );
        let decoded = decode_response(&raw, false).ok();
        let decoded = decoded.as_ref();
        assert_eq!(decoded.map(|d| d.text.as_str()), Some("Checking."));
        assert_eq!(decoded.and_then(|d| d.usage), Some(Usage { prompt_tokens: 20, completion_tokens: 4 }));
        let completion = decoded.map(|d| d.completion.clone()).unwrap_or_default();
        assert_eq!(completion["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            completion["choices"][0]["message"]["tool_calls"][0],
            json!({"id": "tooluse_1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}})
        );
        assert_eq!(
            completion["usage"]["prompt_tokens_details"],
            json!({"cached_tokens": 8, "cache_write_tokens": 2})
        );
        let stopped = Bytes::from(
            json!({"output": {"message": {"role": "assistant", "content": []}}, "stopReason": "guardrail_intervened"})
                .to_string(),
        );
        assert!(decode_response(&stopped, false).is_err_and(|failure| failure.is_content_refusal()));
        assert!(matches!(
            decode_response(&Bytes::from_static(b"[1]"), false),
            Err(Failure::BadOutput { .. })
        ));
        let json = Bytes::from(
            json!({"output": {"message": {"role": "assistant", "content": [
                {"toolUse": {"toolUseId": "t", "name": JSON_ANSWER, "input": {"name": "Ann"}}}]}},
                "stopReason": "tool_use"})
            .to_string(),
        );
        let decoded = decode_response(&json, true).ok();
        assert_eq!(decoded.as_ref().map(|d| d.text.as_str()), Some("{\"name\":\"Ann\"}"));
        assert_eq!(decoded.and_then(|d| d.finish_reason), Some("stop".to_owned()), "an answer, not a call");
    }

    #[test]
    fn a_stream_says_text_and_tool_calls_and_ends_with_its_metadata() {
        let mut state = StreamState::new(true, false);
        let mut decode = |event: Value| state.decode_event(Bytes::from(event.to_string()));
        let mut chunks = Vec::new();
        for event in [
            json!({"messageStart": {"role": "assistant"}}),
            json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Hi"}}}),
            json!({"contentBlockStop": {"contentBlockIndex": 0}}),
            json!({"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "f"}}}}),
            json!({"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"a\":"}}}}),
            json!({"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": "1}"}}}}),
            json!({"messageStop": {"stopReason": "tool_use"}}),
            json!({"metadata": {"usage": {"inputTokens": 3, "outputTokens": 5, "totalTokens": 8}, "metrics": {}}}),
        ] {
            match decode(event) {
                Ok(StreamEvent::Chunk(chunk)) => chunks.push(chunk),
                other => panic!("{:?}", other.err()),
            }
        }
        let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
        assert_eq!(text, "Hi");
        assert_eq!(
            chunks[4].chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":"
        );
        let last = chunks.last().cloned().unwrap_or_else(|| panic!("no chunks"));
        assert_eq!(last.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(last.usage, Some(Usage { prompt_tokens: 3, completion_tokens: 5 }));
        let usage = state.take_end().flatten().map(|c| c.chunk["usage"]["total_tokens"].clone());
        assert_eq!(usage, Some(json!(8)));
        let refused = StreamState::new(false, false).decode_event(Bytes::from(
            json!({"messageStop": {"stopReason": "guardrail_intervened"}}).to_string(),
        ));
        assert!(refused.is_err_and(|failure| failure.is_content_refusal()));
    }
}
