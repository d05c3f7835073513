//! AWS Signature Version 4, as much of it as a JSON POST to one AWS service
//! needs: a canonical request over the method, the path as sent (each
//! segment URI-encoded once more, as AWS does for every service but S3),
//! the sorted query, the signed headers and the payload's SHA-256; the
//! string to sign over the request's scope; the signing key derived by
//! HMAC-SHA256 from the secret through date, region, service. Our own,
//! small, over `ring` (already the TLS crypto): no AWS SDK in the tree.
//! Checked against AWS's published test vectors (the tests below).
//!
//! `x-amz-content-sha256` is not sent: Bedrock does not ask for it, and the
//! payload's hash is in the canonical request whether or not it is, so the
//! body is signed either way.

use std::fmt::Write as _;

use ring::{digest, hmac};

use crate::secret::Secret;

/// The algorithm's name, as the `Authorization` header starts with it.
pub(crate) const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// An AWS identity: a key pair, and the session token of temporary ones.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    /// Sent (and signed) as `x-amz-security-token` when present.
    pub session_token: Option<Secret>,
}

/// Where and when a signature holds: `date_time` is `YYYYMMDDTHHMMSSZ`.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub date_time: &'a str,
    pub region: &'a str,
    pub service: &'a str,
}

impl Scope<'_> {
    fn date(&self) -> &str {
        self.date_time.get(..8).unwrap_or(self.date_time)
    }

    /// `20150830/us-east-1/service/aws4_request`.
    fn credential_scope(&self) -> String {
        format!("{}/{}/{}/aws4_request", self.date(), self.region, self.service)
    }
}

/// A request as signing sees it: `path` and `query` as they go on the wire
/// (already percent-encoded), the headers to sign (any case, in any order;
/// `host` and `x-amz-date` among them), and the exact body.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

/// A computed signature: the `Authorization` header's value, and its parts
/// (the simulator compares the signature alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub authorization: String,
    pub signed_headers: String,
    pub signature: String,
}

/// Signs `request` with `credentials` for `scope`.
pub fn sign(credentials: &Credentials, scope: &Scope<'_>, request: &Request<'_>) -> Signature {
    let (canonical, signed_headers) = canonical_request(request);
    let string_to_sign = format!(
        "{ALGORITHM}\n{}\n{}\n{}",
        scope.date_time,
        scope.credential_scope(),
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let key = signing_key(credentials.secret_access_key.expose(), scope);
    let signature = hex(hmac::sign(&key, string_to_sign.as_bytes()).as_ref());
    let authorization = format!(
        "{ALGORITHM} Credential={}/{}, SignedHeaders={signed_headers}, Signature={signature}",
        credentials.access_key_id,
        scope.credential_scope()
    );
    Signature { authorization, signed_headers, signature }
}

/// The canonical request and its `SignedHeaders` list.
fn canonical_request(request: &Request<'_>) -> (String, String) {
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(name, value)| {
            (name.to_ascii_lowercase(), value.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .collect();
    headers.sort();
    let mut canonical_headers = String::new();
    for (name, value) in &headers {
        let _ = writeln!(canonical_headers, "{name}:{value}");
    }
    let signed: Vec<&str> = headers.iter().map(|(name, _)| name.as_str()).collect();
    let signed_headers = signed.join(";");
    let canonical = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method,
        canonical_uri(request.path),
        canonical_query(request.query.unwrap_or_default()),
        hex(digest::digest(&digest::SHA256, request.body).as_ref())
    );
    (canonical, signed_headers)
}

/// The path as sent with each segment URI-encoded again: a model id sent
/// as `anthropic.claude-v2%3A1` is signed as `anthropic.claude-v2%253A1`.
pub(crate) fn canonical_uri(path: &str) -> String {
    if path.is_empty() {
        return "/".to_owned();
    }
    path.split('/').map(|segment| encode(segment.as_bytes())).collect::<Vec<_>>().join("/")
}

/// The query's pairs, each name and value decoded then encoded the one
/// canonical way, sorted.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (encode(&decode(name)), encode(&decode(value)))
        })
        .collect();
    pairs.sort();
    pairs.iter().map(|(name, value)| format!("{name}={value}")).collect::<Vec<_>>().join("&")
}

