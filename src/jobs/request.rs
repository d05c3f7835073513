use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What a job asks for: the body of `POST /v1/jobs`, stored with the job in
/// its canonical form and read back by whoever drives the job.
///
/// Unknown fields are refused: a typo such as `parmas` silently ignored
/// would bind the idempotency key to an intent the caller did not mean.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// The configured route that serves it.
    pub route: String,
    pub input: JobInput,
    /// Generation parameters passed to the provider (`temperature`,
    /// `max_tokens`, vendor fields…).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub params: Map<String, Value>,
    /// The door the job came through when it answers in another shape than
    /// OpenAI's (`anthropic-messages`); absent for the jobs API and chat
    /// completions. Part of the intent the key binds: the same key through
    /// another door is another intent, and a replay answers in the shape
    /// the job was asked in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door: Option<DoorName>,
    /// The door's request in its own protocol, beside the chat view above:
    /// sent as it is to a provider whose dialect speaks that protocol (see
    /// [`NativeRequest`]). Part of the intent like everything here, so the
    /// same key with another `thinking` budget is another intent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<NativeRequest>,
}

/// What a client sent in its own protocol (the protocol is the job's
/// `door`): the body but `stream`, the headers that change what the
/// provider does, and what the job's chat view could not hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NativeRequest {
    #[schema(value_type = Object)]
    pub body: Map<String, Value>,
    /// Lower-case names (`anthropic-beta`, `anthropic-version`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Each field or block the chat view leaves out that changes the answer,
    /// named for people: a provider of another dialect is passed over with
    /// this list as the reason rather than sent the request without them.
    #[serde(default)]
    pub untranslated: Vec<String>,
}

impl JobRequest {
    /// The `params` that say how the answer is delivered, not what is asked:
    /// left out of the fingerprint (and so of a derived key), so a client
    /// that retries a broken stream as a plain request finds its job.
    pub const DELIVERY_PARAMS: [&'static str; 2] = ["stream", "stream_options"];

    /// A conversation for `route` to answer.
    pub fn chat(route: String, messages: Vec<ChatMessage>, params: Map<String, Value>) -> Self {
        let input = JobInput { messages, embed: None };
        JobRequest { route, input, params, door: None, native: None }
    }

    /// Inputs for `route` to embed (OpenAI's `input`).
    pub fn embed(route: String, input: Value, params: Map<String, Value>) -> Self {
        let input = JobInput { messages: Vec::new(), embed: Some(input) };
        JobRequest { route, input, params, door: None, native: None }
    }

    /// The request, come through `door`, with the client's own request
    /// where the door carries it.
    pub fn through(self, door: DoorName, native: Option<NativeRequest>) -> Self {
        JobRequest { door: Some(door), native, ..self }
    }

    /// Its [`Self::DELIVERY_PARAMS`], taken out of `params`.
    pub(super) fn take_delivery(&mut self) -> Map<String, Value> {
        Self::DELIVERY_PARAMS
            .iter()
            .filter_map(|field| self.params.remove(*field).map(|value| ((*field).to_owned(), value)))
            .collect()
    }
}

/// A door whose jobs are recorded as its own (see [`JobRequest::door`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum DoorName {
    /// `POST /v1/messages`, Anthropic's Messages API.
    #[serde(rename = "anthropic-messages")]
    AnthropicMessages,
    /// `POST /v1/responses`, OpenAI's Responses API.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// `POST /v1/embeddings`, OpenAI's embeddings.
    #[serde(rename = "openai-embeddings")]
    OpenAiEmbeddings,
}

/// What the provider is given: a conversation to answer (`messages`), or
/// inputs to embed (`embed`), exactly one of them (see
/// [`JobInput::kind`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobInput {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<ChatMessage>,
    /// What an embeddings job embeds, as OpenAI's `input`: a string, an
    /// array of strings, an array of token ids, or an array of those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub embed: Option<Value>,
}

/// Which work a job asks of its provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Chat,
    Embeddings,
}

impl JobInput {
    /// The kind of work, or why the input names none or both.
    pub fn kind(&self) -> Result<InputKind, &'static str> {
        match (self.messages.is_empty(), &self.embed) {
            (false, None) => Ok(InputKind::Chat),
            (true, Some(_)) => Ok(InputKind::Embeddings),
            (true, None) => Err("the input has neither `messages` nor `embed`"),
            (false, Some(_)) => Err("the input has both `messages` and `embed`; a job does one of them"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChatMessage {
    pub role: String,
    /// A string, OpenAI-style content parts, or `null`
    /// ([`super::validate_messages`] decides which, per role, at the door).
    /// An assistant message that only calls tools may leave it out: absent
    /// reads as `null` ([`ChatMessage::content`]) but stays absent in the
    /// canonical form, which is of what the client wrote.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object)]
    content: Option<Value>,
    /// Vendor fields on a message (`name`, `tool_call_id`, `tool_calls`…)
    /// pass through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatMessage {
    /// A message of `role` saying `content` (a string, parts, or `null`).
    pub fn new(role: impl Into<String>, content: impl Into<Value>) -> Self {
        ChatMessage { role: role.into(), content: Some(content.into()), extra: Map::new() }
    }

    /// The message with `field` (`tool_calls`, `tool_call_id`…) set.
    pub fn with(mut self, field: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(field.to_owned(), value.into());
        self
    }

    /// What it says: `null` when it says nothing.
    pub fn content(&self) -> &Value {
        self.content.as_ref().unwrap_or(&Value::Null)
    }
}

/// A field that is there, `null` included (absent is the `default`).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}
