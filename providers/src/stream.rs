//! Turning a streamed body into chunks, with the idle and total deadlines
//! and the rule that only a seen terminator makes a stream complete.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::time::{Instant, timeout_at};

use crate::answer_budget::{AnswerBudget, Held, Room};
use crate::anthropic;
use crate::bedrock::{self, eventstream};
use crate::config::{AnswerLimits, Timeouts};
use crate::decoded::StreamEvent;
use crate::gemini;
use crate::openai;
use crate::outcome::Failure;
use crate::sse::SseParser;
use crate::transport::error_chain;
use crate::types::StreamChunk;

/// The chunks of one streamed answer. It ends (`None`) only after the
/// dialect's terminator; every other ending is an `Err`, after which the
/// stream yields nothing more. The room it took in its gateway's answer
/// budget is held while it is read and, once it ended, by whoever keeps
/// the answer its chunks make ([`ChunkStream::take_room`]).
pub struct ChunkStream {
    chunks: Pin<Box<dyn Stream<Item = Result<StreamChunk, Failure>> + Send>>,
    /// The room, left here by the stream at its end.
    room: Arc<Mutex<Option<Room>>>,
}

impl Stream for ChunkStream {
    type Item = Result<StreamChunk, Failure>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.chunks.as_mut().poll_next(cx)
    }
}

impl ChunkStream {
    /// The room the stream took, once it ended whole (none before, or
    /// after a failure: the stream gave it back as it stopped).
    pub fn take_room(&self) -> Held {
        let room = self.room.lock().ok().and_then(|mut slot| slot.take());
        room.map(Held::of).unwrap_or_default()
    }

    /// The same stream, each item passed through `each`, its room kept.
    pub(crate) fn map_items<F>(self, each: F) -> ChunkStream
    where
        F: FnMut(Result<StreamChunk, Failure>) -> Result<StreamChunk, Failure> + Send + 'static,
    {
        ChunkStream { chunks: Box::pin(self.chunks.map(each)), room: self.room }
    }
}

pub(crate) enum Decoder {
    OpenAi,
    Anthropic(anthropic::StreamState),
    Gemini(gemini::StreamState),
    Responses(crate::responses::StreamState),
    Converse(crate::converse::StreamState),
}

impl Decoder {
    fn decode(&mut self, data: Bytes) -> Result<StreamEvent, Failure> {
        match self {
            Decoder::OpenAi => openai::decode_event(data),
            Decoder::Anthropic(state) => state.decode_event(data),
            Decoder::Gemini(state) => state.decode_event(data),
            Decoder::Responses(state) => state.decode_event(data),
            Decoder::Converse(state) => state.decode_event(data),
        }
    }

    /// For a dialect whose stream has no terminator (Gemini's ends with its
    /// body after the finishing chunk): the body ended cleanly, so the
    /// stream did, with this last chunk (if any); `None` when the body
    /// ended too soon, or the dialect has a terminator that did not come.
    /// For a dialect whose last event says the stream is over (Responses'
    /// `response.completed`): over, with this last chunk (if any).
    fn take_end(&mut self) -> Option<Option<StreamChunk>> {
        match self {
            Decoder::Responses(state) => state.take_end(),
            Decoder::Converse(state) => state.take_end(),
            Decoder::OpenAi | Decoder::Anthropic(_) | Decoder::Gemini(_) => None,
        }
    }

    fn end_of_body(&mut self) -> Option<Option<StreamChunk>> {
        match self {
            Decoder::Gemini(state) => state.end_of_body(),
            Decoder::OpenAi | Decoder::Anthropic(_) | Decoder::Responses(_) | Decoder::Converse(_) => None,
        }
    }
}

/// How a streamed body is cut into events: server-sent events, or AWS's
/// binary event stream, whose frames each carry one event of the dialect
/// (see `crate::bedrock`). Either way the dialect's [`Decoder`] sees the
/// event's data alone.
pub(crate) enum Framing {
    Sse(SseParser),
    EventStream(eventstream::Decoder, bedrock::Payload),
}

