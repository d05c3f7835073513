//! Which provider comes next: a pure function of the route's chain and the
//! attempts so far, so a driver that resumes a job (after a crash, or after
//! an unknown attempt was settled) continues exactly where the last stopped.

use crate::jobs::Attempt;

/// The provider after the last attempt's provider in `chain`; the first when
/// there is no attempt yet; `None` when the chain is exhausted.
pub fn next_provider<'a>(chain: &'a [String], attempts: &[Attempt]) -> Option<&'a str> {
    let Some(last) = attempts.last() else {
        return chain.first().map(String::as_str);
    };
    let position = chain.iter().position(|name| *name == last.provider)?;
    chain.get(position + 1).map(String::as_str)
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
        }
    }

    #[test]
    fn walks_the_chain_in_order_and_then_stops() {
        let chain = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(next_provider(&chain, &[]), Some("a"));
        assert_eq!(next_provider(&chain, &[attempt("a")]), Some("b"));
        assert_eq!(next_provider(&chain, &[attempt("a"), attempt("a"), attempt("b")]), None);
        assert_eq!(
            next_provider(&chain, &[attempt("gone")]),
            None,
            "a provider no longer in the chain ends it"
        );
    }
}
