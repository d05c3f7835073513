//! Key material: made here, shown to its caller once, and kept by nobody.
//!
//! A stored key is `ig_` and 64 hex digits (32 bytes from the operating
//! system's generator). The gateway keeps only its SHA-256 and its first
//! [`PREFIX_LEN`] characters, which let people recognise a key in a list
//! and are far too few to guess the rest. Its `Debug` prints the prefix
//! only, so a key that reaches a log line by mistake is not leaked by it.

use crate::jobs::sha256_hex;

/// What every key the gateway makes starts with.
pub const KEY_SCHEME: &str = "ig_";

/// Random bytes in a key; hex-encoded, twice as many digits.
const RANDOM_BYTES: usize = 32;

/// Length of a key's recognisable prefix: the scheme and 8 hex digits.
pub const PREFIX_LEN: usize = KEY_SCHEME.len() + 8;

/// The operating system could not give random bytes.
#[derive(Debug, thiserror::Error)]
#[error("no random bytes for a new API key: {0}")]
pub struct NoRandomness(String);

/// A new key's material, held only until the answer that shows it is sent.
pub struct KeyMaterial(String);

impl KeyMaterial {
    /// A fresh key from the operating system's generator.
    pub fn generate() -> Result<KeyMaterial, NoRandomness> {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut bytes = [0u8; RANDOM_BYTES];
        getrandom::fill(&mut bytes).map_err(|err| NoRandomness(err.to_string()))?;
        let mut key = String::with_capacity(KEY_SCHEME.len() + 2 * RANDOM_BYTES);
        key.push_str(KEY_SCHEME);
        for byte in bytes {
            key.push(char::from(DIGITS[usize::from(byte >> 4)]));
            key.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
        }
        Ok(KeyMaterial(key))
    }

    /// The key itself: for the one answer that shows it, nothing else.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// The SHA-256 (hex) the store keeps.
    pub fn hash(&self) -> String {
        sha256_hex(self.0.as_bytes())
    }

    /// The first characters, kept for recognition.
    pub fn prefix(&self) -> String {
        self.0[..PREFIX_LEN].to_owned()
    }
}

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyMaterial({}…)", &self.0[..PREFIX_LEN])
    }
}

/// Whether `presented` has the shape of a key the gateway made: anything
/// else is refused without asking the store, so a flood of junk keys costs
/// no database read.
pub fn may_be_stored_key(presented: &str) -> bool {
    presented.len() == KEY_SCHEME.len() + 2 * RANDOM_BYTES
        && presented.starts_with(KEY_SCHEME)
        && presented.bytes().skip(KEY_SCHEME.len()).all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_well_formed_distinct_and_redacted() {
        let (a, b) = (KeyMaterial::generate().unwrap(), KeyMaterial::generate().unwrap());
        assert!(may_be_stored_key(a.reveal()), "{}", a.reveal());
        assert_ne!(a.reveal(), b.reveal());
        assert_eq!(a.prefix().len(), PREFIX_LEN);
        assert!(a.reveal().starts_with(&a.prefix()));
        assert_eq!(a.hash(), sha256_hex(a.reveal().as_bytes()));
        assert!(!format!("{a:?}").contains(&a.reveal()[PREFIX_LEN..]), "Debug shows the prefix only");
    }

    #[test]
    fn junk_is_not_a_stored_key() {
        for junk in
            ["", "ig_", "demo-alice", &format!("ig_{}", "A".repeat(64)), &format!("xx_{}", "a".repeat(64))]
        {
            assert!(!may_be_stored_key(junk), "{junk}");
        }
    }
}
