//! Traces over OTLP/HTTP: the real binary, pointed by
//! `OTEL_EXPORTER_OTLP_ENDPOINT` at a receiver in this test that decodes
//! what it is sent as OTLP protobuf. A job whose primary fails over is one
//! trace, the client's: its request span continues the client's
//! `traceparent`, its two attempt spans carry the GenAI attributes, and
//! each provider request names its attempt's span in a `traceparent`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::Value;

use common::{Backend, TestStore, set_provider};
use intentgate_providers::sim::Simulator;

type Received = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;

/// An OTLP/HTTP receiver on loopback: `POST /v1/traces`, protobuf.
async fn receiver() -> (String, Received) {
    async fn accept(State(received): State<Received>, body: axum::body::Bytes) -> axum::http::StatusCode {
        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
        received.lock().unwrap().push(request);
        axum::http::StatusCode::OK
    }
    let received = Received::default();
    let app =
        axum::Router::new().route("/v1/traces", axum::routing::post(accept)).with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

/// Every span received so far, with its resource's `service.name`.
fn spans(received: &Received) -> Vec<(String, Span)> {
    let received = received.lock().unwrap();
    let mut out = Vec::new();
    for request in received.iter() {
        for resource in &request.resource_spans {
            let service = resource
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map_or_else(String::new, |v| match v {
                    Any::StringValue(s) => s.clone(),
                    other => format!("{other:?}"),
                });
            for scope in &resource.scope_spans {
                out.extend(scope.spans.iter().map(|span| (service.clone(), span.clone())));
            }
        }
    }
    out
}

fn attr(span: &Span, key: &str) -> Option<Any> {
    span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()?.value.clone())
}

fn text(span: &Span, key: &str) -> String {
    match attr(span, key) {
        Some(Any::StringValue(s)) => s,
        other => panic!("`{key}` is not a string on span {}: {other:?}", span.name),
    }
}

fn int(span: &Span, key: &str) -> i64 {
    match attr(span, key) {
        Some(Any::IntValue(i)) => i,
        other => panic!("`{key}` is not an integer on span {}: {other:?}", span.name),
    }
}

