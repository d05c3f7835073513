//! The simulator's Google OAuth: `POST /token` grants access tokens to the
//! one service account it knows (the TEST-ONLY key beside this file) for a
//! JWT assertion it verifies as Google does — RS256 under the account's
//! key, its issuer, audience (this endpoint) and an hour at most — and the
//! Vertex routes admit a request only with a token it granted that is
//! still alive. A script can make the next token expire once it has been
//! used: the gateway's next request must bring a fresh one.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{KeyPair, RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
use serde_json::{Value, json};

use crate::sim::recent::Recent;
use crate::vertex::jwt::{LIFETIME_SECS, SCOPE};
use crate::vertex::key;

/// The service account the simulator knows. TEST ONLY: a throwaway key.
pub const TEST_SERVICE_ACCOUNT: &str = include_str!("test_service_account.json");
/// The same account's file with another private key: its assertions fail.
pub const WRONG_KEY_SERVICE_ACCOUNT: &str = include_str!("wrong_key_service_account.json");

/// How many granted tokens are remembered (the most recent ones).
const REMEMBERED: usize = 1024;
/// How far a client's clock may run ahead of the simulator's.
const SKEW_SECS: u64 = 300;
/// What a short-lived token says it lives: under any refresh margin.
const SHORT_LIFETIME_SECS: u64 = 1;

struct Account {
    client_email: String,
    key_id: String,
    public_key: Vec<u8>,
}

struct Granted {
    expires_at: Instant,
    /// Uses left before it expires, for a token scripted to expire.
    uses_left: Option<u32>,
}

struct Inner {
    granted: Recent<Granted>,
    /// How many of the next grants expire after one use.
    short_lived: u32,
}

pub(crate) struct Tokens {
    account: Option<Account>,
    inner: Mutex<Inner>,
}

/// A refused grant: the status and Google's OAuth error body.
pub(crate) type Refusal = (u16, Value);

fn refusal(error: &str, description: &str) -> Refusal {
    (400, json!({"error": error, "error_description": description}))
}

impl Tokens {
    pub(crate) fn new() -> Self {
        let account = key::parse(TEST_SERVICE_ACCOUNT).ok().map(|key| Account {
            public_key: key.pair.public_key().as_ref().to_vec(),
            client_email: key.client_email,
            key_id: key.private_key_id,
        });
        Tokens { account, inner: Mutex::new(Inner { granted: Recent::new(REMEMBERED), short_lived: 0 }) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A token granted without an assertion, as `gcloud` would mint one.
    pub(crate) fn mint(&self) -> String {
        self.grant_token(Duration::from_secs(LIFETIME_SECS), None)
    }

    /// The next `times` grants expire after their first use.
    pub(crate) fn expire_after_use(&self, times: u32) {
        self.lock().short_lived = times;
    }

    fn grant_token(&self, lifetime: Duration, uses: Option<u32>) -> String {
        let token = format!("ya29.sim-{}", uuid::Uuid::now_v7().simple());
        let granted = Granted { expires_at: Instant::now() + lifetime, uses_left: uses };
        self.lock().granted.put(&token, granted);
        token
    }

    /// Whether `token` is one granted here and still alive; uses it.
    pub(crate) fn admit(&self, token: &str) -> bool {
        let mut inner = self.lock();
        let Some(granted) = inner.granted.get_mut(token) else { return false };
        if Instant::now() >= granted.expires_at || granted.uses_left == Some(0) {
            return false;
        }
        if let Some(left) = &mut granted.uses_left {
            *left -= 1;
        }
        true
    }

    /// The token endpoint's answer to a form body, for an assertion whose
    /// audience must be `audience` (this endpoint's URL).
    pub(crate) fn exchange(&self, form: &str, audience: &str) -> Result<Value, Refusal> {
        let field = |name: &str| {
            form.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('=')).map(percent_decoded)
        };
        if field("grant_type").as_deref() != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
            return Err(refusal("unsupported_grant_type", "Invalid grant_type."));
        }
        let assertion = field("assertion").ok_or_else(|| refusal("invalid_request", "Missing assertion."))?;
        self.verify(&assertion, audience)?;
        let mut inner = self.lock();
        let short = inner.short_lived > 0;
        inner.short_lived = inner.short_lived.saturating_sub(1);
        drop(inner);
        let (expires_in, uses) = if short { (SHORT_LIFETIME_SECS, Some(1)) } else { (LIFETIME_SECS, None) };
        // A short-lived token lives as long as its use, whatever it says.
        let lifetime = Duration::from_secs(if short { LIFETIME_SECS } else { expires_in });
        let token = self.grant_token(lifetime, uses);
        Ok(json!({"access_token": token, "expires_in": expires_in, "token_type": "Bearer"}))
    }

    fn verify(&self, assertion: &str, audience: &str) -> Result<(), Refusal> {
        let bad_signature = || refusal("invalid_grant", "Invalid JWT Signature.");
        let account = self.account.as_ref().ok_or_else(bad_signature)?;
        let (signed, signature) = assertion.rsplit_once('.').ok_or_else(bad_signature)?;
        let (header, claims) = signed.split_once('.').ok_or_else(bad_signature)?;
        let decode = |part: &str| -> Option<Value> {
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
        };
        let (header, claims) = decode(header).zip(decode(claims)).ok_or_else(bad_signature)?;
        let signature = URL_SAFE_NO_PAD.decode(signature).map_err(|_| bad_signature())?;
        if header["alg"] != "RS256" || header["kid"] != account.key_id.as_str() {
            return Err(bad_signature());
        }
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &account.public_key)
            .verify(signed.as_bytes(), &signature)
            .map_err(|_| bad_signature())?;
        if claims["iss"] != account.client_email.as_str() {
            return Err(refusal("invalid_grant", "Invalid JWT: iss is not a known service account."));
        }
        if claims["aud"] != audience {
            return Err(refusal("invalid_grant", "Invalid JWT: Failed audience check."));
        }
        if !claims["scope"].as_str().is_some_and(|s| s.split(' ').any(|scope| scope == SCOPE)) {
            return Err(refusal("invalid_scope", "Invalid OAuth scope or ID token audience provided."));
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let (iat, exp) = (claims["iat"].as_u64().unwrap_or(0), claims["exp"].as_u64().unwrap_or(0));
        if exp <= now || iat > now + SKEW_SECS || exp < iat || exp - iat > LIFETIME_SECS {
            return Err(refusal(
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. \
                 Check your iat and exp values in the JWT claim.",
            ));
        }
        Ok(())
    }
}

/// A form value with its `%XX` escapes (and `+`) decoded.
fn percent_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match (escaped, bytes[i]) {
            (Some(byte), _) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, byte) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
