//! The HTTP leg shared by both dialects: one place that sends, enforces the
//! first-byte and total deadlines, and turns transport errors into outcome
//! classes.

use std::error::Error as _;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tokio::time::{Instant, timeout_at};

use crate::answer_budget::{AnswerBudget, Room};
use crate::authorize::{Authorize, Outgoing};
use crate::config::{AnswerLimits, ProviderSettings, SettingsError, Timeouts};
use crate::outcome::Failure;
use crate::rendered::Rendered;
use crate::retry_after;
use crate::secret::Secret;
use crate::types::CallContext;

/// Carries the job id downstream, so a provider that deduplicates can (R10).
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Carries the attempt number downstream, for the provider's logs and ours.
pub const ATTEMPT_HEADER: &str = "x-intentgate-attempt";
/// Carries the attempt's span (W3C Trace Context), when traces are exported.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// Builds a provider's HTTP client. This is the one place that installs the
/// rustls crypto provider; the connect timeout lives here because only the
/// connector knows when connecting ends, and reqwest reports its expiry as a
/// connect error, which is what makes it `not_sent`.
pub(crate) fn http_client(connect: Duration) -> Result<reqwest::Client, SettingsError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(connect)
        // Retries and redirects are new attempts: the gateway decides them.
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        // Drop idle connections before common server keep-alive limits
        // (uvicorn, so vLLM: 5 s). Reusing one the server is closing fails
        // after the request was written: a false `unknown` that blocks a job.
        .pool_idle_timeout(Duration::from_secs(4))
        // Providers are called directly; an ambient HTTP_PROXY must not
        // silently reroute (or break) provider traffic.
        .no_proxy()
        .build()
        .map_err(|err| SettingsError::Client(error_chain(&err)))
}

/// Where a provider's operations are, under its `base_url`.
pub(crate) struct Paths {
    pub(crate) chat: String,
    /// Where a streamed chat goes, when not where a plain one does
    /// (Gemini's `:streamGenerateContent?alt=sse`).
    pub(crate) chat_stream: Option<String>,
    pub(crate) embeddings: String,
}

/// A configured provider URL with its headers and limits.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) name: String,
    pub(crate) model: String,
    pub(crate) timeouts: Timeouts,
    client: reqwest::Client,
    url: reqwest::Url,
    /// Where a streamed chat goes (`url` unless the dialect says otherwise).
    stream_url: reqwest::Url,
    /// Where embeddings are asked for: `{base_url}/embeddings`.
    embeddings_url: reqwest::Url,
    headers: HeaderMap,
    /// Per-request credentials (a signature, an expiring token), when the
    /// dialect's are not a static header.
    authorizer: Option<Arc<dyn Authorize>>,
    pub(crate) redactor: Redactor,
    pub(crate) request_overrides: serde_json::Map<String, serde_json::Value>,
    pub(crate) max_temperature: Option<f64>,
    pub(crate) answer_limits: AnswerLimits,
    pub(crate) answer_budget: AnswerBudget,
    pub(crate) null_content_as_empty: bool,
    pub(crate) skip_malformed_events: bool,
}

