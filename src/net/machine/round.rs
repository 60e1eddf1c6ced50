//! [`RoundState`]: one round's side of the machine: its slot, its deadlines and patience, its priority, and the
//! requests it holds for room. Offering a request to a node (queued, held, refused), retrying held requests,
//! timing nodes out and closing the round are rules of the machine, run the same by the threaded fanout's
//! [`Round`](crate::net::Round) and by the simulator's rounds.

use std::time::{Duration, Instant};

use super::{Link, Machine, Write};
use crate::net::error::NodeError;
use crate::net::node_set::NodeSet;
use crate::net::slots::{SlotRef, Wake};
use crate::net::state::{Priority, Room, Waiter};

/// What became of a request offered to one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Queued, or held for room.
    Sent,
    /// Not sent: down, failed, or overloaded; the outcome is filed.
    Refused,
    /// The node has no room for an ordinary request right now: the caller may read what arrived and offer it
    /// again ([`RoundState::offer_again`]), which refuses it if there is still none.
    Full,
}

/// Requests of a release round waiting for room on full nodes, in the order they were offered: each with its own
/// bytes and reply count (a round may hold its first request on one node and a resend on another).
#[derive(Debug, Default)]
struct Held {
    requests: Vec<HeldRequest>,
}

#[derive(Debug)]
struct HeldRequest {
    node: usize,
    request: Vec<u8>,
    /// The id of its first reply, and how many it expects.
    first: u32,
    replies: usize,
}

impl Held {
    fn holds(&self, node: usize) -> bool {
        self.requests.iter().any(|h| h.node == node)
    }
}

/// A request found its node full in a first pass: offered again once, after a read.
#[derive(Debug)]
pub(crate) struct Full<'r> {
    node: usize,
    request: &'r [u8],
    first: u32,
    replies: usize,
}

/// One round's state in the machine.
#[derive(Debug)]
pub(crate) struct RoundState {
    pub(crate) slot: SlotRef,
    pub(crate) deadline: Instant,
    /// How far a patient round may move its deadline ([`RoundState::patient_until`]); `deadline` otherwise.
    pub(crate) hard: Instant,
    /// A patient round's measure of life: a node silent for this long (the round's first length) is not waited for.
    patience: Duration,
    pub(crate) priority: Priority,
    held: Option<Box<Held>>,
}

impl RoundState {
    /// Opens a round of `priority` whose outcomes are all known by `deadline`.
    pub(crate) fn open<L: Link>(
        m: &mut Machine<L>,
        deadline: Instant,
        priority: Priority,
    ) -> RoundState {
        let slot = m.slots.open(m.conns.len(), deadline);
        RoundState {
            slot,
            deadline,
            hard: deadline,
            patience: Duration::ZERO,
            priority,
            held: None,
        }
    }

    /// Whether the round holds requests for room (its waiter looks again soon rather than at its deadline).
    pub(crate) fn holds(&self) -> bool {
        self.held.is_some()
    }

    /// Makes the round patient until `hard` (see [`Round::patient_until`](crate::net::Round::patient_until)),
    /// measuring the patience from `now`.
    pub(crate) fn patient_until(&mut self, hard: Instant, now: Instant) {
        if hard > self.deadline {
            self.patience = self.deadline.saturating_duration_since(now);
            self.hard = hard;
        }
    }

    /// Ends the round by `at` if that is sooner than its deadline (see [`Round::cut_short`](crate::net::Round::cut_short)):
    /// no patience past it either.
    pub(crate) fn cut_short<L: Link>(&mut self, m: &mut Machine<L>, at: Instant) {
        if at < self.deadline {
            self.deadline = at;
            m.slots.extend(self.slot, at);
        }
        self.hard = self.hard.min(self.deadline);
    }

    /// Offers each `(node, request, replies)` in order (two for one node keep it): queued, held, or refused with
    /// its outcome filed. A request whose node has no room for an ordinary request is put in `full`, and the
    /// node's later requests of this call behind it, for [`offer_again`](RoundState::offer_again). Returns the
    /// nodes a request was queued (or held) for.
    pub(crate) fn offer_each<'r, L: Link>(
        &mut self,
        m: &mut Machine<L>,
        requests: impl Iterator<Item = (usize, &'r [u8], usize)>,
        now: Instant,
        (writes, wake): (&mut Vec<Write<L::Handle>>, &mut Vec<Wake>),
        full: &mut Vec<Full<'r>>,
    ) -> NodeSet {
        let mut sent = NodeSet::EMPTY;
        for (node, request, replies) in requests {
            if node >= m.conns.len() {
                continue;
            }
            // Its ids, whatever becomes of it (queued, held, refused).
            let first = m.slots.expect(self.slot, node, replies);
            let f = Full {
                node,
                request,
                first,
                replies,
            };
            // Behind a request that found its node full, the node's later ones wait too: a node's requests of a
            // round are queued in the order of their ids (see `slots`).
            if full.iter().any(|h| h.node == node) {
                full.push(f);
                continue;
            }
            match self.offer(m, &f, now, writes, wake) {
                Offer::Sent => sent.insert(node),
                Offer::Full => full.push(f),
                Offer::Refused => {}
            }
        }
        sent
    }

