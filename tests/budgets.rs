//! Spend budgets and rate limits (src/budgets): reservations booked in the
//! transaction that writes the attempt, charges settled by the schema, on
//! both stores and across two gateway processes sharing one database.
//!
//! The bound these tests hold the gateway to: a meter's `used + held` never
//! passes its limit when a hold is booked, and an attempt is charged at most
//! its reservation as long as the provider reports no more tokens than were
//! reserved (the prompt counted with its tokenizer, `max_tokens` per
//! choice). So the spend of a window never exceeds its budget; each test
//! checks that precondition on every attempt rather than assuming it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{ADMIN, ALICE, BOB, TestGateway, TestStore, set_provider, set_route};
use intentgate::budgets::Window;
use intentgate::jobs::{AttemptState, Job};
use intentgate::store::{JobFilter, Store};
use reqwest::Method;
use serde_json::{Value, json};

store_matrix!(
    concurrent_requests_never_overspend_across_two_processes,
    requests_per_minute_hold_across_two_processes,
    each_attempt_is_charged_by_the_rules,
    unknown_attempts_hold_their_reservation_until_settled,
    a_budget_refusal_ends_the_chain_with_its_reason,
    usage_reports_what_the_meters_hold,
    a_rate_refusal_names_the_rate_limit_beside_a_budget,
    requests_per_minute_bound_upstream_calls,
    the_reservation_counts_every_field_that_is_sent,
    a_reserving_attempt_is_sent_the_limit_it_reserved,
    over_reported_usage_is_charged_the_reservation_and_counted,
    a_responses_output_limit_is_reserved_whole,
    cached_prompt_tokens_are_priced_at_the_cache_rate,
    a_team_budget_is_shared_by_its_keys_across_two_processes,
);

/// Prices (per million tokens) put on both simulator providers: one
/// prompt token costs 100,000 nano-units, one completion token 200,000.
const INPUT_PER_MTOK: f64 = 100.0;
const OUTPUT_PER_MTOK: f64 = 200.0;

fn price() -> toml::Value {
    let mut price = toml::Table::new();
    price.insert("input_per_mtok".into(), INPUT_PER_MTOK.into());
    price.insert("output_per_mtok".into(), OUTPUT_PER_MTOK.into());
    price.into()
}

/// Prices both chat providers and adds `budgets` and `rate_limits`.
fn with_limits(doc: &mut toml::Table, budgets: &[Value], rate_limits: &[Value]) {
    set_provider(doc, "sim-primary", "price", price());
    set_provider(doc, "sim-fallback", "price", price());
    let to_toml = |items: &[Value]| -> toml::Value {
        toml::Value::Array(items.iter().map(|v| toml::Value::try_from(v).unwrap()).collect())
    };
    doc.insert("budgets".into(), to_toml(budgets));
    doc.insert("rate_limits".into(), to_toml(rate_limits));
}

/// What the simulator's reported usage costs at the test prices.
fn cost_of(usage: &Value) -> i64 {
    let prompt = usage["prompt_tokens"].as_i64().unwrap();
    let completion = usage["completion_tokens"].as_i64().unwrap();
    prompt * 100_000 + completion * 200_000
}

fn chat(text: &str) -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": text}], "max_tokens": 8})
}

/// Every job and its attempts, straight from the store.
async fn ledger(store: &Store) -> Vec<(Job, Vec<intentgate::jobs::Attempt>)> {
    let jobs = store.list_jobs(&JobFilter { limit: 10_000, ..JobFilter::default() }).await.unwrap();
    let mut out = Vec::new();
    for job in jobs {
        let attempts = store.attempts(job.id).await.unwrap();
        out.push((job, attempts));
    }
    out
}

fn day_meter(owner: &str) -> (String, i64) {
    let now = chrono::Utc::now().timestamp_millis();
    (format!("budget/owner={owner}/route=all/1d"), Window::Day.bounds(now).0)
}

