//! What a caller asks a key to be (`KeySpec`) or to become (`KeyPatch`),
//! and the bounds every key is held to, checked before anything is stored.

use serde_json::{Map, Value, json};

use super::ApiKey;
use crate::config::Role;
use crate::jobs::rfc3339;

const MAX_NAME_CHARS: usize = 200;
const MAX_OWNER_CHARS: usize = 255;
const MAX_ROUTES: usize = 100;
const MAX_METADATA_BYTES: usize = 4096;

/// A field of a key that is out of bounds, with the field's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{field}`: {reason}")]
pub struct InvalidKey {
    pub field: &'static str,
    pub reason: String,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> InvalidKey {
    InvalidKey { field, reason: reason.into() }
}

/// A new key, as asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySpec {
    pub name: String,
    pub owner: String,
    pub role: Role,
    /// The team its spend also counts against; fixed for the key's life.
    pub team: Option<String>,
    pub routes: Option<Vec<String>>,
    pub expires_at_ms: Option<i64>,
    pub metadata: Map<String, Value>,
}

impl KeySpec {
    pub fn validate(&self, now_ms: i64) -> Result<(), InvalidKey> {
        check_text("name", &self.name, MAX_NAME_CHARS)?;
        check_text("owner", &self.owner, MAX_OWNER_CHARS)?;
        if let Some(team) = &self.team {
            check_text("team", team, MAX_OWNER_CHARS)?;
        }
        if self.role == Role::TeamAdmin && self.team.is_none() {
            return Err(invalid("team", "a team admin's key needs its team"));
        }
        check_routes(self.routes.as_deref())?;
        check_expiry(self.expires_at_ms, now_ms)?;
        check_metadata(&self.metadata)
    }
}

/// A change to a key's name, routes, expiry or metadata; a field left out
/// stays as it is (`Some(None)` clears routes or expiry).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyPatch {
    pub name: Option<String>,
    pub routes: Option<Option<Vec<String>>>,
    pub expires_at_ms: Option<Option<i64>>,
    pub metadata: Option<Map<String, Value>>,
}

impl KeyPatch {
    pub fn validate(&self, now_ms: i64) -> Result<(), InvalidKey> {
        if let Some(name) = &self.name {
            check_text("name", name, MAX_NAME_CHARS)?;
        }
        if let Some(routes) = &self.routes {
            check_routes(routes.as_deref())?;
        }
        if let Some(expiry) = self.expires_at_ms {
            check_expiry(expiry, now_ms)?;
        }
        match &self.metadata {
            Some(metadata) => check_metadata(metadata),
            None => Ok(()),
        }
    }

    /// `key` as this patch leaves it (its version bumped).
    pub fn apply(&self, key: &ApiKey) -> ApiKey {
        let mut next = key.clone();
        if let Some(name) = &self.name {
            next.name.clone_from(name);
        }
        if let Some(routes) = &self.routes {
            next.routes.clone_from(routes);
        }
        if let Some(expiry) = self.expires_at_ms {
            next.expires_at_ms = expiry;
        }
        if let Some(metadata) = &self.metadata {
            next.metadata.clone_from(metadata);
        }
        next.version += 1;
        next
    }

    /// The fields it sets, for the audit.
    pub fn changes(&self) -> Value {
        let mut changes = Map::new();
        if let Some(name) = &self.name {
            changes.insert("name".into(), json!(name));
        }
        if let Some(routes) = &self.routes {
            changes.insert("routes".into(), json!(routes));
        }
        if let Some(expiry) = self.expires_at_ms {
            changes.insert("expires_at".into(), json!(expiry.map(rfc3339)));
        }
        if let Some(metadata) = &self.metadata {
            changes.insert("metadata".into(), Value::Object(metadata.clone()));
        }
        Value::Object(changes)
    }
}

fn check_text(field: &'static str, text: &str, max_chars: usize) -> Result<(), InvalidKey> {
    let chars = text.chars().count();
    if chars == 0 || chars > max_chars || text.trim() != text {
        return Err(invalid(field, format!("1 to {max_chars} characters, no leading or trailing space")));
    }
    if text.chars().any(char::is_control) {
        return Err(invalid(field, "no control characters"));
    }
    Ok(())
}

fn check_routes(routes: Option<&[String]>) -> Result<(), InvalidKey> {
    let Some(routes) = routes else { return Ok(()) };
    if routes.is_empty() || routes.len() > MAX_ROUTES {
        return Err(invalid("routes", format!("1 to {MAX_ROUTES} route names, or null for every route")));
    }
    for (i, route) in routes.iter().enumerate() {
        check_text("routes", route, 255)?;
        if routes[..i].contains(route) {
            return Err(invalid("routes", format!("`{route}` named twice")));
        }
    }
    Ok(())
}

fn check_expiry(expires_at_ms: Option<i64>, now_ms: i64) -> Result<(), InvalidKey> {
    match expires_at_ms {
        Some(at) if at <= now_ms => Err(invalid("expires_at", "must lie in the future")),
        _ => Ok(()),
    }
}

fn check_metadata(metadata: &Map<String, Value>) -> Result<(), InvalidKey> {
    let size = serde_json::to_string(metadata).map_or(usize::MAX, |text| text.len());
    if size > MAX_METADATA_BYTES {
        return Err(invalid("metadata", format!("at most {MAX_METADATA_BYTES} bytes of JSON")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> KeySpec {
        KeySpec {
            name: "support bot".into(),
            owner: "support".into(),
            role: Role::User,
            team: Some("support".into()),
            routes: Some(vec!["chat".into()]),
            expires_at_ms: Some(2_000),
            metadata: Map::new(),
        }
    }

    #[test]
    fn bounds_are_checked_by_field() {
        assert_eq!(spec().validate(1_000), Ok(()));
        let field = |spec: KeySpec| spec.validate(1_000).unwrap_err().field;
        assert_eq!(field(KeySpec { name: String::new(), ..spec() }), "name");
        assert_eq!(field(KeySpec { owner: " x".into(), ..spec() }), "owner");
        assert_eq!(field(KeySpec { routes: Some(vec![]), ..spec() }), "routes");
        assert_eq!(field(KeySpec { routes: Some(vec!["a".into(), "a".into()]), ..spec() }), "routes");
        assert_eq!(field(KeySpec { expires_at_ms: Some(1_000), ..spec() }), "expires_at");
        let big = Map::from_iter([("x".to_owned(), Value::String("y".repeat(5000)))]);
        assert_eq!(field(KeySpec { metadata: big, ..spec() }), "metadata");
    }

    #[test]
    fn a_patch_changes_what_it_names_and_says_so() {
        let material = super::super::KeyMaterial::generate().unwrap();
        let key = ApiKey::new(spec(), &material, "admin", 1_000);
        let patch = KeyPatch { routes: Some(None), name: Some("bot".into()), ..KeyPatch::default() };
        let next = patch.apply(&key);
        assert_eq!((next.name.as_str(), next.routes.as_ref(), next.version), ("bot", None, 1));
        assert_eq!(next.expires_at_ms, key.expires_at_ms);
        assert_eq!(patch.changes(), json!({"name": "bot", "routes": null}));
    }
}
