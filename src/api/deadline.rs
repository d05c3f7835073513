//! The body-read timeout: hyper times a request's headers, not its body, so
//! a client announcing `Content-Length: 100` and sending 10 bytes would hold
//! its handler (and connection) forever. Every request body gets a deadline
//! counted from its headers; reading past it fails with [`BodyTimedOut`],
//! which the body readers answer with 408 (`body-timeout`).

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;

use super::{Problem, ProblemType};

/// The error a body read gets once its deadline passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

/// Middleware: gives the request's body a deadline `timeout` from now.
pub async fn body_deadline(State(timeout): State<Duration>, request: Request, next: Next) -> Response {
    let deadline = tokio::time::Instant::now() + timeout;
    let (parts, body) = request.into_parts();
    let frames = body.into_data_stream();
    let timed = futures_util::stream::unfold(Some(frames), move |frames| async move {
        let mut frames = frames?;
        match tokio::time::timeout_at(deadline, frames.next()).await {
            Ok(Some(item)) => Some((item, Some(frames))),
            Ok(None) => None,
            // Dropping `frames` stops reading; one error, then the end.
            Err(_) => Some((Err(axum::Error::new(BodyTimedOut(timeout))), None)),
        }
    });
    next.run(Request::from_parts(parts, Body::from_stream(timed))).await
}

/// The 408 problem, when `err` (or what caused it) is a [`BodyTimedOut`].
pub fn timed_out(err: &(dyn std::error::Error + 'static)) -> Option<Problem> {
    let mut cause = Some(err);
    while let Some(err) = cause {
        if let Some(BodyTimedOut(timeout)) = err.downcast_ref::<BodyTimedOut>() {
            return Some(Problem::new(
                ProblemType::BodyTimeout,
                format!("the request body did not arrive within {timeout:?} of its headers"),
            ));
        }
        cause = err.source();
    }
    None
}