impl Framing {
    pub(crate) fn sse() -> Self {
        Framing::Sse(SseParser::default())
    }

    /// Frames past `max_event_bytes` are refused from their prelude.
    pub(crate) fn event_stream(limits: AnswerLimits, payload: bedrock::Payload) -> Self {
        Framing::EventStream(eventstream::Decoder::new(limits.max_event_bytes), payload)
    }

    fn push(&mut self, piece: &[u8]) {
        match self {
            Framing::Sse(parser) => parser.push(piece),
            Framing::EventStream(decoder, _) => decoder.push(piece),
        }
    }

    fn pending(&self) -> usize {
        match self {
            Framing::Sse(parser) => parser.pending(),
            Framing::EventStream(decoder, _) => decoder.pending(),
        }
    }

    /// The data of the next whole event, if the bytes buffered hold one;
    /// an `Err` is a malformed frame or an exception the stream carried.
    fn next_event(&mut self) -> Option<Result<Bytes, Failure>> {
        match self {
            Framing::Sse(parser) => parser.next_event().map(|event| Ok(event.data)),
            Framing::EventStream(decoder, payload) => loop {
                match bedrock::event_data(decoder.next_frame()?, *payload) {
                    Ok(Some(data)) => return Some(Ok(data)),
                    Ok(None) => {}
                    Err(failure) => return Some(Err(failure)),
                }
            },
        }
    }
}

type Body = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

struct Driver {
    body: Body,
    framing: Framing,
    decoder: Decoder,
    idle: Duration,
    total: Duration,
    deadline: Instant,
    finished: bool,
    limits: AnswerLimits,
    /// Where the stream takes room as it grows past
    /// [`UNCOUNTED`](crate::UNCOUNTED) bytes, the room it took (held as long
    /// as the stream), and where it leaves that room when it ended whole.
    budget: AnswerBudget,
    room: Room,
    left: Arc<Mutex<Option<Room>>>,
    /// An event the decoder cannot read is skipped, not the end.
    skip_malformed: bool,
    /// Bytes of the stream read so far.
    read: usize,
    /// A chunk carried a finish reason, and one carried usage: the answer is
    /// complete even if its terminator never comes.
    saw_finish: bool,
    saw_usage: bool,
    /// The terminator came (its last chunk, if any, is out): nothing more.
    ended: bool,
}

/// How a stream is read: its provider's timeouts and limits, and the
/// call's deadline.
pub(crate) struct Reading {
    pub(crate) timeouts: Timeouts,
    pub(crate) limits: AnswerLimits,
    pub(crate) budget: AnswerBudget,
    pub(crate) deadline: Instant,
}

/// The chunks of `response`'s body; `skip_malformed`: an event the decoder
/// cannot read is skipped (a chunk that says why) instead of ending it.
pub(crate) fn chunk_stream(
    response: reqwest::Response,
    framing: Framing,
    decoder: Decoder,
    reading: Reading,
    skip_malformed: bool,
) -> ChunkStream {
    let Reading { timeouts, limits, budget, deadline } = reading;
    let left = Arc::new(Mutex::new(None));
    let driver = Driver {
        body: Box::pin(response.bytes_stream()),
        framing,
        decoder,
        idle: timeouts.stream_idle,
        total: timeouts.total,
        deadline,
        finished: false,
        limits,
        budget,
        room: Room::default(),
        left: Arc::clone(&left),
        skip_malformed,
        read: 0,
        saw_finish: false,
        saw_usage: false,
        ended: false,
    };
    let chunks = Box::pin(futures_util::stream::unfold(driver, |mut driver| async move {
        let item = driver.next().await?;
        Some((item, driver))
    }));
    ChunkStream { chunks, room: left }
}

