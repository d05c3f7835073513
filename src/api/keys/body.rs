//! What the key admin API reads and writes: the request bodies, turned
//! into the domain's `KeySpec` and `KeyPatch`, and the views of keys and
//! audit entries (never a hash; the material only in the one answer that
//! made it).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::super::{Problem, ProblemType};
use crate::auth::Minted;
use crate::config::Role;
use crate::jobs::rfc3339;
use crate::keys::{ApiKey, AuditEntry, KeyAction, KeyPatch, KeyRefusal, KeySpec};

/// The overlap of a rotation when none is asked for.
const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 3600);
/// The longest overlap a rotation may ask for.
const MAX_OVERLAP: Duration = Duration::from_secs(30 * 24 * 3600);

/// `POST /v1/admin/keys`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// For people: what the key is for.
    pub name: String,
    /// The owner its jobs belong to (spend and budgets are the owner's).
    pub owner: String,
    /// `user` (the default) or `admin`.
    #[serde(default = "user")]
    pub role: Role,
    /// The team its spend also counts against (team budgets and the spend
    /// report); fixed for the key's life and kept by its rotations.
    #[serde(default)]
    pub team: Option<String>,
    /// The routes the key may use; absent or null: every route.
    #[serde(default)]
    pub routes: Option<Vec<String>>,
    /// When the key stops working (RFC 3339); or give `ttl`.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// How long the key works from now (`90d`, `12h`); or give `expires_at`.
    #[serde(default)]
    pub ttl: Option<String>,
    /// Your own labels, a JSON object of at most 4 KiB.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
}

fn user() -> Role {
    Role::User
}

impl CreateKey {
    pub fn spec(self, now_ms: i64) -> Result<KeySpec, Problem> {
        let expires_at_ms = match (self.expires_at.as_deref(), self.ttl.as_deref()) {
            (Some(_), Some(_)) => return Err(invalid("/ttl", "give `expires_at` or `ttl`, not both")),
            (Some(at), None) => Some(parse_time("/expires_at", at)?),
            (None, Some(ttl)) => {
                Some(now_ms.saturating_add(crate::engine::millis(parse_duration("/ttl", ttl)?)))
            }
            (None, None) => None,
        };
        Ok(KeySpec {
            name: self.name,
            owner: self.owner,
            role: self.role,
            team: self.team,
            routes: self.routes,
            expires_at_ms,
            metadata: self.metadata,
        })
    }
}

/// `PATCH /v1/admin/keys/{id}`: each field given is set; null clears
/// `routes` (every route) or `expires_at` (never).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateKey {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    pub routes: Option<Option<Vec<String>>>,
    /// RFC 3339, or null for never.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<Option<String>>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
}

/// A field that is present, null or not: `Some(None)` for null.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

impl UpdateKey {
    pub fn patch(self) -> Result<KeyPatch, Problem> {
        let expires_at_ms = match self.expires_at {
            Some(Some(at)) => Some(Some(parse_time("/expires_at", &at)?)),
            Some(None) => Some(None),
            None => None,
        };
        Ok(KeyPatch { name: self.name, routes: self.routes, expires_at_ms, metadata: self.metadata })
    }
}

/// `POST /v1/admin/keys/{id}/rotate` (the body may be empty).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateKey {
    /// How long the old key keeps working beside the new one (`24h` when
    /// absent, at most `30d`; `0s` retires it at once).
    #[serde(default)]
    pub overlap: Option<String>,
}

impl RotateKey {
    pub fn overlap(&self) -> Result<Duration, Problem> {
        let overlap = match self.overlap.as_deref() {
            Some(text) => parse_duration("/overlap", text)?,
            None => DEFAULT_OVERLAP,
        };
        if overlap > MAX_OVERLAP {
            return Err(invalid("/overlap", "at most 30d"));
        }
        Ok(overlap)
    }
}

fn parse_time(path: &str, text: &str) -> Result<i64, Problem> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|at| at.timestamp_millis())
        .map_err(|err| invalid(path, &format!("not an RFC 3339 time: {err}")))
}

