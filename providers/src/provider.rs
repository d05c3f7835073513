//! The one entry point: a configured provider, dispatched by dialect.

use std::sync::Arc;

use reqwest::header::CONTENT_TYPE;
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::anthropic;
use crate::bedrock;
use crate::config::{ProviderSettings, SettingsError, Timeouts};
use crate::converse;
use crate::decoded::Decoded;
use crate::dialect::Dialect;
use crate::embeddings::{self, EmbeddingRequest};
use crate::gemini;
use crate::openai;
use crate::outcome::{Failure, Outcome, OutcomeClass};
use crate::overrides;
use crate::rendered::Rendered;
use crate::responses;
use crate::stream::{ChunkStream, Decoder, Framing, Reading, chunk_stream};
use crate::transport::{Endpoint, Paths, read_body};
use crate::types::{CallContext, ChatRequest, ChatResponse};
use crate::vertex;

/// A provider ready to call. Cheap to share behind an `Arc`; it owns its
/// HTTP client (and so its connection pool and connect timeout).
#[derive(Debug)]
pub enum Provider {
    OpenAi(OpenAi),
    Anthropic(Anthropic),
    Gemini(Gemini),
    Bedrock(Bedrock),
    Converse(Converse),
    Responses(Responses),
}

/// An OpenAI-dialect endpoint; build it with [`Provider::new`].
#[derive(Debug)]
pub struct OpenAi(Endpoint);

/// An Anthropic-dialect endpoint (Anthropic's API, or Claude on Vertex AI);
/// build it with [`Provider::new`].
#[derive(Debug)]
pub struct Anthropic(Endpoint, anthropic::Host);

/// A Gemini-dialect endpoint (one model's methods); build it with [`Provider::new`].
#[derive(Debug)]
pub struct Gemini(Endpoint);

/// An OpenAI Responses API endpoint (OpenAI's, or Azure's); build it with
/// [`Provider::new`].
#[derive(Debug)]
pub struct Responses(Endpoint);

/// An Amazon Bedrock model (Claude through `InvokeModel`); build it with [`Provider::new`].
#[derive(Debug)]
pub struct Bedrock(Endpoint);

/// An Amazon Bedrock model through `Converse` (any model Bedrock hosts);
/// build it with [`Provider::new`].
#[derive(Debug)]
pub struct Converse(Endpoint);

impl Provider {
    pub fn new(config: ProviderSettings) -> Result<Self, SettingsError> {
        if let Some(address) = config.vertex.clone() {
            return Ok(match config.dialect {
                Dialect::Anthropic => Provider::Anthropic(Anthropic(
                    vertex::endpoint(config, address)?,
                    anthropic::Host::Vertex,
                )),
                _ => Provider::Gemini(Gemini(vertex::endpoint(config, address)?)),
            });
        }
        Ok(match config.dialect {
            Dialect::OpenAi => match config.azure.clone() {
                None => Provider::OpenAi(OpenAi(Endpoint::new(
                    config,
                    Paths {
                        chat: openai::PATH.into(),
                        chat_stream: None,
                        embeddings: embeddings::PATH.into(),
                    },
                    openai::auth,
                    &[],
                )?)),
                Some(azure) => Provider::OpenAi(OpenAi(Endpoint::new(
                    config,
                    Paths {
                        chat: azure.path("chat/completions"),
                        chat_stream: None,
                        embeddings: azure.path("embeddings"),
                    },
                    openai::azure_auth,
                    &[],
                )?)),
            },
            Dialect::Anthropic => Provider::Anthropic(Anthropic(
                Endpoint::new(
                    config,
                    Paths {
                        chat: anthropic::PATH.into(),
                        chat_stream: None,
                        embeddings: embeddings::PATH.into(),
                    },
                    anthropic::auth,
                    &[anthropic::VERSION],
                )?,
                anthropic::Host::Anthropic,
            )),
            Dialect::OpenAiResponses => {
                let embeddings = embeddings::PATH.into();
                Provider::Responses(Responses(match config.azure.clone() {
                    None => {
                        let paths = Paths { chat: responses::PATH.into(), chat_stream: None, embeddings };
                        Endpoint::new(config, paths, openai::auth, &[])?
                    }
                    Some(azure) => {
                        let paths = Paths { chat: azure.responses_path(), chat_stream: None, embeddings };
                        Endpoint::new(config, paths, openai::azure_auth, &[])?
                    }
                }))
            }
            Dialect::Gemini => {
                let paths = gemini::paths(&config.model);
                Provider::Gemini(Gemini(Endpoint::new(config, paths, gemini::auth, &[])?))
            }
            Dialect::Bedrock => {
                let paths = bedrock::paths(&config.model);
                Provider::Bedrock(Bedrock(Self::bedrock_endpoint(config, paths)?))
            }
            Dialect::BedrockConverse => {
                let paths = converse::paths(&config.model);
                Provider::Converse(Converse(Self::bedrock_endpoint(config, paths)?))
            }
        })
    }

