//! Batches of independent locks: [`LockManager::try_lock_batch`](crate::redlock::LockManager::try_lock_batch) and
//! [`LockManager::unlock_batch`](crate::redlock::LockManager::unlock_batch).
//!
//! # Invariants
//!
//! - **Independent locks, one round.** Each resource of a batch is a lock of its own: its own value, its own
//!   [`Quorum`] (own votes, own validity, all measured from the one instant before the round's first byte), its own
//!   result. They share only the round: the batch's `SET resource value NX PX ttl` commands go to each node
//!   pipelined in one request (one write), and each reply is matched to its command by id (see `Engine::pipelined`).
//! - **The restart guard counts every vote.** A grant from a node the restart guard does not trust yet is no vote
//!   for any lock of the batch (`Engine::counted_from`).
//! - **A failed acquisition is released at once**, without waiting, on every node the batch reached: one
//!   compare-and-delete script per node for all the batch's failures ([`lua::RELEASE_BATCH`] sent in full, so a
//!   node that lost its scripts still runs it). A lock of the batch is never left to block others until its TTL.
//! - **One script per node releases a batch.** `unlock_batch` sends [`lua::RELEASE_BATCH`] with every lock's key
//!   and value: one command per node whatever the batch's size, the cheapest way for the node (a hundred
//!   `EVALSHA`s cost it about five times as much). Each lock's release is counted as [`Engine::unlock`] counts one.
//! - **A batch fits a node's queue.** A batch of more than [`Config::max_in_flight`](crate::redlock::Config::max_in_flight)
//!   resources would be refused by every node; it is refused before anything is sent.
//! - **The same resource twice in a batch** is two acquisitions of one key: the first wins, the second finds it
//!   held (`Ok(None)`).

use std::time::Duration;

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::compare::natives_unawaited;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::pipeline::Purpose;
use crate::redlock::engine::release::Tally;
use crate::redlock::engine::reply::set_vote;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::{Engine, settle};
use crate::redlock::error::{Error, Outcome, Result};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Quorum, Status, Vote};
use crate::redlock::scripts::{Native, Script, Via};
use crate::resp::{Decimal, Value, encode_command};
use crate::time::later;

/// A batch's acquisition under way, undone if its future is dropped before the round concludes (an async caller
/// gave up): every key it sent is released on every node with [`lua::RELEASE_BATCH`] in full, unawaited (each key
/// compared with its own value: a node that never set it deletes nothing).
struct BatchUndo<'a, N: Nodes, C: Clock> {
    engine: &'a Engine<N, C>,
    resources: &'a [&'a [u8]],
    values: &'a [crate::redlock::token::Value],
    live: &'a [usize],
    armed: bool,
}

