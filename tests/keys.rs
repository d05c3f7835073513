//! API keys managed at runtime, over real HTTP on both stores: made by an
//! admin and shown once, used, rotated (both work in the overlap, the old
//! one is refused after it), revoked (refused at once here, and within a
//! second on another replica), never wider than their maker, every change
//! in an audit the database keeps append-only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::{ADMIN, ALICE, Backend, TestGateway, TestStore, assert_problem, chat_body};
use reqwest::Method;
use serde_json::{Value, json};

store_matrix!(
    create_use_rotate_revoke,
    no_key_is_made_wider_than_its_maker,
    the_audit_cannot_be_edited,
    revocation_reaches_another_replica_within_a_second,
    the_cli_manages_keys_a_serving_gateway_obeys,
    a_team_admin_manages_its_own_teams_keys_only,
);

/// `POST /v1/admin/keys` as `admin_key`; the answer's body.
async fn create_key(gw: &TestGateway, admin_key: &str, body: Value) -> reqwest::Response {
    gw.request(Method::POST, "/v1/admin/keys", admin_key).json(&body).send().await.unwrap()
}

async fn created(gw: &TestGateway, admin_key: &str, body: Value) -> Value {
    let response = create_key(gw, admin_key, body).await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

/// The status of a job-creating request made with `key`.
async fn use_key(gw: &TestGateway, key: &str, idem: &str) -> u16 {
    gw.create(key, idem, &chat_body("hi")).await.status().as_u16()
}

/// Polls `use_key` until it answers `status`, for at most `within`; how
/// long it took.
async fn until_status(gw: &TestGateway, key: &str, status: u16, within: Duration) -> Duration {
    let started = Instant::now();
    let mut n = 0;
    loop {
        n += 1;
        if use_key(gw, key, &format!("poll-{n}")).await == status {
            return started.elapsed();
        }
        assert!(started.elapsed() < within, "still not {status} after {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn create_use_rotate_revoke(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let made = created(&gw, ADMIN, json!({"name": "support bot", "owner": "support"})).await;
    let (id, old_key) =
        (made["id"].as_str().unwrap().to_owned(), made["secret"].as_str().unwrap().to_owned());
    assert!(old_key.starts_with(made["prefix"].as_str().unwrap()) && old_key.starts_with("ig_"), "{made}");
    assert_eq!(made["status"], "active");
    assert!(matches!(use_key(&gw, &old_key, "first").await, 200 | 201), "the new key works at once");
    let job = gw.get(&old_key, "/v1/jobs?idempotency_key=first").await.json::<Value>().await.unwrap();
    assert_eq!(job["owner"], "support", "its jobs are its owner's: {job}");

    let listed = gw.get(ADMIN, "/v1/admin/keys").await.text().await.unwrap();
    assert!(listed.contains(&id) && !listed.contains(&old_key[11..]), "listed, never its secret: {listed}");
    assert_problem(gw.get(ALICE, "/v1/admin/keys").await, 403, "forbidden").await;
    assert_problem(gw.get(&old_key, "/v1/admin/keys").await, 403, "forbidden").await;

    let rotate = gw.request(Method::POST, &format!("/v1/admin/keys/{id}/rotate"), ADMIN);
    let rotated = rotate.json(&json!({"overlap": "2s"})).send().await.unwrap();
    assert_eq!(rotated.status(), 201);
    let rotated: Value = rotated.json().await.unwrap();
    let new_key = rotated["key"]["secret"].as_str().unwrap().to_owned();
    assert_eq!(rotated["previous"]["status"], "retiring", "{rotated}");
    assert_eq!(rotated["key"]["rotated_from"], id.as_str());
    assert!(
        matches!(use_key(&gw, &old_key, "overlap-old").await, 200 | 201),
        "the old key works in the overlap"
    );
    assert!(matches!(use_key(&gw, &new_key, "overlap-new").await, 200 | 201), "and so does the new one");
    until_status(&gw, &old_key, 401, Duration::from_secs(10)).await;
    let refused =
        assert_problem(gw.create(&old_key, "after", &chat_body("x")).await, 401, "unauthorized").await;
    assert_eq!(refused["reason"], "rotated", "{refused}");

    let new_id = rotated["key"]["id"].as_str().unwrap();
    let revoke = gw.request(Method::DELETE, &format!("/v1/admin/keys/{new_id}"), ADMIN).send().await.unwrap();
    assert_eq!(revoke.status(), 200);
    let jobs = gw.job_count().await;
    let refused =
        assert_problem(gw.create(&new_key, "revoked", &chat_body("x")).await, 401, "unauthorized").await;
    assert_eq!(refused["reason"], "revoked");
    assert_eq!(gw.job_count().await, jobs, "nothing stored for a revoked key");
    let again =
        gw.request(Method::POST, &format!("/v1/admin/keys/{new_id}/revoke"), ADMIN).send().await.unwrap();
    assert_problem(again, 409, "key-conflict").await;

    let audit: Value = gw.get(ADMIN, "/v1/admin/keys/audit").await.json().await.unwrap();
    let actions: Vec<(&str, &str)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["action"].as_str().unwrap(), e["key_id"].as_str().unwrap()))
        .collect();
    assert_eq!(
        actions,
        [("create", id.as_str()), ("rotate", id.as_str()), ("create", new_id), ("revoke", new_id)],
        "{audit}"
    );
    assert!(audit["entries"].as_array().unwrap().iter().all(|e| e["actor"] == "principal:admin"), "{audit}");
    let text = audit.to_string();
    assert!(!text.contains(&old_key[3..]) && !text.contains(&new_key[3..]), "no key material in the audit");
}

async fn no_key_is_made_wider_than_its_maker(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let delegate = created(
        &gw,
        ADMIN,
        json!({"name": "chat admin", "owner": "ops", "role": "admin", "routes": ["chat"]}),
    )
    .await;
    let delegate = delegate["secret"].as_str().unwrap();
    for (wider, why) in [
        (json!({"name": "all", "owner": "x"}), "every route"),
        (json!({"name": "more", "owner": "x", "routes": ["chat", "extract"]}), "another route"),
        (json!({"name": "admin", "owner": "x", "role": "admin", "routes": ["chat"]}), "an admin"),
    ] {
        let problem =
            assert_problem(create_key(&gw, delegate, wider).await, 403, "key-rights-exceeded").await;
        assert!(problem["detail"].as_str().is_some(), "{why}: {problem}");
    }
    let user = created(&gw, delegate, json!({"name": "bot", "owner": "x", "routes": ["chat"]})).await;
    let user = user["secret"].as_str().unwrap();
    assert!(matches!(use_key(&gw, user, "chat").await, 200 | 201));
    let mut other = chat_body("x");
    other["route"] = "extract".into();
    let refused = assert_problem(gw.create(user, "extract", &other).await, 403, "route-not-allowed").await;
    assert_eq!(refused["route"], "extract");
    let invalid = create_key(&gw, ADMIN, json!({"name": "", "owner": "x"})).await;
    assert_eq!(assert_problem(invalid, 422, "invalid-body").await["path"], "/name");
    let invalid = create_key(&gw, ADMIN, json!({"name": "x", "owner": "x", "ttl": "soon"})).await;
    assert_eq!(assert_problem(invalid, 422, "invalid-body").await["path"], "/ttl");
}

/// The database itself refuses to change or remove an audit entry.
async fn the_audit_cannot_be_edited(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    created(&gw, ADMIN, json!({"name": "audited", "owner": "x"})).await;
    let statements = ["UPDATE key_audit SET actor = 'someone else'", "DELETE FROM key_audit"];
    match store.backend {
        Backend::Sqlite => {
            let path = store.url.trim_start_matches("sqlite://");
            let conn = rusqlite::Connection::open(path).unwrap();
            for sql in statements {
                let err = conn.execute(sql, []).unwrap_err().to_string();
                assert!(err.contains("append-only"), "{sql}: {err}");
            }
        }
        Backend::Postgres => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&store.url).await.unwrap();
            for sql in statements.into_iter().chain(["TRUNCATE key_audit"]) {
                let err = sqlx::raw_sql(sql).execute(&mut conn).await.unwrap_err().to_string();
                assert!(err.contains("append-only"), "{sql}: {err}");
            }
        }
    }
    let audit: Value = gw.get(ADMIN, "/v1/admin/keys/audit").await.json().await.unwrap();
    assert_eq!(audit["entries"][0]["actor"], "principal:admin");
}

