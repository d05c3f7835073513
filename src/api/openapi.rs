//! `GET /openapi.json`: the OpenAPI 3.1 document of the HTTP API, generated
//! (utoipa) from the `#[utoipa::path]` attribute on each handler and the
//! types the handlers read and answer with. `tests/openapi.rs` fails when the
//! router serves a path or method this document leaves out. The problem
//! types are listed from [`ProblemType::ALL`], so none can be left out.
//!
//! Some answers are built as `serde_json::json!` values in their handlers;
//! their shapes are described here by schema-only types (never constructed).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{
    AdditionalProperties, KnownFormat, ObjectBuilder, RefBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{Modify, OpenApi, PartialSchema, ToResponse, ToSchema};
use uuid::Uuid;

use super::view::AttemptView;
use super::{PROBLEM_TYPE_BASE, attempts, health, jobs, metrics, openai, routes};
use super::{Problem, ProblemType};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "intentgate",
        description = "A multi-provider AI inference gateway where one user intent is one job.\n\n\
            Authenticate with `Authorization: Bearer <api key>`. Job-creating POSTs need an \
            `Idempotency-Key` naming the intent. Every error is `application/problem+json` \
            (RFC 9457) whose `type` is `https://intentgate.dev/problems/<slug>`: see the `Problem` \
            schema for every slug. Any path not listed here answers 404 `not-found`, a listed path \
            with another method 405 `method-not-allowed`."
    ),
    paths(
        jobs::create,
        jobs::find_by_key,
        jobs::get,
        attempts::start,
        attempts::resolve,
        attempts::cancel,
        attempts::resolve_provider,
        routes::list,
        openai::chat_completions,
        openai::models,
        health::healthz,
        health::readyz,
        document,
        metrics::render,
    ),
    components(
        schemas(
            Problem,
            super::view::JobView,
            AttemptView,
            crate::jobs::JobRequest,
            crate::jobs::JobInput,
            crate::jobs::ChatMessage,
            crate::jobs::JobStatus,
            crate::jobs::AttemptState,
            attempts::StartAttempt,
            attempts::Resolve,
            ResolveAs,
            ProviderResolved,
            RouteList,
            ModelList,
            ChatCompletionRequest,
            ChatCompletion,
            Health,
            Ready,
        ),
        responses(Unauthorized, Forbidden, StoreUnavailable, Internal),
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "jobs", description = "Jobs: one user intent each, created idempotently"),
        (name = "attempts", description = "Attempts by hand, settling unknown attempts (admin), cancelling"),
        (name = "openai", description = "The OpenAI-compatible surface"),
        (name = "operations", description = "Routes, health, metrics and this document"),
    ),
)]
struct ApiDoc;

/// The document, built once.
pub fn spec() -> &'static Result<String, String> {
    static DOCUMENT: OnceLock<Result<String, String>> = OnceLock::new();
    DOCUMENT.get_or_init(|| ApiDoc::openapi().to_json().map_err(|err| err.to_string()))
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    operation_id = "openapi",
    summary = "This OpenAPI 3.1 document",
    description = "Generated from the code; needs no API key.",
    responses(
        (status = 200, description = "The OpenAPI document",
            body = Object, content_type = "application/json"),
        (status = 500, response = Internal),
    )
)]
pub async fn document() -> Response {
    match spec() {
        Ok(json) => ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], json.as_str())
            .into_response(),
        Err(err) => {
            tracing::error!(error = %err, "OpenAPI document failed to render");
            Problem::new(ProblemType::Internal, err.as_str()).into_response()
        }
    }
}

/// The `bearer` security scheme the operations name.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`Authorization: Bearer <api key>`, sent exactly once. Missing or unknown: 401 \
                         `unauthorized`. Admin calls need an admin key: 403 `forbidden`.",
                    ))
                    .build(),
            ),
        );
    }
}

/// [`Problem`]'s wire form, as its `IntoResponse` writes it.
impl PartialSchema for Problem {
    fn schema() -> RefOr<Schema> {
        let string = || ObjectBuilder::new().schema_type(Type::String);
        let uuid = || string().format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)));
        let mut table = String::from(
            "An RFC 9457 problem, served as `application/problem+json`. Match on `type`; `detail` is for \
             people. Extension members carry what a client needs to act.\n\n\
             | slug | status | when |\n|---|---|---|\n",
        );
        for kind in ProblemType::ALL {
            table.push_str(&format!(
                "| `{}` | {} | {} |\n",
                kind.slug(),
                kind.status().as_u16(),
                kind.when()
            ));
        }
        ObjectBuilder::new()
            .title(Some("Problem"))
            .description(Some(table))
            .property(
                "type",
                string()
                    .format(Some(SchemaFormat::Custom("uri".into())))
                    .description(Some(format!("`{PROBLEM_TYPE_BASE}<slug>`")))
                    .enum_values(Some(
                        ProblemType::ALL.iter().map(|kind| format!("{PROBLEM_TYPE_BASE}{}", kind.slug())),
                    )),
            )
            .required("type")
            .property("title", string().description(Some("A short summary of the problem type")))
            .required("title")
            .property(
                "status",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .description(Some("The HTTP status code"))
                    .enum_values(Some(status_codes())),
            )
            .required("status")
            .property("detail", string().description(Some("What happened, for people")))
            .required("detail")
            .property("job_id", uuid().description(Some("The job concerned")))
            .property("attempt_id", uuid().description(Some("The attempt that blocks the request")))
            .property(
                "attempt",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .description(Some("The number of the attempt that blocks the request")),
            )
            .property(
                "job_status",
                RefBuilder::new()
                    .ref_location_from_schema_name("JobStatus")
                    .description(Some("`job-completed`: the state the job ended in")),
            )
            .property(
                "error",
                ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .description(Some(
                        "OpenAI-style `{message, type, code}` on problems of `POST /v1/chat/completions`, so \
                         the OpenAI SDKs show the detail",
                    ))
                    .property("message", string())
                    .property("type", string())
                    .property("code", string()),
            )
            .property(
                "error_detail",
                ObjectBuilder::new()
                    .schema_type(SchemaType::AnyValue)
                    .description(Some("`upstream-failed`: the job's error, listing every attempt's reason")),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .into()
    }
}

