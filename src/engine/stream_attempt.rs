//! One streamed attempt. The difference from a plain one is the first byte:
//! until the provider's first chunk arrives the attempt may still fail over
//! like any other (phase `Live`); once a chunk has gone to the client the
//! answer is this attempt's (phase `Streamed`), and a later break ends the
//! stream with an in-band error — `unknown` if the upstream was cut — never
//! with a fallback. What each outcome means is decided in `decide.rs`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use intentgate_providers::{
    CallContext, ChatRequest, ChatResponse, Failure, Outcome, Protocol, Provider, Rendered, StreamChunk,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::conclude::Next;
use super::conclude::{LateCall, Seen};
use super::decide::Phase;
use super::{Engine, EngineError, StreamEvent};
use crate::config::RouteConfig;
use crate::jobs::Attempt;

/// How a streamed call ended, and whether a chunk had been passed on.
pub(super) struct Streamed {
    pub outcome: Outcome,
    pub after_first_chunk: bool,
}

/// A streamed call under way: its task, and the signal of its first chunk
/// passed on (or of its end, whichever comes first).
pub(super) struct StreamCall {
    pub task: JoinHandle<Option<Streamed>>,
    pub first_chunk: oneshot::Receiver<()>,
    pub started: std::time::Instant,
}

impl Engine {
    pub(super) async fn run_stream_attempt(
        &self,
        route: &RouteConfig,
        attempt: Attempt,
        provider: Arc<Provider>,
        sending: (ChatRequest, Result<Rendered, Failure>),
        context: CallContext,
        live: Phase,
    ) -> Result<Next, EngineError> {
        let offer = self.gate().offer(&route.name, &sending.0);
        let StreamCall { task, first_chunk, started } = self.spawn_stream(provider, sending, context, None);
        let attempt_timeout: Duration = route.attempt_timeout.into();
        tokio::select! {
            _ = first_chunk => {}
            () = tokio::time::sleep(attempt_timeout) => {
                let reason = format!("no first chunk within the route's attempt_timeout of {}", route.attempt_timeout);
                let call = Some(LateCall { call: self.outcome_only(task), streamed: true, offer });
                return self.conclude(&attempt, &route.name, live, Seen::Silence { reason, call }).await;
            }
        };
        self.finish_stream(route, attempt, (task, started), offer, live).await
    }

    /// The rest of a stream whose first chunk went out (or which ended
    /// before one did): its outcome, concluded in phase `Streamed` once a
    /// chunk had reached the client, else in `live`.
    pub(super) async fn finish_stream(
        &self,
        route: &RouteConfig,
        attempt: Attempt,
        (task, call_started): (JoinHandle<Option<Streamed>>, std::time::Instant),
        offer: super::conclude::Offered,
        live: Phase,
    ) -> Result<Next, EngineError> {
        let joined = task.await;
        self.record_call_time(&attempt, call_started.elapsed(), true);
        let streamed = match joined {
            Ok(Some(streamed)) => streamed,
            Ok(None) => Streamed {
                outcome: Err(Failure::Unknown { reason: "the gateway is shutting down".into() }),
                after_first_chunk: true,
            },
            Err(join) => Streamed {
                outcome: Err(Failure::Unknown { reason: format!("the stream task failed: {join}") }),
                after_first_chunk: true,
            },
        };
        let phase = if streamed.after_first_chunk { Phase::Streamed } else { live };
        let seen = match streamed.outcome {
            Ok(response) => Seen::Answer { response, streamed: true, offer },
            Err(failure) => Seen::Failure(failure),
        };
        self.conclude(&attempt, &route.name, phase, seen).await
    }

