//! A service account's access token on each request: taken from the cache,
//! minted from the key when the cache has none worth sending, and set as
//! a sensitive `Authorization` header just before the request leaves.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use tokio::time::Instant;

use super::cache::TokenCache;
use super::key::ServiceAccountKey;
use super::token::exchange;
use crate::authorize::{Authorize, Outgoing};
use crate::outcome::Failure;

#[derive(Debug)]
pub(crate) struct ServiceAccount {
    key: ServiceAccountKey,
    /// Calls the token endpoint (its own pool: not the model's host).
    client: reqwest::Client,
    /// The longest a token exchange may take.
    limit: Duration,
    cache: TokenCache,
}

impl ServiceAccount {
    pub(crate) fn new(key: ServiceAccountKey, client: reqwest::Client, limit: Duration) -> Self {
        ServiceAccount { key, client, limit, cache: TokenCache::new(Arc::new(Instant::now)) }
    }
}

impl Authorize for ServiceAccount {
    fn authorize<'a>(&'a self, request: Outgoing<'a>) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let token = self.cache.get(|| exchange(&self.client, &self.key, self.limit)).await?;
            let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
                Failure::NotSent {
                    reason: "the access token is not a valid header value".into(),
                    local: true,
                }
            })?;
            value.set_sensitive(true);
            request.headers.insert(AUTHORIZATION, value);
            Ok(())
        })
    }
}
