//! `--key-lookup`: what authenticating one request costs with a stored key
//! against a config key, in this process: the `auth::identify` every
//! request runs (hash the key, the config's principals, then the stored
//! keys' cache), over a SQLite store holding the key. The stored key is
//! read from the store once, then from the cache like every later request.

use std::path::Path;
use std::time::Instant;

use intentgate::auth::{Acting, KeyManager, Lookup, Principals, StoredKeys, identify};
use intentgate::config::{Config, Role};
use intentgate::keys::{KeySpec, Rights};

/// Authenticates each key `rounds` times, five runs alternating, and
/// prints the medians in ns per request.
pub async fn run(rounds: u32) {
    let dir = std::env::temp_dir().join(format!("intentgate-key-lookup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/gateway.toml");
    let text = std::fs::read_to_string(&shipped).expect("the shipped config");
    let mut config = Config::from_toml(&shipped, &text).expect("the shipped config parses");
    config.store.url = format!("sqlite://{}", dir.join("keys.db").display());
    let store = intentgate::app::open_store(&config.store).await.expect("a SQLite store");
    // A config key of a stored key's shape (`ig_` and 64 hex digits): the
    // same SHA-256 work, so the difference is the lookup's alone.
    let config_key = format!("ig_{}", "c".repeat(64));
    let mut principal = config.principals[0].clone();
    (principal.name, principal.key_sha256, principal.key_env) =
        ("bench-config".into(), Some(intentgate::auth::hash_key(&config_key)), None);
    config.principals.push(principal);
    let principals = Principals::from_config(&config).expect("the shipped principals");
    let keys = StoredKeys::new(store.clone());
    let admin = Acting {
        actor: "bench".into(),
        rights: Rights { role: Role::Admin, routes: None, expires_at_ms: None, team: None },
    };
    let spec = KeySpec {
        name: "bench".into(),
        owner: "alice".into(),
        role: Role::User,
        team: Some("bench".into()),
        routes: None,
        expires_at_ms: None,
        metadata: serde_json::Map::new(),
    };
    let now = intentgate::jobs::now_ms();
    let minted = KeyManager::new(store, Some(keys.clone())).create(&admin, spec, now).await.expect("a key");
    let stored = minted.secret.reveal().to_owned();

    let time = |key: &str| {
        let (principals, keys, key) = (&principals, &keys, key.to_owned());
        async move {
            let start = Instant::now();
            for _ in 0..rounds {
                let found = identify(principals, keys, std::hint::black_box(&key), now).await;
                assert!(matches!(found, Ok(Lookup::Found(_))), "the key is known");
            }
            start.elapsed().as_secs_f64() * 1e9 / f64::from(rounds)
        }
    };
    time(&stored).await; // the first lookup reads the store; the rest hit the cache
    let (mut config_runs, mut stored_runs) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        config_runs.push(time(&config_key).await);
        stored_runs.push(time(&stored).await);
    }
    config_runs.sort_by(f64::total_cmp);
    stored_runs.sort_by(f64::total_cmp);
    let (config_ns, stored_ns) = (config_runs[2], stored_runs[2]);
    println!(
        "authenticating a request: config key {config_ns:.0} ns, stored key {stored_ns:.0} ns \
         ({:+.1} %; median of 5 × {rounds})",
        (stored_ns / config_ns - 1.0) * 100.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}
