//! What the simulator answers, in each dialect's words: a whole body, the
//! SSE events of a stream, an error (the content is `prompt`'s).

use serde_json::{Value, json};

use super::prompt::{Event, Prompt, Said, pieces, usage};
use crate::dialect::Dialect;

/// OpenAI's `usage`, with the details OpenAI always sends.
fn openai_usage(input: u64, output: u64) -> Value {
    json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output,
        "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}})
}

/// A whole (non-streamed) response body to `request` (as the prompt
/// reader sees it). The Anthropic, Gemini and Responses dialects answer the
/// first choice only (`said` has one there).
pub(crate) fn body(dialect: Dialect, prompt: &Prompt, request: &Value, said: &[Said]) -> Value {
    let (input, output) = usage(prompt, said);
    match dialect {
        Dialect::Gemini => super::gemini::body(prompt, said),
        Dialect::OpenAiResponses => super::responses::body(prompt, request, said),
        Dialect::OpenAi => {
            let choices: Vec<Value> = said
                .iter()
                .enumerate()
                .map(|(index, said)| {
                    json!({"index": index, "message": said.openai_message(), "finish_reason": said.finish_reason()})
                })
                .collect();
            json!({
                "id": format!("chatcmpl-sim{:016x}", prompt.nonce),
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": prompt.model,
                "system_fingerprint": "fp_sim",
                "choices": choices,
                "usage": openai_usage(input, output),
            })
        }
        Dialect::Anthropic | Dialect::Bedrock | Dialect::BedrockConverse => {
            let thinking = super::thinking::block(prompt, request);
            let output = output + super::thinking::tokens(thinking.as_ref());
            let content: Vec<Value> =
                thinking.into_iter().chain(said.first().map(Said::anthropic_block)).collect();
            json!({
                "id": format!("msg_sim{:016x}", prompt.nonce),
                "type": "message",
                "role": "assistant",
                "model": prompt.model,
                "content": content,
                "stop_reason": said.first().map_or("end_turn", Said::stop_reason),
                "stop_sequence": null,
                "usage": anthropic_usage(input, output, request),
            })
        }
    }
}

/// The events of a streamed answer, and separately its terminator.
pub(crate) fn events(
    dialect: Dialect,
    prompt: &Prompt,
    request: &Value,
    said: &[Said],
) -> (Vec<Event>, Event) {
    match dialect {
        Dialect::OpenAiResponses => super::responses::events(prompt, request, said),
        Dialect::OpenAi => openai_events(prompt, said),
        Dialect::Anthropic | Dialect::Bedrock | Dialect::BedrockConverse => {
            anthropic_events(prompt, request, said)
        }
        Dialect::Gemini => super::gemini::events(prompt, said),
    }
}

/// Each choice's deltas, interleaved round by round (as a provider
/// generating the choices side by side sends them), then each choice's
/// finish, then the usage chunk when `include_usage` asked for it.
fn openai_events(prompt: &Prompt, said: &[Said]) -> (Vec<Event>, Event) {
    let (input, output) = usage(prompt, said);
    let id = format!("chatcmpl-sim{:016x}", prompt.nonce);
    let chunk = |index: usize, delta: &Value, finish: Value| {
        Event {
        name: None,
        data: json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": prompt.model,
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}]})
        .to_string(),
    }
    };
    let deltas: Vec<Vec<Value>> = said.iter().map(Said::openai_deltas).collect();
    let rounds = deltas.iter().map(Vec::len).max().unwrap_or_default();
    let mut events = Vec::new();
    for round in 0..rounds {
        for (index, deltas) in deltas.iter().enumerate() {
            if let Some(delta) = deltas.get(round) {
                events.push(chunk(index, delta, Value::Null));
            }
        }
    }
    for (index, said) in said.iter().enumerate() {
        events.push(chunk(index, &json!({}), said.finish_reason().into()));
    }
    if prompt.include_usage {
        let data = json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": prompt.model,
            "choices": [], "usage": openai_usage(input, output)});
        events.push(Event { name: None, data: data.to_string() });
    }
    (events, Event { name: None, data: "[DONE]".into() })
}

/// The first choice as Anthropic events: a text block streamed as
/// `text_delta`s, or a `tool_use` block as `input_json_delta`s, after the
/// thinking block when the request asks for thinking.
fn anthropic_events(prompt: &Prompt, request: &Value, said: &[Said]) -> (Vec<Event>, Event) {
    let (input, output) = usage(prompt, said);
    let thinking = super::thinking::block(prompt, request);
    let output = output + super::thinking::tokens(thinking.as_ref());
    let index = u64::from(thinking.is_some());
    let event = |name: &'static str, data: Value| Event { name: Some(name), data: data.to_string() };
    let message = json!({"id": format!("msg_sim{:016x}", prompt.nonce), "type": "message", "role": "assistant",
        "model": prompt.model, "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": anthropic_usage(input, 1, request)});
    let (start, deltas): (Value, Vec<Value>) = match said.first() {
        Some(Said::Tool(call)) => (
            json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}}),
            pieces(&call.arguments)
                .into_iter()
                .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
                .collect(),
        ),
        Some(Said::Text(text) | Said::Stopped(text)) => (
            json!({"type": "text", "text": ""}),
            pieces(text).into_iter().map(|piece| json!({"type": "text_delta", "text": piece})).collect(),
        ),
        None => (json!({"type": "text", "text": ""}), Vec::new()),
    };
    let stop_reason = said.first().map_or("end_turn", Said::stop_reason);
    let mut events = vec![event("message_start", json!({"type": "message_start", "message": message}))];
    events.extend(thinking.iter().flat_map(super::thinking::events));
    events.push(event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": start}),
    ));
    events.push(event("ping", json!({"type": "ping"})));
    events.extend(deltas.into_iter().map(|delta| {
        event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta}))
    }));
    events.push(event("content_block_stop", json!({"type": "content_block_stop", "index": index})));
    events.push(event(
        "message_delta",
        json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output}}),
    ));
    (events, event("message_stop", json!({"type": "message_stop"})))
}

