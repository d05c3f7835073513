//! A provider simulator: a real HTTP server speaking every dialect, streamed
//! and not, whose behaviour each request scripts. Tests and the gateway's
//! default config use it instead of a real provider.
//!
//! Routes:
//! - `POST /v1/chat/completions` — OpenAI dialect (provider base_url `http://ADDR/v1`)
//! - `POST /v1/messages` — Anthropic dialect (provider base_url `http://ADDR`)
//! - `POST /openai/deployments/{d}/chat/completions?api-version=…`,
//!   `…/{d}/embeddings?api-version=…` and `/openai/responses?api-version=…`
//!   — Azure OpenAI's addressing of the same (provider base_url
//!   `http://ADDR`); without `api-version`, 404
//! - `POST /v1beta/models/{model}:generateContent` and
//!   `…:streamGenerateContent?alt=sse` — Gemini (provider base_url
//!   `http://ADDR`): the key must be in `x-goog-api-key` (403 without), and
//!   fields, parts and schema keywords Gemini does not know are refused
//!   with its 400 (see `gemini.rs`); the model (and so its script) is the
//!   path's
//! - `POST /v1/projects/{p}/locations/{l}/publishers/{publisher}/models/{model}:{method}`
//!   — Vertex AI (provider base_url `http://ADDR`): Claude (`anthropic`,
//!   `:rawPredict` / `:streamRawPredict`, Anthropic's body without `model`
//!   and with `anthropic_version: "vertex-2023-10-16"`) and Gemini
//!   (`google`, as above); a request needs a live access token granted by
//!   `POST /token` (401 `UNAUTHENTICATED` without), see `vertex.rs`
//! - `POST /token` — Google's service-account grant: a JWT assertion signed
//!   RS256 by the TEST-ONLY account [`TEST_SERVICE_ACCOUNT`], checked (key,
//!   issuer, audience, lifetime) and answered with an access token
//! - `POST /model/{modelId}/invoke` and `…/invoke-with-response-stream` —
//!   Amazon Bedrock's runtime, Claude's Messages body (provider base_url
//!   `http://ADDR`): every request must carry a SigV4 signature by the
//!   simulator's credentials or its Bedrock API key (see `bedrock.rs`; a
//!   wrong one is Bedrock's 403, counted), the body must be as Bedrock
//!   takes it (no `model`, no `stream`, `anthropic_version:
//!   "bedrock-2023-05-31"`); answers are the Anthropic dialect's, streams
//!   framed in AWS's binary event stream, errors `{"message": …}` with
//!   `x-amzn-errortype`; the model (and so its script) is the path's
//! - `POST /model/{modelId}/converse` and `…/converse-stream` — Bedrock's
//!   Converse API, authenticated and faulted as above, its body checked
//!   as AWS does (see `converse.rs`)
//! - `POST /v1/responses` — OpenAI's Responses API (provider base_url
//!   `http://ADDR/v1`), strict about its fields and items, with reasoning
//!   items whose encrypted content must come back unchanged (see
//!   `responses.rs`)
//! - thinking, in the Anthropic dialect wherever it is spoken: a request
//!   with `thinking` `enabled` or `adaptive` is answered with a signed
//!   thinking block first; a thinking block sent back must carry the
//!   signature given for its text, else Anthropic's 400 (`thinking.rs`)
//! - prefill, in the Anthropic dialect wherever it is spoken and in
//!   Converse: a last turn that is the assistant's is continued (the answer
//!   is the rest of what would have been said); one ending in whitespace is
//!   Claude's 400
//! - cache usage: an Anthropic-dialect request with `cache_control`
//!   anywhere reports half its prompt as `cache_read_input_tokens`; a
//!   Responses request with `prompt_cache_key` half as `cached_tokens`
//! - `POST /v1/embeddings` — OpenAI embeddings: one deterministic unit vector
//!   per input (16 dimensions unless `dimensions` says), floats or base64;
//!   scripts' waits, `status=`, resets and `malformed-json` apply
//! - `GET /sim/calls` — [`CallCounts`] as JSON
//! - `GET /sim/requests/{key}` — the last [`RecordedRequest`] for an
//!   `Idempotency-Key` (404 when unknown or forgotten); its `body` is `null`
//!   unless the simulator records bodies ([`Simulator::record_bodies`])
//! - `POST /sim/reset` — forget counts, recordings, queued scripts, released tags
//! - `POST /sim/release/{tag}` — release `hold=TAG` (before or after it is reached)
//! - `POST /sim/scripts` `{"model": "m" | null, "script": "...", "times": n}` —
//!   the next `n` calls for model `m` (or any model) run `script`
//! - `POST /sim/tokens/expire-next` — the next access token `POST /token`
//!   grants says `expires_in: 1` and is refused after its first use: the
//!   client must fetch another for its next request
//!
//! These admin routes have no authentication: whoever reaches the port can
//! read them. So memory is bounded (only the [`RECORDED_REQUESTS`] most recent
//! requests and the [`COUNTED_KEYS`] most recent keys' counts are kept) and
//! request bodies — prompts — are kept only when
//! [`Simulator::record_bodies`] asks for it (test harnesses do; the shipped
//! demo does not).
//!
//! A request's script comes from, in order: the `x-sim-script` header, the
//! queued scripts, the model name after `sim:` (model `sim:status=503`), or
//! `ok`. `reset-before-body` really leaves the body unread only when the
//! script comes from the header (a provider's `extra_headers` can set it);
//! otherwise the simulator had to read the body to learn the model.
//!
//! # Script grammar
//!
//! ```text
//! script = step *( ";" step )          ; whitespace around steps is ignored
//! step   = "ok"                        ; no-op, the default
//!        | "delay=" N ["ms" | "s"]     ; wait N (ms by default), then go on
//!        | "hold=" TAG                 ; wait until TAG is released (stays released until reset)
//!        | "hang"                      ; never answer
//!        | "status=" CODE              ; answer with error status CODE (400-599)
//!        | "retry_after=" VALUE        ; with status: send `Retry-After: VALUE` (Gemini: as the
//!                                      ;   body's RetryInfo `retryDelay: "VALUEs"`, as Google sends it)
//!        | "reset-before-body"         ; close the connection without reading the body
//!        | "reset-after-body"          ; read the body, close without answering
//!        | "content-policy"            ; 400: the content policy refused it, in the dialect's words
//!                                      ;   (Gemini: a 200 whose promptFeedback.blockReason is SAFETY)
//!        | "safety-stop"               ; a safety filter stops the answer: half of it, then
//!                                      ;   finish_reason content_filter (Anthropic: stop_reason refusal;
//!                                      ;   Gemini: finishReason SAFETY, having said nothing unless streamed)
//!        | "malformed-json"            ; 200 with a body (or stream event) that is not JSON
//!        | "invent-key"                ; JSON answer with an extra, unasked top-level key
//!        | "echo-auth"                 ; echo the Authorization (or x-api-key) header as text and model
//!        | "ignore-format"             ; prose even when JSON was asked for
//!        | "ignore-tools"              ; words even when tools are offered or a call is forced
//!        | "stream-stall"              ; send half the answer, then go silent forever
//!        | "stream-cut"                ; send half the answer, then drop the connection
//!        | "stream-no-done"            ; end a stream cleanly but without its terminator
//!        | "stream-truncated"          ; send half the stream, then end it cleanly
//!                                      ;   (Gemini: without the chunk that finishes it)
//!        | "stream-exception"          ; Bedrock: half the stream, then a modelStreamErrorException
//!                                      ;   frame (elsewhere: the whole answer)
//!        | "bad-crc"                   ; Bedrock: half way, a frame whose CRC is wrong, then the
//!                                      ;   rest (elsewhere: the whole answer)
//!        | "tool_call"                 ; answer a call of a tool whatever tool_choice says (see Tools)
//!        | "tool=" TAG                 ; answer a call of tool TAG, whatever is offered
//!        | "tool_args=bad"             ; a tool call whose arguments violate the tool's schema
//!        | "usage=" N                  ; report N output tokens whatever was said (a provider
//!                                      ;   that bills beyond the request's limit)
//! ```
//!
//! TAG is letters, digits and `-_.:`. Waits (`delay`, `hold`, `hang`) run in
//! the order written, before the ending (`status`, `reset-*`, or the normal
//! reply). At most one ending and one stream fault. `stream-stall` and
//! `stream-cut` on a non-streamed request stall or cut the JSON body halfway.
//! A script that does not parse is answered with 400 and the reason.
//!
//! Answers are deterministic (the same request and seed give the same
//! answer): `echo: <last user message>`, a tool call, or JSON in the
//! format asked for. When the conversation ends with tool results (OpenAI
//! `tool` messages, Anthropic `tool_result` blocks, Gemini
//! `functionResponse` parts), they stand in for the last user message: the
//! answer is `echo: <tool result>`. Usage counts words. OpenAI answers
//! honour `n` (choice `i` after the first says `echo[i]: …`; streamed, the
//! choices interleave), always carry `usage` with its `*_details` and
//! `system_fingerprint`, and a stream asked for
//! `stream_options.include_usage` ends with a `choices: []` usage chunk.
//!
//! # Tools
//!
//! Every model, the default echo too, honours the request's `tools` and
//! `tool_choice`, in every dialect:
//!
//! - forced — OpenAI `{"type": "function", "function": {"name": N}}`,
//!   Anthropic `{"type": "tool", "name": N}`, Gemini
//!   `functionCallingConfig` mode `ANY` with `allowedFunctionNames` (the
//!   first) — calls N, even after a tool result;
//! - OpenAI `required`, Anthropic `any`, Gemini `ANY` naming none — calls
//!   the first tool, even after a tool result;
//! - `auto`, or none said, with tools offered — calls the first tool until
//!   a tool result follows the conversation's last call, then answers in
//!   words, so an agent's loop ends;
//! - `none` (Gemini mode `NONE`) — words.
//!
//! "The first tool" is the first offered tool the last line of the last
//! user message names as a word, if it names one (`Use Read with
//! file_path=/tmp/notes.txt`): a prompt steers an agent to the tool it
//! means, as a person would. Such a call carries only the tool's required
//! arguments and those the line spells out as `name=value` words (a string
//! argument takes the value as written).
//!
//! The scripts `tool_call`, `tool=TAG` and `tool_args=bad` answer a call
//! whatever `tool_choice` says and whether or not tools are offered (the
//! tool TAG, else the forced one, else the first, else `sim_tool`), and
//! after a tool result only when the choice forces a call.
//!
//! A call's arguments are built from the tool's `parameters`
//! (`input_schema`) so they validate: every property, `required` keys,
//! `enum` and `const` (their first value), arrays (one item, or
//! `minItems`), nested objects, `anyOf` / `oneOf` (the first choice that
//! is not `null`) and `allOf`, `$ref` into `$defs` (a recursive schema ends
//! after a few levels), nullable types, number bounds and `multipleOf`,
//! string lengths and common `format`s; other strings hold the last user
//! message (or `x`), numbers are 1 moved into their bounds, booleans true.
//! `tool_args=bad` drops the first required property and gives every
//! other one the wrong type. OpenAI: `content: null`, `tool_calls`,
//! `finish_reason: "tool_calls"`, streamed as argument fragments;
//! Anthropic: a `tool_use` block, `stop_reason: "tool_use"`, streamed as
//! `input_json_delta`s; Gemini: a `functionCall` part, `finishReason:
//! "STOP"`, streamed whole in one chunk before the one that finishes.
//!
//! # Structured outputs
//!
//! An answer in words is JSON the request's schema accepts, built the same
//! way (strings from the first words of the last user message), when the
//! request carries one: OpenAI `response_format` of type `json_schema`,
//! Anthropic `output_config.format` (or the beta's `output_format`) of
//! type `json_schema`, Gemini `generationConfig.responseSchema` or
//! `responseJsonSchema` with `responseMimeType: application/json`. JSON
//! mode without a schema (`json_object`, a JSON `responseMimeType`, or a
//! system prompt mentioning JSON) answers `{"answer": "echo: …"}`.
//! `invent-key` adds a top-level key nobody asked for, `ignore-format`
//! answers prose and `ignore-tools` answers words where a call was asked
//! for: the broken variants contract suites must catch.