/// Two `intentgate serve` processes on one database, each pointed at one
/// simulator, with `tweak` applied to the shipped config.
struct Replicas {
    processes: Vec<common::Spawned>,
    sim: intentgate_providers::sim::SimHandle,
    store: Store,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Replicas {
    async fn start(store: &TestStore, tweak: impl Fn(&mut toml::Table)) -> Replicas {
        let sim =
            intentgate_providers::sim::Simulator::new(7).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let dir = std::env::temp_dir().join(format!("intentgate-budgets-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut processes = Vec::new();
        for name in ["replica-a", "replica-b"] {
            let mut doc = common::test_config_doc(&store.url, Some(sim.addr()));
            tweak(&mut doc);
            // 100 concurrent requests per process on 8 connections, queued
            // behind one budget's row: more than the harness's 1 s to wait.
            let store = doc.get_mut("store").unwrap().as_table_mut().unwrap();
            store.insert("acquire_timeout".into(), "10s".into());
            let mut engine = toml::Table::new();
            engine.insert("instance_id".into(), name.into());
            doc.insert("engine".into(), engine.into());
            let path = dir.join(format!("{name}.toml"));
            std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
            processes.push(common::spawn_serve(&path).await);
        }
        let config = common::config_from_doc(&common::test_config_doc(&store.url, None));
        let direct = Store::connect(&config.store).await.unwrap();
        Replicas { processes, sim, store: direct, _dir: TempDir(dir) }
    }

    /// `n` chat completions of `owner`, released together by a barrier and
    /// spread over both processes; their status codes and bodies.
    async fn burst(&self, api_key: &'static str, n: usize) -> Vec<(u16, reqwest::header::HeaderMap, Value)> {
        self.burst_as(n, |_| (api_key.to_owned(), None)).await
    }

    /// `n` chat completions, the `i`th with the key and tags (the
    /// `Intentgate-Tags` header) `who(i)` names, released together and
    /// spread over both processes.
    async fn burst_as(
        &self,
        n: usize,
        who: impl Fn(usize) -> (String, Option<String>),
    ) -> Vec<(u16, reqwest::header::HeaderMap, Value)> {
        let client = common::client();
        let barrier = Arc::new(tokio::sync::Barrier::new(n));
        let mut tasks = Vec::new();
        for i in 0..n {
            let url = format!("{}/v1/chat/completions", self.processes[i % 2].url);
            let (client, barrier) = (client.clone(), barrier.clone());
            let (api_key, tags) = who(i);
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let mut request = client
                    .post(url)
                    .bearer_auth(api_key)
                    .header("idempotency-key", format!("burst-{i}"))
                    .json(&chat(&format!("burst {i}")));
                if let Some(tags) = tags {
                    request = request.header("intentgate-tags", tags);
                }
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                (status, headers, response.json::<Value>().await.unwrap())
            }));
        }
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    }
}

/// 200 concurrent requests against a budget that pays for about 50 answers:
/// each is served or refused with 429 `budget-exhausted`; the day's spend
/// never passes the limit; it equals the sum of the attempts' charges to
/// the nano-unit; every served request made exactly one upstream call and
/// every refused one none.
async fn concurrent_requests_never_overspend_across_two_processes(store: TestStore) {
    // An answer here costs 800,000 nano-units (2 prompt words, 3 completion
    // words at the simulator's count); 50 of them: 0.04.
    let limit = 0.04;
    let replicas = Replicas::start(&store, |doc| {
        with_limits(doc, &[json!({"owner": "alice", "limit": limit, "window": "1d"})], &[]);
    })
    .await;
    let answers = replicas.burst(ALICE, 200).await;

    let served = answers.iter().filter(|(status, _, _)| *status == 200).count();
    for (status, headers, body) in &answers {
        match status {
            200 => {}
            429 => {
                assert_eq!(body["type"], format!("{}budget-exhausted", intentgate::api::PROBLEM_TYPE_BASE));
                assert_eq!(
                    body["error"]["code"], "budget-exhausted",
                    "the OpenAI error member says the same"
                );
                assert_eq!(headers["x-should-retry"], "false", "an SDK must not retry into the same budget");
                assert!(body["resets_at"].as_str().is_some(), "{body}");
            }
            other => panic!("every request is served or refused with 429, got {other}: {body}"),
        }
    }
    assert!(served > 0 && served < 200, "some requests fit the budget, not all: {served}");
    eprintln!("budget race on {:?}: {served} of 200 served, {} refused", store.backend, 200 - served);

    let ledger = ledger(&replicas.store).await;
    assert_eq!(ledger.len(), served, "a refused request stores nothing");
    let mut charged = 0;
    for (job, attempts) in &ledger {
        assert_eq!(attempts.len(), 1, "one attempt per served job: {job:?}");
        let attempt = &attempts[0];
        let cost = attempt.charged.expect("a settled attempt is charged").nanos;
        let reported: Value = serde_json::from_str(attempt.usage.as_deref().unwrap()).unwrap();
        assert_eq!(cost, cost_of(&reported), "charged what the provider reported, priced");
        assert!(
            cost <= attempt.reserved.nanos,
            "the bound's precondition: cost {cost} ≤ reservation {:?}",
            attempt.reserved
        );
        charged += cost;
    }
    let (meter, window) = day_meter("alice");
    let (used, held) = replicas.store.meter(&meter, window).await.unwrap();
    assert_eq!(held, 0, "nothing is reserved once every attempt settled");
    assert_eq!(used, charged, "the day's spend is the sum of the attempts' charges, exactly");
    assert!(used <= 40_000_000, "spend {used} exceeds the budget of 0.04 (40,000,000 nano-units)");
    assert_eq!(
        replicas.sim.calls().total,
        served as u64,
        "one upstream call per served request, none for refusals"
    );
}