    /// Sends `chat`'s rendered body and reads the provider's stream, passing
    /// every chunk to the job's readers as it arrives, and assembles the
    /// whole answer. `raw` of the result is the JSON list of the chunks,
    /// which a replay sends again. In a hedged race (`claimant`), its first
    /// chunk goes out only if it claims the job's stream; else the stream
    /// is read to its end unseen, its answer to be `superseded`.
    pub(super) fn spawn_stream(
        &self,
        provider: Arc<Provider>,
        (chat, body): (ChatRequest, Result<Rendered, Failure>),
        context: CallContext,
        claimant: Option<super::stream_claim::Claimant>,
    ) -> StreamCall {
        let engine = self.clone();
        let (first_chunk, first_chunk_seen) = oneshot::channel();
        let call_started = std::time::Instant::now();
        let number = i32::try_from(context.attempt).unwrap_or(i32::MAX);
        let task = self.tasks().spawn_watch(async move {
            let job_id = context.job_id;
            let started = match body {
                Ok(body) => provider.call_stream(&chat, &body, &context).await,
                Err(failure) => Err(failure),
            };
            let mut stream = match started {
                Ok(stream) => stream,
                Err(failure) => return Streamed { outcome: Err(failure), after_first_chunk: false },
            };
            let mut first_chunk = Some(first_chunk);
            // Unseen: a hedged attempt that did not claim the job's stream.
            let mut unseen = false;
            let mut gathered = Gathered::default();
            while let Some(item) = stream.next().await {
                let chunk = match item {
                    Ok(chunk) => chunk,
                    Err(failure) => {
                        return Streamed { outcome: Err(failure), after_first_chunk: first_chunk.is_none() };
                    }
                };
                let Some(delivered) = gathered.take(provider.name(), chunk) else { continue };
                if first_chunk.is_some()
                    && !unseen
                    && let Some(claimant) = &claimant
                {
                    unseen = !claimant.claim(&engine).await;
                }
                if unseen {
                    continue;
                }
                if let Some(signal) = first_chunk.take() {
                    metrics::histogram!(crate::telemetry::TIME_TO_FIRST_TOKEN, "provider" => provider.name().to_owned())
                        .record(call_started.elapsed().as_secs_f64());
                    let _ = signal.send(());
                }
                engine.streams().publish(job_id, StreamEvent::Chunk { attempt: number, chunk: delivered });
            }
            let after_first_chunk = first_chunk.is_none();
            if let Some(signal) = first_chunk.take() {
                let _ = signal.send(());
            }
            Streamed { outcome: Ok(gathered.into_response(&provider, &chat)), after_first_chunk }
        });
        StreamCall { task, first_chunk: first_chunk_seen, started: call_started }
    }

    /// The stream task, seen by a late listener only for its outcome.
    pub(super) fn outcome_only(&self, task: JoinHandle<Option<Streamed>>) -> JoinHandle<Option<Outcome>> {
        self.tasks().spawn_watch(async move {
            match task.await {
                Ok(Some(streamed)) => streamed.outcome,
                Ok(None) => Err(Failure::Unknown { reason: "the gateway is shutting down".into() }),
                Err(join) => Err(Failure::Unknown { reason: format!("the stream task failed: {join}") }),
            }
        })
    }
}

/// A provider secret split across the stream's deltas (each event was
/// scrubbed alone as it passed, live): scrubbed in the chunks that are
/// stored and replayed, each chunk's delta text replaced wherever it
/// appears whole in the chunk.
fn scrub_split_secrets(provider: &Provider, chunks: &mut [Arc<serde_json::Value>], deltas: &[String]) {
    let Some(scrubbed) = provider.redact_split(deltas) else { return };
    for ((chunk, old), new) in chunks.iter_mut().zip(deltas).zip(scrubbed) {
        if *old != new && !old.is_empty() {
            replace_text(Arc::make_mut(chunk), old, &new);
        }
    }
}

/// Every string of `value` equal to `old` becomes `new`.
fn replace_text(value: &mut serde_json::Value, old: &str, new: &str) {
    match value {
        serde_json::Value::String(text) if text == old => new.clone_into(text),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|item| replace_text(item, old, new)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|item| replace_text(item, old, new)),
        _ => {}
    }
}

/// What a stream has brought so far: what the job's readers got and a
/// replay sends again (the provider's own events when the request passed
/// through), the chat chunks the answer is assembled from, each delivered
/// chunk's text (to scrub a secret split across them), and its totals.
#[derive(Default)]
struct Gathered {
    chunks: Vec<Arc<serde_json::Value>>,
    chat_chunks: Vec<Arc<serde_json::Value>>,
    deltas: Vec<String>,
    text: String,
    finish_reason: Option<String>,
    usage: Option<intentgate_providers::Usage>,
    skipped: Skipped,
}

