//! Who is calling: API keys → principals.
//!
//! Keys are only ever held as SHA-256 hashes (from config, or hashed from the
//! environment at start-up, or stored by the key admin API); the plain key
//! is never stored or logged. The owner a job belongs to comes from here,
//! never from a request body. A presented key is looked up among the
//! config's principals first, then among the stored keys through their
//! cache ([`StoredKeys`], kept current by [`feed`]); [`manage`] is the one
//! way stored keys change.

pub mod feed;
pub mod manage;
mod stored;

use std::collections::HashMap;
use std::sync::Arc;

use uuid::Uuid;

use crate::config::{Config, Role};
use crate::jobs::{Attribution, Tags, sha256_hex};
use crate::keys::{ApiKey, Rights};

pub use manage::{Acting, KeyManager, ManageError, Minted};
pub use stored::{Lookup, StoredKeys};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    pub owner: String,
    pub role: Role,
    /// The routes the key may use; `None`: every route (always, for a
    /// config principal).
    pub routes: Option<Arc<[String]>>,
    /// When the key stops working (a stored key's expiry).
    pub expires_at_ms: Option<i64>,
    /// The stored key's id; `None` for a config principal.
    pub key_id: Option<Uuid>,
    /// The team its spend also counts against.
    pub team: Option<String>,
}

impl Principal {
    /// A principal of the config file: every route, no expiry, no team.
    pub fn configured(name: &str, owner: &str, role: Role) -> Principal {
        Principal {
            name: name.to_owned(),
            owner: owner.to_owned(),
            role,
            routes: None,
            expires_at_ms: None,
            key_id: None,
            team: None,
        }
    }

    /// The principal a stored key authenticates as.
    pub fn stored(key: &ApiKey) -> Principal {
        Principal {
            name: key.name.clone(),
            owner: key.owner.clone(),
            role: key.role,
            routes: key.routes.as_deref().map(Arc::from),
            expires_at_ms: key.expires_at_ms,
            key_id: Some(key.id),
            team: key.team.clone(),
        }
    }

    /// Whom a job of this principal's, carrying `tags`, is attributed to.
    pub fn attribution(&self, tags: Tags) -> Attribution {
        Attribution { key_id: self.key_id, team: self.team.clone(), tags }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether it manages keys: an admin's any, a team admin's its team's.
    pub fn manages_keys(&self) -> bool {
        matches!(self.role, Role::Admin | Role::TeamAdmin)
    }

    /// The team whose keys and spend alone it may see, for a team admin
    /// (one without a team, which the config and the schema refuse, would
    /// see none: no team is named "").
    pub fn team_scope(&self) -> Option<&str> {
        (self.role == Role::TeamAdmin).then(|| self.team.as_deref().unwrap_or(""))
    }

    pub fn rights(&self) -> Rights<'_> {
        Rights {
            role: self.role,
            routes: self.routes.as_deref(),
            expires_at_ms: self.expires_at_ms,
            team: self.team.as_deref(),
        }
    }

    /// Who made a change, as the key audit records it.
    pub fn actor(&self) -> String {
        let actor = match self.key_id {
            Some(id) => format!("key:{id} ({})", self.name),
            None => format!("principal:{}", self.name),
        };
        actor.chars().take(255).collect()
    }
}

/// Who presents `key` at `now_ms`: the key is hashed once and the hash
/// looked up among `principals` (the config's) first, then among the
/// stored `keys` (a cache by hash). A map lookup by a SHA-256 compares
/// digests, never the key: how long it takes says nothing about how close
/// a guess was.
pub async fn identify(
    principals: &Principals,
    keys: &StoredKeys,
    key: &str,
    now_ms: i64,
) -> Result<Lookup, crate::store::StoreError> {
    let key_hash = hash_key(key);
    if let Some(principal) = principals.by_hash(&key_hash) {
        return Ok(Lookup::Found(principal.clone()));
    }
    keys.authenticate(key, &key_hash, now_ms).await
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
            let owner = principal.owner.as_deref().unwrap_or(&principal.name);
            let mut configured = Principal::configured(&principal.name, owner, principal.role);
            configured.team = principal.team.clone();
            by_key_hash.insert(hash, configured);
        }
        Ok(Principals { by_key_hash })
    }

    pub fn authenticate(&self, api_key: &str) -> Option<&Principal> {
        self.by_hash(&hash_key(api_key))
    }

    /// The principal whose key hashes to `key_hash`.
    pub fn by_hash(&self, key_hash: &str) -> Option<&Principal> {
        self.by_key_hash.get(key_hash)
    }
}
