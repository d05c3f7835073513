//! Trading a signed assertion for an access token at the key's `token_uri`.
//! Every way this fails is `not_sent`: the model's endpoint has not been
//! called. A refusal of the assertion is `local` (a wrong or revoked key is
//! this gateway's configuration, not the provider's health, and retrying
//! will not mend it); an endpoint that cannot be reached is not.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::CONTENT_TYPE;
use serde::Deserialize;
use tokio::time::Instant;

use super::cache::Token;
use super::jwt::assertion;
use super::key::ServiceAccountKey;
use crate::outcome::Failure;
use crate::secret::Secret;
use crate::transport::{error_chain, read_body};

/// The grant type of a JWT assertion (RFC 7523), form-encoded.
const GRANT: &str = "urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer";

/// The most of the token endpoint's answer that is read.
const ANSWER_LIMIT: usize = 64 * 1024;

#[derive(Deserialize)]
struct Granted {
    access_token: String,
    expires_in: u64,
    #[serde(default)]
    token_type: Option<String>,
}

/// An OAuth error answer: its words, which never hold the assertion.
#[derive(Deserialize)]
struct Refused {
    error: Option<String>,
    error_description: Option<String>,
}

/// A fresh access token for `key`, asked for within `limit`.
pub(crate) async fn exchange(
    client: &reqwest::Client,
    key: &ServiceAccountKey,
    limit: Duration,
) -> Result<Token, Failure> {
    let refused = |reason: String| Failure::NotSent { reason, local: true };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
    let jwt = assertion(key, now).map_err(refused)?;
    let request = client
        .post(key.token_uri.clone())
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("grant_type={GRANT}&assertion={jwt}"));
    let unreachable = |reason: String| Failure::NotSent {
        reason: format!("the access token could not be fetched from the key's token_uri: {reason}"),
        local: false,
    };
    let deadline = Instant::now() + limit;
    let response = match tokio::time::timeout_at(deadline, request.send()).await {
        Err(_) => return Err(unreachable(format!("no answer within {limit:?}"))),
        Ok(Err(err)) => return Err(unreachable(error_chain(&err))),
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    let body = read_body(response, deadline, limit, ANSWER_LIMIT)
        .await
        .map_err(|failure| unreachable(failure.to_string()))?;
    if !status.is_success() {
        let words = serde_json::from_slice::<Refused>(&body)
            .map(|r| format!("{} {}", r.error.unwrap_or_default(), r.error_description.unwrap_or_default()))
            .unwrap_or_default();
        let reason = format!(
            "the token endpoint refused the service account's assertion ({status}): {}",
            words.trim()
        );
        // 5xx and 429 are the endpoint's trouble, not the key's.
        return Err(Failure::NotSent {
            reason,
            local: !(status.is_server_error() || status.as_u16() == 429),
        });
    }
    let granted: Granted = serde_json::from_slice(&body)
        .map_err(|_| unreachable("the token endpoint's answer is not an access token".into()))?;
    if granted.token_type.as_deref().is_some_and(|kind| !kind.eq_ignore_ascii_case("bearer")) {
        return Err(refused("the token endpoint granted a token that is not a bearer token".into()));
    }
    Ok(Token { value: Secret::new(granted.access_token), lifetime: Duration::from_secs(granted.expires_in) })
}
