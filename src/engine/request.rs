//! A job's request, parsed once: the typed [`JobRequest`] and the
//! provider's normalised request ([`Work`]: a [`ChatRequest`] or an
//! [`EmbeddingRequest`]) every attempt renders its body from. The door builds it for a new job; a driver builds it once from the
//! stored row when it picks up a job it did not create. The provider
//! choice, the capability checks, the reservation and the outgoing body all
//! take it by reference: nothing downstream parses the request again.

use intentgate_providers::{
    CallContext, ChatRequest, Content, EmbeddingRequest, Failure, Message, Native, Outcome, Protocol,
    Provider, Rendered,
};
use serde_json::{Map, Value};

use crate::jobs::{ChatMessage, DoorName, InputKind, JobRequest};

/// What a provider is asked to do for a job.
#[derive(Debug, Clone)]
pub enum Work {
    /// Answer a conversation (every door but embeddings).
    Chat(ChatRequest),
    /// Embed inputs; never streamed, no completion.
    Embed(EmbeddingRequest),
}

impl Work {
    /// The body `provider` is sent for this work (see `Provider::render`).
    pub fn render(&self, provider: &Provider, stream: bool) -> Result<Rendered, Failure> {
        match self {
            Work::Chat(chat) => provider.render(chat, stream),
            Work::Embed(embed) => provider.render_embeddings(embed),
        }
    }

    /// Why `provider` cannot be sent this work, if it cannot.
    pub fn cannot_express(&self, provider: &Provider) -> Option<String> {
        match self {
            Work::Chat(chat) => provider.cannot_express(chat),
            Work::Embed(_) => provider.cannot_embed(),
        }
    }

    /// One non-streamed call of `provider`, sending `body` (this work
    /// rendered for it).
    pub async fn call(&self, provider: &Provider, body: &Rendered, context: &CallContext) -> Outcome {
        match self {
            Work::Chat(chat) => provider.call(chat, body, context).await,
            Work::Embed(embed) => provider.call_embed(embed, body, context).await,
        }
    }
}

/// A job request in the two forms the engine uses.
#[derive(Debug, Clone)]
pub struct PreparedRequest {
    /// The route that serves it.
    pub route: String,
    /// The request as a provider is sent it, before the provider's own
    /// overrides and the completion limit a reserving attempt is given.
    pub work: Work,
    /// Whether the caller asked for a stream (`params.stream`).
    pub stream: bool,
    /// The length of the stored canonical form, in bytes: an upper bound on
    /// the request's tokens that costs no tokenizer.
    pub canonical_len: usize,
}

impl PreparedRequest {
    /// From the typed request and the length of its canonical form.
    pub fn new(request: &JobRequest, canonical_len: usize) -> Result<PreparedRequest, serde_json::Error> {
        Ok(PreparedRequest {
            route: request.route.clone(),
            work: to_work(request)?,
            stream: request.params.get("stream").and_then(Value::as_bool) == Some(true),
            canonical_len,
        })
    }

    /// From a job row's stored canonical request.
    pub fn from_stored(canonical: &str) -> Result<PreparedRequest, serde_json::Error> {
        let request: JobRequest = serde_json::from_str(canonical)?;
        PreparedRequest::new(&request, canonical.len())
    }

    /// The completion limit the client set, in whichever field it used
    /// (none is needed for embeddings, which complete nothing).
    pub fn completion_limit(&self) -> Option<u64> {
        match &self.work {
            Work::Chat(chat) => {
                let legacy = chat.max_tokens.map(u64::from);
                let current = chat.extra.get("max_completion_tokens").and_then(Value::as_u64);
                legacy.max(current)
            }
            Work::Embed(_) => Some(0),
        }
    }

    /// The request with the assistant's answer begun with `text` (a
    /// prefill, which a continuation of a cut stream sends).
    pub fn prefilled(&self, text: &str) -> PreparedRequest {
        let work = match &self.work {
            Work::Chat(chat) => Work::Chat(chat.prefilled(text)),
            Work::Embed(embed) => Work::Embed(embed.clone()),
        };
        PreparedRequest {
            route: self.route.clone(),
            work,
            stream: self.stream,
            canonical_len: self.canonical_len,
        }
    }

    /// The chat request, when the job asks for a chat answer.
    pub fn chat(&self) -> Option<&ChatRequest> {
        match &self.work {
            Work::Chat(chat) => Some(chat),
            Work::Embed(_) => None,
        }
    }
}

fn to_work(request: &JobRequest) -> Result<Work, serde_json::Error> {
    match request.input.kind() {
        Ok(InputKind::Embeddings) => Ok(Work::Embed(to_embedding_request(request))),
        _ => to_chat_request(request).map(Work::Chat),
    }
}

