//! The OpenAI shapes as the OpenAPI document describes them: schema-only
//! types (never constructed; the answers are rendered by `render.rs` and
//! the request is read as JSON), kept beside the handler they document.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

/// `GET /v1/models`: the routes, as OpenAI lists models.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ModelList {
    /// `list`
    object: String,
    data: Vec<Model>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Model {
    /// A route name: pass it as `model`.
    id: String,
    /// `model`
    object: String,
    created: i64,
    /// `intentgate`
    owned_by: String,
}

/// An OpenAI chat completion request. `model` names a route; every field
/// other than `model` and `messages` is passed to the provider as a
/// generation parameter (the job's `params`).
#[derive(ToSchema, Deserialize)]
#[allow(dead_code)]
pub struct ChatCompletionRequest {
    /// A route name (`GET /v1/models` lists them).
    model: String,
    #[schema(min_items = 1)]
    messages: Vec<crate::jobs::ChatMessage>,
    /// Answer as server-sent events in OpenAI's chunk format.
    stream: Option<bool>,
    #[serde(flatten)]
    params: HashMap<String, Value>,
}

/// An OpenAI `chat.completion`; the same bytes every time for one job.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChatCompletion {
    /// `chatcmpl-<job id>`
    id: String,
    /// `chat.completion`
    object: String,
    /// The job's creation second.
    created: i64,
    /// The route.
    model: String,
    choices: Vec<ChatChoice>,
    usage: Option<ChatUsage>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChatChoice {
    index: u32,
    message: ChatReply,
    finish_reason: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChatReply {
    /// `assistant`
    role: String,
    content: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChatUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}