    /// Offers again the requests [`offer_each`](RoundState::offer_each) found full, in order; those still without
    /// room are refused ([`NodeError::Overloaded`]). Returns the nodes a request was queued for.
    pub(crate) fn offer_again<L: Link>(
        &mut self,
        m: &mut Machine<L>,
        full: Vec<Full<'_>>,
        now: Instant,
        (writes, wake): (&mut Vec<Write<L::Handle>>, &mut Vec<Wake>),
    ) -> NodeSet {
        let mut sent = NodeSet::EMPTY;
        for f in full {
            match self.offer(m, &f, now, writes, wake) {
                Offer::Sent => sent.insert(f.node),
                Offer::Refused => {}
                Offer::Full => {
                    m.conns[f.node].state.stats.refused(f.replies);
                    let r = Err(NodeError::Overloaded);
                    wake.extend(m.slots.refuse(self.slot, f.node, f.first, f.replies, r));
                }
            }
        }
        sent
    }

    /// Offers one request (its replies' ids: `replies` from `first` on, already expected) to its node: queues
    /// it, holds it for room (a release), or files why it was not sent. A node without room for an ordinary
    /// request is reported `Full` and left to the caller.
    fn offer<L: Link>(
        &mut self,
        m: &mut Machine<L>,
        f: &Full<'_>,
        now: Instant,
        writes: &mut Vec<Write<L::Handle>>,
        wake: &mut Vec<Wake>,
    ) -> Offer {
        let Full {
            node,
            request,
            first,
            replies,
        } = *f;
        // Behind a request of this round still held for room on the node: held too, whatever the node's state
        // (`retry_held` judges them in order), so that the node's requests go on the wire in the order of their
        // ids (see `slots`).
        if self.held.as_ref().is_some_and(|h| h.holds(node)) {
            self.hold(node, request, first, replies);
            return Offer::Sent;
        }
        if let Err(refused) = m.ensure(node, now, wake) {
            wake.extend(
                m.slots
                    .refuse(self.slot, node, first, replies, Err(refused)),
            );
            return Offer::Refused;
        }
        // Behind the node's detached releases, if any (queued first here, or this request waits too).
        match m.make_way((node, replies, self.priority), now) {
            Room::Yes => {
                // Written now on an idle node, or by a caller that will not wait for replies (nobody might poll);
                // else flushed with the next batch when the node's replies come (see `state`).
                let state = &mut m.conns[node].state;
                let idle = !state.busy();
                state.queue(request, Waiter::Round(self.slot, first), replies, now);
                m.slots.queued(self.slot, node, first, replies);
                if idle || self.deadline <= now {
                    writes.extend(m.take_write(node));
                }
                Offer::Sent
            }
            Room::No => Offer::Full,
            Room::Wait => {
                self.hold(node, request, first, replies);
                Offer::Sent
            }
        }
    }

    /// Holds `request` for room on `node` (a release round), behind the round's other held requests.
    fn hold(&mut self, node: usize, request: &[u8], first: u32, replies: usize) {
        self.held
            .get_or_insert_with(Box::default)
            .requests
            .push(HeldRequest {
                node,
                request: request.to_vec(),
                first,
                replies,
            });
    }

