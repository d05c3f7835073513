//! Extended thinking in the simulator's Anthropic dialect (Anthropic's API,
//! Claude on Bedrock and on Vertex): a request with `thinking` of type
//! `enabled` or `adaptive` is answered with a thinking block first, signed
//! with the simulator's seal, its text counted in the output tokens. A
//! thinking block sent back in an assistant turn must carry the signature
//! the simulator gave that text, unchanged — else Anthropic's 400 — so a
//! test catches a block that was altered, dropped of its signature, or
//! written by another provider.

use serde_json::{Value, json};

use super::prompt::{Event, Prompt};
use super::seal::{seal, verify};

/// The thinking block the answer to `request` starts with, if it asks for
/// thinking.
pub(crate) fn block(prompt: &Prompt, request: &Value) -> Option<Value> {
    let kind = request.pointer("/thinking/type").and_then(Value::as_str)?;
    if !matches!(kind, "enabled" | "adaptive") {
        return None;
    }
    let thinking = format!("Thinking about: {}", prompt.last_user);
    Some(json!({"type": "thinking", "signature": seal("thinking", &thinking), "thinking": thinking}))
}

/// The output tokens a thinking block costs.
pub(crate) fn tokens(block: Option<&Value>) -> u64 {
    block.and_then(|b| b["thinking"].as_str()).map_or(0, |t| t.split_whitespace().count() as u64)
}

/// A thinking block streamed at content index 0: its start, its text, its
/// signature, its stop.
pub(crate) fn events(block: &Value) -> Vec<Event> {
    let event = |name: &'static str, data: Value| Event { name: Some(name), data: data.to_string() };
    let delta = |delta: Value| {
        event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": delta}))
    };
    vec![
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        delta(json!({"type": "thinking_delta", "thinking": block["thinking"]})),
        delta(json!({"type": "signature_delta", "signature": block["signature"]})),
        event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
    ]
}

/// Signs every thinking block of `body`'s turns as this simulator's own:
/// a conversation captured from a real client carries its provider's
/// signatures, which a test re-signs before replaying it here.
pub fn sign_thinking_blocks(body: &mut Value) {
    let turns = body.get_mut("messages").and_then(Value::as_array_mut).into_iter().flatten();
    let blocks = turns.filter_map(|turn| turn.get_mut("content").and_then(Value::as_array_mut)).flatten();
    for block in blocks.filter(|block| block["type"] == "thinking") {
        let text = block["thinking"].as_str().unwrap_or_default().to_owned();
        block["signature"] = seal("thinking", &text).into();
    }
}

/// Every thinking block of the request's assistant turns carries the
/// signature of its text; the 400 Anthropic answers otherwise.
pub(crate) fn check(request: &Value) -> Result<(), (u16, String)> {
    let turns = request.get("messages").and_then(Value::as_array).into_iter().flatten();
    for (turn_index, turn) in turns.enumerate() {
        let blocks = turn.get("content").and_then(Value::as_array).into_iter().flatten();
        for (index, block) in blocks.enumerate() {
            if block["type"] != "thinking" {
                continue;
            }
            let text = block["thinking"].as_str().unwrap_or_default();
            let signed =
                block["signature"].as_str().is_some_and(|signature| verify("thinking", text, signature));
            if !signed {
                let at = format!("messages.{turn_index}.content.{index}");
                return Err((400, format!("{at}: Invalid `signature` in `thinking` block")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thinking_block_goes_back_only_as_it_was_signed() {
        let thinking = "Thinking about: weather";
        let turn = |signature: &str| {
            json!({"messages": [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": [
                {"type": "thinking", "thinking": thinking, "signature": signature},
                {"type": "text", "text": "sunny"}]}]})
        };
        assert!(check(&turn(&seal("thinking", thinking))).is_ok());
        assert!(check(&turn("made-up")).is_err_and(|(_, m)| m.contains("messages.1.content.0")));
        let reasoning_seal = seal("reasoning", thinking);
        assert!(check(&turn(&reasoning_seal)).is_err(), "another kind of seal is not a signature");
    }
}
