use serde::{Deserialize, Serialize};

use super::UnknownState;

/// Why an attempt ended as it did: the provider adapter's outcome class, or
/// the contract's verdict on an answer. Stored in `attempts.outcome` (a CHECK
/// lists the same names) and used as the `outcome` label of the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// A complete, usable answer.
    Ok,
    /// Nothing reached the provider (proven no work).
    NotSent,
    /// The provider answered with an error (proven no work).
    Rejected,
    /// A 2xx answer that is not usable (proven no usable work).
    BadOutput,
    /// The request may have reached the provider and no complete answer
    /// came back: the work may have been done (R5).
    Unknown,
    /// A usable answer that breaks the route's contract (R9).
    ContractViolation,
}

impl AttemptOutcome {
    pub const ALL: [AttemptOutcome; 6] = [
        AttemptOutcome::Ok,
        AttemptOutcome::NotSent,
        AttemptOutcome::Rejected,
        AttemptOutcome::BadOutput,
        AttemptOutcome::Unknown,
        AttemptOutcome::ContractViolation,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Ok => "ok",
            AttemptOutcome::NotSent => "not_sent",
            AttemptOutcome::Rejected => "rejected",
            AttemptOutcome::BadOutput => "bad_output",
            AttemptOutcome::Unknown => "unknown",
            AttemptOutcome::ContractViolation => "contract_violation",
        }
    }
}

impl From<intentgate_providers::OutcomeClass> for AttemptOutcome {
    fn from(class: intentgate_providers::OutcomeClass) -> Self {
        use intentgate_providers::OutcomeClass;
        match class {
            OutcomeClass::Ok => AttemptOutcome::Ok,
            OutcomeClass::NotSent => AttemptOutcome::NotSent,
            OutcomeClass::Rejected => AttemptOutcome::Rejected,
            OutcomeClass::BadOutput => AttemptOutcome::BadOutput,
            OutcomeClass::Unknown => AttemptOutcome::Unknown,
        }
    }
}

impl std::str::FromStr for AttemptOutcome {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UnknownState::parse("attempt outcome", &AttemptOutcome::ALL, AttemptOutcome::as_str, s)
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_cover_every_provider_class() {
        for outcome in AttemptOutcome::ALL {
            assert_eq!(outcome.as_str().parse::<AttemptOutcome>().ok(), Some(outcome));
        }
        for class in intentgate_providers::OutcomeClass::ALL {
            assert_eq!(AttemptOutcome::from(class).as_str(), class.as_str());
        }
    }
}
