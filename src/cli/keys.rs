//! `intentgate keys create|list|rotate|revoke`: stored API keys, managed
//! straight in the configured database, as the other operator commands
//! are. A change goes through the same `auth::KeyManager` as the admin
//! API, with the audit's actor `cli:<user>` and an operator's full rights
//! (whoever can open the database can do anything to it); serving
//! gateways see the change within a second (`auth::feed`).

use std::time::Duration;

use uuid::Uuid;

use super::contract::print_table;
use super::terminal::printable;
use crate::auth::{Acting, KeyManager, ManageError, Minted};
use crate::config::Role;
use crate::jobs::{now_ms, rfc3339};
use crate::keys::{ApiKey, KeySpec, Rights};
use crate::store::Store;

/// What `keys create` asks for.
pub struct Create {
    pub name: String,
    pub owner: String,
    pub role: Role,
    pub team: Option<String>,
    pub routes: Vec<String>,
    pub ttl: Option<Duration>,
}

/// The operator at the command line.
fn operator() -> Acting<'static> {
    let user = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    Acting {
        actor: format!("cli:{user}").chars().take(255).collect(),
        rights: Rights { role: Role::Admin, routes: None, expires_at_ms: None, team: None },
    }
}

fn manager(store: Store) -> KeyManager {
    KeyManager::new(store, None)
}

fn message(err: ManageError) -> String {
    err.to_string()
}

fn print_secret(minted: &Minted) {
    println!(
        "key {} ({}) for owner `{}`",
        minted.key.id,
        printable(&minted.key.name),
        printable(&minted.key.owner)
    );
    println!("{}", minted.secret.reveal());
    eprintln!("the key above is shown this once: the gateway keeps only its SHA-256");
}

pub async fn create(store: Store, ask: Create) -> Result<(), String> {
    let now = now_ms();
    let spec = KeySpec {
        name: ask.name,
        owner: ask.owner,
        role: ask.role,
        team: ask.team,
        routes: (!ask.routes.is_empty()).then_some(ask.routes),
        expires_at_ms: ask.ttl.map(|ttl| now.saturating_add(crate::engine::millis(ttl))),
        metadata: serde_json::Map::new(),
    };
    let minted = manager(store).create(&operator(), spec, now).await.map_err(message)?;
    print_secret(&minted);
    Ok(())
}

pub async fn list(store: Store) -> Result<(), String> {
    let keys = store.keys().await.map_err(|err| err.to_string())?;
    let now = now_ms();
    let rows: Vec<[String; 7]> = keys.iter().map(|key| row(key, now)).collect();
    print_table(&["ID", "PREFIX", "NAME", "OWNER", "ROLE", "ROUTES", "STATE"], &rows);
    Ok(())
}

fn row(key: &ApiKey, now: i64) -> [String; 7] {
    let state = match (key.refusal(now), key.retires_at_ms) {
        (Some(refusal), _) => refusal.to_string(),
        (None, Some(at)) => format!("retiring at {}", rfc3339(at)),
        (None, None) => {
            key.expires_at_ms.map_or("active".into(), |at| format!("active until {}", rfc3339(at)))
        }
    };
    [
        key.id.to_string(),
        key.prefix.clone(),
        printable(&key.name).into_owned(),
        printable(&key.owner).into_owned(),
        key.role.as_str().to_owned(),
        key.routes.as_ref().map_or("all".into(), |routes| printable(&routes.join(",")).into_owned()),
        state,
    ]
}

fn key_id(id: &str) -> Result<Uuid, String> {
    Uuid::parse_str(id).map_err(|_| format!("`{}` is not a key id", printable(id)))
}

pub async fn rotate(store: Store, id: &str, overlap: Duration) -> Result<(), String> {
    let (minted, old) =
        manager(store).rotate(&operator(), key_id(id)?, overlap, now_ms()).await.map_err(message)?;
    print_secret(&minted);
    eprintln!("key {} keeps working until {}", old.id, old.retires_at_ms.map(rfc3339).unwrap_or_default());
    Ok(())
}

pub async fn revoke(store: Store, id: &str) -> Result<(), String> {
    let key = manager(store).revoke(&operator(), key_id(id)?, now_ms()).await.map_err(message)?;
    println!(
        "key {} ({}) is revoked; serving gateways refuse it within a second",
        key.id,
        printable(&key.name)
    );
    Ok(())
}
