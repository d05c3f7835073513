//! The audit of key changes: one entry per change, written in the change's
//! own transaction, never edited (the schema refuses). It says who did
//! what to which key and when, and the fields the change set — never key
//! material, which no entry is made from.

use serde_json::{Value, json};
use uuid::Uuid;

use super::ApiKey;
use crate::jobs::rfc3339;

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyAction {
    Create,
    Update,
    Rotate,
    Revoke,
}

impl KeyAction {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyAction::Create => "create",
            KeyAction::Update => "update",
            KeyAction::Rotate => "rotate",
            KeyAction::Revoke => "revoke",
        }
    }

    pub fn named(name: &str) -> Option<KeyAction> {
        [KeyAction::Create, KeyAction::Update, KeyAction::Rotate, KeyAction::Revoke]
            .into_iter()
            .find(|action| action.as_str() == name)
    }
}

/// One change, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// Its place in the order of changes (0 before it is written).
    pub seq: i64,
    pub at_ms: i64,
    pub actor: String,
    pub action: KeyAction,
    pub key_id: Uuid,
    /// The fields the change set, as JSON.
    pub changes: Value,
}

impl AuditEntry {
    /// A change about to be written.
    pub fn new(actor: &str, action: KeyAction, key_id: Uuid, at_ms: i64, changes: Value) -> AuditEntry {
        AuditEntry { seq: 0, at_ms, actor: actor.to_owned(), action, key_id, changes }
    }

    /// What a new key was made with: everything but its material and hash.
    pub fn created(actor: &str, key: &ApiKey) -> AuditEntry {
        let changes = json!({
            "prefix": key.prefix,
            "name": key.name,
            "owner": key.owner,
            "role": key.role.as_str(),
            "routes": key.routes,
            "expires_at": key.expires_at_ms.map(rfc3339),
            "metadata": key.metadata,
            "rotated_from": key.rotated_from,
        });
        AuditEntry::new(actor, KeyAction::Create, key.id, key.created_at_ms, changes)
    }
}
