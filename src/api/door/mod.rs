//! The seam a **door** implements: one client protocol (OpenAI chat
//! completions, Anthropic Messages, …) spoken onto the one job machinery.
//!
//! A door translates four things and nothing else:
//!
//! | what | [`Door`] item |
//! |---|---|
//! | its request → a checked job request (then canonicalised and fingerprinted by `submit::new_job`, as every job is) | [`Door::translate`] |
//! | a succeeded job's stored result → its response body | [`Door::body`] |
//! | the job's stream chunks (OpenAI `chat.completion.chunk`s, live or stored) → its stream events | [`Door::stream`], a [`StreamRender`] |
//! | a problem → its error body | [`Door::error`] |
//!
//! Everything between — the caller, the `Idempotency-Key` (or a minted
//! one), the body limit, submitting to the engine, waiting, attaching a
//! duplicate to a live stream, the answer's identity headers, why a job has
//! no answer — is [`serve`], the same for every door. Rendering is a pure
//! function of the stored job, and a replayed stream goes through the same
//! renderer as the live one, so a replay is byte for byte the original.
//!
//! A door reads its body into its own typed request ([`typed`], the fields
//! it reads by name checked first, see [`Expected`]) and converts that with
//! `TryFrom` into the [`JobRequest`], its parameters checked in its own
//! protocol's names: one parse, one check.
//!
//! Adding a door: a module under `src/api/` with a type implementing
//! [`Door`], a handler that calls [`serve`] with it, and its routes in
//! `api::router` under [`errors`] for that door.

pub mod errors;
#[cfg(test)]
mod fingerprints;
mod serve;

use std::collections::BTreeMap;

use axum::body::Bytes;
use serde_json::{Map, Value};

use super::{AppState, Caller, Problem};
use crate::jobs::{Entrance, Job, JobRequest, JobResult};
pub use serve::{AnswerAs, answer, serve};

/// How a part of a door's request reaches a provider whose dialect does
/// not speak the door's protocol (each such door has its table: the
/// `fields` module beside its translation). A provider that speaks it is
/// sent the request as the client sent it, whatever the table says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    /// Said in the chat view's terms.
    Translated,
    /// Advice a provider may ignore without changing the answer's meaning
    /// (cache breakpoints and keys, context clearing, service tier): left
    /// out of the chat view, documented.
    Hint,
    /// Changes the answer, and the chat view has no way to say it: a
    /// provider of another dialect is passed over with it as the reason.
    Untranslated,
}

/// A door's request, translated.
pub struct Translated {
    /// The job request, checked in the door's own terms.
    pub job: JobRequest,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// The job whose conversation this request continues (the Responses
    /// API's `previous_response_id`; see its door's `prepare`).
    pub continues: Option<uuid::Uuid>,
    /// Answer at once, before the job is done (the Responses API's
    /// `background`): how the answer is delivered, not part of the intent.
    pub background: bool,
}

impl Translated {
    /// A request answered when its job is done, streamed or not.
    pub fn new(job: JobRequest, stream: bool) -> Translated {
        Translated { job, stream, continues: None, background: false }
    }
}

