//! How the OpenAPI document describes [`Problem`]: its schema (with the
//! table of every [`ProblemType`]) and the problem responses many
//! operations share. Here, beside the type, so that handlers naming these
//! responses do not reach into the document's module.

use std::borrow::Cow;

use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{
    AdditionalProperties, KnownFormat, ObjectBuilder, RefBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToResponse, ToSchema};

use super::{PROBLEM_TYPE_BASE, Problem, ProblemType};

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

/// Declares a shared response component: a problem+json answer with its
/// slugs and headers, referred to by name from every handler that can give
/// it (`(status = 401, response = Unauthorized)`), so the rows are written
/// once.
macro_rules! problem_component {
    ($(#[$doc:meta])* $name:ident, [$($slug:literal),+], [$(($header:literal, $about:literal)),*]) => {
        $(#[$doc])*
        pub struct $name;

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<utoipa::openapi::response::Response>) {
                (stringify!($name), problem_response(&[$($slug),+], &[$(($header, $about)),*]))
            }
        }
    };
}

problem_component!(
    /// 401 `unauthorized`.
    Unauthorized, ["unauthorized"], [("WWW-Authenticate", "`Bearer`")]
);
problem_component!(
    /// 403 `forbidden`.
    Forbidden, ["forbidden"], []
);
problem_component!(
    /// 413 `body-too-large`: past `[server] max_body_bytes`; nothing was stored.
    BodyTooLarge, ["body-too-large"], []
);
problem_component!(
    /// 429: a rate limit (worth retrying after `Retry-After`) or a budget
    /// (not before `resets_at`) refused the job or attempt; nothing was sent.
    LimitReached, ["rate-limited", "budget-exhausted"], [
        ("Retry-After", "Seconds until the rate limit's minute is over (`rate-limited` only)"),
        ("x-should-retry", "`false` for `budget-exhausted`")
    ]
);
problem_component!(
    /// 502 `upstream-failed`: every provider of the chain failed; the job's
    /// error (`error_detail`) lists each reason.
    UpstreamFailed, ["upstream-failed"], [("x-should-retry", "`false`")]
);
problem_component!(
    /// 503 `store-unavailable`.
    StoreUnavailable, ["store-unavailable"], [
        ("Retry-After", "`1` (seconds)"),
        ("Location", "`/v1/jobs/{id}`, when the job was stored before the store failed"),
        ("x-intentgate-job-id", "The job's id, when it was stored before the store failed")
    ]
);
problem_component!(
    /// 500 `internal`.
    Internal, ["internal"], []
);