/// A requests-per-minute limit of 10 shared by two processes: of 30
/// concurrent new requests exactly 10 are served; the others get 429
/// `rate-limited` with a `Retry-After`; a duplicate of a served one is
/// answered (it is not a new request). A tokens-per-minute limit holds the
/// same way.
async fn requests_per_minute_hold_across_two_processes(store: TestStore) {
    common::clear_of_the_minute_end().await;
    let replicas = Replicas::start(&store, |doc| {
        let requests = json!({"owner": "bob", "route": "chat", "requests_per_minute": 10});
        let tokens = json!({"owner": "alice", "tokens_per_minute": 150});
        with_limits(doc, &[], &[requests, tokens]);
    })
    .await;
    let answers = replicas.burst(BOB, 30).await;
    let served = answers.iter().filter(|(status, _, _)| *status == 200).count();
    assert_eq!(
        served,
        10,
        "exactly the limit is served: {:?}",
        answers.iter().map(|a| a.0).collect::<Vec<_>>()
    );
    for (status, headers, body) in answers.iter().filter(|(status, _, _)| *status != 200) {
        assert_eq!(*status, 429, "{body}");
        assert_eq!(body["type"], format!("{}rate-limited", intentgate::api::PROBLEM_TYPE_BASE));
        let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    }
    assert_eq!(replicas.sim.calls().total, 10, "refused requests reach no provider");
    let now = chrono::Utc::now().timestamp_millis();
    let meter = "rate0-requests/owner=bob/route=chat/1m";
    let (used, held) = replicas.store.meter(meter, Window::Minute.bounds(now).0).await.unwrap();
    assert_eq!((used, held), (10, 0));

    // A served request's duplicate is a replay: answered, not counted.
    let index = answers.iter().position(|(status, _, _)| *status == 200).unwrap();
    let replay = common::client()
        .post(format!("{}/v1/chat/completions", replicas.processes[index % 2].url))
        .bearer_auth(BOB)
        .header("idempotency-key", format!("burst-{index}"))
        .json(&chat(&format!("burst {index}")))
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status(), 200);
    assert_eq!(replicas.store.meter(meter, Window::Minute.bounds(now).0).await.unwrap(), (10, 0));

    // Tokens: each attempt reserves its prompt plus max_tokens and is
    // charged what the provider reported; what was charged in the minute
    // never passes the limit.
    let calls_before = replicas.sim.calls().total;
    let answers = replicas.burst(ALICE, 40).await;
    let served = answers.iter().filter(|(status, _, _)| *status == 200).count();
    assert!(served > 0 && served < 40, "some fit, some do not: {served}");
    for (status, _, body) in answers.iter().filter(|(status, _, _)| *status != 200) {
        assert_eq!(*status, 429, "{body}");
        assert_eq!(body["type"], format!("{}rate-limited", intentgate::api::PROBLEM_TYPE_BASE));
    }
    let meter = "rate1-tokens/owner=alice/route=all/1m";
    let (used, held) = replicas.store.meter(meter, Window::Minute.bounds(now).0).await.unwrap();
    let charged: i64 = ledger(&replicas.store)
        .await
        .iter()
        .filter(|(job, _)| job.owner == "alice")
        .flat_map(|(_, attempts)| attempts.iter().map(|a| a.charged.unwrap().tokens))
        .sum();
    assert_eq!((used, held), (charged, 0), "the minute's tokens are the attempts' charges");
    assert!(used <= 150, "{used} tokens charged in a minute limited to 150");
    assert_eq!(replicas.sim.calls().total - calls_before, served as u64);
}

async fn resolve(gw: &TestGateway, job_id: &str, number: i32, resolution: &str) -> reqwest::Response {
    gw.request(Method::POST, &format!("/v1/jobs/{job_id}/attempts/{number}/resolve"), ADMIN)
        .json(&json!({"as": resolution, "reason": "budget test"}))
        .send()
        .await
        .unwrap()
}

async fn create(gw: &TestGateway, key: &str) -> String {
    let body = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": key}]},
        "params": {"max_tokens": 8}});
    let response = gw.create(ALICE, key, &body).await;
    assert!(response.status().is_success(), "{}", response.status());
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// Asserts the day meter of alice holds `held` and has used exactly the sum
/// of the charges of every attempt in the store.
async fn assert_meter_is_the_ledger(gw: &TestGateway, held: i64) -> i64 {
    let store = &gw.gateway.store;
    let charged: i64 = ledger(store)
        .await
        .iter()
        .flat_map(|(_, attempts)| attempts.iter().filter_map(|a| a.charged.map(|c| c.nanos)))
        .sum();
    let (meter, window) = day_meter("alice");
    assert_eq!(store.meter(&meter, window).await.unwrap(), (charged, held), "(used, held) of {meter}");
    charged
}

