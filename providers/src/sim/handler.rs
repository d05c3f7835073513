//! One provider request at the simulator: count it, find its script, run it.

use std::collections::BTreeMap;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, BoxStream, StreamExt};
use serde_json::Value;

use super::Simulator;
use super::conn::KillSwitch;
use super::prompt::{Event, Prompt};
use super::reply;
use super::script::{End, Fault, Output, Script, Wait};
use crate::dialect::Dialect;
use crate::transport::IDEMPOTENCY_KEY_HEADER;

/// Scripts the request when present; wins over queue and model name.
pub const SCRIPT_HEADER: &str = "x-sim-script";
/// The largest request body the simulator reads unless told otherwise
/// ([`super::Simulator::max_body_bytes`]): twice a gateway's default door
/// limit, room for what it renders — translated — from the largest request
/// a door takes.
pub(crate) const DEFAULT_MAX_BODY: usize = 2 * 1024 * 1024;

/// Which of the simulator's APIs a request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Api {
    Chat(Dialect),
    /// `POST /v1/embeddings`, OpenAI's dialect.
    Embeddings,
    /// Gemini's `generateContent` (or its stream) of the model the path names.
    Gemini {
        model: String,
        stream: bool,
    },
    /// `POST /v1/responses`, OpenAI's Responses API.
    Responses,
    /// Vertex AI's model of `publisher` (Anthropic or Gemini), the path's.
    Vertex {
        publisher: Dialect,
        model: String,
        stream: bool,
    },
    /// Bedrock's `InvokeModel` or `Converse` (`converse`), or its stream,
    /// of the model the path names, and whether its credentials hold (the
    /// exception and message AWS refuses them with).
    Bedrock {
        model: String,
        stream: bool,
        converse: bool,
        auth: Result<(), (String, String)>,
    },
}

impl Api {
    /// The dialect its answers and errors are in.
    fn dialect(&self) -> Dialect {
        match self {
            Api::Chat(dialect) => *dialect,
            Api::Embeddings => Dialect::OpenAi,
            Api::Responses => Dialect::OpenAiResponses,
            Api::Gemini { .. } => Dialect::Gemini,
            Api::Vertex { publisher, .. } => *publisher,
            Api::Bedrock { converse: false, .. } => Dialect::Bedrock,
            Api::Bedrock { converse: true, .. } => Dialect::BedrockConverse,
        }
    }
}

