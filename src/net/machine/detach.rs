//! Releases held for room whose round ends before the node has room: detached from the round, kept by the machine
//! ([`Detached`], which states the invariants), and placed on their node as replies make room.
//!
//! - **Detached when** the round is closed (it decided, or its caller went away) or, past its last deadline,
//!   counts a held request as overloaded ([`RoundState::retry_held`](super::RoundState::retry_held)): the round's
//!   outcome for that node is the same as before (no reply counted), and the request still goes.
//! - **Ahead of later requests**: a round offering a request to a node with detached releases waiting queues them
//!   first, if they fit with its own, else refuses or holds its own ([`Machine::make_way`]).
//! - **Placed after each read**: once the replies read are filed (room made) and the hung connections dropped,
//!   before the turn's writes ([`Machine::after_read`]), so that detached releases take the room first and go
//!   out in that turn's batch. A node that is down is dialled again if its backoff allows (as a round's request
//!   would); a release is queued only on a connection whose set-up went through, within the release reserve.
//! - **Someone drives while any wait**: the driver's business ([`Machine::needs_driver`],
//!   [`Machine::detached_due`]; the threaded fanout's background driver).

use std::time::{Duration, Instant};

use super::{Link, Machine};
use crate::net::detached::Placed;
use crate::net::slots::Wake;
use crate::net::state::{Priority, Room, Waiter};
use crate::time::later;

/// How long a driver may wait, at the most, while detached releases wait and nothing is read: a node that was
/// down may be dialled again meanwhile (room is made by replies, which end the wait anyway).
pub(crate) const DETACHED_PACE: Duration = Duration::from_millis(10);

impl<L: Link> Machine<L> {
    /// Until when, at the latest, a driver must look again for the detached releases; `None` if none waits and no
    /// connection holds one whose reply is still to come, nor any byte unwritten (see "Driven to the end" in
    /// [`detached`](crate::net::detached)).
    pub(crate) fn detached_due(&mut self, now: Instant) -> Option<Instant> {
        if self.detached.needs_driver() && self.detached.is_empty() {
            let held = self.conns.iter().any(|c| c.state.holds_detached());
            self.detached.settled(held);
        }
        let pace = later(now, DETACHED_PACE);
        match self.detached.earliest(|node| self.alive_until(node)) {
            Some(t) => Some(t.min(pace)),
            None => self.needs_driver().then_some(pace),
        }
    }

    /// Keeps `bytes` (a release round's request, expecting `replies` replies), held for room on `node` by a round
    /// that can no longer wait for it, to be placed when the node has room; given up at once past the node's cap.
    pub(crate) fn detach(&mut self, (node, bytes, replies): (usize, Vec<u8>, usize), now: Instant) {
        let Some(conn) = self.conns.get(node) else {
            return;
        };
        let stats = &conn.state.stats;
        stats.detached(replies);
        let give_up_at = later(now, self.opts.hung_timeout);
        let cap = self.opts.max_in_flight.saturating_mul(2);
        if !self.detached.detach(node, bytes, replies, give_up_at, cap) {
            stats.given_up(replies);
        }
    }

    /// Places the detached releases that fit now, and gives up those past their bound (see the module doc).
    pub(crate) fn place_detached(&mut self, now: Instant, wake: &mut Vec<Wake>) {
        if self.detached.is_empty() {
            return;
        }
        let mut detached = std::mem::take(&mut self.detached);
        let mut given_up = Vec::new();
        let alive: Vec<Option<Instant>> = (0..self.conns.len())
            .map(|node| self.alive_until(node))
            .collect();
        detached.place(
            now,
            |node| alive.get(node).copied().flatten(),
            |node, bytes, replies| {
                if node >= self.conns.len() {
                    return Placed::Drop;
                }
                // Down and in its backoff: it may be back before the bound. Connecting, or its set-up not
                // answered yet: placed once the set-up went through, so that a node still loading its data set
                // (which fails the set-up, see "A node that is loading" in `state`) never refuses it unread.
                let ready =
                    self.ensure(node, now, wake).is_ok() && self.conns[node].state.is_set_up();
                let state = &mut self.conns[node].state;
                if !ready || state.room(replies, Priority::Release, &self.opts) != Room::Yes {
                    return Placed::Wait;
                }
                state.queue(bytes, Waiter::Detached, replies, now);
                Placed::Queued
            },
            |node, replies| given_up.push((node, replies)),
        );
        self.detached = detached;
        for (node, replies) in given_up {
            if let Some(c) = self.conns.get(node) {
                c.state.stats.given_up(replies);
            }
        }
    }

    /// Makes way for a request expecting `replies` replies, of `priority`, on `node`, whose connection can take
    /// bytes (its [`ensure`](Machine::ensure) succeeded: up, or connecting): the room the request has, as
    /// [`NodeState::room`] says, with the node's detached releases ahead of it. If some wait, they are queued
    /// first, and only if they and the request fit together (`Room::Yes`); else nothing is queued, and the caller
    /// refuses or holds its request as for a full node. So a request never overtakes a release detached before it
    /// was offered (see [`detached`](crate::net::detached), "In order per node"). The caller queues its request
    /// right after: on a connection still connecting or setting up, the releases go out with it behind the set-up,
    /// whether or not its round still waits then ("Driven to the end" in [`detached`](crate::net::detached)).
    ///
    /// [`NodeState::room`]: crate::net::state::NodeState::room
    pub(crate) fn make_way(
        &mut self,
        (node, replies, priority): (usize, usize, Priority),
        now: Instant,
    ) -> Room {
        let Some(conn) = self.conns.get_mut(node) else {
            return Room::No;
        };
        let ahead = self.detached.waiting_on(node);
        if ahead == 0 {
            return conn.state.room(replies, priority, &self.opts);
        }
        let room = conn
            .state
            .room(ahead.saturating_add(replies), priority, &self.opts);
        if room == Room::Yes {
            let state = &mut conn.state;
            let stats = std::sync::Arc::clone(&state.stats);
            let alive = state.loading_until(self.opts.hung_timeout);
            self.detached.take_node(
                (node, alive),
                now,
                |bytes, r| state.queue(bytes, Waiter::Detached, r, now),
                |r| stats.given_up(r),
            );
        }
        room
    }

    /// Until when `node` extends the bound of its detached releases: `hung_timeout` past the last time it refused
    /// a set-up as loading its data set (see "Bounded" in [`detached`](crate::net::detached)).
    pub(crate) fn alive_until(&self, node: usize) -> Option<Instant> {
        self.conns
            .get(node)?
            .state
            .loading_until(self.opts.hung_timeout)
    }

    /// Gives up every detached release (the fanout is dropped).
    pub(crate) fn give_up_detached(&mut self) {
        let conns = &self.conns;
        self.detached.clear(|node, replies| {
            if let Some(c) = conns.get(node) {
                c.state.stats.given_up(replies);
            }
        });
    }
}
