//! A route's hedge (`[[routes]] hedge`), over real HTTP against the
//! simulator on loopback, on both stores: a silent attempt stays open while
//! the next provider starts beside it, the first answer wins and the late
//! one is kept `superseded` and charged; a broken connection hedges at once;
//! a hedge the budget cannot cover is not started; a stream is hedged only
//! where the hedge says `streams`, and only before its first chunk (the
//! first attempt to produce one claims the client's stream; the crash
//! test's reset, silent and slow-first-token faults); an attempt still in flight after the hedge won keeps the job's
//! lease, so a driver that dies leaves it to the sweep; and without a hedge
//! the default is unchanged. Upstream calls are
//! counted at the simulator by path: `sim-primary` speaks OpenAI
//! (`/v1/chat/completions`), `sim-fallback` Anthropic (`/v1/messages`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{ALICE, TestGateway, TestStore, set_engine, set_provider, set_route};
use intentgate::jobs::{AttemptState, JobStatus};
use serde_json::{Value, json};

store_matrix!(
    a_silent_attempt_is_hedged_and_the_first_answer_wins,
    without_a_hedge_a_silent_attempt_leaves_the_job_unknown,
    a_broken_connection_is_hedged_at_once,
    a_failed_hedge_leaves_the_first_attempt_to_answer,
    when_neither_answers_the_job_waits_on_both,
    a_hedge_the_budget_cannot_cover_is_not_started,
    a_stream_is_never_hedged_after_its_first_chunk,
    a_trailing_attempt_keeps_the_lease_so_a_dead_driver_leaves_it_unknown,
    a_stream_reset_before_its_first_chunk_is_answered_by_the_hedge,
    a_silent_stream_is_answered_by_the_hedge,
    a_slow_streams_late_answer_is_read_unseen_and_superseded,
    without_streams_in_the_hedge_a_silent_stream_is_not_hedged,
);

const PRIMARY: &str = "/v1/chat/completions";
const FALLBACK: &str = "/v1/messages";

/// A gateway whose route `hedged-<uuid>` is the shipped `chat` route
/// (`sim-primary` → `sim-fallback`) with `hedge = { after, open_attempts = 2 }`
/// and `attempt_timeout`; `tweak` goes on from there. The route's name is
/// its own, so that tests running at once in this process (which share one
/// metrics recorder) count their metrics apart.
async fn hedged(
    store: &TestStore,
    after: &str,
    attempt_timeout: &str,
    tweak: impl FnOnce(&mut toml::Table),
) -> (TestGateway, String) {
    let name = format!("hedged-{}", uuid::Uuid::now_v7().simple());
    let (route_name, after, attempt_timeout) = (name.clone(), after.to_owned(), attempt_timeout.to_owned());
    let gw = TestGateway::start_tweaked(store, move |doc| {
        let routes = doc["routes"].as_array_mut().unwrap();
        let mut route = routes.iter().find(|r| r["name"].as_str() == Some("chat")).unwrap().clone();
        let table = route.as_table_mut().unwrap();
        table.insert("name".into(), route_name.into());
        table.remove("aliases");
        let mut hedge = toml::Table::new();
        hedge.insert("after".into(), after.into());
        hedge.insert("open_attempts".into(), 2.into());
        table.insert("hedge".into(), hedge.into());
        table.insert("attempt_timeout".into(), attempt_timeout.into());
        routes.push(route);
        tweak(doc);
    })
    .await;
    (gw, name)
}

fn body(route: &str, text: &str) -> Value {
    json!({"route": route, "input": {"messages": [{"role": "user", "content": text}]}, "params": {"max_tokens": 8}})
}

/// Creates a job on `route` and returns its id.
async fn create(gw: &TestGateway, route: &str, key: &str) -> String {
    let created = gw.create(ALICE, key, &body(route, key)).await;
    assert!(created.status().is_success(), "{:?}", created.text().await);
    let created: Value = created.json().await.unwrap();
    created["id"].as_str().unwrap().to_owned()
}

fn attempts(job: &Value) -> &Vec<Value> {
    job["attempts"].as_array().unwrap()
}

