//! The state machine's edges, each a reproduction of a history that once
//! broke it: a cancelled job whose dead driver left an attempt `starting`,
//! a late answer thrown away because the chain ran out meanwhile, and an
//! answer lost because the store was briefly unreachable when it arrived.
//! Every scenario counts the upstream calls at the simulator. Beside them,
//! the edges of the surface around jobs: text no tokenizer input should
//! break, the bound on concurrent token counts, and a client that hangs up
//! while its job is being created, a provider's unreadable stream event
//! skipped where it opts in, and the result a drive hands the request that
//! created its job.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::proxy::ToggleProxy;
use common::{
    ADMIN, ALICE, Backend, TestGateway, TestStore, chat_body, chunks_of, set_engine, set_provider, set_route,
    settled_job, wait_for_attempt,
};
use intentgate::engine::{EngineEvent, Submission};
use intentgate::jobs::{Attempt, AttemptState, IdempotencyKey, Job, JobResult, JobStatus, NewJob, Sent};
use intentgate::store::{Created, Lease, Reservation};
use reqwest::Method;
use serde_json::{Value, json};

store_matrix!(
    the_request_that_created_a_job_gets_the_result_its_drive_stored,
    a_cancelled_jobs_orphaned_attempt_becomes_unknown_and_can_be_settled,
    an_attempt_its_dead_driver_never_sent_is_sent_again_on_its_provider,
    a_send_mark_and_recoverys_failure_exclude_each_other,
    a_large_answer_waits_unread_for_room_in_the_answer_budget,
    a_late_answer_completes_a_job_whose_chain_ran_out_meanwhile,
    a_megabyte_of_pathological_text_is_counted,
    a_count_finding_every_slot_taken_is_refused_at_once,
    a_request_dropped_as_its_job_is_created_still_drives_it,
    a_malformed_stream_event_is_skipped_where_the_provider_opts_in,
    an_answer_the_result_holds_is_stored_once,
    where_sends_are_not_recorded_attempts_are_written_unrecorded_and_never_marked,
);

/// `[store] record_sends = false`: every attempt — the first, inserted with
/// its job, and a failover's — is written "not recorded" and sent without
/// a mark, so recovery would treat it as possibly sent, never as unsent.
async fn where_sends_are_not_recorded_attempts_are_written_unrecorded_and_never_marked(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        doc["store"].as_table_mut().unwrap().insert("record_sends".into(), false.into());
    })
    .await;
    gw.sim().queue(Some("sim:ok"), "status=500", 1).unwrap();
    assert!(gw.create(ALICE, "unrecorded", &chat_body("unrecorded")).await.status().is_success());
    let job = common::job_of_key(&gw, "unrecorded").await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let attempts = gw.gateway.store.attempts(job["id"].as_str().unwrap().parse().unwrap()).await.unwrap();
    let sent: Vec<Sent> = attempts.iter().map(|attempt| attempt.sent).collect();
    assert_eq!(sent, [Sent::Unrecorded, Sent::Unrecorded], "{job}");
    assert!(job["attempts"].as_array().unwrap().iter().all(|a| a["sent_at"].is_null()), "{job}");
    assert_eq!(gw.sim().calls().total, 2, "each sent once");
}

/// An answer the job's result holds parsed — OpenAI's body as its
/// completion, a stream's chunks — is not kept a second time on the
/// attempt that won; a translated dialect's own body (Anthropic's here),
/// held nowhere else, is.
async fn an_answer_the_result_holds_is_stored_once(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    assert!(gw.create(ALICE, "once-plain", &chat_body("once")).await.status().is_success());
    let plain = common::job_of_key(&gw, "once-plain").await;
    assert_eq!(plain["result"]["completion"]["choices"][0]["message"]["content"], "echo: once", "{plain}");
    assert_eq!(kept(&gw, plain["id"].as_str().unwrap()).await, ("sim-primary".to_owned(), None));
    let streamed =
        json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "once"}]});
    let response = gw.chat_completion("once-streamed", &streamed).await;
    let id = response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    assert!(!chunks_of(&response.text().await.unwrap()).is_empty());
    let job = settled_job(&gw, ALICE, &id).await;
    assert!(!job["result"]["chunks"].as_array().unwrap().is_empty(), "{job}");
    assert_eq!(kept(&gw, &id).await.1, None);
    gw.sim().queue(Some("sim:ok"), "status=500", 1).unwrap();
    assert!(gw.create(ALICE, "once-translated", &chat_body("once")).await.status().is_success());
    let translated = common::job_of_key(&gw, "once-translated").await;
    let (provider, raw) = kept(&gw, translated["id"].as_str().unwrap()).await;
    assert_eq!(provider, "sim-fallback");
    let raw: Value = serde_json::from_str(&raw.unwrap()).unwrap();
    assert_eq!(raw["type"], "message", "Anthropic's own answer: {raw}");
}

