//! What the simulator reads from a request and what it says back, before
//! any dialect's shape: deterministic content (randomness only from the
//! seed), its usage, and the events a stream is cut into.

use serde_json::{Map, Value, json};

use super::format::Format;
use super::script::Output;
use super::tool::{Call, Offered};
use crate::dialect::Dialect;

/// Choices the simulator answers at most, whatever `n` asks.
const MAX_CHOICES: u64 = 16;

/// What the simulator reads from a request.
pub(crate) struct Prompt {
    pub(crate) model: String,
    pub(crate) last_user: String,
    pub(crate) prompt_words: u64,
    /// What an answer in words must look like.
    pub(crate) format: Format,
    /// A tool result follows the conversation's last tool call: the call
    /// is answered, so only a forced `tool_choice` calls again.
    pub(crate) answered: bool,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    /// Seed and request mixed, so ids are stable per request and seed.
    pub(crate) nonce: u64,
    /// OpenAI's `n`: how many choices to answer.
    pub(crate) n: u64,
    /// The tools offered and the request's `tool_choice`.
    pub(crate) tools: Offered,
    /// Output tokens to report whatever was said (the script's `usage=N`).
    pub(crate) reported_output: Option<u64>,
    /// The text of a last turn that is the assistant's: where a dialect
    /// prefills, the answer continues it (see [`Prompt::said`]).
    pub(crate) prefill: Option<String>,
}

/// What one choice says: text, a call of a tool, or the text said before
/// a safety filter stopped it (`safety-stop`).
pub(crate) enum Said {
    Text(String),
    Tool(Call),
    Stopped(String),
}

impl Said {
    fn words(&self) -> u64 {
        match self {
            Said::Text(text) | Said::Stopped(text) => words(text),
            Said::Tool(call) => words(&call.arguments),
        }
    }

    pub(super) fn finish_reason(&self) -> &'static str {
        match self {
            Said::Text(_) => "stop",
            Said::Tool(_) => "tool_calls",
            Said::Stopped(_) => "content_filter",
        }
    }

    pub(super) fn stop_reason(&self) -> &'static str {
        match self {
            Said::Text(_) => "end_turn",
            Said::Tool(_) => "tool_use",
            Said::Stopped(_) => "refusal",
        }
    }

    /// The choice's `message` in a whole OpenAI answer.
    pub(super) fn openai_message(&self) -> Value {
        match self {
            Said::Text(text) | Said::Stopped(text) => json!({"role": "assistant", "content": text}),
            Said::Tool(call) => json!({"role": "assistant", "content": null, "tool_calls": [{"id": call.id,
                "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]}),
        }
    }

    /// The choice's `delta`s in an OpenAI stream: the role, then pieces of
    /// the text or of the tool call's arguments (always two or more).
    pub(super) fn openai_deltas(&self) -> Vec<Value> {
        match self {
            Said::Text(text) | Said::Stopped(text) => {
                std::iter::once(json!({"role": "assistant", "content": ""}))
                    .chain(pieces(text).into_iter().map(|piece| json!({"content": piece})))
                    .collect()
            }
            Said::Tool(call) => {
                let start = json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": call.id,
                    "type": "function", "function": {"name": call.name, "arguments": ""}}]});
                std::iter::once(start)
                    .chain(
                        pieces(&call.arguments).into_iter().map(
                            |piece| json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                        ),
                    )
                    .collect()
            }
        }
    }

    /// The content block of an Anthropic answer.
    pub(super) fn anthropic_block(&self) -> Value {
        match self {
            Said::Text(text) | Said::Stopped(text) => json!({"type": "text", "text": text}),
            Said::Tool(call) => {
                json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input})
            }
        }
    }
}

