//! What the simulator signs so it can tell its own work when a client sends
//! it back: Anthropic's thinking signatures and OpenAI's encrypted
//! reasoning are opaque to clients and must return unchanged, to the
//! provider that wrote them. An HMAC under the simulator's own key, so an
//! altered, dropped or made-up block is refused as the real APIs refuse it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The simulator's key (a simulator's, not a secret).
const KEY: &[u8] = b"intentgate-simulator-seal";

/// The seal of `content` in `domain` (`thinking`, `reasoning`).
pub(crate) fn seal(domain: &str, content: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, KEY);
    let signed = ring::hmac::sign(&key, format!("{domain}\n{content}").as_bytes());
    format!("sim{}", STANDARD.encode(signed.as_ref()))
}

/// Whether `sealed` is the seal of `content` in `domain`.
pub(crate) fn verify(domain: &str, content: &str, sealed: &str) -> bool {
    seal(domain, content) == sealed
}