async fn a_silent_attempt_is_hedged_and_the_first_answer_wins(store: TestStore) {
    let (gw, route) = hedged(&store, "200ms", "10s", |_| {}).await;
    let mut events = gw.events();
    // The primary answers, but only after the hedge has answered.
    gw.sim().queue(Some("sim:ok"), "delay=1500ms", 1).unwrap();
    let id = create(&gw, &route, "both-answer").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback", "the first to finish wins: {job}");
    common::wait_for_attempt(&mut events, &id, 1, AttemptState::Superseded).await;

    let job: Value = gw.get(ALICE, &format!("/v1/jobs/{id}")).await.json().await.unwrap();
    let [first, second] = attempts(&job).as_slice() else { panic!("two attempts: {job}") };
    assert_eq!(
        (first["provider"].as_str(), first["state"].as_str()),
        (Some("sim-primary"), Some("superseded"))
    );
    assert_eq!(
        (second["provider"].as_str(), second["state"].as_str()),
        (Some("sim-fallback"), Some("succeeded"))
    );
    assert_eq!((first["hedged"].as_bool(), second["hedged"].as_bool()), (Some(false), Some(true)));
    assert_eq!((first["lane"].as_i64(), second["lane"].as_i64()), (Some(1), Some(2)));
    assert_eq!(job["completed_by"], second["id"], "the winner is the hedge");
    for attempt in [first, second] {
        assert!(
            attempt["usage"]["tokens"].as_i64().unwrap() > 0,
            "both did the work and are charged: {attempt}"
        );
        assert!(attempt["usage"]["reported"].is_object(), "the loser's usage is kept for audit: {attempt}");
    }
    assert_eq!(
        (common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)),
        (1, 1),
        "one call each, none re-sent"
    );
    let hedges = format!("intentgate_hedged_attempts_total{{route=\"{route}\",provider=\"sim-fallback\"}}");
    assert_eq!(common::metric(&gw, &hedges).await, 1.0);
    let twice = format!("intentgate_duplicate_executions_total{{route=\"{route}\"}}");
    assert_eq!(common::metric(&gw, &twice).await, 1.0, "the second execution is counted");
    let possibly = format!("intentgate_possible_duplicate_executions_total{{route=\"{route}\"}}");
    assert_eq!(common::metric(&gw, &possibly).await, 0.0, "both answered: nothing is left to doubt");
    assert_eq!(job["executions"], json!({"answered": 2, "may_have_run": 0}), "{job}");
}

/// The default, side by side with the hedge: a silent provider leaves its
/// attempt and job `unknown`, and nothing else is sent.
async fn without_a_hedge_a_silent_attempt_leaves_the_job_unknown(store: TestStore) {
    let gw =
        TestGateway::start_tweaked(&store, |doc| set_route(doc, "chat", "attempt_timeout", "300ms")).await;
    let id = common::job_left_unknown(&gw, ALICE, "no-hedge", "hello").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "unknown", "{job}");
    assert_eq!(attempts(&job).len(), 1);
    assert_eq!(
        (common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)),
        (1, 0),
        "no second provider is sent it"
    );
}

/// A connection that breaks after the request was sent proves nothing, so
/// its attempt stays `unknown` — and the hedge starts at once, not after
/// `after` (a minute here: a hedge that waited for it would time the
/// test's wait out).
async fn a_broken_connection_is_hedged_at_once(store: TestStore) {
    let (gw, route) = hedged(&store, "60s", "120s", |_| {}).await;
    gw.sim().queue(Some("sim:ok"), "reset-after-body", 1).unwrap();
    let id = create(&gw, &route, "reset").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback");
    let [first, second] = attempts(&job).as_slice() else { panic!("two attempts: {job}") };
    assert_eq!(first["state"], "unknown", "the broken attempt is not failed: it may have run");
    assert_eq!((second["state"].as_str(), second["hedged"].as_bool()), (Some("succeeded"), Some(true)));
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)), (1, 1));
    // It may have run as well as the hedge that answered: counted apart
    // from a second answer, which did not come.
    let possibly = format!("intentgate_possible_duplicate_executions_total{{route=\"{route}\"}}");
    assert_eq!(common::metric(&gw, &possibly).await, 1.0, "the broken attempt may have run twice the intent");
    let twice = format!("intentgate_duplicate_executions_total{{route=\"{route}\"}}");
    assert_eq!(common::metric(&gw, &twice).await, 0.0, "only one answer came");
    assert_eq!(job["executions"], json!({"answered": 1, "may_have_run": 1}), "{job}");
}