impl Gathered {
    /// Takes `chunk` in: what the job's readers are to get, or `None` for an
    /// event no client would see (a ping, a block's end, a skipped event).
    fn take(&mut self, provider: &str, chunk: StreamChunk) -> Option<Arc<serde_json::Value>> {
        if chunk.skipped.is_some() {
            self.skipped.note(provider, chunk.skipped);
            return None;
        }
        let chat = (!chunk.chunk.is_null()).then(|| Arc::new(chunk.chunk));
        let delivered = match chunk.native {
            Some(event) => Arc::new(crate::jobs::JobResult::native_chunk(event)),
            None => chat.clone()?,
        };
        self.text.push_str(&chunk.delta);
        self.deltas.push(chunk.delta);
        self.chunks.push(delivered.clone());
        self.chat_chunks.extend(chat);
        self.finish_reason = chunk.finish_reason.or(self.finish_reason.take());
        self.usage = chunk.usage.or(self.usage);
        Some(delivered)
    }

    /// The whole answer, assembled once the stream ended, secrets scrubbed.
    fn into_response(mut self, provider: &Provider, chat: &ChatRequest) -> ChatResponse {
        scrub_split_secrets(provider, &mut self.chunks, &self.deltas);
        let completion = self.skipped.named_in(assembled(&self.chat_chunks, self.usage));
        let native = chat.native.as_ref().and_then(|native| native_answer(native.protocol, &self.chunks));
        provider.redact_assembled(ChatResponse {
            completion,
            text: self.text,
            json: None,
            usage: self.usage,
            finish_reason: self.finish_reason,
            raw: serde_json::to_vec(&self.chunks).unwrap_or_default().into(),
            model: None,
            native,
            // A stream's room is held while it is read (`answer_budget.rs`).
            room: intentgate_providers::Held::default(),
        })
    }
}

/// The events of a stream that were skipped (`skip_malformed_events`).
#[derive(Debug, Default)]
struct Skipped {
    count: usize,
    first: Option<String>,
}

impl Skipped {
    fn note(&mut self, provider: &str, reason: Option<String>) {
        metrics::counter!(crate::telemetry::STREAM_EVENTS_SKIPPED, "provider" => provider.to_owned())
            .increment(1);
        tracing::warn!(provider, reason = reason.as_deref(), "a malformed stream event was skipped");
        self.count += 1;
        self.first = self.first.take().or(reason);
    }

    /// The assembled answer, saying how many events were skipped and why
    /// the first was (`skipped_events`), when any was: it lacks what they said.
    fn named_in(self, mut completion: serde_json::Value) -> serde_json::Value {
        if let (Some(first), Some(fields)) = (self.first, completion.as_object_mut()) {
            fields.insert("skipped_events".into(), serde_json::json!({"count": self.count, "first": first}));
        }
        completion
    }
}

/// The chat completion the stream's chunks make. A dialect that reports
/// usage the client did not ask to see in the stream (a translated one)
/// still reports it to the charge.
fn assembled(
    chat_chunks: &[Arc<serde_json::Value>],
    usage: Option<intentgate_providers::Usage>,
) -> serde_json::Value {
    let mut completion = intentgate_providers::assemble(chat_chunks);
    if let (Some(usage), Some(fields)) = (usage, completion.as_object_mut()) {
        fields.entry("usage").or_insert_with(|| {
            serde_json::json!({"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens})
        });
    }
    completion
}

/// A passed-through stream answers a plain request with its own protocol's
/// whole answer, assembled from its events.
fn native_answer(protocol: Protocol, chunks: &[Arc<serde_json::Value>]) -> Option<serde_json::Value> {
    let events: Vec<&serde_json::Value> =
        chunks.iter().filter_map(|chunk| crate::jobs::JobResult::native_event(chunk)).collect();
    (!events.is_empty()).then(|| intentgate_providers::assemble_native(protocol, &events)).flatten()
}