impl<N: Nodes, C: Clock> Drop for BatchUndo<'_, N, C> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut request = bytes::BytesMut::new();
        if self.engine.fanout.routed() {
            // Cluster members: the keys lie in many slots, so one release each (routed to its master).
            for &i in self.live {
                request.clear();
                let nodes = NodeSet::ALL;
                self.engine.release_unawaited(
                    &mut request,
                    nodes,
                    self.resources[i],
                    &self.values[i],
                );
            }
            return;
        }
        let keys: Vec<&[u8]> = self.live.iter().map(|&i| self.resources[i]).collect();
        let args: Vec<&[u8]> = self.live.iter().map(|&i| &self.values[i][..]).collect();
        self.engine
            .release_keys_unawaited(NodeSet::ALL, &keys, &args);
    }
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    pub(crate) async fn try_lock_batch(
        &self,
        resources: &[&[u8]],
        ttl: Duration,
    ) -> Vec<Result<Option<Lease>>> {
        let m = resources.len();
        let all = |e: Error| (0..m).map(|_| Err(e.clone())).collect();
        let ttl_ms = match self.config.check_ttl(ttl) {
            Ok(ms) => ms,
            Err(e) => return all(e),
        };
        if m > self.config.max_in_flight {
            return all(Error::config(format!(
                "a batch of {m} resources is more than max_in_flight ({}) requests per node: split it",
                self.config.max_in_flight
            )));
        }
        let values = match self.tokens.next_many(m) {
            Ok(v) => v,
            Err(e) => {
                return all(Error::Os {
                    doing: "drawing the lock value from the OS's randomness",
                    error: std::io::Error::from(e).into(),
                });
            }
        };
        let mut results: Vec<Option<Result<Option<Lease>>>> = (0..m).map(|_| None).collect();
        // The resources that go out; an empty name gets its error and is not sent.
        let mut live = Vec::with_capacity(m);
        for (i, r) in resources.iter().enumerate() {
            match r.is_empty() {
                true => results[i] = Some(Err(Error::config("the resource name is empty"))),
                false => live.push(i),
            }
        }
        let k = live.len();
        if k > 0 {
            // Cancel-safe: a batch dropped part-way releases every key it may have set.
            let mut undo = BatchUndo {
                engine: self,
                resources,
                values: &values,
                live: &live,
                armed: true,
            };
            self.acquire_batch(resources, &values, &live, ttl, ttl_ms, &mut results)
                .await;
            undo.armed = false;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Err(Error::config("not attempted"))))
            .collect()
    }

    /// The round of [`try_lock_batch`](Engine::try_lock_batch) for `resources[live[..]]`; fills `results`.
    async fn acquire_batch(
        &self,
        resources: &[&[u8]],
        values: &[crate::redlock::token::Value],
        live: &[usize],
        ttl: Duration,
        ttl_ms: u64,
        results: &mut [Option<Result<Option<Lease>>>],
    ) {
        let (n, k) = (self.fanout.len(), live.len());
        let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        self.note_ttl(ttl_ms);
        // The clock starts before the first byte is sent, as the spec requires; every lock shares it.
        let start = self.clock.now();
        let first = Quorum::new(n, start, ttl, self.config.allowance(ttl));
        let deadline = later(start, self.config.round_timeout).min(first.deadline());
        let need = k * first.votes_to_decide();
        let mut quorums = vec![first; k];
        let mut status = vec![Status::Pending; k];
        let mut outcomes = vec![Outcome::NotAwaited; k * n];
        let mut undecided = k;
        let nodes = self
            .pipelined(
                Purpose::Lease,
                NodeSet::ALL,
                k,
                deadline,
                need,
                |buf, _| {
                    for &i in live {
                        let args: [&[u8]; 6] = [
                            b"SET",
                            resources[i],
                            &values[i],
                            b"NX",
                            b"PX",
                            ttl_arg.as_bytes(),
                        ];
                        encode_command(&args, buf);
                    }
                },
                |j, (node, source), reply| {
                    if status[j] == Status::Pending {
                        let now = self.clock.now();
                        let key = resources[live[j]];
                        let (vote, outcome) =
                            self.counted_from((source, key), set_vote(reply), now, None);
                        self.votes[node].count(&outcome);
                        outcomes[j * n + node] = outcome;
                        status[j] = quorums[j].vote(node, vote, now);
                        if status[j] != Status::Pending {
                            undecided -= 1;
                        }
                    }
                    // Each lock still pending needs one more outcome at the least.
                    undecided
                },
            )
            .await;
        let mut failed: Vec<usize> = Vec::new();
        for (j, &i) in live.iter().enumerate() {
            results[i] = Some(match settle(status[j], &quorums[j], self.clock.now()) {
                Ok(valid_until) => Ok(Some(Lease::new(
                    resources[i].to_vec(),
                    values[i],
                    (start, valid_until),
                    nodes,
                ))),
                Err(failure) => {
                    failed.push(i);
                    let mine = outcomes[j * n..(j + 1) * n].to_vec();
                    match failure {
                        Failure::Held => Ok(None),
                        _ => Err(Error::Quorum(Box::new(self.report(
                            resources[i],
                            mine,
                            quorums[j].quorum(),
                        )))),
                    }
                }
            });
        }
        if !failed.is_empty() && self.fanout.routed() {
            // Cluster members: the keys lie in many slots, so one release each (routed to its master).
            let mut release = bytes::BytesMut::new();
            for &i in &failed {
                release.clear();
                self.release_unawaited(&mut release, nodes, resources[i], &values[i]);
            }
        } else if !failed.is_empty() {
            // Released without waiting, wherever the key may have been set.
            let keys: Vec<&[u8]> = failed.iter().map(|&i| resources[i]).collect();
            let vals: Vec<&[u8]> = failed.iter().map(|&i| &values[i][..]).collect();
            self.release_keys_unawaited(nodes, &keys, &vals);
        }
    }

    /// Releases `keys` (each held with its value in `vals`) on `nodes` without waiting: one request per node, the
    /// way the node takes it. A node with a native compare-and-delete on its connection gets one per key (a user
    /// without `+eval` may not run the script, and nobody would read its refusal), and [`lua::RELEASE_BATCH`] as
    /// well until its native release has run on that connection (its ACL may lack it); the others get
    /// [`lua::RELEASE_BATCH`] in full (a node that lost its scripts still runs it).
    fn release_keys_unawaited(&self, nodes: NodeSet, keys: &[&[u8]], vals: &[&[u8]]) {
        let mut ways = [
            (None, NodeSet::EMPTY),
            (Some(Native::DelIfEq), NodeSet::EMPTY),
            (Some(Native::DelEx), NodeSet::EMPTY),
        ];
        for node in (0..self.fanout.len()).filter(|&n| nodes.contains(n)) {
            let i = match self.via(Script::Release, node) {
                Via::Native(Native::DelIfEq) => 1,
                Via::Native(Native::DelEx) => 2,
                Via::Sha | Via::Full => 0,
            };
            ways[i].1.insert(node);
            // A native release not run yet on this connection may be refused (an ACL without `+delifeq`), unread:
            // the script goes as well (as in `release_unawaited`), and whichever is allowed deletes the keys.
            if i != 0 && !self.restart.natives.ran(node, Script::Release) {
                ways[0].1.insert(node);
            }
        }
        let mut round = self.fanout.release_round(self.clock.now());
        let mut request = bytes::BytesMut::new();
        for (native, set) in ways {
            if set == NodeSet::EMPTY {
                continue;
            }
            request.clear();
            match native {
                None => {
                    lua::eval(&mut request, lua::RELEASE_BATCH, true, keys, vals);
                    round.send_to(set, &request, 1);
                }
                Some(native) => {
                    let pairs = keys.iter().copied().zip(vals.iter().copied());
                    natives_unawaited(&mut round, &mut request, set, &[native], pairs);
                }
            }
        }
    }

    pub(crate) async fn unlock_batch(&self, locks: &[&Lease]) -> Vec<Result<usize>> {
        let (n, m) = (self.fanout.len(), locks.len());
        if m == 0 {
            return Vec::new();
        }
        let quorum = self.quorum();
        let mut union = NodeSet::EMPTY;
        for node in 0..n {
            if locks.iter().any(|l| l.nodes.contains(node)) {
                union.insert(node);
            }
        }
        // One tally per lock, as a lone release counts it; a node never asked for a lock counts as answered.
        let mut tallies: Vec<Tally<'_>> = locks
            .iter()
            .map(|l| Tally::new(&self.votes, n, quorum, l.nodes))
            .collect();
        let mut pending = m;
        let keys: Vec<&[u8]> = locks.iter().map(|l| &l.resource[..]).collect();
        let vals: Vec<&[u8]> = locks.iter().map(|l| &l.value[..]).collect();
        let deadline = later(self.clock.now(), self.config.round_timeout);
        self.pipelined(
            Purpose::Release,
            union,
            1,
            deadline,
            quorum,
            |buf, full| lua::eval(buf, lua::RELEASE_BATCH, full, &keys, &vals),
            |_, (node, _), reply| {
                let votes = array_votes(&reply, m);
                for (j, vote) in votes.into_iter().enumerate() {
                    if !locks[j].nodes.contains(node) {
                        continue;
                    }
                    let tally = &mut tallies[j];
                    let was_needed = tally.needed() > 0;
                    if tally.vote(node, vote) == 0 && was_needed {
                        pending -= 1;
                    }
                }
                // Like a lone release: done once every lock is released on a majority, or every node answered.
                usize::from(pending > 0)
            },
        )
        .await;
        tallies
            .into_iter()
            .zip(locks)
            .map(|(tally, lock)| tally.finish(self, &lock.resource))
            .collect()
    }
}