/// One client protocol onto the job machinery (see the module doc).
pub trait Door: Send + Sync + 'static {
    /// Its stream renderer.
    type Stream: StreamRender;

    /// What its jobs record as the door they came through.
    const ENTRANCE: Entrance;

    /// The door's request body (and the headers that are part of its
    /// intent, for a door that carries its protocol natively) → the job
    /// request, or why it is not one (with the JSON pointer of the fault,
    /// as the client sent it).
    fn translate(body: &Bytes, headers: &axum::http::HeaderMap) -> Result<Translated, Problem>;

    /// A succeeded job's response body; `None` if its stored result has
    /// nothing this door can render (the job then answers `internal`). The
    /// result is the door's to take apart: it is this answer's alone
    /// (decoded for it, or handed over by the drive that stored it), so a
    /// door that passes the provider's completion on changes it in place
    /// instead of copying it.
    fn body(job: &Job, result: JobResult) -> Option<Vec<u8>>;

    /// The renderer of `job`'s stream, for its live events or its replay.
    fn stream(job: &Job) -> Self::Stream;

    /// The body for a job not done yet (or cancelled before it was), for a
    /// door that answers before it is ([`Translated::background`]) and says
    /// so in its own shape; `None`: the door has no such answer, and the
    /// job's problem (`job-in-progress`, `job-completed`) is given.
    fn unfinished(_job: &Job) -> Option<Vec<u8>> {
        None
    }

    /// A problem's members (RFC 9457, with its extensions) → this door's
    /// error body. The problem's own members stay in it, so a client that
    /// knows intentgate can read `job_id` and the problem type.
    fn error(problem: Map<String, Value>) -> Map<String, Value>;

    /// What the door does to its translated request before it is
    /// submitted, with the store at hand (the Responses door puts the
    /// conversation of `previous_response_id` first); nothing by default.
    fn prepare(
        _state: &AppState,
        _caller: &Caller,
        _translated: &mut Translated,
    ) -> impl std::future::Future<Output = Result<(), Problem>> + Send {
        async { Ok(()) }
    }

    /// This door's settings (`wait`, `mint_idempotency_keys`): `[openai]`
    /// unless the door speaks another protocol.
    fn settings(config: &crate::config::Config) -> &crate::config::DoorConfig {
        &config.openai
    }

    /// The `Content-Type` of [`Door::error`]'s body.
    const ERROR_CONTENT_TYPE: &'static str = "application/problem+json";
}

/// A door's stream, one event at a time. Stateful: a protocol whose events
/// open and close blocks (Anthropic's) keeps track here.
pub trait StreamRender: Send + 'static {
    /// The bytes for one chunk (OpenAI `chat.completion.chunk` shape).
    fn chunk(&mut self, chunk: &Value) -> Vec<u8>;
    /// The bytes that end a stream that ended well.
    fn done(&mut self) -> Vec<u8>;
    /// An in-band error: the stream broke after it began. What follows
    /// must not read as a clean end.
    fn failed(&mut self, code: &str, message: &str) -> Vec<u8>;
}

/// Why a required field of a door's body is not what it must be: missing
/// (`is required`) or of the wrong kind (`must be …, not a number`), so a
/// client learns which of the two it got wrong.
pub fn required(field: &str, found: Option<&Value>, what: &str) -> String {
    match found {
        None | Some(Value::Null) => format!("`{field}` is required: {what}"),
        Some(Value::Number(number)) => format!("`{field}` must be {what}, not {number}"),
        Some(other) => format!("`{field}` must be {what}, not {}", crate::jobs::json_kind(other)),
    }
}

/// A top-level field a door's typed request reads by name, and what it
/// must be: checked on the JSON before the typed read, so a request that
/// gets it wrong is told which field and what it must be, in the door's
/// words rather than a deserializer's.
pub struct Expected {
    field: &'static str,
    what: &'static str,
    required: bool,
    is: fn(&Value) -> bool,
}

impl Expected {
    /// A field the request must have.
    pub const fn required(field: &'static str, what: &'static str, is: fn(&Value) -> bool) -> Self {
        Expected { field, what, required: true, is }
    }

    /// A field the request may leave out (or send as `null`).
    pub const fn optional(field: &'static str, what: &'static str, is: fn(&Value) -> bool) -> Self {
        Expected { field, what, required: false, is }
    }
}

/// `model`, as every door reads it: a route, by name or alias.
pub const MODEL: Expected =
    Expected::required("model", "a route name or alias (GET /v1/models lists them)", Value::is_string);

/// `stream`, as every door that streams reads it.
pub const STREAM: Expected = Expected::optional("stream", "a boolean", Value::is_boolean);