pub(crate) async fn handle(
    api: Api,
    sim: Simulator,
    kill: KillSwitch,
    request: axum::extract::Request,
) -> Response {
    let dialect = api.dialect();
    let (parts, body) = request.into_parts();
    let key = header(&parts.headers, IDEMPOTENCY_KEY_HEADER);
    let headers: BTreeMap<String, String> = parts
        .headers
        .iter()
        .map(|(name, value)| (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    sim.state.arrive(&parts.uri, key, headers);
    if let Api::Vertex { .. } = api
        && let Some(refused) = super::vertex::unauthenticated(&sim, &parts.headers)
    {
        return refused;
    }
    if let Api::Bedrock { auth: Err((kind, message)), .. } = &api {
        return super::bedrock::refuse(403, kind, message);
    }

    // Only a header script can act before the body is read: the model name
    // (and so a queued script for a model) lives in the body.
    let mut body = Some(body);
    let mut json = None;
    let script = match header(&parts.headers, SCRIPT_HEADER) {
        Some(text) => text.parse::<Script>(),
        None => {
            let value = match read_json(dialect, body.take(), sim.max_body).await {
                Ok(value) => value,
                Err(response) => return response,
            };
            let model = match &api {
                Api::Gemini { model, .. } | Api::Vertex { model, .. } | Api::Bedrock { model, .. } => {
                    model.clone()
                }
                _ => value.get("model").and_then(Value::as_str).unwrap_or_default().to_owned(),
            };
            json = Some(value);
            match sim.state.take_script(&model) {
                Some(script) => Ok(script),
                None => model.strip_prefix("sim:").unwrap_or("ok").parse::<Script>(),
            }
        }
    };
    let script = match script {
        Ok(script) => script,
        Err(err) => return error(dialect, 400, &err.to_string()),
    };

    wait_out(&script.waits, &sim).await;
    if script.end == End::ResetBeforeBody {
        return kill.drop_connection().await;
    }
    let json = match json {
        Some(json) => json,
        None => match read_json(dialect, body.take(), sim.max_body).await {
            Ok(json) => json,
            Err(response) => return response,
        },
    };
    sim.state.record_body(key, &json);
    if api == Api::Embeddings {
        return embeddings(&sim, &json, &script, kill).await;
    }
    if let Err((status, message)) = validate(&api, &parts.headers, &json) {
        return error(dialect, status, &message);
    }
    match chat_view(&api, json) {
        Ok(json) => ending(dialect, &sim, &json, script, &parts.headers, kill).await,
        Err((status, message)) => error(dialect, status, &message),
    }
}

/// A valid request of `api` in the chat terms the simulator answers in
/// (the OpenAI and Anthropic dialects are read as they are).
fn chat_view(api: &Api, json: Value) -> Result<Value, (u16, String)> {
    Ok(match api {
        Api::Responses => super::responses::view(&json)?,
        Api::Gemini { model, stream } | Api::Vertex { publisher: Dialect::Gemini, model, stream } => {
            super::gemini::view(&json, model, *stream)
        }
        Api::Vertex { model, .. } => super::vertex::claude_view(json, model),
        Api::Bedrock { model, stream, converse: false, .. } => super::bedrock::view(&json, model, *stream),
        Api::Bedrock { model, stream, converse: true, .. } => super::converse::view(&json, model, *stream),
        _ => json,
    })
}

/// A chat request's ending, once its waits are over and its body is valid:
/// the scripted failure, or the answer.
async fn ending(
    dialect: Dialect,
    sim: &Simulator,
    json: &Value,
    script: Script,
    headers: &HeaderMap,
    kill: KillSwitch,
) -> Response {
    match script.end {
        End::ResetBeforeBody | End::ResetAfterBody => kill.drop_connection().await,
        End::ContentPolicy if dialect == Dialect::Gemini => gemini_blocked(sim, json),
        End::ContentPolicy => {
            (StatusCode::BAD_REQUEST, axum::Json(reply::content_policy(dialect))).into_response()
        }
        End::Status { code, retry_after } if dialect == Dialect::Gemini => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let body = super::gemini::error(code, "scripted failure", retry_after.as_deref());
            (status, axum::Json(body)).into_response()
        }
        End::Status { code, retry_after } => {
            let mut response = error(dialect, code, "scripted failure");
            if let Some(value) = retry_after.and_then(|v| v.parse().ok()) {
                response.headers_mut().insert(RETRY_AFTER, value);
            }
            response
        }
        End::Reply => {
            let auth = script.output.echo_auth.then(|| {
                let value = ["authorization", "x-api-key", "api-key", "x-goog-api-key"]
                    .into_iter()
                    .find_map(|name| header(headers, name));
                value.unwrap_or_default().to_owned()
            });
            answer(dialect, sim, json, &script.output, auth, kill)
        }
    }
}

/// An embeddings request's ending: the scripted failure, or the vectors.
async fn embeddings(sim: &Simulator, json: &Value, script: &Script, kill: KillSwitch) -> Response {
    match script.end {
        End::ResetBeforeBody | End::ResetAfterBody => kill.drop_connection().await,
        End::Status { code, .. } => error(Dialect::OpenAi, code, "scripted failure"),
        End::ContentPolicy | End::Reply => match super::embed::answer(json, sim.seed) {
            Ok(list) if script.output.malformed_json => {
                let cut = super::prompt::truncated(&list.to_string()).to_owned();
                ([(CONTENT_TYPE, "application/json")], cut).into_response()
            }
            Ok(list) => axum::Json(list).into_response(),
            Err(reason) => error(Dialect::OpenAi, 400, &reason),
        },
    }
}

/// The script's waits, in order, before it answers.
async fn wait_out(waits: &[Wait], sim: &Simulator) {
    for wait in waits {
        match wait {
            Wait::Delay(delay) => tokio::time::sleep(*delay).await,
            Wait::Hold(tag) => sim.state.wait_released(tag).await,
            Wait::Hang => std::future::pending().await,
        }
    }
}

fn answer(
    dialect: Dialect,
    sim: &Simulator,
    json: &Value,
    output: &Output,
    echo_auth: Option<String>,
    kill: KillSwitch,
) -> Response {
    let mut prompt = Prompt::read(json, sim.seed);
    prompt.reported_output = output.reported_output;
    if let Some(auth) = echo_auth {
        // Whole in every event's `model`, split across a stream's deltas.
        prompt.model.clone_from(&auth);
        prompt.last_user = auth;
    }
    let said = prompt.said(dialect, sim.seed, output);
    if !prompt.stream {
        let mut full = reply::body(dialect, &prompt, json, &said);
        if dialect == Dialect::BedrockConverse {
            full = super::converse::body(&full);
        }
        let full = full.to_string();
        let sent =
            if output.malformed_json { super::prompt::truncated(&full).to_owned() } else { full.clone() };
        let content_type = [(CONTENT_TYPE, "application/json".to_owned())];
        return match output.fault {
            Fault::None | Fault::NoDone | Fault::Exception | Fault::BadCrc => {
                (content_type, sent).into_response()
            }
            // Announce the whole length, deliver half: the client waits or breaks.
            fault => {
                let half = Bytes::from(super::prompt::truncated(&full).to_owned());
                let headers =
                    [(CONTENT_TYPE, "application/json".to_owned()), (CONTENT_LENGTH, full.len().to_string())];
                (headers, Body::from_stream(stream::iter([Ok(half)]).chain(tail(fault, kill))))
                    .into_response()
            }
        };
    }
    let (mut events, terminator) = reply::events(dialect, &prompt, json, &said);
    // The second event (the first after a role); the only one of a Gemini
    // function call's stream.
    let broken = if events.len() == 1 { 0 } else { 1 };
    if output.malformed_json
        && let Some(event) = events.get_mut(broken)
    {
        event.data = super::prompt::truncated(&event.data).to_owned();
    }
    if matches!(dialect, Dialect::Bedrock | Dialect::BedrockConverse) {
        let (events, terminator) = match dialect {
            Dialect::Bedrock => super::bedrock::chunks(&events, &terminator),
            _ => super::converse::frames(&events),
        };
        let frames = super::bedrock::frames(events, terminator, output.fault);
        let body =
            Body::from_stream(stream::iter(frames.into_iter().map(Ok)).chain(tail(output.fault, kill)));
        return ([(CONTENT_TYPE, "application/vnd.amazon.eventstream")], body).into_response();
    }
    let sent: Vec<String> = match output.fault {
        Fault::None | Fault::Exception | Fault::BadCrc => {
            events.iter().chain([&terminator]).map(Event::to_sse).collect()
        }
        Fault::NoDone => events.iter().map(Event::to_sse).collect(),
        Fault::Stall | Fault::Cut | Fault::Truncated => {
            events.iter().take(events.len() / 2).map(Event::to_sse).collect()
        }
    };
    let pieces = stream::iter(sent.into_iter().map(|s| Ok(Bytes::from(s))));
    let body = Body::from_stream(pieces.chain(tail(output.fault, kill)));
    ([(CONTENT_TYPE, "text/event-stream"), (CACHE_CONTROL, "no-cache")], body).into_response()
}

/// What follows the bytes sent: nothing, silence, or a dropped connection.
fn tail(fault: Fault, kill: KillSwitch) -> BoxStream<'static, Result<Bytes, Infallible>> {
    match fault {
        Fault::None | Fault::NoDone | Fault::Exception | Fault::BadCrc | Fault::Truncated => {
            stream::empty().boxed()
        }
        Fault::Stall => stream::pending().boxed(),
        Fault::Cut => stream::once(async move {
            // Yield once so hyper flushes what was sent before the cut.
            tokio::task::yield_now().await;
            kill.pull();
            std::future::pending().await
        })
        .boxed(),
    }
}

