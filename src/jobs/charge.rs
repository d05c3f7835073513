//! What an attempt costs once it leaves its open state: the one rule.
//!
//! | the attempt ends as | it is charged |
//! |---|---|
//! | `succeeded`, `superseded` (an answer: the provider did the work) | what the provider reported, priced; its reservation if it reported nothing |
//! | `failed` as `not_sent` or `rejected` (provably no work) | nothing |
//! | `failed` as `unknown` (an operator's finding that nothing was done) | nothing |
//! | `failed` as `bad_output` or `contract_violation` (the work was done, unusably) | what it reported, else its reservation |
//! | `abandoned` (nobody knows; it may have been billed) | its reservation |
//!
//! While `starting` or `unknown` an attempt holds its reservation. An
//! `abandoned` attempt whose answer arrives later is charged the answer.

use super::{AttemptOutcome, AttemptState};

/// Money (nano-units) and tokens: what an attempt reserves or is charged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    pub nanos: i64,
    pub tokens: i64,
}

impl Amounts {
    pub const ZERO: Amounts = Amounts { nanos: 0, tokens: 0 };
}

/// The charge of an attempt settling as `to` with `outcome`; `None` while
/// it stays open (it holds `reserved` then). `measured` is what the
/// provider's reported usage costs, when it reported any.
pub fn charge(
    to: AttemptState,
    outcome: Option<AttemptOutcome>,
    reserved: Amounts,
    measured: Option<Amounts>,
) -> Option<Amounts> {
    use AttemptOutcome as O;
    match to {
        AttemptState::Starting | AttemptState::Unknown => None,
        AttemptState::Succeeded | AttemptState::Superseded => Some(measured.unwrap_or(reserved)),
        AttemptState::Abandoned => Some(reserved),
        AttemptState::Failed => Some(match outcome {
            Some(O::NotSent | O::Rejected | O::Unknown) | None => Amounts::ZERO,
            Some(O::BadOutput | O::ContractViolation | O::Ok) => measured.unwrap_or(reserved),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESERVED: Amounts = Amounts { nanos: 900, tokens: 90 };
    const MEASURED: Amounts = Amounts { nanos: 300, tokens: 30 };

    #[test]
    fn answers_cost_what_was_reported() {
        for to in [AttemptState::Succeeded, AttemptState::Superseded] {
            assert_eq!(charge(to, Some(AttemptOutcome::Ok), RESERVED, Some(MEASURED)), Some(MEASURED));
            assert_eq!(charge(to, Some(AttemptOutcome::Ok), RESERVED, None), Some(RESERVED));
        }
    }

    #[test]
    fn provably_unsent_work_costs_nothing() {
        for outcome in [AttemptOutcome::NotSent, AttemptOutcome::Rejected, AttemptOutcome::Unknown] {
            assert_eq!(charge(AttemptState::Failed, Some(outcome), RESERVED, None), Some(Amounts::ZERO));
        }
    }

    #[test]
    fn work_that_may_have_been_billed_keeps_its_reservation() {
        assert_eq!(
            charge(AttemptState::Abandoned, Some(AttemptOutcome::Unknown), RESERVED, None),
            Some(RESERVED)
        );
        assert_eq!(
            charge(AttemptState::Failed, Some(AttemptOutcome::BadOutput), RESERVED, None),
            Some(RESERVED)
        );
        assert_eq!(
            charge(AttemptState::Failed, Some(AttemptOutcome::ContractViolation), RESERVED, Some(MEASURED)),
            Some(MEASURED)
        );
        assert_eq!(charge(AttemptState::Unknown, Some(AttemptOutcome::Unknown), RESERVED, None), None);
    }
}
