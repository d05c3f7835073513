//! The official `openai` Python SDK pointed at intentgate with `base_url`
//! (tests/sdk/openai_sdk.py). The SDK is installed from PyPI into a
//! throwaway virtualenv, cached between runs under the target directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ALICE, TestGateway, TestStore, set_route};

store_matrix!(official_openai_sdk);

async fn official_openai_sdk(store: TestStore) {
    let python = virtualenv_with_openai();
    let gw =
        TestGateway::start_tweaked(&store, |doc| set_route(doc, "chat", "attempt_timeout", "300ms")).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/openai_sdk.py");
    let output = tokio::process::Command::new(&python)
        .arg(&script)
        .env("INTENTGATE_URL", gw.gateway.url())
        .env("INTENTGATE_KEY", ALICE)
        .env("SIM_URL", format!("http://{}", gw.sim().addr()))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the SDK script failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("all passed"), "{stdout}");
}

/// `python3 -m venv` + `pip install openai`, once per target directory;
/// concurrent tests take a lock file so only one installs.
fn virtualenv_with_openai() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("openai-sdk-venv");
    let python = dir.join("bin/python");
    let ready = dir.join(".ready");
    let lock_path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("openai-sdk-venv.lock");
    let lock = std::fs::File::create(&lock_path).unwrap();
    lock.lock().unwrap();
    if !ready.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir));
        run(Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "openai>=1.40",
        ]));
        std::fs::write(&ready, b"").unwrap();
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
