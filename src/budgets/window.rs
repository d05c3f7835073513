//! The windows budgets and rate limits count in: fixed, aligned, in UTC.
//!
//! Fixed windows (rather than sliding ones) make a limit a single counter
//! row per window, checked and booked in one conditional write; the price is
//! the usual one: a client can spend a whole window's limit at its end and
//! the next window's at the start of the next.

use chrono::{Datelike, TimeZone, Utc};
use serde::Deserialize;

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// A budget's or rate limit's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub enum Window {
    /// Rate limits: the wall-clock minute.
    Minute,
    /// `1h`: the wall-clock hour.
    Hour,
    /// `1d`: the UTC day, from midnight.
    Day,
    /// `30d`: thirty days counted from the Unix epoch (so every replica
    /// agrees on where one starts without storing anything).
    ThirtyDays,
    /// `month`: the calendar month in UTC.
    Month,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown window `{0}` (expected 1h, 1d, 30d or month)")]
pub struct WindowError(String);

impl TryFrom<String> for Window {
    type Error = WindowError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        match text.as_str() {
            "1h" => Ok(Window::Hour),
            "1d" => Ok(Window::Day),
            "30d" => Ok(Window::ThirtyDays),
            "month" | "1mo" => Ok(Window::Month),
            _ => Err(WindowError(text)),
        }
    }
}

impl Window {
    /// How the window is written in the config and in meter names.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Minute => "1m",
            Window::Hour => "1h",
            Window::Day => "1d",
            Window::ThirtyDays => "30d",
            Window::Month => "month",
        }
    }

    /// `[start, end)` in epoch milliseconds of the window holding `at_ms`.
    pub fn bounds(self, at_ms: i64) -> (i64, i64) {
        let fixed = |len: i64| {
            let start = at_ms.div_euclid(len) * len;
            (start, start + len)
        };
        match self {
            Window::Minute => fixed(MINUTE_MS),
            Window::Hour => fixed(HOUR_MS),
            Window::Day => fixed(DAY_MS),
            Window::ThirtyDays => fixed(30 * DAY_MS),
            Window::Month => month_bounds(at_ms),
        }
    }
}

fn month_bounds(at_ms: i64) -> (i64, i64) {
    let Some(at) = Utc.timestamp_millis_opt(at_ms).single() else {
        // Outside chrono's range (hundreds of millennia away): one day.
        return Window::Day.bounds(at_ms);
    };
    let start_of = |year: i32, month: u32| {
        Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0).single().map(|t| t.timestamp_millis())
    };
    let (next_year, next_month) =
        if at.month() == 12 { (at.year() + 1, 1) } else { (at.year(), at.month() + 1) };
    match (start_of(at.year(), at.month()), start_of(next_year, next_month)) {
        (Some(start), Some(end)) => (start, end),
        _ => Window::Day.bounds(at_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_aligned_in_utc() {
        // 2026-11-30T13:45:10.5Z
        let at = 1_796_046_310_500;
        assert_eq!(Window::Minute.bounds(at), (1_796_046_300_000, 1_796_046_360_000));
        assert_eq!(Window::Hour.bounds(at), (1_796_043_600_000, 1_796_047_200_000));
        assert_eq!(Window::Day.bounds(at), (1_795_996_800_000, 1_796_083_200_000));
        // November 2026 → December 2026.
        assert_eq!(Window::Month.bounds(at), (1_793_491_200_000, 1_796_083_200_000));
        let (start, end) = Window::ThirtyDays.bounds(at);
        assert!(start <= at && at < end && end - start == 30 * DAY_MS);
    }

    #[test]
    fn december_rolls_into_the_next_year() {
        // 2026-12-15T00:00:00Z
        let (start, end) = Window::Month.bounds(1_797_292_800_000);
        assert_eq!((start, end), (1_796_083_200_000, 1_798_761_600_000));
    }

    #[test]
    fn unknown_windows_are_refused() {
        assert!(Window::try_from("2d".to_owned()).is_err());
        assert_eq!(Window::try_from("1d".to_owned()), Ok(Window::Day));
    }
}
