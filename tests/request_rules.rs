//! What the door refuses in a request before anything is stored: numbers
//! I-JSON cannot hold, NUL in text, and bodies that cannot be read or are
//! too large; every refusal is problem+json. Every scenario runs on SQLite
//! and on PostgreSQL (see `store_matrix!`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ADMIN, ALICE, TestGateway, TestStore, assert_problem, chat_body};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `server.max_body_bytes` of the shipped config.
const LIMIT: usize = 1024 * 1024;

store_matrix!(
    numbers_a_double_cannot_hold_are_refused,
    nul_in_text_is_refused_alike_on_both_stores,
    a_body_that_cannot_be_read_is_400,
    a_content_length_over_the_limit_is_413_at_once,
    every_body_is_limited_by_max_body_bytes,
    unreadable_paths_and_queries_are_problems,
    wrong_typed_parameters_are_refused_at_the_door,
);

/// A known generation parameter of the wrong type or out of range, or two
/// completion limits that disagree, is 422 with its path on both doors, and
/// nothing is stored: the key stays free for the corrected request.
async fn wrong_typed_parameters_are_refused_at_the_door(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let before = gw.job_count().await;
    for (params, path) in [
        (json!({"max_tokens": -1}), "/max_tokens"),
        (json!({"temperature": "hot"}), "/temperature"),
        (json!({"max_completion_tokens": 1, "max_tokens": 100000}), "/max_completion_tokens"),
    ] {
        let job = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "x"}]},
            "params": params});
        let refused = assert_problem(gw.create(ALICE, "typed", &job).await, 422, "invalid-body").await;
        assert_eq!(refused["path"], format!("/params{path}"), "{refused}");
        let mut chat = json!({"model": "chat", "messages": [{"role": "user", "content": "x"}]});
        for (name, value) in params.as_object().unwrap() {
            chat[name] = value.clone();
        }
        let refused = assert_problem(gw.chat_completion("typed", &chat).await, 422, "invalid-body").await;
        assert_eq!(refused["path"], path, "{refused}");
        assert!(refused["error"]["message"].is_string(), "OpenAI's error member too: {refused}");
    }
    assert_eq!(gw.job_count().await, before, "nothing was stored");
    let fixed = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "x"}]},
        "params": {"max_tokens": 5, "temperature": 0.5}});
    assert!(gw.create(ALICE, "typed", &fixed).await.status().is_success(), "the key is still free");
}

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

/// Sends `head` (request line and headers, then the blank line) and `body`
/// over a raw TCP connection and returns what the gateway answers within 5
/// seconds (the connection is not closed by the client: an answer that
/// waits for more body never comes).
async fn raw_exchange(gw: &TestGateway, head: &str, body: &[u8]) -> String {
    let addr = gw.url("").trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    // The server may answer (a 413) and close before it has read all of
    // the body: a failed write here is that, and the answer is still read.
    let _ = stream.write_all(body).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
            let text = String::from_utf8_lossy(&answer);
            if let Some((_, body)) = text.split_once("\r\n\r\n")
                && body.contains('}')
            {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok() || !answer.is_empty(), "no answer within 5 s");
    String::from_utf8_lossy(&answer).into_owned()
}

fn post_head(path: &str, extra: &str) -> String {
    post_head_as(ALICE, path, extra)
}

fn post_head_as(api_key: &str, path: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {api_key}\r\n\
         Idempotency-Key: raw\r\nContent-Type: application/json\r\n{extra}\r\n"
    )
}

/// `json` as one chunk of a chunked body: no `Content-Length` announces its
/// size, so only reading it can find it too large.
fn chunked(json: &Value) -> Vec<u8> {
    let text = json.to_string();
    format!("{:x}\r\n{text}\r\n0\r\n\r\n", text.len()).into_bytes()
}

fn assert_raw_problem(answer: &str, status: u16, slug: &str) {
    assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("content-type: application/problem+json"), "{answer}");
    assert!(answer.contains(&format!("problems/{slug}")), "{answer}");
}

/// A malformed chunk is a broken request (400), not a large one (413).
async fn a_body_that_cannot_be_read_is_400(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let head = post_head("/v1/jobs", "Transfer-Encoding: chunked\r\n");
    let answer = raw_exchange(&gw, &head, b"zz\r\n{}\r\n0\r\n\r\n").await;
    assert_raw_problem(&answer, 400, "malformed-request");
    assert_eq!(gw.job_count().await, 0, "nothing stored");
}

/// A `Content-Length` over the limit is answered at once, without waiting
/// for a body that is never sent.
async fn a_content_length_over_the_limit_is_413_at_once(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let job = gw.create(ALICE, "cl", &chat_body("x")).await.json::<Value>().await.unwrap();
    let id = job["id"].as_str().unwrap().to_owned();
    let too_long = format!("Content-Length: {}\r\n", LIMIT + 1);
    for path in ["/v1/jobs".to_owned(), "/v1/chat/completions".to_owned(), format!("/v1/jobs/{id}/attempts")]
    {
        let started = std::time::Instant::now();
        let answer = raw_exchange(&gw, &post_head(&path, &too_long), b"").await;
        assert_raw_problem(&answer, 413, "body-too-large");
        assert!(started.elapsed() < std::time::Duration::from_secs(4), "{path} waited for the body");
    }
    assert_eq!(gw.job_count().await, 1, "nothing more stored");
}

/// Every endpoint's body is limited by `server.max_body_bytes` (not axum's
/// 2 MB default) and its 413 is a problem.
async fn every_body_is_limited_by_max_body_bytes(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let job = gw.create(ALICE, "limit", &chat_body("x")).await.json::<Value>().await.unwrap();
    let id = job["id"].as_str().unwrap();
    let over = json!({"as": "failed", "reason": "r".repeat(LIMIT)});
    let chunked_head = "Transfer-Encoding: chunked\r\n";
    for path in [format!("/v1/jobs/{id}/attempts/1/resolve"), "/v1/providers/sim-primary/resolve".to_owned()]
    {
        let answer = raw_exchange(&gw, &post_head_as(ADMIN, &path, chunked_head), &chunked(&over)).await;
        assert_raw_problem(&answer, 413, "body-too-large");
    }
    // Over axum's default too: its own 413 would have been text/plain.
    let huge = json!({"provider": "p".repeat(3 * LIMIT)});
    let path = format!("/v1/jobs/{id}/attempts");
    let answer = raw_exchange(&gw, &post_head(&path, chunked_head), &chunked(&huge)).await;
    assert_raw_problem(&answer, 413, "body-too-large");
}

/// A path segment that is not UTF-8 and a query parameter sent twice are
/// problems, not axum's plain-text 400.
async fn unreadable_paths_and_queries_are_problems(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    for path in ["/v1/jobs/%FF", "/v1/jobs/%FF/cancel", "/v1/models/%FF"] {
        let method = if path.ends_with("cancel") { Method::POST } else { Method::GET };
        let response = gw.request(method, path, ALICE).send().await.unwrap();
        assert_problem(response, 400, "malformed-request").await;
    }
    let twice = gw.get(ALICE, "/v1/jobs?idempotency_key=a&idempotency_key=b").await;
    assert_problem(twice, 400, "malformed-request").await;
}
