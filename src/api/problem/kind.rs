//! Every problem type the API answers with, each with its slug, status,
//! title and the headers that always go with it.
//!
//! One table, so that a slug cannot drift from its status between two call
//! sites, and so that the OpenAPI document (which lists [`ProblemType::ALL`])
//! cannot miss a type the code answers with. The doc comment of a variant is
//! the "when" column of that table.

use axum::http::StatusCode;

/// Declares [`ProblemType`] and its lookups from one row per variant:
/// `Variant = "slug", STATUS, "Title";` under the variant's doc comment.
macro_rules! problem_types {
    ($(
        $(#[doc = $when:literal])+
        $variant:ident = $slug:literal, $status:ident, $title:literal;
    )+) => {
        /// A problem's `type`: the part of RFC 9457's problem a client
        /// matches on.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ProblemType {
            $($(#[doc = $when])+ $variant,)+
        }

        impl ProblemType {
            /// Every type, in the order the documentation lists them.
            pub const ALL: &'static [ProblemType] = &[$(ProblemType::$variant),+];

            /// The last segment of the `type` URI: what clients match on.
            pub fn slug(self) -> &'static str {
                match self {
                    $(ProblemType::$variant => $slug,)+
                }
            }

            pub fn status(self) -> StatusCode {
                match self {
                    $(ProblemType::$variant => StatusCode::$status,)+
                }
            }

            /// The type's title (a problem may carry a more specific one:
            /// [`super::Problem::titled`]).
            pub fn title(self) -> &'static str {
                match self {
                    $(ProblemType::$variant => $title,)+
                }
            }

            /// When the API answers with this type, for people (the OpenAPI
            /// document's table).
            pub fn when(self) -> &'static str {
                match self {
                    $(ProblemType::$variant => concat!($($when),+).trim_ascii(),)+
                }
            }
        }
    };
}

problem_types! {
    /// no `Authorization: Bearer`, or an unknown key; a stored key that was
    /// revoked, has expired or was rotated past its overlap (`reason` says
    /// which). Nothing was stored
    Unauthorized = "unauthorized", UNAUTHORIZED, "Missing or invalid API key";
    /// an admin call without an admin key
    Forbidden = "forbidden", FORBIDDEN, "Forbidden";
    /// the key may use only some routes, and this request's route
    /// (`route`) is not one of them. Nothing was stored
    RouteNotAllowed = "route-not-allowed", FORBIDDEN, "Route not allowed for this key";
    /// a key admin call asks for a key with more rights than the caller's
    /// own key (an admin role, a route, a later expiry), or for a change to
    /// such a key
    KeyRightsExceeded = "key-rights-exceeded", FORBIDDEN, "More rights than your key has";
    /// the API key cannot change: it was revoked, it was rotated already,
    /// or another change came first (read it again)
    KeyConflict = "key-conflict", CONFLICT, "API key cannot change";
    /// the stored limit was removed, or another change came first (read it
    /// again)
    LimitConflict = "limit-conflict", CONFLICT, "Limit cannot change";
    /// no such job (or not yours), no such attempt, no such endpoint
    NotFound = "not-found", NOT_FOUND, "Not found";
    /// the endpoint does not accept this method
    MethodNotAllowed = "method-not-allowed", METHOD_NOT_ALLOWED, "Method not allowed";
    /// no `Idempotency-Key` on a job-creating POST
    IdempotencyKeyMissing = "idempotency-key-missing", BAD_REQUEST, "Idempotency-Key missing";
    /// empty, over 255 characters, not visible ASCII, or sent twice (the RFC
    /// 8941 quoted form `"abc"` is accepted)
    IdempotencyKeyInvalid = "idempotency-key-invalid", BAD_REQUEST, "Idempotency-Key invalid";
    /// `Intentgate-Tags` (with `metadata.tags`) names more than 16 tags, or
    /// a tag that is not 1 to 64 letters, digits and `-_.:/=@`. Nothing was
    /// stored
    InvalidTags = "invalid-tags", BAD_REQUEST, "Invalid tags";
    /// the body is not JSON
    MalformedJson = "malformed-json", BAD_REQUEST, "Malformed JSON";
    /// the request cannot be read: a body that breaks HTTP framing (a
    /// malformed chunk), a path segment that is not UTF-8, a query
    /// parameter sent twice or of the wrong type
    MalformedRequest = "malformed-request", BAD_REQUEST, "Malformed request";
    /// a required query parameter is missing
    MissingParameter = "missing-parameter", BAD_REQUEST, "Missing query parameter";
    /// JSON, but not a valid request (unknown fields are refused)
    InvalidBody = "invalid-body", UNPROCESSABLE_ENTITY, "Invalid body";
    /// a configuration reload refused the file: it does not parse,
    /// validate or build (a provider's key variable unset, a suite
    /// unreadable); the running configuration stays
    ConfigRejected = "config-rejected", UNPROCESSABLE_ENTITY, "Configuration refused";
    /// `route` (or `model`) is not configured
    UnknownRoute = "unknown-route", UNPROCESSABLE_ENTITY, "Unknown route";
    /// a compatible door's `model` names no route or alias (its SDKs
    /// expect a 404 for it)
    ModelNotFound = "model-not-found", NOT_FOUND, "Model not found";
    /// the provider asked for is not in the job's route chain
    ProviderNotInChain = "provider-not-in-chain", UNPROCESSABLE_ENTITY, "Provider not in chain";
    /// the body is over `server.max_body_bytes`
    BodyTooLarge = "body-too-large", PAYLOAD_TOO_LARGE, "Request body too large";
    /// the request body did not arrive within `server.body_read_timeout`
    BodyTimeout = "body-timeout", REQUEST_TIMEOUT, "Request body timed out";
    /// the key is bound to another request body
    IdempotencyKeyReused = "idempotency-key-reused", CONFLICT, "Idempotency-Key reused";
    /// an attempt is `starting` (or another instance drives the job)
    AttemptInFlight = "attempt-in-flight", CONFLICT, "Attempt in flight";
    /// an attempt is `unknown`: settle it first
    OutcomeUnknown = "outcome-unknown", CONFLICT, "Outcome unknown";
    /// the job already succeeded or was cancelled
    JobCompleted = "job-completed", CONFLICT, "Job completed";
    /// the job for this key is still running; retry after `Retry-After`
    JobInProgress = "job-in-progress", CONFLICT, "Job in progress";
    /// resolving an attempt that is not `unknown`
    AttemptNotUnknown = "attempt-not-unknown", CONFLICT, "Attempt not unknown";
    /// no provider of the chain has a passing, current contract record
    NoEligibleProvider = "no-eligible-provider", CONFLICT, "No eligible provider";
    /// a spend budget of the caller has no room for this request's worst
    /// case in its window; `x-should-retry: false`, and `resets_at` says
    /// when the window starts over. Nothing was stored or sent
    BudgetExhausted = "budget-exhausted", TOO_MANY_REQUESTS, "Budget exhausted";
    /// a requests- or tokens-per-minute limit is reached; retry after
    /// `Retry-After` seconds. Nothing was stored or sent
    RateLimited = "rate-limited", TOO_MANY_REQUESTS, "Rate limited";
    /// every provider of the route's chain failed
    UpstreamFailed = "upstream-failed", BAD_GATEWAY, "Every provider failed";
    /// a provider's content policy refused the request (`error_detail`
    /// has its reason); not failed over unless the route says so
    ContentRefused = "content-refused", BAD_REQUEST, "Refused by the provider's content policy";
    /// an unexpected error; the detail is in the gateway's log
    Internal = "internal", INTERNAL_SERVER_ERROR, "Internal error";
    /// the database cannot be reached; `Retry-After: 1`. Before the job was
    /// stored: nothing stored, no provider called. After (`job_id`): the job
    /// exists and may have reached a provider; retry under the same key
    StoreUnavailable = "store-unavailable", SERVICE_UNAVAILABLE, "Job store unavailable";
    /// (`/v1/messages/count_tokens`) as many token counts as the gateway
    /// runs at once are running; `Retry-After: 1`
    TokenizerBusy = "tokenizer-busy", SERVICE_UNAVAILABLE, "Too many token counts at once";
    /// `/readyz` of a replica that is shutting down: it finishes what it
    /// has, takes nothing new; a load balancer sends traffic elsewhere. A
    /// request that reaches it after its engine stopped gets the same:
    /// nothing was started
    Draining = "draining", SERVICE_UNAVAILABLE, "Shutting down";
}

