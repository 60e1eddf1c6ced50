//! The quorum decision, sans I/O: votes and the time go in, a verdict comes out.
//!
//! This is the heart of Redlock ("Distributed locks with Redis", *The Redlock algorithm*): the client holds the
//! lock if and only if it got the key set in the majority of instances, and the time elapsed to get it is less than
//! the lock's validity time. It never looks at a clock: every call takes `now`, so tests drive it with a virtual
//! clock.

use std::time::{Duration, Instant};

use crate::net::NodeSet;
use crate::time::later;

/// How many times one acquisition asks a node at most: its request, and again while the votes are split and the
/// node says "taken" ([`Quorum::take_back_taken`]; a `NOSCRIPT`'s resend counts). A holder still at work when a
/// waiter's first request came (woken by the holder's own grant, or by its release on another node) has usually
/// released by the second or third.
pub const ASKS: usize = 3;

/// What one node answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vote {
    /// The node set (or extended) the key with our value.
    Yes,
    /// The node holds the key for another value, or no longer holds ours: someone else has the lock there.
    Taken,
    /// No usable answer: down, timed out, error reply.
    Failed,
}

/// The verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Not decided yet: a majority is still possible and time remains.
    Pending,
    /// A majority said yes in time. The lock is valid until the given instant.
    Acquired {
        /// `start + ttl − drift`.
        valid_until: Instant,
    },
    /// A majority is no longer possible, or it came too late.
    Failed(Failure),
}

/// Why a quorum was not reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Another holder has the key on some nodes, and with them a majority is impossible (the nodes that failed, if
    /// any, would not have blocked it by themselves): the resource is held.
    Held,
    /// So many nodes failed (down, hung, error) that they alone make a majority impossible.
    Unavailable,
    /// The decision time passed before a majority said yes: the lock would already be invalid.
    TooLate,
}

/// The clock-drift allowance of the Redlock spec for a lease of `ttl`: `ttl × factor + 2 ms` (the 2 ms cover the
/// millisecond granularity of Redis' expiry).
pub fn drift(ttl: Duration, factor: f64) -> Duration {
    // Saturating, and a factor that is not a finite non-negative number counts as zero: never a panic.
    let scaled =
        Duration::try_from_secs_f64(ttl.as_secs_f64() * factor).unwrap_or(match factor > 0.0 {
            true => Duration::MAX,
            false => Duration::ZERO,
        });
    scaled.saturating_add(Duration::from_millis(2))
}

/// One decision over N nodes.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, Instant};
/// use muxlock::redlock::quorum::{Quorum, Status, Vote};
///
/// let t0 = Instant::now();
/// let ttl = Duration::from_secs(10);
/// let mut q = Quorum::new(5, t0, ttl, Duration::from_millis(102));
/// assert_eq!(q.vote(0, Vote::Yes, t0), Status::Pending);
/// assert_eq!(q.vote(3, Vote::Failed, t0), Status::Pending);
/// let valid_until = t0 + ttl - Duration::from_millis(102);
/// assert_eq!(q.vote(1, Vote::Yes, t0), Status::Pending);
/// assert_eq!(q.vote(4, Vote::Yes, t0), Status::Acquired { valid_until }); // 3 of 5: decided at once
/// ```
#[derive(Clone, Debug)]
pub struct Quorum {
    votes: Vec<Option<Vote>>,
    quorum: usize,
    yes: usize,
    taken: usize,
    failed: usize,
    /// The nodes whose "taken" vote [`take_back_taken`](Self::take_back_taken) took back (all below 64).
    retracted: NodeSet,
    /// The nodes asked [`ASKS`] times already ([`answered`](Self::answered)): never taken back again.
    spent: NodeSet,
    valid_until: Instant,
    decide_by: Instant,
}

impl Quorum {
    /// A decision over `n` nodes for a lease of `ttl` that started at `start` (taken *before* the requests were
    /// sent), with the given drift allowance. The majority is `n / 2 + 1`.
    pub fn new(n: usize, start: Instant, ttl: Duration, drift: Duration) -> Quorum {
        let valid_until = later(start, ttl.saturating_sub(drift));
        Quorum {
            votes: vec![None; n],
            quorum: n / 2 + 1,
            yes: 0,
            taken: 0,
            failed: 0,
            retracted: NodeSet::EMPTY,
            spent: NodeSet::EMPTY,
            valid_until,
            decide_by: valid_until,
        }
    }

