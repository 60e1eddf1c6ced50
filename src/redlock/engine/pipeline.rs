//! `Engine::pipelined`: one round that carries `k` commands per node in one request, and hands each reply back
//! tagged with the command it answers. The rounds of batches and of the scripted kinds are built on it.
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
//! - **The caller decides when to stop, and whom to ask again.** `on_reply` returns how many more outcomes are
//!   worth waiting for, 0 to end the round; outcomes not awaited are read and dropped by the fanout when they
//!   come. With it, the nodes to send their request again (a request of one command, in full, to a node sent it
//!   fewer than [`ASKS`] times, a `NOSCRIPT`'s resend included): each outcome is handed back with the pass it
//!   answers (0: the first request), and the caller counts a node's last answer in place of the earlier ones.

use std::time::Instant;

use bytes::BytesMut;

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::Engine;
use crate::redlock::engine::reply::{Refused, is_noscript, refused};
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::untouched::Untouched;
use crate::redlock::quorum::ASKS;

/// What a pipelined round is for, which decides how its requests are queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// An acquisition or extension (a round that sets a lease, its clocks checked): a node with too many requests
    /// waiting fails its vote.
    Lease,
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
        purpose: Purpose,
        nodes: NodeSet,
        k: usize,
        deadline: Instant,
        need: usize,
        encode: impl Fn(&mut BytesMut, bool),
        mut on_reply: impl FnMut(usize, (usize, usize), Reply) -> usize,
    ) -> NodeSet {
        self.pipelined_with(
            purpose,
            (nodes, k, deadline, need),
            encode,
            scripts_only(),
            |(command, _), node, reply| (on_reply(command, node, reply), NodeSet::EMPTY, None),
        )
        .await
        .0
    }

    /// [`pipelined`](Self::pipelined), where the nodes of `natively` are sent the `k` commands `encode_native`
    /// writes instead (a server's native command for what the script does, with the same replies). A node that
    /// refuses them before anything ran ([`Refused::Command`]: its ACL lacks the command, or it has none) is told
    /// to `refused` and sent the scripts in full instead, once; the refusal is not handed to `on_reply`.
    /// `on_reply` is told, with each outcome's command, which of the node's requests it answers (0: the first),
    /// and names nodes to send their request again (see the module's invariants). With its answer that it needs no
    /// more outcomes, `on_reply` may name an instant up to which the round goes on reading those still owed (each
    /// handed to `on_reply`, whatever it answers), the round cut short there ([`NodeRound::cut_short`]): what
    /// they say tells which nodes the request left untouched. Returns the nodes the request was queued for, and of
    /// those (below 64) the ones whose every outcome of every request was read (none owed when the round ended:
    /// see [`Untouched`]).
    pub(crate) async fn pipelined_with(
        &self,
        purpose: Purpose,
        (nodes, k, deadline, need): (NodeSet, usize, Instant, usize),
        encode: impl Fn(&mut BytesMut, bool),
        (natively, encode_native, refused_native): (
            NodeSet,
            impl Fn(&mut BytesMut),
            impl Fn(usize),
        ),
        mut on_reply: impl FnMut(
            (usize, usize),
            (usize, usize),
            Reply,
        ) -> (usize, NodeSet, Option<Instant>),
    ) -> (NodeSet, NodeSet) {
        let n = self.fanout.len();
        if k == 0 {
            return (NodeSet::EMPTY, NodeSet::EMPTY);
        }
        let mut request = BytesMut::with_capacity(64 * k);
        // A release goes in full at once: nobody may be left to answer its `NOSCRIPT` (`scripts`, "Releases go
        // in full").
        encode(&mut request, purpose == Purpose::Release);
        let mut round = match purpose {
            Purpose::Lease => self.lease_round(deadline),
            Purpose::Release => self.unchecked(self.fanout.release_round(deadline)),
        };
        // A set says nothing of nodes from 64 on (always members): they get the scripts.
        let natively = match n > 64 {
            true => NodeSet::EMPTY,
            false => natively.intersection(nodes),
        };
        let mut sent = round.send_to(nodes.difference(natively), &request, k);
        if natively != NodeSet::EMPTY {
            request.clear();
            encode_native(&mut request);
            sent = sent.union(round.send_to(natively, &request, k));
        }
        // Every outcome read counts as a refusal here: the caller knows which were not.
        let mut read = Untouched::new();
        read.sent(nodes, k);
        round.need(need);
        // Every request to a node is the same `k` commands: the outcome with id `seq` answers command `seq % k`
        // of the node's `seq / k`-th request (0: the first pass; 1: the pass in full after a `NOSCRIPT`).
        // `handed`: per node and command, whether its outcome went to `on_reply` (once, from either pass; kept
        // only for requests of several commands).
        let mut handed: Vec<bool> = Vec::new();
        // Per node, how many requests it was sent after its first (empty until one is).
        let mut passes: Vec<u8> = Vec::new();
        // Past the caller's verdict, reading on for what is still owed (`read_on`).
        let mut reading_on = false;
        while let Some((id, reply)) = round.next().await {
            let (node, seq) = (id.node, id.seq as usize);
            if node >= n {
                continue;
            }
            read.answered(node, true);
            let (j, first) = (seq % k, seq < k);
            let native_refused = first
                && natively != NodeSet::EMPTY
                && natively.contains(node)
                && matches!(refused(&reply), Some(Refused::Command));
            if native_refused {
                refused_native(node);
            }
            if first && (is_noscript(&reply) || native_refused) {
                // The node lost the script, or refused its native command: the whole request again, the scripts
                // in full, once; the commands the first pass answered are not counted twice. Not once the
                // verdict is in: the request ran nothing there, and nothing more is asked of the node.
                if passes.get(node).copied().unwrap_or(0) == 0 && !reading_on {
                    passes.resize(n, 0);
                    passes[node] = 1;
                    request.clear();
                    encode(&mut request, true);
                    round.send(node, &request, k);
                    read.sent(one(node), k);
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
            let (more, again, read_on) = on_reply((j, seq / k), (node, round.source(node)), reply);
            if k == 1 && again != NodeSet::EMPTY {
                for node in (0..n.min(64)).filter(|&node| again.contains(node)) {
                    let sent = passes.get(node).copied().unwrap_or(0);
                    if usize::from(sent) + 1 >= ASKS {
                        continue;
                    }
                    passes.resize(n, 0);
                    passes[node] = sent + 1;
                    // In full: the script may have been flushed since (a second `NOSCRIPT` is not resent).
                    request.clear();
                    match natively.contains(node) {
                        true => encode_native(&mut request),
                        false => encode(&mut request, true),
                    }
                    round.send(node, &request, k);
                    read.sent(one(node), k);
                }
            }
            if reading_on {
                continue;
            }
            match more {
                0 => match read_on {
                    Some(until) if read.owed(sent) > 0 => {
                        round.cut_short(until);
                        round.need(read.owed(sent));
                        reading_on = true;
                    }
                    _ => break,
                },
                more => round.need(more),
            }
        }
        (sent, read.of(sent))
    }
}

/// The set of `node` alone.
fn one(node: usize) -> NodeSet {
    let mut set = NodeSet::EMPTY;
    set.insert(node);
    set
}

/// The native part of [`Engine::pipelined_with`] for a round with no native command: every node gets the scripts.
pub(crate) fn scripts_only() -> (NodeSet, impl Fn(&mut BytesMut), impl Fn(usize)) {
    (NodeSet::EMPTY, |_: &mut BytesMut| {}, |_: usize| {})
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::time::{Duration, Instant};

    use bytes::BytesMut;

    use super::Purpose;
    use crate::net::NodeSet;
    use crate::net::test_peer::{Peer, block_on, command};
    use crate::redlock::engine::reply::{Refused, refused};

    /// A node whose ACL has neither its native command nor the scripts: the native command's refusal sends the
    /// scripts in its place, and their refusal (the second pass's first outcome) is handed on as the node's
    /// outcome. Read as a first pass's, it would be taken for the native command's refusal again and never handed:
    /// the node's vote lost.
    #[test]
    fn a_script_refused_after_a_refused_native_command_is_handed_on() {
        let peer = Peer::start();
        let e = crate::redlock::engine::test_engine(vec![peer.addr()]);
        let refusal = |name: &str| {
            let m = format!("NOPERM this user has no permissions to run the '{name}' command");
            command(&[b"ERROR", m.as_bytes()])
        };
        let mut node0 = NodeSet::EMPTY;
        node0.insert(0);
        let told = Cell::new(0);
        let mut handed = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        block_on(e.pipelined_with(
            Purpose::Release,
            (node0, 1, deadline, 1),
            |buf, _| buf.extend_from_slice(&refusal("eval")),
            (
                node0,
                |buf: &mut BytesMut| buf.extend_from_slice(&refusal("delifeq")),
                |node| {
                    assert_eq!(node, 0);
                    told.set(told.get() + 1);
                },
            ),
            |(command, pass), (node, _), reply| {
                handed.push((command, pass, node, refused(&reply)));
                (0, NodeSet::EMPTY, None)
            },
        ));
        assert_eq!(handed, [(0, 1, 0, Some(Refused::Command))]);
        assert_eq!(told.get(), 1, "the native command's refusal told once");
        assert!(
            Instant::now() < deadline,
            "the round waited for its deadline"
        );
    }
}
