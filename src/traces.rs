//! Traces over OTLP/HTTP (protobuf), when the standard variables ask for
//! them: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended), with
//! `OTEL_SERVICE_NAME` (default `intentgate`) and the exporter's other
//! `OTEL_EXPORTER_OTLP_*` and `OTEL_BSP_*` variables. Unset, there is no
//! exporter, no exporter thread and no OpenTelemetry layer.
//!
//! One span per HTTP request (continuing a client's W3C `traceparent`) and
//! one per attempt, in the trace of the request that started its job, with
//! the GenAI semantic-convention attributes; each provider request carries
//! a `traceparent` naming its attempt's span.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;

use intentgate_providers::TraceParent;

use crate::config::DialectConfig;

/// The service name when `OTEL_SERVICE_NAME` is unset.
pub const DEFAULT_SERVICE_NAME: &str = "intentgate";

/// Whether this process exports traces (a [`Traces::layer`] was made).
/// Until then the helpers below return at once: the attributes they would
/// set go to a layer that is not there, and building them (a job id as
/// text, a model name copied, a `traceparent` looked for) cost every
/// request a few thousand instructions for nothing.
static EXPORTING: AtomicBool = AtomicBool::new(false);

fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The exporting tracer provider; [`Traces::shutdown`] flushes it.
#[derive(Debug)]
pub struct Traces {
    provider: SdkTracerProvider,
}

fn set(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.trim().is_empty())
}

/// Whether the environment asks for traces to be exported.
pub fn wanted() -> bool {
    let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
    !disabled
        && (set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
            || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some())
}

impl Traces {
    /// The exporter the environment asks for, `None` when it asks for none.
    /// Must be called inside a Tokio runtime: the exporter's requests run
    /// on it.
    pub fn from_env() -> Result<Option<Traces>, String> {
        if !wanted() {
            return Ok(None);
        }
        let client = Client::new()?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_http_client(client)
            .build()
            .map_err(|err| format!("cannot build the OTLP trace exporter: {err}"))?;
        let service = set("OTEL_SERVICE_NAME").unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
        let resource = opentelemetry_sdk::Resource::builder().with_service_name(service).build();
        let provider =
            SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        Ok(Some(Traces { provider }))
    }

    /// The layer that turns the gateway's `request` and `attempt` spans
    /// into OpenTelemetry spans (events and other spans stay logs only).
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        let tracer = self.provider.tracer("intentgate");
        EXPORTING.store(true, Ordering::Relaxed);
        tracing_opentelemetry::layer().with_tracer(tracer).with_filter(tracing_subscriber::filter::filter_fn(
            |meta| {
                meta.is_span()
                    && meta.target().starts_with("intentgate")
                    && *meta.level() <= tracing::Level::INFO
            },
        ))
    }

    /// Exports what is still buffered and stops the exporter thread.
    /// Blocking: call it off the runtime's worker threads.
    pub fn shutdown(self) {
        if let Err(err) = self.provider.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %err, "the trace exporter did not shut down cleanly");
        }
    }
}

/// The exporter's HTTP client: the workspace's reqwest, its requests run on
/// the runtime the gateway serves on (the batch processor's thread has none).
#[derive(Debug)]
struct Client {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl Client {
    fn new() -> Result<Client, String> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|err| err.to_string())?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|err| format!("cannot build the OTLP HTTP client: {err}"))?;
        Ok(Client { client, runtime })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Client {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<opentelemetry_http::Response<opentelemetry_http::Bytes>, opentelemetry_http::HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let mut answer = opentelemetry_http::Response::builder().status(response.status());
            if let Some(headers) = answer.headers_mut() {
                *headers = response.headers().clone();
            }
            let body = response.bytes().await?;
            Ok::<_, opentelemetry_http::HttpError>(answer.body(body)?)
        });
        sent.await?
    }
}

