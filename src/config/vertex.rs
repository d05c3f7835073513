//! A `dialect = "vertex"` provider's settings: where its model is (project,
//! location, publisher) and how it proves who it is (a service-account key
//! file, or an access token in the environment). Checked when the file is
//! loaded so `config check` names what is missing; the key file itself is
//! read when the provider is built.

use std::path::PathBuf;

use intentgate_providers::{Publisher, Secret, VertexAddress, VertexCredentials};
use serde::Deserialize;

use super::{DialectConfig, ProviderConfig, ProviderSettingsError};

/// The standard variable naming a service-account key file (Google's
/// Application Default Credentials).
pub const GOOGLE_APPLICATION_CREDENTIALS: &str = "GOOGLE_APPLICATION_CREDENTIALS";

/// `publisher = "anthropic" | "google"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublisherConfig {
    Anthropic,
    Google,
}

impl PublisherConfig {
    fn publisher(self) -> Publisher {
        match self {
            PublisherConfig::Anthropic => Publisher::Anthropic,
            PublisherConfig::Google => Publisher::Google,
        }
    }
}

/// Fields that mean something with `dialect = "vertex"` only.
const VERTEX_ONLY: [&str; 6] =
    ["project", "location", "publisher", "credentials_file", "access_token_env", "token_uri"];

impl ProviderConfig {
    /// The publisher: the configured one, else what the model's name says.
    pub fn publisher(&self) -> Option<Publisher> {
        self.publisher.map(PublisherConfig::publisher).or_else(|| Publisher::of_model(&self.model))
    }

    fn vertex_fields(&self) -> [(&'static str, bool); 6] {
        let set = [
            self.project.is_some(),
            self.location.is_some(),
            self.publisher.is_some(),
            self.credentials_file.is_some(),
            self.access_token_env.is_some(),
            self.token_uri.is_some(),
        ];
        std::array::from_fn(|i| (VERTEX_ONLY[i], set[i]))
    }
}

/// The provider crate's Vertex address, its credentials read from the
/// environment now (never stored anywhere else).
pub(super) fn address(provider: &ProviderConfig) -> Result<VertexAddress, ProviderSettingsError> {
    let credentials = match (&provider.access_token_env, &provider.credentials_file) {
        (Some(var), _) => {
            let token = std::env::var(var).ok().filter(|token| !token.is_empty()).ok_or_else(|| {
                ProviderSettingsError::AccessTokenMissing {
                    provider: provider.name.clone(),
                    var: var.clone(),
                }
            })?;
            VertexCredentials::AccessToken(Secret::new(token))
        }
        (None, Some(path)) => VertexCredentials::KeyFile(path.clone()),
        (None, None) => {
            match std::env::var_os(GOOGLE_APPLICATION_CREDENTIALS).filter(|path| !path.is_empty()) {
                Some(path) => VertexCredentials::KeyFile(PathBuf::from(path)),
                None => return Err(ProviderSettingsError::CredentialsMissing(provider.name.clone())),
            }
        }
    };
    Ok(VertexAddress {
        project: provider.project.clone().unwrap_or_default(),
        location: provider.location.clone().unwrap_or_default(),
        publisher: provider.publisher().unwrap_or(Publisher::Google),
        credentials,
        token_uri: provider.token_uri.clone(),
    })
}

/// Names made of the characters Google's resource names use.
fn resource_name(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Vertex's required fields and what cannot go with them; the other
/// dialects may not set Vertex's. Each error is `(field, message)`.
pub(super) fn validate(provider: &ProviderConfig) -> Result<(), (String, String)> {
    if provider.dialect != DialectConfig::Vertex {
        return match provider.vertex_fields().into_iter().find(|(_, set)| *set) {
            Some((field, _)) => Err((field.into(), "is for dialect = \"vertex\" only".into())),
            None => Ok(()),
        };
    }
    for (field, value, example) in [
        ("project", &provider.project, "your Google Cloud project id"),
        ("location", &provider.location, "a region such as \"us-east5\", or \"global\""),
    ] {
        match value.as_deref() {
            None => return Err((field.into(), format!("is required with dialect = \"vertex\" ({example})"))),
            Some(name) if !resource_name(name) => {
                return Err((field.into(), format!("`{name}` cannot be a {field} in a URL")));
            }
            Some(_) => {}
        }
    }
    let model = provider.model.as_str();
    if !resource_name(&model.replace('@', "")) {
        return Err(("model".into(), format!("`{model}` cannot be a Vertex model name in a URL")));
    }
    if provider.publisher().is_none() {
        return Err((
            "publisher".into(),
            format!("cannot be told from model `{model}`: set publisher = \"anthropic\" or \"google\""),
        ));
    }
    if provider.credentials_file.is_some() && provider.access_token_env.is_some() {
        return Err(("access_token_env".into(), "set credentials_file or access_token_env, not both".into()));
    }
    if provider.access_token_env.as_deref() == Some("") {
        return Err(("access_token_env".into(), "must name an environment variable".into()));
    }
    if provider.api_key_env.is_some() {
        return Err((
            "api_key_env".into(),
            "Vertex AI takes an OAuth access token: set credentials_file or access_token_env".into(),
        ));
    }
    if provider.tokenizer.as_deref() == Some(super::REMOTE_TOKENIZER) {
        return Err(("tokenizer".into(), "`remote`: Vertex AI has no tokenize endpoint".into()));
    }
    Ok(())
}
