//! The read endpoints the operator console is built on, as any API client
//! calls them: `GET /v1/jobs/search` (filters, keyset pages, owner scope),
//! `/v1/jobs/counts`, `/v1/attempts/unknown`, `/v1/overview`,
//! `/v1/contracts` and `/v1/whoami`. Both stores.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    ADMIN, ALICE, BOB, TestGateway, TestStore, assert_problem, chat_body, job_left_unknown, set_route,
    settled_job, wait_for_attempt,
};
use intentgate::contract_runs::run_and_record;
use intentgate::contracts::{Suite, pairs};
use intentgate::jobs::AttemptState;
use reqwest::Method;
use serde_json::{Value, json};

store_matrix!(
    search_pages_newest_first_within_the_callers_scope,
    search_filters_and_refuses_bad_input,
    counts_and_the_unknown_queue_follow_an_unknown_attempt,
    overview_counts_the_last_hour_per_minute,
    contracts_show_the_verdict_the_cases_and_the_age,
    whoami_names_the_principal,
);

async fn get_json(gw: &TestGateway, key: &str, path: &str) -> Value {
    let response = gw.get(key, path).await;
    assert_eq!(response.status(), 200, "GET {path}");
    response.json().await.unwrap()
}

/// Creates a job and waits for it to settle; its id.
async fn settled(gw: &TestGateway, api_key: &str, idem: &str) -> String {
    let created: Value = gw.create(api_key, idem, &chat_body(idem)).await.json().await.unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(settled_job(gw, api_key, &id).await["status"], "succeeded");
    id
}

fn ids(page: &Value) -> Vec<String> {
    page["jobs"].as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_owned()).collect()
}

async fn search_pages_newest_first_within_the_callers_scope(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let mut alice = Vec::new();
    for n in 0..5 {
        alice.push(settled(&gw, ALICE, &format!("a-{n}")).await);
    }
    let bob = [settled(&gw, BOB, "b-0").await, settled(&gw, BOB, "b-1").await];
    let newest_first: Vec<String> = alice.iter().rev().cloned().collect();

    // Pages of two, following next_cursor, give alice's five jobs newest
    // first, each once, and nothing of bob's.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..5 {
        let path = match &cursor {
            Some(cursor) => format!("/v1/jobs/search?limit=2&cursor={cursor}"),
            None => "/v1/jobs/search?limit=2".to_owned(),
        };
        let page = get_json(&gw, ALICE, &path).await;
        assert!(page["jobs"].as_array().unwrap().len() <= 2, "{page}");
        seen.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, newest_first, "keyset pages, newest first, no repeats, no gaps");
    let first = get_json(&gw, ALICE, "/v1/jobs/search?limit=1").await;
    let job = &first["jobs"][0];
    assert_eq!(job["owner"], "alice");
    assert_eq!(job["idempotency_key"], "a-4");
    assert_eq!(job["status"], "succeeded");
    assert_eq!(job["attempts"], 1);
    assert_eq!(job["last_provider"], "sim-primary");
    assert!(job.get("request").is_none() && job.get("result").is_none(), "a page carries no bodies: {job}");

    // An admin sees every owner, or one with `owner`.
    let everyone = get_json(&gw, ADMIN, "/v1/jobs/search").await;
    assert_eq!(ids(&everyone).len(), 7);
    assert!(everyone["next_cursor"].is_null(), "{everyone}");
    let bobs = get_json(&gw, ADMIN, "/v1/jobs/search?owner=bob").await;
    assert_eq!(ids(&bobs), bob.iter().rev().cloned().collect::<Vec<_>>());

    // A user names only themself.
    assert_eq!(ids(&get_json(&gw, ALICE, "/v1/jobs/search?owner=alice").await).len(), 5);
    assert_problem(gw.get(ALICE, "/v1/jobs/search?owner=bob").await, 403, "forbidden").await;
    // Bob's key cannot find alice's job by its key either.
    assert!(ids(&get_json(&gw, BOB, "/v1/jobs/search?idempotency_key=a-1").await).is_empty());
    assert_problem(
        common::client().get(gw.url("/v1/jobs/search")).send().await.unwrap(),
        401,
        "unauthorized",
    )
    .await;
}