impl Driver {
    /// One event's data decoded; an unreadable one skipped when the
    /// provider says so: a framing error (a bad CRC, a frame too large) is
    /// never skipped, as what follows it cannot be trusted.
    fn decode(&mut self, data: Bytes) -> Result<StreamEvent, Failure> {
        match self.decoder.decode(data) {
            Err(Failure::BadOutput { reason, raw }) if self.skip_malformed => {
                Ok(StreamEvent::Chunk(StreamChunk {
                    chunk: serde_json::Value::Null,
                    delta: String::new(),
                    finish_reason: None,
                    usage: None,
                    raw,
                    native: None,
                    skipped: Some(reason),
                }))
            }
            other => other,
        }
    }

    async fn next(&mut self) -> Option<Result<StreamChunk, Failure>> {
        if self.finished {
            return None;
        }
        let result = self.advance().await;
        if !matches!(result, Some(Ok(_))) {
            self.finished = true;
        }
        if result.is_none()
            && let Ok(mut left) = self.left.lock()
        {
            *left = Some(std::mem::take(&mut self.room));
        }
        result
    }

    /// Room in the answer budget for what the stream has read, twice that
    /// taken when it outgrows what it holds; waits, up to the deadline.
    async fn take_room(&mut self) -> Result<(), Failure> {
        if self.read <= self.room.covers() {
            return Ok(());
        }
        let wanted = self.read.saturating_mul(2).min(self.limits.max_response_bytes);
        timeout_at(self.deadline, self.budget.grow(&mut self.room, wanted)).await.map_err(|_| {
            Failure::unknown(format!(
                "the stream found no room in the gateway's answer budget within {:?} (total timeout)",
                self.total
            ))
        })
    }

    async fn advance(&mut self) -> Option<Result<StreamChunk, Failure>> {
        if self.ended {
            return None;
        }
        loop {
            if let Some(last) = self.decoder.take_end() {
                self.ended = true;
                return last.map(Ok);
            }
            if let Some(event) = self.framing.next_event() {
                let decoded = match event {
                    Ok(data) => self.decode(data),
                    Err(failure) => Err(failure),
                };
                return match decoded {
                    Ok(StreamEvent::Chunk(chunk)) => {
                        self.saw_finish |= chunk.finish_reason.is_some();
                        self.saw_usage |= chunk.usage.is_some();
                        Some(Ok(chunk))
                    }
                    Ok(StreamEvent::End(last)) => {
                        self.ended = true;
                        last.map(Ok)
                    }
                    Err(failure) => Some(Err(failure)),
                };
            }
            // Every complete event is out: what is left is one unfinished.
            if self.framing.pending() > self.limits.max_event_bytes {
                return Some(Err(Failure::bad_output(
                    format!(
                        "a stream event is larger than this provider's limit of {} bytes (max_event_bytes); \
                         the stream was not read further",
                        self.limits.max_event_bytes
                    ),
                    Bytes::new(),
                )));
            }
            let idle_until = Instant::now() + self.idle;
            let reason = match timeout_at(idle_until.min(self.deadline), self.body.next()).await {
                Ok(Some(Ok(piece))) => {
                    self.read = self.read.saturating_add(piece.len());
                    if self.read > self.limits.max_response_bytes {
                        return Some(Err(crate::transport::too_large(self.limits.max_response_bytes, &[])));
                    }
                    if let Err(failure) = self.take_room().await {
                        return Some(Err(failure));
                    }
                    self.framing.push(&piece);
                    continue;
                }
                Ok(Some(Err(err))) => format!("stream broke off: {}", error_chain(&err)),
                Ok(None) if self.framing.pending() == 0 => {
                    if let Some(last) = self.decoder.end_of_body() {
                        self.ended = true;
                        return last.map(Ok);
                    }
                    // Finished and counted, only `[DONE]` (or `message_stop`)
                    // missing: the answer is whole, nothing is left to come.
                    if self.saw_finish && self.saw_usage {
                        return None;
                    }
                    "stream ended without its terminator".to_owned()
                }
                Ok(None) => "stream ended without its terminator".to_owned(),
                Err(_) if idle_until < self.deadline => {
                    format!("stream idle for {:?} (stream_idle timeout)", self.idle)
                }
                Err(_) => format!("stream not complete within {:?} (total timeout)", self.total),
            };
            return Some(Err(Failure::unknown(reason)));
        }
    }
}
