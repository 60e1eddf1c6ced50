//! [`Tally`]: how every release round counts its replies and what it concludes, whatever the kind (plain, by
//! value, a set, fenced, reentrant, each lock of a batch). A kind keeps only how it encodes its request and what
//! its reply means (a [`Vote`] and an [`Outcome`]); the tally does the rest.
//!
//! # The verdict
//!
//! - **Released**: a majority of all N nodes confirmed removing this lock (deleting the key; for a nested
//!   reentrant hold, removing the hold). `Ok(n)`, the number that confirmed by the time the round ended.
//! - **Lost** ([`Error::LockLost`]): so many nodes answered that they did not hold it (not ours, or never
//!   reached) that no majority can have held it when the release came (its lease had run out, or it had been
//!   released already): the work it protected may have overlapped another holder's. Not a success, whatever `n`
//!   was.
//! - **Unconfirmed** ([`Error::Quorum`]): fewer than a majority confirmed, but the nodes that did not answer
//!   may have held it with those that confirmed: the release may not have happened where it was not answered,
//!   and the lock then ends with its lease.
//!
//! Nodes the acquisition never reached hold nothing of the lock: they are not asked, and count as answered
//! ([`Outcome::NotSent`]) but not as released. Every counted outcome goes into the node's tallies
//! ([`Votes`]) for [`LockManager::stats`](crate::redlock::LockManager::stats).
//!
//! The tally is a plain struct: one `Vec` of outcomes (the one the report is made of), allocated when it starts;
//! counting allocates nothing.

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::Engine;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::pipeline::Purpose;
use crate::redlock::engine::seam::{Clock, Nodes};
use crate::redlock::error::{Error, Outcome, Result};
use crate::redlock::lua::{self, Lua};
use crate::redlock::quorum::Vote;
use crate::redlock::stats::Votes;
use crate::time::later;

/// One release's count: per node its outcome, how many nodes confirmed the release and how many answered.
#[derive(Debug)]
pub(crate) struct Tally<'a> {
    /// The nodes' tallies, where each outcome is counted as it comes.
    votes: &'a [Votes],
    quorum: usize,
    outcomes: Vec<Outcome>,
    released: usize,
    answered: usize,
}