/// The provider of job `id`'s winning attempt and the raw answer it keeps.
async fn kept(gw: &TestGateway, id: &str) -> (String, Option<String>) {
    let attempts = gw.gateway.store.attempts(id.parse().unwrap()).await.unwrap();
    let won = attempts.iter().find(|attempt| attempt.state == AttemptState::Succeeded).unwrap();
    (won.provider.clone(), gw.gateway.store.attempt_response(won.id).await.unwrap())
}

async fn resolve(gw: &TestGateway, job_id: &str, number: i32, resolution: &str) -> reqwest::Response {
    gw.request(Method::POST, &format!("/v1/jobs/{job_id}/attempts/{number}/resolve"), ADMIN)
        .json(&json!({"as": resolution, "reason": "checked with the provider"}))
        .send()
        .await
        .unwrap()
}

/// The request whose job its own drive completed is handed the result that
/// drive stored, as it was before it was encoded — its answer is rendered
/// from that, not from the row read back and decoded — and it is the row's
/// result exactly; a replay of the key has only the row.
async fn the_request_that_created_a_job_gets_the_result_its_drive_stored(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let engine = &gw.gateway.engine;
    let key = IdempotencyKey::parse("own-result").unwrap();
    let new = std::sync::Arc::new(NewJob::of_body("alice".into(), key, &chat_body("x")).unwrap());
    let Submission::Accepted(first) = engine.submit(&new, Duration::from_secs(10)).await.unwrap() else {
        panic!("a new job")
    };
    assert_eq!(first.job.status, JobStatus::Succeeded);
    let stored = first.job.result.as_deref().and_then(JobResult::decode).expect("the row's result");
    assert_eq!(first.result.as_deref(), Some(&stored), "handed over by the drive, equal to the row's");

    let Submission::Accepted(again) = engine.submit(&new, Duration::from_secs(10)).await.unwrap() else {
        panic!("the same job")
    };
    assert!(again.replayed && again.result.is_none(), "a replay reads the row");
    assert_eq!(gw.sim().calls().total, 1, "executed once");
}

/// A gateway died (kill -9) while its attempt 1 was being sent (marked
/// sent, its request on the wire); the job was cancelled before the dead
/// lease expired. Once it has, the sweep makes the
/// attempt `unknown` — it may have been sent — so that an operator (or
/// `max_execution`) can settle it; the job stays `cancelled`, and nothing is
/// sent again.
async fn a_cancelled_jobs_orphaned_attempt_becomes_unknown_and_can_be_settled(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_engine(doc, "sweep_interval", "1h");
    })
    .await;
    let engine = &gw.gateway.engine;
    let (job, attempt) = left_by_a_dead_gateway(&gw, "orphaned").await;
    let now = engine.clock().now_ms();
    assert!(gw.gateway.store.mark_sent(attempt.id, now).await.unwrap(), "the dead instance sent it");
    let id = job.id.to_string();

    let cancelled = gw.request(Method::POST, &format!("/v1/jobs/{id}/cancel"), ALICE).send().await.unwrap();
    assert_eq!(cancelled.status(), 200);
    assert_eq!(engine.sweep_once().await.unwrap(), 0, "the dead lease has not expired yet");
    let attempts = gw.gateway.store.attempts(job.id).await.unwrap();
    assert_eq!(attempts[0].state, AttemptState::Starting, "its driver may still be alive");

    engine.clock().advance(Duration::from_secs(60));
    assert_eq!(engine.sweep_once().await.unwrap(), 1, "the sweep takes the expired lease");
    let attempts = gw.gateway.store.attempts(job.id).await.unwrap();
    assert_eq!(attempts[0].state, AttemptState::Unknown, "the dead instance may have sent it");
    assert_eq!(engine.sweep_once().await.unwrap(), 0, "the lease was released, not kept");

    let resolved = resolve(&gw, &id, 1, "abandoned").await;
    assert_eq!(resolved.status(), 200, "an operator can settle it now");
    let job: Value = gw.get(ALICE, &format!("/v1/jobs/{id}")).await.json().await.unwrap();
    assert_eq!(job["status"], "cancelled", "{job}");
    assert_eq!(job["attempts"][0]["state"], "abandoned");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no new attempt on a cancelled job");
    assert_eq!(gw.sim().calls().total, 0, "nothing was sent by this instance");
}

