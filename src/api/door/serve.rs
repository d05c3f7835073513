//! What every door does between translating a request and rendering an
//! answer: authenticate (the `Caller` extractor), take the
//! `Idempotency-Key` (or mint one, where configured), read the body within
//! its limit, submit the job, wait for it — or attach to its live stream —
//! and answer with its identity headers, or say why it has no answer.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};

use super::{Door, StreamRender};
use crate::api::idempotency::{IDEMPOTENCY_KEY, idempotency_key};
use crate::api::submit::{new_job, submit};
use crate::api::view::JOB_ID_HEADER;
use crate::api::{AppState, Caller, IDEMPOTENT_REPLAYED, Problem, ProblemType};
use crate::config::DoorConfig;
use crate::config::Keyless;
use crate::engine::{StreamEvent, Subscription};
use crate::jobs::{IdempotencyKey, Job, JobResult, JobStatus, NewJob};

/// The number of the attempt that answered.
pub const ATTEMPT_HEADER: &str = "x-intentgate-attempt";
/// The provider whose answer this is.
pub const PROVIDER_HEADER: &str = "x-intentgate-provider";
/// The model that provider says answered.
pub const MODEL_HEADER: &str = "x-intentgate-model";

/// One request through door `D`, from its body to its answer. It takes
/// the request whole: a handler that extracted `HeaderMap` would copy
/// every header.
pub async fn serve<D: Door>(
    state: &AppState,
    caller: &Caller,
    request: Request,
) -> Result<Response, Problem> {
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    // A malformed key is refused before the body is read; a missing one is
    // the route's to settle (`keyless`), once the body says which route.
    let sent = match idempotency_key(headers) {
        Ok(key) => Some(key),
        Err(_) if !headers.contains_key(IDEMPOTENCY_KEY) => None,
        Err(problem) => return Err(problem),
    };
    let body = crate::api::extract::read_body(body, state.max_body_bytes).await?;
    let mut translated = D::translate(&body, headers)?;
    D::prepare(state, caller, &mut translated).await?;
    let keyless = sent.is_none();
    let key = sent.unwrap_or_else(IdempotencyKey::minted);
    let mut new = new_job(state, caller, key, translated.job, headers)?.entered_through(D::ENTRANCE);
    if keyless {
        // Without a key there is no job to find: an unknown route is refused
        // before the key policy is asked (see `submit`).
        if state.config().route_named(new.route()).is_none() {
            return Err(Problem::model_not_found(new.route(), &state.config()));
        }
        let door = D::settings(&state.config()).clone();
        new.idempotency_key = keyless_key(state, &new, &door).await?;
    }
    let wait: Duration =
        if translated.background { Duration::ZERO } else { D::settings(&state.config()).wait.into() };
    let new = std::sync::Arc::new(new);
    let submitted = submit(state, &new, wait, translated.stream).await.map_err(|problem| {
        // A door's `model` is the route: a missing one is its 404.
        match problem.slug() == ProblemType::UnknownRoute.slug() {
            true => Problem::model_not_found(new.route(), &state.config()),
            false => problem,
        }
    })?;
    let job_id = submitted.job.id;
    if let Some(live) = submitted.live {
        return stream_live::<D>(state, submitted.job, live, submitted.replayed, wait).await;
    }
    let provider_time = crate::api::jobs::provider_time(&submitted, !wait.is_zero());
    let how = AnswerAs {
        winner: submitted.winner,
        replayed: submitted.replayed,
        stream: translated.stream,
        early: translated.background,
        result: submitted.result,
    };
    let mut response = answer::<D>(state, &submitted.job, how)
        .await
        .map_err(|problem| problem.with("job_id", job_id.to_string()))?;
    response.extensions_mut().insert(provider_time);
    Ok(crate::api::held_body::held_until_written(response, submitted.room))
}

/// The key of a request that sent none, as its route says
/// ([`crate::config::Config::keyless`]): refused, minted, or derived from
/// the caller and the request — the key of the window it falls in, or of
/// the window before when that one's job is younger than the window (so a
/// retry just past a window's end still finds it).
async fn keyless_key(state: &AppState, new: &NewJob, door: &DoorConfig) -> Result<IdempotencyKey, Problem> {
    let config = state.config();
    let route = config.route(new.route());
    match config.keyless(route, door) {
        Keyless::Refuse => Err(Problem::keyless_refused(new.route())),
        Keyless::Mint => Ok(new.idempotency_key.clone()),
        Keyless::Derive => {
            let window = route.map_or(Duration::from_secs(600), |route| route.keyless_window.into());
            let window = i64::try_from(window.as_millis()).unwrap_or(i64::MAX).max(1);
            let now = state.engine.clock().now_ms();
            let previous = IdempotencyKey::derived(&new.owner, &new.fingerprint, now / window - 1);
            let found = state.store.job_by_key(&new.owner, previous.as_str()).await;
            let found = found.map_err(|err| Problem::store(err, crate::api::StoreStage::Lookup))?;
            match found {
                Some(job) if now - job.created_at_ms < window => Ok(previous),
                _ => Ok(IdempotencyKey::derived(&new.owner, &new.fingerprint, now / window)),
            }
        }
    }
}

/// How [`answer`] answers a job.
#[derive(Debug, Default)]
pub struct AnswerAs {
    /// The attempt that completed the job, when the caller knows it.
    pub winner: Option<i32>,
    /// An earlier request's job (`Idempotent-Replayed: true`).
    pub replayed: bool,
    /// As the door's stream (a replay of it).
    pub stream: bool,
    /// A job not done yet gets the door's in-progress body, not a problem.
    pub early: bool,
    /// The job's result, when the caller has it as it was stored (the
    /// request whose own drive completed the job): not decoded again.
    pub result: Option<Box<JobResult>>,
}

