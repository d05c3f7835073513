//! The `intentgate` binary as operators run it: `config check`, `keys hash`,
//! `migrate` and `serve` with the shipped config and the environment overrides.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_intentgate");

fn intentgate(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    command
        .env_remove("INTENTGATE_LISTEN")
        .env_remove("INTENTGATE_DATABASE_URL")
        .env_remove("INTENTGATE_SIMULATOR_LISTEN")
        .env_remove("INTENTGATE_CONFIG");
    command
}

fn scratch_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("intentgate-cli-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn shipped_config_checks_ok() {
    let out = intentgate(&["config", "check"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("config/gateway.toml: ok"));
}

#[test]
fn config_errors_name_file_key_and_problem() {
    let cases = [
        ("[store]\nurl = \"sqlite:x.db\"\ncolour = 1\n", "unknown field `colour`"),
        ("[store]\nurl = \"mysql://x\"\n", "store.url"),
        (
            "[store]\nurl = \"sqlite:x.db\"\n[[routes]]\nname = \"r\"\nchain = [\"ghost\"]\n",
            "routes[0].chain[0]: provider `ghost`",
        ),
        (
            "[store]\nurl = \"sqlite:x.db\"\n[[providers]]\nname = \"p\"\ndialect = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\ntotal_timeout = \"soon\"\n",
            "`soon` is not a duration",
        ),
        (
            "[store]\nurl = \"sqlite:x.db\"\n[[principals]]\nname = \"a\"\nkey_sha256 = \"abc\"\n",
            "principals[0].key_sha256",
        ),
        (
            "[store]\nurl = \"sqlite:x.db\"\n[[principals]]\nname = \"a\"\nkey_env = \"INTENTGATE_TEST_SURELY_UNSET\"\n",
            "principals[0].key_env: environment variable `INTENTGATE_TEST_SURELY_UNSET` is not set",
        ),
    ];
    for (text, expected) in cases {
        let path = scratch_file("bad.toml", text);
        let out = intentgate(&["config", "check", "--config", path.to_str().unwrap()]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "must fail: {text}");
        assert!(stderr.contains(path.to_str().unwrap()), "names the file: {stderr}");
        assert!(stderr.contains(expected), "expected `{expected}` in: {stderr}");
    }
}

/// A line that does not parse is named by its place and key, never quoted:
/// the store's URL holds the database password.
#[test]
fn config_check_does_not_quote_a_broken_line() {
    let text = "[store]\nurl = \"postgres://gw:hunter2@db/x\" oops\n";
    let path = scratch_file("secret.toml", text);
    let out = intentgate(&["config", "check", "--config", path.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("line 2, column ") && stderr.contains("(key `store.url`)"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn environment_overrides_the_file() {
    let out =
        intentgate(&["config", "check"]).env("INTENTGATE_DATABASE_URL", "mysql://nope").output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "INTENTGATE_DATABASE_URL (overrides store.url): is neither a sqlite: nor a postgres:// URL"
        ),
        "the error names the variable that was set, not the file's key: {stderr}"
    );
    assert!(!stderr.contains("mysql://nope"), "a URL is not echoed (it may carry a password): {stderr}");
    let out = intentgate(&["config", "check"]).env("INTENTGATE_LISTEN", "not-an-address").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("INTENTGATE_LISTEN"));
}

#[test]
fn keys_hash_prints_the_configured_hash() {
    let out = intentgate(&["keys", "hash", "demo-alice"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "c3fe0b469a6d4f19a25fbec114762d2186aa2c22888f52c5550a77fc104bcff3"
    );
    let mut child =
        intentgate(&["keys", "hash"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"demo-bob\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "cfdd601be826835d6a59c993254eb5786da08ee32379b680795ebe708f0060f9"
    );
}

/// The README's first command, on a scratch database and port: the binary
/// creates and migrates SQLite on first start and answers over HTTP.
#[tokio::test]
async fn serve_creates_the_database_and_answers() {
    let dir = std::env::temp_dir().join(format!("intentgate-serve-{}", uuid::Uuid::now_v7()));
    let db = dir.join("nested/intentgate.db");
    let url = format!("sqlite://{}", db.display());
    let common::Spawned { mut child, url: base, .. } =
        common::spawn_binary(&["serve"], &[("INTENTGATE_DATABASE_URL", url.as_str())]).await;
    let client = common::client();
    let response = client
        .post(format!("{base}/v1/jobs"))
        .bearer_auth(common::ALICE)
        .header("idempotency-key", "cli-1")
        .json(&common::chat_body("hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert!(db.exists(), "the SQLite file was created");
    child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// The README's two commands in order: a gateway already serving the
/// shipped config holds 8080 and the simulator's 9101, and the tests still
/// run — every spawned gateway takes free ports, its providers following
/// its simulator.
#[tokio::test]
async fn serve_beside_a_gateway_holding_the_shipped_ports() {
    let dir = std::env::temp_dir().join(format!("intentgate-beside-{}", uuid::Uuid::now_v7()));
    let url = format!("sqlite://{}", dir.join("intentgate.db").display());
    // Whatever holds 9101 (a running `intentgate serve`, or this stand-in).
    let _held = std::net::TcpListener::bind("127.0.0.1:9101");
    let common::Spawned { mut child, url: base, logs } =
        common::spawn_binary(&["serve"], &[("INTENTGATE_DATABASE_URL", url.as_str())]).await;
    let job = common::create_settled(&base, "beside-1", &common::chat_body("hello"), &[]).await;
    assert_eq!(job["status"], "succeeded", "served by its own simulator: {job}\n{}", logs.lock().unwrap());
    child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

/// A gateway that refuses to start shows why: the panic carries its log.
#[tokio::test]
async fn an_early_exit_shows_the_gateway_log() {
    use futures_util::FutureExt;
    let db = std::env::temp_dir().join(format!("intentgate-early-{}.db", uuid::Uuid::now_v7()));
    let config = scratch_file(
        "no-suites.toml",
        &format!(
            "[store]\nurl = \"sqlite://{}\"\n[contracts]\ndir = \"/nonexistent/intentgate-suites\"\nrun_on_start = true\n",
            db.display()
        ),
    );
    let spawned = std::panic::AssertUnwindSafe(common::spawn_binary(
        &["serve", "--config", config.to_str().unwrap()],
        &[],
    ))
    .catch_unwind()
    .await;
    let Err(panic) = spawned else { panic!("a gateway without its suites must not start") };
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("intentgate exited before listening"), "{message}");
    assert!(message.contains("/nonexistent/intentgate-suites"), "the child's own error line: {message}");
}

/// `config check` refuses what `serve` would refuse before listening, short
/// of the database and the network: suites `run_on_start` needs, API keys
/// from the environment, zero durations, URLs the driver cannot parse.
#[test]
fn config_check_refuses_what_serve_refuses() {
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/gateway.toml")).unwrap();
    let cases = [
        (shipped.replace("dir = \"contract-tests\"", "dir = \"/nonexistent/suites\""), "/nonexistent/suites"),
        (
            shipped.replace("model = \"sim:ok\"\ntokenizer = \"o200k_base\"", "model = \"sim:ok\"\napi_key_env = \"INTENTGATE_TEST_SURELY_UNSET\"\ntokenizer = \"o200k_base\""),
            "INTENTGATE_TEST_SURELY_UNSET",
        ),
        (shipped.replacen("attempt_timeout = \"10s\"", "attempt_timeout = \"0s\"", 1), "routes[0].attempt_timeout: must be longer than zero"),
        (format!("{shipped}\n[engine]\nlease_ttl = \"0ms\"\n"), "engine.lease_ttl: must be longer than zero"),
        (format!("{shipped}\n[engine]\nsweep_interval = \"0s\"\n"), "engine.sweep_interval: must be longer than zero"),
        (shipped.replace("max_execution = \"2m\"", "max_execution = \"0s\""), "providers[0].max_execution: must be longer than zero"),
        (shipped.replace("sqlite://data/intentgate.db", "postgres://u@host:notaport/db"), "store.url: not a valid database URL"),
        (
            shipped.replacen("aliases = [\"gpt-4o-mini\",", "aliases = [\"tools\", \"gpt-4o-mini\",", 1),
            "routes[0].aliases[0]: `tools` is empty, a route's name, or another alias already",
        ),
        (
            shipped.replacen("chain = [\"sim-primary\", \"sim-fallback\"]", "chain = [\"sim-primary\", \"sim-fallback\"]\npools = [{ members = [\"sim-primary\", \"ghost\"] }]", 1),
            "routes[0].pools[0].members[1]: `ghost` is not in the chain",
        ),
        (
            shipped.replacen("chain = [\"sim-primary\", \"sim-fallback\", \"sim-sloppy\"]", "chain = [\"sim-primary\", \"sim-fallback\", \"sim-sloppy\"]\npools = [{ members = [\"sim-primary\", \"sim-sloppy\"] }]", 1),
            "routes[1].pools[0].members: a pool's members must be consecutive in the chain",
        ),
        (
            shipped.replacen("chain = [\"sim-primary\", \"sim-fallback\"]", "chain = [\"sim-primary\", \"sim-fallback\"]\npools = [{ members = [\"sim-primary\", \"sim-fallback\"], weights = [1] }]", 1),
            "routes[0].pools[0].weights: one positive weight per member",
        ),
        (
            shipped.replacen("chain = [\"sim-primary\", \"sim-fallback\"]", "chain = [\"sim-primary\", \"sim-fallback\"]\nhedge = { after = \"10s\" }", 1),
            "routes[0].hedge.after: must be longer than zero and shorter than attempt_timeout (10s)",
        ),
        (
            shipped.replacen("chain = [\"sim-primary\", \"sim-fallback\"]", "chain = [\"sim-primary\", \"sim-fallback\"]\nhedge = { after = \"2s\", open_attempts = 4 }", 1),
            "routes[0].hedge.open_attempts: must be 2 or 3",
        ),
        (
            shipped.replacen("chain = [\"sim-primary\", \"sim-fallback\"]", "chain = [\"sim-primary\", \"sim-fallback\"]\nhedge = { after = \"2s\", when = \"always\" }", 1),
            "unknown field `when`",
        ),
        (
            shipped.replacen("dialect = \"openai\"", "dialect = \"azure\"", 1),
            "providers[0].api_version: is required with dialect = \"azure\"",
        ),
        (
            shipped.replacen("dialect = \"openai\"", "dialect = \"openai\"\napi_version = \"2024-10-21\"", 1),
            "providers[0].api_version: is for dialect = \"azure\" or \"azure-responses\" only",
        ),
    ];
    for (text, expected) in cases {
        assert_ne!(text, shipped, "the case changed the config");
        let path = scratch_file("gateway.toml", &text);
        let out = intentgate(&["config", "check", "--config", path.to_str().unwrap()]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "must fail ({expected})");
        assert!(stderr.contains(expected), "expected `{expected}` in: {stderr}");
        assert!(stderr.contains(path.to_str().unwrap()), "names the file: {stderr}");
    }
}

/// `dialect = "gemini"`: a provider addressed as Google's API wants checks
/// ok; each way of getting its addressing or its terms wrong is named.
#[test]
fn a_gemini_provider_checks_ok_and_its_mistakes_are_named() {
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/gateway.toml")).unwrap();
    let gemini = "\n[[providers]]\nname = \"gemini\"\ndialect = \"gemini\"\n\
                  base_url = \"https://generativelanguage.googleapis.com\"\nmodel = \"gemini-2.5-flash\"\n\
                  api_key_env = \"INTENTGATE_TEST_GEMINI_KEY\"\ntokenizer = \"o200k_base\"\n";
    let check = |provider: &str| {
        let path = scratch_file("gateway.toml", &format!("{shipped}{provider}"));
        let out = intentgate(&["config", "check", "--config", path.to_str().unwrap()])
            .env("INTENTGATE_TEST_GEMINI_KEY", "k")
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, stderr) = check(gemini);
    assert!(ok, "a Gemini provider checks ok: {stderr}");
    let cases = [
        (
            gemini.replace("api_key_env = \"INTENTGATE_TEST_GEMINI_KEY\"\n", ""),
            "providers[10].api_key_env: is required with dialect = \"gemini\"",
        ),
        (
            gemini.replace("\"gemini-2.5-flash\"", "\"models/gemini-2.5-flash\""),
            "providers[10].model: `models/gemini-2.5-flash` cannot be a Gemini model name in a URL (write it without `models/`)",
        ),
        (
            gemini.replace("googleapis.com\"", "googleapis.com/v1beta\""),
            "providers[10].base_url: ends in `/v1beta`: give the API's origin",
        ),
        (
            gemini.replace("\"o200k_base\"", "\"remote\""),
            "providers[10].tokenizer: `remote` asks a server's tokenize/detokenize endpoints",
        ),
        (
            format!("{gemini}request = {{ temperature = 0 }}\n"),
            "providers[10].request.temperature: is OpenAI's name",
        ),
        (
            format!("{gemini}request = {{ contents = [] }}\n"),
            "providers[10].request.contents: cannot be overridden",
        ),
        (
            format!(
                "{gemini}max_temperature = 0.5\nrequest = {{ generationConfig = {{ temperature = 1.0 }} }}\n"
            ),
            "providers[10].request.generationConfig.temperature: 1 is above this provider's max_temperature 0.5",
        ),
        (
            format!("{gemini}api_version = \"2024-10-21\"\n"),
            "providers[10].api_version: is for dialect = \"azure\" or \"azure-responses\" only",
        ),
        (gemini.replace("dialect = \"gemini\"", "dialect = \"gemni\""), "`gemini`"),
    ];
    for (provider, expected) in cases {
        assert_ne!(provider, gemini, "the case changed the provider");
        let (ok, stderr) = check(&provider);
        assert!(!ok, "must fail ({expected})");
        assert!(stderr.contains(expected), "expected `{expected}` in: {stderr}");
    }
}

/// `dialect = "vertex"`: a provider with its project, location and key
/// file checks ok (the key is read and parsed); what is missing is named.
#[test]
fn a_vertex_provider_checks_ok_and_its_mistakes_are_named() {
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/gateway.toml")).unwrap();
    let key = concat!(env!("CARGO_MANIFEST_DIR"), "/providers/src/sim/vertex/test_service_account.json");
    let vertex = format!(
        "\n[[providers]]\nname = \"vertex\"\ndialect = \"vertex\"\nmodel = \"claude-sonnet-4-5@20250929\"\n\
         project = \"proj-1\"\nlocation = \"us-east5\"\ncredentials_file = \"{key}\"\n"
    );
    let check = |provider: &str| {
        let path = scratch_file("gateway.toml", &format!("{shipped}{provider}"));
        let out = intentgate(&["config", "check", "--config", path.to_str().unwrap()])
            .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, stderr) = check(&vertex);
    assert!(ok, "a Vertex provider checks ok: {stderr}");
    let cases = [
        (vertex.replace("project = \"proj-1\"\n", ""), "providers[10].project: is required with dialect = \"vertex\""),
        (vertex.replace("location = \"us-east5\"\n", ""), "providers[10].location: is required with dialect = \"vertex\""),
        (vertex.replace(&format!("credentials_file = \"{key}\"\n"), ""), "no Vertex AI credentials: set credentials_file"),
        (vertex.replace(key, "/nonexistent/key.json"), "/nonexistent/key.json: cannot read the key file"),
        (vertex.replace("claude-sonnet-4-5@20250929", "llama-3"), "providers[10].publisher: cannot be told from model `llama-3`"),
        (format!("{vertex}api_key_env = \"X\"\n"), "providers[10].api_key_env: Vertex AI takes an OAuth access token"),
        (
            "\n[[providers]]\nname = \"o\"\ndialect = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\nproject = \"p\"\n".into(),
            "providers[10].project: is for dialect = \"vertex\" only",
        ),
    ];
    for (provider, expected) in cases {
        assert_ne!(provider, vertex, "the case changed the provider");
        let (ok, stderr) = check(&provider);
        assert!(!ok, "must fail ({expected})");
        assert!(stderr.contains(expected), "expected `{expected}` in: {stderr}");
    }
}

/// `dialect = "bedrock"`: a provider with a region and AWS keys in the
/// environment checks ok (no `base_url`: the region's endpoint); a missing
/// region, a region elsewhere, a model InvokeModel is not spoken to with
/// (another model checks ok: it is called through Converse), `bedrock_api`
/// elsewhere, and an unset key variable are named.
#[test]
fn a_bedrock_provider_checks_ok_and_its_mistakes_are_named() {
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/gateway.toml")).unwrap();
    let bedrock = "\n[[providers]]\nname = \"bedrock\"\ndialect = \"bedrock\"\nregion = \"eu-west-1\"\n\
                   model = \"anthropic.claude-sonnet-4-5-20250929-v1:0\"\n\
                   access_key_env = \"INTENTGATE_TEST_AWS_KEY\"\nsecret_key_env = \"INTENTGATE_TEST_AWS_SECRET\"\n";
    let check = |provider: &str, secret: bool| {
        let path = scratch_file("gateway.toml", &format!("{shipped}{provider}"));
        let mut command = intentgate(&["config", "check", "--config", path.to_str().unwrap()]);
        command.env("INTENTGATE_TEST_AWS_KEY", "AKID");
        if secret {
            command.env("INTENTGATE_TEST_AWS_SECRET", "s");
        }
        let out = command.output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, stderr) = check(bedrock, true);
    assert!(ok, "a Bedrock provider checks ok: {stderr}");
    let (ok, stderr) = check(&bedrock.replace("anthropic.claude", "meta.llama"), true);
    assert!(ok, "another model checks ok, through Converse: {stderr}");
    let cases = [
        (
            bedrock.replace("region = \"eu-west-1\"\n", ""),
            "providers[10].region: is required with dialect = \"bedrock\"",
        ),
        (
            "\n[[providers]]\nname = \"o\"\ndialect = \"openai\"\nbase_url = \"http://h/v1\"\nmodel = \"m\"\n\
             region = \"us-east-1\"\n"
                .to_owned(),
            "providers[10].region: is for dialect = \"bedrock\" only",
        ),
        (
            format!("{}bedrock_api = \"invoke\"\n", bedrock.replace("anthropic.claude", "meta.llama")),
            "providers[10].model: `meta.llama",
        ),
        (
            "\n[[providers]]\nname = \"o\"\ndialect = \"openai\"\nbase_url = \"http://h/v1\"\nmodel = \"m\"\n\
             bedrock_api = \"converse\"\n"
                .to_owned(),
            "providers[10].bedrock_api: is for dialect = \"bedrock\" only",
        ),
    ];
    for (provider, expected) in cases {
        let (ok, stderr) = check(&provider, true);
        assert!(!ok, "must fail ({expected})");
        assert!(stderr.contains(expected), "expected `{expected}` in: {stderr}");
    }
    let (ok, stderr) = check(bedrock, false);
    assert!(!ok && stderr.contains("`INTENTGATE_TEST_AWS_SECRET` (secret_key_env) is not set"), "{stderr}");
}

/// A database URL from `INTENTGATE_DATABASE_URL` that cannot be opened is
/// blamed on the variable, not on the file's `store.url`.
#[test]
fn a_bad_database_url_from_the_environment_names_the_variable() {
    let out = intentgate(&["migrate"])
        .env("INTENTGATE_DATABASE_URL", "sqlite:///proc/intentgate-nope/x.db")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("INTENTGATE_DATABASE_URL (overrides store.url)"), "{stderr}");
}

/// `--help` describes every argument: no bare `--reason <REASON>` lines.
#[test]
fn help_describes_every_argument() {
    for args in [
        &["jobs", "resolve", "--help"][..],
        &["jobs", "resolve-provider", "--help"],
        &["jobs", "list", "--help"],
        &["jobs", "show", "--help"],
        &["sim", "--help"],
        &["contract", "run", "--help"],
    ] {
        let out = intentgate(args).output().unwrap();
        assert!(out.status.success());
        let help = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = help.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let item = line.starts_with("  ") && !line.starts_with("   ");
            let item = item && matches!(line.trim_start().chars().next(), Some('-' | '<' | '['));
            if !item {
                continue;
            }
            let described_inline = line.trim_start().contains("  ");
            let described_below = lines.get(i + 1).is_some_and(|next| next.starts_with("          "));
            assert!(described_inline || described_below, "`{}`: `{line}` has no description", args.join(" "));
        }
    }
    let out = intentgate(&["jobs", "resolve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--as <abandoned|failed>"), "{help}");
    assert!(help.contains("a late answer may still win"), "{help}");
}
