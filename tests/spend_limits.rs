//! Budgets and rate limits set at runtime (`/v1/admin/limits`) on a key, a
//! team, a tag or an owner, over real HTTP on both stores: applied at once,
//! changed, removed, refused with their meter's name, checked before they
//! are stored, every change in an audit the database keeps append-only;
//! and the `Intentgate-Tags` header that tags are read from.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ADMIN, ALICE, Backend, TestGateway, TestStore, assert_problem, chat_body, set_provider};
use reqwest::Method;
use serde_json::{Value, json};

store_matrix!(
    limits_on_a_key_and_a_tag_are_set_changed_and_removed_at_runtime,
    limits_are_checked_before_they_are_stored,
    the_limit_audit_cannot_be_edited,
    tags_are_checked_before_anything_is_stored,
    a_star_limit_gives_each_key_its_own_share,
);

/// The shipped config with both chat providers priced, so that a request
/// reserves money.
async fn priced_gateway(store: &TestStore) -> TestGateway {
    TestGateway::start_tweaked(store, |doc| {
        for provider in ["sim-primary", "sim-fallback"] {
            let mut price = toml::Table::new();
            price.insert("input_per_mtok".into(), 100.0.into());
            price.insert("output_per_mtok".into(), 200.0.into());
            set_provider(doc, provider, "price", price);
        }
    })
    .await
}

async fn admin(gw: &TestGateway, method: Method, path: &str, body: Option<Value>) -> reqwest::Response {
    let request = gw.request(method, path, ADMIN);
    match body {
        Some(body) => request.json(&body).send().await.unwrap(),
        None => request.send().await.unwrap(),
    }
}

async fn set_limit(gw: &TestGateway, body: Value) -> Value {
    let response = admin(gw, Method::POST, "/v1/admin/limits", Some(body)).await;
    assert_eq!(response.status(), 201);
    response.json().await.unwrap()
}

/// A chat job of `key` with `tags`; its status.
async fn tagged(gw: &TestGateway, key: &str, idem: &str, tags: Option<&str>) -> reqwest::Response {
    let mut request = gw.request(Method::POST, "/v1/jobs", key).header("idempotency-key", idem);
    if let Some(tags) = tags {
        request = request.header("intentgate-tags", tags);
    }
    request.json(&chat_body(idem)).send().await.unwrap()
}

async fn limits_on_a_key_and_a_tag_are_set_changed_and_removed_at_runtime(store: TestStore) {
    let gw = priced_gateway(&store).await;
    let made: Value =
        admin(&gw, Method::POST, "/v1/admin/keys", Some(json!({"name": "bot", "owner": "bot"})))
            .await
            .json()
            .await
            .unwrap();
    let (key_id, key) = (made["id"].as_str().unwrap(), made["secret"].as_str().unwrap());
    common::clear_of_the_minute_end().await;
    let rate = set_limit(&gw, json!({"scope": "key", "subject": key_id, "requests_per_minute": 2})).await;
    let meter = format!("rate-requests/key={key_id}/route=all/1m");
    assert_eq!(rate["meter"], meter.as_str());
    for n in 0..2 {
        assert_eq!(tagged(&gw, key, &format!("r{n}"), None).await.status(), 201, "within the key's rate");
    }
    let refused = assert_problem(tagged(&gw, key, "r2", None).await, 429, "rate-limited").await;
    assert_eq!(refused["meter"], meter.as_str(), "{refused}");
    let path = format!("/v1/admin/limits/{}", rate["id"].as_str().unwrap());
    let raised = admin(&gw, Method::PATCH, &path, Some(json!({"requests_per_minute": 3}))).await;
    assert_eq!(raised.status(), 200);
    assert_eq!(raised.json::<Value>().await.unwrap()["used_exact"], 2);
    assert_eq!(tagged(&gw, key, "r3", None).await.status(), 201, "raised at once");

    let budget = json!({"scope": "tag", "subject": "expensive", "budget": 0, "window": "1d"});
    let tag_limit = set_limit(&gw, budget).await;
    let refused =
        assert_problem(tagged(&gw, ALICE, "t1", Some("cheap, expensive")).await, 429, "budget-exhausted")
            .await;
    assert_eq!(refused["meter"], "budget/tag=expensive/route=all/1d", "{refused}");
    assert_eq!(tagged(&gw, ALICE, "t2", Some("cheap")).await.status(), 201, "only the tag's requests");
    let metrics = gw.get(ADMIN, "/metrics").await.text().await.unwrap();
    let gauge = r#"intentgate_limit_remaining{meter="budget/tag=expensive/route=all/1d",unit="nanos"} 0"#;
    assert!(metrics.contains(gauge), "a stored limit's meter is a gauge: {metrics}");
    let path = format!("/v1/admin/limits/{}", tag_limit["id"].as_str().unwrap());
    assert_eq!(admin(&gw, Method::DELETE, &path, None).await.status(), 204);
    assert_eq!(tagged(&gw, ALICE, "t1", Some("expensive")).await.status(), 201, "removed at once");
    assert_problem(admin(&gw, Method::DELETE, &path, None).await, 404, "not-found").await;

    let audit: Value = admin(&gw, Method::GET, "/v1/admin/limits/audit", None).await.json().await.unwrap();
    let actions: Vec<&str> =
        audit["entries"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["create", "update", "create", "remove"], "{audit}");
    let listed: Value = admin(&gw, Method::GET, "/v1/admin/limits", None).await.json().await.unwrap();
    assert_eq!(listed["limits"].as_array().unwrap().len(), 1, "the removed limit is not in force: {listed}");
}

