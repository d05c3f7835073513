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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::jobs::{accepted_message_shapes, validate_messages};

    /// Whatever the door lets in must become a provider request: a job that
    /// is stored but cannot be turned into one could never be driven.
    #[test]
    fn every_accepted_shape_becomes_a_chat_request() -> Result<(), serde_json::Error> {
        for (name, messages) in accepted_message_shapes() {
            assert_eq!(validate_messages(&messages), Ok(()), "{name}");
            let body =
                json!({"route": "chat", "input": {"messages": messages}, "params": {"temperature": 0}});
            let request: JobRequest = serde_json::from_value(body)?;
            let chat = to_chat_request(&request)?;
            assert_eq!(chat.messages.len(), request.input.messages.len(), "{name}");
        }
        Ok(())
    }
}
