//! A stored job request → the provider's normalised chat request.

use intentgate_providers::ChatRequest;
use serde_json::{Map, Value};

use crate::jobs::JobRequest;

/// `params` become top-level request fields (`temperature`, `max_tokens`,
/// vendor fields such as `top_k` pass through); `messages` come from `input`.
pub fn to_chat_request(request: &JobRequest) -> Result<ChatRequest, serde_json::Error> {
    let mut body: Map<String, Value> = request.params.clone();
    body.insert("messages".into(), serde_json::to_value(&request.input.messages)?);
    body.remove("stream");
    serde_json::from_value(Value::Object(body))
}
