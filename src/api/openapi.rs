//! `GET /openapi.json`: the OpenAPI 3.1 document of the HTTP API, generated
//! (utoipa) from the `#[utoipa::path]` attribute on each handler and the
//! types the handlers read and answer with. `tests/openapi.rs` fails when the
//! router serves a path or method this document leaves out. The problem
//! types are listed from [`ProblemType::ALL`], so none can be left out.
//!
//! A leaf: it gathers from the handlers' modules (each door's paths from
//! that door's `Api`), and no handler imports from it. A shape a handler answers with lives beside that handler (answers
//! built as `serde_json::json!` values are described by schema-only types
//! there, never constructed); the problem schema and the problem responses
//! operations share live with [`Problem`].

use std::sync::OnceLock;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::problem::{
    BodyTooLarge, Forbidden, Internal, LimitReached, StoreUnavailable, Unauthorized, UpstreamFailed,
};
use super::view::{AttemptUsage, AttemptView, CountedTokens, JobView};
use super::{Problem, ProblemType};
use super::{
    anthropic, attempts, browse, console, contracts, health, jobs, keys, limits, metrics, openai, queue,
    reload, responses, routes, usage,
};

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
        browse::search,
        browse::counts,
        browse::overview,
        browse::whoami,
        queue::unknown,
        contracts::list,
        console::page_handler,
        console::script_handler,
        console::style_handler,
        attempts::start,
        attempts::resolve,
        attempts::cancel,
        attempts::resolve_provider,
        routes::list,
        reload::reload_config,
        keys::create,
        keys::list,
        keys::get,
        keys::update,
        keys::rotate,
        keys::revoke,
        keys::delete,
        keys::audit,
        limits::create,
        limits::list,
        limits::update,
        limits::remove,
        limits::audit,
        usage::usage,
        usage::spend,
        health::healthz,
        health::readyz,
        document,
        metrics::render,
    ),
    components(
        schemas(
            Problem,
            JobView,
            AttemptView,
            AttemptUsage,
            CountedTokens,
            crate::jobs::JobRequest,
            crate::jobs::JobInput,
            crate::jobs::ChatMessage,
            crate::jobs::JobStatus,
            crate::jobs::AttemptState,
            attempts::StartAttempt,
            attempts::Resolve,
            crate::engine::Resolution,
            attempts::ProviderResolved,
            routes::RouteList,
            browse::JobPage,
            browse::JobSummaryView,
            browse::JobCounts,
            browse::Overview,
            browse::WhoAmI,
            queue::UnknownQueue,
            queue::QueuedAttempt,
            queue::ProviderBacklog,
            contracts::ContractList,
            contracts::ContractStatus,
            contracts::LastRun,
            contracts::CaseView,
            contracts::CaseFailure,
            health::Health,
            health::Ready,
            keys::CreateKey,
            keys::UpdateKey,
            keys::RotateKey,
            keys::KeyView,
            keys::CreatedKey,
            keys::RotatedKey,
            keys::KeyList,
            keys::AuditView,
            keys::AuditList,
            limits::CreateLimit,
            limits::UpdateLimit,
            limits::LimitView,
            limits::LimitList,
            limits::LimitAuditList,
            crate::budgets::LimitScope,
            usage::SpendReport,
            usage::SpendRow,
        ),
        responses(Unauthorized, Forbidden, BodyTooLarge, LimitReached, UpstreamFailed, StoreUnavailable, Internal),
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "jobs", description = "Jobs: one user intent each, created idempotently"),
        (name = "attempts", description = "Attempts by hand, settling unknown attempts (admin), cancelling"),
        (name = "openai", description = "The OpenAI-compatible surface"),
        (name = "anthropic", description = "The Anthropic-compatible surface (Messages)"),
        (name = "keys", description = "API keys managed at runtime (admin): create, rotate, revoke, audit"),
        (name = "limits", description = "Budgets and rate limits on keys, teams, tags and owners, at runtime (admin)"),
        (name = "operations", description = "Routes, contracts, overview, health, metrics and this document"),
        (name = "console", description = "The operator console in the browser (`/console`)"),
    ),
)]
struct ApiDoc;

/// The document, built once.
pub fn spec() -> &'static Result<String, String> {
    static DOCUMENT: OnceLock<Result<String, String>> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut document = ApiDoc::openapi();
        // Each door declares its own paths (see its `Api`).
        for door in [
            openai::Api::openapi(),
            responses::Api::openapi(),
            super::embeddings::Api::openapi(),
            anthropic::Api::openapi(),
        ] {
            document.merge(door);
        }
        document.to_json().map_err(|err| err.to_string())
    })
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
        components.add_security_scheme(
            "x-api-key",
            SecurityScheme::ApiKey(utoipa::openapi::security::ApiKey::Header(
                utoipa::openapi::security::ApiKeyValue::with_description(
                    "x-api-key",
                    "The API key in `x-api-key`, as the Anthropic SDKs send it; instead of, never beside, \
                     `Authorization`.",
                ),
            )),
        );
    }
}
