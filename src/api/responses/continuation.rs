//! `previous_response_id`: a Responses request that continues an earlier
//! response of the same owner carries that conversation before its own
//! messages, so the job's request is the whole conversation the provider
//! is sent (and the intent its key binds).

use crate::api::{AppState, Caller, Problem, ProblemType, StoreStage};
use crate::jobs::JobResult;

/// Puts the conversation of `previous` (an earlier job of the same owner,
/// succeeded) before `job`'s own messages, after its leading system
/// messages: the earlier request's messages without its system ones (its
/// instructions do not carry over), then its answer.
pub(super) async fn continue_conversation(
    state: &AppState,
    caller: &Caller,
    job: &mut serde_json::Value,
    previous: uuid::Uuid,
) -> Result<(), Problem> {
    let found = state.store.job(previous).await.map_err(|err| Problem::store(err, StoreStage::Lookup))?;
    let Some(earlier) = found.filter(|earlier| earlier.owner == caller.0.owner) else {
        return Err(Problem::new(ProblemType::NotFound, "`previous_response_id` names no response of yours")
            .with("path", "/previous_response_id"));
    };
    let answer = earlier.result.as_deref().and_then(JobResult::decode).and_then(|result| result.completion);
    let request = serde_json::from_str::<crate::jobs::JobRequest>(&earlier.request).ok();
    let (Some(answer), Some(request)) = (answer, request) else {
        return Err(Problem::no_answer(&earlier, None).with("path", "/previous_response_id"));
    };
    let mut message = answer["choices"][0]["message"].clone();
    if let Some(fields) = message.as_object_mut() {
        fields.retain(|key, _| matches!(key.as_str(), "role" | "content" | "tool_calls"));
    }
    let earlier_messages =
        request.input.messages.iter().filter(|m| !matches!(m.role.as_str(), "system" | "developer"));
    let mut prior: Vec<serde_json::Value> =
        earlier_messages.filter_map(|m| serde_json::to_value(m).ok()).collect();
    prior.push(message);
    if let Some(messages) = job.pointer_mut("/input/messages").and_then(serde_json::Value::as_array_mut) {
        let leading =
            messages.iter().take_while(|m| m["role"] == "system" || m["role"] == "developer").count();
        messages.splice(leading..leading, prior);
    }
    Ok(())
}