    /// A Bedrock endpoint at `paths`: signed with the AWS keys (scrubbed
    /// from failures like a key) or sent with a Bedrock API key.
    fn bedrock_endpoint(config: ProviderSettings, paths: Paths) -> Result<Endpoint, SettingsError> {
        let address = config.bedrock.clone().ok_or(SettingsError::BedrockRegion)?;
        let endpoint = Endpoint::new(config, paths, bedrock::auth, &[])?;
        Ok(match address.credentials {
            Some(keys) => {
                let secrets =
                    std::iter::once(keys.secret_access_key.clone()).chain(keys.session_token.clone());
                secrets
                    .fold(endpoint, Endpoint::scrubbing)
                    .with_authorizer(Arc::new(bedrock::Credentials { keys, region: address.region }))
            }
            None => endpoint,
        })
    }

    pub fn name(&self) -> &str {
        &self.endpoint().name
    }

    pub fn model(&self) -> &str {
        &self.endpoint().model
    }

    pub fn timeouts(&self) -> Timeouts {
        self.endpoint().timeouts
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Provider::OpenAi(_) => Dialect::OpenAi,
            Provider::Anthropic(_) => Dialect::Anthropic,
            Provider::Gemini(_) => Dialect::Gemini,
            Provider::Bedrock(_) => Dialect::Bedrock,
            Provider::Converse(_) => Dialect::BedrockConverse,
            Provider::Responses(_) => Dialect::OpenAiResponses,
        }
    }

    fn endpoint(&self) -> &Endpoint {
        match self {
            Provider::OpenAi(OpenAi(endpoint))
            | Provider::Anthropic(Anthropic(endpoint, _))
            | Provider::Gemini(Gemini(endpoint))
            | Provider::Bedrock(Bedrock(endpoint))
            | Provider::Converse(Converse(endpoint))
            | Provider::Responses(Responses(endpoint)) => endpoint,
        }
    }

    /// One non-streamed call of `req`, rendered here (see
    /// [`Provider::call`]).
    pub async fn chat(&self, req: &ChatRequest, ctx: &CallContext) -> Outcome {
        self.call(req, &self.render(req, false)?, ctx).await
    }

    /// One non-streamed call sending `body`, rendered from `req` by
    /// [`Provider::render`]. `req.stream` is ignored; `req.model` is
    /// replaced by the configured model. Every way this can end is in the
    /// returned outcome — it never panics and never retries.
    pub async fn call(&self, req: &ChatRequest, body: &Rendered, ctx: &CallContext) -> Outcome {
        let span = tracing::debug_span!("provider_call", provider = %self.name(), job_id = %ctx.job_id, attempt = ctx.attempt);
        async {
            let outcome = self
                .call_unredacted(req, body, ctx)
                .await
                .map(|response| self.endpoint().redactor.redact_response(response))
                .map_err(|failure| self.endpoint().redactor.redact(failure));
            match &outcome {
                Ok(_) => tracing::debug!(class = %OutcomeClass::Ok, "provider call finished"),
                Err(failure) => {
                    tracing::debug!(class = %failure.class(), error = %failure, "provider call failed")
                }
            }
            outcome
        }
        .instrument(span)
        .await
    }

    async fn call_unredacted(&self, req: &ChatRequest, body: &Rendered, ctx: &CallContext) -> Outcome {
        let start = Instant::now();
        let endpoint = self.endpoint();
        if body.is_stream() {
            return Err(Failure::NotSent {
                reason: "a stream's body sent as a plain call".into(),
                local: true,
            });
        }
        let response = self.send(body, req, ctx, start).await?;
        let (raw, room) = endpoint.read_answer(response, start).await?;
        let bad = |reason: String| Failure::bad_output(reason, raw.clone());
        // The client's own protocol answers as the provider gave it: parsed
        // once, and the chat view decoded from that parse.
        let native = match self.passes_through(req) {
            Some(_) => {
                Some(serde_json::from_slice::<Value>(&raw).map_err(|err| bad(format!("not JSON: {err}")))?)
            }
            None => None,
        };
        let Decoded { completion, text, usage, finish_reason, model } = match (self, &native) {
            (Provider::Anthropic(_) | Provider::Bedrock(_), Some(message)) => {
                anthropic::decode_parsed(message).map_err(bad)
            }
            (Provider::Responses(_), Some(response)) => responses::chat_view(response).map_err(bad),
            (Provider::OpenAi(_), _) => openai::decode_response(&raw).map_err(bad),
            (Provider::Anthropic(_) | Provider::Bedrock(_), None) => {
                anthropic::decode_response(&raw).map_err(bad)
            }
            (Provider::Gemini(_), _) => {
                gemini::decode_response(&raw).map_err(|err| err.into_failure(raw.clone()))
            }
            (Provider::Responses(_), None) => responses::decode_response(&raw).map_err(bad),
            (Provider::Converse(_), _) => converse::decode_response(&raw, converse::asks_json(req)),
        }?;
        let json = match ctx.expect_json {
            false => None,
            true => Some(serde_json::from_str::<Value>(&text).map_err(|err| {
                Failure::bad_output(format!("JSON was asked for, the answer is not JSON: {err}"), raw.clone())
            })?),
        };
        let room = crate::Held::of(room);
        let raw_held = native.is_some() || matches!(self, Provider::OpenAi(_));
        Ok(ChatResponse {
            completion,
            text,
            json,
            usage,
            finish_reason,
            raw,
            chunks: None,
            raw_held,
            model,
            native,
            room,
        })
    }

    /// The client's own request, when this provider's dialect speaks its
    /// protocol: then it is sent that, not the chat view's translation.
    fn passes_through<'a>(&self, req: &'a ChatRequest) -> Option<&'a crate::Native> {
        req.native.as_deref().filter(|native| native.protocol.spoken_by(self.dialect()))
    }

    /// One streamed call. Resolves once the response headers are in: an
    /// `Err` here is the whole outcome; after that the stream carries it
    /// (see [`ChunkStream`]). `expect_json` is not checked on streams — the
    /// caller assembles the text.
    pub async fn chat_stream(&self, req: &ChatRequest, ctx: &CallContext) -> Result<ChunkStream, Failure> {
        self.call_stream(req, &self.render(req, true)?, ctx).await
    }

    /// One streamed call sending `body`, rendered from `req` for a stream
    /// by [`Provider::render`]; otherwise as [`Provider::chat_stream`].
    pub async fn call_stream(
        &self,
        req: &ChatRequest,
        body: &Rendered,
        ctx: &CallContext,
    ) -> Result<ChunkStream, Failure> {
        let span = tracing::debug_span!("provider_stream", provider = %self.name(), job_id = %ctx.job_id, attempt = ctx.attempt);
        let started = self.stream_unredacted(req, body, ctx).instrument(span.clone()).await;
        let stream = match started {
            Ok(stream) => stream,
            Err(failure) => {
                let failure = self.endpoint().redactor.redact(failure);
                span.in_scope(
                    || tracing::debug!(class = %failure.class(), error = %failure, "provider stream failed"),
                );
                return Err(failure);
            }
        };
        let redactor = self.endpoint().redactor.clone();
        Ok(stream.map_items(move |item| {
            item.map(|chunk| redactor.redact_chunk(chunk)).map_err(|failure| {
                let failure = redactor.redact(failure);
                span.in_scope(
                    || tracing::debug!(class = %failure.class(), error = %failure, "provider stream failed"),
                );
                failure
            })
        }))
    }

    async fn stream_unredacted(
        &self,
        req: &ChatRequest,
        body: &Rendered,
        ctx: &CallContext,
    ) -> Result<ChunkStream, Failure> {
        let start = Instant::now();
        let endpoint = self.endpoint();
        let deadline = endpoint.deadline(start);
        if !body.is_stream() {
            return Err(Failure::NotSent {
                reason: "a plain call's body sent as a stream".into(),
                local: true,
            });
        }
        let response = self.send(body, req, ctx, start).await?;
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if is_json {
            // A complete JSON body where a stream was asked for: proven bad.
            let limit = endpoint.answer_limits.max_response_bytes;
            let raw = read_body(response, deadline, endpoint.timeouts.total, limit).await?;
            return Err(Failure::bad_output("a stream was asked for, the answer is plain JSON", raw));
        }
        let asked = req.extra.get("stream_options").and_then(|options| options.get("include_usage"));
        let include_usage = asked == Some(&Value::Bool(true));
        let passthrough = self.passes_through(req).is_some();
        let decoder = match self {
            Provider::OpenAi(_) => Decoder::OpenAi,
            Provider::Responses(_) => {
                Decoder::Responses(responses::StreamState::new(include_usage, passthrough))
            }
            Provider::Anthropic(_) | Provider::Bedrock(_) => {
                Decoder::Anthropic(anthropic::StreamState::new(include_usage, passthrough))
            }
            Provider::Gemini(_) => Decoder::Gemini(gemini::StreamState::new(include_usage)),
            Provider::Converse(_) => {
                Decoder::Converse(converse::StreamState::new(include_usage, converse::asks_json(req)))
            }
        };
        let framing = match self {
            Provider::Bedrock(_) => Framing::event_stream(endpoint.answer_limits, bedrock::Payload::Chunk),
            Provider::Converse(_) => Framing::event_stream(endpoint.answer_limits, bedrock::Payload::Event),
            _ => Framing::sse(),
        };
        let budget = endpoint.answer_budget.clone();
        let reading =
            Reading { timeouts: endpoint.timeouts, limits: endpoint.answer_limits, budget, deadline };
        let skip = endpoint.skip_malformed_events;
        Ok(chunk_stream(response, framing, decoder, reading, skip))
    }

    /// Sends a chat body (with the headers the client's own request carries,
    /// when it passes through, but to Bedrock, which is sent them in the
    /// body); a Gemini rejection gets the wait its body names.
    async fn send(
        &self,
        body: &Rendered,
        req: &ChatRequest,
        ctx: &CallContext,
        start: Instant,
    ) -> Result<reqwest::Response, Failure> {
        // Bedrock takes the client's betas in the body (see `render`).
        let mut carried = match self {
            Provider::Bedrock(_) | Provider::Converse(_) => &[][..],
            _ => self.passes_through(req).map_or(&[][..], |native| native.headers.as_slice()),
        };
        let on_vertex: Vec<(String, String)>;
        if let Provider::Anthropic(Anthropic(_, anthropic::Host::Vertex)) = self {
            on_vertex = carried.iter().filter(|(name, _)| vertex::carries(name)).cloned().collect();
            carried = &on_vertex;
        }
        let sent = self.endpoint().send(body, carried, ctx, start).await;
        match self {
            // Google says a rejection's wait in its body, Claude's on Vertex too.
            Provider::Gemini(_) | Provider::Anthropic(Anthropic(_, anthropic::Host::Vertex)) => {
                sent.map_err(gemini::with_retry_delay)
            }
            _ => sent,
        }
    }

    /// An answer assembled from this provider's stream, scrubbed of its key
    /// whole: a key split across two deltas passed the per-event scrub
    /// (see `crate::redact`), and the assembled answer is what is stored.
    pub fn redact_assembled(&self, response: ChatResponse) -> ChatResponse {
        self.endpoint().redactor.redact_response(response)
    }

    /// A stream's deltas, in order, with this provider's secrets scrubbed
    /// where one spans several deltas (each event was scrubbed alone as it
    /// passed); `None` when none does. What is stored and replayed keeps
    /// the scrubbed deltas.
    pub fn redact_split(&self, deltas: &[String]) -> Option<Vec<String>> {
        self.endpoint().redactor.redact_split(deltas)
    }

    /// Why this provider's dialect cannot express `req` (e.g. `n > 1` or
    /// `logprobs` on Anthropic), or `None` when it can. A request it cannot
    /// express is never sent to it with the field dropped: the engine skips
    /// the provider for that request and says why in the job's error.
    pub fn cannot_express(&self, req: &ChatRequest) -> Option<String> {
        if let Some(native) = &req.native {
            if self.passes_through(req).is_some() {
                return None;
            }
            if let Some(reason) = native.cannot_express(self.dialect()) {
                return Some(reason);
            }
        }
        match self {
            Provider::OpenAi(_) => None,
            Provider::Responses(_) => responses::cannot_express(req),
            Provider::Anthropic(_) | Provider::Bedrock(_) => anthropic::cannot_express(req),
            Provider::Gemini(_) => gemini::cannot_express(req),
            Provider::Converse(_) => converse::cannot_express(req),
        }
    }

    /// One embeddings call of `req`, rendered here (see
    /// [`Provider::call_embed`]).
    pub async fn embed(&self, req: &EmbeddingRequest, ctx: &CallContext) -> Outcome {
        self.call_embed(req, &self.render_embeddings(req)?, ctx).await
    }

    /// One embeddings call (never streamed) sending `body`, rendered from
    /// `req` by [`Provider::render_embeddings`], kept whole like a chat
    /// answer: `completion` is the provider's embeddings list, `text` is empty.
    pub async fn call_embed(&self, req: &EmbeddingRequest, body: &Rendered, ctx: &CallContext) -> Outcome {
        let span = tracing::debug_span!("provider_embed", provider = %self.name(), job_id = %ctx.job_id, attempt = ctx.attempt);
        async {
            let untranslated =
                matches!(self, Provider::Gemini(_) | Provider::Bedrock(_) | Provider::Converse(_));
            if let (true, Some(reason)) = (untranslated, self.cannot_embed()) {
                return Err(Failure::NotSent { reason, local: true });
            }
            let start = Instant::now();
            let endpoint = self.endpoint();
            let response = endpoint.send_embeddings(body, ctx, start).await?;
            let (raw, room) = endpoint.read_answer(response, start).await?;
            let Decoded { completion, text, usage, finish_reason, model } =
                embeddings::decode_response(&raw, req.inputs())
                    .map_err(|reason| Failure::bad_output(reason, raw.clone()))?;
            let response = ChatResponse {
                completion,
                text,
                json: None,
                usage,
                finish_reason,
                raw,
                chunks: None,
                raw_held: false,
                model,
                native: None,
                room: crate::Held::of(room),
            };
            Ok(endpoint.redactor.redact_response(response))
        }
        .instrument(span)
        .await
        .map_err(|failure| self.endpoint().redactor.redact(failure))
    }

    /// Why this provider cannot answer an embeddings request, or `None`.
    pub fn cannot_embed(&self) -> Option<String> {
        match self {
            Provider::OpenAi(_) | Provider::Responses(_) => None,
            Provider::Anthropic(_) => Some("the Anthropic API has no embeddings".to_owned()),
            Provider::Gemini(_) => Some("Gemini's embedContent is not translated".to_owned()),
            Provider::Bedrock(_) | Provider::Converse(_) => {
                Some("Bedrock's embedding models are not translated".to_owned())
            }
        }
    }

    /// The body an embeddings call sends: the request with the configured
    /// model and this provider's request overrides.
    pub fn render_embeddings(&self, req: &EmbeddingRequest) -> Result<Rendered, Failure> {
        let mut body = embeddings::request_body(req, self.model()).map_err(|err| Failure::NotSent {
            reason: format!("cannot encode the request: {err}"),
            local: true,
        })?;
        overrides::apply(&mut body, &self.endpoint().request_overrides, None);
        Rendered::new(body, false)
    }

    /// The body this provider is sent for `req`: the dialect's translation,
    /// then this provider's configured temperature cap and request
    /// overrides, which win over the caller. [`Provider::call`] and
    /// [`Provider::call_stream`] send exactly this, so a caller that must
    /// know what reaches the provider (a spend reservation) reads it here
    /// and sends what it read.
    pub fn render(&self, req: &ChatRequest, stream: bool) -> Result<Rendered, Failure> {
        let model = self.model();
        let unsent = |reason: String| Failure::NotSent {
            reason: format!("cannot encode the request: {reason}"),
            local: true,
        };
        let endpoint = self.endpoint();
        if let Provider::Gemini(_) = self {
            // Gemini's temperature is inside `generationConfig`: the cap goes
            // there, after the overrides (written in Gemini's terms).
            let mut body = gemini::request_body(req).map_err(|err| unsent(err.to_string()))?;
            overrides::apply(&mut body, &endpoint.request_overrides, None);
            if let Some(cap) = endpoint.max_temperature {
                overrides::cap_temperature_in(&mut body, "generationConfig", cap);
            }
            return Rendered::new(body, stream);
        }
        if let Provider::Converse(_) = self {
            // Converse's temperature is inside `inferenceConfig`, as Gemini's.
            let mut body = converse::request_body(req).map_err(unsent)?;
            overrides::apply(&mut body, &endpoint.request_overrides, None);
            if let Some(cap) = endpoint.max_temperature {
                overrides::cap_temperature_in(&mut body, "inferenceConfig", cap);
            }
            return Rendered::new(body, stream);
        }
        let body = match (self, self.passes_through(req)) {
            (Provider::Anthropic(_) | Provider::Bedrock(_), Some(native)) => {
                Ok(anthropic::passthrough_body(native, req, model, stream))
            }
            (Provider::Anthropic(_) | Provider::Bedrock(_), None) => {
                anthropic::request_body(req, model, stream)
            }
            (Provider::Responses(_), Some(native)) => {
                Ok(responses::passthrough_body(native, req, model, stream))
            }
            (Provider::Responses(_), None) => responses::request_body(req, model, stream)
                .map_err(<serde_json::Error as serde::de::Error>::custom),
            _ => openai::request_body(req, model, stream),
        };
        let mut body = body.map_err(|err| unsent(err.to_string()))?;
        overrides::apply(&mut body, &endpoint.request_overrides, endpoint.max_temperature);
        if endpoint.null_content_as_empty {
            overrides::null_content_as_empty(&mut body);
        }
        if let Provider::Anthropic(Anthropic(_, anthropic::Host::Vertex)) = self {
            vertex::claude_body(&mut body);
        }
        if let Provider::Bedrock(_) = self {
            let carried = self.passes_through(req).map_or(&[][..], |native| native.headers.as_slice());
            body = bedrock::invoke_body(body, carried);
        }
        Rendered::new(body, stream)
    }
}