/// What a dead gateway left: a job leased to it, attempt 1 on `sim-primary`
/// written but never sent (the process died between the job's commit and
/// the send). Once the lease expires the sweep knows nothing went out: the
/// attempt fails as `not_sent` and the job is sent again on the same
/// provider at once — one upstream call in all, no wait for
/// `max_execution`, no failover.
async fn an_attempt_its_dead_driver_never_sent_is_sent_again_on_its_provider(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_engine(doc, "sweep_interval", "1h");
    })
    .await;
    let engine = &gw.gateway.engine;
    let (job, _) = left_by_a_dead_gateway(&gw, "never-sent").await;
    let id = job.id.to_string();

    engine.clock().advance(Duration::from_secs(60));
    assert_eq!(engine.sweep_once().await.unwrap(), 1, "the sweep takes the expired lease");
    let view = settled_job(&gw, ALICE, &id).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{view}");
    assert_eq!((&attempts[0]["state"], &attempts[0]["outcome"]), (&json!("failed"), &json!("not_sent")));
    assert_eq!(attempts[0]["sent_at"], Value::Null, "never handed over");
    assert_eq!(attempts[1]["provider"], "sim-primary", "started again where it was to be sent");
    assert!(attempts[1]["sent_at"].is_string(), "the second was marked before it left: {view}");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call in all");
}

/// The mark a driver commits before sending and the sweep's failure of an
/// attempt never sent are each guarded on the other: whichever comes first,
/// the second finds the attempt changed and does nothing.
async fn a_send_mark_and_recoverys_failure_exclude_each_other(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_engine(doc, "sweep_interval", "1h");
    })
    .await;
    let (real, now) = (&gw.gateway.store, gw.gateway.engine.clock().now_ms());
    let (_, swept) = &left_by_a_dead_gateway(&gw, "swept-first").await;
    let (_, marked) = &left_by_a_dead_gateway(&gw, "marked-first").await;
    assert!(real.unsent_to_failed(swept.id, "swept", now).await.unwrap());
    assert!(!real.mark_sent(swept.id, now).await.unwrap(), "a failed attempt is not sent");
    assert!(real.mark_sent(marked.id, now).await.unwrap());
    assert!(
        !real.unsent_to_failed(marked.id, "swept", now).await.unwrap(),
        "a sent attempt is never failed unsent"
    );
    assert!(!real.mark_sent(marked.id, now + 1).await.unwrap(), "marked once");
    let attempts = real.attempts(marked.job_id).await.unwrap();
    assert_eq!((attempts[0].state, attempts[0].sent), (AttemptState::Starting, Sent::At(now)));
    assert_eq!(gw.sim().calls().total, 0);
}

