//! Google Vertex AI: Claude (publisher `anthropic`) and Gemini (publisher
//! `google`) bought under a Google Cloud project, in one of its locations.
//! Neither needs a dialect of its own: Claude on Vertex is sent Anthropic's
//! Messages body and answers in it, Gemini on Vertex is sent Gemini's
//! `GenerateContentRequest`. What differs is the address (project,
//! location and publisher in the path), two fields of the Claude body (the
//! model is the path's, the version the body's), and the credentials: an
//! OAuth access token, minted from a service-account key ([`credentials`])
//! or given whole.

mod cache;
mod credentials;
pub(crate) mod jwt;
pub(crate) mod key;
mod token;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::config::{Dialect, ProviderSettings, SettingsError};
use crate::gemini::path_segment;
use crate::secret::Secret;
use crate::transport::{Endpoint, Paths, http_client};

/// The version a Claude body on Vertex names (in the body, not a header).
pub(crate) const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

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
}

impl VertexAddress {
    /// The API's origin for `location`: regional, or the global endpoint.
    pub fn default_base_url(location: &str) -> String {
        match location {
            "global" => "https://aiplatform.googleapis.com".to_owned(),
            region => format!("https://{region}-aiplatform.googleapis.com"),
        }
    }

    /// Where `model`'s methods are, under the API's origin.
    fn paths(&self, model: &str) -> Paths {
        let base = format!(
            "/v1/projects/{}/locations/{}/publishers/{}/models/{}",
            path_segment(&self.project),
            path_segment(&self.location),
            self.publisher.as_str(),
            path_segment(model),
        );
        let (chat, chat_stream) = match self.publisher {
            Publisher::Anthropic => (format!("{base}:rawPredict"), format!("{base}:streamRawPredict")),
            Publisher::Google => {
                (format!("{base}:generateContent"), format!("{base}:streamGenerateContent?alt=sse"))
            }
        };
        // Neither publisher's embeddings are translated (`cannot_embed`).
        Paths { chat, chat_stream: Some(chat_stream), embeddings: format!("{base}:predict") }
    }
}

/// The bearer header of an access token given whole.
fn bearer(token: &str) -> Vec<(&'static str, String)> {
    vec![("authorization", format!("Bearer {token}"))]
}

/// A Vertex provider's endpoint: its model's address, and its access token
/// as a static header or minted per request from its key file.
pub(crate) fn endpoint(
    mut config: ProviderSettings,
    vertex: VertexAddress,
) -> Result<Endpoint, SettingsError> {
    let paths = vertex.paths(&config.model);
    match vertex.credentials {
        VertexCredentials::AccessToken(token) => {
            // As a key: sent sensitive, and scrubbed from what comes back.
            config.api_key = Some(token);
            Endpoint::new(config, paths, bearer, &[])
        }
        VertexCredentials::KeyFile(path) => {
            let key = key::read(&path)
                .map_err(|err| SettingsError::Credentials(format!("{}: {err}", path.display())))?;
            let client = http_client(config.timeouts.connect)?;
            let limit = config.timeouts.first_byte;
            config.api_key = None;
            let authorizer = credentials::ServiceAccount::new(key, client, limit);
            Ok(Endpoint::new(config, paths, bearer, &[])?.with_authorizer(Arc::new(authorizer)))
        }
    }
}

/// A Messages body as Vertex takes it: the model is the path's, and the
/// version is the body's `anthropic_version`.
pub(crate) fn claude_body(body: &mut Value) {
    if let Some(object) = body.as_object_mut() {
        object.remove("model");
        object.insert("anthropic_version".into(), ANTHROPIC_VERSION.into());
    }
}

/// Whether a header of the client's own Messages request is carried to
/// Vertex: all but `anthropic-version`, which Vertex takes in the body.
pub(crate) fn carries(header: &str) -> bool {
    !header.eq_ignore_ascii_case("anthropic-version")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_publisher_follows_the_model_and_the_path_names_all() {
        assert_eq!(Publisher::of_model("claude-sonnet-4-5@20250929"), Some(Publisher::Anthropic));
        assert_eq!(Publisher::of_model("gemini-2.5-pro"), Some(Publisher::Google));
        assert_eq!(Publisher::of_model("llama-3"), None);
        let address = VertexAddress {
            project: "p-1".into(),
            location: "us-east5".into(),
            publisher: Publisher::Anthropic,
            credentials: VertexCredentials::AccessToken(Secret::new("t")),
        };
        let paths = address.paths("claude-sonnet-4-5@20250929");
        assert_eq!(
            paths.chat,
            "/v1/projects/p-1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict"
        );
        assert!(paths.chat_stream.is_some_and(|p| p.ends_with("@20250929:streamRawPredict")));
        assert_eq!(VertexAddress::default_base_url("global"), "https://aiplatform.googleapis.com");
        assert_eq!(
            VertexAddress::default_base_url("europe-west1"),
            "https://europe-west1-aiplatform.googleapis.com"
        );
    }

    #[test]
    fn a_claude_body_loses_its_model_and_names_vertex_s_version() {
        let mut body = serde_json::json!({"model": "claude", "max_tokens": 5, "messages": []});
        claude_body(&mut body);
        assert_eq!(
            body,
            serde_json::json!({"anthropic_version": ANTHROPIC_VERSION, "max_tokens": 5, "messages": []})
        );
        assert!(!carries("anthropic-version") && carries("anthropic-beta"));
    }
}