impl Prompt {
    pub(crate) fn read(body: &Value, seed: u64) -> Prompt {
        let messages = body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let text_of = |message: &Value| message.get("content").map(content_text).unwrap_or_default();
        let top_system = body.get("system").map(content_text).unwrap_or_default();
        let mut system: Vec<String> = messages
            .iter()
            .filter(|m| matches!(m.get("role").and_then(Value::as_str), Some("system" | "developer")))
            .map(text_of)
            .collect();
        system.push(top_system.clone());
        let last_user = tool_results(messages).unwrap_or_else(|| {
            messages
                .iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .map(text_of)
                .unwrap_or_default()
        });
        let prompt_words = messages.iter().map(|m| words(&text_of(m))).sum::<u64>() + words(&top_system);
        let tools = Offered::read(body).steered_by(&last_user);
        Prompt {
            model: body.get("model").and_then(Value::as_str).unwrap_or("sim").to_owned(),
            format: Format::read(body, &system),
            answered: last_call_answered(messages),
            prompt_words,
            last_user,
            stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
            include_usage: body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            nonce: fnv1a(seed, body.to_string().as_bytes()),
            n: body.get("n").and_then(Value::as_u64).unwrap_or(1).clamp(1, MAX_CHOICES),
            tools,
            reported_output: None,
            prefill: messages
                .last()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
                .map(text_of),
        }
    }

    /// What each choice says: `n` of them in the OpenAI dialect (choice `i`
    /// after the first echoes as `echo[i]: …`, so choices can be told apart), one in
    /// the Anthropic dialect.
    pub(crate) fn said(&self, dialect: Dialect, seed: u64, output: &Output) -> Vec<Said> {
        let n = if dialect == Dialect::OpenAi { self.n } else { 1 };
        if output.safety_stop {
            return vec![Said::Stopped(truncated(&self.answer(seed, output)).to_owned())];
        }
        if let Some(name) = self.tools.pick(output, self.answered) {
            return (0..n)
                .map(|i| {
                    let id = match (dialect, i) {
                        (Dialect::Anthropic | Dialect::Bedrock | Dialect::BedrockConverse, _) => {
                            format!("toolu_sim{:016x}", self.nonce)
                        }
                        // Gemini's calls carry no id: the dialect makes one.
                        (Dialect::OpenAi | Dialect::Gemini | Dialect::OpenAiResponses, 0) => {
                            format!("call_sim{:016x}", self.nonce)
                        }
                        (Dialect::OpenAi | Dialect::Gemini | Dialect::OpenAiResponses, i) => {
                            format!("call_sim{:016x}_{i}", self.nonce)
                        }
                    };
                    Said::Tool(self.tools.call(&name, output.bad_tool_args, &self.last_user, id))
                })
                .collect();
        }
        let mut text = self.answer(seed, output);
        // A model continues the turn it was given begun: the rest of what it
        // would have said (the whole answer if it would not have begun so).
        if let Some(rest) =
            self.prefill.as_deref().filter(|_| dialect.prefills()).and_then(|p| text.strip_prefix(p))
        {
            text = rest.to_owned();
        }
        (0..n)
            .map(|i| match text.strip_prefix("echo: ") {
                Some(rest) if i > 0 => Said::Text(format!("echo[{i}]: {rest}")),
                _ => Said::Text(text.clone()),
            })
            .collect()
    }

    /// The answer's text, shaped by the script's output faults.
    pub(crate) fn answer(&self, seed: u64, output: &Output) -> String {
        if output.ignore_format {
            return format!("Sure! Here is my answer, in prose rather than JSON: {}", self.last_user);
        }
        let echo = format!("echo: {}", self.last_user);
        if self.format == Format::Prose && !output.invent_key {
            return echo;
        }
        let snippet: Vec<&str> = self.last_user.split_whitespace().take(4).collect();
        // JSON that validates against the request's schema (strings from
        // the prompt), else an object holding the echo.
        let value = match &self.format {
            Format::Schema(schema) => super::schema::example(schema, &snippet.join(" ")),
            Format::Json | Format::Prose => json!({"answer": echo}),
        };
        if !output.invent_key {
            return value.to_string();
        }
        let mut object = match value {
            Value::Object(object) => object,
            other => Map::from_iter([("answer".to_owned(), other)]),
        };
        object.insert(
            format!("invented_{:04x}", fnv1a(seed, b"invent") & 0xffff),
            "nobody asked for this".into(),
        );
        Value::Object(object).to_string()
    }
}