/// A large answer takes room in the gateway's answer budget before it is
/// read. With none free (the test holds it all) it waits, unread — its call
/// made once, its job not failed — while a small answer goes through; once
/// the room is given back it is read whole, and gives its room back too.
async fn a_large_answer_waits_unread_for_room_in_the_answer_budget(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        let server = doc.get_mut("server").unwrap().as_table_mut().unwrap();
        server.insert("max_answer_bytes_held".into(), (1024 * 1024).into());
        server.insert("max_body_bytes".into(), (2 * 1024 * 1024).into());
    })
    .await;
    let budget = gw.gateway.engine.answer_budget().clone();
    let everything = budget.room_for(usize::try_from(budget.bytes()).unwrap()).await;
    let large = "x".repeat(300 * 1024);
    let openai = |text: &str| json!({"model": "chat", "messages": [{"role": "user", "content": text}]});
    let large_body = openai(&large);
    let sending = gw.chat_completion("large", &large_body);
    let meanwhile = async {
        budget_reaches(&budget, |b| b.waits() >= 1, "the large answer waits for room").await;
        let small = gw.chat_completion("small", &openai("small")).await;
        assert_eq!(small.status(), 200, "a small answer takes no room");
        assert_eq!(gw.sim().calls().total, 2, "the large answer's call was made once; it waits to be read");
        drop(everything);
    };
    let (answered, ()) = tokio::join!(sending, meanwhile);
    assert_eq!(answered.status(), 200);
    let answer: Value = answered.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], format!("echo: {large}"));
    budget_reaches(&budget, |b| b.held_bytes() == 0, "its room given back once its body was written").await;
    assert_eq!(budget.waits(), 1);
    assert_eq!(gw.sim().calls().total, 2);

    // A stream takes its room once it has read more than a small answer.
    let everything = budget.room_for(usize::try_from(budget.bytes()).unwrap()).await;
    let streamed_body =
        json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": large}]});
    let streaming = async {
        let response = gw.chat_completion("large-stream", &streamed_body).await;
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    };
    let release = async {
        budget_reaches(&budget, |b| b.waits() >= 2, "the stream waits for room").await;
        drop(everything);
    };
    let (text, ()) = tokio::join!(streaming, release);
    let deltas: String = chunks_of(&text)
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(deltas, format!("echo: {large}"), "read whole once given room");
    budget_reaches(
        &budget,
        |b| b.held_bytes() == 0,
        "the stream's room given back once its answer was stored",
    )
    .await;
    assert_eq!(gw.sim().calls().total, 3);
}

/// Returns once `holds` is true of the budget (its waits counted, the room
/// it holds given back: the server drops a response's body, and with it its
/// room, once it has written it — not always before the client has read it).
async fn budget_reaches(
    budget: &intentgate_providers::AnswerBudget,
    holds: impl Fn(&intentgate_providers::AnswerBudget) -> bool,
    what: &str,
) {
    let reached = async {
        while !holds(budget) {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), reached).await.unwrap_or_else(|_| panic!("never: {what}"));
}

/// What a gateway killed between a job's commit and its send leaves: the
/// job leased to it for 30 s more, its attempt 1 on `sim-primary` written
/// and not yet sent.
async fn left_by_a_dead_gateway(gw: &TestGateway, key: &str) -> (Job, Attempt) {
    let new = NewJob::of_body("alice".into(), IdempotencyKey::parse(key).unwrap(), &chat_body(key)).unwrap();
    let now = gw.gateway.engine.clock().now_ms();
    let dead = Lease { owner: "gw-killed", expires_at_ms: now + 30_000 };
    let first = Some(("sim-primary", &Reservation::default()));
    match gw.gateway.store.create_job(&new, dead, first, 1, now).await.unwrap() {
        Created::New(job, Some(attempt)) => (job, *attempt),
        _ => panic!("expected a job inserted with its attempt 1"),
    }
}