mod bedrock;
mod conn;
mod converse;
mod embed;
mod format;
mod gemini;
mod handler;
mod prompt;
mod recent;
mod reply;
mod responses;
mod schema;
mod script;
mod seal;
mod state;
mod thinking;
mod tool;
mod vertex;

use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;

use axum::extract::{Path, State as Extract};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use bedrock::{
    ACCESS_KEY_ID as BEDROCK_ACCESS_KEY_ID, API_KEY as BEDROCK_API_KEY,
    SECRET_ACCESS_KEY as BEDROCK_SECRET_ACCESS_KEY,
};
pub use conn::serve;
pub use handler::SCRIPT_HEADER;
pub use script::ScriptError;
pub use state::{COUNTED_KEYS, CallCounts, RECORDED_REQUESTS, RecordedRequest};
pub use thinking::sign_thinking_blocks;
pub use vertex::tokens::{TEST_SERVICE_ACCOUNT, WRONG_KEY_SERVICE_ACCOUNT};

use crate::dialect::Dialect;
use conn::KillSwitch;
use script::Script;
use state::State;

/// The simulator's shared state; clones share it.
#[derive(Clone)]
pub struct Simulator {
    seed: u64,
    state: Arc<State>,
    /// Request bodies past this many bytes are refused (413).
    max_body: usize,
}

