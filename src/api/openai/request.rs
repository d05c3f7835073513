//! OpenAI's chat completion request as this door reads it, and the job
//! request it becomes: `{"route": model, "input": {"messages"}, "params":
//! <every other field>}`. `stream: true` stays among the parameters, for
//! the driver (the fingerprint leaves it out: a streamed and a plain
//! request are one intent, see `JobRequest::DELIVERY_PARAMS`).

use axum::body::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::api::Problem;
use crate::api::door::{Expected, MODEL, STREAM, Translated};
use crate::jobs::{ChatMessage, JobRequest, validate_messages, validate_params};

/// The problems of this door's requests are titled so.
const TITLE: &str = "Invalid chat completion request";

/// An OpenAI chat completion request. `model` names a route; every field
/// other than `model` and `messages` is passed to the provider as a
/// generation parameter (the job's `params`).
#[derive(Deserialize, utoipa::ToSchema)]
pub struct ChatCompletionRequest {
    /// A route name or alias (`GET /v1/models` lists them).
    model: String,
    #[schema(min_items = 1)]
    messages: Vec<ChatMessage>,
    /// Answer as server-sent events in OpenAI's chunk format.
    stream: Option<bool>,
    /// Every other field: a generation parameter.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    params: Map<String, Value>,
}

/// The fields this door reads by name.
const EXPECTED: [Expected; 3] =
    [MODEL, Expected::required("messages", "an array of messages", Value::is_array), STREAM];

impl ChatCompletionRequest {
    /// The body → the request. Its messages are checked on the JSON as
    /// sent, so a fault's path names the message this caller built.
    pub fn read(body: &Bytes) -> Result<Self, Problem> {
        let fields = crate::api::door::json_object(body, TITLE)?;
        if let Some(messages) = fields.get("messages") {
            validate_messages(messages)
                .map_err(|err| Problem::invalid_messages(err.under("/messages"), TITLE))?;
        }
        crate::api::door::typed(fields, TITLE, &EXPECTED)
    }
}

impl TryFrom<ChatCompletionRequest> for Translated {
    type Error = Problem;

    fn try_from(request: ChatCompletionRequest) -> Result<Self, Problem> {
        let ChatCompletionRequest { model, messages, stream, mut params } = request;
        let stream = stream == Some(true);
        if stream {
            params.insert("stream".into(), true.into());
        }
        validate_params(&params).map_err(|err| Problem::invalid_params(err, TITLE))?;
        Ok(Translated::new(JobRequest::chat(model, messages, params), stream))
    }
}
