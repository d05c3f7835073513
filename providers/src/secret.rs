//! A credential that cannot leak through formatting.

use std::fmt;

/// An API key. `Debug` and `Display` print `[redacted]`, and there is no
/// `Serialize`, so the key cannot reach a log line, an error message or a
/// JSON dump by accident; code that needs it calls [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The key itself; only for building the auth header and for redaction.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_never_shows_the_key() {
        let s = Secret::new("sk-live-123");
        assert_eq!(format!("{s:?} {s} {s:#?}"), "[redacted] [redacted] [redacted]");
        assert_eq!(s.expose(), "sk-live-123");
    }
}
