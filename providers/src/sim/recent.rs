//! A map that keeps only its most recently touched keys.
//!
//! The simulator records per `Idempotency-Key`, and keys are job ids: one
//! per job, forever new. Without a bound a long-running demo gateway grows
//! by every request it ever forwarded (an attack measured 92 → 266 MB over
//! 65,000 jobs). Tests only look at recent keys, so the oldest are forgotten.

use std::collections::{HashMap, VecDeque};

pub(crate) struct Recent<V> {
    capacity: usize,
    /// Each entry carries the stamp of its latest touch.
    entries: HashMap<String, (u64, V)>,
    /// Keys in touch order with the stamp they were touched with; a key
    /// touched again has a stale older pair here, skipped on eviction.
    order: VecDeque<(u64, String)>,
    stamp: u64,
}

impl<V> Recent<V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Recent { capacity: capacity.max(1), entries: HashMap::new(), order: VecDeque::new(), stamp: 0 }
    }

    /// The entry for `key` (made with `make` if absent), now the most recent;
    /// the least recent one goes first when a new key would make too many.
    pub(crate) fn touch(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        let stamp = self.make_room(key);
        let entry = self.entries.entry(key.to_owned()).or_insert_with(|| (stamp, make()));
        entry.0 = stamp;
        &mut entry.1
    }

    /// Sets `key` to `value`, now the most recent.
    pub(crate) fn put(&mut self, key: &str, value: V) {
        let stamp = self.make_room(key);
        self.entries.insert(key.to_owned(), (stamp, value));
    }

    /// Evicts for a newcomer and queues `key`'s new stamp.
    fn make_room(&mut self, key: &str) -> u64 {
        if !self.entries.contains_key(key) {
            while self.entries.len() >= self.capacity {
                self.evict_oldest();
            }
        }
        self.stamp += 1;
        let stamp = self.stamp;
        self.order.push_back((stamp, key.to_owned()));
        if self.order.len() > 2 * self.capacity {
            // Stale pairs from re-touched keys: drop them so `order` stays
            // bounded too (amortised: at least `capacity` go each time).
            let entries = &self.entries;
            self.order.retain(|(s, k)| *s == stamp || entries.get(k).is_some_and(|(live, _)| live == s));
        }
        stamp
    }

    fn evict_oldest(&mut self) {
        while let Some((stamp, key)) = self.order.pop_front() {
            if self.entries.get(&key).is_some_and(|(live, _)| *live == stamp) {
                self.entries.remove(&key);
                return;
            }
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&V> {
        self.entries.get(key).map(|(_, value)| value)
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        self.entries.get_mut(key).map(|(_, value)| value)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.entries.iter().map(|(key, (_, value))| (key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn keeps_the_most_recent_keys_only() {
        let mut recent = Recent::new(3);
        for i in 0..10 {
            *recent.touch(&format!("k{i}"), || 0) += 1;
        }
        assert_eq!(recent.len(), 3);
        assert!(recent.get("k6").is_none());
        assert!(recent.get("k9").is_some());
        // Touching an old key makes it recent: the next newcomer evicts k8.
        *recent.touch("k7", || 0) += 1;
        recent.touch("new", || 0);
        assert!(recent.get("k7").is_some_and(|n| *n == 2));
        assert!(recent.get("k8").is_none());
    }

    #[test]
    fn retouching_one_key_forever_stays_bounded() {
        let mut recent = Recent::new(4);
        for _ in 0..10_000 {
            *recent.touch("same", || 0u64) += 1;
        }
        assert_eq!(recent.get("same"), Some(&10_000));
        assert!(recent.order.len() <= 8, "{}", recent.order.len());
    }
}
