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

use common::{ALICE, Backend, TestStore, set_provider};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_over_job_is_one_trace_continuing_the_clients() {
    let (otlp, received) = receiver().await;
    let sim = Simulator::new(7).spawn("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let store = TestStore::new(Backend::Sqlite).await.unwrap();
    let mut doc = common::test_config_doc(&store.url, Some(sim.addr()));
    set_provider(&mut doc, "sim-primary", "model", "sim:status=503");
    let path = std::env::temp_dir().join(format!("intentgate-traces-{}.toml", uuid::Uuid::now_v7()));
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    let mut gateway = common::spawn_binary(
        &["serve", "--config", path.to_str().unwrap()],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp), ("OTEL_SERVICE_NAME", "intentgate-traces-test")],
    )
    .await;

    let (trace_id, client_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let job: Value = common::client()
        .post(format!("{}/v1/jobs", gateway.url))
        .bearer_auth(ALICE)
        .header("idempotency-key", "traced")
        .header("prefer", "wait=10")
        .header("traceparent", format!("00-{trace_id}-{client_span}-01"))
        .json(&common::chat_body("hello"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["provider"], "sim-fallback", "{job}");
    let job_id = job["id"].as_str().unwrap().to_owned();
    let sent = sim.last_request(&job_id).expect("the simulator saw the job");
    let traceparent = sent.headers.get("traceparent").cloned().unwrap_or_default();
    assert!(
        traceparent.starts_with(&format!("00-{trace_id}-")),
        "the provider request is in the trace: {sent:?}"
    );

    // Stopped, the gateway flushes what its batch still holds.
    let pid = gateway.child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let exited = tokio::time::timeout(Duration::from_secs(20), gateway.child.wait()).await;
    assert!(exited.expect("the gateway exits on SIGTERM").unwrap().success());
    let _ = std::fs::remove_file(&path);

    let trace = hex(trace_id);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (request, mut attempts) = loop {
        let spans: Vec<_> = spans(&received).into_iter().filter(|(_, span)| span.trace_id == trace).collect();
        let request = spans.iter().find(|(_, span)| span.name == "request").cloned();
        let attempts: Vec<_> = spans.iter().filter(|(_, span)| span.name == "attempt").cloned().collect();
        if let Some(request) = request.filter(|_| attempts.len() >= 2) {
            break (request, attempts);
        }
        assert!(Instant::now() < deadline, "no complete trace received: {:#?}", spans);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (service, request) = request;
    assert_eq!(service, "intentgate-traces-test");
    assert_eq!(request.parent_span_id, hex(client_span), "the request span continues the client's");
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    attempts.sort_by_key(|(_, span)| int(span, "intentgate.attempt"));
    let (primary, fallback) = (&attempts[0].1, &attempts[1].1);
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
    let span_id: String = fallback.span_id.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(traceparent, format!("00-{trace_id}-{span_id}-01"), "names the attempt's span");
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}