    /// Also requires the decision before `instant` (an extension must succeed while the current lease is valid).
    #[must_use]
    pub fn decide_by(mut self, instant: Instant) -> Quorum {
        self.decide_by = self.decide_by.min(instant);
        self
    }

    /// The majority: how many yes votes are needed.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The yes votes so far.
    pub fn yes(&self) -> usize {
        self.yes
    }

    /// The votes so far, of any kind.
    pub fn voted(&self) -> usize {
        self.yes + self.taken + self.failed
    }

    /// Takes back the "taken" votes of the nodes (below 64) not in `spent` and returns them, for an attempt to
    /// ask those nodes again, when its votes are split: at least one grant, and not yet decided. The nodes are
    /// undecided again until their next answers are counted. A grant among them counts as any grant of the
    /// attempt: the key was set after the attempt's start, so its lease, counted from that start, ends no later
    /// than the key does. A node asked [`ASKS`] times ([`answered`](Self::answered)) is not taken back. An ask
    /// again that fails (no answer in the round, an error, a grant not counted) leaves the first vote standing:
    /// [`vote`](Self::vote) records such a node's failure as "taken", and so does [`closed`](Self::closed) for one
    /// that never answered (the holder it found stays in the way; its ask again alone does not make the lock
    /// unavailable).
    pub fn take_back_taken(&mut self) -> NodeSet {
        let mut again = NodeSet::EMPTY;
        if self.yes == 0 || self.taken == 0 {
            return again;
        }
        for (node, vote) in self.votes.iter_mut().enumerate().take(64) {
            if *vote == Some(Vote::Taken) && !self.spent.contains(node) {
                *vote = None;
                self.taken -= 1;
                again.insert(node);
                self.retracted.insert(node);
            }
        }
        again
    }

    /// Notes that `node`'s outcome answers its `ask`-th request of the attempt (0: the first; a `NOSCRIPT`'s
    /// resend counts): from the last of [`ASKS`] on, its vote is not taken back again. Returns whether the
    /// outcome replaces the node's earlier one in the report: not a failed ask again of a node whose "taken"
    /// stands ([`vote`](Self::vote)).
    pub fn answered(&mut self, node: usize, ask: usize, vote: Vote) -> bool {
        if ask + 1 >= ASKS {
            self.spent.insert(node);
        }
        !(vote == Vote::Failed && self.taken_back(node))
    }

    /// Whether node `node`'s "taken" vote was taken back ([`take_back_taken`](Self::take_back_taken)): its
    /// first answer stands if its second ask fails.
    fn taken_back(&self, node: usize) -> bool {
        node < 64 && self.retracted.contains(node)
    }

