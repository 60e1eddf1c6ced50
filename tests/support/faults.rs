//! Faults for the mutual-exclusion scenarios, and proof that they struck lock rounds and holds.
//!
//! A fault test that only checks that the fault happened (a proxy reset something, a node was killed) cannot tell
//! a fault that met the lock from one that met an idle connection. [`Struck`] reads what the lock managers
//! themselves counted in their rounds (votes that failed or were quarantined, requests whose round ended first,
//! connections dropped), and [`exposed`] counts the holds that were running while a [`Burst`] wiped their keys.

use std::fmt;
use std::thread;
use std::time::Duration;

use muxlock::LockManager;

use super::checker::{Hold, mono_ns};
use super::cluster::Cluster;

/// What faults did to the managers' rounds, summed over managers and nodes (from [`LockManager::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Struck {
    /// Votes with no usable answer in a lock round (acquire, extend, renew, release): timed out, down, error.
    pub failed: u64,
    /// Grants not counted because the restart guard did not trust the node yet.
    pub quarantined: u64,
    /// Requests whose round ended before their reply came.
    pub timeouts: u64,
    /// Connections dropped (closed, reset, refused, hung).
    pub drops: u64,
    /// Restarts the managers saw (a new `run_id` behind a node's address).
    pub restarts: u64,
    /// Waits that ended with a key handed on, counted from the nodes' pushes (the grant by push).
    pub granted_by_push: u64,
}

impl Struck {
    /// The managers' counters now.
    pub fn of<'a>(managers: impl IntoIterator<Item = &'a LockManager>) -> Struck {
        let mut s = Struck::default();
        for m in managers {
            let stats = m.stats();
            s.granted_by_push += stats.guards.granted_by_push;
            for n in stats.nodes {
                s.failed += n.failed;
                s.quarantined += n.quarantined;
                s.timeouts += n.net.timeouts;
                s.drops += n.net.drops;
                s.restarts += n.restarts;
            }
        }
        s
    }

    /// What struck after `before` (an earlier reading of the same managers): a warm-up's votes (fresh nodes
    /// not trusted yet by the restart guard, say) are not the faults'.
    pub fn since(self, before: Struck) -> Struck {
        Struck {
            failed: self.failed - before.failed,
            quarantined: self.quarantined - before.quarantined,
            timeouts: self.timeouts - before.timeouts,
            drops: self.drops - before.drops,
            restarts: self.restarts - before.restarts,
            granted_by_push: self.granted_by_push - before.granted_by_push,
        }
    }
}

impl fmt::Display for Struck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "votes failed {}, quarantined {}; requests timed out {}; connections dropped {}; restarts seen {}; \
             grants by push {}",
            self.failed,
            self.quarantined,
            self.timeouts,
            self.drops,
            self.restarts,
            self.granted_by_push
        )
    }
}

/// Two minority outages in a row, of disjoint pairs of nodes: each is a minority of 5, but together they take 4
/// of the 5 nodes through a restart. A key set on all 5 before the burst (or on 3 during the first outage) is left
/// on one node if the restarts lose data: without a protection, another client then gets the other four.
#[derive(Clone, Copy, Debug)]
pub struct Burst {
    /// When the first pair was killed, came back, the second pair was killed, came back ([`mono_ns`]).
    pub kill1: u64,
    pub back1: u64,
    pub kill2: u64,
    pub back2: u64,
}

impl Burst {
    /// Kills `first` (SIGKILL), waits `down`, restarts it; then the same for `second`. `Cluster::restart` keeps the
    /// node's directory: with `appendonly` its data comes back, without persistence it is gone.
    pub fn run(
        cluster: &mut Cluster,
        first: [usize; 2],
        second: [usize; 2],
        down: Duration,
    ) -> Burst {
        let mut outage = |pair: [usize; 2]| {
            let killed = mono_ns();
            for &i in &pair {
                cluster.kill(i);
            }
            thread::sleep(down);
            for &i in &pair {
                cluster.restart(i);
            }
            (killed, mono_ns())
        };
        let (kill1, back1) = outage(first);
        let (kill2, back2) = outage(second);
        Burst {
            kill1,
            back1,
            kill2,
            back2,
        }
    }

    /// The `i`-th burst's pairs among `nodes` (at least 4): consecutive pairs are disjoint, and the bursts rotate.
    pub fn pairs(nodes: &[usize], i: usize) -> ([usize; 2], [usize; 2]) {
        let n = nodes.len();
        let at = |k: usize| nodes[(2 * i + k) % n];
        ([at(0), at(1)], [at(2), at(3)])
    }
}

/// Holds exposed to a whole burst: taken before its first pair came back (so their key was not set on that pair,
/// or was wiped from it) and still running when its second pair was killed (which wipes the key from two more
/// nodes). With 5 nodes, such a hold's key survives on at most one node: exactly the holds a protection must
/// cover.
pub fn exposed(holds: &[Hold], bursts: &[Burst]) -> usize {
    holds
        .iter()
        .filter(|h| bursts.iter().any(|b| h.start < b.back1 && h.end > b.kill2))
        .count()
}
