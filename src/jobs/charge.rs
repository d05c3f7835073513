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
//!
//! What a provider reported is charged up to the attempt's reservation
//! ([`Amounts::within`]): the reservation is the worst the request as sent
//! can cost (its whole body as prompt, its completion limit for each
//! choice, at the dearest rates), so a report beyond it (10 M tokens on
//! `max_tokens: 1000`) is the provider's error, not spend the budget
//! admitted. The answer keeps the usage as reported; the engine counts the
//! excess (`intentgate_usage_over_reservation_total`). A budget therefore
//! never passes its limit. An attempt that reserved nothing (no price, no
//! meter) is charged what it reported.

use super::{AttemptOutcome, AttemptState};

/// Money (nano-units) and tokens: what an attempt reserves or is charged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    pub nanos: i64,
    pub tokens: i64,
}

impl Amounts {
    pub const ZERO: Amounts = Amounts { nanos: 0, tokens: 0 };

    /// `self` (what a provider reported) no greater than `reserved`, when
    /// anything was reserved.
    pub fn within(self, reserved: Amounts) -> Amounts {
        if reserved == Amounts::ZERO {
            return self;
        }
        Amounts { nanos: self.nanos.min(reserved.nanos), tokens: self.tokens.min(reserved.tokens) }
    }
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
        AttemptState::Succeeded | AttemptState::Superseded => {
            Some(measured.map_or(reserved, |measured| measured.within(reserved)))
        }
        AttemptState::Abandoned => Some(reserved),
        AttemptState::Failed => Some(match outcome {
            Some(O::NotSent | O::Rejected | O::Unknown) | None => Amounts::ZERO,
            Some(O::BadOutput | O::ContractViolation | O::Ok) => {
                measured.map_or(reserved, |measured| measured.within(reserved))
            }
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
    fn a_report_beyond_the_reservation_is_charged_the_reservation() {
        let over = Amounts { nanos: 10_000_000, tokens: 10_000_000 };
        assert_eq!(
            charge(AttemptState::Succeeded, Some(AttemptOutcome::Ok), RESERVED, Some(over)),
            Some(RESERVED)
        );
        assert_eq!(
            charge(AttemptState::Succeeded, Some(AttemptOutcome::Ok), Amounts::ZERO, Some(over)),
            Some(over)
        );
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
