//! Randomness where spread is all that is needed (backoff jitter, a pool's
//! draw): a hasher seeded by the OS, and no dependency for it.

/// A number in `0..bound` (0 when `bound` is 0).
pub(super) fn below(bound: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    random % bound.max(1)
}