/// Input and output words: the usage the simulator reports.
pub(crate) fn usage(prompt: &Prompt, said: &[Said]) -> (u64, u64) {
    let output = prompt.reported_output.unwrap_or_else(|| said.iter().map(Said::words).sum());
    (prompt.prompt_words, output)
}

/// One SSE event: optional `event:` name and its `data:` payload.
pub(crate) struct Event {
    pub(crate) name: Option<&'static str>,
    pub(crate) data: String,
}

impl Event {
    pub(crate) fn to_sse(&self) -> String {
        match self.name {
            Some(name) => format!("event: {name}\ndata: {}\n\n", self.data),
            None => format!("data: {}\n\n", self.data),
        }
    }
}

/// Up to four pieces that concatenate back to `text`.
pub(crate) fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(chars.len().div_ceil(4).max(1)).map(|c| c.iter().collect()).collect()
}

/// The results of the tools called last, when the conversation ends with
/// them: OpenAI's trailing `tool` messages, or the `tool_result` blocks of
/// Anthropic's last user message — what a tool round trip asks about.
fn tool_results(messages: &[Value]) -> Option<String> {
    let role = |m: &Value| m.get("role").and_then(Value::as_str).map(str::to_owned);
    let trailing: Vec<String> = messages
        .iter()
        .rev()
        .take_while(|m| role(m).as_deref() == Some("tool"))
        .map(|m| m.get("content").map(content_text).unwrap_or_default())
        .collect();
    if !trailing.is_empty() {
        return Some(trailing.into_iter().rev().collect::<Vec<_>>().join("; "));
    }
    let last = messages.last().filter(|m| role(m).as_deref() == Some("user"))?;
    let results: Vec<String> = last
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|block| block.get("content").map(content_text).unwrap_or_default())
        .collect();
    (!results.is_empty()).then(|| results.join("; "))
}

/// Whether a tool result follows the conversation's last tool call (or
/// there are results and no call): OpenAI's `tool` messages and
/// assistant `tool_calls`, Anthropic's `tool_result` and `tool_use` blocks.
fn last_call_answered(messages: &[Value]) -> bool {
    let has_block = |message: &Value, kind: &str| {
        let blocks = message.get("content").and_then(Value::as_array).into_iter().flatten();
        blocks.into_iter().any(|block| block.get("type").and_then(Value::as_str) == Some(kind))
    };
    for message in messages.iter().rev() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        if role == "tool" || has_block(message, "tool_result") {
            return true;
        }
        let calls = message.get("tool_calls").and_then(Value::as_array).is_some_and(|c| !c.is_empty());
        if role == "assistant" && (calls || has_block(message, "tool_use")) {
            return false;
        }
    }
    false
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect(),
        _ => String::new(),
    }
}

/// Claude refuses a prefill that ends in whitespace, with this 400.
pub(crate) fn check_prefill(body: &Value) -> Result<(), (u16, String)> {
    let last = body.get("messages").and_then(Value::as_array).and_then(|messages| messages.last());
    let prefill = last
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .and_then(|m| m.get("content"))
        .map(content_text);
    if prefill.is_some_and(|text| text.ends_with(char::is_whitespace)) {
        return Err((400, "messages: final assistant content cannot end with trailing whitespace".into()));
    }
    Ok(())
}

fn words(text: &str) -> u64 {
    text.split_whitespace().count() as u64
}

pub(crate) fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325 ^ seed, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The first half of `text`, cut on a char boundary: never valid JSON when
/// `text` is a JSON object.
pub(crate) fn truncated(text: &str) -> &str {
    let mut cut = text.len() / 2;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}