impl Simulator {
    /// All generated ids and invented keys derive from `seed`.
    pub fn new(seed: u64) -> Self {
        Simulator { seed, state: Arc::new(State::new()), max_body: handler::DEFAULT_MAX_BODY }
    }

    /// Refuse request bodies past `bytes` with a 413, as a provider does:
    /// at least what the gateway in front of it renders from the largest
    /// request its doors take, so that its own unauthenticated port takes
    /// no more than that.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// Binds `addr` (port 0 picks one) and serves in a background task
    /// that stops when the handle is dropped.
    pub async fn spawn(self, addr: SocketAddr) -> std::io::Result<SimHandle> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(serve(listener, self.clone()));
        Ok(SimHandle { addr, sim: self, task })
    }

    /// Keep request bodies in the recordings (`last_request`, `GET
    /// /sim/requests/{key}`). Off by default: bodies are prompts, and the
    /// admin routes are unauthenticated. Tests that inspect what reached
    /// the provider turn it on.
    pub fn record_bodies(self, on: bool) -> Self {
        self.state.set_record_bodies(on);
        self
    }

    /// How many requests are recorded now; never more than [`RECORDED_REQUESTS`].
    pub fn recorded_requests(&self) -> usize {
        self.state.recorded()
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn calls(&self) -> CallCounts {
        self.state.calls()
    }

    /// Resolves once `total` calls have arrived — a signal for tests that
    /// must know a request reached the provider.
    pub async fn wait_for_calls(&self, total: u64) {
        self.state.wait_for_calls(total).await;
    }

    pub fn last_request(&self, idempotency_key: &str) -> Option<RecordedRequest> {
        self.state.last_request(idempotency_key)
    }

    pub fn reset(&self) {
        self.state.reset();
    }

    /// Releases `hold=TAG`, now and for later requests, until reset.
    pub fn release(&self, tag: &str) {
        self.state.release(tag);
    }

    /// An access token the Vertex routes accept for an hour, as `gcloud
    /// auth print-access-token` would give one.
    pub fn mint_access_token(&self) -> String {
        self.state.tokens.mint()
    }

    /// The next access token `POST /token` grants expires after one use.
    pub fn expire_next_token(&self) {
        self.state.tokens.expire_after_use(1);
    }

    /// The next `times` calls for `model` (any model when `None`) run `script`.
    pub fn queue(&self, model: Option<&str>, script: &str, times: u32) -> Result<(), ScriptError> {
        self.state
            .queue(model.map(str::to_owned), script.parse()?, times)
            .map_err(|full| ScriptError::new(script, full))
    }
}