/// The answer for a job as it is now: its body (or stream replay), or the
/// problem that says why there is none. `winner` is the number of the
/// attempt that completed the job, when the caller knows it (else it is read).
pub async fn answer<D: Door>(state: &AppState, job: &Job, how: AnswerAs) -> Result<Response, Problem> {
    let AnswerAs { winner, replayed, stream, early, result } = how;
    let winner = match (winner, job.completed_by) {
        (Some(number), _) => Some(number),
        (None, Some(id)) => {
            state.store.attempt_number(id).await.map_err(|err| Problem::after_commit(err, job.id))?
        }
        (None, None) => None,
    };
    if early
        && matches!(job.status, JobStatus::Pending | JobStatus::Running | JobStatus::Cancelled)
        && let Some(body) = D::unfinished(job)
    {
        let mut response = (StatusCode::OK, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if replayed {
            headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        }
        identify(headers, job, None);
        return Ok(response);
    }
    if job.status != JobStatus::Succeeded {
        return Err(not_succeeded(state, job).await?);
    }
    let result = match result {
        Some(result) => Some(*result),
        None => job.result.as_deref().and_then(JobResult::decode),
    };
    let rendered = result.and_then(|result| {
        let answered_by = (result.provider.clone(), result.model.clone());
        let rendered = match stream {
            true => Some(("text/event-stream", super::replay_stream::<D>(job, &result))),
            false => D::body(job, result).map(|body| ("application/json", body)),
        };
        rendered.map(|rendered| (answered_by, rendered))
    });
    let Some(((provider, model), (content_type, bytes))) = rendered else {
        tracing::error!(job_id = %job.id, "a succeeded job's result cannot be rendered");
        return Err(Problem::new(
            ProblemType::Internal,
            "the job's stored result cannot be read; the error is in the gateway's log",
        ));
    };
    let mut response = (StatusCode::OK, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if replayed {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    identify(headers, job, winner);
    name_provider(headers, &provider, model.as_deref());
    Ok(response)
}

/// Which provider and model answered, in headers every door carries
/// (whatever its body's `model` says).
fn name_provider(headers: &mut HeaderMap, provider: &str, model: Option<&str>) {
    if let Ok(value) = HeaderValue::from_str(provider) {
        headers.insert(PROVIDER_HEADER, value);
    }
    if let Some(value) = model.and_then(|model| HeaderValue::from_str(model).ok()) {
        headers.insert(MODEL_HEADER, value);
    }
}

/// Why a job has no answer to give (yet), as a problem naming the job.
async fn not_succeeded(state: &AppState, job: &Job) -> Result<Problem, Problem> {
    let open = match job.status {
        JobStatus::Unknown => {
            let attempts =
                state.store.attempts(job.id).await.map_err(|err| Problem::after_commit(err, job.id))?;
            attempts.into_iter().find(|a| a.state.is_open())
        }
        _ => None,
    };
    Ok(Problem::no_answer(job, open.as_ref()))
}

fn identify(headers: &mut HeaderMap, job: &Job, attempt: Option<i32>) {
    if let Ok(value) = HeaderValue::from_str(&job.id.to_string()) {
        headers.insert(JOB_ID_HEADER, value);
    }
    if let Some(number) = attempt
        && let Ok(value) = HeaderValue::from_str(&number.to_string())
    {
        headers.insert(ATTEMPT_HEADER, value);
    }
}

/// A stream that is still being produced: the response starts at its first
/// chunk — until then a failure can still fail over, invisibly to the client.
async fn stream_live<D: Door>(
    state: &AppState,
    job: Job,
    subscription: Subscription,
    replayed: bool,
    wait: Duration,
) -> Result<Response, Problem> {
    let mut events = receive(subscription).boxed();
    let first = tokio::time::timeout(wait, events.next()).await.ok().flatten();
    let attempt = match &first {
        Some(StreamEvent::Chunk { attempt, .. } | StreamEvent::Done { attempt, .. }) => *attempt,
        // Nothing was sent yet: answer as a plain request would.
        Some(StreamEvent::Failed { .. }) | None => {
            let read = state.store.job(job.id).await.map_err(|err| Problem::after_commit(err, job.id))?;
            let how = AnswerAs { replayed, stream: true, ..AnswerAs::default() };
            return answer::<D>(state, &read.unwrap_or(job), how).await;
        }
    };
    let mut render = D::stream(&job);
    // The events end with the final one: nothing follows it.
    let body = stream::iter(first).chain(events).map(move |event| {
        let bytes = match event {
            StreamEvent::Chunk { chunk, .. } => render.chunk(&chunk),
            StreamEvent::Done { .. } => render.done(),
            StreamEvent::Failed { code, message, .. } => render.failed(code, &message),
        };
        Ok::<_, Infallible>(Bytes::from(bytes))
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if replayed {
        headers.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    identify(headers, &job, Some(attempt));
    if let Ok(Some(started)) = state.store.attempt(job.id, attempt).await {
        name_provider(response.headers_mut(), &started.provider, None);
    }
    Ok(response)
}

/// The stream's events, up to and including its final one.
fn receive(subscription: Subscription) -> impl futures_util::Stream<Item = StreamEvent> {
    stream::unfold(subscription, |mut subscription| async move {
        let event = subscription.next().await?;
        Some((event, subscription))
    })
}