/// A Gemini prompt the safety filters blocked: a 200 in Gemini's words,
/// whole or as a stream of that one response.
fn gemini_blocked(sim: &Simulator, json: &Value) -> Response {
    let prompt = Prompt::read(json, sim.seed);
    let blocked = super::gemini::blocked(&prompt);
    if prompt.stream {
        let event = Event { name: None, data: blocked.to_string() }.to_sse();
        return ([(CONTENT_TYPE, "text/event-stream"), (CACHE_CONTROL, "no-cache")], event).into_response();
    }
    axum::Json(blocked).into_response()
}

/// What a real provider would refuse before doing any work: the status
/// (400 but for Gemini's missing key) and the reason.
fn validate(api: &Api, headers: &HeaderMap, json: &Value) -> Result<(), (u16, String)> {
    match api {
        Api::Gemini { .. } => return super::gemini::validate(headers, json),
        Api::Vertex { publisher: Dialect::Gemini, .. } => return super::gemini::validate_body(json),
        Api::Vertex { stream, .. } => super::vertex::validate_claude(json, *stream)?,
        Api::Bedrock { converse: true, .. } => {
            super::prompt::check_prefill(json)?;
            return super::converse::validate(json);
        }
        Api::Bedrock { .. } => super::bedrock::validate(json)?,
        // Checked as it is read (`super::responses::view`).
        Api::Responses => return Ok(()),
        _ => {}
    }
    if !json.get("messages").is_some_and(Value::is_array) {
        return Err((400, "`messages` must be an array".into()));
    }
    if matches!(api.dialect(), Dialect::Anthropic | Dialect::Bedrock) {
        super::thinking::check(json)?;
        super::prompt::check_prefill(json)?;
    }
    if api.dialect() == Dialect::Anthropic {
        if json.get("max_tokens").and_then(Value::as_u64).is_none() {
            return Err((400, "`max_tokens` is required".into()));
        }
        // On Vertex the version is the body's (checked above).
        if *api == Api::Chat(Dialect::Anthropic) && header(headers, "anthropic-version").is_none() {
            return Err((400, "the anthropic-version header is required".into()));
        }
    }
    Ok(())
}