/// Retries, failover, a superseded late answer and a replay, each charged
/// as the rules say: rejected attempts nothing; answers what they reported;
/// a late answer that lost the race what it reported too; a replay nothing.
async fn each_attempt_is_charged_by_the_rules(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        with_limits(doc, &[json!({"owner": "alice", "limit": 1.0, "window": "1d"})], &[]);
        set_route(doc, "chat", "retry_backoff", "10ms");
        set_route(doc, "chat", "attempt_timeout", "200ms");
    })
    .await;
    let mut events = gw.events();

    // A retry: 429 then an answer on the same provider.
    gw.sim().queue(None, "status=429", 1).unwrap();
    let id = create(&gw, "retried").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded");
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["usage"]["cost_nanos"], 0, "a rejected attempt did no work: {}", attempts[0]);
    let answer = &attempts[1]["usage"];
    assert_eq!(answer["cost_nanos"].as_i64().unwrap(), cost_of(&answer["reported"]));
    assert!(answer["cost"].as_f64().unwrap() > 0.0);
    let spent = assert_meter_is_the_ledger(&gw, 0).await;

    // A failover: the primary fails (500, rejected), the fallback answers.
    gw.sim().queue(None, "status=500", 1).unwrap();
    let id = create(&gw, "failed-over").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["result"]["provider"], "sim-fallback", "{job:#}");
    let attempts = job["attempts"].as_array().unwrap();
    let last = attempts.last().unwrap();
    for rejected in &attempts[..attempts.len() - 1] {
        assert_eq!(rejected["usage"]["cost_nanos"], 0, "{rejected}");
    }
    assert_eq!(last["usage"]["cost_nanos"].as_i64().unwrap(), cost_of(&last["usage"]["reported"]));
    let spent_after_failover = assert_meter_is_the_ledger(&gw, 0).await;
    assert!(spent_after_failover > spent);

    // A replay costs nothing.
    let replay = gw
        .create(
            ALICE,
            "failed-over",
            &json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "failed-over"}]},
                "params": {"max_tokens": 8}}),
        )
        .await;
    assert!(replay.status().is_success());
    assert_eq!(assert_meter_is_the_ledger(&gw, 0).await, spent_after_failover, "a replay is free");

    // A late answer that lost: the primary is held, declared unknown and
    // abandoned (charged its reservation: it may have been billed); the
    // fallback wins; the primary's answer arrives → superseded, charged
    // what it reported instead.
    gw.sim().queue(None, "hold=late", 1).unwrap();
    let calls_before = gw.sim().calls().total;
    let id = create(&gw, "superseded").await;
    common::wait_for_attempt(&mut events, &id, 1, AttemptState::Unknown).await;
    assert_eq!(resolve(&gw, &id, 1, "abandoned").await.status(), 200);
    common::wait_for_attempt(&mut events, &id, 2, AttemptState::Succeeded).await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    let abandoned = &job["attempts"][0]["usage"];
    assert_eq!(abandoned["cost_nanos"], abandoned["reserved_nanos"], "abandoned: its reservation");
    assert_meter_is_the_ledger(&gw, 0).await;
    gw.sim().release("late");
    common::wait_for_attempt(&mut events, &id, 1, AttemptState::Superseded).await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    let late = &job["attempts"][0]["usage"];
    assert_eq!(
        late["cost_nanos"].as_i64().unwrap(),
        cost_of(&late["reported"]),
        "superseded: what it reported"
    );
    assert_meter_is_the_ledger(&gw, 0).await;
    assert_eq!(gw.sim().calls().total, calls_before + 2);
}

/// An `unknown` attempt keeps its reservation; settled `failed` by an
/// operator it is charged nothing and the reservation is released.
async fn unknown_attempts_hold_their_reservation_until_settled(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        with_limits(doc, &[json!({"owner": "alice", "limit": 1.0, "window": "1d"})], &[]);
        set_route(doc, "chat", "attempt_timeout", "100ms");
        set_provider(doc, "sim-primary", "model", "sim:hang");
    })
    .await;
    let mut events = gw.events();
    let id = create(&gw, "unknown").await;
    common::wait_for_attempt(&mut events, &id, 1, AttemptState::Unknown).await;
    let attempt = gw.gateway.store.attempt(id.parse().unwrap(), 1).await.unwrap().unwrap();
    assert!(attempt.reserved.nanos > 0);
    assert_eq!(attempt.charged, None, "an open attempt has no charge yet");
    assert_meter_is_the_ledger(&gw, attempt.reserved.nanos).await;

    assert_eq!(resolve(&gw, &id, 1, "failed").await.status(), 200);
    common::wait_for_attempt(&mut events, &id, 2, AttemptState::Succeeded).await;
    let attempt = gw.gateway.store.attempt(id.parse().unwrap(), 1).await.unwrap().unwrap();
    assert_eq!(attempt.charged.map(|c| c.nanos), Some(0), "settled failed: provably no work");
    let spent = assert_meter_is_the_ledger(&gw, 0).await;
    let winner = gw.gateway.store.attempt(id.parse().unwrap(), 2).await.unwrap().unwrap();
    assert_eq!(spent, winner.charged.unwrap().nanos);
}

