//! `--signing`: the cost of signing one Bedrock request with SigV4 (the
//! canonical request, its SHA-256s and the four HMACs of the key
//! derivation), measured in this process: no gateway, no network.

use std::time::Instant;

use intentgate_providers::Secret;
use intentgate_providers::bedrock::sigv4::{Credentials, Request, Scope, sign};

/// Signs a typical chat request (a 2 KiB body) `rounds` times and prints
/// the median of five runs, in µs per signature.
pub fn run(rounds: u32) {
    let credentials = Credentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
        session_token: Some(Secret::new("session-token-of-a-typical-length-".repeat(10))),
    };
    let body = format!(
        r#"{{"anthropic_version":"bedrock-2023-05-31","max_tokens":1024,"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(2048)
    );
    let scope = Scope { date_time: "20250101T000000Z", region: "us-east-1", service: "bedrock" };
    let token = credentials.session_token.as_ref().map(Secret::expose).unwrap_or_default();
    let headers = [
        ("content-type", "application/json"),
        ("host", "bedrock-runtime.us-east-1.amazonaws.com"),
        ("x-amz-date", "20250101T000000Z"),
        ("x-amz-security-token", token),
    ];
    let request = Request {
        method: "POST",
        path: "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke",
        query: None,
        headers: &headers,
        body: body.as_bytes(),
    };
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..rounds {
                std::hint::black_box(sign(&credentials, &scope, std::hint::black_box(&request)));
            }
            start.elapsed().as_secs_f64() * 1e6 / f64::from(rounds)
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    println!(
        "SigV4 signing of one Bedrock request ({} B body): {:.2} µs (median of 5 × {rounds})",
        body.len(),
        runs[2]
    );
}
