//! `Engine::pipelined`: one round that carries `k` commands per node in one request, and hands each reply back
//! tagged with the command it answers. The rounds of batches, sets and fencing are built on it.
//!
//! # Invariants
//!
//! - **Replies are matched by position.** A node answers its commands in order, and the round files a node's
//!   outcomes in request order (replies, or at the deadline a timeout per command still unanswered, or at once a
//!   refusal per command): the `i`-th outcome from a node is for command `i % k`.
//! - **`NOSCRIPT` costs one resend, per node.** The first `NOSCRIPT` from a node (it restarted, or someone ran
//!   `SCRIPT FLUSH`) sends that node the whole request once more with the scripts in full (`EVAL`): its outcomes
//!   from `k` on answer the resend. A command answered in the first pass (before the flush) is not handed back a
//!   second time, so a caller sees at most one outcome per (command, node).
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
use crate::redlock::quorum::{Quorum, Status, Vote, drift};
use crate::time::later;

/// How a pipelined round's requests are queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An acquisition or extension: a node with too many requests waiting fails its vote.
    Normal,
    /// A release: must reach every reachable node (see `Fanout::release_round`).
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
        encode(&mut request, false);
        let mut round = match kind {
            Kind::Normal => self.fanout.round(deadline),
            Kind::Release => self.fanout.release_round(deadline),
        };
        let sent = round.send_to(nodes, &request, k);
        round.need(need);
        // Per node: outcomes seen so far. Only for nodes that were sent the scripts in full: which commands were
        // answered in the first pass (allocated only then: rare).
        let mut index = vec![0usize; n];
        let mut resent: Vec<Option<Vec<bool>>> = Vec::new();
        while let Some((node, reply)) = round.next().await {
            let Some(at) = index.get_mut(node) else {
                continue;
            };
            let (j, first) = (*at % k, *at < k);
            *at += 1;
            let done = resent.get_mut(node).and_then(Option::as_mut);
            match done {
                None if first && is_noscript(&reply) => {
                    // Everything before this command was answered in the first pass.
                    let mut answered = vec![false; k];
                    answered[..j].iter_mut().for_each(|a| *a = true);
                    resent.resize_with(n, || None);
                    resent[node] = Some(answered);
                    request.clear();
                    encode(&mut request, true);
                    round.send(node, &request, k);
                    continue;
                }
                Some(_) if first && is_noscript(&reply) => continue,
                Some(answered) if first => answered[j] = true,
                Some(answered) if answered[j] => continue,
                _ => {}
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
        let mut quorum = Quorum::new(n, start, ttl, drift(ttl, self.config.drift_factor));
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
