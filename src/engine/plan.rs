//! Which providers come next: a pure function of the route's chain and the
//! attempts so far, so a driver that resumes a job (after a crash, or after
//! an unknown attempt was settled) continues exactly where the last stopped.

use crate::jobs::Attempt;

/// The chain positions still to try, in order: those after the last
/// attempt's provider (all of them when there is no attempt yet). Empty when
/// the chain is exhausted or the last provider is no longer in it.
pub fn remaining(chain: &[String], attempts: &[Attempt]) -> std::ops::Range<usize> {
    let Some(last) = attempts.last() else {
        return 0..chain.len();
    };
    match chain.iter().position(|name| *name == last.provider) {
        Some(position) => position + 1..chain.len(),
        None => chain.len()..chain.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::AttemptState;

    fn attempt(provider: &str) -> Attempt {
        Attempt {
            id: uuid::Uuid::nil(),
            job_id: uuid::Uuid::nil(),
            number: 1,
            provider: provider.into(),
            state: AttemptState::Failed,
            job_version: 0,
            outcome: None,
            detail: None,
            response: None,
            resolved_by: None,
            started_at_ms: 0,
            finished_at_ms: Some(0),
            reserved: Default::default(),
            charged: None,
            usage: None,
        }
    }

    #[test]
    fn walks_the_chain_in_order_and_then_stops() {
        let chain = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(remaining(&chain, &[]), 0..2);
        assert_eq!(remaining(&chain, &[attempt("a")]), 1..2);
        assert!(remaining(&chain, &[attempt("a"), attempt("a"), attempt("b")]).is_empty());
        assert!(
            remaining(&chain, &[attempt("gone")]).is_empty(),
            "a provider no longer in the chain ends it"
        );
    }
}