impl<'a> Tally<'a> {
    /// A tally over `n` nodes of which `sent` are asked; `quorum` of them must confirm.
    pub(crate) fn new(votes: &'a [Votes], n: usize, quorum: usize, sent: NodeSet) -> Tally<'a> {
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let mut answered = 0;
        for (node, outcome) in outcomes.iter_mut().enumerate() {
            if !sent.contains(node) {
                *outcome = Outcome::NotSent;
                answered += 1;
            }
        }
        Tally {
            votes,
            quorum,
            outcomes,
            released: 0,
            answered,
        }
    }

    /// Counts `node`'s reply, as its kind reads it: [`Vote::Yes`] released here, [`Vote::Failed`] no answer (or
    /// an error reply), anything else answered without releasing. Returns how many more confirmations would make
    /// the release certain (0: it is, the round may end).
    pub(crate) fn vote(&mut self, node: usize, (vote, outcome): (Vote, Outcome)) -> usize {
        if let Some(votes) = self.votes.get(node) {
            votes.count(&outcome);
        }
        if let Some(slot) = self.outcomes.get_mut(node) {
            *slot = outcome;
        }
        self.released += usize::from(vote == Vote::Yes);
        self.answered += usize::from(vote != Vote::Failed);
        self.needed()
    }

    /// Whether so many nodes answered that they did not hold the lock that no majority can have held it: those
    /// that released it and those that did not answer (they may hold it) make fewer than a majority.
    fn lost(&self) -> bool {
        let not_ours = self.answered - self.released.min(self.answered);
        not_ours > self.outcomes.len().saturating_sub(self.quorum)
    }

    /// How many more confirmations would make the release certain.
    pub(crate) fn needed(&self) -> usize {
        self.quorum.saturating_sub(self.released)
    }

    /// The verdict (see the module docs): the number of nodes that confirmed, or [`Error::LockLost`] /
    /// [`Error::Quorum`] with every node's outcome, the report naming `resource`.
    pub(crate) fn finish<N: Nodes, C: Clock>(
        self,
        engine: &Engine<N, C>,
        resource: &[u8],
    ) -> Result<usize> {
        if self.released >= self.quorum {
            return Ok(self.released);
        }
        let lost = self.lost();
        let report = Box::new(engine.report(resource, self.outcomes, self.quorum));
        Err(match lost {
            true => Error::LockLost(report),
            false => Error::Quorum(report),
        })
    }
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// The release round of a kind whose release is one script (a fenced lock, a set, an owned hold, a plain
    /// lock handing its key on): `script` with `keys` and `args` on every node the lock's acquisition was sent
    /// to, in full (as every release), each reply read by `read` into a vote and counted by a [`Tally`], whose
    /// verdict's report names `name`.
    pub(crate) async fn release_scripted(
        &self,
        lock: &Lease,
        name: &[u8],
        (script, keys, args): (Lua, &[&[u8]], &[&[u8]]),
        mut read: impl FnMut(&Reply) -> (Vote, Outcome),
    ) -> Result<usize> {
        let quorum = self.quorum();
        let deadline = later(self.clock.now(), self.config.round_timeout);
        let mut tally = Tally::new(&self.votes, self.fanout.len(), quorum, lock.nodes);
        self.pipelined(
            Purpose::Release,
            lock.nodes,
            1,
            deadline,
            quorum,
            |buf, full| lua::eval(buf, script, full, keys, args),
            |_, (node, _), reply| tally.vote(node, read(&reply)),
        )
        .await;
        tally.finish(self, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn votes(n: usize) -> Vec<Votes> {
        (0..n).map(|_| Votes::default()).collect()
    }

    #[test]
    fn unsent_nodes_count_as_answered_not_released() {
        let v = votes(5);
        let mut sent = NodeSet::EMPTY;
        [0, 1, 2].into_iter().for_each(|i| sent.insert(i));
        let mut t = Tally::new(&v, 5, 3, sent);
        assert_eq!(t.outcomes[3], Outcome::NotSent);
        assert_eq!((t.released, t.answered), (0, 2));
        assert_eq!(t.vote(0, (Vote::Yes, Outcome::Granted)), 2);
        assert_eq!(t.vote(1, (Vote::Taken, Outcome::Taken)), 2);
        assert_eq!((t.released, t.answered), (1, 4));
    }

    #[test]
    fn the_round_may_end_once_a_majority_confirmed() {
        let v = votes(3);
        let mut t = Tally::new(&v, 3, 2, NodeSet::ALL);
        assert_eq!(t.vote(2, (Vote::Yes, Outcome::Granted)), 1);
        assert_eq!(t.vote(0, (Vote::Yes, Outcome::Granted)), 0);
        assert_eq!(t.needed(), 0);
        assert_eq!(t.outcomes[1], Outcome::NotAwaited);
    }

    #[test]
    fn lost_only_when_no_majority_can_have_held_it() {
        let v = votes(3);
        // One released, one "not ours", one silent: the silent one may hold it with the first: unconfirmed.
        let mut t = Tally::new(&v, 3, 2, NodeSet::ALL);
        t.vote(0, (Vote::Yes, Outcome::Granted));
        t.vote(1, (Vote::Taken, Outcome::Taken));
        assert!(!t.lost());
        // Two "not ours": lost, whatever the third says.
        let mut t = Tally::new(&v, 3, 2, NodeSet::ALL);
        t.vote(0, (Vote::Taken, Outcome::Taken));
        t.vote(1, (Vote::Taken, Outcome::Taken));
        assert!(t.lost());
        // A node never reached counts as "not ours".
        let mut sent = NodeSet::EMPTY;
        [0, 1].into_iter().for_each(|i| sent.insert(i));
        let mut t = Tally::new(&v, 3, 2, sent);
        t.vote(0, (Vote::Taken, Outcome::Taken));
        assert!(t.lost());
    }
}