async fn search_filters_and_refuses_bad_input(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    let one = settled(&gw, ALICE, "order-1").await;
    settled(&gw, ALICE, "order-2").await;
    let after = chrono::Utc::now() + chrono::Duration::seconds(1);
    let search = |query: &str| {
        let path = format!("/v1/jobs/search?{query}");
        let gw = &gw;
        async move { get_json(gw, ALICE, &path).await }
    };

    assert_eq!(ids(&search("idempotency_key=order-1").await), [one]);
    assert_eq!(ids(&search("status=succeeded").await).len(), 2);
    assert!(ids(&search("status=unknown").await).is_empty());
    assert_eq!(ids(&search("route=chat").await).len(), 2);
    assert!(ids(&search("route=extract").await).is_empty());
    assert_eq!(ids(&search("provider=sim-primary").await).len(), 2);
    assert!(ids(&search("provider=sim-fallback").await).is_empty());
    let window = |from: chrono::DateTime<chrono::Utc>, until: chrono::DateTime<chrono::Utc>| {
        format!(
            "created_after={}&created_before={}",
            urlencode(&from.to_rfc3339()),
            urlencode(&until.to_rfc3339())
        )
    };
    assert_eq!(ids(&search(&window(before, after)).await).len(), 2);
    assert!(ids(&search(&window(after, after + chrono::Duration::hours(1))).await).is_empty());
    // Empty parameters (what an HTML form sends) are "any".
    assert_eq!(ids(&search("status=&owner=&route=&provider=&idempotency_key=").await).len(), 2);

    for (query, status, slug, says) in [
        ("status=done", 400, "malformed-request", "`status` must be one of"),
        ("created_after=yesterday", 400, "malformed-request", "RFC 3339"),
        ("limit=0", 400, "malformed-request", "`limit`"),
        ("limit=1000", 400, "malformed-request", "`limit`"),
        ("limit=many", 400, "malformed-request", "limit"),
        ("cursor=not-a-cursor", 400, "malformed-request", "`cursor`"),
        ("colour=red", 400, "malformed-request", "colour"),
        ("idempotency_key=%D0%BA%D0%BB%D1%8E%D1%87", 400, "idempotency-key-invalid", "visible ASCII"),
    ] {
        let problem =
            assert_problem(gw.get(ALICE, &format!("/v1/jobs/search?{query}")).await, status, slug).await;
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(says), "{query}: {detail}");
    }
    let reversed = window(after, before);
    let problem =
        assert_problem(gw.get(ALICE, &format!("/v1/jobs/search?{reversed}")).await, 400, "malformed-request")
            .await;
    assert!(problem["detail"].as_str().unwrap().contains("earlier"), "{problem}");
}

fn urlencode(text: &str) -> String {
    text.replace('+', "%2B").replace(':', "%3A")
}

