//! The jobs API's request: a job request as JSON, parsed into
//! [`JobRequest`] and checked once, each fault named by its JSON pointer.
//! The other doors build their job requests themselves and check them in
//! their own protocol's terms.

use serde::Deserialize as _;
use serde_json::Value;

use super::{Problem, ProblemType};
use crate::jobs::{DoorName, InputKind, JobRequest, validate_embedding, validate_messages, validate_params};

const TITLE: &str = "Invalid job request";

/// `body` (I-JSON, already parsed) → the job request, or why it is not one.
pub fn parse(body: Value) -> Result<JobRequest, Problem> {
    super::text::refuse_nul_in_json(&body)?;
    // Before the typed parse, whose errors name no message.
    if let Some(messages) = body.pointer("/input/messages") {
        validate_messages(messages)
            .map_err(|err| Problem::invalid_messages(err.under("/input/messages"), TITLE))?;
    }
    let request = JobRequest::deserialize(body).map_err(|err| {
        let detail = in_the_clients_terms(&err.to_string());
        Problem::new(ProblemType::InvalidBody, format!("the body is not a job request: {detail}"))
            .titled(TITLE)
    })?;
    match request.input.kind() {
        Ok(InputKind::Chat) => validate_params(&request.params)
            .map_err(|err| Problem::invalid_params(err.under("/params"), TITLE))?,
        Ok(InputKind::Embeddings) => {
            let input = request.input.embed.as_ref().unwrap_or(&Value::Null);
            validate_embedding(input, &request.params).map_err(|err| {
                let prefix = if err.path.is_empty() { "/input/embed" } else { "/params" };
                Problem::invalid_params(err.under(prefix), TITLE)
            })?;
        }
        Err(reason) => {
            return Err(Problem::new(ProblemType::InvalidBody, reason).titled(TITLE).with("path", "/input"));
        }
    }
    let native_door = matches!(request.door, Some(DoorName::AnthropicMessages | DoorName::OpenAiResponses));
    if request.native.is_some() && !native_door {
        return Err(Problem::new(
            ProblemType::InvalidBody,
            "`native` is a door's request carried beside its chat view: only with `door` `anthropic-messages` \
             or `openai-responses`",
        )
        .titled(TITLE)
        .with("path", "/native"));
    }
    Ok(request)
}

/// A deserializer's message with the gateway's type names replaced by what
/// a client sends: it never sees `JobInput`, only the JSON it wrote.
fn in_the_clients_terms(message: &str) -> String {
    const NAMES: [(&str, &str); 4] = [
        ("struct JobRequest", "a job request: an object with `route` and `input`"),
        ("struct JobInput", "an object with `messages` or `embed`"),
        ("struct ChatMessage", "a message: an object with `role` and `content`"),
        ("struct NativeRequest", "an object with `body`"),
    ];
    NAMES.iter().fold(message.to_owned(), |text, (name, words)| text.replace(name, words))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_error_names_json_not_the_gateways_types() {
        let body = serde_json::json!({"route": "chat", "input": "hello"});
        let err = JobRequest::deserialize(&body).err().map(|err| err.to_string()).unwrap_or_default();
        let said = in_the_clients_terms(&err);
        assert!(!said.contains("JobInput") && said.contains("`messages` or `embed`"), "{said}");
    }
}
