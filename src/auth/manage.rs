//! The one way stored keys change: create, update, rotate, revoke. Each
//! checks what was asked against the key bounds (`keys::KeySpec`) and
//! against the caller's own rights (`keys::Rights::covers`: no caller
//! makes or manages a key that may do more than itself) before anything
//! is written, writes the change and its audit entry in one transaction
//! naming the version it read, and drops the key from this replica's cache
//! at once (the other replicas hear of it through `feed.rs`). The admin API
//! and the CLI both call these.

use std::time::Duration;

use uuid::Uuid;

use super::StoredKeys;
use crate::keys::{ApiKey, Excess, InvalidKey, KeyMaterial, KeyPatch, KeySpec, NoRandomness, Rights};
use crate::store::{Store, StoreError};

/// Who is making a change: the name the audit records, and the rights a
/// change may not exceed.
#[derive(Debug, Clone)]
pub struct Acting<'a> {
    pub actor: String,
    pub rights: Rights<'a>,
}

/// A key just made, with its material: shown once, then dropped.
#[derive(Debug)]
pub struct Minted {
    pub key: ApiKey,
    pub secret: KeyMaterial,
}

/// Why a change was not made; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    #[error(transparent)]
    Invalid(#[from] InvalidKey),
    #[error(transparent)]
    Exceeds(#[from] Excess),
    #[error("no API key {0}")]
    NotFound(Uuid),
    #[error("API key {0} is revoked: it cannot change any more")]
    Revoked(Uuid),
    #[error("API key {0} was rotated already: rotate its successor")]
    Rotated(Uuid),
    #[error("API key {0} changed while this change was made: read it again and retry")]
    Changed(Uuid),
    #[error(transparent)]
    NoRandomness(#[from] NoRandomness),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Makes the changes, on one store, dropping changed keys from `cache`.
#[derive(Clone)]
pub struct KeyManager {
    store: Store,
    cache: Option<StoredKeys>,
}

impl KeyManager {
    /// `cache`: the serving replica's cache, or `None` for the CLI.
    pub fn new(store: Store, cache: Option<StoredKeys>) -> KeyManager {
        KeyManager { store, cache }
    }

    pub async fn create(&self, by: &Acting<'_>, spec: KeySpec, now_ms: i64) -> Result<Minted, ManageError> {
        spec.validate(now_ms)?;
        let secret = KeyMaterial::generate()?;
        let key = ApiKey::new(spec, &secret, &by.actor, now_ms);
        by.rights.covers(&key.rights())?;
        self.store.insert_key(&key).await?;
        self.forget(key.id);
        Ok(Minted { key, secret })
    }

    pub async fn update(
        &self,
        by: &Acting<'_>,
        id: Uuid,
        patch: &KeyPatch,
        now_ms: i64,
    ) -> Result<ApiKey, ManageError> {
        patch.validate(now_ms)?;
        let key = self.changeable(by, id).await?;
        let next = patch.apply(&key);
        by.rights.covers(&next.rights())?;
        let audit = crate::keys::AuditEntry::new(
            &by.actor,
            crate::keys::KeyAction::Update,
            id,
            now_ms,
            patch.changes(),
        );
        let written = self.store.update_key(&next, &audit).await?;
        self.settled(id, written).await?;
        Ok(next)
    }

    /// Makes `id`'s successor; `id` keeps working for `overlap`, then is
    /// refused. Returns the successor (with its material) and the old key.
    pub async fn rotate(
        &self,
        by: &Acting<'_>,
        id: Uuid,
        overlap: Duration,
        now_ms: i64,
    ) -> Result<(Minted, ApiKey), ManageError> {
        let old = self.changeable(by, id).await?;
        if old.retires_at_ms.is_some() {
            return Err(ManageError::Rotated(id));
        }
        let secret = KeyMaterial::generate()?;
        let successor = old.successor(&secret, &by.actor, now_ms);
        let retires_at_ms = now_ms.saturating_add(crate::engine::millis(overlap));
        let written = self.store.rotate_key(&old, retires_at_ms, &successor, &by.actor).await?;
        self.settled(id, written).await?;
        let retired = ApiKey { retires_at_ms: Some(retires_at_ms), version: old.version + 1, ..old };
        Ok((Minted { key: successor, secret }, retired))
    }

    /// Revokes `id`: refused from now on, on every replica.
    pub async fn revoke(&self, by: &Acting<'_>, id: Uuid, now_ms: i64) -> Result<ApiKey, ManageError> {
        let key = self.changeable(by, id).await?;
        let written = self.store.revoke_key(&key, &by.actor, now_ms).await?;
        self.settled(id, written).await?;
        Ok(ApiKey { revoked_at_ms: Some(now_ms), version: key.version + 1, ..key })
    }

    /// The key `id`, provided it can still change and the caller's rights
    /// cover it.
    async fn changeable(&self, by: &Acting<'_>, id: Uuid) -> Result<ApiKey, ManageError> {
        let key = self.store.key(id).await?.ok_or(ManageError::NotFound(id))?;
        if key.revoked_at_ms.is_some() {
            return Err(ManageError::Revoked(id));
        }
        by.rights.covers(&key.rights())?;
        Ok(key)
    }

    /// After a conditional write: the cache forgets the key either way (a
    /// write that found it changed means someone else changed it), and a
    /// write that did not happen says why.
    async fn settled(&self, id: Uuid, written: bool) -> Result<(), ManageError> {
        self.forget(id);
        if written {
            return Ok(());
        }
        match self.store.key(id).await? {
            Some(key) if key.revoked_at_ms.is_some() => Err(ManageError::Revoked(id)),
            _ => Err(ManageError::Changed(id)),
        }
    }

    fn forget(&self, id: Uuid) {
        if let Some(cache) = &self.cache {
            cache.forget(id);
        }
    }
}