async fn counts_and_the_unknown_queue_follow_an_unknown_attempt(store: TestStore) {
    let gw =
        TestGateway::start_tweaked(&store, |doc| set_route(doc, "chat", "attempt_timeout", "200ms")).await;
    settled(&gw, BOB, "fine").await;
    // The next call (alice's job on sim-primary) hangs: its attempt becomes unknown.
    let id = job_left_unknown(&gw, ALICE, "refund-7", "Refund order 7").await;
    assert_eq!(settled_job(&gw, ALICE, &id).await["status"], "unknown");

    assert_eq!(get_json(&gw, ALICE, "/v1/jobs/counts").await, json!({"running": 0, "unknown": 1}));
    assert_eq!(get_json(&gw, BOB, "/v1/jobs/counts").await, json!({"running": 0, "unknown": 0}));
    assert_eq!(get_json(&gw, ADMIN, "/v1/jobs/counts").await["unknown"], 1);

    let queue = get_json(&gw, ADMIN, "/v1/attempts/unknown").await;
    assert_eq!(queue["can_resolve"], true);
    let item = &queue["attempts"][0];
    assert_eq!(queue["attempts"].as_array().unwrap().len(), 1, "{queue}");
    assert_eq!(item["job_id"], id.as_str());
    assert_eq!(item["owner"], "alice");
    assert_eq!(item["idempotency_key"], "refund-7");
    assert_eq!(item["attempt"]["number"], 1);
    assert_eq!(item["attempt"]["provider"], "sim-primary");
    assert_eq!(item["attempt"]["state"], "unknown");
    assert!(item["open_for_ms"].as_i64().unwrap() >= 200, "{item}");
    assert_eq!(item["next_provider"], "sim-fallback");
    assert_eq!(item["then"], "the chain continues on sim-fallback");
    assert_eq!(
        queue["providers"],
        json!([{
            "provider": "sim-primary", "count": 1, "oldest_started_at": item["attempt"]["started_at"],
        }])
    );
    // Its owner sees it and may not settle it; another user does not see it.
    let own = get_json(&gw, ALICE, "/v1/attempts/unknown").await;
    assert_eq!(own["can_resolve"], false);
    assert_eq!(own["attempts"][0]["job_id"], id.as_str());
    let other = get_json(&gw, BOB, "/v1/attempts/unknown").await;
    assert_eq!(other["attempts"], json!([]));
    assert_eq!(other["providers"], json!([]));

    let mut events = gw.events();
    let resolved = gw
        .request(Method::POST, &format!("/v1/jobs/{id}/attempts/1/resolve"), ADMIN)
        .json(&json!({"as": "abandoned", "reason": "provider support: never processed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200);
    wait_for_attempt(&mut events, &id, 2, AttemptState::Succeeded).await;
    assert_eq!(get_json(&gw, ADMIN, "/v1/attempts/unknown").await["attempts"], json!([]));
    assert_eq!(get_json(&gw, ALICE, "/v1/jobs/counts").await, json!({"running": 0, "unknown": 0}));
    let page = get_json(&gw, ALICE, "/v1/jobs/search?provider=sim-fallback").await;
    assert_eq!(ids(&page), [id]);
    assert_eq!(page["jobs"][0]["attempts"], 2);
    assert_eq!(page["jobs"][0]["last_provider"], "sim-fallback");
}

async fn overview_counts_the_last_hour_per_minute(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    settled(&gw, ALICE, "one").await;
    settled(&gw, ALICE, "two").await;
    let total =
        |series: &Value| -> i64 { series.as_array().unwrap().iter().map(|n| n.as_i64().unwrap()).sum() };

    let overview = get_json(&gw, ALICE, "/v1/overview").await;
    let minutes = overview["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 60);
    let last = chrono::DateTime::parse_from_rfc3339(minutes[59].as_str().unwrap()).unwrap();
    assert!(chrono::Utc::now().signed_duration_since(last) < chrono::Duration::minutes(1), "the last is now");
    for status in ["pending", "running", "succeeded", "failed", "unknown", "cancelled"] {
        assert_eq!(overview["jobs"][status].as_array().unwrap().len(), 60, "{status}");
    }
    assert_eq!(total(&overview["jobs"]["succeeded"]), 2);
    assert_eq!(total(&overview["jobs"]["failed"]), 0);
    assert_eq!(total(&overview["attempts"]["ok"]), 2);
    assert_eq!(total(&overview["attempts"]["open"]), 0);
    // The jobs are in the current (or, across a minute's turn, the previous) minute.
    let recent: i64 =
        overview["jobs"]["succeeded"].as_array().unwrap()[58..].iter().map(|n| n.as_i64().unwrap()).sum();
    assert_eq!(recent, 2);

    assert_eq!(total(&get_json(&gw, BOB, "/v1/overview").await["jobs"]["succeeded"]), 0, "bob's own only");
    assert_eq!(total(&get_json(&gw, ADMIN, "/v1/overview").await["jobs"]["succeeded"]), 2);
}

async fn contracts_show_the_verdict_the_cases_and_the_age(store: TestStore) {
    let mut captured = None;
    let gw = TestGateway::start_tweaked(&store, |doc| captured = Some(common::config_from_doc(doc))).await;
    let config = captured.unwrap();

    let before = get_json(&gw, ALICE, "/v1/contracts").await;
    let entries = before["contracts"].as_array().unwrap();
    let pairs_configured: usize = config.routes.iter().map(|route| route.chain.len()).sum();
    assert_eq!(entries.len(), pairs_configured, "every (route, provider) pair");
    let sloppy = |list: &Value| {
        list["contracts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["route"] == "extract" && c["provider"] == "sim-sloppy")
            .cloned()
            .unwrap()
    };
    let entry = sloppy(&before);
    assert_eq!(entry["eligible"], false);
    assert!(entry["reason"].as_str().unwrap().contains("no recorded run"), "{entry}");
    assert!(entry["last_run"].is_null());
    assert_eq!(entry["role"], "fallback");

    // Run the extract suite: the primary passes, the sloppy provider fails.
    let suites = Suite::load_dir(&config.contracts.dir).unwrap();
    for (suite, provider) in pairs(&config, &suites, Some("extract"), None) {
        run_and_record(&gw.gateway.store, suite, provider, &mut |_| {}).await.unwrap();
    }
    gw.gateway.engine.gate().reload(&gw.gateway.store).await.unwrap();

    let after = get_json(&gw, ALICE, "/v1/contracts").await;
    let entry = sloppy(&after);
    assert_eq!(entry["eligible"], false);
    let run = &entry["last_run"];
    assert_eq!(run["passed"], false);
    assert_eq!(run["expired"], false);
    assert!(run["age_ms"].as_i64().unwrap() >= 0);
    let route = config.routes.iter().find(|route| route.name == "extract").unwrap();
    let max_age: std::time::Duration = route.contract_max_age.into();
    assert_eq!(u128::from(entry["contract_max_age_ms"].as_u64().unwrap()), max_age.as_millis(), "{entry}");
    assert_eq!(entry["contract_max_age"], route.contract_max_age.to_string());
    let failure = &run["first_failure"];
    let failed_case = run["cases"].as_array().unwrap().iter().find(|case| case["passed"] == false).unwrap();
    assert_eq!(failure["case"], failed_case["case"]);
    assert_eq!(failure["reason"], failed_case["reasons"][0]);
    assert!(entry["reason"].as_str().unwrap().contains(failure["reason"].as_str().unwrap()), "{entry}");

    let primary = after["contracts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["route"] == "extract" && c["provider"] == "sim-primary")
        .unwrap();
    assert_eq!(primary["eligible"], true, "{primary}");
    assert_eq!(primary["last_run"]["passed"], true);
    assert!(primary["last_run"]["first_failure"].is_null());
    assert!(primary["last_run"]["cases"].as_array().unwrap().iter().all(|case| case["passed"] == true));
}

async fn whoami_names_the_principal(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    assert_eq!(
        get_json(&gw, ALICE, "/v1/whoami").await,
        json!({"name": "alice", "owner": "alice", "role": "user"})
    );
    assert_eq!(get_json(&gw, ADMIN, "/v1/whoami").await["role"], "admin");
    assert_problem(gw.get("not-a-key", "/v1/whoami").await, 401, "unauthorized").await;
}