/// `x-should-retry: false`: tells the OpenAI SDKs (which retry 409 and 5xx
/// by default) that sending the same request again cannot help.
const NO_RETRY: &[(&str, &str)] = &[("x-should-retry", "false")];

/// `Retry-After: 1`: the same request, a second later, may succeed.
const RETRY_SOON: &[(&str, &str)] = &[("retry-after", "1")];

impl ProblemType {
    /// Headers every problem of this type carries (names in lower case).
    pub fn headers(self) -> &'static [(&'static str, &'static str)] {
        match self {
            ProblemType::Unauthorized => &[("www-authenticate", "Bearer")],
            // Conflicts that retrying cannot fix.
            ProblemType::IdempotencyKeyReused
            | ProblemType::AttemptInFlight
            | ProblemType::OutcomeUnknown
            | ProblemType::JobCompleted
            | ProblemType::AttemptNotUnknown
            | ProblemType::NoEligibleProvider
            | ProblemType::BudgetExhausted
            | ProblemType::UpstreamFailed
            | ProblemType::ContentRefused
            | ProblemType::ConfigRejected => NO_RETRY,
            ProblemType::JobInProgress | ProblemType::StoreUnavailable | ProblemType::TokenizerBusy => {
                RETRY_SOON
            }
            // The rest of the body may still be on its way: the connection
            // cannot carry another request.
            ProblemType::BodyTimeout => &[("connection", "close")],
            ProblemType::Forbidden
            | ProblemType::RouteNotAllowed
            | ProblemType::KeyRightsExceeded
            | ProblemType::KeyConflict
            | ProblemType::LimitConflict
            | ProblemType::NotFound
            | ProblemType::MethodNotAllowed
            | ProblemType::IdempotencyKeyMissing
            | ProblemType::IdempotencyKeyInvalid
            | ProblemType::InvalidTags
            | ProblemType::MalformedJson
            | ProblemType::MalformedRequest
            | ProblemType::MissingParameter
            | ProblemType::InvalidBody
            | ProblemType::UnknownRoute
            | ProblemType::ModelNotFound
            | ProblemType::ProviderNotInChain
            | ProblemType::BodyTooLarge
            | ProblemType::Internal
            // Its `Retry-After` depends on the window: set per problem.
            | ProblemType::RateLimited
            | ProblemType::Draining => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for kind in ProblemType::ALL {
            let slug = kind.slug();
            assert!(slug.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'), "{slug}");
            assert!(seen.insert(slug), "{slug} twice");
            assert!(kind.status().is_client_error() || kind.status().is_server_error(), "{slug}");
            assert!(!kind.when().is_empty() && !kind.when().starts_with(' '), "{slug}");
        }
    }
}
