//! `Retry-After` parsing (RFC 9110 §10.2.3): delay-seconds or an HTTP-date.

use std::time::{Duration, SystemTime};

/// Parses a `Retry-After` value relative to `now`. A date in the past gives
/// zero; anything unparsable gives `None` rather than a guess.
pub(crate) fn parse(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(parse("7", now), Some(Duration::from_secs(7)));
        assert_eq!(parse(" 0 ", now), Some(Duration::ZERO));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(parse(&later, now), Some(Duration::from_secs(30)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(parse(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse("soon", now), None);
        assert_eq!(parse("-1", now), None);
    }
}