/// A failover attempt the budget cannot pay for is not sent: the chain ends
/// with the budget's reason in the job's error, and the primary's failed
/// attempt costs nothing. A new job is refused at once, storing nothing.
async fn a_budget_refusal_ends_the_chain_with_its_reason(store: TestStore) {
    // The fallback's reservation (cl100k count + 8 completion tokens at a
    // price 100× the primary's) cannot fit; the primary's can.
    let gw = TestGateway::start_tweaked(&store, |doc| {
        with_limits(doc, &[json!({"owner": "alice", "limit": 0.01, "window": "1d"})], &[]);
        let mut dear = toml::Table::new();
        dear.insert("input_per_mtok".into(), 10_000.0.into());
        dear.insert("output_per_mtok".into(), 20_000.0.into());
        set_provider(doc, "sim-fallback", "price", dear);
        set_provider(doc, "sim-primary", "model", "sim:status=500");
    })
    .await;
    let id = create(&gw, "too-dear").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "failed");
    assert_eq!(job["error"]["code"], "budget-exhausted", "{}", job["error"]);
    assert!(job["error"]["reason"].as_str().unwrap().contains("sim-fallback"), "{}", job["error"]);
    assert!(job["attempts"].as_array().unwrap().iter().all(|a| a["provider"] == "sim-primary"));
    assert_meter_is_the_ledger(&gw, 0).await;
    let calls = gw.sim().calls();
    assert_eq!(calls.by_path.get("/v1/messages").copied().unwrap_or(0), 0, "the fallback was never called");

    // Bob has no budget; alice's is now too small for the primary alone.
    let before = gw.job_count().await;
    let huge = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "x"}]},
        "params": {"max_tokens": 100000}});
    let refused = gw.create(ALICE, "refused", &huge).await;
    assert_eq!(refused.headers()["x-should-retry"], "false");
    let body = common::assert_problem(refused, 429, "budget-exhausted").await;
    assert_eq!(body["currency"], "USD");
    assert_eq!(gw.job_count().await, before, "a refused job stores nothing");
    assert!(gw.create(BOB, "unbudgeted", &huge).await.status().is_success(), "bob has no budget");
    let refusals = metric(&gw, "intentgate_limit_refusals_total{kind=\"budget\"}").await;
    assert!(refusals >= 2.0, "the chain's refusal and the new job's are counted: {refusals}");
}

/// A metric's value from `GET /metrics` (the recorder is shared by the
/// tests of this binary, so callers compare with ≥).
async fn metric(gw: &TestGateway, series: &str) -> f64 {
    let text = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or_else(|| panic!("no `{series}` in\n{text}"))
}

/// `GET /v1/usage` and `intentgate usage` say what the meters hold; a user
/// cannot read another owner's usage, an admin can.
async fn usage_reports_what_the_meters_hold(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        with_limits(
            doc,
            &[json!({"owner": "*", "limit": 2.5, "window": "month"})],
            &[json!({"owner": "alice", "requests_per_minute": 100, "tokens_per_minute": 100000})],
        );
    })
    .await;
    let id = create(&gw, "metered").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    let cost = job["attempts"][0]["usage"]["cost_nanos"].as_i64().unwrap();

    let usage: Value = gw.get(ALICE, "/v1/usage").await.json().await.unwrap();
    assert_eq!(usage["owner"], "alice");
    let budget = &usage["budgets"][0];
    assert_eq!(budget["window"], "month");
    assert_eq!(budget["limit_nanos"], 2_500_000_000_i64);
    assert_eq!(budget["spent_nanos"], cost);
    assert_eq!(budget["reserved_nanos"], 0);
    let rates = usage["rate_limits"].as_array().unwrap();
    let requests = rates.iter().find(|r| r["per_minute"] == "requests").unwrap();
    assert_eq!((requests["limit"].as_i64(), requests["used"].as_i64()), (Some(100), Some(1)));
    let tokens = rates.iter().find(|r| r["per_minute"] == "tokens").unwrap();
    let reported = &job["attempts"][0]["usage"]["reported"];
    assert_eq!(tokens["used"], reported["total_tokens"]);

    let bob: Value = gw.get(BOB, "/v1/usage").await.json().await.unwrap();
    assert_eq!(bob["budgets"][0]["spent_nanos"], 0, "each owner has a budget of their own");
    assert_eq!(bob["rate_limits"].as_array().unwrap().len(), 0, "the rate limit is alice's only");
    common::assert_problem(gw.get(BOB, "/v1/usage?owner=alice").await, 403, "forbidden").await;
    let by_admin: Value = gw.get(ADMIN, "/v1/usage?owner=alice").await.json().await.unwrap();
    assert_eq!(by_admin["budgets"][0]["spent_nanos"], cost);
    let spend = metric(&gw, "intentgate_spend_nanos_total{provider=\"sim-primary\"}").await;
    assert!(spend >= cost as f64, "the spend counter counts this charge: {spend} < {cost}");
}

/// A request refused by a rate limit says so, on both stores, when a
/// budget applies too: PostgreSQL once named the budget (which had room),
/// with `x-should-retry: false` and a reset at midnight, because it judged
/// each meter as if its amount had been booked.
async fn a_rate_refusal_names_the_rate_limit_beside_a_budget(store: TestStore) {
    common::clear_of_the_minute_end().await;
    let gw = TestGateway::start_tweaked(&store, |doc| {
        let budget = json!({"owner": "alice", "limit": 1.0, "window": "1d"});
        with_limits(doc, &[budget], &[json!({"owner": "alice", "requests_per_minute": 1})]);
    })
    .await;
    let first = create(&gw, "first-of-the-minute").await;
    common::settled_job(&gw, ALICE, &first).await;
    let body = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "again"}]},
        "params": {"max_tokens": 8}});
    let refused = gw.create(ALICE, "second-of-the-minute", &body).await;
    let retry_after: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    let problem = common::assert_problem(refused, 429, "rate-limited").await;
    assert!(problem["detail"].as_str().unwrap().contains("requests"), "{problem}");
    assert_eq!(gw.sim().calls().total, 1, "the refused request reached no provider");
}

