//! Who is calling: API keys → principals.
//!
//! Keys are only ever held as SHA-256 hashes (from config, or hashed from the
//! environment at start-up); the plain key is never stored or logged. The
//! owner a job belongs to comes from here, never from a request body.

use std::collections::HashMap;

use crate::config::{Config, Role};
use crate::jobs::sha256_hex;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub owner: String,
    pub role: Role,
}

impl Principal {
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }
}

/// Hex SHA-256 of an API key, the form config files hold.
pub fn hash_key(key: &str) -> String {
    sha256_hex(key.as_bytes())
}

#[derive(Debug, Clone, Default)]
pub struct Principals {
    by_key_hash: HashMap<String, Principal>,
}

#[derive(Debug, thiserror::Error)]
#[error("principal `{0}`: environment variable `{1}` is not set")]
pub struct MissingKeyEnv(String, String);

impl Principals {
    pub fn from_config(config: &Config) -> Result<Self, MissingKeyEnv> {
        let mut by_key_hash = HashMap::new();
        for principal in &config.principals {
            let hash = match (&principal.key_sha256, &principal.key_env) {
                (Some(hash), _) => hash.to_ascii_lowercase(),
                (None, Some(var)) => match std::env::var(var) {
                    Ok(key) if !key.is_empty() => hash_key(&key),
                    _ => return Err(MissingKeyEnv(principal.name.clone(), var.clone())),
                },
                (None, None) => continue,
            };
            by_key_hash.insert(
                hash,
                Principal {
                    name: principal.name.clone(),
                    owner: principal.owner.clone().unwrap_or_else(|| principal.name.clone()),
                    role: principal.role,
                },
            );
        }
        Ok(Principals { by_key_hash })
    }

    pub fn authenticate(&self, api_key: &str) -> Option<&Principal> {
        self.by_key_hash.get(&hash_key(api_key))
    }
}
