//! API keys managed at runtime (the domain: no HTTP, no SQL).
//!
//! A stored key ([`ApiKey`]) carries what a `[[principals]]` entry carries
//! (name, owner, role) and what only a managed key has: the routes it may
//! use, an expiry, metadata, and its life: created, perhaps rotated (then it
//! retires at the end of the overlap), perhaps revoked. Its material is
//! made by [`KeyMaterial`] and never kept. Who may make or change which key
//! is [`Rights::covers`]; what a change records is [`audit`].

pub mod audit;
mod material;
mod rights;
mod spec;

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::config::Role;

pub use audit::{AuditEntry, KeyAction};
pub use material::{KEY_SCHEME, KeyMaterial, NoRandomness, PREFIX_LEN, may_be_stored_key};
pub use rights::{Excess, Rights};
pub use spec::{InvalidKey, KeyPatch, KeySpec};

/// One stored key, as its row holds it (the hash, never the material).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKey {
    pub id: Uuid,
    pub key_hash: String,
    pub prefix: String,
    pub name: String,
    pub owner: String,
    pub role: Role,
    pub team: Option<String>,
    /// `None`: every route.
    pub routes: Option<Vec<String>>,
    pub expires_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub created_by: String,
    pub revoked_at_ms: Option<i64>,
    pub metadata: Map<String, Value>,
    /// The key this one replaced.
    pub rotated_from: Option<Uuid>,
    /// When a rotated key stops working.
    pub retires_at_ms: Option<i64>,
    /// Bumped by every change; a change names the version it read.
    pub version: i64,
}

/// Why a stored key no longer works.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyRefusal {
    #[error("the API key was revoked")]
    Revoked,
    #[error("the API key has expired")]
    Expired,
    #[error("the API key was rotated and its overlap has ended: use its successor")]
    Retired,
}

impl ApiKey {
    /// A new key's row from what its creator asked for.
    pub fn new(spec: KeySpec, material: &KeyMaterial, created_by: &str, now_ms: i64) -> ApiKey {
        ApiKey {
            id: Uuid::now_v7(),
            key_hash: material.hash(),
            prefix: material.prefix(),
            name: spec.name,
            owner: spec.owner,
            role: spec.role,
            team: spec.team,
            routes: spec.routes,
            expires_at_ms: spec.expires_at_ms,
            created_at_ms: now_ms,
            created_by: created_by.to_owned(),
            revoked_at_ms: None,
            metadata: spec.metadata,
            rotated_from: None,
            retires_at_ms: None,
            version: 0,
        }
    }

    /// The key that replaces this one: the same rights and labels, new
    /// material.
    pub fn successor(&self, material: &KeyMaterial, created_by: &str, now_ms: i64) -> ApiKey {
        ApiKey {
            id: Uuid::now_v7(),
            key_hash: material.hash(),
            prefix: material.prefix(),
            created_at_ms: now_ms,
            created_by: created_by.to_owned(),
            revoked_at_ms: None,
            rotated_from: Some(self.id),
            retires_at_ms: None,
            version: 0,
            ..self.clone()
        }
    }

    /// Why the key does not work at `now_ms`, if it does not.
    pub fn refusal(&self, now_ms: i64) -> Option<KeyRefusal> {
        if self.revoked_at_ms.is_some() {
            Some(KeyRefusal::Revoked)
        } else if self.expires_at_ms.is_some_and(|at| at <= now_ms) {
            Some(KeyRefusal::Expired)
        } else if self.retires_at_ms.is_some_and(|at| at <= now_ms) {
            Some(KeyRefusal::Retired)
        } else {
            None
        }
    }

    pub fn rights(&self) -> Rights<'_> {
        Rights {
            role: self.role,
            routes: self.routes.as_deref(),
            expires_at_ms: self.expires_at_ms,
            team: self.team.as_deref(),
        }
    }
}
