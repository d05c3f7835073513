//! An API key given to a provider never shows up in logs (ours or our
//! dependencies', at TRACE), in failures, or in Debug output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use intentgate_providers::{
    Dialect, Provider, ProviderSettings, Publisher, Secret, VertexAddress, VertexCredentials,
};

const KEY: &str = "sk-SECRET-do-not-leak-7f3a";

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_key_never_leaks() {
    let logs = Buffer::default();
    let writer = logs.clone();
    // Global, and bridging the `log` crate, so reqwest/hyper/rustls lines
    // from every thread are captured too.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .init();

    let sim = sim().await;
    let mut seen = Vec::new();
    for dialect in DIALECTS {
        for (model, timeouts) in [
            ("ok", relaxed()),
            ("sim:status=401", relaxed()),
            ("sim:hang", short()),
            ("sim:reset-after-body", relaxed()),
            ("sim:malformed-json", relaxed()),
            ("sim:stream-cut", relaxed()),
        ] {
            let mut config = config(&sim, dialect, model);
            config.api_key = Some(Secret::new(KEY));
            config.timeouts = timeouts;
            seen.push(format!("{config:?}"));
            let provider = Provider::new(config).unwrap();
            seen.push(format!("{provider:?}"));
            let outcome = provider.chat(&hello(), &ctx()).await;
            seen.push(format!("{outcome:?}"));
            if let Err(failure) = outcome {
                seen.push(failure.to_string());
            }
            match drain(&provider, &hello(), &ctx()).await {
                Ok((chunks, failure)) => seen.push(format!("{chunks:?} {failure:?}")),
                Err(failure) => seen.push(format!("{failure} {failure:?}")),
            }
        }
    }
    // Bedrock: the secret signs (it is never sent), the session token is sent.
    for model in ["ok", "sim:stream-cut"] {
        let mut config = config(&sim, Dialect::Bedrock, model);
        config.bedrock = Some(bedrock_address(KEY, Some(KEY)));
        seen.push(format!("{config:?}"));
        let provider = Provider::new(config).unwrap();
        seen.push(format!("{provider:?} {:?}", provider.chat(&hello(), &ctx()).await));
        match drain(&provider, &hello(), &ctx()).await {
            Ok((chunks, failure)) => seen.push(format!("{chunks:?} {failure:?}")),
            Err(failure) => seen.push(format!("{failure} {failure:?}")),
        }
    }
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let mut config = ProviderSettings::new("gone", Dialect::OpenAi, &format!("http://{refused}"), "m");
    config.api_key = Some(Secret::new(KEY));
    let failure = Provider::new(config).unwrap().chat(&hello(), &ctx()).await.unwrap_err();
    seen.push(format!("{failure} {failure:?}"));

    // A Vertex provider's private key, and the access token it is granted.
    let (vertex_secrets, vertex_seen) = vertex_call(&sim).await;
    seen.extend(vertex_seen);

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    for secret in &vertex_secrets {
        assert!(!logs.contains(secret.as_str()), "a Vertex secret leaked into the logs");
        assert!(seen.iter().all(|text| !text.contains(secret.as_str())), "a Vertex secret leaked");
    }
    assert!(logs.contains("provider call failed"), "our own events are captured");
    assert!(logs.contains("starting new connection"), "reqwest's `log` lines are captured");
    assert!(!logs.contains(KEY), "the key leaked into the logs");
    for text in &seen {
        assert!(!text.contains(KEY), "the key leaked: {text}");
    }
    // The key did reach the provider, so the test is not vacuous.
    let sent = sim.calls().by_key.keys().filter_map(|key| sim.last_request(key)).collect::<Vec<_>>();
    assert!(sent.iter().any(|r| r.headers.get("x-api-key").map(String::as_str) == Some(KEY)));
    assert!(sent.iter().any(|r| r.headers.get("authorization") == Some(&format!("Bearer {KEY}"))));
    assert!(sent.iter().any(|r| r.headers.get("x-amz-security-token").map(String::as_str) == Some(KEY)));
}

/// One call by a Vertex provider minting its token from the simulator's
/// test key: a line of the private key and the granted token (which must
/// never be logged), and what the call's Debug and failure show.
async fn vertex_call(sim: &intentgate_providers::sim::SimHandle) -> (Vec<String>, Vec<String>) {
    let path = std::env::temp_dir().join(format!("intentgate-secrets-{}.json", uuid::Uuid::now_v7()));
    std::fs::write(&path, sim.service_account_file(true)).unwrap();
    let mut config = ProviderSettings::new("vertex", Dialect::Anthropic, &sim.base_url_vertex(), "claude-x");
    config.vertex = Some(VertexAddress {
        project: "p".into(),
        location: "l".into(),
        publisher: Publisher::Anthropic,
        credentials: VertexCredentials::KeyFile(path),
        token_uri: None,
    });
    let vertex = Provider::new(config).unwrap();
    let ctx = ctx();
    let outcome = vertex.chat(&hello(), &ctx).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let token = sim.last_request(&ctx.job_id.to_string()).unwrap().headers["authorization"].clone();
    let file: serde_json::Value =
        serde_json::from_str(intentgate_providers::sim::TEST_SERVICE_ACCOUNT).unwrap();
    let key_line = file["private_key"].as_str().unwrap().lines().nth(1).unwrap().to_owned();
    let token = token.strip_prefix("Bearer ").unwrap().to_owned();
    (vec![key_line, token], vec![format!("{vertex:?}"), format!("{outcome:?}")])
}

/// A provider that echoes its key in a 2xx answer (`echo-auth`): the key is
/// scrubbed from the completion, the text and the raw bytes, plain and
/// streamed, in both dialects.
#[tokio::test]
async fn a_key_echoed_in_an_answer_is_redacted() {
    let sim = sim().await;
    for dialect in DIALECTS {
        let mut config = config(&sim, dialect, "sim:echo-auth");
        config.api_key = Some(Secret::new(KEY));
        let provider = Provider::new(config).unwrap();

        let response = provider.chat(&hello(), &ctx()).await.unwrap();
        assert!(response.text.contains("[redacted]"), "{dialect}: the key was echoed: {}", response.text);
        let seen = format!("{} {} {:?}", response.completion, response.text, response.raw);
        assert!(!seen.contains(KEY), "{dialect}: {seen}");
        assert!(!String::from_utf8_lossy(&response.raw).contains(KEY), "{dialect}: raw");

        // Streamed, each event is scrubbed on its own: the key whole in an
        // event (here its `model`) is redacted. (A key split across two
        // events' deltas is not: see `crate::redact` in the providers crate.)
        let (chunks, failure) = drain(&provider, &hello(), &ctx()).await.unwrap();
        assert!(failure.is_none(), "{failure:?}");
        assert!(
            chunks.iter().any(|c| String::from_utf8_lossy(&c.raw).contains("[redacted]")),
            "{dialect}: the key was echoed in the stream"
        );
        for chunk in &chunks {
            let seen = format!("{} {} {}", chunk.chunk, chunk.delta, String::from_utf8_lossy(&chunk.raw));
            assert!(!seen.contains(KEY), "{dialect}: {seen}");
        }
    }
}