/// A hedge that fails (proven: a 400) settles only itself: the first
/// attempt, still open, answers and wins; nothing fails over past it.
async fn a_failed_hedge_leaves_the_first_attempt_to_answer(store: TestStore) {
    let (gw, route) = hedged(&store, "100ms", "10s", |doc| {
        set_provider(doc, "sim-fallback", "model", "sim:status=400");
    })
    .await;
    gw.sim().queue(Some("sim:ok"), "delay=800ms", 1).unwrap();
    let id = create(&gw, &route, "hedge-fails").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-primary");
    let [first, second] = attempts(&job).as_slice() else { panic!("two attempts: {job}") };
    assert_eq!(first["state"], "succeeded");
    assert_eq!((second["state"].as_str(), second["outcome"].as_str()), (Some("failed"), Some("rejected")));
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)), (1, 1));
}

/// Two silent attempts: both stay open `unknown` (the job's bound, two),
/// the job waits on them, and nothing more is sent.
async fn when_neither_answers_the_job_waits_on_both(store: TestStore) {
    let (gw, route) = hedged(&store, "100ms", "600ms", |_| {}).await;
    let mut events = gw.events();
    gw.sim().queue(Some("sim:ok"), "hang", 2).unwrap();
    let id = create(&gw, &route, "both-silent").await;
    common::wait_for_attempt(&mut events, &id, 2, AttemptState::Unknown).await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "unknown", "{job}");
    let states: Vec<&str> = attempts(&job).iter().map(|a| a["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["unknown", "unknown"], "{job}");
    assert_eq!(
        (common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)),
        (1, 1),
        "no third call: the bound is two"
    );
}

/// A hedge books its reservation before it is sent; one the budget cannot
/// cover is not started, the first attempt goes on, and the spend stays
/// within the budget.
async fn a_hedge_the_budget_cannot_cover_is_not_started(store: TestStore) {
    let (gw, route) = hedged(&store, "100ms", "10s", |doc| {
        let price = |input: f64, output: f64| {
            let mut price = toml::Table::new();
            price.insert("input_per_mtok".into(), input.into());
            price.insert("output_per_mtok".into(), output.into());
            toml::Value::from(price)
        };
        set_provider(doc, "sim-primary", "price", price(100.0, 200.0));
        // The fallback's reservation is a hundred times the primary's.
        set_provider(doc, "sim-fallback", "price", price(10_000.0, 20_000.0));
        let mut budget = toml::Table::new();
        budget.insert("owner".into(), "alice".into());
        budget.insert("limit".into(), 0.01.into());
        budget.insert("window".into(), "1d".into());
        doc.insert("budgets".into(), toml::Value::Array(vec![budget.into()]));
    })
    .await;
    gw.sim().queue(Some("sim:ok"), "delay=800ms", 1).unwrap();
    let not_started = format!("intentgate_hedges_not_started_total{{route=\"{route}\",reason=\"budget\"}}");
    let id = create(&gw, &route, "too-dear-to-hedge").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-primary");
    assert_eq!(attempts(&job).len(), 1, "no hedged attempt was written: {job}");
    assert_eq!(
        (common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)),
        (1, 0),
        "the hedge was never sent"
    );
    assert_eq!(common::metric(&gw, &not_started).await, 1.0);
    let usage: Value = gw.get(ALICE, "/v1/usage").await.json().await.unwrap();
    let budget = &usage["budgets"][0];
    assert!(budget["spent_nanos"].as_i64().unwrap() <= 10_000_000, "within the budget: {usage}");
}