async fn limits_are_checked_before_they_are_stored(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let post = |body: Value| admin(&gw, Method::POST, "/v1/admin/limits", Some(body));
    let refused = |body: Value, path: &'static str| async move {
        let problem = assert_problem(post(body).await, 422, "invalid-body").await;
        assert_eq!(problem["path"], path, "{problem}");
    };
    refused(json!({"scope": "galaxy", "subject": "x", "requests_per_minute": 1}), "/scope").await;
    refused(json!({"scope": "key", "subject": uuid::Uuid::now_v7(), "requests_per_minute": 1}), "/subject")
        .await;
    refused(json!({"scope": "tag", "subject": "two words", "requests_per_minute": 1}), "/subject").await;
    refused(json!({"scope": "team", "subject": "t", "budget": 1.0}), "/window").await;
    refused(
        json!({"scope": "team", "subject": "t", "budget": 1.0, "window": "1d", "requests_per_minute": 1}),
        "",
    )
    .await;
    let unknown = json!({"scope": "team", "subject": "t", "route": "nope", "requests_per_minute": 1});
    assert_problem(post(unknown).await, 422, "unknown-route").await;
    let by_user = gw.request(Method::POST, "/v1/admin/limits", ALICE).json(&json!({})).send().await.unwrap();
    assert_problem(by_user, 403, "forbidden").await;
    let limit = set_limit(
        &gw,
        json!({"scope": "owner", "subject": "x", "route": "chat", "budget": 1.5, "window": "month"}),
    )
    .await;
    let path = format!("/v1/admin/limits/{}", limit["id"].as_str().unwrap());
    let wrong_kind = admin(&gw, Method::PATCH, &path, Some(json!({"requests_per_minute": 5}))).await;
    assert_problem(wrong_kind, 422, "invalid-body").await;
    let listed: Value = admin(&gw, Method::GET, "/v1/admin/limits", None).await.json().await.unwrap();
    assert_eq!(listed["limits"].as_array().unwrap().len(), 1, "only the valid limit was stored: {listed}");
    assert_eq!(listed["limits"][0]["limit_exact"], 1_500_000_000_i64);
}

async fn the_limit_audit_cannot_be_edited(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    set_limit(&gw, json!({"scope": "team", "subject": "t", "requests_per_minute": 10})).await;
    let statements = [
        ("UPDATE limit_audit SET actor = 'someone else'", "append-only"),
        ("DELETE FROM limit_audit", "append-only"),
        ("UPDATE spend_limits SET subject = 'other', version = version + 1", "immutable"),
        ("DELETE FROM spend_limits", "never deleted"),
    ];
    match store.backend {
        Backend::Sqlite => {
            let conn = rusqlite::Connection::open(store.url.trim_start_matches("sqlite://")).unwrap();
            for (sql, says) in statements {
                let err = conn.execute(sql, []).unwrap_err().to_string();
                assert!(err.contains(says), "{sql}: {err}");
            }
        }
        Backend::Postgres => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&store.url).await.unwrap();
            for (sql, says) in statements.into_iter().chain([("TRUNCATE limit_audit", "append-only")]) {
                let err = sqlx::raw_sql(sql).execute(&mut conn).await.unwrap_err().to_string();
                assert!(err.contains(says), "{sql}: {err}");
            }
        }
    }
}