/// Anthropic's `usage`: a request with cache breakpoints (`cache_control`
/// anywhere) reads half its prompt from the cache, the rest uncached.
fn anthropic_usage(input: u64, output: u64, request: &Value) -> Value {
    let cached = if request.to_string().contains("\"cache_control\"") { input / 2 } else { 0 };
    json!({"input_tokens": input - cached, "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0,
        "output_tokens": output})
}

/// An error body in the dialect's shape.
pub(crate) fn error(dialect: Dialect, status: u16, message: &str) -> Value {
    match dialect {
        Dialect::OpenAi => json!({"error": {"message": message, "type": "sim_error", "code": status}}),
        Dialect::OpenAiResponses => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": status}})
        }
        Dialect::Gemini => super::gemini::error(status, message, None),
        Dialect::Bedrock | Dialect::BedrockConverse => json!({"message": message}),
        Dialect::Anthropic => {
            let kind = match status {
                400 => "invalid_request_error",
                401 => "authentication_error",
                429 => "rate_limit_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    }
}

/// A content-policy refusal as each provider words it (OpenAI's
/// `content_policy_violation`, Anthropic's content filtering message).
pub(crate) fn content_policy(dialect: Dialect) -> Value {
    match dialect {
        Dialect::OpenAi | Dialect::OpenAiResponses => json!({"error": {
            "message": "Your request was rejected as a result of our safety system.",
            "type": "invalid_request_error", "param": null, "code": "content_policy_violation"}}),
        Dialect::Anthropic => json!({"type": "error", "error": {
            "type": "invalid_request_error", "message": "Output blocked by content filtering policy"}}),
        Dialect::Bedrock | Dialect::BedrockConverse => {
            json!({"message": "Output blocked by content filtering policy"})
        }
        // Gemini says a refusal in a 200 (`super::gemini::blocked`); a 400
        // that says so is the closest error it has.
        Dialect::Gemini => super::gemini::error(400, "The request was blocked by the safety filters.", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::prompt::truncated;
    use crate::sim::script::Output;

    #[test]
    fn the_schema_shapes_the_answer() -> Result<(), serde_json::Error> {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "name the capital of France"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"properties": {"city": {}, "country": {}}}}}});
        let prompt = Prompt::read(&body, 7);
        let answer: Value = serde_json::from_str(&prompt.answer(7, &Output::default()))?;
        assert_eq!(answer, json!({"city": "name the capital of", "country": "name the capital of"}));
        let plain = Prompt::read(&json!({"messages": [{"role": "user", "content": "hi there"}]}), 7);
        assert_eq!(plain.answer(7, &Output::default()), "echo: hi there");
        let typed = json!({"messages": [{"role": "user", "content": "a city"}], "response_format": {"type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"name": {"type": "string"},
                "population": {"type": "integer"}, "capital": {"type": "boolean"}}}}}});
        let answer: Value = serde_json::from_str(&Prompt::read(&typed, 7).answer(7, &Output::default()))?;
        assert_eq!(
            answer,
            json!({"name": "a city", "population": 1, "capital": true}),
            "numbers are numbers"
        );
        assert_eq!(pieces("abcdefghij").concat(), "abcdefghij");
        assert!(serde_json::from_str::<Value>(truncated(r#"{"a":"é"}"#)).is_err());
        Ok(())
    }

    #[test]
    fn a_tool_result_is_answered_in_words_even_by_a_tool_call_script() {
        let output = Output { tool_call: true, ..Output::default() };
        let asked = json!({"messages": [{"role": "user", "content": "weather?"}],
            "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}]});
        assert!(matches!(Prompt::read(&asked, 7).said(Dialect::OpenAi, 7, &output)[0], Said::Tool(_)));
        let answered = json!({"messages": [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
                "function": {"name": "w", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "sunny"}]});
        match &Prompt::read(&answered, 7).said(Dialect::OpenAi, 7, &output)[0] {
            Said::Text(text) => assert_eq!(text, "echo: sunny"),
            Said::Tool(_) | Said::Stopped(_) => panic!("the loop would never end"),
        }
    }

    /// A begun assistant turn is continued where the dialect prefills, and
    /// answered anew where it does not; Claude refuses one ending in
    /// whitespace.
    #[test]
    fn a_prefill_is_continued_where_the_dialect_prefills() {
        let body = json!({"messages": [{"role": "user", "content": "hi there"},
            {"role": "assistant", "content": [{"type": "text", "text": "echo: hi"}]}]});
        let text = |dialect| match &Prompt::read(&body, 7).said(dialect, 7, &Output::default())[0] {
            Said::Text(text) => text.clone(),
            Said::Tool(_) | Said::Stopped(_) => panic!("words"),
        };
        assert_eq!(text(Dialect::Anthropic), " there");
        assert_eq!(text(Dialect::OpenAi), "echo: hi there");
        assert!(crate::sim::prompt::check_prefill(&body).is_ok());
        let spaced = json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "echo: "}]});
        assert_eq!(crate::sim::prompt::check_prefill(&spaced).unwrap_err().0, 400);
    }
}
