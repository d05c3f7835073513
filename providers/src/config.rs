//! What the gateway tells this crate about one provider.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::dialect::Dialect;
use crate::secret::Secret;

/// Per-provider time limits. Each is enforced separately so that each maps to
/// the right outcome class: only `connect` can prove the request was never
/// sent; the others expire after it may have been.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// DNS + TCP + TLS. Expiry is `not_sent`.
    pub connect: Duration,
    /// From the start of the call to the response headers (so it includes
    /// `connect`). Expiry is `unknown`.
    pub first_byte: Duration,
    /// From the start of the call to the last byte, streams included.
    /// Expiry is `unknown`.
    pub total: Duration,
    /// The longest gap between two pieces of a streamed body. Expiry is `unknown`.
    pub stream_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(2),
            first_byte: Duration::from_secs(60),
            total: Duration::from_secs(120),
            stream_idle: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// The gateway's name for this provider (logs, metrics).
    pub name: String,
    pub dialect: Dialect,
    /// `https://api.openai.com/v1`, `https://api.anthropic.com`,
    /// `https://generativelanguage.googleapis.com`, or the simulator's
    /// `http://ADDR/v1` / `http://ADDR`.
    pub base_url: String,
    /// Sent as the request's `model`, overriding whatever the caller sent
    /// (Gemini: named in the request's path instead).
    pub model: String,
    pub api_key: Option<Secret>,
    pub timeouts: Timeouts,
    /// Sent on every request (e.g. `OpenAI-Organization`, or `x-sim-script`
    /// against the simulator). The identity and auth headers always win.
    pub extra_headers: Vec<(String, String)>,
    /// Top-level fields merged into every request body, replacing the
    /// caller's (`response_format`, `temperature`, vendor fields); `model`
    /// and `stream` stay the adapter's.
    pub request_overrides: Map<String, Value>,
    /// A caller's higher (or missing) `temperature` is sent as this.
    pub max_temperature: Option<f64>,
    /// Send an assistant message's `content: null` (a message that only
    /// calls tools) as `""`: some OpenAI-compatible servers refuse null
    /// (llama-cpp-python 0.3 validates assistant content as a string).
    pub null_content_as_empty: bool,
    pub answer_limits: AnswerLimits,
    /// Where a large answer takes room before it is read: one budget shared
    /// by every provider of a gateway (each its own by default).
    pub answer_budget: crate::AnswerBudget,
    /// A streamed event that cannot be read is skipped (the chunk says so
    /// in [`crate::StreamChunk::skipped`]) instead of ending the stream
    /// `bad_output`. Off by default: the answer then lacks what it said.
    pub skip_malformed_events: bool,
    /// Azure OpenAI's addressing for an OpenAI-dialect provider: the
    /// deployment in the path, `api-version` in the query, the key in
    /// `api-key` (no `Authorization`). The body is OpenAI's.
    pub azure: Option<AzureAddress>,
    /// Google Vertex AI's addressing and credentials, for a provider whose
    /// `dialect` is its publisher's (Anthropic for Claude, Gemini for
    /// Gemini): the model under a project's location, an OAuth access
    /// token instead of a key. `base_url` is the API's origin.
    pub vertex: Option<crate::vertex::address::VertexAddress>,
    /// A Bedrock provider's region and AWS credentials (required with
    /// [`Dialect::Bedrock`] and [`Dialect::BedrockConverse`]); a Bedrock API
    /// key is `api_key` instead.
    pub bedrock: Option<BedrockAddress>,
}

/// Where and as whom a Bedrock provider is called (see [`ProviderSettings::bedrock`]).
#[derive(Debug, Clone)]
pub struct BedrockAddress {
    /// The region requests are signed for (`us-east-1`).
    pub region: String,
    /// Signs every request (SigV4); `None` with a Bedrock API key.
    pub credentials: Option<crate::bedrock::sigv4::Credentials>,
}

/// Where an Azure OpenAI deployment is reached (see [`ProviderSettings::azure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureAddress {
    pub deployment: String,
    pub api_version: String,
}

impl AzureAddress {
    /// The path (and query) of `operation` (`chat/completions`, `embeddings`).
    pub(crate) fn path(&self, operation: &str) -> String {
        format!("/openai/deployments/{}/{operation}?api-version={}", self.deployment, self.api_version)
    }

    /// The path (and query) of the Responses API, which Azure serves per
    /// resource, not per deployment (the deployment is the body's `model`).
    pub(crate) fn responses_path(&self) -> String {
        format!("/openai/responses?api-version={}", self.api_version)
    }
}

/// How large an answer may be: a provider that answers gigabytes must not
/// take the gateway's memory or the store's disk with it. Past a limit the
/// answer is refused as `bad_output` and not read further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerLimits {
    /// A whole non-streamed body, and the sum of a stream's bytes.
    pub max_response_bytes: usize,
    /// One server-sent event of a stream.
    pub max_event_bytes: usize,
}

impl Default for AnswerLimits {
    fn default() -> Self {
        AnswerLimits { max_response_bytes: 16 * 1024 * 1024, max_event_bytes: 1024 * 1024 }
    }
}

impl ProviderSettings {
    pub fn new(name: &str, dialect: Dialect, base_url: &str, model: &str) -> Self {
        ProviderSettings {
            name: name.to_owned(),
            dialect,
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            api_key: None,
            timeouts: Timeouts::default(),
            extra_headers: Vec::new(),
            request_overrides: Map::new(),
            max_temperature: None,
            null_content_as_empty: false,
            answer_limits: AnswerLimits::default(),
            answer_budget: crate::AnswerBudget::default(),
            skip_malformed_events: false,
            azure: None,
            vertex: None,
            bedrock: None,
        }
    }
}

/// Why a [`ProviderSettings`] cannot become a `Provider`. Never contains the key.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("base_url `{url}` is not an http(s) URL: {reason}")]
    BaseUrl { url: String, reason: String },
    #[error("tokenizer path `{path}` must start with `/` or be an http(s) URL")]
    TokenizerPath { path: String },
    #[error("header `{0}` has an invalid name or value")]
    Header(String),
    #[error("the API key is not a valid header value")]
    ApiKey,
    #[error("the Vertex AI credentials cannot be used: {0}")]
    Credentials(String),
    #[error("a Bedrock provider needs its region")]
    BedrockRegion,
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}