/// RFC 3986 encoding as AWS does it: every byte but the unreserved
/// characters as `%XX`, upper-case hex.
pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// `%XX` sequences as the bytes they stand for; anything else as it is.
fn decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        let escaped = (byte == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(value) => {
                out.push(value);
                i += 3;
            }
            None => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// `kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")`.
fn signing_key(secret: &str, scope: &Scope<'_>) -> hmac::Key {
    let mut key = format!("AWS4{secret}").into_bytes();
    for part in [scope.date(), scope.region, scope.service, "aws4_request"] {
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), part.as_bytes());
        key = tag.as_ref().to_vec();
    }
    hmac::Key::new(hmac::HMAC_SHA256, &key)
}

/// Lower-case hex, as every SigV4 digest is written.
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// `YYYYMMDDTHHMMSSZ` of a time since the Unix epoch (UTC), as
/// `x-amz-date` carries it.
pub(crate) fn amz_date(since_epoch: std::time::Duration) -> String {
    let secs = since_epoch.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or_default();
    let rest = secs % 86_400;
    // Howard Hinnant's days-to-civil, for the proleptic Gregorian calendar.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The credentials and scope every vector of AWS's suite uses.
    fn example(token: Option<&str>) -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
            session_token: token.map(Secret::new),
        }
    }

    const SCOPE: Scope<'static> =
        Scope { date_time: "20150830T123600Z", region: "us-east-1", service: "service" };
    const HOST: (&str, &str) = ("Host", "example.amazonaws.com");
    const DATE: (&str, &str) = ("X-Amz-Date", "20150830T123600Z");

    fn signature(credentials: &Credentials, request: &Request<'_>) -> String {
        sign(credentials, &SCOPE, request).signature
    }

    /// aws-sig-v4-test-suite (as vendored by awslabs/aws-c-auth,
    /// tests/aws-signing-test-suite/v4): each vector's request, and the
    /// header signature AWS publishes for it.
    #[test]
    fn aws_test_vectors() {
        let plain = |method, path, query, headers: &[(&str, &str)]| {
            signature(&example(None), &Request { method, path, query, headers, body: b"" })
        };
        assert_eq!(
            plain("GET", "/", None, &[HOST, DATE]),
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
            "get-vanilla"
        );
        assert_eq!(
            plain("POST", "/", None, &[HOST, DATE]),
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
            "post-vanilla"
        );
        assert_eq!(
            plain("GET", "/", Some("Param2=value2&Param1=value1"), &[HOST, DATE]),
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
            "get-vanilla-query-order-key-case"
        );
        assert_eq!(
            plain("POST", "/", None, &[HOST, ("My-Header1", "value1"), DATE]),
            "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c",
            "post-header-key-sort"
        );
        assert_eq!(
            plain("GET", "/\u{1234}", None, &[HOST, DATE]),
            "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85",
            "get-utf8"
        );
    }

    #[test]
    fn aws_test_vectors_with_a_body_and_a_session_token() {
        let body = b"Param1=value1";
        let hash = "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e";
        let headers = [
            ("Content-Length", "13"),
            ("Content-Type", "application/x-www-form-urlencoded"),
            HOST,
            ("X-Amz-Content-Sha256", hash),
            DATE,
        ];
        let request = Request { method: "POST", path: "/", query: None, headers: &headers, body };
        assert_eq!(
            signature(&example(None), &request),
            "d3875051da38690788ef43de4db0d8f280229d82040bfac253562e56c3f20e0b",
            "post-x-www-form-urlencoded"
        );
        let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
        let headers = [HOST, DATE, ("X-Amz-Security-Token", token)];
        let request = Request { method: "GET", path: "/", query: None, headers: &headers, body: b"" };
        let signed = sign(&example(Some(token)), &SCOPE, &request);
        assert_eq!(
            signed.signature, "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8",
            "get-vanilla-with-session-token"
        );
        assert_eq!(
            signed.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date;x-amz-security-token, \
             Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"
        );
    }

    #[test]
    fn a_model_id_is_encoded_again_in_the_canonical_uri() {
        assert_eq!(
            canonical_uri("/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"),
            "/model/anthropic.claude-sonnet-4-5-20250929-v1%253A0/invoke"
        );
        assert_eq!(canonical_uri(""), "/");
        assert_eq!(canonical_query("b=2&a=%7e&c"), "a=~&b=2&c=");
    }

    #[test]
    fn dates_are_utc_basic_format() {
        use std::time::Duration;
        assert_eq!(amz_date(Duration::from_secs(1_440_938_160)), "20150830T123600Z");
        assert_eq!(amz_date(Duration::from_secs(0)), "19700101T000000Z");
        assert_eq!(amz_date(Duration::from_secs(951_782_400)), "20000229T000000Z");
    }
}