/// A door's body → its typed request `T`, each of `expected` checked first
/// (see [`Expected`]). What `T` keeps as JSON (the fields a door carries
/// without reading) cannot fail to read.
pub fn typed<T: serde::de::DeserializeOwned>(
    fields: Map<String, Value>,
    title: &'static str,
    expected: &[Expected],
) -> Result<T, Problem> {
    for Expected { field, what, required: must, is } in expected {
        match fields.get(*field) {
            None | Some(Value::Null) if !must => {}
            Some(value) if is(value) => {}
            found => {
                return Err(Problem::invalid_field(title, required(field, found, what), format!("/{field}")));
            }
        }
    }
    T::deserialize(Value::Object(fields))
        .map_err(|err| Problem::invalid_field(title, format!("the body cannot be read: {err}"), ""))
}

/// A chat parameter's JSON pointer (`/stop/0`) → the pointer of the door's
/// own field it was translated from (`/stop_sequences/0`), `renames` giving
/// the door's name for each chat name it changes, so a fault is named as
/// the client sent it.
pub fn client_path(path: &str, renames: &[(&str, &str)]) -> String {
    let path = path.strip_prefix('/').unwrap_or(path);
    let (param, rest) = path.split_once('/').unwrap_or((path, ""));
    let field = renames.iter().find(|(chat, _)| *chat == param).map_or(param, |(_, door)| door);
    match rest.is_empty() {
        true => format!("/{field}"),
        false => format!("/{field}/{rest}"),
    }
}

/// The request's headers of `names` (lower case) that change what a
/// provider does, carried with the door's native request.
pub fn carried_headers(headers: &axum::http::HeaderMap, names: &[&str]) -> BTreeMap<String, String> {
    names
        .iter()
        .filter_map(|name| Some(((*name).to_owned(), headers.get(*name)?.to_str().ok()?.to_owned())))
        .collect()
}

/// A door's body as a JSON object: I-JSON, no NUL anywhere, an object —
/// else the problem that says which (titled for the door's request).
pub fn json_object(body: &Bytes, title: &'static str) -> Result<Map<String, Value>, Problem> {
    let value = super::ijson::parse(body)?;
    super::text::refuse_nul_in_json(&value)?;
    match value {
        Value::Object(fields) => Ok(fields),
        _ => {
            Err(Problem::new(super::ProblemType::InvalidBody, "the body must be a JSON object").titled(title))
        }
    }
}

/// The whole stream of a succeeded job, through the door's renderer: its
/// stored chunks, or (for a job answered in one piece) one chunk made of
/// its completion.
pub fn replay_stream<D: Door>(job: &Job, result: &JobResult) -> Vec<u8> {
    let mut render = D::stream(job);
    let mut out = Vec::new();
    match result.chunks.as_deref().filter(|chunks| chunks.iter().all(|chunk| chunk.is_object())) {
        Some(chunks) if !chunks.is_empty() => chunks.iter().for_each(|chunk| out.extend(render.chunk(chunk))),
        // The provider's own answer, in its own protocol's stream.
        _ if result.native.is_some() => {
            let native = JobResult::native_chunk(result.native.clone().unwrap_or_default());
            out.extend(render.chunk(&native));
        }
        _ => out.extend(render.chunk(&completion_as_chunk(result.completion.as_ref()))),
    }
    out.extend(render.done());
    out
}

/// A `chat.completion` as the one chunk that carries all of it: each
/// choice's message as its delta (tool calls numbered, as deltas are),
/// with its finish reason and the usage.
fn completion_as_chunk(completion: Option<&Value>) -> Value {
    let Some(completion) = completion else {
        return Value::Object(Map::new());
    };
    let choices: Vec<Value> = completion["choices"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|choice| {
            let mut delta = choice["message"].clone();
            if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (index, call) in calls.iter_mut().enumerate() {
                    if let Some(call) = call.as_object_mut() {
                        call.insert("index".into(), index.into());
                    }
                }
            }
            serde_json::json!({"index": choice["index"], "delta": delta, "finish_reason": choice["finish_reason"]})
        })
        .collect();
    let mut chunk = serde_json::json!({"choices": choices});
    if let (Some(usage), Some(fields)) = (completion.get("usage"), chunk.as_object_mut()) {
        fields.insert("usage".into(), usage.clone());
    }
    chunk
}
