//! Stored API keys and their audit. Every change is one conditional write
//! naming the version it read, with its audit entry in the same
//! transaction ([`Store::execute_guarded`]); the schema keeps the audit
//! append-only and a key's identity, revocation and retirement immutable
//! (migrations `*_api_keys.sql`).

use uuid::Uuid;

use super::exec::{Arg, Step};
use super::rows::AuditRow;
use super::{Store, StoreError};
use crate::config::Role;
use crate::keys::{ApiKey, AuditEntry, KeyAction};

macro_rules! key_columns {
    () => {
        "id, key_hash, prefix, name, owner_id, role, team, routes, expires_at, created_at, created_by, \
         revoked_at, metadata, rotated_from, retires_at, version"
    };
}

const INSERT_KEY: &str = "INSERT INTO api_keys (id, key_hash, prefix, name, owner_id, role, team, routes, \
     expires_at, created_at, created_by, metadata, rotated_from) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";
const UPDATE_KEY: &str = "UPDATE api_keys SET name = $3, routes = $4, expires_at = $5, metadata = $6, \
     version = version + 1 WHERE id = $1 AND version = $2 AND revoked_at IS NULL";
const RETIRE_KEY: &str = "UPDATE api_keys SET retires_at = $3, version = version + 1 \
     WHERE id = $1 AND version = $2 AND revoked_at IS NULL AND retires_at IS NULL";
const REVOKE_KEY: &str = "UPDATE api_keys SET revoked_at = $3, version = version + 1 \
     WHERE id = $1 AND version = $2 AND revoked_at IS NULL";
const INSERT_AUDIT: &str =
    "INSERT INTO key_audit (at, actor, action, key_id, changes) VALUES ($1, $2, $3, $4, $5)";
const SELECT_KEY_BY_HASH: &str = concat!("SELECT ", key_columns!(), " FROM api_keys WHERE key_hash = $1");
const SELECT_KEY: &str = concat!("SELECT ", key_columns!(), " FROM api_keys WHERE id = $1");
const SELECT_KEYS: &str = concat!("SELECT ", key_columns!(), " FROM api_keys ORDER BY created_at, id");
const SELECT_AUDIT: &str = "SELECT seq, at, actor, action, key_id AS subject, changes FROM key_audit \
     WHERE seq > $1 ORDER BY seq LIMIT $2";
const SELECT_AUDIT_HEAD: &str = "SELECT COALESCE(MAX(seq), 0) FROM key_audit";
const SELECT_KEY_AUDIT: &str = "SELECT seq, at, actor, action, key_id AS subject, changes FROM key_audit \
     WHERE key_id = $1 ORDER BY seq";

impl Store {
    /// Writes a new key and its `create` entry.
    pub async fn insert_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        let audit = AuditEntry::created(&key.created_by, key);
        self.execute_guarded(vec![insert_key(key)?, insert_audit(&audit)?]).await?;
        Ok(())
    }

    /// Writes `next` (name, routes, expiry, metadata) over the key if it is
    /// still at `next.version - 1` and not revoked; false when it is not.
    pub async fn update_key(&self, next: &ApiKey, audit: &AuditEntry) -> Result<bool, StoreError> {
        let args = vec![
            next.id.into(),
            (next.version - 1).into(),
            next.name.as_str().into(),
            routes_json(next.routes.as_deref())?,
            next.expires_at_ms.into(),
            Arg::Text(Some(json_text(&next.metadata)?)),
        ];
        self.execute_guarded(vec![(UPDATE_KEY, args), insert_audit(audit)?]).await
    }

    /// Retires `old` (read at its `version`) at `retires_at_ms` and writes
    /// its `successor`, with both entries; false when `old` changed, was
    /// revoked or was already rotated.
    pub async fn rotate_key(
        &self,
        old: &ApiKey,
        retires_at_ms: i64,
        successor: &ApiKey,
        actor: &str,
    ) -> Result<bool, StoreError> {
        let changes = serde_json::json!({
            "retires_at": crate::jobs::rfc3339(retires_at_ms),
            "successor": successor.id,
        });
        let rotated = AuditEntry::new(actor, KeyAction::Rotate, old.id, successor.created_at_ms, changes);
        let retire = (RETIRE_KEY, vec![old.id.into(), old.version.into(), retires_at_ms.into()]);
        let created = AuditEntry::created(actor, successor);
        let steps = vec![retire, insert_key(successor)?, insert_audit(&rotated)?, insert_audit(&created)?];
        self.execute_guarded(steps).await
    }

    /// Revokes `key` (read at its `version`); false when it changed or was
    /// revoked already.
    pub async fn revoke_key(&self, key: &ApiKey, actor: &str, now_ms: i64) -> Result<bool, StoreError> {
        let changes = serde_json::json!({"revoked_at": crate::jobs::rfc3339(now_ms)});
        let audit = AuditEntry::new(actor, KeyAction::Revoke, key.id, now_ms, changes);
        let revoke = (REVOKE_KEY, vec![key.id.into(), key.version.into(), now_ms.into()]);
        self.execute_guarded(vec![revoke, insert_audit(&audit)?]).await
    }

    pub async fn key_by_hash(&self, key_hash: &str) -> Result<Option<ApiKey>, StoreError> {
        let row = self.read_optional(SELECT_KEY_BY_HASH, vec![key_hash.into()], KeyRow::from_sqlite).await?;
        row.map(ApiKey::try_from).transpose()
    }

    pub async fn key(&self, id: Uuid) -> Result<Option<ApiKey>, StoreError> {
        let row = self.read_optional(SELECT_KEY, vec![id.into()], KeyRow::from_sqlite).await?;
        row.map(ApiKey::try_from).transpose()
    }

    /// Every stored key, oldest first.
    pub async fn keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        let rows = self.read_all(SELECT_KEYS, vec![], KeyRow::from_sqlite).await?;
        rows.into_iter().map(ApiKey::try_from).collect()
    }

    /// Up to `limit` audit entries after `after_seq`, in the order written.
    pub async fn key_audit(&self, after_seq: i64, limit: i64) -> Result<Vec<AuditEntry>, StoreError> {
        let args = vec![after_seq.into(), limit.into()];
        let rows = self.read_all(SELECT_AUDIT, args, AuditRow::from_sqlite).await?;
        rows.into_iter().map(AuditEntry::try_from).collect()
    }

    /// The `seq` of the latest audit entry (0 when there is none).
    pub async fn key_audit_head(&self) -> Result<i64, StoreError> {
        let row = self.read_optional(SELECT_AUDIT_HEAD, vec![], super::rows::first::<i64>).await?;
        Ok(row.map_or(0, |(seq,)| seq))
    }

    /// Every audit entry of one key, in the order written.
    pub async fn audit_of_key(&self, key_id: Uuid) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = self.read_all(SELECT_KEY_AUDIT, vec![key_id.into()], AuditRow::from_sqlite).await?;
        rows.into_iter().map(AuditEntry::try_from).collect()
    }
}