/// Once a streamed chunk reached the client no other provider may answer:
/// a stream that stalls after it is never hedged, whatever `after` says.
async fn a_stream_is_never_hedged_after_its_first_chunk(store: TestStore) {
    let (gw, route) = hedged(&store, "100ms", "10s", |doc| {
        set_provider(doc, "sim-primary", "stream_idle_timeout", "500ms");
    })
    .await;
    gw.sim().queue(Some("sim:ok"), "stream-stall", 1).unwrap();
    let request = json!({"model": route, "stream": true, "messages": [{"role": "user", "content": "stall"}]});
    let response = gw.chat_completion("stream-stall", &request).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.contains("data: {"), "a chunk reached the client: {text}");
    assert!(text.contains("error"), "the stall ends the stream with an in-band error: {text}");
    assert_eq!(
        (common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)),
        (1, 0),
        "no hedge after a chunk"
    );
}

/// The hedge answered while attempt 1 was still in flight, and then the
/// driver stopped: here its lease lapses, as a killed process's does (the
/// sweep is told that a minute went by; the lease lasts 15 s). The winner's
/// write left the job its lease while attempt 1 was `starting`, so the
/// sweep takes the job over and makes attempt 1 `unknown` — it was sent —
/// where without the lease nothing would ever settle it (nor release what it
/// reserved). The job stays succeeded; attempt 1's answer, when it comes, is
/// still kept (`superseded`); once nothing trails, the lease is gone.
async fn a_trailing_attempt_keeps_the_lease_so_a_dead_driver_leaves_it_unknown(store: TestStore) {
    let (gw, route) = hedged(&store, "200ms", "10s", |doc| {
        set_engine(doc, "sweep_interval", "1h");
    })
    .await;
    let mut events = gw.events();
    gw.sim().queue(Some("sim:ok"), "hold=trail", 1).unwrap();
    let id = create(&gw, &route, "trailing").await;
    let job = common::settled_job(&gw, ALICE, &id).await;
    assert_eq!(
        (job["status"].as_str(), job["result"]["provider"].as_str()),
        (Some("succeeded"), Some("sim-fallback"))
    );
    assert_eq!(attempts(&job)[0]["state"], "starting", "attempt 1 is still in flight: {job}");

    let (engine, rows) = (&gw.gateway.engine, &gw.gateway.store);
    let job_id = id.parse().unwrap();
    engine.clock().advance(Duration::from_secs(60));
    assert_eq!(engine.sweep_once().await.unwrap(), 1, "the job of a trailing attempt has a lease to lapse");
    assert_eq!(rows.attempts(job_id).await.unwrap()[0].state, AttemptState::Unknown, "it may have been sent");
    assert_eq!(rows.job(job_id).await.unwrap().unwrap().status, JobStatus::Succeeded);

    gw.sim().release("trail");
    common::wait_for_attempt(&mut events, &id, 1, AttemptState::Superseded).await;
    engine.clock().advance(Duration::from_secs(60));
    assert_eq!(engine.sweep_once().await.unwrap(), 0, "no lease is left behind");
    assert_eq!(
        (common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)),
        (1, 1),
        "one call each, none re-sent"
    );
}

/// The hedged route (the last one `hedged` added) hedges streams too.
fn streams_too(doc: &mut toml::Table) {
    let routes = doc["routes"].as_array_mut().unwrap();
    let hedge = routes.last_mut().unwrap()["hedge"].as_table_mut().unwrap();
    hedge.insert("streams".into(), true.into());
}

/// A streamed request on `route`: its status and the text its deltas make.
async fn stream(gw: &TestGateway, route: &str, key: &str) -> (u16, String) {
    let request = json!({"model": route, "stream": true, "messages": [{"role": "user", "content": key}]});
    let response = gw.chat_completion(key, &request).await;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let deltas = common::chunks_of(&text)
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str().map(str::to_owned))
        .collect();
    (status, deltas)
}

