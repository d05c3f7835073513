//! A response body that keeps its answer's room in the gateway's answer
//! budget (see `AnswerBudget`) until hyper has written it and let it go:
//! the rendered bytes of a large answer are memory too, and the budget is
//! what bounds how many such answers are held at once.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::response::Response;
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use intentgate_providers::Held;

/// `response`, its body holding `room` until the body is dropped. Its size
/// is the body's, so the response keeps its `Content-Length`.
pub fn held_until_written(response: Response, room: Held) -> Response {
    response.map(|body| Body::new(HeldBody { body, _room: room }))
}

struct HeldBody {
    body: Body,
    /// Kept only to be dropped with the body.
    _room: Held,
}

impl HttpBody for HeldBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use intentgate_providers::AnswerBudget;

    /// The room goes with the body, not with the response around it, and
    /// the body's length is still known.
    #[tokio::test]
    async fn the_room_is_held_until_the_body_is_dropped() {
        let budget = AnswerBudget::new(64 * 1024 * 1024);
        let room = Held::of(budget.room_for(1024 * 1024).await);
        let held = budget.held_bytes();
        assert!(held > 0);
        let response = held_until_written(Response::new(Body::from(vec![b'x'; 1024 * 1024])), room);
        assert_eq!(response.body().size_hint().exact(), Some(1024 * 1024), "Content-Length kept");
        let (parts, body) = response.into_parts();
        drop(parts);
        assert_eq!(budget.held_bytes(), held, "held while the body is");
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        assert_eq!(bytes.len(), 1024 * 1024);
        assert_eq!(budget.held_bytes(), 0, "given back once written");
    }
}
