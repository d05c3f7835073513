//! The official Python SDKs pointed at intentgate with `base_url`: `openai`
//! on chat completions (tests/sdk/openai_sdk.py), `anthropic` on Messages
//! (tests/sdk/anthropic_sdk.py), `openai-agents` running a tool agent on
//! Responses (tests/sdk/agents_sdk.py), and the openai SDK without a key,
//! LangChain, instructor and pydantic-ai on the shipped routes
//! (tests/sdk/frameworks.py); and the Vercel AI SDK from npm
//! (tests/sdk/vercel_ai.mjs). Each with a call slower than its client's
//! timeout, retried: one upstream call. The Python packages are installed
//! from PyPI into throwaway virtualenvs, cached under the target directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ALICE, TestGateway, TestStore, set_route};

store_matrix!(
    official_openai_sdk,
    official_anthropic_sdk,
    openai_agents_sdk_runs_a_tool_agent,
    langchain_instructor_and_pydantic_ai_run_on_the_shipped_routes,
    the_vercel_ai_sdk_runs_a_tool_loop_and_an_object,
);

async fn official_openai_sdk(store: TestStore) {
    let gw =
        TestGateway::start_tweaked(&store, |doc| set_route(doc, "chat", "attempt_timeout", "300ms")).await;
    run_script(&gw, "tests/sdk/openai_sdk.py").await;
}

async fn official_anthropic_sdk(store: TestStore) {
    // Requests without a key get one derived from the request (the shipped
    // default), so the SDK's retries of one request are one job.
    let gw = TestGateway::start_tweaked(&store, |doc| {
        // The same providers the other way round: an Anthropic-dialect primary.
        let mut first = toml::Table::new();
        first.insert("name".into(), "anthropic-first".into());
        first.insert("chain".into(), toml::Value::Array(vec!["sim-fallback".into(), "sim-primary".into()]));
        first.insert("require_contract_for_primary".into(), false.into());
        first.insert("require_contract_for_fallback".into(), false.into());
        first.insert("retry_statuses".into(), toml::Value::Array(vec![429.into()]));
        doc["routes"].as_array_mut().unwrap().push(first.into());
    })
    .await;
    run_script(&gw, "tests/sdk/anthropic_sdk.py").await;
}

async fn openai_agents_sdk_runs_a_tool_agent(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    run_script(&gw, "tests/sdk/agents_sdk.py").await;
}

/// LangChain (OpenAI and Anthropic), instructor and pydantic-ai, on the shipped routes
/// with no config change and no key sent (tests/sdk/frameworks.py).
async fn langchain_instructor_and_pydantic_ai_run_on_the_shipped_routes(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    run_in(&virtualenv("frameworks-venv", &FRAMEWORKS), &gw, "tests/sdk/frameworks.py").await;
}

/// The Vercel AI SDK from npm, on the shipped routes with no key sent
/// (tests/sdk/vercel_ai.mjs, run beside the packages it imports).
async fn the_vercel_ai_sdk_runs_a_tool_loop_and_an_object(store: TestStore) {
    let gw = TestGateway::start(&store).await;
    let dir = npm_installed("vercel-ai", &VERCEL_AI);
    let script = dir.join(format!("vercel_ai-{}.mjs", uuid::Uuid::now_v7()));
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/vercel_ai.mjs"), &script).unwrap();
    run_with(Path::new("node"), &gw, &script).await;
    let _ = std::fs::remove_file(&script);
}

/// The packages the Vercel AI SDK script imports.
const VERCEL_AI: [&str; 3] = ["ai@6", "@ai-sdk/openai@3", "zod@4"];

/// `npm install` the `packages` into the directory `name`, once per target
/// directory (again when the list changes), under a lock file.
fn npm_installed(name: &str, packages: &[&str]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    lock.lock().unwrap();
    let (ready, wanted) = (dir.join(".ready"), packages.join(" "));
    if std::fs::read_to_string(&ready).ok().as_deref() != Some(wanted.as_str()) {
        run(Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .args(packages));
        std::fs::write(&ready, wanted).unwrap();
    }
    lock.unlock().unwrap();
    dir
}

async fn run_script(gw: &TestGateway, script: &str) {
    run_in(&virtualenv("openai-sdk-venv", &SDKS), gw, script).await;
}

async fn run_in(python: &Path, gw: &TestGateway, script: &str) {
    run_with(python, gw, &Path::new(env!("CARGO_MANIFEST_DIR")).join(script)).await;
}

/// Runs `script` with `interpreter` against `gw` and its simulator; it
/// must end well and say `all passed`.
async fn run_with(interpreter: &Path, gw: &TestGateway, script: &Path) {
    let output = tokio::process::Command::new(interpreter)
        .arg(script)
        .env("INTENTGATE_URL", gw.gateway.url())
        .env("INTENTGATE_KEY", ALICE)
        .env("SIM_URL", format!("http://{}", gw.sim().addr()))
        .output()
        .await
        .unwrap_or_else(|err| panic!("cannot run {}: {err}", interpreter.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the script failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("all passed"), "{stdout}");
}

/// The SDKs the scripts import.
const SDKS: [&str; 3] = ["openai>=1.40", "anthropic>=0.40", "openai-agents>=0.2"];

/// The frameworks tests/sdk/frameworks.py imports, in a virtualenv of
/// their own: their pins and `openai-agents`' leave pip no one answer.
const FRAMEWORKS: [&str; 4] =
    ["langchain-openai>=0.3", "langchain-anthropic>=0.3", "instructor>=1.7", "pydantic-ai-slim[openai]>=1.0"];

/// `python3 -m venv` + `pip install` the `packages` into the virtualenv
/// `name`, once per target directory (again when the list changes);
/// concurrent tests take a lock file so only one installs.
fn virtualenv(name: &str, packages: &[&str]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = dir.join("bin/python");
    let ready = dir.join(".ready");
    let lock_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.lock"));
    let lock = std::fs::File::create(&lock_path).unwrap();
    lock.lock().unwrap();
    let wanted = packages.join(" ");
    if std::fs::read_to_string(&ready).ok().as_deref() != Some(wanted.as_str()) {
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir));
        run(Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            .args(packages));
        std::fs::write(&ready, wanted).unwrap();
    }
    lock.unlock().unwrap();
    python
}

fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