/// The route's only provider answers after its attempt was declared
/// `unknown` and abandoned by an operator, which ran the chain out and failed
/// the job. The answer was paid for: it completes the job (`failed →
/// succeeded`), and a retry under the same key replays it without a second
/// execution.
async fn a_late_answer_completes_a_job_whose_chain_ran_out_meanwhile(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:hold=late");
        set_route(doc, "chat", "chain", toml::Value::Array(vec!["sim-primary".into()]));
        set_route(doc, "chat", "attempt_timeout", "100ms");
    })
    .await;
    let mut events = gw.events();
    let created = gw.create(ALICE, "late-but-paid", &chat_body("late")).await;
    assert_eq!(created.status(), 201);
    let id = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    wait_for_attempt(&mut events, &id, 1, AttemptState::Unknown).await;
    assert_eq!(resolve(&gw, &id, 1, "abandoned").await.status(), 200);
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "failed", "the chain ran out: {job}");

    gw.sim().release("late");
    wait_for_attempt(&mut events, &id, 1, AttemptState::Succeeded).await;
    let job = settled_job(&gw, ALICE, &id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["completed_by"], job["attempts"][0]["id"], "the late answer won");
    assert_eq!(job["result"]["provider"], "sim-primary");
    assert!(job["error"].is_null(), "the failure no longer applies: {job}");

    let replay = gw.create(ALICE, "late-but-paid", &chat_body("late")).await;
    assert_eq!(replay.status(), 200);
    let replay: Value = replay.json().await.unwrap();
    assert_eq!(replay["status"], "succeeded");
    assert_eq!(gw.sim().calls().total, 1, "executed once");
    assert_eq!(
        gw.gateway.store.job(id.parse().unwrap()).await.unwrap().unwrap().status,
        JobStatus::Succeeded
    );
}

/// PostgreSQL goes away between the provider's answer and its recording:
/// the engine holds the answer and retries its compare-and-swap until the
/// store is back. The job succeeds with that answer; nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_answer_is_held_while_the_store_is_unreachable() {
    let Some(store) = TestStore::new(Backend::Postgres).await else { return };
    let proxy = ToggleProxy::start(store.pg_host_port()).await;
    let gw = TestGateway::start_tweaked(&store, |doc| {
        let url = store.url_via(&proxy.addr.to_string());
        doc.get_mut("store").unwrap().as_table_mut().unwrap().insert("url".into(), url.into());
        set_provider(doc, "sim-primary", "model", "sim:hold=answer");
        set_provider(doc, "sim-primary", "max_execution", "60s");
    })
    .await;
    let mut events = gw.events();
    let created = gw.create(ALICE, "held", &chat_body("held")).await;
    assert_eq!(created.status(), 201);
    let id: uuid::Uuid = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().parse().unwrap();
    let called = tokio::time::timeout(Duration::from_secs(10), gw.sim().wait_for_calls(1)).await;
    assert!(called.is_ok(), "the committed job was never sent: its drive died with the request");

    proxy.set_up(false);
    gw.sim().release("answer");
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.recv().await.unwrap() {
                EngineEvent::Holding { job_id, .. } if job_id == id => return,
                _ => {}
            }
        }
    })
    .await
    .expect("the engine holds the answer while the store is down");
    proxy.set_up(true);
    wait_for_attempt(&mut events, &id.to_string(), 1, AttemptState::Succeeded).await;
    let job = settled_job(&gw, ALICE, &id.to_string()).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no failover");
    assert_eq!(gw.sim().calls().total, 1, "executed once");
}

/// A Messages request to count whose one message is `text`.
fn count_request(gw: &TestGateway, text: &str) -> reqwest::RequestBuilder {
    let body = json!({"model": "chat", "messages": [{"role": "user", "content": text}]});
    gw.client.post(gw.url("/v1/messages/count_tokens")).header("x-api-key", ALICE).json(&body)
}

