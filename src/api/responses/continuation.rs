//! `previous_response_id`: a Responses request that continues an earlier
//! response of the same owner carries that conversation before its own
//! messages, so the job's request is the whole conversation the provider
//! is sent (and the intent its key binds). The client's own request
//! (`native`) gets the same conversation as input items — the earlier
//! request's input, then the earlier response's output as the provider gave
//! it (encrypted reasoning included) — so a Responses provider, which knows
//! no response of this gateway, is sent the whole conversation too.

use serde::Deserialize as _;
use serde_json::{Value, json};

use crate::api::{AppState, Caller, Problem, ProblemType, StoreStage};
use crate::jobs::{ChatMessage, Job, JobRequest, JobResult};

/// Puts the conversation of `previous` (an earlier job of the same owner,
/// succeeded) before `job`'s own messages, after its leading system
/// messages: the earlier request's messages without its system ones (its
/// instructions do not carry over), then its answer.
pub(super) async fn continue_conversation(
    state: &AppState,
    caller: &Caller,
    job: &mut JobRequest,
    previous: uuid::Uuid,
) -> Result<(), Problem> {
    let found = state.store.job(previous).await.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    let Some(earlier) = found.filter(|earlier| earlier.owner == caller.0.owner) else {
        return Err(Problem::new(ProblemType::NotFound, "`previous_response_id` names no response of yours")
            .with("path", "/previous_response_id"));
    };
    let result = earlier.result.as_deref().and_then(JobResult::decode);
    let request = serde_json::from_str::<JobRequest>(&earlier.request).ok();
    let (Some(result), Some(request)) = (result.filter(|r| r.completion.is_some()), request) else {
        return Err(Problem::no_answer(&earlier, None).with("path", "/previous_response_id"));
    };
    if let Some(native) = job.native.as_mut().map(|native| &mut native.body) {
        native.remove("previous_response_id");
        let mut input = prior_items(&earlier, &request, &result);
        input.extend(items_of(native.remove("input").unwrap_or(Value::Null)));
        native.insert("input".into(), input.into());
    }
    let mut prior: Vec<ChatMessage> = request.input.messages;
    prior.retain(|m| !is_instruction(m));
    let answer = answered(&result.completion.unwrap_or_default());
    prior.push(
        answer.ok_or_else(|| Problem::no_answer(&earlier, None).with("path", "/previous_response_id"))?,
    );
    let messages = &mut job.input.messages;
    let leading = messages.iter().take_while(|m| is_instruction(m)).count();
    messages.splice(leading..leading, prior);
    Ok(())
}

/// A system or developer message: this request's own instructions, which
/// stay first.
fn is_instruction(message: &ChatMessage) -> bool {
    matches!(message.role.as_str(), "system" | "developer")
}

/// The earlier answer's message, as the conversation's next turn: its
/// role, content and tool calls, as the provider gave them.
fn answered(completion: &Value) -> Option<ChatMessage> {
    let mut message = completion["choices"][0]["message"].clone();
    message.as_object_mut()?.retain(|key, _| matches!(key.as_str(), "role" | "content" | "tool_calls"));
    ChatMessage::deserialize(message).ok()
}

/// The earlier turn as input items: its request's input (the client's
/// own, or rendered from its chat messages) and its response's output
/// (the provider's own, or rendered from its chat answer).
fn prior_items(earlier: &Job, request: &JobRequest, result: &JobResult) -> Vec<Value> {
    let mut items = match request.native.as_ref().and_then(|native| native.body.get("input")) {
        Some(input) => items_of(input.clone()),
        None => super::items::input_items(earlier.id, &request.input.messages)
            .into_iter()
            .map(|mut item| {
                if let Some(fields) = item.as_object_mut() {
                    fields.remove("id");
                    fields.remove("status");
                }
                item
            })
            .collect(),
    };
    let response = match &result.native {
        Some(native) => native.clone(),
        None => {
            let rendered = super::render::response_body(&super::render::Identity::of(earlier), result);
            rendered.and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default()
        }
    };
    items.extend(response["output"].as_array().cloned().unwrap_or_default());
    items
}

/// `input` as a list of items (a string is one user message).
fn items_of(input: Value) -> Vec<Value> {
    match input {
        Value::Array(items) => items,
        Value::String(text) => vec![json!({"role": "user", "content": text})],
        _ => Vec::new(),
    }
}
