//! The assertion a service account signs to ask for an access token
//! (Google's OAuth 2.0 JWT bearer grant, RFC 7523): a JWT whose issuer is
//! the account, whose audience is the token endpoint, valid for an hour,
//! signed RS256 with the account's key.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::RSA_PKCS1_SHA256;
use serde_json::json;

use super::key::ServiceAccountKey;

/// What the token is for: every Google Cloud API the account may call.
pub(crate) const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// How long an assertion is valid: the most Google accepts.
pub(crate) const LIFETIME_SECS: u64 = 3600;

/// The signed assertion, `issued_at` in seconds since the Unix epoch. Fails
/// only if the signer does (no randomness, a key ring refuses).
pub(crate) fn assertion(key: &ServiceAccountKey, issued_at: u64) -> Result<String, String> {
    let header = json!({"alg": "RS256", "typ": "JWT", "kid": key.private_key_id});
    let claims = json!({
        "iss": key.client_email,
        "scope": SCOPE,
        "aud": key.token_uri.as_str(),
        "iat": issued_at,
        "exp": issued_at + LIFETIME_SECS,
    });
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut signature = vec![0; key.pair.public().modulus_len()];
    key.pair
        .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signed.as_bytes(), &mut signature)
        .map_err(|_| "the service account's key could not sign the assertion".to_owned())?;
    Ok(format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)))
}

#[cfg(test)]
mod tests {
    use ring::signature::{KeyPair, RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};
    use serde_json::Value;

    use super::*;
    use crate::vertex::key;

    const TEST_KEY: &str = include_str!("../sim/vertex/test_service_account.json");
    const WRONG_KEY: &str = include_str!("../sim/vertex/wrong_key_service_account.json");

    fn part(encoded: &str) -> Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(encoded).unwrap()).unwrap()
    }

    #[test]
    fn the_assertion_is_an_rs256_jwt_the_public_key_verifies() {
        let key = key::parse(TEST_KEY).unwrap();
        let jwt = assertion(&key, 1_700_000_000).unwrap();
        let pieces: Vec<&str> = jwt.split('.').collect();
        assert_eq!(pieces.len(), 3);
        assert!(!jwt.contains('=') && !jwt.contains('+') && !jwt.contains('/'), "base64url, no padding");
        assert_eq!(part(pieces[0]), json!({"alg": "RS256", "typ": "JWT", "kid": "sim-test-key-1"}));
        let claims = part(pieces[1]);
        assert_eq!(claims["iss"], "intentgate-sim@sim-project.iam.gserviceaccount.com");
        assert_eq!(claims["scope"], SCOPE);
        assert_eq!(claims["aud"], "http://127.0.0.1:9101/token");
        assert_eq!(claims["exp"].as_u64(), Some(1_700_000_000 + 3600));

        let signature = URL_SAFE_NO_PAD.decode(pieces[2]).unwrap();
        let signed = format!("{}.{}", pieces[0], pieces[1]);
        let public = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key.pair.public_key().as_ref());
        assert!(public.verify(signed.as_bytes(), &signature).is_ok());
        let wrong = key::parse(WRONG_KEY).unwrap();
        let forged = assertion(&wrong, 1_700_000_000).unwrap();
        let (forged_signed, forged_signature) = forged.rsplit_once('.').unwrap();
        let forged_signature = URL_SAFE_NO_PAD.decode(forged_signature).unwrap();
        assert!(
            public.verify(forged_signed.as_bytes(), &forged_signature).is_err(),
            "another key's signature"
        );
    }
}
