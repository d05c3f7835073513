//! Google Vertex AI: Claude (publisher `anthropic`) and Gemini (publisher
//! `google`) bought under a Google Cloud project, in one of its locations.
//! Neither needs a dialect of its own: Claude on Vertex is sent Anthropic's
//! Messages body and answers in it, Gemini on Vertex is sent Gemini's
//! `GenerateContentRequest`. What differs is the address (project,
//! location and publisher in the path), two fields of the Claude body (the
//! model is the path's, the version the body's), and the credentials: an
//! OAuth access token, minted from a service-account key ([`credentials`])
//! or given whole.

pub(crate) mod address;
mod cache;
mod credentials;
pub(crate) mod jwt;
pub(crate) mod key;
mod token;

use std::sync::Arc;

use serde_json::Value;

use crate::config::{ProviderSettings, SettingsError};
use crate::gemini::path_segment;
use crate::transport::{Endpoint, Paths, http_client};
pub(crate) use address::{Publisher, VertexAddress, VertexCredentials};

/// The version a Claude body on Vertex names (in the body, not a header).
pub(crate) const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

impl VertexAddress {
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
            let mut key = key::read(&path)
                .map_err(|err| SettingsError::Credentials(format!("{}: {err}", path.display())))?;
            if let Some(uri) = &vertex.token_uri {
                key.token_uri = reqwest::Url::parse(uri)
                    .map_err(|err| SettingsError::Credentials(format!("token_uri `{uri}`: {err}")))?;
            }
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
    use crate::secret::Secret;

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
            token_uri: None,
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