/// Why a body was not read: past the limit, or broken.
pub(crate) enum Unread {
    TooLarge(usize),
    Broken(String),
}

impl Unread {
    pub(crate) fn status_and_reason(&self) -> (u16, String) {
        match self {
            Unread::TooLarge(limit) => (413, format!("the request body is larger than {limit} bytes")),
            Unread::Broken(reason) => (400, format!("cannot read the body: {reason}")),
        }
    }
}

/// The whole body, read no further than `max_body` bytes.
pub(crate) async fn read_body(body: Body, max_body: usize) -> Result<Bytes, Unread> {
    let mut frames = body.into_data_stream();
    let mut read = Vec::new();
    while let Some(frame) = frames.next().await {
        let frame = frame.map_err(|err| Unread::Broken(err.to_string()))?;
        if read.len() + frame.len() > max_body {
            return Err(Unread::TooLarge(max_body));
        }
        read.extend_from_slice(&frame);
    }
    Ok(read.into())
}

/// The body as JSON; past `max_body` bytes, the 413 a provider answers.
async fn read_json(dialect: Dialect, body: Option<Body>, max_body: usize) -> Result<Value, Response> {
    let bytes = read_body(body.unwrap_or_default(), max_body).await.map_err(|unread| {
        let (status, reason) = unread.status_and_reason();
        error(dialect, status, &reason)
    })?;
    serde_json::from_slice(&bytes).map_err(|err| error(dialect, 400, &format!("the body is not JSON: {err}")))
}

fn error(dialect: Dialect, status: u16, message: &str) -> Response {
    if matches!(dialect, Dialect::Bedrock | Dialect::BedrockConverse) {
        return super::bedrock::error(status, message);
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(reply::error(dialect, status.as_u16(), message))).into_response()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}
