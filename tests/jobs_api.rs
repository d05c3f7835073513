//! The native jobs API against real stores over real HTTP: R1, R2, R3 and the
//! HTTP semantics table of `docs/design.md` ("HTTP semantics of the jobs
//! API"). Every scenario runs on SQLite and on PostgreSQL (see
//! `store_matrix!`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{ADMIN, ALICE, BOB, TestGateway, TestStore, assert_problem, chat_body};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::Barrier;

store_matrix!(
    double_click_creates_one_job,
    same_key_other_body_conflicts_and_leaves_job_unchanged,
    same_body_reformatted_is_a_replay,
    same_key_two_owners_two_jobs,
    bad_idempotency_keys_store_nothing,
    bad_bodies_store_nothing_and_do_not_use_up_the_key,
    bad_api_keys_get_401,
    find_job_by_idempotency_key,
    readiness_reports_the_store,
    bad_input_to_admin_calls_is_a_problem_too,
    foreign_job_is_a_miss_like_a_missing_one,
    admin_calls_check_the_role_before_the_body,
);

/// R8a / R2: 50 concurrent POSTs with one key, released together.
async fn double_click_creates_one_job(store: TestStore) {
    const CLICKS: usize = 50;
    let gw = Arc::new(TestGateway::start(&store).await);
    let barrier = Arc::new(Barrier::new(CLICKS));
    let body = chat_body("book the flight");
    let tasks: Vec<_> = (0..CLICKS)
        .map(|_| {
            let (gw, barrier, body) = (gw.clone(), barrier.clone(), body.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let response = gw.create(ALICE, "double-click", &body).await;
                let status = response.status().as_u16();
                let replayed =
                    response.headers().get("idempotent-replayed").map(|v| v.to_str().unwrap().to_owned());
                let job: Value = response.json().await.unwrap();
                (status, replayed, job["id"].as_str().unwrap().to_owned())
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    let first_id = &results[0].2;
    assert!(results.iter().all(|(_, _, id)| id == first_id), "all answers carry one job id");
    let created: Vec<_> = results.iter().filter(|(status, _, _)| *status == 201).collect();
    let replays: Vec<_> = results.iter().filter(|(status, _, _)| *status == 200).collect();
    assert_eq!(created.len(), 1, "exactly one 201");
    assert_eq!(replays.len(), CLICKS - 1, "all others 200");
    assert!(created[0].1.is_none(), "the 201 is not marked replayed");
    assert!(replays.iter().all(|(_, replayed, _)| replayed.as_deref() == Some("true")));
    assert_eq!(gw.job_count().await, 1, "one job row");
}

/// R8b / R3: the key is bound to one exact intent.
async fn same_key_other_body_conflicts_and_leaves_job_unchanged(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let created = gw.create(ALICE, "k1", &chat_body("transfer 10 EUR")).await;
    assert_eq!(created.status(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    let created: Value = created.json().await.unwrap();
    assert_eq!(location, format!("/v1/jobs/{}", created["id"].as_str().unwrap()));
    let before = common::settled_job(&gw, ALICE, created["id"].as_str().unwrap()).await;

    let conflict = gw.create(ALICE, "k1", &chat_body("transfer 1000 EUR")).await;
    assert_eq!(conflict.headers().get("x-should-retry").unwrap(), "false");
    let problem = assert_problem(conflict, 409, "idempotency-key-reused").await;
    assert_eq!(problem["job_id"], before["id"]);

    let after: Value = gw.get(ALICE, &location).await.json().await.unwrap();
    assert_eq!(after, before, "the stored job is unchanged");
    assert_eq!(after["request"]["input"]["messages"][0]["content"], "transfer 10 EUR");
    assert_eq!(gw.job_count().await, 1);
}

/// R3: the fingerprint is over the canonical form, so formatting is not intent.
async fn same_body_reformatted_is_a_replay(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let compact = r#"{"route":"chat","input":{"messages":[{"role":"user","content":"hi"}]},"params":{"temperature":0.5}}"#;
    let reordered = "{ \"params\": {\"temperature\": 0.50},\n  \"input\": {\"messages\": [{\"content\": \"hi\", \"role\": \"user\"}]},\n  \"route\": \"chat\" }";
    let send = |body: &'static str| {
        gw.request(Method::POST, "/v1/jobs", ALICE)
            .header("idempotency-key", "fmt")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let first = send(compact).await.unwrap();
    assert_eq!(first.status(), 201);
    let first: Value = first.json().await.unwrap();
    let second = send(reordered).await.unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(second.headers()["idempotent-replayed"], "true");
    let second: Value = second.json().await.unwrap();
    assert_eq!(first["id"], second["id"]);
}

/// R2: keys never cross owners; another owner's job is invisible (404).
async fn same_key_two_owners_two_jobs(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let alice = gw.create(ALICE, "shared-key", &chat_body("a")).await;
    let bob = gw.create(BOB, "shared-key", &chat_body("a")).await;
    assert_eq!((alice.status().as_u16(), bob.status().as_u16()), (201, 201));
    let alice: Value = alice.json().await.unwrap();
    let bob: Value = bob.json().await.unwrap();
    assert_ne!(alice["id"], bob["id"]);
    assert_eq!((alice["owner"].as_str(), bob["owner"].as_str()), (Some("alice"), Some("bob")));

    let alice_job = format!("/v1/jobs/{}", alice["id"].as_str().unwrap());
    assert_problem(gw.get(BOB, &alice_job).await, 404, "not-found").await;
    assert_eq!(gw.get(ALICE, &alice_job).await.status(), 200);
    assert_eq!(gw.get(ADMIN, &alice_job).await.status(), 200, "an admin sees every owner's jobs");
    assert_problem(gw.get(ALICE, "/v1/jobs/not-a-uuid").await, 404, "not-found").await;
    assert_eq!(gw.job_count().await, 2);
}

async fn bad_idempotency_keys_store_nothing(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let body = chat_body("x");
    let post = || gw.request(Method::POST, "/v1/jobs", ALICE).json(&body);

    assert_problem(post().send().await.unwrap(), 400, "idempotency-key-missing").await;
    assert_problem(
        post().header("idempotency-key", "").send().await.unwrap(),
        400,
        "idempotency-key-invalid",
    )
    .await;
    assert_problem(
        post().header("idempotency-key", "\"\"").send().await.unwrap(),
        400,
        "idempotency-key-invalid",
    )
    .await;
    let long = "k".repeat(256);
    assert_problem(
        post().header("idempotency-key", &long).send().await.unwrap(),
        400,
        "idempotency-key-invalid",
    )
    .await;
    let twice = post().header("idempotency-key", "a").header("idempotency-key", "b").send().await.unwrap();
    assert_problem(twice, 400, "idempotency-key-invalid").await;
    assert_eq!(gw.job_count().await, 0, "nothing stored");

    // The RFC 8941 quoted form names the same key as the bare form.
    assert_eq!(post().header("idempotency-key", "\"q-1\"").send().await.unwrap().status(), 201);
    let bare = post().header("idempotency-key", "q-1").send().await.unwrap();
    assert_eq!(bare.status(), 200);
    assert_eq!(post().header("idempotency-key", "k".repeat(255)).send().await.unwrap().status(), 201);
}

async fn bad_bodies_store_nothing_and_do_not_use_up_the_key(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let post = |body: Vec<u8>| {
        gw.request(Method::POST, "/v1/jobs", ALICE)
            .header("idempotency-key", "k")
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    assert_problem(post(b"{not json".to_vec()).await.unwrap(), 400, "malformed-json").await;
    assert_problem(post(b"[1,2]".to_vec()).await.unwrap(), 422, "invalid-body").await;
    let typo = json!({"route": "chat", "input": {"messages": []}, "parmas": {}});
    assert_problem(post(typo.to_string().into_bytes()).await.unwrap(), 422, "invalid-body").await;
    let no_messages = json!({"route": "chat", "input": {"messages": []}});
    assert_problem(post(no_messages.to_string().into_bytes()).await.unwrap(), 422, "invalid-body").await;
    let unknown_route = json!({"route": "nope", "input": {"messages": [{"role": "user", "content": "x"}]}});
    let problem =
        assert_problem(post(unknown_route.to_string().into_bytes()).await.unwrap(), 422, "unknown-route")
            .await;
    assert!(problem["detail"].as_str().unwrap().contains("nope"));
    let mut huge = chat_body(&"x".repeat(2 * 1024 * 1024)).to_string().into_bytes();
    huge.truncate(2 * 1024 * 1024);
    assert_problem(post(huge).await.unwrap(), 413, "body-too-large").await;
    assert_eq!(gw.job_count().await, 0, "nothing stored");

    // None of the refusals used up the key. (A fresh client: the server
    // closes a connection whose oversized body it did not read, and a pooled
    // client may not have noticed yet.)
    let fine = common::client()
        .post(gw.url("/v1/jobs"))
        .bearer_auth(ALICE)
        .header("idempotency-key", "k")
        .json(&chat_body("fine"))
        .send()
        .await
        .unwrap();
    assert_eq!(fine.status(), 201);
}

async fn bad_api_keys_get_401(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let body = chat_body("x");
    let no_auth =
        gw.client.post(gw.url("/v1/jobs")).header("idempotency-key", "k").json(&body).send().await.unwrap();
    let problem = assert_problem(no_auth, 401, "unauthorized").await;
    assert!(problem["detail"].as_str().is_some());
    assert_problem(gw.create("demo-mallory", "k", &body).await, 401, "unauthorized").await;
    let basic = gw
        .client
        .post(gw.url("/v1/jobs"))
        .basic_auth("alice", Some("demo-alice"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_problem(basic, 401, "unauthorized").await;
    assert_problem(gw.get("wrong", "/v1/jobs?idempotency_key=k").await, 401, "unauthorized").await;
    assert_eq!(gw.job_count().await, 0, "nothing stored");
}

async fn find_job_by_idempotency_key(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let created: Value = gw.create(ALICE, "lost-response", &chat_body("x")).await.json().await.unwrap();
    let settled = common::settled_job(&gw, ALICE, created["id"].as_str().unwrap()).await;
    let found = gw.get(ALICE, "/v1/jobs?idempotency_key=lost-response").await;
    assert_eq!(found.status(), 200);
    let found: Value = found.json().await.unwrap();
    assert_eq!(found["id"], created["id"]);
    assert_eq!(found, settled);
    assert_eq!(found["status"], "succeeded");
    assert_eq!(found["attempts"].as_array().unwrap().len(), 1);
    assert_problem(gw.get(BOB, "/v1/jobs?idempotency_key=lost-response").await, 404, "not-found").await;
    assert_problem(gw.get(ALICE, "/v1/jobs").await, 400, "missing-parameter").await;
}

async fn readiness_reports_the_store(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let health = gw.client.get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready: Value = gw.client.get(gw.url("/readyz")).send().await.unwrap().json().await.unwrap();
    let expected = match store.backend {
        common::Backend::Sqlite => "sqlite",
        common::Backend::Postgres => "postgres",
    };
    assert_eq!(ready["store"], expected);
    assert_problem(gw.get(ALICE, "/v1/nothing-here").await, 404, "not-found").await;
    let wrong_method = gw.request(Method::DELETE, "/v1/jobs", ALICE).send().await.unwrap();
    assert_problem(wrong_method, 405, "method-not-allowed").await;
}

/// Extractor rejections are problem+json like everything else.
async fn bad_input_to_admin_calls_is_a_problem_too(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let job: Value = gw.create(ALICE, "admin-input", &chat_body("x")).await.json().await.unwrap();
    let id = job["id"].as_str().unwrap();
    let resolve = |path: String| gw.request(Method::POST, &path, ADMIN);
    let not_json = resolve(format!("/v1/jobs/{id}/attempts/1/resolve"))
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_problem(not_json, 400, "malformed-json").await;
    let no_type = resolve(format!("/v1/jobs/{id}/attempts/1/resolve")).body("{}").send().await.unwrap();
    assert_problem(no_type, 400, "malformed-json").await;
    let wrong_field =
        resolve(format!("/v1/jobs/{id}/attempts/1/resolve")).json(&json!({"as": 1})).send().await.unwrap();
    assert_problem(wrong_field, 422, "invalid-body").await;
    let bad_number = resolve(format!("/v1/jobs/{id}/attempts/one/resolve"))
        .json(&json!({"as": "failed", "reason": "r"}))
        .send()
        .await
        .unwrap();
    assert_problem(bad_number, 404, "not-found").await;
    let bad_start =
        gw.request(Method::POST, &format!("/v1/jobs/{id}/attempts"), ALICE).body("[").send().await.unwrap();
    assert_problem(bad_start, 422, "invalid-body").await;
}

/// Another owner's job id is a miss in the store's own query (the owner is in
/// the WHERE, so its row is never loaded and the miss takes as long as a
/// missing id), and every job endpoint answers it with the 404 a random id
/// gets.
async fn foreign_job_is_a_miss_like_a_missing_one(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let job: Value = gw.create(ALICE, "foreign", &chat_body("x")).await.json().await.unwrap();
    let id = job["id"].as_str().unwrap();
    let uuid = uuid::Uuid::parse_str(id).unwrap();
    let db = &gw.gateway.store;
    assert!(db.job_for_owner(uuid, Some("bob")).await.unwrap().is_none(), "a miss for another owner");
    assert!(db.job_for_owner(uuid, Some("alice")).await.unwrap().is_some(), "a hit for its owner");
    assert!(db.job_for_owner(uuid, None).await.unwrap().is_some(), "a hit for an admin");

    let random = uuid::Uuid::now_v7().to_string();
    for (method, suffix) in [(Method::GET, ""), (Method::POST, "/attempts"), (Method::POST, "/cancel")] {
        let answer = |job_id: String| {
            let request = gw.request(method.clone(), &format!("/v1/jobs/{job_id}{suffix}"), BOB);
            async move {
                let problem = assert_problem(request.send().await.unwrap(), 404, "not-found").await;
                problem.to_string().replace(&job_id, "{id}")
            }
        };
        assert_eq!(answer(id.to_owned()).await, answer(random.clone()).await, "{method} {suffix}");
    }
    assert_eq!(common::settled_job(&gw, ALICE, id).await["status"], "succeeded", "untouched by bob");
}

/// The role is checked before the body: a user key is refused 403 whatever
/// it sends (no body, a bad body), not told what a valid body looks like.
async fn admin_calls_check_the_role_before_the_body(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let job: Value = gw.create(ALICE, "role-first", &chat_body("x")).await.json().await.unwrap();
    let id = job["id"].as_str().unwrap();
    for path in [format!("/v1/jobs/{id}/attempts/1/resolve"), "/v1/providers/sim-primary/resolve".to_owned()]
    {
        let no_body = gw.request(Method::POST, &path, ALICE).send().await.unwrap();
        assert_problem(no_body, 403, "forbidden").await;
        let bad_body = gw.request(Method::POST, &path, ALICE).json(&json!({"as": 1})).send().await.unwrap();
        assert_problem(bad_body, 403, "forbidden").await;
    }
}