impl ToSchema for Problem {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Problem")
    }
}

fn status_codes() -> Vec<u16> {
    let mut codes: Vec<u16> = ProblemType::ALL.iter().map(|kind| kind.status().as_u16()).collect();
    codes.sort_unstable();
    codes.dedup();
    codes
}

/// A problem+json response whose slugs are `slugs`.
fn problem_response(slugs: &[&str], headers: &[(&str, &str)]) -> RefOr<utoipa::openapi::response::Response> {
    let names: Vec<String> = slugs.iter().map(|slug| format!("`{slug}`")).collect();
    let mut response = ResponseBuilder::new().description(names.join(", ")).content(
        "application/problem+json",
        ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).build(),
    );
    for (name, description) in headers {
        response = response.header(
            *name,
            HeaderBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
                .description(Some(*description))
                .build(),
        );
    }
    response.into()
}

/// 401 `unauthorized`.
pub struct Unauthorized;

impl<'r> ToResponse<'r> for Unauthorized {
    fn response() -> (&'r str, RefOr<utoipa::openapi::response::Response>) {
        ("Unauthorized", problem_response(&["unauthorized"], &[("WWW-Authenticate", "`Bearer`")]))
    }
}

/// 403 `forbidden`.
pub struct Forbidden;

impl<'r> ToResponse<'r> for Forbidden {
    fn response() -> (&'r str, RefOr<utoipa::openapi::response::Response>) {
        ("Forbidden", problem_response(&["forbidden"], &[]))
    }
}

/// 503 `store-unavailable`.
pub struct StoreUnavailable;

impl<'r> ToResponse<'r> for StoreUnavailable {
    fn response() -> (&'r str, RefOr<utoipa::openapi::response::Response>) {
        let headers = [
            ("Retry-After", "`1` (seconds)"),
            ("Location", "`/v1/jobs/{id}`, when the job was stored before the store failed"),
            ("x-intentgate-job-id", "The job's id, when it was stored before the store failed"),
        ];
        ("StoreUnavailable", problem_response(&["store-unavailable"], &headers))
    }
}

/// 500 `internal`.
pub struct Internal;

impl<'r> ToResponse<'r> for Internal {
    fn response() -> (&'r str, RefOr<utoipa::openapi::response::Response>) {
        ("Internal", problem_response(&["internal"], &[]))
    }
}

/// How an operator settles an `unknown` attempt.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ResolveAs {
    /// Given up on: a late answer is still honoured.
    Abandoned,
    /// Known not to have done the work.
    Failed,
}

/// `POST /v1/providers/{name}/resolve`: what was settled.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ProviderResolved {
    provider: String,
    resolved: Vec<ResolvedAttempt>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ResolvedAttempt {
    job_id: Uuid,
    attempt: AttemptView<'static>,
}

/// `GET /v1/routes`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RouteList {
    routes: Vec<RouteInfo>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RouteInfo {
    name: String,
    /// Providers in the order they are tried.
    chain: Vec<ChainEntry>,
    /// e.g. `10s`
    attempt_timeout: String,
    retries: u32,
    /// e.g. `7days`
    contract_max_age: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChainEntry {
    provider: String,
    role: ChainRole,
    /// Whether the contract gate applies to this provider on this route.
    contract_required: bool,
    /// Whether the gate lets it serve the route now.
    eligible: bool,
    /// Why it is (not) eligible.
    reason: String,
}

#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ChainRole {
    Primary,
    Fallback,
}

/// `GET /v1/models`: the routes, as OpenAI lists models.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ModelList {
    /// `list`
    object: String,
    data: Vec<Model>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Model {
    /// A route name: pass it as `model`.
    id: String,
    /// `model`
    object: String,
    created: i64,
    /// `intentgate`
    owned_by: String,
}

/// An OpenAI chat completion request. `model` names a route; every field
/// other than `model` and `messages` is passed to the provider as a
/// generation parameter (the job's `params`).
#[derive(ToSchema, Deserialize)]
#[allow(dead_code)]
pub struct ChatCompletionRequest {
    /// A route name (`GET /v1/models` lists them).
    model: String,
    #[schema(min_items = 1)]
    messages: Vec<crate::jobs::ChatMessage>,
    /// Answer as server-sent events in OpenAI's chunk format.
    stream: Option<bool>,
    #[serde(flatten)]
    params: HashMap<String, Value>,
}

/// An OpenAI `chat.completion`; the same bytes every time for one job.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChatCompletion {
    /// `chatcmpl-<job id>`
    id: String,
    /// `chat.completion`
    object: String,
    /// The job's creation second.
    created: i64,
    /// The route.
    model: String,
    choices: Vec<ChatChoice>,
    usage: Option<ChatUsage>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChatChoice {
    index: u32,
    message: ChatReply,
    finish_reason: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChatReply {
    /// `assistant`
    role: String,
    content: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ChatUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

/// `GET /healthz`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Health {
    /// `ok`
    status: String,
}

/// `GET /readyz`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Ready {
    /// `ready`
    status: String,
    /// `sqlite` or `postgres`
    store: String,
}
