//! What a stream has brought so far, and the whole answer it makes once it
//! ended: the chunks the job's readers got (and a replay sends again), the
//! chat chunks the answer is assembled from, and the text — carried into a
//! continuation when the stream was cut (`continuation.rs`).

use std::sync::Arc;

use intentgate_providers::{ChatRequest, ChatResponse, Held, Protocol, Provider, StreamChunk};

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
#[derive(Clone, Default)]
pub(super) struct Gathered {
    pub(super) chunks: Vec<Arc<serde_json::Value>>,
    pub(super) chat_chunks: Vec<Arc<serde_json::Value>>,
    deltas: Vec<String>,
    pub(super) text: String,
    finish_reason: Option<String>,
    usage: Option<intentgate_providers::Usage>,
    skipped: Skipped,
    /// A chunk went out in the provider's own protocol (passed through).
    pub(super) passed_through: bool,
}

impl Gathered {
    /// Takes `chunk` in: what the job's readers are to get, or `None` for an
    /// event no client would see (a ping, a block's end, a skipped event).
    pub(super) fn take(&mut self, provider: &str, chunk: StreamChunk) -> Option<Arc<serde_json::Value>> {
        if chunk.skipped.is_some() {
            self.skipped.note(provider, chunk.skipped);
            return None;
        }
        let chat = (!chunk.chunk.is_null()).then(|| Arc::new(chunk.chunk));
        let delivered = match chunk.native {
            Some(event) => {
                self.passed_through = true;
                Arc::new(crate::jobs::JobResult::native_chunk(event))
            }
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
    pub(super) fn into_response(
        mut self,
        provider: &Provider,
        chat: &ChatRequest,
        room: Held,
    ) -> ChatResponse {
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
            chunks: Some(self.chunks),
            raw_held: true,
            model: None,
            native,
            room,
        })
    }
}

/// The events of a stream that were skipped (`skip_malformed_events`).
#[derive(Clone, Debug, Default)]
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