/// What a [`lua::RELEASE_BATCH`] reply means for each of the `m` locks: 1 deleted, 0 not ours, anything else (an
/// error, a short array) a failed vote for every lock.
pub(crate) fn array_votes(reply: &Reply, m: usize) -> Vec<(Vote, Outcome)> {
    let items = match reply.as_ref().map(Value::without_attributes) {
        Ok(Value::Array(items)) if items.len() == m => items,
        Ok(Value::Error(msg) | Value::BulkError(msg)) => {
            let o = Outcome::ErrorReply(String::from_utf8_lossy(msg).into_owned());
            return vec![(Vote::Failed, o); m];
        }
        Ok(other) => {
            let o = Outcome::ErrorReply(format!("unexpected reply {other:?}"));
            return vec![(Vote::Failed, o); m];
        }
        Err(e) => return vec![(Vote::Failed, Outcome::Failed(e.clone())); m],
    };
    items
        .iter()
        .map(|v| match v.without_attributes() {
            Value::Integer(1) => (Vote::Yes, Outcome::Granted),
            Value::Integer(0) => (Vote::Taken, Outcome::NotHeld),
            other => (
                Vote::Failed,
                Outcome::ErrorReply(format!("unexpected reply {other:?}")),
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch release's reply is one vote per lock: each item of an array as long as the batch says that lock's
    /// vote; an array of any other length (a script that ran short, a reply to some other command) says nothing
    /// of any lock, so every lock's vote fails, none is counted released or left without a vote.
    #[test]
    fn a_batch_release_reply_votes_for_each_lock_only_when_it_has_one_item_per_lock() {
        let array = |items: &[i64]| -> Reply {
            Ok(Value::Array(
                items.iter().map(|&i| Value::Integer(i)).collect(),
            ))
        };
        assert_eq!(
            array_votes(&array(&[1, 0]), 2),
            [
                (Vote::Yes, Outcome::Granted),
                (Vote::Taken, Outcome::NotHeld)
            ]
        );
        for short_or_long in [array(&[1]), array(&[1, 1, 1]), array(&[])] {
            let votes = array_votes(&short_or_long, 2);
            assert_eq!(votes.len(), 2, "{short_or_long:?}: {votes:?}");
            assert!(
                votes.iter().all(|(vote, outcome)| *vote == Vote::Failed
                    && matches!(outcome, Outcome::ErrorReply(e) if e.starts_with("unexpected reply"))),
                "{short_or_long:?}: {votes:?}"
            );
        }
    }
}
