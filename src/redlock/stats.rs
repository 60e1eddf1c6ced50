//! [`Stats`]: what a [`LockManager`](super::LockManager) saw of each node, from always-on counters.
//!
//! Votes are counted by the manager as it counts them for the quorum (relaxed atomics, no lock); the connection
//! figures (requests, writes, reconnects, round trips) come from the network layer's own counters
//! ([`NodeCounts`]). Taking a snapshot takes no lock either.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::error::Outcome;
use crate::net::{NodeAddr, NodeCounts};

/// Live vote counters of one node.
#[derive(Debug, Default)]
pub(crate) struct Votes {
    granted: AtomicU64,
    taken: AtomicU64,
    failed: AtomicU64,
    quarantined: AtomicU64,
}

impl Votes {
    /// Counts one outcome of a round (acquisition, extension or release).
    pub(crate) fn count(&self, outcome: &Outcome) {
        let counter = match outcome {
            Outcome::Granted => &self.granted,
            Outcome::Taken => &self.taken,
            Outcome::Quarantined => &self.quarantined,
            Outcome::ErrorReply(_) | Outcome::Failed(_) => &self.failed,
            Outcome::NotAwaited | Outcome::NotSent => return,
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// One node's figures in a [`Stats`] snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStats {
    /// The node (password hidden when displayed).
    pub addr: NodeAddr,
    /// Votes for us: a key set, extended or released with our value.
    pub granted: u64,
    /// Votes against: the key held for another value (or, for an extension or release, no longer ours).
    pub taken: u64,
    /// No usable answer: timed out, down, error replies.
    pub failed: u64,
    /// Grants not counted: the node had restarted less than the restart window before.
    pub quarantined: u64,
    /// Restarts seen: a new connection found another server process (a different `run_id`) than the last one.
    pub restarts: u64,
    /// The connections' own figures: requests, writes, reconnects, timeouts, round-trip percentiles.
    pub net: NodeCounts,
}

/// A snapshot of a manager's counters, per node (see [`LockManager::stats`](super::LockManager::stats)).
///
/// `Display` prints a small table, one row per node.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Per node, in configuration order.
    pub nodes: Vec<NodeStats>,
}

impl Stats {
    pub(crate) fn new(nodes: Vec<NodeStats>) -> Stats {
        Stats { nodes }
    }
}

impl NodeStats {
    pub(crate) fn new(addr: NodeAddr, votes: &Votes, restarts: u64, net: NodeCounts) -> NodeStats {
        NodeStats {
            addr,
            granted: votes.granted.load(Relaxed),
            taken: votes.taken.load(Relaxed),
            failed: votes.failed.load(Relaxed),
            quarantined: votes.quarantined.load(Relaxed),
            restarts,
            net,
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<28} {:>9} {:>8} {:>7} {:>7} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9}",
            "node",
            "granted",
            "taken",
            "failed",
            "quarnt",
            "timeouts",
            "req/write",
            "connects",
            "restarts",
            "rtt p50",
            "rtt p99"
        )?;
        for n in &self.nodes {
            let per_write = match n.net.writes {
                0 => 0.0,
                w => n.net.requests as f64 / w as f64,
            };
            let q = |p| {
                n.net
                    .rtt_quantile(p)
                    .map_or_else(|| "-".to_owned(), |d| format!("{:.0?}", d))
            };
            writeln!(
                f,
                "{:<28} {:>9} {:>8} {:>7} {:>7} {:>8} {:>9.1} {:>8} {:>8} {:>9} {:>9}",
                n.addr.to_string(),
                n.granted,
                n.taken,
                n.failed,
                n.quarantined,
                n.net.timeouts,
                per_write,
                n.net.connects,
                n.restarts,
                q(0.5),
                q(0.99)
            )?;
        }
        Ok(())
    }
}
