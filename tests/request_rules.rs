//! What the door refuses in a request before anything is stored: numbers
//! I-JSON cannot hold, NUL in text, and bodies that cannot be read or are
//! too large; every refusal is problem+json. Every scenario runs on SQLite
//! and on PostgreSQL (see `store_matrix!`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ADMIN, ALICE, TestGateway, TestStore, assert_problem, chat_body};
use reqwest::Method;
use serde_json::{Value, json};

store_matrix!(numbers_a_double_cannot_hold_are_refused, nul_in_text_is_refused_alike_on_both_stores,);

/// POSTs the raw JSON `body` to `path` under an Idempotency-Key.
async fn post_raw(gw: &TestGateway, path: &str, key: &str, body: &str) -> reqwest::Response {
    gw.request(Method::POST, path, ALICE)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

/// `…993` would be rounded to `…992` by the canonical form: refused with
/// its path on both doors, nothing stored, and `…992` under the same key is
/// then a new job, not a replay; an exact number (2^53−1) still passes and
/// is stored as sent.
async fn numbers_a_double_cannot_hold_are_refused(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let job = |seed: &str| {
        format!(
            r#"{{"route":"chat","input":{{"messages":[{{"role":"user","content":"x"}}]}},"params":{{"seed":{seed}}}}}"#
        )
    };
    let refused = assert_problem(
        post_raw(&gw, "/v1/jobs", "seed", &job("9007199254740993")).await,
        422,
        "invalid-body",
    )
    .await;
    assert_eq!(refused["path"], "/params/seed");
    assert!(refused["detail"].as_str().unwrap().contains("9007199254740993"), "{refused}");
    let precise = assert_problem(
        post_raw(&gw, "/v1/jobs", "seed", &job("0.10000000000000000001")).await,
        422,
        "invalid-body",
    )
    .await;
    assert_eq!(precise["path"], "/params/seed");
    let chat = r#"{"model":"chat","messages":[{"role":"user","content":"x"}],"seed":9007199254740993}"#;
    let refused =
        assert_problem(post_raw(&gw, "/v1/chat/completions", "chat-seed", chat).await, 422, "invalid-body")
            .await;
    assert_eq!(refused["path"], "/seed");
    assert_eq!(gw.job_count().await, 0, "nothing stored");

    let exact = post_raw(&gw, "/v1/jobs", "seed", &job("9007199254740991")).await;
    assert_eq!(exact.status(), 201);
    let exact: Value = exact.json().await.unwrap();
    assert_eq!(exact["request"]["params"]["seed"], json!(9007199254740991_u64), "stored as sent");
    let chat = r#"{"model":"chat","messages":[{"role":"user","content":"x"}],"seed":9007199254740991}"#;
    assert_eq!(post_raw(&gw, "/v1/chat/completions", "chat-seed", chat).await.status(), 200);
}

/// PostgreSQL cannot store a NUL in text (it answered 500); both stores now
/// refuse it alike with a 422 before anything is written.
async fn nul_in_text_is_refused_alike_on_both_stores(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let refused =
        assert_problem(gw.create(ALICE, "nul", &chat_body("a\u{0}b")).await, 422, "invalid-body").await;
    assert_eq!(refused["path"], "/input/messages/0/content");
    let mut in_params = chat_body("x");
    in_params["params"]["user"] = json!("\u{0}");
    assert_problem(gw.create(ALICE, "nul", &in_params).await, 422, "invalid-body").await;
    let chat = json!({"model": "chat", "messages": [{"role": "user", "content": "a\u{0}"}]});
    let response = gw
        .request(Method::POST, "/v1/chat/completions", ALICE)
        .header("idempotency-key", "nul")
        .json(&chat)
        .send();
    let refused = assert_problem(response.await.unwrap(), 422, "invalid-body").await;
    assert_eq!(refused["path"], "/messages/0/content");
    assert_eq!(gw.job_count().await, 0, "nothing stored");

    let job: Value = gw.create(ALICE, "nul", &chat_body("x")).await.json().await.unwrap();
    let id = job["id"].as_str().unwrap();
    let reason = json!({"as": "failed", "reason": "down\u{0}"});
    let resolve = gw.request(Method::POST, &format!("/v1/jobs/{id}/attempts/1/resolve"), ADMIN).json(&reason);
    assert_problem(resolve.send().await.unwrap(), 422, "invalid-body").await;
    let outage = gw.request(Method::POST, "/v1/providers/sim-primary/resolve", ADMIN).json(&reason);
    assert_problem(outage.send().await.unwrap(), 422, "invalid-body").await;
    let fine = json!({"as": "failed", "reason": "down"});
    let provider = gw.request(Method::POST, "/v1/providers/sim%00primary/resolve", ADMIN).json(&fine);
    assert_problem(provider.send().await.unwrap(), 422, "invalid-body").await;
    let start = gw
        .request(Method::POST, &format!("/v1/jobs/{id}/attempts"), ALICE)
        .json(&json!({"provider": "a\u{0}"}));
    assert_problem(start.send().await.unwrap(), 422, "invalid-body").await;
}
