//! Where a Vertex AI model is and as whom it is called: what the gateway's
//! config gives a Vertex provider (see `ProviderSettings::vertex`).

use std::path::PathBuf;

use crate::dialect::Dialect;
use crate::secret::Secret;

/// Whose model a Vertex provider calls: it decides the path and the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publisher {
    /// Claude: `:rawPredict` / `:streamRawPredict`, Anthropic's Messages body.
    Anthropic,
    /// Gemini: `:generateContent` / `:streamGenerateContent?alt=sse`.
    Google,
}

impl Publisher {
    /// The publisher a model's name implies (`claude-…`, `gemini-…`), if any.
    pub fn of_model(model: &str) -> Option<Publisher> {
        if model.starts_with("claude-") {
            Some(Publisher::Anthropic)
        } else if model.starts_with("gemini-") {
            Some(Publisher::Google)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Publisher::Anthropic => "anthropic",
            Publisher::Google => "google",
        }
    }

    /// The dialect whose body and answers this publisher's models speak.
    pub fn dialect(self) -> Dialect {
        match self {
            Publisher::Anthropic => Dialect::Anthropic,
            Publisher::Google => Dialect::Gemini,
        }
    }
}

/// How a Vertex provider proves who it is.
#[derive(Debug, Clone)]
pub enum VertexCredentials {
    /// The path of a service-account key file (JSON): its key signs an
    /// assertion that its `token_uri` trades for an access token.
    KeyFile(PathBuf),
    /// An access token minted elsewhere (`gcloud auth print-access-token`),
    /// sent as it is until the provider is rebuilt.
    AccessToken(Secret),
}

/// Where a Vertex model is and how to call it (see [`ProviderSettings::vertex`]).
#[derive(Debug, Clone)]
pub struct VertexAddress {
    pub project: String,
    pub location: String,
    pub publisher: Publisher,
    pub credentials: VertexCredentials,
    /// Where a key file's assertions are traded for tokens, instead of the
    /// key's own `token_uri` (a private endpoint; the simulator's when it
    /// was moved).
    pub token_uri: Option<String>,
}

impl VertexAddress {
    /// The API's origin for `location`: regional, or the global endpoint.
    pub fn default_base_url(location: &str) -> String {
        match location {
            "global" => "https://aiplatform.googleapis.com".to_owned(),
            region => format!("https://{region}-aiplatform.googleapis.com"),
        }
    }
}