/// `requests_per_minute` bounds upstream calls, not new jobs: a failover
/// counts, and so does an attempt started by hand; once the minute is full
/// neither is sent.
async fn requests_per_minute_bound_upstream_calls(store: TestStore) {
    common::clear_of_the_minute_end().await;
    let gw = TestGateway::start_tweaked(&store, |doc| {
        with_limits(doc, &[], &[json!({"owner": "alice", "requests_per_minute": 2})]);
        set_provider(doc, "sim-primary", "model", "sim:status=500");
        set_provider(doc, "sim-fallback", "model", "sim:status=500");
    })
    .await;
    let id = create(&gw, "two-calls").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 2, "the primary and the failover: {job}");
    let manual = gw
        .request(Method::POST, &format!("/v1/jobs/{id}/attempts"), ADMIN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    common::assert_problem(manual, 429, "rate-limited").await;
    let body = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "third"}]}});
    common::assert_problem(gw.create(ALICE, "a-third-call", &body).await, 429, "rate-limited").await;
    assert_eq!(gw.sim().calls().total, 2, "two calls in a minute limited to two");
    let now = chrono::Utc::now().timestamp_millis();
    let meter = "rate0-requests/owner=alice/route=all/1m";
    assert_eq!(gw.gateway.store.meter(meter, Window::Minute.bounds(now).0).await.unwrap(), (2, 0));
}

/// Every field that reaches the provider is reserved for, not only
/// `messages` and `tools`: a large legacy `functions` list on a small
/// budget is refused before anything is sent or stored (it once reserved
/// a dozen tokens and was charged for all of them).
async fn the_reservation_counts_every_field_that_is_sent(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        with_limits(doc, &[json!({"owner": "alice", "limit": 1.0, "window": "1d"})], &[]);
    })
    .await;
    let description: String = (0..20_000).map(|i| format!("w{i} ")).collect();
    let functions = json!([{"name": "lookup", "description": description, "parameters": {"type": "object"}}]);
    let body = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]},
        "params": {"max_tokens": 8, "functions": functions}});
    let before = gw.job_count().await;
    common::assert_problem(gw.create(ALICE, "heavy-functions", &body).await, 429, "budget-exhausted").await;
    assert_eq!(gw.job_count().await, before, "a refused job stores nothing");
    assert_eq!(gw.sim().calls().total, 0);
    // The same request without the list fits.
    let light = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "hi"}]},
        "params": {"max_tokens": 8}});
    assert!(gw.create(ALICE, "light", &light).await.status().is_success());
}

/// A priced attempt whose client set no completion limit is sent the one
/// it reserved (`[billing] default_max_tokens`), so the provider cannot
/// generate past the reservation; an unpriced, unmetered one is sent the
/// client's request as it was.
async fn a_reserving_attempt_is_sent_the_limit_it_reserved(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        with_limits(doc, &[], &[]);
        let mut billing = toml::Table::new();
        billing.insert("default_max_tokens".into(), 300.into());
        doc.insert("billing".into(), billing.into());
    })
    .await;
    let body = json!({"route": "chat", "input": {"messages": [{"role": "user", "content": "no limit"}]}});
    let created: Value = gw.create(ALICE, "no-limit", &body).await.json().await.unwrap();
    let id = created["id"].as_str().unwrap();
    let job = common::settled_job(&gw, ALICE, id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let sent = gw.sim().last_request(id).unwrap().body.unwrap();
    assert_eq!(sent["max_tokens"], 300, "{sent}");
    let attempts = gw.gateway.store.attempts(id.parse().unwrap()).await.unwrap();
    assert!(attempts[0].reserved.tokens > 300, "the reservation holds the limit: {:?}", attempts[0].reserved);
}

/// A provider that reports 10 M output tokens on `max_tokens: 8`: the
/// answer keeps the usage as reported, the attempt is charged its
/// reservation, the budget's spend stays within its limit, and the excess
/// is counted.
async fn over_reported_usage_is_charged_the_reservation_and_counted(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        with_limits(doc, &[json!({"owner": "alice", "limit": 1.0, "window": "1d"})], &[]);
    })
    .await;
    gw.sim().queue(None, "usage=10000000", 1).unwrap();
    // The counter is the process's: both stores' runs count into it.
    let series = "intentgate_usage_over_reservation_total{provider=\"sim-primary\"}";
    let before = metric(&gw, series).await;
    let id = create(&gw, "over-reported").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let reported = &job["attempts"][0]["usage"]["reported"];
    assert_eq!(reported["completion_tokens"], 10_000_000, "kept as reported: {job}");
    let attempts = gw.gateway.store.attempts(id.parse().unwrap()).await.unwrap();
    assert_eq!(attempts[0].charged, Some(attempts[0].reserved), "charged its reservation");
    let usage: Value = gw.get(ALICE, "/v1/usage").await.json().await.unwrap();
    let spent = usage["budgets"][0]["spent_nanos"].as_i64().unwrap();
    assert_eq!(spent, attempts[0].reserved.nanos);
    assert!(spent <= 1_000_000_000, "the budget never passes its limit: {spent}");
    assert_eq!(metric(&gw, series).await - before, 1.0, "counted once");
}

