//! A provider's own tokenizer, asked over HTTP: what the contract suites'
//! rendering checks (R9 in `docs/design.md`) go through when there is no
//! local copy of it (`tokenizer = "remote"`), so a self-hosted model is
//! still checked through *its* tokenizer.
//!
//! One request shape serves three servers. The text is sent as `input`,
//! `content` and `prompt` at once, with the provider's `model`; each server
//! reads its own field and ignores the others:
//!
//! | server | tokenize | detokenize |
//! |---|---|---|
//! | llama-cpp-python (the default paths) | `POST /extras/tokenize {"input"}` → `{"tokens"}` | `POST /extras/detokenize {"tokens"}` → `{"text"}` |
//! | llama.cpp's `llama-server` | `POST /tokenize {"content"}` → `{"tokens"}` | `POST /detokenize {"tokens"}` → `{"content"}` |
//! | vLLM | `POST /tokenize {"model", "prompt"}` → `{"tokens"}` | `POST /detokenize {"model", "tokens"}` → `{"prompt"}` |
//!
//! Paths are resolved against the origin of the provider's `base_url`
//! (`http://host:port/v1` → `http://host:port/extras/tokenize`), or are
//! absolute URLs. The provider's auth and extra headers are sent too.
//!
//! None of these servers says which tokens are special, and some put a BOS
//! token before every encoding (vLLM by default; llama-cpp-python when the
//! model's metadata asks for it): callers learn that prefix by encoding the
//! empty string.

use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::{ProviderSettings, SettingsError};
use crate::dialect::Dialect;
use crate::secret::Secret;
use crate::transport::{error_chain, http_client, insert};
use crate::{anthropic, gemini, openai};

/// llama-cpp-python's tokenize endpoint.
pub const DEFAULT_TOKENIZE_PATH: &str = "/extras/tokenize";
/// llama-cpp-python's detokenize endpoint.
pub const DEFAULT_DETOKENIZE_PATH: &str = "/extras/detokenize";

/// A provider's tokenize and detokenize endpoints.
#[derive(Debug)]
pub struct RemoteTokenizer {
    provider: String,
    model: String,
    client: reqwest::Client,
    tokenize: reqwest::Url,
    detokenize: reqwest::Url,
    headers: HeaderMap,
    timeout: Duration,
    key: Option<Secret>,
}

/// Why the provider's tokenizer could not be asked. Never contains the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenizeError {
    #[error("{url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered {status}: {body}")]
    Status { url: String, status: u16, body: String },
    #[error("{url}: not a (de)tokenize answer: {reason}")]
    Shape { url: String, reason: String },
}

