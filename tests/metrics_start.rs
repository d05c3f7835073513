//! The metrics recorder is installed when the gateway starts: a job created
//! before the first scrape is counted in it, and the metric families are
//! exposed before any job. Its own binary: the recorder is process-wide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{ALICE, Backend, TestGateway, TestStore, chat_body};

fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| line.split(['{', ' ']).next() == Some(name))
        .filter(|line| labels.iter().all(|(k, v)| line.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .reduce(|a, b| a + b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counted_from_the_start() {
    let mut created = 0.0;
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(store) = TestStore::new(backend).await else { continue };
        let gw = TestGateway::start(&store).await;
        let response = gw.create(ALICE, "before-scrape", &chat_body("hi")).await;
        assert_eq!(response.status(), 201);
        created += 1.0;

        let text = gw.client.get(gw.url("/metrics")).send().await.unwrap().text().await.unwrap();
        assert_eq!(sample(&text, "intentgate_jobs_total", &[("result", "created")]), Some(created), "{text}");
        // Families nothing has touched yet are there, at zero.
        assert_eq!(sample(&text, "intentgate_jobs_total", &[("result", "conflicted")]), Some(0.0), "{text}");
        assert_eq!(sample(&text, "intentgate_cas_races_lost_total", &[]), Some(0.0), "{text}");
        assert!(
            sample(
                &text,
                "intentgate_attempts_total",
                &[("provider", "sim-fallback"), ("outcome", "unknown")]
            )
            .is_some(),
            "{text}"
        );
        assert!(text.contains("# TYPE intentgate_jobs_total counter"), "{text}");
        // HTTP requests by matched route and status: the POST above.
        assert!(
            sample(&text, "intentgate_http_requests_total", &[("path", "/v1/jobs"), ("status", "201")])
                .is_some_and(|n| n >= 1.0),
            "{text}"
        );
    }
}
