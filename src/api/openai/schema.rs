//! The OpenAI shapes as the OpenAPI document describes them, kept beside
//! the handler they document: the model lists are the answers themselves;
//! the chat completion is schema-only (rendered by `render.rs` from the
//! provider's own bytes).

use serde::Serialize;
use utoipa::ToSchema;

/// `GET /v1/models`: the routes, as OpenAI lists models.
#[derive(Serialize, ToSchema)]
pub struct ModelList<'a> {
    /// `list`
    pub(super) object: &'static str,
    pub(super) data: Vec<Model<'a>>,
}

#[derive(Serialize, ToSchema)]
pub struct Model<'a> {
    /// A route name: pass it as `model`.
    id: &'a str,
    /// `model`
    object: &'static str,
    created: i64,
    /// `intentgate`
    owned_by: &'static str,
}

impl<'a> Model<'a> {
    pub(super) fn of(route: &'a str) -> Self {
        Model { id: route, object: "model", created: 0, owned_by: "intentgate" }
    }
}

/// `GET /v1/models` with `anthropic-version`: the routes, as Anthropic
/// lists models (its SDKs send that header).
#[derive(Serialize, ToSchema)]
pub struct AnthropicModelList<'a> {
    data: Vec<AnthropicModel<'a>>,
    has_more: bool,
    first_id: Option<&'a str>,
    last_id: Option<&'a str>,
}

#[derive(Serialize, ToSchema)]
pub struct AnthropicModel<'a> {
    /// `model`
    r#type: &'static str,
    /// A route name: pass it as `model`.
    id: &'a str,
    display_name: &'a str,
    created_at: &'static str,
}

impl<'a> AnthropicModelList<'a> {
    pub(super) fn of(routes: &[&'a str]) -> Self {
        let model = |id: &'a str| AnthropicModel {
            r#type: "model",
            id,
            display_name: id,
            created_at: "1970-01-01T00:00:00Z",
        };
        AnthropicModelList {
            data: routes.iter().copied().map(model).collect(),
            has_more: false,
            first_id: routes.first().copied(),
            last_id: routes.last().copied(),
        }
    }
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
