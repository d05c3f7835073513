//! Which providers come next: a pure function of the route's chain and the
//! attempts so far, so a driver that resumes a job (after a crash, or after
//! an unknown attempt was settled) continues exactly where the last stopped.

use crate::config::RouteConfig;
use crate::jobs::Attempt;

/// The chain positions still to try, in order: the members of the last
/// attempt's pool that this job has not tried yet, then every position
/// after its step (all of them when there is no attempt yet). Empty when
/// the chain is exhausted or the last provider is no longer in it. Which
/// member of a pool goes first is the balancer's (`engine::balance`).
pub fn remaining(route: &RouteConfig, attempts: &[Attempt]) -> Vec<usize> {
    let chain = &route.chain;
    let Some(last) = attempts.last() else {
        return (0..chain.len()).collect();
    };
    let Some(position) = chain.iter().position(|name| *name == last.provider) else {
        return Vec::new();
    };
    let step = route.step(position);
    let untried = step.clone().filter(|&p| !attempts.iter().any(|a| a.provider == chain[p]));
    untried.chain(step.end..chain.len()).collect()
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
            resolved_by: None,
            started_at_ms: 0,
            finished_at_ms: Some(0),
            reserved: Default::default(),
            charged: None,
            usage: None,
            lane: 1,
            unknown_at_ms: None,
            sent: crate::jobs::Sent::NotYet,
            continues: None,
        }
    }

    fn route(chain: &str, pools: &str) -> RouteConfig {
        let text = format!(
            "[store]\nurl = \"sqlite:x.db\"\n\
             [[providers]]\nname = \"a\"\ndialect = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\n\
             [[providers]]\nname = \"b\"\ndialect = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\n\
             [[providers]]\nname = \"c\"\ndialect = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\n\
             [[routes]]\nname = \"r\"\nchain = {chain}\n{pools}"
        );
        let config = crate::config::Config::from_toml(std::path::Path::new("t.toml"), &text);
        config.map(|mut c| c.routes.remove(0)).unwrap_or_else(|err| panic!("{err}"))
    }

    #[test]
    fn walks_the_chain_in_order_and_then_stops() {
        let route = route(r#"["a", "b"]"#, "");
        assert_eq!(remaining(&route, &[]), [0, 1]);
        assert_eq!(remaining(&route, &[attempt("a")]), [1]);
        assert!(remaining(&route, &[attempt("a"), attempt("a"), attempt("b")]).is_empty());
        assert!(
            remaining(&route, &[attempt("gone")]).is_empty(),
            "a provider no longer in the chain ends it"
        );
    }

    /// After a member of a pool, its untried members come before the next
    /// step, whichever member went first.
    #[test]
    fn a_pool_is_tried_through_before_the_next_step() {
        let route = route(r#"["a", "b", "c"]"#, "pools = [{ members = [\"a\", \"b\"] }]\n");
        assert_eq!(remaining(&route, &[]), [0, 1, 2]);
        assert_eq!(remaining(&route, &[attempt("b")]), [0, 2]);
        assert_eq!(remaining(&route, &[attempt("b"), attempt("a")]), [2]);
        assert!(remaining(&route, &[attempt("b"), attempt("a"), attempt("c")]).is_empty());
    }
}
