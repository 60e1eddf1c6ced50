//! [`Stats`]: what a [`LockManager`](super::LockManager) saw of each node, and what its guards and waiters did,
//! from always-on counters.
//!
//! Votes are counted by the manager as it counts them for the quorum (relaxed atomics, no lock); the connection
//! figures (requests, writes, reconnects, round trips) come from the network layer's own counters
//! ([`NodeCounts`]). Taking a snapshot takes no lock either.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::net::{NodeAddr, NodeCounts};
use crate::redlock::error::Outcome;
use crate::redlock::observe::{self, Server};

/// Live vote counters of one node.
#[derive(Debug, Default)]
pub(crate) struct Votes {
    /// The node, as tracing and metrics label it (nothing without those features).
    server: Server,
    granted: AtomicU64,
    taken: AtomicU64,
    failed: AtomicU64,
    quarantined: AtomicU64,
}

impl Votes {
    /// The counters of the node at `addr`.
    pub(crate) fn of(addr: &NodeAddr) -> Votes {
        Votes {
            server: Server::of(addr),
            ..Votes::default()
        }
    }

    /// Counts one outcome of a round (acquisition, extension or release).
    pub(crate) fn count(&self, outcome: &Outcome) {
        observe::node(&self.server, outcome);
        let counter = match outcome {
            Outcome::Granted => &self.granted,
            Outcome::Taken | Outcome::NotHeld => &self.taken,
            Outcome::Quarantined => &self.quarantined,
            Outcome::ErrorReply(_) | Outcome::Failed(_) => &self.failed,
            Outcome::NotAwaited | Outcome::NotSent => return,
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// Live counters of the manager's guards and waiters.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    pub(crate) guards: AtomicU64,
    pub(crate) guards_ended: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) renewal_rounds: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) waits: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) waits_given_up: AtomicU64,
    pub(crate) granted_by_push: AtomicU64,
}

impl Activity {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    fn snapshot(&self) -> GuardStats {
        let guards = self.guards.load(Relaxed);
        GuardStats {
            held: guards.saturating_sub(self.guards_ended.load(Relaxed)),
            renewals: self.renewals.load(Relaxed),
            renewal_rounds: self.renewal_rounds.load(Relaxed),
            lost: self.lost.load(Relaxed),
            waits: self.waits.load(Relaxed),
            wakeups: self.wakeups.load(Relaxed),
            waits_given_up: self.waits_given_up.load(Relaxed),
            granted_by_push: self.granted_by_push.load(Relaxed),
        }
    }
}

/// What the guards and waiters of a manager did, in a [`Stats`] snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardStats {
    /// Guards held now.
    pub held: u64,
    /// Leases renewed by the watchdog (confirmed by a majority).
    pub renewals: u64,
    /// The watchdog's renewal rounds: `renewals / renewal_rounds` guards were renewed together on average, each
    /// round one write per node.
    pub renewal_rounds: u64,
    /// Guards lost (taken, nodes down, or expired before a renewal was confirmed); releases are not counted.
    pub lost: u64,
    /// Requests that had to [wait](super::Request::wait) (their first attempt failed).
    pub waits: u64,
    /// Times a waiter woke to try again (a release, an invalidation, or its timer).
    pub wakeups: u64,
    /// Waits that ended without the lock.
    pub waits_given_up: u64,
    /// Waits that ended with a plain lock a release handed on, counted from the nodes' pushes without another
    /// attempt (the grant by push: [`Request::wait`](super::Request::wait)).
    pub granted_by_push: u64,
}

/// One node's figures in a [`Stats`] snapshot. For a member that is a Redis Cluster, every figure covers all the
/// member's connections (each master its votes came from): counts summed, `persists` only if every master read
/// so far proves it, `counted_in` until the last of them counts.
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
    /// The restart guard trusts the node at once: it reported `appendonly yes`, `appendfsync always` and
    /// `no-appendfsync-on-rewrite no`, and its persistence marker is older than the window, so a restart forgets
    /// no lock (false with the guard off, or before the first connection).
    pub persists: bool,
    /// How long until the node's grants count, if they do not yet (it started less than the restart window ago and
    /// does not persist every write); `None` when they count, or before the first connection.
    pub counted_in: Option<std::time::Duration>,
    /// The node's `INFO server` says its monotonic clock is broken (`monotonic_clock` shows a rate that is not a
    /// finite number from 1 to 100,000 ticks/us): its grants are not counted while its server process runs
    /// (false with the restart guard off, which reads it, or before the first connection).
    pub broken_clock: bool,
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
    /// The guards' and waiters' figures.
    pub guards: GuardStats,
    /// How plain releases went out: alone, or folded with others asked for meanwhile.
    pub releases: ReleaseStats,
}

/// How a manager's plain releases (`unlock`, `unlock_value`, plain guards) went out, in a [`Stats`] snapshot.
///
/// A release asked for while another is in flight waits for it and goes out with every other release waiting
/// then, as one compare-and-delete per node (one script call for all of them on a node without a native
/// compare-and-delete): `folded / folded_rounds` releases went together on average. The others went alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseStats {
    /// Rounds that carried more than one release.
    pub folded_rounds: u64,
    /// Releases that went out in those rounds.
    pub folded: u64,
}

impl Stats {
    pub(crate) fn new(nodes: Vec<NodeStats>, activity: &Activity) -> Stats {
        Stats {
            nodes,
            guards: activity.snapshot(),
            releases: ReleaseStats::default(),
        }
    }
}

impl NodeStats {
    pub(crate) fn new(
        addr: NodeAddr,
        votes: &Votes,
        restarts: u64,
        (persists, counted_in, broken_clock): (bool, Option<std::time::Duration>, bool),
        net: NodeCounts,
    ) -> NodeStats {
        NodeStats {
            addr,
            granted: votes.granted.load(Relaxed),
            taken: votes.taken.load(Relaxed),
            failed: votes.failed.load(Relaxed),
            quarantined: votes.quarantined.load(Relaxed),
            restarts,
            persists,
            counted_in,
            broken_clock,
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
        for n in self.nodes.iter().filter(|n| n.broken_clock) {
            writeln!(
                f,
                "{}: its INFO server shows a broken monotonic clock: its grants are not counted while its \
                 process runs",
                n.addr
            )?;
        }
        let g = &self.guards;
        write!(
            f,
            "guards held {}, renewals {} in {} rounds, lost {}; waits {}, wake-ups {}, given up {}",
            g.held, g.renewals, g.renewal_rounds, g.lost, g.waits, g.wakeups, g.waits_given_up
        )
    }
}
