//! Every scripted behaviour lands in the right outcome class (R5 in
//! `docs/design.md`), in both dialects, over real loopback sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use intentgate_providers::sim::{SCRIPT_HEADER, SimHandle};
use intentgate_providers::{
    CallContext, Dialect, Failure, Outcome, OutcomeClass, Provider, ProviderSettings, Timeouts, class_of,
};

async fn call(
    sim: &SimHandle,
    dialect: Dialect,
    model: &str,
    timeouts: Timeouts,
    ctx: &CallContext,
) -> Outcome {
    let mut config = config(sim, dialect, model);
    config.timeouts = timeouts;
    Provider::new(config).unwrap().chat(&hello(), ctx).await
}

fn unknown_reason(outcome: &Outcome) -> &str {
    match outcome {
        Err(Failure::Unknown { reason }) => reason,
        other => panic!("expected unknown, got {other:?}"),
    }
}

#[tokio::test]
async fn hang_after_the_request_was_sent_is_unknown() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let outcome = call(&sim, dialect, "sim:hang", short(), &ctx()).await;
        assert!(unknown_reason(&outcome).contains("first_byte"), "{outcome:?}");
        assert!(!outcome.unwrap_err().may_fail_over(), "unknown must block failover");
    }
    assert_eq!(sim.calls().total, DIALECTS.len() as u64, "every request reached the provider");
}

#[tokio::test]
async fn delay_within_the_limits_is_ok_beyond_them_unknown() {
    let sim = sim().await;
    for dialect in DIALECTS {
        assert_eq!(
            class_of(&call(&sim, dialect, "sim:delay=20ms", relaxed(), &ctx()).await),
            OutcomeClass::Ok
        );
        let outcome = call(&sim, dialect, "sim:delay=2s", short(), &ctx()).await;
        assert_eq!(class_of(&outcome), OutcomeClass::Unknown, "{outcome:?}");
    }
}

#[tokio::test]
async fn refused_connection_is_not_sent() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    for dialect in DIALECTS {
        let mut config = ProviderSettings::new("gone", dialect, &format!("http://{addr}"), "m");
        config.timeouts = short();
        let outcome = Provider::new(config).unwrap().chat(&hello(), &ctx()).await;
        assert!(matches!(&outcome, Err(Failure::NotSent { .. })), "{outcome:?}");
        assert!(outcome.unwrap_err().may_fail_over());
    }
}

#[tokio::test]
async fn unresolvable_host_is_not_sent() {
    let mut config = ProviderSettings::new("nowhere", Dialect::OpenAi, "http://intentgate-sim.invalid", "m");
    config.timeouts = Timeouts { connect: Duration::from_millis(200), ..relaxed() };
    let outcome = Provider::new(config).unwrap().chat(&hello(), &ctx()).await;
    assert_eq!(class_of(&outcome), OutcomeClass::NotSent, "{outcome:?}");
}