fn parse_duration(path: &str, text: &str) -> Result<Duration, Problem> {
    humantime::parse_duration(text).map_err(|err| invalid(path, &format!("not a duration like `24h`: {err}")))
}

fn invalid(path: &str, detail: &str) -> Problem {
    Problem::new(ProblemType::InvalidBody, format!("`{}`: {detail}", &path[1..]))
        .titled("Invalid API key")
        .with("path", path)
}

/// A stored key, without its hash.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyView {
    pub id: Uuid,
    /// The first characters of the key, to recognise it by.
    pub prefix: String,
    pub name: String,
    pub owner: String,
    pub role: Role,
    pub team: Option<String>,
    /// null: every route.
    pub routes: Option<Vec<String>>,
    /// `active`, `revoked`, `expired`, `retiring` (rotated, in its overlap)
    /// or `retired` (rotated, overlap over).
    pub status: &'static str,
    pub expires_at: Option<String>,
    pub created_at: String,
    pub created_by: String,
    pub revoked_at: Option<String>,
    pub rotated_from: Option<Uuid>,
    /// A rotated key works until then.
    pub retires_at: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: Map<String, Value>,
    /// Bumped by every change.
    pub version: i64,
}

impl KeyView {
    pub fn new(key: &ApiKey, now_ms: i64) -> KeyView {
        let status = match key.refusal(now_ms) {
            Some(KeyRefusal::Revoked) => "revoked",
            Some(KeyRefusal::Expired) => "expired",
            Some(KeyRefusal::Retired) => "retired",
            None if key.retires_at_ms.is_some() => "retiring",
            None => "active",
        };
        KeyView {
            id: key.id,
            prefix: key.prefix.clone(),
            name: key.name.clone(),
            owner: key.owner.clone(),
            role: key.role,
            team: key.team.clone(),
            routes: key.routes.clone(),
            status,
            expires_at: key.expires_at_ms.map(rfc3339),
            created_at: rfc3339(key.created_at_ms),
            created_by: key.created_by.clone(),
            revoked_at: key.revoked_at_ms.map(rfc3339),
            rotated_from: key.rotated_from,
            retires_at: key.retires_at_ms.map(rfc3339),
            metadata: key.metadata.clone(),
            version: key.version,
        }
    }
}

/// A key just made: its view and, this once, the key itself.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedKey {
    #[serde(flatten)]
    pub key: KeyView,
    /// The API key. Shown only in this answer: the gateway keeps its
    /// SHA-256 alone.
    pub secret: String,
}

impl CreatedKey {
    pub fn new(minted: &Minted, now_ms: i64) -> CreatedKey {
        CreatedKey { key: KeyView::new(&minted.key, now_ms), secret: minted.secret.reveal().to_owned() }
    }
}

/// A rotation: the new key (with its secret) and the old one, now retiring.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RotatedKey {
    pub key: CreatedKey,
    pub previous: KeyView,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyList {
    pub keys: Vec<KeyView>,
}

/// One change to a key.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditView {
    /// Its place in the order of changes; page with `?after=`.
    pub seq: i64,
    pub at: String,
    /// Who made it (`principal:<name>`, `key:<id> (<name>)`, `cli:<user>`).
    pub actor: String,
    pub action: KeyAction,
    pub key_id: Uuid,
    /// The fields the change set (never key material).
    #[schema(value_type = Object)]
    pub changes: Value,
}

impl From<&AuditEntry> for AuditView {
    fn from(entry: &AuditEntry) -> Self {
        AuditView {
            seq: entry.seq,
            at: rfc3339(entry.at_ms),
            actor: entry.actor.clone(),
            action: entry.action,
            key_id: entry.key_id,
            changes: entry.changes.clone(),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditList {
    pub entries: Vec<AuditView>,
    /// Pass as `after` for the next page; null on the last.
    pub next_after: Option<i64>,
}

/// `GET /v1/admin/keys/audit` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Entries after this `seq` (0: from the first).
    #[serde(default)]
    pub after: i64,
    /// At most this many (1–1000, default 100).
    #[serde(default)]
    pub limit: Option<i64>,
}
