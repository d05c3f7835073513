//! `Prefer: wait=N` (RFC 7240): how long a request may block for its job.

use std::time::Duration;

use axum::http::HeaderMap;

/// Longest wait granted, whatever the client asks.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// The `wait` preference in seconds, capped at [`MAX_WAIT`]; `None` without one.
pub fn wait_preference(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split([',', ';']))
        .filter_map(|pref| {
            let (name, value) = pref.split_once('=')?;
            (name.trim().eq_ignore_ascii_case("wait"))
                .then(|| value.trim().trim_matches('"').parse::<u64>().ok())?
        })
        .next()
        .map(|secs| Duration::from_secs(secs).min(MAX_WAIT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn prefer(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("prefer", HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn parses_and_caps_the_wait() {
        assert_eq!(wait_preference(&prefer("wait=5")), Some(Duration::from_secs(5)));
        assert_eq!(wait_preference(&prefer("respond-async, wait=10")), Some(Duration::from_secs(10)));
        assert_eq!(wait_preference(&prefer("wait=100000")), Some(MAX_WAIT));
        assert_eq!(wait_preference(&prefer("return=minimal")), None);
        assert_eq!(wait_preference(&HeaderMap::new()), None);
    }
}