fn insert_key(key: &ApiKey) -> Result<Step, StoreError> {
    let args = vec![
        key.id.into(),
        key.key_hash.as_str().into(),
        key.prefix.as_str().into(),
        key.name.as_str().into(),
        key.owner.as_str().into(),
        key.role.as_str().into(),
        key.team.as_deref().into(),
        routes_json(key.routes.as_deref())?,
        key.expires_at_ms.into(),
        key.created_at_ms.into(),
        key.created_by.as_str().into(),
        Arg::Text(Some(json_text(&key.metadata)?)),
        key.rotated_from.into(),
    ];
    Ok((INSERT_KEY, args))
}

fn insert_audit(entry: &AuditEntry) -> Result<Step, StoreError> {
    let args = vec![
        entry.at_ms.into(),
        entry.actor.as_str().into(),
        entry.action.as_str().into(),
        entry.key_id.into(),
        Arg::Text(Some(json_text(&entry.changes)?)),
    ];
    Ok((INSERT_AUDIT, args))
}

fn routes_json(routes: Option<&[String]>) -> Result<Arg, StoreError> {
    Ok(Arg::Text(routes.map(json_text).transpose()?))
}

fn json_text<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Corrupt(format!("cannot encode JSON: {err}")))
}

fn corrupt(what: &str, err: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("api key {what}: {err}"))
}

#[derive(Debug, sqlx::FromRow)]
struct KeyRow {
    id: Uuid,
    key_hash: String,
    prefix: String,
    name: String,
    owner_id: String,
    role: String,
    team: Option<String>,
    routes: Option<String>,
    expires_at: Option<i64>,
    created_at: i64,
    created_by: String,
    revoked_at: Option<i64>,
    metadata: String,
    rotated_from: Option<Uuid>,
    retires_at: Option<i64>,
    version: i64,
}

impl KeyRow {
    /// Columns by position, in the order of `key_columns!`.
    fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<KeyRow> {
        Ok(KeyRow {
            id: row.get(0)?,
            key_hash: row.get(1)?,
            prefix: row.get(2)?,
            name: row.get(3)?,
            owner_id: row.get(4)?,
            role: row.get(5)?,
            team: row.get(6)?,
            routes: row.get(7)?,
            expires_at: row.get(8)?,
            created_at: row.get(9)?,
            created_by: row.get(10)?,
            revoked_at: row.get(11)?,
            metadata: row.get(12)?,
            rotated_from: row.get(13)?,
            retires_at: row.get(14)?,
            version: row.get(15)?,
        })
    }
}

impl TryFrom<KeyRow> for ApiKey {
    type Error = StoreError;

    fn try_from(row: KeyRow) -> Result<Self, Self::Error> {
        let routes = row.routes.map(|text| serde_json::from_str(&text)).transpose();
        Ok(ApiKey {
            id: row.id,
            key_hash: row.key_hash,
            prefix: row.prefix,
            name: row.name,
            owner: row.owner_id,
            role: Role::named(&row.role).ok_or_else(|| corrupt("role", &row.role))?,
            team: row.team,
            routes: routes.map_err(|err| corrupt("routes", err))?,
            expires_at_ms: row.expires_at,
            created_at_ms: row.created_at,
            created_by: row.created_by,
            revoked_at_ms: row.revoked_at,
            metadata: serde_json::from_str(&row.metadata).map_err(|err| corrupt("metadata", err))?,
            rotated_from: row.rotated_from,
            retires_at_ms: row.retires_at,
            version: row.version,
        })
    }
}

impl TryFrom<AuditRow> for AuditEntry {
    type Error = StoreError;

    fn try_from(row: AuditRow) -> Result<Self, Self::Error> {
        Ok(AuditEntry {
            seq: row.seq,
            at_ms: row.at,
            action: KeyAction::named(&row.action).ok_or_else(|| corrupt("audit action", &row.action))?,
            actor: row.actor,
            key_id: row.subject,
            changes: serde_json::from_str(&row.changes).map_err(|err| corrupt("audit changes", err))?,
        })
    }
}