impl RemoteTokenizer {
    /// The endpoints of `config`'s provider at `tokenize_path` and
    /// `detokenize_path` (see the module docs for how they resolve).
    pub fn new(
        config: &ProviderSettings,
        tokenize_path: &str,
        detokenize_path: &str,
    ) -> Result<Self, SettingsError> {
        let base = reqwest::Url::parse(&config.base_url).map_err(|err| SettingsError::BaseUrl {
            url: config.base_url.clone(),
            reason: err.to_string(),
        })?;
        let resolve = |path: &str| {
            let absolute = path.starts_with("http://") || path.starts_with("https://");
            if !(absolute || path.starts_with('/')) {
                return Err(SettingsError::TokenizerPath { path: path.to_owned() });
            }
            base.join(path).map_err(|_| SettingsError::TokenizerPath { path: path.to_owned() })
        };
        let mut headers = HeaderMap::new();
        for (name, value) in &config.extra_headers {
            insert(&mut headers, name, value)?;
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &config.api_key {
            let auth = match config.dialect {
                Dialect::OpenAi | Dialect::OpenAiResponses => openai::auth(key.expose()),
                Dialect::Anthropic => anthropic::auth(key.expose()),
                Dialect::Gemini => gemini::auth(key.expose()),
                Dialect::Bedrock | Dialect::BedrockConverse => crate::bedrock::auth(key.expose()),
            };
            for (name, value) in auth {
                let mut value = HeaderValue::from_str(&value).map_err(|_| SettingsError::ApiKey)?;
                value.set_sensitive(true);
                headers.insert(name, value);
            }
        }
        Ok(RemoteTokenizer {
            provider: config.name.clone(),
            model: config.model.clone(),
            client: http_client(config.timeouts.connect)?,
            tokenize: resolve(tokenize_path)?,
            detokenize: resolve(detokenize_path)?,
            headers,
            timeout: config.timeouts.total,
            key: config.api_key.clone(),
        })
    }

    /// The provider's name, for messages.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The tokenize endpoint's URL.
    pub fn tokenize_url(&self) -> &str {
        self.tokenize.as_str()
    }

    /// The token ids of `text`, as the provider's tokenizer encodes it
    /// (including any prefix it always adds, and control tokens it parses
    /// out of the text).
    pub async fn tokenize(&self, text: &str) -> Result<Vec<u32>, TokenizeError> {
        #[derive(Deserialize)]
        struct Tokens {
            tokens: Vec<u32>,
        }
        let body = json!({"input": text, "content": text, "prompt": text, "model": self.model});
        let answer = self.post(&self.tokenize, &body).await?;
        serde_json::from_value::<Tokens>(answer)
            .map(|tokens| tokens.tokens)
            .map_err(|err| self.shape(&self.tokenize, err.to_string()))
    }

    /// The text `tokens` decode to. Only send ids the same tokenizer gave
    /// out: llama-cpp-python's server aborts on an id outside its vocabulary.
    pub async fn detokenize(&self, tokens: &[u32]) -> Result<String, TokenizeError> {
        let body = json!({"tokens": tokens, "model": self.model});
        let answer = self.post(&self.detokenize, &body).await?;
        ["text", "content", "prompt"]
            .into_iter()
            .find_map(|field| answer.get(field).and_then(Value::as_str))
            .map(str::to_owned)
            .ok_or_else(|| self.shape(&self.detokenize, "no `text`, `content` or `prompt` string".into()))
    }

    async fn post(&self, url: &reqwest::Url, body: &Value) -> Result<Value, TokenizeError> {
        let unreachable = |reason: String| TokenizeError::Unreachable { url: url.to_string(), reason };
        let response = self
            .client
            .post(url.clone())
            .headers(self.headers.clone())
            .timeout(self.timeout)
            .body(body.to_string())
            .send()
            .await
            .map_err(|err| unreachable(self.redact(error_chain(&err))))?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|err| unreachable(self.redact(error_chain(&err))))?;
        if !status.is_success() {
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            if text.len() > 300 {
                let cut = (0..=300).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
                text.truncate(cut);
                text.push('…');
            }
            return Err(TokenizeError::Status {
                url: url.to_string(),
                status: status.as_u16(),
                body: self.redact(text),
            });
        }
        serde_json::from_slice(&bytes).map_err(|err| self.shape(url, err.to_string()))
    }

    fn shape(&self, url: &reqwest::Url, reason: String) -> TokenizeError {
        TokenizeError::Shape { url: url.to_string(), reason }
    }

    fn redact(&self, text: String) -> String {
        match &self.key {
            Some(key) if !key.expose().is_empty() => text.replace(key.expose(), "[redacted]"),
            _ => text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer(base_url: &str, tokenize: &str, detokenize: &str) -> Result<RemoteTokenizer, SettingsError> {
        RemoteTokenizer::new(
            &ProviderSettings::new("p", Dialect::OpenAi, base_url, "m"),
            tokenize,
            detokenize,
        )
    }

    #[test]
    fn paths_resolve_against_the_origin_of_the_base_url() {
        let t =
            tokenizer("http://127.0.0.1:8089/v1", DEFAULT_TOKENIZE_PATH, DEFAULT_DETOKENIZE_PATH).unwrap();
        assert_eq!(t.tokenize.as_str(), "http://127.0.0.1:8089/extras/tokenize");
        assert_eq!(t.detokenize.as_str(), "http://127.0.0.1:8089/extras/detokenize");
        let t = tokenizer("http://h:8000/v1/", "/tokenize", "https://other:1/detok").unwrap();
        assert_eq!(t.tokenize.as_str(), "http://h:8000/tokenize");
        assert_eq!(t.detokenize.as_str(), "https://other:1/detok");
        assert!(matches!(
            tokenizer("http://h/v1", "tokenize", "/detokenize"),
            Err(SettingsError::TokenizerPath { .. })
        ));
    }
}