#[tokio::test]
async fn connect_timeout_is_not_sent() {
    // A listener that never accepts, with its accept queue filled: the
    // kernel drops further SYNs, so connecting hangs until our timeout.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    while let Ok(stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
        fillers.push(stream);
        assert!(fillers.len() < 64, "the accept queue never filled up");
    }
    let mut config = ProviderSettings::new("blackhole", Dialect::OpenAi, &format!("http://{addr}"), "m");
    config.timeouts = Timeouts { connect: Duration::from_millis(50), ..relaxed() };
    let outcome = Provider::new(config).unwrap().chat(&hello(), &ctx()).await;
    assert!(
        matches!(&outcome, Err(Failure::NotSent { reason, .. }) if reason.to_lowercase().contains("connect")),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn error_statuses_are_rejected_with_their_body() {
    let sim = sim().await;
    for dialect in DIALECTS {
        for status in [500u16, 503, 400] {
            let outcome = call(&sim, dialect, &format!("sim:status={status}"), relaxed(), &ctx()).await;
            match outcome {
                Err(Failure::Rejected { status: got, retry_after: None, body }) => {
                    assert_eq!(got, status);
                    assert!(body.contains("scripted failure"), "{body}");
                }
                other => panic!("{dialect} {status}: {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn rate_limit_carries_retry_after_seconds_or_date() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let outcome = call(&sim, dialect, "sim:status=429;retry_after=1", relaxed(), &ctx()).await;
        assert!(
            matches!(outcome, Err(Failure::Rejected { status: 429, retry_after: Some(d), .. }) if d == Duration::from_secs(1))
        );
        let past = "sim:status=429;retry_after=Wed, 21 Oct 2015 07:28:00 GMT";
        let outcome = call(&sim, dialect, past, relaxed(), &ctx()).await;
        assert!(
            matches!(outcome, Err(Failure::Rejected { retry_after: Some(Duration::ZERO), .. })),
            "{outcome:?}"
        );
    }
}

#[tokio::test]
async fn resets_before_or_after_the_body_are_unknown() {
    let sim = sim().await;
    for dialect in DIALECTS {
        // Before the body: scripted by header, so the simulator really never reads it.
        let mut config = config(&sim, dialect, "plain-model");
        config.extra_headers.push((SCRIPT_HEADER.into(), "reset-before-body".into()));
        let ctx = ctx();
        let outcome = Provider::new(config).unwrap().chat(&hello(), &ctx).await;
        assert_eq!(class_of(&outcome), OutcomeClass::Unknown, "{outcome:?}");
        let recorded = sim.last_request(&ctx.job_id.to_string()).unwrap();
        assert_eq!(recorded.body, None, "the body was never read");

        let ctx = common::ctx();
        let outcome = call(&sim, dialect, "sim:reset-after-body", relaxed(), &ctx).await;
        assert_eq!(class_of(&outcome), OutcomeClass::Unknown, "{outcome:?}");
        assert!(sim.last_request(&ctx.job_id.to_string()).unwrap().body.is_some());
    }
}

#[tokio::test]
async fn malformed_json_is_bad_output_with_the_raw_body() {
    let sim = sim().await;
    for dialect in DIALECTS {
        match call(&sim, dialect, "sim:malformed-json", relaxed(), &ctx()).await {
            Err(Failure::BadOutput { raw, .. }) => {
                assert!(!raw.is_empty());
                assert!(serde_json::from_slice::<serde_json::Value>(&raw).is_err());
            }
            other => panic!("{dialect}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn ignored_format_is_bad_output_only_when_json_was_expected() {
    let sim = sim().await;
    let json = CallContext { expect_json: true, ..ctx() };
    for dialect in DIALECTS {
        let outcome = call(&sim, dialect, "sim:ignore-format", relaxed(), &json).await;
        assert!(
            matches!(&outcome, Err(Failure::BadOutput { reason, .. }) if reason.contains("JSON")),
            "{outcome:?}"
        );
        let prose = call(&sim, dialect, "sim:ignore-format", relaxed(), &ctx()).await.unwrap();
        assert!(prose.text.starts_with("Sure!"));
        assert_eq!(prose.json, None);
    }
}

#[tokio::test]
async fn invented_key_is_valid_json_and_left_to_the_contract_suite() {
    // Syntax is fine, so the adapter says ok; catching the extra key is the
    // contract suite's job (R9).
    let sim = sim().await;
    let json = CallContext { expect_json: true, ..ctx() };
    for dialect in DIALECTS {
        let response = call(&sim, dialect, "sim:invent-key", relaxed(), &json).await.unwrap();
        let object = response.json.unwrap();
        assert!(object.as_object().unwrap().keys().any(|k| k.starts_with("invented_")), "{object}");
    }
}

#[tokio::test]
async fn a_body_that_stalls_or_breaks_off_is_unknown() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let stalled = call(&sim, dialect, "sim:stream-stall", short(), &ctx()).await;
        assert!(unknown_reason(&stalled).contains("total"), "{stalled:?}");
        let cut = call(&sim, dialect, "sim:stream-cut", relaxed(), &ctx()).await;
        assert!(unknown_reason(&cut).contains("broke off"), "{cut:?}");
    }
}

#[tokio::test]
async fn stream_faults_after_the_headers_are_unknown() {
    let sim = sim().await;
    for dialect in DIALECTS {
        for (script, timeouts, reason) in [
            ("sim:stream-stall", short(), "stream_idle"),
            ("sim:stream-stall", Timeouts { stream_idle: Duration::from_secs(10), ..short() }, "total"),
            ("sim:stream-cut", relaxed(), "broke off"),
        ] {
            let mut config = config(&sim, dialect, script);
            config.timeouts = timeouts;
            let provider = Provider::new(config).unwrap();
            let (chunks, failure) = drain(&provider, &hello(), &ctx()).await.unwrap();
            assert!(!chunks.is_empty(), "{dialect} {script}: some chunks arrived first");
            match failure {
                Some(Failure::Unknown { reason: got }) => {
                    assert!(got.contains(reason), "{dialect} {script}: {got}")
                }
                other => panic!("{dialect} {script}: {other:?}"),
            }
        }
    }
}

/// A stream that finished (a finish reason) and reported its usage, and
/// then closed without `[DONE]` (or `message_stop`), is a complete answer;
/// one that never reported usage might have been cut between chunks, and
/// stays unknown. A Responses stream says how it finished and its usage
/// only in its last event (`response.completed`): without it, it is unknown.
#[tokio::test]
async fn a_stream_missing_only_its_terminator_is_complete() {
    let sim = sim().await;
    for dialect in [Dialect::OpenAi, Dialect::Anthropic] {
        let provider = Provider::new(config(&sim, dialect, "sim:stream-no-done")).unwrap();
        let mut with_usage = hello();
        with_usage.extra.insert("stream_options".into(), serde_json::json!({"include_usage": true}));
        let (chunks, failure) = drain(&provider, &with_usage, &ctx()).await.unwrap();
        assert!(failure.is_none(), "{dialect}: {failure:?}");
        assert!(chunks.iter().any(|c| c.finish_reason.is_some()), "{dialect}");
        assert!(chunks.iter().any(|c| c.usage.is_some()), "{dialect}");
    }
    for dialect in [Dialect::OpenAi, Dialect::OpenAiResponses] {
        let provider = Provider::new(config(&sim, dialect, "sim:stream-no-done")).unwrap();
        let (_, failure) = drain(&provider, &hello(), &ctx()).await.unwrap();
        match failure {
            Some(Failure::Unknown { reason }) => assert!(reason.contains("terminator"), "{reason}"),
            other => panic!("{dialect}: without usage it may have been cut: {other:?}"),
        }
    }
}

#[tokio::test]
async fn stream_failures_before_the_first_chunk_keep_their_class() {
    let sim = sim().await;
    for dialect in DIALECTS {
        for (script, class) in [
            ("sim:hang", OutcomeClass::Unknown),
            ("sim:status=503", OutcomeClass::Rejected),
            ("sim:reset-after-body", OutcomeClass::Unknown),
        ] {
            let mut config = config(&sim, dialect, script);
            config.timeouts = short();
            let result = Provider::new(config).unwrap().chat_stream(&hello(), &ctx()).await;
            assert_eq!(result.err().map(|f| f.class()), Some(class), "{dialect} {script}");
        }
        // An undecodable event is proof of bad output, wherever it comes.
        let provider = provider(&sim, dialect, "sim:malformed-json");
        let (_, failure) = drain(&provider, &hello(), &ctx()).await.unwrap();
        assert_eq!(failure.map(|f| f.class()), Some(OutcomeClass::BadOutput), "{dialect}");
    }
}

/// `skip_malformed_events`: the undecodable event is skipped — a chunk that
/// says why and carries nothing — and the stream goes on to its end, in
/// every dialect; the answer lacks only what that event said.
#[tokio::test]
async fn a_malformed_event_is_skipped_when_the_provider_says_so() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let mut config = config(&sim, dialect, "sim:malformed-json");
        config.skip_malformed_events = true;
        let (chunks, failure) = drain(&Provider::new(config).unwrap(), &hello(), &ctx()).await.unwrap();
        assert_eq!(failure, None, "{dialect}: the stream went on to its end");
        let skipped: Vec<_> = chunks.iter().filter_map(|chunk| chunk.skipped.as_deref()).collect();
        assert_eq!(skipped.len(), 1, "{dialect}: {skipped:?}");
        assert!(chunks.iter().any(|chunk| chunk.finish_reason.is_some()), "{dialect}: finished");
    }
}
