//! A real headless browser for tests: Debian's `chromium` driven by
//! `chromedriver` over the W3C WebDriver protocol (JSON over HTTP, spoken
//! with reqwest; no WebDriver crate).
//!
//! When chromedriver is not installed the browser tests print a loud
//! SKIPPED banner — unless `INTENTGATE_REQUIRE_BROWSER=1` (CI's `.ci/run`
//! sets it, after installing `chromium` and `chromium-driver`), and then
//! they fail. Nothing here sleeps to synchronise: [`Browser::wait_for`]
//! polls a condition in the page until a deadline.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The key W3C WebDriver names element references with.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long a condition may take to hold in the page.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A chromedriver process and one browser session in it.
pub struct Browser {
    driver: std::process::Child,
    http: reqwest::Client,
    session: String,
    base: String,
}

/// chromedriver on `PATH` (or at `INTENTGATE_CHROMEDRIVER`).
fn chromedriver() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("INTENTGATE_CHROMEDRIVER") {
        return Some(PathBuf::from(path)).filter(|file| file.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("chromedriver")).find(|file| file.is_file())
}

/// The browser binary chromedriver should start: Debian's `chromium`.
fn chromium() -> Option<PathBuf> {
    if let Ok(path) = std::env::var("INTENTGATE_CHROMIUM") {
        return Some(PathBuf::from(path)).filter(|file| file.is_file());
    }
    ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

fn unavailable(why: &str) -> Option<Browser> {
    if std::env::var("INTENTGATE_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
        panic!("a browser is required (INTENTGATE_REQUIRE_BROWSER=1) but {why}");
    }
    super::loud(&format!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! SKIPPED: browser test — {why}\n\
         !!! apt-get install chromium chromium-driver; CI sets INTENTGATE_REQUIRE_BROWSER=1.\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
    ));
    None
}