impl Endpoint {
    /// `auth` builds the dialect's auth headers from the key; they are marked
    /// sensitive so even a `Debug` of the header map does not show them.
    pub(crate) fn new(
        config: ProviderSettings,
        paths: Paths,
        auth: impl Fn(&str) -> Vec<(&'static str, String)>,
        fixed: &[(&'static str, &'static str)],
    ) -> Result<Self, SettingsError> {
        let join = |path: &str| {
            let url = format!("{}{path}", config.base_url.trim_end_matches('/'));
            reqwest::Url::parse(&url).map_err(|err| SettingsError::BaseUrl {
                url: config.base_url.clone(),
                reason: err.to_string(),
            })
        };
        let url = join(&paths.chat)?;
        let stream_url = join(paths.chat_stream.as_deref().unwrap_or(&paths.chat))?;
        let embeddings_url = join(&paths.embeddings)?;
        if !matches!(url.scheme(), "http" | "https") {
            let reason = "the scheme must be http or https".to_owned();
            return Err(SettingsError::BaseUrl { url: config.base_url, reason });
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &config.extra_headers {
            insert(&mut headers, name, value)?;
        }
        for (name, value) in fixed {
            insert(&mut headers, name, value)?;
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(key) = &config.api_key {
            for (name, value) in auth(key.expose()) {
                let mut value = HeaderValue::from_str(&value).map_err(|_| SettingsError::ApiKey)?;
                value.set_sensitive(true);
                headers.insert(name, value);
            }
        }
        Ok(Endpoint {
            client: http_client(config.timeouts.connect)?,
            name: config.name,
            model: config.model,
            timeouts: config.timeouts,
            url,
            stream_url,
            embeddings_url,
            headers,
            authorizer: None,
            redactor: Redactor::of(config.api_key),
            request_overrides: config.request_overrides,
            max_temperature: config.max_temperature,
            answer_limits: config.answer_limits,
            answer_budget: config.answer_budget,
            null_content_as_empty: config.null_content_as_empty,
            skip_malformed_events: config.skip_malformed_events,
        })
    }

    /// This endpoint scrubbing `secret` too (see [`Redactor`]).
    pub(crate) fn scrubbing(mut self, secret: Secret) -> Self {
        self.redactor.add(secret);
        self
    }

    /// This endpoint with per-request credentials (see `crate::authorize`).
    pub(crate) fn with_authorizer(mut self, authorizer: Arc<dyn Authorize>) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// The call's overall deadline, from its start.
    pub(crate) fn deadline(&self, start: Instant) -> Instant {
        start + self.timeouts.total
    }

    /// A whole answer of a call begun at `start`, within this provider's
    /// limit and its total deadline, with the room it took in the answer
    /// budget (which goes with the answer, [`crate::Held`]).
    pub(crate) async fn read_answer(
        &self,
        response: reqwest::Response,
        start: Instant,
    ) -> Result<(Bytes, Room), Failure> {
        let limit = self.answer_limits.max_response_bytes;
        let budget = Some(&self.answer_budget);
        read_counted(response, (self.deadline(start), self.timeouts.total), limit, budget).await
    }

    /// Sends `body` to the dialect's chat endpoint, its streaming one when
    /// `stream` (see [`Endpoint::post`]).
    /// `carried`: headers of the client's own request that change what the
    /// provider does (see `crate::Native`), set over this endpoint's own.
    pub(crate) async fn send(
        &self,
        body: &Rendered,
        carried: &[(String, String)],
        ctx: &CallContext,
        start: Instant,
    ) -> Result<reqwest::Response, Failure> {
        let url = if body.is_stream() { &self.stream_url } else { &self.url };
        self.post(url, body, carried, ctx, start).await
    }

    /// Sends `body` to the embeddings endpoint (see [`Endpoint::post`]).
    pub(crate) async fn send_embeddings(
        &self,
        body: &Rendered,
        ctx: &CallContext,
        start: Instant,
    ) -> Result<reqwest::Response, Failure> {
        self.post(&self.embeddings_url, body, &[], ctx, start).await
    }

    /// Sends `body` and waits for the response headers. A 2xx comes back as
    /// the response; an error status becomes `Rejected`.
    async fn post(
        &self,
        url: &reqwest::Url,
        body: &Rendered,
        carried: &[(String, String)],
        ctx: &CallContext,
        start: Instant,
    ) -> Result<reqwest::Response, Failure> {
        let payload = body.bytes();
        let mut headers = self.headers.clone();
        for (name, value) in carried {
            if let (Ok(name), Ok(value)) =
                (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str()))
            {
                headers.insert(name, value);
            }
        }
        insert(&mut headers, IDEMPOTENCY_KEY_HEADER, &ctx.job_id.to_string())
            .and_then(|()| insert(&mut headers, ATTEMPT_HEADER, &ctx.attempt.to_string()))
            .map_err(|err| Failure::NotSent { reason: err.to_string(), local: true })?;
        if let Some(parent) = ctx.traceparent {
            let _ = insert(&mut headers, TRACEPARENT_HEADER, &parent.header());
        }
        if let Some(authorizer) = &self.authorizer {
            authorizer.authorize(Outgoing { url, headers: &mut headers, body: &payload }).await?;
        }
        let request = self.client.post(url.clone()).headers(headers).body(payload);
        let deadline = self.deadline(start);
        let first_byte = deadline.min(start + self.timeouts.first_byte);
        let response = match timeout_at(first_byte, request.send()).await {
            Err(_) => {
                let (which, limit) = if first_byte < deadline {
                    ("first_byte", self.timeouts.first_byte)
                } else {
                    ("total", self.timeouts.total)
                };
                // Conservative: the timer also runs while connecting, and an
                // expiry there would strictly be not_sent; we cannot tell.
                return Err(Failure::unknown(format!(
                    "no response headers within {limit:?} ({which} timeout)"
                )));
            }
            Ok(Err(err)) => return Err(classify(&err)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| retry_after::parse(value, SystemTime::now()));
        // The status alone is the proof; a body we cannot read stays empty.
        // An error body is kept for its reason, never whole past a small bound.
        let body = match read_body(response, deadline, self.timeouts.total, ERROR_BODY_LIMIT).await {
            Ok(body) | Err(Failure::BadOutput { raw: body, .. }) => body,
            Err(_) => Bytes::new(),
        };
        Err(Failure::Rejected {
            status: status.as_u16(),
            retry_after,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

/// Scrubs a provider's secrets — its API key, and for a signing provider
/// its secret access key and session token — out of failures and answers
/// before anyone sees them; cloned into streams, whose chunks and failures
/// surface after the call returned.
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactor(Vec<Secret>);

impl Redactor {
    fn of(api_key: Option<Secret>) -> Redactor {
        Redactor(api_key.into_iter().collect())
    }

    /// Also scrubs `secret`.
    pub(crate) fn add(&mut self, secret: Secret) {
        if !secret.expose().is_empty() {
            self.0.push(secret);
        }
    }

    pub(crate) fn redact(&self, failure: Failure) -> Failure {
        self.0.iter().fold(failure, |failure, secret| failure.redact(secret.expose()))
    }

    pub(crate) fn redact_response(&self, response: crate::ChatResponse) -> crate::ChatResponse {
        self.0.iter().fold(response, |response, secret| crate::redact::response(response, secret.expose()))
    }

    /// A stream's deltas with a secret that spans several of them
    /// scrubbed; `None` when none does.
    pub(crate) fn redact_split(&self, deltas: &[String]) -> Option<Vec<String>> {
        let mut scrubbed: Option<Vec<String>> = None;
        for secret in &self.0 {
            let current = scrubbed.as_deref().unwrap_or(deltas);
            if let Some(next) = crate::redact::split(current, secret.expose()) {
                scrubbed = Some(next);
            }
        }
        scrubbed
    }

    pub(crate) fn redact_chunk(&self, chunk: crate::StreamChunk) -> crate::StreamChunk {
        self.0.iter().fold(chunk, |chunk, secret| crate::redact::chunk(chunk, secret.expose()))
    }
}

/// Reads a whole body before `deadline`, at most `limit` bytes. A read
/// failure is `unknown`: the headers said the provider took the request. A
/// body past the limit is `bad_output`: the provider did the work and its
/// answer cannot be kept (so it is charged its reservation, like any
/// unusable answer, and the chain may fail over); only its first bytes are
/// kept, and nothing past the limit is read or stored.
pub(crate) async fn read_body(
    response: reqwest::Response,
    deadline: Instant,
    total: Duration,
    limit: usize,
) -> Result<Bytes, Failure> {
    read_counted(response, (deadline, total), limit, None).await.map(|(body, _)| body)
}

/// [`read_body`], taking room in `budget` for an answer larger than
/// [`UNCOUNTED`](crate::UNCOUNTED) before reading past that (see `answer_budget.rs`): its
/// announced length at once, else twice what it has read as it grows. The
/// room is the caller's to hold while the answer is decoded.
pub(crate) async fn read_counted(
    mut response: reqwest::Response,
    (deadline, total): (Instant, Duration),
    limit: usize,
    budget: Option<&AnswerBudget>,
) -> Result<(Bytes, Room), Failure> {
    let announced = response.content_length();
    if announced.is_some_and(|announced| announced > limit as u64) {
        return Err(too_large(limit, &[]));
    }
    let waiting = std::sync::atomic::AtomicBool::new(false);
    let grow = async |room: &mut Room, bytes: usize| {
        if let Some(budget) = budget {
            waiting.store(true, std::sync::atomic::Ordering::Relaxed);
            budget.grow(room, bytes.min(limit)).await;
            waiting.store(false, std::sync::atomic::Ordering::Relaxed);
        }
    };
    let read = async {
        let mut room = Room::default();
        if let Some(length) = announced {
            grow(&mut room, usize::try_from(length).unwrap_or(limit)).await;
        }
        let mut body = BytesMut::new();
        while let Some(piece) = response
            .chunk()
            .await
            .map_err(|err| Failure::unknown(format!("body broke off: {}", error_chain(&err))))?
        {
            let length = body.len() + piece.len();
            if length > limit {
                return Err(too_large(limit, &body));
            }
            if length > room.covers() {
                grow(&mut room, length.saturating_mul(2)).await;
            }
            body.extend_from_slice(&piece);
        }
        Ok((body.freeze(), room))
    };
    match timeout_at(deadline, read).await {
        Err(_) if waiting.load(std::sync::atomic::Ordering::Relaxed) => Err(Failure::unknown(format!(
            "the answer found no room in the gateway's answer budget within {total:?} (total timeout)"
        ))),
        Err(_) => Err(Failure::unknown(format!("body not complete within {total:?} (total timeout)"))),
        Ok(result) => result,
    }
}

/// The most of a rejection's body that is read (its reason is at the start).
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// How much of a refused, oversized answer is kept for audit.
const KEPT_OF_OVERSIZED: usize = 4096;

/// The failure of an answer larger than `limit` bytes, keeping its start.
pub(crate) fn too_large(limit: usize, start: &[u8]) -> Failure {
    Failure::bad_output(
        format!(
            "the answer is larger than this provider's limit of {limit} bytes (max_response_bytes); it was \
             not read further"
        ),
        Bytes::copy_from_slice(&start[..start.len().min(KEPT_OF_OVERSIZED)]),
    )
}

/// Connect errors (DNS, refused, connect timeout, TLS handshake) happen
/// before a byte of the request is written: `not_sent`. Everything after the
/// connection exists may have reached the provider: `unknown`.
pub(crate) fn classify(err: &reqwest::Error) -> Failure {
    let reason = error_chain(err);
    if err.is_connect() {
        Failure::NotSent { reason, local: false }
    } else if err.is_builder() {
        Failure::NotSent { reason, local: true }
    } else {
        Failure::unknown(reason)
    }
}

/// The error and its sources on one line. reqwest errors name the URL, never
/// the headers, so this cannot contain the key.
pub(crate) fn error_chain(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

pub(crate) fn insert(headers: &mut HeaderMap, name: &str, value: &str) -> Result<(), SettingsError> {
    let header =
        HeaderName::from_bytes(name.as_bytes()).map_err(|_| SettingsError::Header(name.to_owned()))?;
    let value = HeaderValue::from_str(value).map_err(|_| SettingsError::Header(name.to_owned()))?;
    headers.insert(header, value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_secret_of_a_signing_provider_is_scrubbed() {
        let mut redactor = Redactor::of(None);
        redactor.add(Secret::new("wJalrXUtnFEMI/K7MDENG"));
        redactor.add(Secret::new("session-token-of-the-role"));
        redactor.add(Secret::new(""));
        let failure = Failure::Rejected {
            status: 403,
            retry_after: None,
            body: "bad token session-token-of-the-role for key wJalrXUtnFEMI/K7MDENG".into(),
        };
        let Failure::Rejected { body, .. } = redactor.redact(failure) else { panic!("still a rejection") };
        assert_eq!(body, "bad token [redacted] for key [redacted]");
    }
}