    /// Queues held requests on nodes that now have room; past the deadline (a patient round's last one), counts
    /// the rest as overloaded and detaches them. Returns whether it queued or filed anything.
    pub(crate) fn retry_held<L: Link>(
        &mut self,
        m: &mut Machine<L>,
        now: Instant,
        writes: &mut Vec<Write<L::Handle>>,
        wake: &mut Vec<Wake>,
    ) -> bool {
        let Some(mut held) = self.held.take() else {
            return false;
        };
        let before = (writes.len(), wake.len());
        // Nodes with a request still held in this pass: their later requests wait behind it (a node's requests
        // go on the wire in the order of their ids).
        let mut blocked: Vec<usize> = Vec::new();
        held.requests.retain_mut(|h| {
            if h.node >= m.conns.len() {
                return false;
            }
            if blocked.contains(&h.node) {
                return true;
            }
            // The connection the request was held for may have been dropped meanwhile (a reset, a restart, a
            // hang): its queue emptied, so there is room, but a request queued on a connection that is down has
            // no bytes on any wire, and the next connection would hand it its first reply. As `offer` does: dial
            // anew if the backoff allows, else the node's error is the request's outcome.
            if let Err(e) = m.ensure(h.node, now, wake) {
                wake.extend(
                    m.slots
                        .refuse(self.slot, h.node, h.first, h.replies, Err(e)),
                );
                return false;
            }
            if m.make_way((h.node, h.replies, Priority::Release), now) == Room::Yes {
                let state = &mut m.conns[h.node].state;
                state.queue(
                    &h.request,
                    Waiter::Round(self.slot, h.first),
                    h.replies,
                    now,
                );
                m.slots.queued(self.slot, h.node, h.first, h.replies);
                writes.extend(m.take_write(h.node));
                return false;
            }
            // A patient round may still move its deadline for a node that answers (`time_out_due`): its held
            // requests wait for room until the round can no longer be extended. Then the round counts the node
            // as overloaded, and the release goes on its own once the node has room (`detach.rs`).
            if now >= self.deadline && self.hard <= self.deadline {
                m.conns[h.node].state.stats.refused(h.replies);
                let r = Err(NodeError::Overloaded);
                wake.extend(m.slots.refuse(self.slot, h.node, h.first, h.replies, r));
                let bytes = std::mem::take(&mut h.request);
                m.detach((h.node, bytes, h.replies), now);
                return false;
            }
            blocked.push(h.node);
            true
        });
        if !held.requests.is_empty() {
            self.held = Some(held);
        }
        (writes.len(), wake.len()) != before
    }

    /// Past the deadline (a turn has read the sockets at or after it, [`Machine::last_read`]): files the timeouts
    /// due, one node at a time, or, for a patient round, those of every node silent for its patience while moving
    /// the deadline for the others. Returns whether it filed or moved anything (the caller looks again).
    pub(crate) fn time_out_due<L: Link>(&mut self, m: &mut Machine<L>) -> bool {
        let Some(read_at) = m.last_read.filter(|t| *t >= self.deadline) else {
            return false;
        };
        if self.hard > self.deadline {
            // Nodes that owe an outcome, and until when each one's last sign of life keeps it awaited.
            let owing: Vec<(usize, Option<Instant>)> = {
                let Machine { slots, conns, .. } = &mut *m;
                slots
                    .pending_nodes(self.slot)
                    .map(|node| {
                        let state = &conns[node].state;
                        let alive = crate::time::later(state.last_progress(), self.patience);
                        (node, (state.is_up() && alive > read_at).then_some(alive))
                    })
                    .collect()
            };
            let until = owing
                .iter()
                .filter_map(|o| o.1)
                .max()
                .map(|t| t.min(self.hard));
            match until.filter(|t| *t > read_at) {
                Some(until) => {
                    for &(node, _) in owing.iter().filter(|o| o.1.is_none()) {
                        let n = m.slots.time_out(self.slot, node).unwrap_or(0);
                        (0..n).for_each(|_| m.conns[node].state.stats.timeout());
                    }
                    self.deadline = until;
                    m.slots.extend(self.slot, until);
                    return true;
                }
                // Nobody still answers (or `hard` has come): an ordinary round from here on.
                None => self.hard = self.deadline,
            }
        }
        // All of a node's requests at once: a late reply must never be counted for a later command.
        match m.slots.time_out_node(self.slot) {
            Some((node, n)) => {
                (0..n).for_each(|_| m.conns[node].state.stats.timeout());
                true
            }
            None => false,
        }
    }

    /// Files every outcome still due as [`NodeError::Timeout`] without a read (a round whose driver cannot run:
    /// see `Round::next`'s stranded case).
    pub(crate) fn time_out_all<L: Link>(&mut self, m: &mut Machine<L>) {
        self.hard = self.deadline;
        while let Some((node, n)) = m.slots.time_out_node(self.slot) {
            (0..n).for_each(|_| m.conns[node].state.stats.timeout());
        }
    }

    /// Closes the round: its slot (outcomes still to come are read and dropped) and its held requests, which go
    /// on their own (detached): a release must reach every reachable node, whether or not anybody waits for its
    /// reply. Returns the round's waiter, to be dropped (never woken) once the caller lets go of the machine.
    pub(crate) fn close<L: Link>(&mut self, m: &mut Machine<L>, now: Instant) -> Option<Wake> {
        let waiter = m.slots.close(self.slot);
        if let Some(held) = self.held.take() {
            for h in held.requests {
                m.detach((h.node, h.request, h.replies), now);
            }
        }
        waiter
    }
}
