//! Submitting an intent: the one path by which both `POST /v1/jobs` and
//! `POST /v1/chat/completions` create or find a job (R2, R3). It validates
//! the job request and fingerprints its canonical form; the engine's one
//! entry ([`crate::engine::Engine::submit`]) lets the database's unique
//! constraint decide, drives a new job and waits. Errors come back as
//! problems that say whether the job was committed.

use std::time::Duration;

use axum::http::HeaderMap;
use serde::Deserialize as _;
use serde_json::Value;

use super::{AppState, Caller, Problem, ProblemType, StoreStage};
use crate::engine::{Submission, SubmitError, Submitted};
use crate::jobs::{
    IdempotencyKey, InputKind, InvalidMessage, InvalidParam, JobRequest, NewJob, validate_embedding,
    validate_messages, validate_params,
};

/// Submits `new` and waits up to `wait`: plain (`stream = false`) or with
/// its live stream opened first.
pub async fn submit(
    state: &AppState,
    new: &std::sync::Arc<NewJob>,
    wait: Duration,
    stream: bool,
) -> Result<Submitted, Problem> {
    let submission = if state.config().route_named(new.route()).is_none() {
        job_of_unknown_route(state, new, wait, stream).await?
    } else if stream {
        state.engine.submit_streamed(new, wait).await
    } else {
        state.engine.submit(new, wait).await
    };
    match submission {
        Ok(Submission::Accepted(submitted)) => Ok(*submitted),
        Ok(Submission::Conflict { job_id }) => Err(Problem::key_reused(job_id)),
        Ok(Submission::Refused(refusal)) => {
            Err(Problem::limit(&refusal, &state.engine.currency(), state.engine.clock().now_ms()))
        }
        Err(SubmitError::BeforeCommit(err)) => Err(Problem::engine(err, StoreStage::BeforeCommit)
            .with("idempotency_key", new.idempotency_key.as_str())),
        Err(SubmitError::AfterCommit { job_id, source }) => Err(Problem::after_commit(source, job_id)),
    }
}

/// A request whose route is not configured: the job its key already names,
/// if there is one — a key's job is found whatever the configuration says
/// now (a reload may have removed the route since the job was created), and
/// replayed, or refused as a conflict when the body differs — else
/// `unknown-route`, with nothing stored.
async fn job_of_unknown_route(
    state: &AppState,
    new: &NewJob,
    wait: Duration,
    stream: bool,
) -> Result<Result<Submission, SubmitError>, Problem> {
    let found = state.store.job_by_key(&new.owner, new.idempotency_key.as_str()).await;
    match found.map_err(|err| Problem::store(err, StoreStage::Lookup))? {
        Some(job) => Ok(state.engine.replay(new, job, wait, stream).await),
        None => Err(Problem::unknown_route(new.route())),
    }
}

/// The job `body` would create, validated, with its id already chosen (so a
/// stream can be opened under it before it is driven). Its route is not
/// checked here: a route that is not configured is refused by [`submit`]
/// only when its key names no job yet.
pub fn new_job(
    state: &AppState,
    caller: &Caller,
    key: IdempotencyKey,
    body: Value,
    headers: &HeaderMap,
) -> Result<NewJob, Problem> {
    super::text::refuse_nul_in_json(&body)?;
    if let Some(messages) = body.pointer("/input/messages") {
        validate_messages(messages)
            .map_err(|err| invalid_messages(err.under("/input/messages"), "Invalid job request"))?;
    }
    let mut request = JobRequest::deserialize(&body).map_err(|err| {
        let detail = in_the_clients_terms(&err.to_string());
        Problem::new(ProblemType::InvalidBody, format!("the body is not a job request: {detail}"))
            .titled("Invalid job request")
    })?;
    match request.input.kind() {
        Ok(InputKind::Chat) => validate_params(&request.params)
            .map_err(|err| invalid_params(err.under("/params"), "Invalid job request"))?,
        Ok(InputKind::Embeddings) => {
            let input = request.input.embed.as_ref().unwrap_or(&Value::Null);
            validate_embedding(input, &request.params).map_err(|err| {
                let prefix = if err.path.is_empty() { "/input/embed" } else { "/params" };
                invalid_params(err.under(prefix), "Invalid job request")
            })?;
        }
        Err(reason) => {
            return Err(Problem::new(ProblemType::InvalidBody, reason)
                .titled("Invalid job request")
                .with("path", "/input"));
        }
    }
    let native_door = matches!(
        request.door,
        Some(crate::jobs::DoorName::AnthropicMessages | crate::jobs::DoorName::OpenAiResponses)
    );
    if request.native.is_some() && !native_door {
        return Err(Problem::new(
            ProblemType::InvalidBody,
            "`native` is a door's request carried beside its chat view: only with `door` `anthropic-messages` \
             or `openai-responses`",
        )
        .titled("Invalid job request")
        .with("path", "/native"));
    }
    // An alias is stored as the route's name: the same intent either way.
    let mut body = body;
    if let Some(route) = state.config().route_named(&request.route)
        && route.name != request.route
    {
        request.route = route.name.clone();
        body["route"] = route.name.clone().into();
    }
    if !caller.0.rights().may_use(&request.route) {
        return Err(Problem::route_not_allowed(&request.route));
    }
    let tags = super::tags::request_tags(headers, &request.params)?;
    let new = NewJob::new(caller.0.owner.clone(), key, request, body).map_err(|err| {
        Problem::new(ProblemType::MalformedJson, format!("the body cannot be canonicalised: {err}"))
    })?;
    Ok(new.attributed(caller.0.attribution(tags)))
}

/// A deserializer's message with the gateway's type names replaced by what
/// a client sends: it never sees `JobInput`, only the JSON it wrote.
fn in_the_clients_terms(message: &str) -> String {
    const NAMES: [(&str, &str); 4] = [
        ("struct JobRequest", "a job request: an object with `route` and `input`"),
        ("struct JobInput", "an object with `messages` or `embed`"),
        ("struct ChatMessage", "a message: an object with `role` and `content`"),
        ("struct NativeRequest", "an object with `body`"),
    ];
    NAMES.iter().fold(message.to_owned(), |text, (name, words)| text.replace(name, words))
}

/// `invalid-body` for messages refused at the door, with the JSON pointer of
/// the fault both in the detail (for people) and as `path` (for code), so a
/// client can point at the message it built wrong.
pub fn invalid_messages(err: InvalidMessage, title: &'static str) -> Problem {
    Problem::new(ProblemType::InvalidBody, format!("the messages do not follow OpenAI's chat schema: {err}"))
        .titled(title)
        .with("path", err.path)
}

/// `invalid-body` for a generation parameter of the wrong type or out of
/// range, with its JSON pointer as `path`, like [`invalid_messages`].
pub fn invalid_params(err: InvalidParam, title: &'static str) -> Problem {
    Problem::new(ProblemType::InvalidBody, format!("a generation parameter is invalid: {err}"))
        .titled(title)
        .with("path", err.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_error_names_json_not_the_gateways_types() {
        let body = serde_json::json!({"route": "chat", "input": "hello"});
        let err = JobRequest::deserialize(&body).err().map(|err| err.to_string()).unwrap_or_default();
        let said = in_the_clients_terms(&err);
        assert!(!said.contains("JobInput") && said.contains("`messages` or `embed`"), "{said}");
    }
}
