use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A duration written the way people write them in config: `"250ms"`,
/// `"30s"`, `"2m"`, `"1h 30m"`. Bare numbers are rejected on purpose: a
/// unit-less `30` is a guess waiting to be wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub const fn secs(secs: u64) -> Self {
        HumanDuration(Duration::from_secs(secs))
    }

    pub const fn millis(millis: u64) -> Self {
        HumanDuration(Duration::from_millis(millis))
    }
}

impl From<HumanDuration> for Duration {
    fn from(value: HumanDuration) -> Self {
        value.0
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text).map(HumanDuration).map_err(|err| {
            serde::de::Error::custom(format!(
                "`{text}` is not a duration ({err}); write it like \"250ms\", \"30s\" or \"2m\""
            ))
        })
    }
}

impl std::fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}