async fn tags_are_checked_before_anything_is_stored(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let many: Vec<String> = (0..17).map(|i| format!("t{i}")).collect();
    for tags in ["two words", &"x".repeat(65), &many.join(",")] {
        let refused =
            assert_problem(tagged(&gw, ALICE, "bad-tags", Some(tags)).await, 400, "invalid-tags").await;
        assert!(refused["detail"].as_str().unwrap().contains("tag"), "{refused}");
    }
    assert_eq!(gw.job_count().await, 0, "nothing stored for refused tags");
    let response = gw
        .request(Method::POST, "/v1/chat/completions", ALICE)
        .header("intentgate-tags", "team:search, env=prod")
        .header("intentgate-tags", "env=prod")
        .json(&json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}], "metadata": {"tags": "sdk"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let job_id: uuid::Uuid = response.headers()["x-intentgate-job-id"].to_str().unwrap().parse().unwrap();
    let job = gw.gateway.store.job(job_id).await.unwrap().unwrap();
    let tags: Vec<&str> = job.attribution.tags.iter().collect();
    assert_eq!(
        tags,
        ["env=prod", "sdk", "team:search"],
        "the headers' and the metadata's, sorted, once each"
    );
    let not_a_string =
        json!({"model": "chat", "messages": [{"role": "user", "content": "x"}], "metadata": {"tags": 5}});
    let refused =
        gw.request(Method::POST, "/v1/chat/completions", ALICE).json(&not_a_string).send().await.unwrap();
    assert_eq!(assert_problem(refused, 400, "invalid-tags").await["path"], "/metadata/tags");
    assert_eq!(job.attribution.key_id, None, "a config principal has no stored key");

    let dir = std::env::temp_dir().join(format!("intentgate-spend-cli-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(&config, toml::to_string(&common::test_config_doc(&store.url, None)).unwrap()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_intentgate"))
        .args(["spend", "--group-by", "tag", "--csv", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let csv = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{csv} {}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "tag,cost,cost_nanos,tokens,attempts", "{csv}");
    assert!(lines[1].starts_with("env=prod,0.000000000,0,") && lines[1].ends_with(",1"), "{csv}");
    assert!(lines[2].starts_with("sdk,") && lines[3].starts_with("team:search,"), "under each tag: {csv}");
}

/// `"subject": "*"`: one limit, a share of it for each key — one key's
/// requests use up its own share only.
async fn a_star_limit_gives_each_key_its_own_share(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let mut keys = Vec::new();
    for owner in ["a", "b"] {
        let body = json!({"name": owner, "owner": owner});
        let made: Value = admin(&gw, Method::POST, "/v1/admin/keys", Some(body)).await.json().await.unwrap();
        keys.push((made["id"].as_str().unwrap().to_owned(), made["secret"].as_str().unwrap().to_owned()));
    }
    common::clear_of_the_minute_end().await;
    let every = set_limit(&gw, json!({"scope": "key", "subject": "*", "requests_per_minute": 1})).await;
    assert_eq!(every["meter"], "rate-requests/key=*/route=all/1m", "a pattern: {every}");
    assert_eq!(tagged(&gw, &keys[0].1, "a-1", None).await.status(), 201);
    let refused = assert_problem(tagged(&gw, &keys[0].1, "a-2", None).await, 429, "rate-limited").await;
    assert_eq!(refused["meter"], format!("rate-requests/key={}/route=all/1m", keys[0].0), "{refused}");
    assert_eq!(tagged(&gw, &keys[1].1, "b-1", None).await.status(), 201, "the other key has its own share");
    assert_eq!(
        tagged(&gw, ALICE, "config-1", None).await.status(),
        201,
        "a config key has no stored key's share"
    );
}