/// The request span continues the client's trace, when its `traceparent`
/// names one; it has HTTP's semantic-convention attributes.
pub fn continue_trace(span: &tracing::Span, method: &str, route: &str, headers: &axum::http::HeaderMap) {
    if !exporting() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    span.set_attribute("http.request.method", method.to_owned());
    span.set_attribute("http.route", route.to_owned());
}

/// The request span's response status.
pub fn record_status(span: &tracing::Span, status: u16) {
    if !exporting() {
        return;
    }
    span.set_attribute("http.response.status_code", i64::from(status));
}

/// `work` runs in the trace of the span current where it is created: a
/// task spawned for a request (a drive, a late answer's listener) puts its
/// attempt spans in that request's trace.
pub fn carry<F: std::future::Future>(work: F) -> opentelemetry::context::WithContext<F> {
    let context =
        if exporting() { tracing::Span::current().context() } else { opentelemetry::Context::new() };
    opentelemetry::context::FutureExt::with_context(work, context)
}

/// `span` (a root in `tracing`) joins the current span's trace, as its
/// child.
pub fn beside_current(span: &tracing::Span) {
    if exporting() {
        let _ = span.set_parent(tracing::Span::current().context());
    }
}

/// The `traceparent` a provider request carries: the current span's (the
/// attempt's), when it is exported.
pub fn current_parent() -> Option<TraceParent> {
    if !exporting() {
        return None;
    }
    let context = tracing::Span::current().context();
    let span = context.span();
    let span = span.span_context();
    span.is_valid().then(|| TraceParent {
        trace_id: u128::from_be_bytes(span.trace_id().to_bytes()),
        span_id: u64::from_be_bytes(span.span_id().to_bytes()),
        sampled: span.is_sampled(),
    })
}

/// GenAI's `gen_ai.provider.name` for a provider of `dialect`.
pub fn provider_name(dialect: DialectConfig) -> &'static str {
    match dialect {
        DialectConfig::Openai | DialectConfig::OpenaiResponses => "openai",
        DialectConfig::Azure | DialectConfig::AzureResponses => "azure.ai.openai",
        DialectConfig::Anthropic => "anthropic",
        DialectConfig::Gemini => "gcp.gemini",
        DialectConfig::Vertex => "gcp.vertex_ai",
        DialectConfig::Bedrock => "aws.bedrock",
    }
}

/// An attempt span's attributes, known when it starts.
pub fn attempt_started(
    span: &tracing::Span,
    (job_id, number): (uuid::Uuid, i64),
    operation: &'static str,
    provider: &'static str,
    model: &str,
) {
    if !exporting() {
        return;
    }
    span.set_attribute("gen_ai.operation.name", operation);
    span.set_attribute("gen_ai.provider.name", provider);
    span.set_attribute("gen_ai.request.model", model.to_owned());
    span.set_attribute("intentgate.job_id", job_id.to_string());
    span.set_attribute("intentgate.attempt", number);
}

/// The current (attempt) span's outcome: `outcome` in the log, and
/// `intentgate.outcome` in the trace.
pub fn record_outcome(outcome: &'static str) {
    let span = tracing::Span::current();
    span.record("outcome", outcome);
    if exporting() {
        span.set_attribute("intentgate.outcome", outcome);
    }
}

/// What the current (attempt) span's answer was: its model and usage, and
/// how it fared at the compare-and-swap (`won`, `superseded`,
/// `not_deliverable`).
pub fn record_answer(model: Option<&str>, usage: Option<(u64, u64)>, cas: &'static str) {
    if !exporting() {
        return;
    }
    let span = tracing::Span::current();
    if let Some(model) = model {
        span.set_attribute("gen_ai.response.model", model.to_owned());
    }
    if let Some((input, output)) = usage {
        span.set_attribute("gen_ai.usage.input_tokens", i64::try_from(input).unwrap_or(i64::MAX));
        span.set_attribute("gen_ai.usage.output_tokens", i64::try_from(output).unwrap_or(i64::MAX));
    }
    span.set_attribute("intentgate.cas", cas);
}
