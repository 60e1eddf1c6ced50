//! `Engine::pipelined`: one round that carries `k` commands per node in one request, and hands each reply back
//! tagged with the command it answers. The rounds of batches, sets and fencing are built on it.
//!
//! # Invariants
//!
//! - **Replies are matched by id.** Every request to a node is the same `k` commands, so the outcome with id
//!   `seq` (its place among the node's replies, see the seam's contract) is for command `seq % k` of the node's
//!   `seq / k`-th request, whatever order outcomes come in (replies, timeouts, refusals).
//! - **`NOSCRIPT` costs one resend, per node.** A release's scripts go in full from the start (`scripts`,
//!   "Releases go in full"), so this is for the other rounds. The first `NOSCRIPT` from a node (it restarted, or
//!   someone ran `SCRIPT FLUSH`) sends that node the whole request once more with the scripts in full (`EVAL`): its outcomes
//!   from `k` on answer the resend. A command answered by either pass is not handed back a second time, so a
//!   caller sees at most one outcome per (command, node).
//! - **The caller decides when to stop.** `on_reply` returns how many more outcomes are worth waiting for, 0 to
//!   end the round; outcomes not awaited are read and dropped by the fanout when they come.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::Engine;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::error::Outcome;
use crate::redlock::kind::is_noscript;
use crate::redlock::lua;
use crate::redlock::quorum::{Quorum, Status, Vote};
use crate::time::later;

/// How a pipelined round's requests are queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An acquisition or extension: a node with too many requests waiting fails its vote.
    Normal,
    /// A release: must reach every reachable node (see `Fanout::release_round`); its scripts go in full.
    Release,
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// Sends `k` commands (written by `encode(buf, full)`: `full` asks for scripts by `EVAL` instead of
    /// `EVALSHA`) to `nodes` in one request each, then calls `on_reply(command, node, reply)` for each outcome
    /// until it returns 0 or the round ends by `deadline`. `need` is how many outcomes are worth waiting for
    /// first. Returns the nodes the request was queued for.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn pipelined(
        &self,
        kind: Kind,
        nodes: NodeSet,
        k: usize,
        deadline: Instant,
        need: usize,
        encode: impl Fn(&mut BytesMut, bool),
        mut on_reply: impl FnMut(usize, (usize, usize), Reply) -> usize,
    ) -> NodeSet {
        let n = self.fanout.len();
        if k == 0 {
            return NodeSet::EMPTY;
        }
        let mut request = BytesMut::with_capacity(64 * k);
        // A release goes in full at once: nobody may be left to answer its `NOSCRIPT` (`scripts`, "Releases go
        // in full").
        encode(&mut request, kind == Kind::Release);
        let mut round = match kind {
            Kind::Normal => self.lease_round(deadline),
            Kind::Release => self.unchecked(self.fanout.release_round(deadline)),
        };
        let sent = round.send_to(nodes, &request, k);
        round.need(need);
        // Every request to a node is the same `k` commands: the outcome with id `seq` answers command `seq % k`
        // of the node's `seq / k`-th request (0: the first pass; 1: the pass in full after a `NOSCRIPT`).
        // `handed`: per node and command, whether its outcome went to `on_reply` (once, from either pass; kept
        // only for requests of several commands).
        let mut handed: Vec<bool> = Vec::new();
        let mut resent: Vec<bool> = Vec::new();
        while let Some((id, reply)) = round.next().await {
            let (node, seq) = (id.node, id.seq as usize);
            if node >= n {
                continue;
            }
            let (j, first) = (seq % k, seq < k);
            if first && is_noscript(&reply) {
                // The node lost the script: the whole request again in full, once; the commands the first pass
                // answered are not counted twice.
                if !resent.get(node).copied().unwrap_or(false) {
                    resent.resize(n, false);
                    resent[node] = true;
                    request.clear();
                    encode(&mut request, true);
                    round.send(node, &request, k);
                }
                continue;
            }
            // One command per request: its first pass answered it or was a `NOSCRIPT` (not handed), so each
            // outcome is its command's only one, and no books are kept (no allocation per round).
            if k > 1 {
                if handed.is_empty() {
                    handed = vec![false; n * k];
                }
                match handed.get_mut(node * k + j) {
                    Some(h) if !*h => *h = true,
                    _ => continue,
                }
            }
            match on_reply(j, (node, round.source(node)), reply) {
                0 => break,
                more => round.need(more),
            }
        }
        sent
    }
}

/// What one scripted acquisition round ([`Engine::acquire_scripted`]) found.
pub(crate) struct Acquired {
    /// When the round started: the lease is counted from here.
    pub(crate) start: Instant,
    pub(crate) quorum: Quorum,
    pub(crate) status: Status,
    /// Every node's outcome (those the round did not wait for: `NotAwaited`).
    pub(crate) outcomes: Vec<Outcome>,
    /// The nodes the script was sent to.
    pub(crate) nodes: NodeSet,
    /// The largest number that a counted grant carried (a fencing token, a hold count; 0 if none).
    pub(crate) count: u64,
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// One acquisition round of `script` on every node, in Redlock's way: sent at once, each reply classified by
    /// `classify` into a vote, an outcome and a number, votes counted through the restart guard, the round ended
    /// as soon as the quorum's verdict is certain. Shared by sets, fencing and reentrant locks.
    pub(crate) async fn acquire_scripted(
        &self,
        script: lua::Lua,
        (keys, args): (&[&[u8]], &[&[u8]]),
        (ttl, ttl_ms): (Duration, u64),
        classify: impl Fn(&Reply) -> (Vote, Outcome, u64),
    ) -> Acquired {
        let n = self.fanout.len();
        self.note_ttl(ttl_ms);
        let start = self.clock.now();
        let mut quorum = Quorum::new(n, start, ttl, self.config.allowance(ttl));
        let deadline = later(start, self.config.round_timeout).min(quorum.deadline());
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let mut status = Status::Pending;
        let mut count = 0;
        let need = quorum.votes_to_decide();
        let nodes = self
            .pipelined(
                Kind::Normal,
                NodeSet::ALL,
                1,
                deadline,
                need,
                |buf, full| lua::eval(buf, script, full, keys, args),
                |_, (node, source), reply| {
                    let now = self.clock.now();
                    let (vote, outcome, number) = classify(&reply);
                    let (vote, outcome) = self.counted_from(source, (vote, outcome), now, None);
                    self.votes[node].count(&outcome);
                    outcomes[node] = outcome;
                    if vote == Vote::Yes {
                        // Only counted grants: a node the restart guard does not trust may have lost its counters.
                        count = count.max(number);
                    }
                    status = quorum.vote(node, vote, now);
                    match status {
                        Status::Pending => quorum.votes_to_decide(),
                        _ => 0,
                    }
                },
            )
            .await;
        Acquired {
            start,
            quorum,
            status,
            outcomes,
            nodes,
            count,
        }
    }
}