/// A Responses request's `max_output_tokens` is reserved whole: the
/// provider is sent it as `max_output_tokens`, and a budget that holds the
/// default completion limit but not 100,000 tokens refuses it unsent.
async fn a_responses_output_limit_is_reserved_whole(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-responses", "price", price());
        doc.insert(
            "budgets".into(),
            toml::Value::try_from(vec![json!({"owner": "alice", "limit": 5.0, "window": "1d"})]).unwrap(),
        );
    })
    .await;
    let ask = |limit: u64| json!({"model": "codex", "input": "hi", "max_output_tokens": limit});
    let post = |key: &'static str, body: Value| {
        gw.client
            .post(gw.url("/v1/responses"))
            .bearer_auth(ALICE)
            .header("idempotency-key", key)
            .json(&body)
            .send()
    };
    // 100,000 × 200,000 nano-units is 20 units: more than the 5 left.
    let refused = post("large", ask(100_000)).await.unwrap();
    assert_eq!(refused.status(), 429, "{:?}", refused.text().await);
    assert_eq!(gw.sim().calls().total, 0, "refused unsent");
    let served = post("small", ask(100)).await.unwrap();
    assert_eq!(served.status(), 200);
    let job = served.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    assert_eq!(gw.sim().last_request(&job).unwrap().body.unwrap()["max_output_tokens"], 100);
}

/// Claude Code's turn carries cache breakpoints; the provider reports half
/// its prompt read from the cache, and the attempt is charged those tokens
/// at the cache rate and shows them apart in the job view.
async fn cached_prompt_tokens_are_priced_at_the_cache_rate(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        let mut price = toml::Table::new();
        price.insert("input_per_mtok".into(), INPUT_PER_MTOK.into());
        price.insert("output_per_mtok".into(), OUTPUT_PER_MTOK.into());
        price.insert("cached_input_per_mtok".into(), 10.0.into());
        set_provider(doc, "sim-claude", "price", toml::Value::Table(price));
    })
    .await;
    let series = r#"intentgate_provider_token_details_total{provider="sim-claude",kind="cached_input"}"#;
    let before = metric(&gw, series).await;
    let response = common::send_as_claude_code(&gw, "cached-1", &common::claude_code_turn("claude")).await;
    assert_eq!(response.status(), 200);
    let id = response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let message: Value = response.json().await.unwrap();
    let usage = &message["usage"];
    let cached = usage["cache_read_input_tokens"].as_i64().unwrap();
    assert!(cached > 0, "the provider's own usage, cache reads included: {message}");
    let job = common::settled_job(&gw, ALICE, &id).await;
    let uncached = usage["input_tokens"].as_i64().unwrap();
    let output = usage["output_tokens"].as_i64().unwrap();
    let expected = uncached * 100_000 + cached * 10_000 + output * 200_000;
    assert_eq!(job["attempts"][0]["usage"]["cost_nanos"], expected, "{job}");
    // The job view counts them apart, as they are priced.
    let counted = &job["attempts"][0]["usage"]["counted"];
    assert_eq!(counted["input"], uncached + cached, "{job}");
    assert_eq!(counted["cached_input"], cached, "{job}");
    assert_eq!(counted["output"], output, "{job}");
    // The other store's run of this test counts on the same series: at least.
    let counted = metric(&gw, series).await - before;
    assert!(counted >= cached as f64, "cache reads counted on /metrics: {counted} of {cached}");
}

/// `POST` `body` to `path` on `url` as the admin; the answer's JSON, after
/// asserting `status`.
async fn admin_post(url: &str, path: &str, body: Value, status: u16) -> Value {
    let response =
        common::client().post(format!("{url}{path}")).bearer_auth(ADMIN).json(&body).send().await.unwrap();
    assert_eq!(response.status().as_u16(), status);
    response.json().await.unwrap()
}

async fn admin_get(url: &str, path: &str) -> reqwest::Response {
    common::client().get(format!("{url}{path}")).bearer_auth(ADMIN).send().await.unwrap()
}

