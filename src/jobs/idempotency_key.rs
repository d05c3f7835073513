/// A validated `Idempotency-Key`: 1–255 visible ASCII characters
/// (`docs/design.md`, "HTTP semantics of the jobs API"). The RFC 8941
/// sf-string form (`"abc"`, as the IETF idempotency-key draft writes it) is
/// accepted and unquoted, so `"abc"` and `abc` name the same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

pub const MAX_KEY_LEN: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidIdempotencyKey {
    #[error("the Idempotency-Key is empty")]
    Empty,
    #[error("the Idempotency-Key is {0} characters long; at most 255 are allowed")]
    TooLong(usize),
    #[error("the Idempotency-Key may only contain visible ASCII characters")]
    NotVisibleAscii,
    #[error("the Idempotency-Key is a malformed quoted string")]
    BadQuoting,
}

impl IdempotencyKey {
    pub fn parse(raw: &str) -> Result<Self, InvalidIdempotencyKey> {
        let key = if raw.len() >= 2 && raw.starts_with('"') && raw.ends_with('"') {
            unquote_sf_string(&raw[1..raw.len() - 1])?
        } else {
            raw.to_owned()
        };
        if key.is_empty() {
            return Err(InvalidIdempotencyKey::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(InvalidIdempotencyKey::TooLong(key.len()));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(InvalidIdempotencyKey::NotVisibleAscii);
        }
        Ok(IdempotencyKey(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A key a door made up for a client that sent none: unique, so the
    /// request is a new job, and known to no client, so nobody can come
    /// back for its result under it.
    pub fn minted() -> Self {
        IdempotencyKey(format!("{MINTED_PREFIX}{}", uuid::Uuid::now_v7()))
    }

    /// The key a door derives for a client that sent none, from the
    /// caller, the request's fingerprint and the number of the window it
    /// falls in (see `config::Keyless::Derive`): the same caller's same
    /// request in the same window is the same key. The owner is hashed in
    /// although keys are already scoped per owner, so a derived key read in
    /// a log or the console names nothing another caller could reproduce.
    pub fn derived(owner: &str, fingerprint: &super::Fingerprint, window: i64) -> Self {
        let named = format!("{}:{owner}{}", owner.len(), fingerprint.as_str());
        let digest = super::sha256_hex(named.as_bytes());
        let digest = digest.get(..32).unwrap_or(&digest);
        IdempotencyKey(format!("{DERIVED_PREFIX}{digest}-{window}"))
    }

    /// Whether a door minted `key` (see [`IdempotencyKey::minted`]).
    pub fn was_minted(key: &str) -> bool {
        key.starts_with(MINTED_PREFIX)
    }
}

const MINTED_PREFIX: &str = "minted-";
const DERIVED_PREFIX: &str = "derived-";

/// RFC 8941 §3.3.3: inside the quotes only `\"` and `\\` are escapes.
fn unquote_sf_string(inner: &str) -> Result<String, InvalidIdempotencyKey> {
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('"' | '\\')) => out.push(escaped),
                _ => return Err(InvalidIdempotencyKey::BadQuoting),
            },
            '"' => return Err(InvalidIdempotencyKey::BadQuoting),
            other => out.push(other),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_quoted_forms_name_the_same_key() {
        assert_eq!(IdempotencyKey::parse("order-42").unwrap().as_str(), "order-42");
        assert_eq!(IdempotencyKey::parse("\"order-42\"").unwrap().as_str(), "order-42");
        assert_eq!(IdempotencyKey::parse(r#""a\"b""#).unwrap().as_str(), "a\"b");
    }

    #[test]
    fn rejects_empty_long_and_invisible_keys() {
        assert_eq!(IdempotencyKey::parse(""), Err(InvalidIdempotencyKey::Empty));
        assert_eq!(IdempotencyKey::parse("\"\""), Err(InvalidIdempotencyKey::Empty));
        assert_eq!(IdempotencyKey::parse(&"k".repeat(256)), Err(InvalidIdempotencyKey::TooLong(256)));
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
        assert_eq!(IdempotencyKey::parse("a b"), Err(InvalidIdempotencyKey::NotVisibleAscii));
        assert_eq!(IdempotencyKey::parse("\"a\"b\""), Err(InvalidIdempotencyKey::BadQuoting));
    }
}
