//! A cap on the connections one peer address holds at once, so that one
//! client — a slowloris opening thousands of sockets and trickling bytes
//! — cannot take every slot of `max_connections` and starve the others
//! (a health check, the honest clients). A connection past its peer's cap
//! is closed as soon as it is accepted: queueing it would hold the accept
//! loop, which serves everyone.
//!
//! Behind a load balancer every connection comes from its address: raise
//! `max_connections_per_peer` to `max_connections` there.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// The connections each peer holds.
#[derive(Debug)]
pub(super) struct Peers {
    per_peer: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; dropped, it frees its peer's share.
#[derive(Debug)]
pub(super) struct Admitted {
    peers: Arc<Peers>,
    peer: IpAddr,
}

impl Peers {
    pub(super) fn new(per_peer: usize) -> Arc<Peers> {
        Arc::new(Peers { per_peer: per_peer.max(1), held: Mutex::default() })
    }

    /// A share for a connection from `peer`, unless it holds its cap.
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<Admitted> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let count = held.entry(peer).or_insert(0);
        if *count >= self.per_peer {
            return None;
        }
        *count += 1;
        Some(Admitted { peers: Arc::clone(self), peer })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut held = self.peers.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_holds_its_cap_and_no_more_and_its_share_comes_back() {
        let peers = Peers::new(2);
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
        let first = peers.admit(a).unwrap();
        let _second = peers.admit(a).unwrap();
        assert!(peers.admit(a).is_none(), "past its cap");
        assert!(peers.admit(b).is_some(), "another peer is not held back");
        drop(first);
        assert!(peers.admit(a).is_some(), "a closed connection frees its share");
    }
}