/// Two replicas on one database: a key revoked on one is refused by the
/// other (which had it cached) within a second. SQLite has one serving
/// process; a change from another one (the CLI) is the next scenario's.
async fn revocation_reaches_another_replica_within_a_second(store: TestStore) {
    if store.backend == Backend::Sqlite {
        return;
    }
    let a = TestGateway::start(&store).await;
    let b = TestGateway::start(&store).await;
    let made = created(&a, ADMIN, json!({"name": "shared", "owner": "x"})).await;
    let (id, key) = (made["id"].as_str().unwrap(), made["secret"].as_str().unwrap());
    assert!(matches!(use_key(&b, key, "cached-on-b").await, 200 | 201), "B knows the key (and caches it)");
    let revoked =
        a.request(Method::POST, &format!("/v1/admin/keys/{id}/revoke"), ADMIN).send().await.unwrap();
    assert_eq!(revoked.status(), 200);
    let took = until_status(&b, key, 401, Duration::from_secs(5)).await;
    common::loud(&format!("revoked on A, refused on B after {took:?}\n"));
    assert!(took <= Duration::from_secs(1), "B refused it after {took:?}");
}

/// `intentgate keys …` writes straight to the database: a gateway serving
/// on it sees a key the CLI made, and refuses one it revoked within a
/// second — on SQLite from another process (the gateway reads the audit),
/// on PostgreSQL through the NOTIFY.
async fn the_cli_manages_keys_a_serving_gateway_obeys(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let dir = std::env::temp_dir().join(format!("intentgate-keys-cli-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(&config, toml::to_string(&common::test_config_doc(&store.url, None)).unwrap()).unwrap();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_intentgate"))
            .args(args)
            .args(["--config", config.to_str().unwrap()])
            .env_remove("INTENTGATE_DATABASE_URL")
            .env("USER", "ops")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let made = cli(&["keys", "create", "--name", "batch", "--owner", "etl", "--route", "chat"]);
    let key = made.lines().find(|line| line.starts_with("ig_")).unwrap().to_owned();
    let id = made.split_whitespace().nth(1).unwrap().to_owned();
    assert!(matches!(use_key(&gw, &key, "cli-made").await, 200 | 201), "{made}");
    assert!(cli(&["keys", "list"]).contains(&key[..11]), "listed by its prefix");
    cli(&["keys", "revoke", &id]);
    let took = until_status(&gw, &key, 401, Duration::from_secs(5)).await;
    assert!(took <= Duration::from_secs(1), "refused after {took:?}");
    let audit: Value = gw.get(ADMIN, "/v1/admin/keys/audit").await.json().await.unwrap();
    assert_eq!(audit["entries"][1]["actor"], "cli:ops", "{audit}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A team admin makes user keys of its own team, and sees, changes and
/// revokes only those; it cannot set limits, and its spend report is its
/// team's.
async fn a_team_admin_manages_its_own_teams_keys_only(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let lead = created(
        &gw,
        ADMIN,
        json!({"name": "lead", "owner": "support", "role": "team_admin", "team": "support"}),
    )
    .await;
    let lead_key = lead["secret"].as_str().unwrap().to_owned();
    let sales = created(&gw, ADMIN, json!({"name": "sales bot", "owner": "sales", "team": "sales"})).await;
    let sales_id = sales["id"].as_str().unwrap();
    let refused = assert_problem(
        create_key(&gw, ADMIN, json!({"name": "x", "owner": "x", "role": "team_admin"})).await,
        422,
        "invalid-body",
    )
    .await;
    assert_eq!(refused["path"], "/team", "a team admin needs its team: {refused}");

    let member = created(&gw, &lead_key, json!({"name": "support bot", "owner": "support-bot"})).await;
    assert_eq!(member["team"], "support", "its team's by default: {member}");
    for (body, why) in [
        (json!({"name": "x", "owner": "x", "team": "sales"}), "another team"),
        (json!({"name": "x", "owner": "x", "role": "team_admin"}), "a team admin"),
        (json!({"name": "x", "owner": "x", "role": "admin"}), "an admin"),
    ] {
        let response = create_key(&gw, &lead_key, body).await;
        assert_eq!(response.status(), 403, "a team admin cannot make {why}");
    }
    let listed: Value = gw.get(&lead_key, "/v1/admin/keys").await.json().await.unwrap();
    let teams: Vec<&str> =
        listed["keys"].as_array().unwrap().iter().map(|k| k["team"].as_str().unwrap()).collect();
    assert_eq!(teams, ["support", "support"], "its own team's keys only: {listed}");
    assert_problem(gw.get(&lead_key, &format!("/v1/admin/keys/{sales_id}")).await, 404, "not-found").await;
    let revoke = gw.request(Method::POST, &format!("/v1/admin/keys/{sales_id}/revoke"), &lead_key);
    assert_problem(revoke.send().await.unwrap(), 403, "key-rights-exceeded").await;
    let audit: Value = gw.get(&lead_key, "/v1/admin/keys/audit").await.json().await.unwrap();
    assert!(audit["entries"].as_array().unwrap().iter().all(|e| e["key_id"] != sales_id), "{audit}");
    let limit = json!({"scope": "team", "subject": "support", "requests_per_minute": 1000});
    let set = gw.request(Method::POST, "/v1/admin/limits", &lead_key).json(&limit).send().await.unwrap();
    assert_problem(set, 403, "forbidden").await;

    let member_key = member["secret"].as_str().unwrap();
    // Settled before the report is read: it sums settled attempts' charges.
    for (key, idem) in [(member_key, "support-job"), (ALICE, "alice-job")] {
        let created: Value = gw.create(key, idem, &chat_body("hi")).await.json().await.unwrap();
        common::settled_job(&gw, key, created["id"].as_str().unwrap()).await;
    }
    let report: Value = gw.get(&lead_key, "/v1/usage/spend?group_by=team").await.json().await.unwrap();
    assert_eq!(report["rows"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(
        (report["rows"][0]["group"]["team"].as_str(), report["total"]["attempts"].as_i64()),
        (Some("support"), Some(1))
    );
    let all: Value = gw.get(ADMIN, "/v1/usage/spend?group_by=team").await.json().await.unwrap();
    assert_eq!(all["total"]["attempts"], 2, "an admin reads every team's: {all}");
}
