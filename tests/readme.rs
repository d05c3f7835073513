//! The README's console sessions, run as written against a gateway on the
//! shipped config and the simulator: each `$ curl …` command is sent (its
//! addresses moved to this test's ports) and what it prints must be what
//! the README prints, where `…` stands for what the README leaves out and
//! ids and times may be any. So the README cannot drift from the gateway.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestGateway, TestStore, set_route};

store_matrix!(the_curl_session_prints_what_the_readme_says, the_hedging_demo_prints_what_the_readme_says);

/// One `$ …` command of a console block and the lines the README shows it print.
#[derive(Debug, Clone)]
struct Step {
    command: String,
    printed: Vec<String>,
}

/// Every ```` ```console ```` block of the README, in order, as its steps;
/// a block without a command is one step with an empty command.
fn console_blocks() -> Vec<Vec<Step>> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if line != "```console" {
            continue;
        }
        let mut steps: Vec<Step> = Vec::new();
        let mut continued = false;
        for line in lines.by_ref().take_while(|line| *line != "```") {
            match (line.strip_prefix("$ "), steps.last_mut()) {
                (Some(command), _) => steps.push(Step { command: command.to_owned(), printed: Vec::new() }),
                (None, Some(step)) if continued => step.command.push_str(line),
                (None, Some(step)) => step.printed.push(line.to_owned()),
                (None, None) => steps.push(Step { command: String::new(), printed: vec![line.to_owned()] }),
            }
            continued = line.ends_with('\\');
            if let Some(step) = steps.last_mut().filter(|_| continued) {
                step.command.pop();
            }
        }
        blocks.push(steps);
    }
    blocks
}

/// Runs `command` with the README's addresses moved to `gw`'s and its simulator's.
async fn run(gw: &TestGateway, command: &str) -> String {
    let command = command
        .replace("localhost:8080", gw.gateway.url().trim_start_matches("http://"))
        .replace("localhost:9101", &gw.sim().addr().to_string());
    let out = tokio::process::Command::new("bash").args(["-c", &command]).output().await.unwrap();
    assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().replace('\r', "")
}

/// `text` with every UUID as `<id>` and every RFC 3339 time as `<time>`.
fn normalised(text: &str) -> String {
    let bytes = text.as_bytes();
    let (mut out, mut at) = (String::new(), 0);
    while at < bytes.len() {
        let rest = &text[at..];
        if is_uuid(rest.as_bytes()) {
            out.push_str("<id>");
            at += 36;
        } else if let Some(len) = time_len(rest.as_bytes()) {
            out.push_str("<time>");
            at += len;
        } else {
            let ch = rest.chars().next().unwrap();
            out.push(ch);
            at += ch.len_utf8();
        }
    }
    out
}

fn is_uuid(bytes: &[u8]) -> bool {
    bytes.len() >= 36
        && bytes[..36]
            .iter()
            .enumerate()
            .all(|(i, b)| if [8, 13, 18, 23].contains(&i) { *b == b'-' } else { b.is_ascii_hexdigit() })
}

/// The length of a time like `2026-11-29T11:46:04.616Z` at the start.
fn time_len(bytes: &[u8]) -> Option<usize> {
    let shape = b"dddd-dd-ddTdd:dd:dd";
    let fits = bytes.len() > shape.len()
        && shape.iter().zip(bytes).all(|(s, b)| if *s == b'd' { b.is_ascii_digit() } else { s == b });
    if !fits {
        return None;
    }
    let tail = bytes[shape.len()..].iter().position(|b| *b == b'Z')?;
    Some(shape.len() + tail + 1)
}

/// Whether `actual` is `pattern`, each `…` in it standing for any text.
fn fits(pattern: &str, actual: &str) -> bool {
    let pieces: Vec<&str> = pattern.split('…').collect();
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if pieces.len() == 1 {
        return actual == pattern;
    }
    if !actual.starts_with(first) || !actual[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// Asserts that `actual` is what `step` shows: for `curl -i`, the status
/// line, each header shown among those sent, and the body.
fn assert_prints(step: &Step, actual: &str) {
    let (printed, actual) = (normalised(&step.printed.join("\n")), normalised(actual.trim_end()));
    let (Some((head, body)), true) = (printed.split_once("\n\n"), printed.starts_with("HTTP/")) else {
        assert!(fits(printed.trim_end(), &actual), "`{}` printed\n{actual}\nnot\n{printed}", step.command);
        return;
    };
    let (actual_head, actual_body) = actual.split_once("\n\n").unwrap_or((&actual, ""));
    let mut shown = head.lines();
    let sent: Vec<String> = actual_head.lines().map(str::to_ascii_lowercase).collect();
    assert_eq!(shown.next(), actual_head.lines().next(), "`{}`: status\n{actual}", step.command);
    for header in shown {
        assert!(
            sent.contains(&header.to_ascii_lowercase()),
            "`{}`: no `{header}` in\n{actual_head}",
            step.command
        );
    }
    assert!(
        fits(body.trim_end(), actual_body.trim_end()),
        "`{}` printed\n{actual_body}\nnot\n{body}",
        step.command
    );
}

/// The curl session: a job created and waited for, its replay, a key
/// reused for another intent, the simulator's count, and the other doors.
async fn the_curl_session_prints_what_the_readme_says(store: TestStore) {
    // As shipped, the contract suites run before the gateway serves.
    let gw = TestGateway::start_tweaked(&store, |doc| {
        doc["contracts"].as_table_mut().unwrap().insert("run_on_start".into(), true.into());
    })
    .await;
    let blocks = console_blocks();
    let session = &blocks[..blocks.len() - 2];
    assert!(session.len() >= 5, "the curl session's blocks: {session:?}");
    for step in session.iter().flatten() {
        if step.printed.is_empty() {
            // A door's answer, not shown: a 2xx.
            let printed = run(&gw, &format!("{} -w '\\n%{{http_code}}'", step.command)).await;
            let status = printed.lines().last().unwrap_or_default();
            assert!(status.starts_with('2'), "`{}`: {printed}", step.command);
        } else {
            assert_prints(step, &run(&gw, &step.command).await);
        }
    }
}

/// The hedging demo: a scripted hang leaves the job `unknown` on the
/// shipped route; with a hedge, the same commands under another key are
/// answered by the fallback beside the silent attempt. The route's
/// timeouts are shortened here; what is printed is the same.
async fn the_hedging_demo_prints_what_the_readme_says(store: TestStore) {
    let blocks = console_blocks();
    let (demo, hedged) = (&blocks[blocks.len() - 2], &blocks[blocks.len() - 1][0]);
    let plain =
        TestGateway::start_tweaked(&store, |doc| set_route(doc, "chat", "attempt_timeout", "300ms")).await;
    for step in demo {
        let printed = run(&plain, &step.command).await;
        assert_prints(step, &printed);
    }
    let hedging = TestGateway::start_tweaked(&store, |doc| {
        let mut hedge = toml::Table::new();
        hedge.insert("after".into(), "200ms".into());
        set_route(doc, "chat", "hedge", hedge);
    })
    .await;
    let mut printed = String::new();
    for step in demo {
        printed = run(&hedging, &step.command.replace("h-1", "h-2")).await;
    }
    let shown = Step { command: "the demo with a hedge".into(), printed: vec![hedged.printed.concat()] };
    assert_prints(&shown, &printed);
}