    /// The nodes that have not voted yet.
    pub fn undecided(&self) -> impl Iterator<Item = usize> + '_ {
        self.votes
            .iter()
            .enumerate()
            .filter_map(|(node, v)| v.is_none().then_some(node))
    }

    /// The last instant at which a majority still counts.
    pub fn deadline(&self) -> Instant {
        self.decide_by
    }

    /// How many more votes it takes, at the least, before the verdict can change from pending: the caller need
    /// not look before that many have come. (5 nodes, none voted: 3, since neither a majority of yes nor one of
    /// no can come sooner.)
    pub fn votes_to_decide(&self) -> usize {
        let undecided = self.votes.len() - self.yes - self.taken - self.failed;
        let to_grant = self.quorum.saturating_sub(self.yes);
        // Non-yes votes that make a majority of yes impossible: yes + undecided falls below the quorum.
        let to_fail = (self.yes + undecided + 1).saturating_sub(self.quorum);
        to_grant.min(to_fail).max(1)
    }

    /// Records node `node`'s vote at `now` and returns the verdict. A node's second vote, or a vote for a node out
    /// of range, is ignored. A node whose "taken" vote was taken back votes "taken" again if this vote fails.
    pub fn vote(&mut self, node: usize, vote: Vote, now: Instant) -> Status {
        let vote = match vote {
            Vote::Failed if self.taken_back(node) => Vote::Taken,
            vote => vote,
        };
        if let Some(slot @ None) = self.votes.get_mut(node) {
            *slot = Some(vote);
            match vote {
                Vote::Yes => self.yes += 1,
                Vote::Taken => self.taken += 1,
                Vote::Failed => self.failed += 1,
            }
        }
        self.status(now)
    }

    /// The verdict at `now`, from the votes so far. Nodes that have not voted may still say yes until the
    /// decision time; after it, nothing can succeed.
    pub fn status(&self, now: Instant) -> Status {
        if now >= self.decide_by {
            // Too late even if the votes are there: the validity would be zero or negative.
            return Status::Failed(Failure::TooLate);
        }
        if self.yes >= self.quorum {
            return Status::Acquired {
                valid_until: self.valid_until,
            };
        }
        let undecided = self.votes.len() - self.yes - self.taken - self.failed;
        if self.yes + undecided < self.quorum {
            // An outage only if the failures block a majority by themselves; otherwise a holder is (also) in the
            // way, and a waiter should wait for its release, not for nodes to come back (2 "taken", 1 refused
            // and 2 not awaited of 5 is a held lock, not "too many nodes were down").
            let blocked_by_failures = self.votes.len() - self.failed < self.quorum;
            return Status::Failed(if blocked_by_failures {
                Failure::Unavailable
            } else {
                Failure::Held
            });
        }
        Status::Pending
    }

    /// The verdict at `now` once no more votes will come (the round ended: every reply in, or its time out):
    /// the nodes that have not voted count as failed. Never [`Status::Pending`].
    ///
    /// A round that ends undecided is not an outage by that alone: 1 yes, 1 "taken" and 1 node that never answered
    /// of 3 (a hung node among 3, two contenders) is [`Failure::Held`], since the one silent node cannot block a
    /// majority by itself; a waiter should wait for the holder's release, not pause as after an outage.
    pub fn closed(&self, now: Instant) -> Status {
        match self.status(now) {
            Status::Pending => {
                let mut all = self.clone();
                for node in 0..all.votes.len() {
                    all.vote(node, Vote::Failed, now);
                }
                all.status(now)
            }
            decided => decided,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{Rng, SeedableRng};

    const TTL: Duration = Duration::from_millis(1000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_split_takes_back_its_taken_votes_once_and_only_with_a_grant() {
        let t0 = Instant::now();
        let mut q = Quorum::new(5, t0, TTL, ms(10));
        assert_eq!(q.vote(0, Vote::Taken, t0), Status::Pending);
        // No grant yet: nothing to take back.
        assert_eq!(q.take_back_taken(), NodeSet::EMPTY);
        q.vote(1, Vote::Yes, t0);
        q.vote(2, Vote::Failed, t0);
        let mut again = NodeSet::EMPTY;
        again.insert(0);
        assert_eq!(q.take_back_taken(), again);
        assert_eq!(q.undecided().collect::<Vec<_>>(), [0, 3, 4]);
        assert_eq!(q.voted(), 2);
        // Node 0's last answer is its vote; a node asked its every time is not taken back again.
        q.answered(0, ASKS - 1, Vote::Taken);
        q.vote(0, Vote::Taken, t0);
        q.vote(3, Vote::Taken, t0);
        let mut expected = NodeSet::EMPTY;
        expected.insert(3);
        assert_eq!(q.take_back_taken(), expected);
        // Two taken and one failed of five: held, whatever node 3 says next.
        q.vote(3, Vote::Taken, t0);
        assert_eq!(q.status(t0), Status::Failed(Failure::Held));
    }

    #[test]
    fn a_taken_vote_taken_back_stands_if_the_second_ask_fails() {
        let t0 = Instant::now();
        let mut q = Quorum::new(5, t0, TTL, ms(10));
        q.vote(0, Vote::Yes, t0);
        q.vote(1, Vote::Taken, t0);
        q.vote(2, Vote::Taken, t0);
        q.vote(3, Vote::Failed, t0);
        let again = q.take_back_taken();
        assert!(again.contains(1) && again.contains(2));
        // Node 1's second ask timed out: still the holder's. Node 2 never answered before the round ended.
        assert_eq!(q.vote(1, Vote::Failed, t0), Status::Pending);
        assert_eq!(q.closed(t0), Status::Failed(Failure::Held));
        // A node not taken back that fails is a failure: three of five make the lock unavailable.
        let mut q = Quorum::new(5, t0, TTL, ms(10));
        q.vote(0, Vote::Yes, t0);
        q.vote(1, Vote::Failed, t0);
        q.vote(2, Vote::Failed, t0);
        assert_eq!(q.closed(t0), Status::Failed(Failure::Unavailable));
    }

    #[test]
    fn decides_as_soon_as_the_outcome_is_certain() {
        let t0 = Instant::now();
        let mut q = Quorum::new(5, t0, TTL, ms(12));
        assert_eq!(q.vote(0, Vote::Taken, t0), Status::Pending);
        assert_eq!(q.vote(1, Vote::Taken, t0), Status::Pending);
        // Third "taken": the holder has a majority, no need to wait for the other two.
        assert_eq!(
            q.vote(2, Vote::Taken, t0 + ms(1)),
            Status::Failed(Failure::Held)
        );

        // Two failures do not block a majority of 5 by themselves: the holder is in the way.
        let mut q = Quorum::new(5, t0, TTL, ms(12));
        q.vote(0, Vote::Failed, t0);
        q.vote(1, Vote::Taken, t0);
        assert_eq!(q.vote(2, Vote::Failed, t0), Status::Failed(Failure::Held));
        // A split vote: 2 taken, 1 refused, 2 not awaited.
        let mut q = Quorum::new(5, t0, TTL, ms(12));
        q.vote(0, Vote::Taken, t0);
        q.vote(1, Vote::Taken, t0);
        assert_eq!(q.vote(2, Vote::Failed, t0), Status::Failed(Failure::Held));
        // Three failures of 5 block it by themselves.
        let mut q = Quorum::new(5, t0, TTL, ms(12));
        q.vote(0, Vote::Taken, t0);
        q.vote(1, Vote::Failed, t0);
        q.vote(2, Vote::Failed, t0);
        assert_eq!(
            q.vote(3, Vote::Failed, t0),
            Status::Failed(Failure::Unavailable)
        );

        let mut q = Quorum::new(3, t0, TTL, ms(12));
        q.vote(0, Vote::Yes, t0);
        assert_eq!(
            q.vote(0, Vote::Yes, t0),
            Status::Pending,
            "a node votes once"
        );
        assert_eq!(
            q.vote(7, Vote::Yes, t0),
            Status::Pending,
            "unknown node ignored"
        );
        assert_eq!(
            q.vote(2, Vote::Yes, t0 + ms(5)),
            Status::Acquired {
                valid_until: t0 + TTL - ms(12)
            }
        );
    }

    #[test]
    fn a_round_that_ends_undecided_counts_the_silent_nodes_as_failed() {
        let t0 = Instant::now();
        // 3 nodes, one hung, two contenders split the other two.
        let mut q = Quorum::new(3, t0, TTL, ms(12));
        q.vote(0, Vote::Yes, t0);
        assert_eq!(q.vote(1, Vote::Taken, t0), Status::Pending);
        assert_eq!(q.closed(t0 + ms(50)), Status::Failed(Failure::Held));
        // 5 nodes, 2 taken and 1 yes, 2 silent: the holder is in the way, the 2 silent nodes block nothing alone.
        let mut q = Quorum::new(5, t0, TTL, ms(12));
        q.vote(0, Vote::Yes, t0);
        q.vote(1, Vote::Taken, t0);
        assert_eq!(q.vote(2, Vote::Taken, t0), Status::Pending);
        assert_eq!(q.closed(t0), Status::Failed(Failure::Held));
        // 3 silent of 5 block a majority by themselves: an outage.
        let mut q = Quorum::new(5, t0, TTL, ms(12));
        q.vote(0, Vote::Yes, t0);
        assert_eq!(q.vote(1, Vote::Taken, t0), Status::Pending);
        assert_eq!(q.closed(t0), Status::Failed(Failure::Unavailable));
        // Nothing heard at all.
        assert_eq!(
            Quorum::new(3, t0, TTL, ms(12)).closed(t0),
            Status::Failed(Failure::Unavailable)
        );
        // Decided verdicts stand; late is late.
        let mut q = Quorum::new(3, t0, TTL, ms(12));
        q.vote(0, Vote::Yes, t0);
        let got = q.vote(1, Vote::Yes, t0);
        assert_eq!(q.closed(t0), got);
        assert_eq!(q.closed(t0 + TTL), Status::Failed(Failure::TooLate));
        // Never pending, and agrees with counting the silent nodes as failed, on random partial votes.
        let mut rng = ChaCha8Rng::seed_from_u64(24);
        for _ in 0..2000 {
            let n = 1 + (rng.next_u32() % 9) as usize;
            let mut q = Quorum::new(n, t0, TTL, ms(12));
            let mut seen = Vec::new();
            for node in 0..n {
                if rng.next_u32() % 3 == 0 {
                    continue; // silent
                }
                let vote = [Vote::Yes, Vote::Taken, Vote::Failed][(rng.next_u32() % 3) as usize];
                q.vote(node, vote, t0);
                seen.push((node, vote));
            }
            let got = q.closed(t0);
            assert_ne!(got, Status::Pending);
            if q.status(t0) == Status::Pending {
                let silent: Vec<(usize, Vote)> = (0..n)
                    .filter(|i| !seen.iter().any(|(j, _)| j == i))
                    .map(|i| (i, Vote::Failed))
                    .collect();
                seen.extend(silent);
                assert_eq!(got, reference(n, &seen, q.deadline(), t0), "n={n} {seen:?}");
            }
        }
    }

    #[test]
    fn a_majority_that_comes_too_late_is_not_a_lock() {
        let t0 = Instant::now();
        let mut q = Quorum::new(3, t0, TTL, ms(12));
        q.vote(0, Vote::Yes, t0);
        assert_eq!(
            q.vote(1, Vote::Yes, t0 + TTL - ms(12)),
            Status::Failed(Failure::TooLate)
        );
        // An extension must also finish inside the current lease.
        let q = Quorum::new(3, t0, TTL, ms(12)).decide_by(t0 + ms(100));
        assert_eq!(q.deadline(), t0 + ms(100));
        assert_eq!(q.status(t0 + ms(100)), Status::Failed(Failure::TooLate));
    }

    #[test]
    fn drift_never_panics() {
        assert_eq!(drift(Duration::from_secs(10), 0.01), ms(102));
        assert!(drift(Duration::MAX, 0.5) > Duration::from_secs(1 << 62));
        assert_eq!(drift(Duration::MAX, 2.0), Duration::MAX);
        assert_eq!(drift(Duration::from_secs(1), f64::NAN), ms(2));
        assert_eq!(drift(Duration::from_secs(1), -1.0), ms(2));
        let q = Quorum::new(3, Instant::now(), Duration::MAX, Duration::ZERO);
        assert_eq!(q.status(Instant::now()), Status::Pending);
    }

    #[test]
    fn votes_to_decide_is_the_soonest_a_verdict_can_come() {
        let t0 = Instant::now();
        let mut q = Quorum::new(5, t0, TTL, ms(12));
        assert_eq!(q.votes_to_decide(), 3);
        q.vote(0, Vote::Yes, t0);
        assert_eq!(q.votes_to_decide(), 2);
        q.vote(1, Vote::Failed, t0);
        assert_eq!(q.votes_to_decide(), 2);
        q.vote(2, Vote::Failed, t0);
        // 1 yes, 2 failed, 2 to come: one more failure ends it, one more yes does not.
        assert_eq!(q.votes_to_decide(), 1);
        // 4 nodes: two failures are enough to rule out 3 yes.
        let q = Quorum::new(4, t0, TTL, ms(12));
        assert_eq!(q.votes_to_decide(), 2);
        // Checked against the machine itself: no verdict ever comes with fewer votes than announced.
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..2000 {
            let n = 1 + (rng.next_u32() % 9) as usize;
            let mut q = Quorum::new(n, t0, TTL, ms(12));
            let mut node = 0;
            while q.status(t0) == Status::Pending {
                let k = q.votes_to_decide();
                for i in 0..k {
                    let vote =
                        [Vote::Yes, Vote::Taken, Vote::Failed][(rng.next_u32() % 3) as usize];
                    let status = q.vote(node, vote, t0);
                    node += 1;
                    if i + 1 < k {
                        assert_eq!(status, Status::Pending, "decided before {k} votes");
                    }
                }
            }
        }
    }

    #[test]
    fn even_n_needs_more_than_half() {
        let t0 = Instant::now();
        let mut q = Quorum::new(4, t0, TTL, ms(12));
        assert_eq!(q.quorum(), 3);
        q.vote(0, Vote::Yes, t0);
        assert_eq!(q.vote(1, Vote::Yes, t0), Status::Pending);
        assert_eq!(q.vote(2, Vote::Taken, t0), Status::Pending);
        assert_eq!(q.vote(3, Vote::Taken, t0), Status::Failed(Failure::Held));
    }

    /// The verdict recomputed from scratch: the reference the state machine is checked against.
    fn reference(n: usize, votes: &[(usize, Vote)], decide_by: Instant, now: Instant) -> Status {
        let count = |v| votes.iter().filter(|(_, x)| *x == v).count();
        let (yes, taken, failed) = (count(Vote::Yes), count(Vote::Taken), count(Vote::Failed));
        let quorum = n / 2 + 1;
        if now >= decide_by {
            Status::Failed(Failure::TooLate)
        } else if yes >= quorum {
            Status::Acquired {
                valid_until: decide_by,
            }
        } else if yes + (n - yes - taken - failed) < quorum {
            Status::Failed(if n - failed < quorum {
                Failure::Unavailable
            } else {
                Failure::Held
            })
        } else {
            Status::Pending
        }
    }

    /// Random schedules: each node answers (or not) at a random virtual time; at the deadline the net layer turns
    /// silence into failures. The machine must agree with the reference after every event, decide exactly when
    /// the outcome becomes certain, and never grant a lock without a majority in time.
    #[test]
    fn randomised_schedules_agree_with_the_reference() {
        let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
        let t0 = Instant::now();
        for _ in 0..20_000 {
            let n = 1 + (rng.next_u32() % 9) as usize;
            let ttl = ms(50 + u64::from(rng.next_u32() % 500));
            let drift = drift(ttl, 0.01);
            let round_deadline = t0 + ms(u64::from(rng.next_u32() % 600));
            let mut events: Vec<(Duration, usize, Vote)> = (0..n)
                .map(|node| {
                    let at = ms(u64::from(rng.next_u32() % 700));
                    let vote = match rng.next_u32() % 4 {
                        0 | 1 => Vote::Yes,
                        2 => Vote::Taken,
                        _ => Vote::Failed,
                    };
                    (at, node, vote)
                })
                .collect();
            // Replies after the round deadline never arrive: those nodes time out at the deadline.
            for e in &mut events {
                if t0 + e.0 > round_deadline {
                    *e = (round_deadline - t0, e.1, Vote::Failed);
                }
            }
            events.sort_by_key(|e| e.0);
            let mut q = Quorum::new(n, t0, ttl, drift);
            let mut seen = Vec::new();
            let mut decided = None;
            for &(at, node, vote) in &events {
                let now = t0 + at;
                seen.push((node, vote));
                let got = q.vote(node, vote, now);
                assert_eq!(
                    got,
                    reference(n, &seen, q.deadline(), now),
                    "n={n} seen={seen:?}"
                );
                if got != Status::Pending && decided.is_none() {
                    decided = Some(got);
                }
                if let Status::Acquired { valid_until } = got {
                    assert!(q.yes() >= q.quorum() && now < valid_until);
                    assert_eq!(valid_until, t0 + ttl - drift);
                }
            }
            // With every vote in, the machine has decided.
            assert_ne!(
                q.status(t0 + events.last().map_or(Duration::ZERO, |e| e.0)),
                Status::Pending
            );
            assert!(decided.is_some());
        }
    }
}
