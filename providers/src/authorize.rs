//! Credentials that depend on the request itself. A static key is a header
//! set once when the endpoint is built (see `transport::Endpoint::new`); a
//! cloud's credentials are not: AWS signs each request over its URL, headers
//! and body (Signature Version 4), Google's service accounts trade a signed
//! assertion for an access token that expires. Both run here, per request,
//! just before it is sent, behind one trait so the transport knows neither.

use std::fmt;

use futures_util::future::BoxFuture;
use reqwest::header::HeaderMap;

use crate::outcome::Failure;

/// A request about to be sent, as far as credentials need to see it.
pub(crate) struct Outgoing<'a> {
    /// Signed over by a signature; a bearer token needs neither it nor the body.
    #[allow(dead_code)]
    pub(crate) url: &'a reqwest::Url,
    /// Every header the request will carry; credentials are added here.
    pub(crate) headers: &'a mut HeaderMap,
    /// The exact bytes of the body.
    #[allow(dead_code)]
    pub(crate) body: &'a [u8],
}

/// Adds a request's credentials. An `Err` means the request was not sent:
/// signing and fetching a token both happen before a byte reaches the
/// provider, so the failure is `not_sent` and the chain may move on.
pub(crate) trait Authorize: Send + Sync + fmt::Debug {
    fn authorize<'a>(&'a self, request: Outgoing<'a>) -> BoxFuture<'a, Result<(), Failure>>;
}
