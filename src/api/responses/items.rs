//! `GET /v1/responses/{id}/input_items`: the conversation a response
//! answered, as Responses input items, rendered from the job's stored chat
//! messages (the reverse of `translate`). Instructions (stored as a
//! `system` message) are not input items, and a conversation continued with
//! `previous_response_id` lists its earlier turns too: the job stores the
//! whole conversation it was asked, and that is what it answered.

use serde_json::{Value, json};
use uuid::Uuid;

use crate::jobs::ChatMessage;

/// Every input item of the conversation, oldest first.
pub fn input_items(job_id: Uuid, messages: &[ChatMessage]) -> Vec<Value> {
    let mut items = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let id = format!("msg_{}_{index}", job_id.simple());
        match message.role.as_str() {
            "system" => {}
            "tool" => {
                let call_id = message.extra.get("tool_call_id").cloned().unwrap_or(Value::Null);
                let output = match message.content() {
                    Value::String(text) => text.clone(),
                    other => text_of(other),
                };
                items.push(
                    json!({"type": "function_call_output", "id": format!("fco_{index}_{}", job_id.simple()),
                    "call_id": call_id, "output": output, "status": "completed"}),
                );
            }
            "assistant" => {
                let text = text_of(message.content());
                if !text.is_empty() {
                    items.push(
                        json!({"type": "message", "id": id, "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}),
                    );
                }
                let calls = message.extra.get("tool_calls").and_then(Value::as_array).into_iter().flatten();
                for call in calls {
                    let call_id = call["id"].as_str().unwrap_or_default();
                    items.push(
                        json!({"type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id,
                        "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                        "status": "completed"}),
                    );
                }
            }
            role => items.push(json!({"type": "message", "id": id, "role": role, "status": "completed",
                "content": input_content(message.content())})),
        }
    }
    items
}

/// One page of `items` as OpenAI lists them: `order` (`desc`, the
/// default, or `asc`), after the item `after`, at most `limit`.
pub fn page(mut items: Vec<Value>, order_asc: bool, after: Option<&str>, limit: usize) -> Value {
    if !order_asc {
        items.reverse();
    }
    let start =
        after.and_then(|after| items.iter().position(|item| item["id"] == after)).map_or(0, |at| at + 1);
    let rest = items.len().saturating_sub(start);
    let data: Vec<Value> = items.into_iter().skip(start).take(limit).collect();
    json!({"object": "list", "data": data, "first_id": data.first().map(|item| item["id"].clone()),
        "last_id": data.last().map(|item| item["id"].clone()), "has_more": rest > limit})
}

fn input_content(content: &Value) -> Value {
    match content {
        Value::String(text) => json!([{"type": "input_text", "text": text}]),
        Value::Array(parts) => parts
            .iter()
            .map(|part| match part["type"].as_str() {
                Some("image_url") => {
                    json!({"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"})
                }
                _ => json!({"type": "input_text", "text": part["text"]}),
            })
            .collect(),
        _ => json!([]),
    }
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts.iter().filter_map(|part| part["text"].as_str()).collect(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(value: Value) -> Vec<ChatMessage> {
        serde_json::from_value(value).unwrap_or_default()
    }

    #[test]
    fn a_tool_round_trip_reads_back_as_its_items() {
        let stored = messages(json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ]));
        let items = input_items(Uuid::nil(), &stored);
        let kinds: Vec<&str> = items.iter().filter_map(|item| item["type"].as_str()).collect();
        assert_eq!(kinds, ["message", "function_call", "function_call_output"], "{items:?}");
        assert_eq!(items[0]["content"][0], json!({"type": "input_text", "text": "Weather in Paris?"}));
        assert_eq!(items[1]["call_id"], "call_1");
        assert_eq!(items[2]["output"], "sunny");
    }

    #[test]
    fn pages_run_newest_first_unless_asked() {
        let items: Vec<Value> = (0..3).map(|i| json!({"id": format!("i{i}")})).collect();
        let newest = page(items.clone(), false, None, 2);
        assert_eq!((newest["first_id"].clone(), newest["has_more"].clone()), (json!("i2"), json!(true)));
        let rest = page(items.clone(), false, Some("i1"), 2);
        assert_eq!((rest["first_id"].clone(), rest["has_more"].clone()), (json!("i0"), json!(false)));
        assert_eq!(page(items, true, None, 20)["last_id"], "i2");
    }
}
