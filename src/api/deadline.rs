//! The body-read timeout: hyper times a request's headers, not its body, so
//! a client announcing `Content-Length: 100` and sending 10 bytes would hold
//! its handler (and connection) forever. Every request body gets a deadline
//! counted from its headers; reading past it fails with [`BodyTimedOut`],
//! which the body readers answer with 408 (`body-timeout`).

use std::time::Duration;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};

use super::{Problem, ProblemType};

/// The error a body read gets once its deadline passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

/// Middleware: gives the request's body a deadline `timeout` from now.
pub async fn body_deadline(State(timeout): State<Duration>, request: Request, next: Next) -> Response {
    let deadline = tokio::time::Instant::now() + timeout;
    let (parts, body) = request.into_parts();
    let timed =
        TimedBody { inner: body, sleep: Box::pin(tokio::time::sleep_until(deadline)), timeout, done: false };
    next.run(Request::from_parts(parts, Body::new(timed))).await
}

/// A body that fails with [`BodyTimedOut`] once its deadline passed. It
/// keeps the inner body's size hint, so a `Content-Length` over the limit
/// is still refused before anything is read.
struct TimedBody {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    done: bool,
}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.sleep.as_mut().poll(cx) {
            // One error, then the end: the rest is not read.
            Poll::Ready(()) => {
                self.done = true;
                Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(self.timeout)))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
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
