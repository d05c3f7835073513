//! Why a request cannot be said in Gemini's API: what the request's and
//! the schema's translations both refuse with.

/// Why a request cannot be said in Gemini's API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Untranslatable {
    #[error("`{field}`: {why}")]
    Field { field: &'static str, why: &'static str },
    #[error("a `{0}` message: Gemini's conversation has user and model turns only")]
    Role(String),
    #[error("a `tool` message without `tool_call_id`")]
    ToolCallId,
    #[error(
        "the `tool` message for `{0}` answers no tool call earlier in the conversation, so its function is unknown"
    )]
    UnknownToolCall(String),
    #[error("a tool call without an `id` or a function name")]
    ToolCall,
    #[error("tool call `{id}`: its arguments are not a JSON object ({why})")]
    Arguments { id: String, why: String },
    #[error("a `{kind}` content part: {why}")]
    Part { kind: String, why: &'static str },
    #[error("a tool of type `{0}`: only function tools have Gemini declarations")]
    Tool(String),
    #[error("`tool_choice` {0}: Gemini's function calling modes cannot say it")]
    ToolChoice(String),
    #[error("{at}: {why}")]
    Schema { at: String, why: String },
}
