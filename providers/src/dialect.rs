//! The wire protocols a provider can speak: the one fact about a provider
//! nearly every part of this crate branches on, so it sits below them all.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// `POST {base_url}/chat/completions`, bearer auth.
    #[serde(rename = "openai")]
    OpenAi,
    /// `POST {base_url}/v1/messages`, `x-api-key` auth.
    Anthropic,
    /// `POST {base_url}/v1beta/models/{model}:generateContent` (and
    /// `:streamGenerateContent?alt=sse`), `x-goog-api-key` auth: Google's
    /// Gemini API, translated from and back into OpenAI's shapes.
    Gemini,
    /// Amazon Bedrock's `POST {base_url}/model/{model}/invoke` (and
    /// `/invoke-with-response-stream`): Claude's Messages body, signed
    /// with SigV4 or sent with a Bedrock API key (see `BedrockAddress`).
    Bedrock,
    /// Amazon Bedrock's `POST {base_url}/model/{model}/converse` (and
    /// `/converse-stream`): the request translated into Converse's shape,
    /// for the models Bedrock hosts that are not Claude; signed as
    /// [`Dialect::Bedrock`] is.
    #[serde(rename = "bedrock-converse")]
    BedrockConverse,
    /// `POST {base_url}/responses`, bearer auth: OpenAI's Responses API,
    /// where OpenAI's reasoning models keep their reasoning across turns
    /// (encrypted reasoning items) and Codex speaks natively.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
}

impl Dialect {
    /// Whether a request may end with the assistant's turn begun, which the
    /// model continues rather than answers (a prefill): Claude's Messages,
    /// wherever it is spoken, and Converse. OpenAI's and Gemini's APIs
    /// answer such a turn anew.
    pub fn prefills(self) -> bool {
        matches!(self, Dialect::Anthropic | Dialect::Bedrock | Dialect::BedrockConverse)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::OpenAi => "openai",
            Dialect::Anthropic => "anthropic",
            Dialect::Gemini => "gemini",
            Dialect::Bedrock => "bedrock",
            Dialect::BedrockConverse => "bedrock-converse",
            Dialect::OpenAiResponses => "openai-responses",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "openai" => Ok(Dialect::OpenAi),
            "anthropic" => Ok(Dialect::Anthropic),
            "gemini" => Ok(Dialect::Gemini),
            "bedrock" => Ok(Dialect::Bedrock),
            "bedrock-converse" => Ok(Dialect::BedrockConverse),
            "openai-responses" => Ok(Dialect::OpenAiResponses),
            other => Err(UnknownDialect(other.to_owned())),
        }
    }
}

/// A name that is not a [`Dialect`].
#[derive(Debug, thiserror::Error)]
#[error(
    "`{0}` is not a dialect (expected openai, openai-responses, anthropic, gemini, bedrock or bedrock-converse)"
)]
pub struct UnknownDialect(pub String);