/// The crash test's S05, streamed: the primary takes the request and resets
/// the connection before a byte of its answer. With `streams`, the hedge
/// starts at once and its stream is the client's; the primary, which may
/// have run, is counted as possibly run twice.
async fn a_stream_reset_before_its_first_chunk_is_answered_by_the_hedge(store: TestStore) {
    let (gw, route) = hedged(&store, "5s", "10s", streams_too).await;
    gw.sim().queue(Some("sim:ok"), "reset-before-body", 1).unwrap();
    let (status, text) = stream(&gw, &route, "s05").await;
    assert_eq!((status, text.as_str()), (200, "echo: s05"), "the hedge's stream, whole");
    assert_eq!(
        (common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)),
        (1, 1),
        "one call each, no more"
    );
    let job = common::job_of_key(&gw, "s05").await;
    assert_eq!(
        (job["status"].as_str(), job["result"]["provider"].as_str()),
        (Some("succeeded"), Some("sim-fallback"))
    );
    assert_eq!(attempts(&job)[0]["state"], "unknown", "the reset one may have run: {job}");
    assert_eq!(job["executions"], json!({"answered": 1, "may_have_run": 1}), "{job}");
}

/// The crash test's S06, streamed: the primary never answers. The hedge
/// starts after `after` and its stream is the client's.
async fn a_silent_stream_is_answered_by_the_hedge(store: TestStore) {
    let (gw, route) = hedged(&store, "200ms", "10s", streams_too).await;
    gw.sim().queue(Some("sim:ok"), "hang", 1).unwrap();
    let (status, text) = stream(&gw, &route, "s06").await;
    assert_eq!((status, text.as_str()), (200, "echo: s06"));
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)), (1, 1));
    let job = common::job_of_key(&gw, "s06").await;
    assert_eq!(job["result"]["provider"], "sim-fallback", "{job}");
}

/// The crash test's S07, streamed: the primary is slow to its first token.
/// The hedge's first chunk claims the stream; the primary's answer, when
/// it comes, is read unseen, kept `superseded` and charged, and counted as
/// the second execution the route accepted. The client sees one answer.
async fn a_slow_streams_late_answer_is_read_unseen_and_superseded(store: TestStore) {
    let (gw, route) = hedged(&store, "200ms", "10s", streams_too).await;
    let mut events = gw.events();
    gw.sim().queue(Some("sim:ok"), "hold=s07", 1).unwrap();
    let (status, text) = stream(&gw, &route, "s07").await;
    assert_eq!((status, text.as_str()), (200, "echo: s07"), "one answer, not two");
    let job = common::job_of_key(&gw, "s07").await;
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(job["result"]["provider"], "sim-fallback", "{job}");
    gw.sim().release("s07");
    common::wait_for_attempt(&mut events, &id, 1, AttemptState::Superseded).await;
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)), (1, 1));
    let twice = format!("intentgate_duplicate_executions_total{{route=\"{route}\"}}");
    assert_eq!(common::metric(&gw, &twice).await, 1.0, "the declared duplicate, counted");
    let job: Value = gw.get(ALICE, &format!("/v1/jobs/{id}")).await.json().await.unwrap();
    assert_eq!(job["executions"], json!({"answered": 2, "may_have_run": 0}), "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback", "the stream's owner keeps the result: {job}");
    // The loser's chunks are nowhere else: kept on its attempt. The
    // winner's are the job's result, not stored a second time.
    let stored = gw.gateway.store.attempts(id.parse().unwrap()).await.unwrap();
    let kept = gw.gateway.store.attempt_response(stored[0].id).await.unwrap().unwrap();
    let kept: Vec<Value> = serde_json::from_str(&kept).unwrap();
    let said: String =
        kept.iter().filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(said, "echo: s07", "{kept:?}");
    assert_eq!(gw.gateway.store.attempt_response(stored[1].id).await.unwrap(), None);
}

/// Without `streams` the hedge leaves streams alone, as before: a silent
/// stream is not hedged, and its client is told when `attempt_timeout`
/// passes.
async fn without_streams_in_the_hedge_a_silent_stream_is_not_hedged(store: TestStore) {
    let (gw, route) = hedged(&store, "100ms", "1s", |_| {}).await;
    gw.sim().queue(Some("sim:ok"), "hang", 1).unwrap();
    let (_, text) = stream(&gw, &route, "no-streams").await;
    assert_eq!(text, "", "no answer: {text}");
    assert_eq!((common::calls_at(&gw, PRIMARY), common::calls_at(&gw, FALLBACK)), (1, 0), "not hedged");
}