impl Browser {
    /// Starts chromedriver on a free port and a headless chromium session;
    /// `None` (after a loud banner) when they are not installed and not required.
    pub async fn start() -> Option<Browser> {
        let Some(driver_path) = chromedriver() else {
            return unavailable("chromedriver is not installed (on PATH, or at INTENTGATE_CHROMEDRIVER)");
        };
        let Some(chromium_path) = chromium() else { return unavailable("chromium is not installed") };
        let port = super::free_port();
        let mut command = std::process::Command::new(&driver_path);
        command
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let driver =
            command.spawn().unwrap_or_else(|err| panic!("cannot start {}: {err}", driver_path.display()));
        let http = super::client();
        let base = format!("http://127.0.0.1:{port}");
        let mut browser = Browser { driver, http, session: String::new(), base };
        browser.wait_until_ready().await;
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium_path,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1400,1000", "--hide-scrollbars", "--lang=en-US",
                         "--no-first-run", "--disable-extensions", "--disable-background-networking"],
            },
        }}});
        let created = browser.call(reqwest::Method::POST, "/session", Some(capabilities)).await;
        browser.session = created["sessionId"].as_str().expect("a session id").to_owned();
        Some(browser)
    }

    /// Polls chromedriver's `/status` until it is ready.
    async fn wait_until_ready(&self) {
        let started = Instant::now();
        loop {
            if let Ok(response) = self.http.get(format!("{}/status", self.base)).send().await
                && let Ok(status) = response.json::<Value>().await
                && status["value"]["ready"] == true
            {
                return;
            }
            assert!(started.elapsed() < DEADLINE, "chromedriver did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One WebDriver command; its `value`. A WebDriver error panics with
    /// what the driver said.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        match self.try_call(method.clone(), path, body).await {
            Ok(value) => value,
            Err((status, value)) => panic!("{method} {path}: {status} {value}"),
        }
    }

    /// One WebDriver command: its `value`, or the status and `value` of
    /// the error the driver answered.
    async fn try_call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, (reqwest::StatusCode, Value)> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method.clone(), &url);
        if let Some(body) = body {
            request = request.json(&body);
        } else if method == reqwest::Method::POST {
            request = request.json(&json!({}));
        }
        let response = request.send().await.unwrap_or_else(|err| panic!("{method} {path}: {err}"));
        let status = response.status();
        let body: Value = response.json().await.unwrap_or_else(|err| panic!("{method} {path}: {err}"));
        if status.is_success() { Ok(body["value"].clone()) } else { Err((status, body["value"].clone())) }
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, &self.session_path("/url"), Some(json!({"url": url}))).await;
    }

    /// The element `css` selects (the first one); panics when there is none.
    pub async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                reqwest::Method::POST,
                &self.session_path("/element"),
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {css}: {found}")).to_owned()
    }

    /// A real click (scrolled into view, refused when covered or hidden).
    /// A page that re-renders between the find and the click (a poll's
    /// answer) leaves a stale element: it is found again, as a person would
    /// click what is on the screen now.
    pub async fn click(&self, css: &str) {
        for _ in 0..5 {
            let element = self.find(css).await;
            let path = self.session_path(&format!("/element/{element}/click"));
            match self.try_call(reqwest::Method::POST, &path, None).await {
                Ok(_) => return,
                Err((_, value)) if value["error"] == "stale element reference" => continue,
                Err((status, value)) => panic!("POST {path}: {status} {value}"),
            }
        }
        panic!("{css} went stale five times in a row");
    }

    /// Clears the field and types `text` into it, key by key.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css).await;
        self.call(reqwest::Method::POST, &self.session_path(&format!("/element/{element}/clear")), None)
            .await;
        self.call(
            reqwest::Method::POST,
            &self.session_path(&format!("/element/{element}/value")),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Runs `script` (a function body; `arguments[i]` are `args`) in the page.
    pub async fn script(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            &self.session_path("/execute/sync"),
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Polls `expression` (JavaScript, evaluated in the page) until it is
    /// truthy, and returns its value; panics naming `what` and the page's
    /// text after [`DEADLINE`].
    pub async fn wait_for(&self, what: &str, expression: &str) -> Value {
        let script = format!("try {{ return ({expression}); }} catch (e) {{ return null; }}");
        let started = Instant::now();
        loop {
            let value = self.script(&script, json!([])).await;
            let truthy = match &value {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return value;
            }
            if started.elapsed() > DEADLINE {
                let text = self.script("return document.body.innerText", json!([])).await;
                panic!(
                    "waited {DEADLINE:?} for {what} ({expression}); the page says:\n{}",
                    text.as_str().unwrap_or("")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The page's visible text of the element `css` selects ("" if none).
    pub async fn text(&self, css: &str) -> String {
        let value = self
            .script(
                "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
                json!([css]),
            )
            .await;
        value.as_str().unwrap_or_default().to_owned()
    }

    /// A PNG of the viewport, written to `docs/screenshots/<name>.png` when
    /// `INTENTGATE_SCREENSHOTS=1`.
    pub async fn screenshot(&self, name: &str) {
        if !std::env::var("INTENTGATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
            return;
        }
        let encoded = self.call(reqwest::Method::GET, &self.session_path("/screenshot"), None).await;
        let png = base64_decode(encoded.as_str().expect("a base64 screenshot"));
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is a PNG");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the session (the browser quits); Drop ends chromedriver.
    pub async fn close(mut self) {
        if !self.session.is_empty() {
            let path = self.session_path("");
            self.call(reqwest::Method::DELETE, &path, None).await;
            self.session.clear();
        }
    }
}

impl Drop for Browser {
    /// A test that failed left its session open: end it the WebDriver way
    /// (chromedriver quits the browser it started), then end chromedriver,
    /// by its own pid. Never a signal to a process group: procps-ng 4.0.2's
    /// `kill -TERM -<pgid>` can signal every process (as `kill -1`) instead.
    fn drop(&mut self) {
        if !self.session.is_empty() {
            delete_session_blocking(&self.base, &self.session);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `DELETE /session/{id}` over a plain blocking socket (Drop cannot await).
fn delete_session_blocking(base: &str, session: &str) {
    use std::io::{Read, Write};
    let Some(host) = base.strip_prefix("http://") else { return };
    let Ok(mut stream) = std::net::TcpStream::connect(host) else { return };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let request = format!(
        "DELETE /session/{session} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_ok() {
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
    }
}

/// Standard base64 (RFC 4648, with padding), as WebDriver sends screenshots.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c) << (18 - 6 * i);
        }
        let produced = chunk.len() * 6 / 8;
        for i in 0..produced {
            out.push((acc >> (16 - 8 * i)) as u8);
        }
    }
    out
}