/// A megabyte of spaces once made tiktoken's regex overflow its stack and
/// the worker panic (no answer at all); a megabyte of one letter is one
/// huge pre-token. Each is counted, at least one token per ~4 KiB of
/// spaces (the longest whitespace token is far shorter) and never zero.
async fn a_megabyte_of_pathological_text_is_counted(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        doc["server"].as_table_mut().unwrap().insert("max_body_bytes".into(), (4 << 20).into());
    })
    .await;
    let mixed: String = ["  \t ", "a", "\u{a0}\u{3000}", "東京", "!!", "🙂", "   9999", "\u{200b}"]
        .iter()
        .cycle()
        .take(120_000)
        .copied()
        .collect();
    let inputs = [("spaces", " ".repeat(1 << 20)), ("one letter", "a".repeat(1 << 20)), ("mixed", mixed)];
    for (name, text) in inputs {
        let started = std::time::Instant::now();
        let response = count_request(&gw, &text).send().await.unwrap();
        assert_eq!(response.status(), 200, "{name}");
        let tokens = response.json::<Value>().await.unwrap()["input_tokens"].as_u64().unwrap();
        eprintln!("{name}: {} bytes, {tokens} tokens, counted in {:?}", text.len(), started.elapsed());
        assert!(tokens >= (text.len() / 4096) as u64, "{name}: {tokens}");
    }
    assert_eq!(gw.job_count().await, 0);
}

/// Counts run in a bounded number of slots; with every slot held, a count
/// is answered `503 tokenizer-busy` at once (not queued), and counted
/// again once a slot is free.
async fn a_count_finding_every_slot_taken_is_refused_at_once(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let slots = gw.gateway.engine.token_count_slots();
    let held = slots.semaphore().clone().acquire_many_owned(slots.bound() as u32).await.unwrap();
    let response = count_request(&gw, "Say hello.").send().await.unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "tokenizer-busy", "{body}");
    drop(held);
    let response = count_request(&gw, "Say hello.").send().await.unwrap();
    assert_eq!(response.status(), 200);
}

/// A request whose client hangs up (its future dropped) as soon as the job's
/// creation has begun: the job is committed and driven at once on its first
/// provider — one upstream call — not left `starting` for the sweep (whose
/// interval here is an hour).
async fn a_request_dropped_as_its_job_is_created_still_drives_it(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| set_engine(doc, "sweep_interval", "1h")).await;
    let new =
        NewJob::of_body("alice".into(), IdempotencyKey::parse("hung-up").unwrap(), &chat_body("x")).unwrap();
    let new = std::sync::Arc::new(new);
    let submit = gw.gateway.engine.submit(&new, Duration::from_secs(10));
    // One poll starts the creation; then the request is gone.
    let polled = tokio::time::timeout(Duration::ZERO, submit).await;
    assert!(polled.is_err(), "still creating when dropped");
    let called = tokio::time::timeout(Duration::from_secs(10), gw.sim().wait_for_calls(1)).await;
    assert!(called.is_ok(), "the committed job was never sent: its drive died with the request");
    let job = settled_job(&gw, ALICE, &new.id.to_string()).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["attempts"][0]["provider"], "sim-primary");
    assert_eq!(gw.sim().calls().total, 1);
}

/// An unreadable event in a provider's stream (the crash test's S10), with
/// the provider's `skip_malformed_events`: the event is skipped and
/// counted, the client's stream ends as one that went well, and the stored
/// answer says what was skipped; one upstream call. Without the opt-in the
/// same stream is `bad_output` (`providers/tests/outcomes.rs`).
async fn a_malformed_stream_event_is_skipped_where_the_provider_opts_in(store: TestStore) {
    let gw = TestGateway::start_tweaked(&store, |doc| {
        set_provider(doc, "sim-primary", "model", "sim:malformed-json");
        set_provider(doc, "sim-primary", "skip_malformed_events", true);
    })
    .await;
    let body = json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "hello"}]});
    let response = gw.chat_completion("s10", &body).await;
    assert_eq!(response.status(), 200);
    let job = response.headers()["x-intentgate-job-id"].to_str().unwrap().to_owned();
    let text = response.text().await.unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let view = settled_job(&gw, ALICE, &job).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(view["attempts"][0]["provider"], "sim-primary", "{view}");
    let skipped = &view["result"]["completion"]["skipped_events"];
    assert_eq!(skipped["count"], 1, "{view}");
    assert!(skipped["first"].as_str().unwrap().contains("not a chunk"), "{skipped}");
    assert_eq!(gw.sim().calls().total, 1, "one upstream call");
    let metrics = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("intentgate_stream_events_skipped_total{provider=\"sim-primary\"}"),
        "{metrics}"
    );
}
