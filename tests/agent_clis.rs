//! The agents people run, from npm, pointed at the shipped config by base
//! URL alone: Codex CLI (`codex exec`, a model provider with
//! `wire_api = "responses"`) runs a tool turn through the `codex` route,
//! and Claude Code (`claude -p`, `ANTHROPIC_BASE_URL`) reads a file with
//! its `Read` tool and answers from it through the `claude` route —
//! neither sends an idempotency key, both are refused nothing. Counted at
//! the simulator, on both stores. The packages are installed from the npm
//! registry once per target directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{ALICE, TestGateway, TestStore};

store_matrix!(
    codex_cli_runs_a_tool_turn_through_the_codex_route,
    claude_code_reads_a_file_through_the_claude_route
);

/// The agents, pinned: a new release is a deliberate change here.
const AGENTS: [&str; 2] = ["@openai/codex@0.171.0", "@anthropic-ai/claude-code@2.1.332"];

async fn codex_cli_runs_a_tool_turn_through_the_codex_route(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let home = scratch("codex");
    std::fs::create_dir_all(home.join(".codex")).unwrap();
    let provider = format!(
        "model_providers.intentgate={{name=\"intentgate\",base_url=\"{}\",env_key=\"INTENTGATE_KEY\",wire_api=\"responses\"}}",
        gw.url("/v1")
    );
    let output = agent(&home, "codex")
        .args(["exec", "--skip-git-repo-check", "-c", &provider, "-c", "model_provider=intentgate"])
        .args(["-m", "gpt-5.1-codex", "echo intentgate-codex"])
        .env("CODEX_HOME", home.join(".codex"))
        .env("INTENTGATE_KEY", ALICE)
        .output()
        .unwrap();
    let said = transcript(&output);
    assert!(output.status.success(), "{said}");
    // The simulator calls Codex's first tool (its shell) with the prompt as
    // the command; Codex runs it and sends the output back; then words.
    assert!(said.contains("intentgate-codex"), "the tool ran: {said}");
    let calls = gw.sim().calls();
    assert_eq!(
        calls.by_path.get("/v1/responses"),
        Some(&2),
        "two model calls, both passed through: {calls:?}"
    );
    assert_eq!(calls.total, 2, "and nothing else upstream");
    assert_eq!(gw.job_count().await, 2, "one job per step of the loop");
}

async fn claude_code_reads_a_file_through_the_claude_route(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let home = scratch("claude");
    let notes = home.join("work/notes.txt");
    std::fs::create_dir_all(home.join("work")).unwrap();
    std::fs::write(&notes, "The meeting moved to Thursday.\n").unwrap();
    // The simulator calls the tool the prompt names, with the path it
    // spells out (Claude Code's first tool is Agent); Claude Code reads
    // the file and sends its lines back; the answer says what they say.
    let prompt = format!("Use Read with file_path={} and tell me what it says.", notes.display());
    let output = agent(&home, "claude")
        .args(["-p", &prompt, "--max-turns", "3"])
        .env("ANTHROPIC_BASE_URL", gw.url(""))
        .env("ANTHROPIC_API_KEY", ALICE)
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .output()
        .unwrap();
    let said = transcript(&output);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("The meeting moved to Thursday."), "answered from the file it read: {said}");
    let calls = gw.sim().calls();
    assert_eq!(
        calls.by_path.get("/v1/messages"),
        Some(&2),
        "two model calls (the Read, then the answer), both passed through: {calls:?}\n{said}"
    );
    assert_eq!(calls.total, 2, "through the first provider of the chain, nothing else: {calls:?}");
    assert_eq!(gw.job_count().await, 2, "one job per model call");
}

/// An agent's command, in a fresh home and working directory of its own.
fn agent(home: &Path, bin: &str) -> Command {
    let work = home.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut command = Command::new(installed().join("node_modules/.bin").join(bin));
    command.current_dir(work).env("HOME", home).env("NO_COLOR", "1").stdin(std::process::Stdio::null());
    command
}

fn transcript(output: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// A new directory under the target's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("agent-{name}-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `npm install` the [`AGENTS`], once per target directory (again when the
/// list changes); concurrent tests take a lock file so only one installs.
fn installed() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("agent-clis");
    let ready = dir.join(".ready");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    lock.lock().unwrap();
    let wanted = AGENTS.join(" ");
    if std::fs::read_to_string(&ready).ok().as_deref() != Some(wanted.as_str()) {
        let output = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .args(AGENTS)
            .output()
            .expect("npm is required: the agents are installed from the npm registry");
        assert!(output.status.success(), "npm install failed:\n{}", transcript(&output));
        std::fs::write(&ready, wanted).unwrap();
    }
    lock.unlock().unwrap();
    dir
}