/// A running simulator. Derefs to [`Simulator`] for counts and control.
pub struct SimHandle {
    addr: SocketAddr,
    sim: Simulator,
    task: JoinHandle<()>,
}

impl SimHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base_url of an OpenAI-dialect provider pointing here.
    pub fn base_url_openai(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The base_url of an Anthropic-dialect provider pointing here.
    pub fn base_url_anthropic(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base_url of a Bedrock-dialect provider pointing here.
    pub fn base_url_bedrock(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base_url of a Gemini-dialect provider pointing here.
    pub fn base_url_gemini(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base_url of a Vertex provider pointing here.
    pub fn base_url_vertex(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A service-account key file (JSON) whose `token_uri` is this
    /// simulator's: the account it knows, or (`genuine: false`) the same
    /// account with a private key it does not, whose assertions it refuses.
    pub fn service_account_file(&self, genuine: bool) -> String {
        let text = if genuine { TEST_SERVICE_ACCOUNT } else { WRONG_KEY_SERVICE_ACCOUNT };
        let mut file: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        file["token_uri"] = format!("http://{}/token", self.addr).into();
        file.to_string()
    }
}

impl Deref for SimHandle {
    type Target = Simulator;

    fn deref(&self) -> &Simulator {
        &self.sim
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn router(sim: Simulator) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat::<true>))
        .route("/v1/messages", post(chat::<false>))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/responses", post(responses_api))
        .route("/openai/deployments/{deployment}/chat/completions", post(azure::<false>))
        .route("/openai/deployments/{deployment}/embeddings", post(azure::<true>))
        .route("/openai/responses", post(azure_responses))
        .route("/v1beta/models/{target}", post(gemini_api))
        .route(
            "/v1/projects/{project}/locations/{location}/publishers/{publisher}/models/{target}",
            post(vertex_api),
        )
        .route("/token", post(vertex::token))
        .route(
            "/sim/tokens/expire-next",
            post(|Extract(sim): Extract<Simulator>| async move {
                sim.expire_next_token();
                StatusCode::NO_CONTENT
            }),
        )
        .route("/model/{model}/{operation}", post(bedrock_api))
        .route("/sim/calls", get(|Extract(sim): Extract<Simulator>| async move { Json(sim.calls()) }))
        .route("/sim/requests/{key}", get(recorded))
        .route(
            "/sim/reset",
            post(|Extract(sim): Extract<Simulator>| async move {
                sim.reset();
                StatusCode::NO_CONTENT
            }),
        )
        .route("/sim/release/{tag}", post(release))
        .route("/sim/scripts", post(queue))
        .with_state(sim)
}

async fn chat<const OPENAI: bool>(
    Extract(sim): Extract<Simulator>,
    Extension(kill): Extension<KillSwitch>,
    request: axum::extract::Request,
) -> Response {
    let dialect = if OPENAI { Dialect::OpenAi } else { Dialect::Anthropic };
    handler::handle(handler::Api::Chat(dialect), sim, kill, request).await
}

async fn responses_api(
    Extract(sim): Extract<Simulator>,
    Extension(kill): Extension<KillSwitch>,
    request: axum::extract::Request,
) -> Response {
    handler::handle(handler::Api::Responses, sim, kill, request).await
}

/// Azure OpenAI's addressing of the OpenAI dialect: a request without
/// `api-version` is answered as Azure answers it, 404 `Resource not found`.
async fn azure<const EMBEDDINGS: bool>(
    Extract(sim): Extract<Simulator>,
    Extension(kill): Extension<KillSwitch>,
    request: axum::extract::Request,
) -> Response {
    let api = if EMBEDDINGS { handler::Api::Embeddings } else { handler::Api::Chat(Dialect::OpenAi) };
    azure_api(api, sim, kill, request).await
}

/// Azure's Responses API: per resource, the deployment in the body's `model`.
async fn azure_responses(
    Extract(sim): Extract<Simulator>,
    Extension(kill): Extension<KillSwitch>,
    request: axum::extract::Request,
) -> Response {
    azure_api(handler::Api::Responses, sim, kill, request).await
}

async fn azure_api(
    api: handler::Api,
    sim: Simulator,
    kill: KillSwitch,
    request: axum::extract::Request,
) -> Response {
    let versioned =
        request.uri().query().is_some_and(|q| q.split('&').any(|pair| pair.starts_with("api-version=")));
    if !versioned {
        let body = serde_json::json!({"error": {"code": "404", "message": "Resource not found"}});
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    }
    handler::handle(api, sim, kill, request).await
}

/// Gemini's `{model}:generateContent` and `{model}:streamGenerateContent?alt=sse`;
/// another method, or a stream not asked for as SSE, is answered as Google
/// answers it, before anything is counted.
async fn gemini_api(
    Extract(sim): Extract<Simulator>,
    Extension(kill): Extension<KillSwitch>,
    Path(target): Path<String>,
    request: axum::extract::Request,
) -> Response {
    match gemini::target(&target, request.uri().query()) {
        Ok((model, stream)) => {
            handler::handle(handler::Api::Gemini { model, stream }, sim, kill, request).await
        }
        Err((status, message)) => gemini::refuse(status, &message),
    }
}

/// Vertex AI's `…/publishers/{publisher}/models/{model}:{method}`: Claude
/// or Gemini, as the publisher says (see `vertex.rs`).
async fn vertex_api(
    Extract(sim): Extract<Simulator>,
    Extension(kill): Extension<KillSwitch>,
    Path((_, _, publisher, target)): Path<(String, String, String, String)>,
    request: axum::extract::Request,
) -> Response {
    match vertex::target(&publisher, &target, request.uri().query()) {
        Ok((publisher, model, stream)) => {
            handler::handle(handler::Api::Vertex { publisher, model, stream }, sim, kill, request).await
        }
        Err((status, message)) => gemini::refuse(status, &message),
    }
}

/// Bedrock's `InvokeModel` and its stream: the body is read whole first,
/// since the signature covers it; the call is counted either way.
async fn bedrock_api(
    Extract(sim): Extract<Simulator>,
    Extension(kill): Extension<KillSwitch>,
    Path((model, operation)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Response {
    let Some((stream, converse)) = bedrock::target(&operation) else {
        return bedrock::refuse(404, "UnknownOperationException", "");
    };
    let (parts, body) = request.into_parts();
    let body = match handler::read_body(body, sim.max_body).await {
        Ok(body) => body,
        Err(unread) => {
            let (status, reason) = unread.status_and_reason();
            return bedrock::error(status, &reason);
        }
    };
    let auth = bedrock::authenticate(&parts.headers, &parts.uri, &body);
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(body));
    handler::handle(handler::Api::Bedrock { model, stream, converse, auth }, sim, kill, request).await
}

async fn embeddings(
    Extract(sim): Extract<Simulator>,
    Extension(kill): Extension<KillSwitch>,
    request: axum::extract::Request,
) -> Response {
    handler::handle(handler::Api::Embeddings, sim, kill, request).await
}

/// Headers that carry a provider key: shown over HTTP as `[redacted]`
/// (the admin routes are unauthenticated; the in-process
/// [`Simulator::last_request`] keeps them, for the caller's own tests).
const KEY_HEADERS: [&str; 5] =
    ["authorization", "x-api-key", "api-key", "x-goog-api-key", "x-amz-security-token"];

async fn recorded(Extract(sim): Extract<Simulator>, Path(key): Path<String>) -> Response {
    match sim.last_request(&key) {
        Some(mut request) => {
            for (name, value) in &mut request.headers {
                if KEY_HEADERS.contains(&name.as_str()) {
                    *value = "[redacted]".to_owned();
                }
            }
            Json(request).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn release(Extract(sim): Extract<Simulator>, Path(tag): Path<String>) -> StatusCode {
    sim.release(&tag);
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
struct QueueBody {
    model: Option<String>,
    script: String,
    #[serde(default = "one")]
    times: u32,
}

fn one() -> u32 {
    1
}

async fn queue(Extract(sim): Extract<Simulator>, Json(body): Json<QueueBody>) -> Response {
    match body.script.parse::<Script>() {
        Ok(script) => match sim.state.queue(body.model, script, body.times) {
            Ok(()) => StatusCode::NO_CONTENT.into_response(),
            Err(full) => (StatusCode::TOO_MANY_REQUESTS, full).into_response(),
        },
        Err(err) => (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
    }
}
