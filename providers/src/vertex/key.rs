//! A Google service-account key file: who the account is (`client_email`,
//! `private_key_id`), where it trades assertions for tokens (`token_uri`),
//! and its RSA key, parsed once when the provider is built so that a bad
//! file fails `config check`, not the first request. The key never leaves
//! this type: no `Debug` of it, no error that quotes it.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::signature::RsaKeyPair;
use serde::Deserialize;

/// Why a key file cannot be used. Never contains the key.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KeyError {
    #[error("cannot read the key file: {0}")]
    Read(String),
    #[error("not a service-account key file: {0}")]
    Json(String),
    #[error("`private_key` is not a PEM \"PRIVATE KEY\" (PKCS#8), as Google issues them")]
    Pem,
    #[error("`private_key` is not a usable RSA key: {0}")]
    Rsa(String),
    #[error("`token_uri` is not an http(s) URL")]
    TokenUri,
}

#[derive(Deserialize)]
struct KeyFile {
    client_email: String,
    private_key_id: String,
    private_key: String,
    token_uri: String,
}

/// A parsed service-account key.
pub(crate) struct ServiceAccountKey {
    pub(crate) client_email: String,
    pub(crate) private_key_id: String,
    pub(crate) token_uri: reqwest::Url,
    pub(crate) pair: RsaKeyPair,
}

impl fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("client_email", &self.client_email)
            .field("private_key_id", &self.private_key_id)
            .field("token_uri", &self.token_uri.as_str())
            .finish_non_exhaustive()
    }
}

/// The key file at `path`.
pub(crate) fn read(path: &Path) -> Result<ServiceAccountKey, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|err| KeyError::Read(err.kind().to_string()))?;
    parse(&text)
}

/// A key file's text. serde's messages name a field or a position, never a value.
pub(crate) fn parse(text: &str) -> Result<ServiceAccountKey, KeyError> {
    let file: KeyFile = serde_json::from_str(text).map_err(|err| KeyError::Json(without_position(&err)))?;
    let token_uri = reqwest::Url::parse(&file.token_uri)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https"))
        .ok_or(KeyError::TokenUri)?;
    let pair = RsaKeyPair::from_pkcs8(&pkcs8_der(&file.private_key)?)
        .map_err(|err| KeyError::Rsa(err.to_string()))?;
    Ok(ServiceAccountKey {
        client_email: file.client_email,
        private_key_id: file.private_key_id,
        token_uri,
        pair,
    })
}

/// serde's message without what it quotes of the input.
fn without_position(err: &serde_json::Error) -> String {
    match err.classify() {
        serde_json::error::Category::Data => {
            let message = err.to_string();
            // "missing field `x` at line 1 column 2": the field, not the text.
            message.split(" at line ").next().unwrap_or_default().to_owned()
        }
        _ => "the file is not JSON".to_owned(),
    }
}

/// The DER bytes of a PEM `PRIVATE KEY` block: the base64 between its
/// header and footer lines.
fn pkcs8_der(pem: &str) -> Result<Vec<u8>, KeyError> {
    let body = pem
        .trim()
        .strip_prefix("-----BEGIN PRIVATE KEY-----")
        .and_then(|rest| rest.strip_suffix("-----END PRIVATE KEY-----"))
        .ok_or(KeyError::Pem)?;
    let base64: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    STANDARD.decode(base64).map_err(|_| KeyError::Pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST_KEY: &str = include_str!("../sim/vertex/test_service_account.json");

    #[test]
    fn the_test_key_parses_and_a_broken_one_says_why_without_quoting_it() {
        let key = parse(TEST_KEY).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(key.client_email, "intentgate-sim@sim-project.iam.gserviceaccount.com");
        assert!(!format!("{key:?}").contains("PRIVATE"));

        let mut file: serde_json::Value = serde_json::from_str(TEST_KEY).unwrap_or_default();
        file["private_key"] = "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----".into();
        assert!(matches!(parse(&file.to_string()), Err(KeyError::Pem)));
        file["private_key"] = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----".into();
        let refused = parse(&file.to_string()).map(drop).unwrap_err().to_string();
        assert!(!refused.contains("c2VjcmV0"), "{refused}");
        let missing = parse(r#"{"client_email": "secret-value"}"#).map(drop).unwrap_err().to_string();
        assert!(missing.contains("missing field") && !missing.contains("secret-value"), "{missing}");
    }
}
