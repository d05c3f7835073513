//! Which member of a pool a job goes to first (`[[routes]] pools`): at
//! random in proportion to the pool's weights, or the faster of two members
//! taken at random, by a peak-weighted moving average of each provider's
//! time to first byte (what a load balancer calls peak EWMA with the power
//! of two choices). The gate still has the last word: a member it refuses
//! (no contract, cannot express the request, cooling down) is passed over
//! for the next in the order given here.
//!
//! Only the order is chosen here; the guard does not change: a job still
//! never has a second attempt while one is open.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::config::{Balance, RouteConfig};

/// How fast a latency seen long ago fades: after this long it counts for
/// 1/e of what it did.
const DECAY: Duration = Duration::from_secs(10);

/// Each provider's peak-weighted moving average of time to first byte.
#[derive(Debug, Default)]
pub struct Latencies {
    providers: Mutex<HashMap<String, Ewma>>,
}

#[derive(Debug, Clone, Copy)]
struct Ewma {
    ms: f64,
    at_ms: i64,
}

impl Latencies {
    /// One call's time to first byte (its whole time when not streamed).
    /// A time above the average takes its place at once (the peak), one
    /// below it pulls it down as time passes, so a member that became slow
    /// is avoided at its first slow answer and recovers gradually.
    pub fn observe(&self, provider: &str, took: Duration, now_ms: i64) {
        let ms = took.as_secs_f64() * 1000.0;
        let mut providers = self.providers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = providers.entry(provider.to_owned()).or_insert(Ewma { ms, at_ms: now_ms });
        if ms > entry.ms {
            entry.ms = ms;
        } else {
            let elapsed = (now_ms - entry.at_ms).max(0) as f64;
            let weight = (-elapsed / DECAY.as_millis() as f64).exp();
            entry.ms = entry.ms * weight + ms * (1.0 - weight);
        }
        entry.at_ms = now_ms;
    }

    /// The average of `provider`, 0 when it was never seen (so a new member
    /// is tried soon).
    fn of(&self, provider: &str) -> f64 {
        let providers = self.providers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        providers.get(provider).map_or(0.0, |ewma| ewma.ms)
    }
}

/// `positions` (of `route.chain`, in chain order) with each pool's members
/// in the order its balance chooses; the other positions stay as they are.
pub fn order(route: &RouteConfig, positions: Vec<usize>, latencies: &Latencies) -> Vec<usize> {
    if route.pools.is_empty() {
        return positions;
    }
    let mut out = Vec::with_capacity(positions.len());
    let mut rest = positions.into_iter().peekable();
    while let Some(position) = rest.next() {
        let Some(pool) = route.pool_of(position) else {
            out.push(position);
            continue;
        };
        let step = route.step(position);
        let mut members = vec![position];
        while let Some(next) = rest.next_if(|next| step.contains(next)) {
            members.push(next);
        }
        let weight = |p: usize| {
            let index = pool.members.iter().position(|m| *m == route.chain[p]).unwrap_or(0);
            pool.weights.as_ref().and_then(|w| w.get(index).copied()).unwrap_or(1)
        };
        match pool.balance {
            Balance::Weighted => out.extend(weighted_order(members, weight)),
            Balance::LeastLatency => {
                out.extend(least_latency_order(members, |p| latencies.of(&route.chain[p])))
            }
        }
    }
    out
}

/// The members drawn one by one without replacement, each with a chance in
/// proportion to its weight.
fn weighted_order(mut members: Vec<usize>, weight: impl Fn(usize) -> u32) -> Vec<usize> {
    let mut out = Vec::with_capacity(members.len());
    while !members.is_empty() {
        let total: u64 = members.iter().map(|&m| u64::from(weight(m))).sum();
        let mut draw = super::random::below(total.max(1));
        let index = members
            .iter()
            .position(|&m| {
                let w = u64::from(weight(m));
                if draw < w {
                    return true;
                }
                draw -= w;
                false
            })
            .unwrap_or(0);
        out.push(members.remove(index));
    }
    out
}

/// Two members taken at random, the faster first; then the rest, fastest
/// first.
fn least_latency_order(mut members: Vec<usize>, latency: impl Fn(usize) -> f64) -> Vec<usize> {
    if members.len() < 2 {
        return members;
    }
    let len = members.len() as u64;
    let a = super::random::below(len) as usize;
    let b = (a + 1 + super::random::below(len - 1) as usize) % members.len();
    let first = if latency(members[a]) <= latency(members[b]) { members[a] } else { members[b] };
    members.retain(|&m| m != first);
    members.sort_by(|x, y| latency(*x).total_cmp(&latency(*y)));
    std::iter::once(first).chain(members).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_drawn_in_proportion() {
        let weight = |m: usize| if m == 0 { 3 } else { 1 };
        let firsts = (0..4000).filter(|_| weighted_order(vec![0, 1], weight)[0] == 0).count();
        assert!((2800..=3200).contains(&firsts), "{firsts} of 4000 first, 3000 expected");
        assert_eq!(weighted_order(vec![4, 7, 9], |_| 1).len(), 3, "every member, once");
    }

    #[test]
    fn the_faster_of_two_goes_first_and_a_slow_peak_counts_at_once() {
        let latencies = Latencies::default();
        latencies.observe("fast", Duration::from_millis(2), 0);
        latencies.observe("slow", Duration::from_millis(2), 0);
        latencies.observe("slow", Duration::from_millis(40), 1);
        let slow_first = (0..200)
            .filter(|_| {
                least_latency_order(vec![0, 1], |m| [latencies.of("fast"), latencies.of("slow")][m])[0] == 1
            })
            .count();
        assert_eq!(slow_first, 0);
        latencies.observe("slow", Duration::from_millis(2), 60_000);
        assert!(latencies.of("slow") < 3.0, "a minute later the peak has faded: {}", latencies.of("slow"));
    }
}