/// The binary, on a config `tweak` changes, exporting to a receiver here;
/// its providers on a simulator here.
struct Traced {
    gateway: common::Spawned,
    sim: intentgate_providers::sim::SimHandle,
    received: Received,
    config: std::path::PathBuf,
    _store: TestStore,
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

impl Traced {
    async fn start(tweak: impl FnOnce(&mut toml::Table)) -> Traced {
        let (otlp, received) = receiver().await;
        let sim = Simulator::new(7).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let store = TestStore::new(Backend::Sqlite).await.unwrap();
        let mut doc = common::test_config_doc(&store.url, Some(sim.addr()));
        tweak(&mut doc);
        let config = std::env::temp_dir().join(format!("intentgate-traces-{}.toml", uuid::Uuid::now_v7()));
        std::fs::write(&config, toml::to_string(&doc).unwrap()).unwrap();
        let gateway = common::spawn_binary(
            &["serve", "--config", config.to_str().unwrap()],
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp), ("OTEL_SERVICE_NAME", "intentgate-traces-test")],
        )
        .await;
        Traced { gateway, sim, received, config, _store: store }
    }

    /// A job on route `chat`, waited for, sent with the client's traceparent.
    async fn job(&self, key: &str) -> Value {
        let traceparent = ("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"));
        common::create_settled(&self.gateway.url, key, &common::chat_body("hello"), &[traceparent]).await
    }

    /// The `traceparent` of the last provider request of job `job_id`.
    fn traceparent(&self, job_id: &str) -> String {
        let sent = self.sim.last_request(job_id).expect("the simulator saw the job");
        sent.headers.get("traceparent").cloned().unwrap_or_else(|| panic!("no traceparent: {sent:?}"))
    }

    /// Stops the gateway (SIGTERM: it flushes what its batch still holds)
    /// and returns the client trace's request span (with its service name)
    /// and its `attempts` attempt spans, in attempt order.
    async fn stop(mut self, attempts: usize) -> ((String, Span), Vec<Span>) {
        let pid = self.gateway.child.id().unwrap().to_string();
        assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let exited = tokio::time::timeout(Duration::from_secs(20), self.gateway.child.wait()).await;
        assert!(exited.expect("the gateway exits on SIGTERM").unwrap().success());
        let _ = std::fs::remove_file(&self.config);
        let trace = hex(TRACE_ID);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let spans: Vec<_> =
                spans(&self.received).into_iter().filter(|(_, span)| span.trace_id == trace).collect();
            let request = spans.iter().find(|(_, span)| span.name == "request").cloned();
            let mut found: Vec<_> = spans
                .iter()
                .filter(|(_, span)| span.name == "attempt")
                .map(|(_, span)| span.clone())
                .collect();
            if let Some(request) = request.filter(|_| found.len() >= attempts) {
                assert_eq!(found.len(), attempts, "{found:#?}");
                found.sort_by_key(|span| int(span, "intentgate.attempt"));
                return (request, found);
            }
            assert!(Instant::now() < deadline, "no complete trace received: {spans:#?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn id_of(span: &Span) -> String {
    span.span_id.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_over_job_is_one_trace_continuing_the_clients() {
    let traced = Traced::start(|doc| set_provider(doc, "sim-primary", "model", "sim:status=503")).await;
    let job = traced.job("traced").await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback", "{job}");
    let job_id = job["id"].as_str().unwrap().to_owned();
    let traceparent = traced.traceparent(&job_id);

    let ((service, request), attempts) = traced.stop(2).await;
    assert_eq!(service, "intentgate-traces-test");
    assert_eq!(request.parent_span_id, hex(CLIENT_SPAN), "the request span continues the client's");
    assert_eq!(text(&request, "http.request.method"), "POST");
    assert_eq!(text(&request, "http.route"), "/v1/jobs");
    assert_eq!(int(&request, "http.response.status_code"), 201);
    let (primary, fallback) = (&attempts[0], &attempts[1]);
    for span in [primary, fallback] {
        assert_eq!(span.parent_span_id, request.span_id, "an attempt is a child of the request");
        assert_eq!(text(span, "gen_ai.operation.name"), "chat");
        assert_eq!(text(span, "intentgate.job_id"), job_id);
    }
    assert_eq!(int(primary, "intentgate.attempt"), 1);
    assert_eq!(text(primary, "gen_ai.provider.name"), "openai");
    assert_eq!(text(primary, "gen_ai.request.model"), "sim:status=503");
    assert_eq!(text(primary, "intentgate.outcome"), "rejected");
    assert!(attr(primary, "intentgate.cas").is_none(), "a rejection offers nothing to the job");

    assert_eq!(int(fallback, "intentgate.attempt"), 2);
    assert_eq!(text(fallback, "gen_ai.provider.name"), "anthropic");
    assert_eq!(text(fallback, "gen_ai.request.model"), "sim:ok");
    assert_eq!(text(fallback, "intentgate.outcome"), "ok");
    assert_eq!(text(fallback, "intentgate.cas"), "won");
    assert!(!text(fallback, "gen_ai.response.model").is_empty());
    assert!(int(fallback, "gen_ai.usage.input_tokens") > 0);
    assert!(int(fallback, "gen_ai.usage.output_tokens") > 0);
    assert_eq!(traceparent, format!("00-{TRACE_ID}-{}-01", id_of(fallback)), "names the attempt's span");
}

/// A hedge has a span of its own, a child of the attempt it was started
/// beside; its provider request names it; the loser's answer, recorded
/// after the job completed, is `superseded` on the first span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedge_is_a_span_of_its_own_in_the_jobs_trace() {
    let traced = Traced::start(|doc| {
        let mut hedge = toml::Table::new();
        hedge.insert("after".into(), "200ms".into());
        hedge.insert("open_attempts".into(), 2.into());
        common::set_route(doc, "chat", "hedge", hedge);
        common::set_route(doc, "chat", "attempt_timeout", "10s");
    })
    .await;
    // The primary answers, but only after the hedge has answered.
    traced.sim.queue(Some("sim:ok"), "delay=1500ms", 1).unwrap();
    let job = traced.job("hedged").await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback", "{job}");
    let job_id = job["id"].as_str().unwrap().to_owned();
    let traceparent = traced.traceparent(&job_id);

    let ((_, request), attempts) = traced.stop(2).await;
    let (first, hedge) = (&attempts[0], &attempts[1]);
    assert_eq!(first.parent_span_id, request.span_id);
    assert_eq!(hedge.parent_span_id, first.span_id, "the hedge is started beside the first");
    assert_eq!(text(hedge, "gen_ai.provider.name"), "anthropic");
    assert_eq!(
        (text(hedge, "intentgate.outcome"), text(hedge, "intentgate.cas")),
        ("ok".into(), "won".into())
    );
    assert_eq!(
        (text(first, "intentgate.outcome"), text(first, "intentgate.cas")),
        ("ok".into(), "superseded".into())
    );
    assert_eq!(traceparent, format!("00-{TRACE_ID}-{}-01", id_of(hedge)), "names the hedge's span");
}

/// Without the OTLP variables (this process installs no exporter), a
/// provider request carries no `traceparent`, a client's notwithstanding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_exporter_no_traceparent_is_sent() {
    let store = TestStore::new(Backend::Sqlite).await.unwrap();
    let gw = common::TestGateway::start(&store).await;
    let traceparent = ("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"));
    let job =
        common::create_settled(&gw.url(""), "untraced", &common::chat_body("hello"), &[traceparent]).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    let sent = gw.sim().last_request(job["id"].as_str().unwrap()).expect("the simulator saw the job");
    assert!(!sent.headers.contains_key("traceparent"), "{sent:?}");
    assert!(sent.headers.contains_key("idempotency-key"), "{sent:?}");
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}