/// Polls `GET /v1/usage` as `key` on `url` until it lists `meter` (the
/// replica applies the limit); how long that took.
async fn until_applied(url: &str, key: &str, meter: &str) -> std::time::Duration {
    let started = std::time::Instant::now();
    loop {
        let response = common::client().get(format!("{url}/v1/usage")).bearer_auth(key).send().await.unwrap();
        let usage: Value = response.json().await.unwrap();
        if usage["budgets"].as_array().unwrap().iter().any(|budget| budget["meter"] == meter) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{meter} not applied on {url}: {usage}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The spend report's rows grouped by `by`, as `(value, cost_nanos)`, and
/// its total.
async fn spend_by(url: &str, by: &str) -> (Vec<(Value, i64)>, i64) {
    let report: Value = admin_get(url, &format!("/v1/usage/spend?group_by={by}")).await.json().await.unwrap();
    let rows = report["rows"].as_array().unwrap();
    let rows =
        rows.iter().map(|row| (row["group"][by].clone(), row["cost_nanos"].as_i64().unwrap())).collect();
    (rows, report["total"]["cost_nanos"].as_i64().unwrap())
}

/// Three stored keys of one team, a team budget set at runtime, 60
/// concurrent requests over two processes: the team's spend never passes
/// its budget, refusals name the team's meter, and the spend report's
/// totals by key, team and tag are the attempts' charges to the nano-unit.
async fn a_team_budget_is_shared_by_its_keys_across_two_processes(store: TestStore) {
    let replicas = Replicas::start(&store, |doc| with_limits(doc, &[], &[])).await;
    let (a, b) = (replicas.processes[0].url.clone(), replicas.processes[1].url.clone());
    let mut keys = Vec::new();
    for owner in ["svc-a", "svc-b", "svc-c"] {
        let made =
            admin_post(&a, "/v1/admin/keys", json!({"name": owner, "owner": owner, "team": "support"}), 201)
                .await;
        keys.push((made["id"].as_str().unwrap().to_owned(), made["secret"].as_str().unwrap().to_owned()));
    }
    let budget = json!({"scope": "team", "subject": "support", "budget": 0.02, "window": "1d"});
    let limit = admin_post(&b, "/v1/admin/limits", budget, 201).await;
    assert_eq!(limit["meter"], "budget/team=support/route=all/1d", "{limit}");
    for url in [&a, &b] {
        let took = until_applied(url, &keys[0].1, "budget/team=support/route=all/1d").await;
        common::loud(&format!("a limit set on B applied on {url} after {took:?}\n"));
        assert!(took <= std::time::Duration::from_secs(1), "applied after {took:?}");
    }

    let answers =
        replicas.burst_as(60, |i| (keys[i % 3].1.clone(), Some(format!("support-bot, key-{}", i % 3)))).await;
    let served = answers.iter().filter(|(status, _, _)| *status == 200).count();
    for (status, _, body) in answers.iter().filter(|(status, _, _)| *status != 200) {
        assert_eq!(*status, 429, "{body}");
        assert_eq!(body["meter"], "budget/team=support/route=all/1d", "the team's budget refused it: {body}");
    }
    assert!(served > 0 && served < 60, "some requests fit the team's budget, not all: {served}");

    let ledger = ledger(&replicas.store).await;
    assert_eq!(ledger.len(), served, "a refused request stores nothing");
    let mut by_key = std::collections::BTreeMap::<String, i64>::new();
    for (job, attempts) in &ledger {
        assert_eq!(job.attribution.team.as_deref(), Some("support"));
        let cost = attempts[0].charged.expect("charged").nanos;
        assert!(cost <= attempts[0].reserved.nanos, "the bound's precondition");
        *by_key.entry(job.attribution.key_id.unwrap().to_string()).or_default() += cost;
    }
    let charged: i64 = by_key.values().sum();
    let day = Window::Day.bounds(chrono::Utc::now().timestamp_millis()).0;
    let (used, held) = replicas.store.meter("budget/team=support/route=all/1d", day).await.unwrap();
    assert_eq!((used, held), (charged, 0), "the team's meter is the sum of its keys' charges");
    assert!(used <= 20_000_000, "the team spent {used} of a 0.02 budget");

    let (rows, total) = spend_by(&a, "key").await;
    assert_eq!(total, charged, "the report's total is every charge, exactly");
    let reported: std::collections::BTreeMap<String, i64> =
        rows.iter().map(|(key, nanos)| (key.as_str().unwrap().to_owned(), *nanos)).collect();
    assert_eq!(reported, by_key, "per key, exactly");
    assert_eq!(spend_by(&b, "team").await.0, [(json!("support"), charged)], "per team");
    let (tags, _) = spend_by(&a, "tag").await;
    let tag = |name: &str| tags.iter().find(|(value, _)| value == name).map_or(0, |(_, nanos)| *nanos);
    assert_eq!(tag("support-bot"), charged, "every job carried this tag");
    assert_eq!(tag("key-0") + tag("key-1") + tag("key-2"), charged, "and one of these");
    let csv = admin_get(&a, "/v1/usage/spend?group_by=team&format=csv").await.text().await.unwrap();
    let cost = format!("{:.9}", charged as f64 / 1e9);
    let expected = format!("team,cost,cost_nanos,tokens,attempts\r\nsupport,{cost},{charged},");
    assert!(csv.starts_with(&expected) && csv.lines().count() == 2, "{csv}");
}