/// `params` (`dimensions`, `encoding_format`, `user`) become top-level
/// fields beside `input`.
fn to_embedding_request(request: &JobRequest) -> EmbeddingRequest {
    let mut extra: Map<String, Value> = request.params.clone();
    extra.remove("model");
    extra.remove("input");
    let input = request.input.embed.clone().unwrap_or(Value::Null);
    EmbeddingRequest { input, model: None, extra }
}

/// `params` become top-level request fields (`temperature`, `max_tokens`,
/// vendor fields such as `top_k` pass through); `messages` come from `input`.
/// Typed field by field, as serde would read the same object: a `null`
/// limit is no limit, a limit of the wrong kind is an error.
fn to_chat_request(request: &JobRequest) -> Result<ChatRequest, serde_json::Error> {
    let mut extra: Map<String, Value> = request.params.clone();
    for field in ["stream", "model", "messages"] {
        extra.remove(field);
    }
    let max_tokens =
        take(&mut extra, "max_tokens", |value| value.as_u64().and_then(|n| u32::try_from(n).ok()))?;
    let temperature = take(&mut extra, "temperature", Value::as_f64)?;
    let messages = request.input.messages.iter().map(to_message).collect::<Result<_, _>>()?;
    let native = native_of(request).map(std::sync::Arc::new);
    Ok(ChatRequest { model: None, messages, max_tokens, temperature, stream: None, extra, native })
}

/// Takes `key` out of `fields` as `read` reads it: absent or `null` is `None`.
fn take<T>(
    fields: &mut Map<String, Value>,
    key: &str,
    read: impl Fn(&Value) -> Option<T>,
) -> Result<Option<T>, serde_json::Error> {
    match fields.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => read(&value)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("`{key}` cannot be {value}"))),
    }
}

fn to_message(message: &ChatMessage) -> Result<Message, serde_json::Error> {
    let content = match message.content() {
        Value::Null => Content::None,
        Value::String(text) => Content::Text(text.clone()),
        Value::Array(parts) => Content::Parts(parts.clone()),
        other => return Err(serde::de::Error::custom(format!("a message's content cannot be {other}"))),
    };
    Ok(Message { role: message.role.clone(), content, extra: message.extra.clone() })
}

/// The client's own request, for a door whose protocol a dialect may speak.
fn native_of(request: &JobRequest) -> Option<Native> {
    let native = request.native.as_ref()?;
    let protocol = match request.door? {
        DoorName::AnthropicMessages => Protocol::AnthropicMessages,
        DoorName::OpenAiResponses => Protocol::OpenAiResponses,
        DoorName::OpenAiEmbeddings => return None,
    };
    Some(Native {
        protocol,
        body: native.body.clone(),
        headers: native.headers.iter().map(|(name, value)| (name.clone(), value.clone())).collect(),
        untranslated: native.untranslated.clone(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::jobs::{accepted_message_shapes, validate_messages};

    /// Whatever the door lets in must become a provider request: a job that
    /// is stored but cannot be turned into one could never be driven.
    #[test]
    fn every_accepted_shape_becomes_a_chat_request() -> Result<(), serde_json::Error> {
        for (name, messages) in accepted_message_shapes() {
            assert_eq!(validate_messages(&messages), Ok(()), "{name}");
            let body =
                json!({"route": "chat", "input": {"messages": messages}, "params": {"temperature": 0}});
            let request: JobRequest = serde_json::from_value(body)?;
            let prepared = PreparedRequest::new(&request, 0)?;
            let messages = prepared.chat().map(|chat| chat.messages.len());
            assert_eq!(messages, Some(request.input.messages.len()), "{name}");
        }
        Ok(())
    }

    #[test]
    fn the_stored_form_reads_back_with_its_stream_flag_and_limit() -> Result<(), serde_json::Error> {
        let stored = r#"{"input":{"messages":[{"content":"hi","role":"user"}]},"params":{"max_completion_tokens":9,"max_tokens":5,"stream":true},"route":"chat"}"#;
        let prepared = PreparedRequest::from_stored(stored)?;
        assert!(prepared.stream);
        assert_eq!(prepared.completion_limit(), Some(9));
        assert_eq!(prepared.canonical_len, stored.len());
        let chat = prepared.chat().expect("a chat job");
        assert!(!chat.extra.contains_key("stream"), "stream is the transport's, not a field");
        Ok(())
    }

    #[test]
    fn an_embed_input_is_an_embeddings_request() -> Result<(), serde_json::Error> {
        let stored = r#"{"input":{"embed":["a","b"]},"params":{"dimensions":8},"route":"embeddings"}"#;
        let prepared = PreparedRequest::from_stored(stored)?;
        let Work::Embed(embed) = &prepared.work else { panic!("not an embeddings request") };
        assert_eq!(embed.inputs(), 2);
        assert_eq!(embed.extra.get("dimensions"), Some(&json!(8)));
        assert_eq!(prepared.completion_limit(), Some(0));
        Ok(())
    }
}
