//! Releases held for room whose round ends before the node has room: detached from the round, kept by the fanout
//! (`Inner::detached`, bookkeeping in [`detached`](crate::net::detached), which states the invariants), and placed
//! on their node by whoever drives, as replies make room.
//!
//! - **Detached when** the round is dropped (it decided, or its caller went away) or, past its last deadline,
//!   counts a held request as overloaded (`Round::retry_held`): the round's outcome for that node is the same as
//!   before (no reply counted), and the request still goes.
//! - **Ahead of later requests**: a round offering a request to a node with detached releases waiting queues them
//!   first, if they fit with its own, else refuses or holds its own (`Shared::make_way`).
//! - **Placed by the driver**: each turn, once the replies it read are filed (room made) and the hung connections
//!   dropped, before the turn's writes, so that detached releases take the room first and go out in that turn's
//!   batch. A node that is down is dialled again if its backoff allows (as a round's request would); a release
//!   is queued only on a connection that can take bytes now, within the release reserve.
//! - **Someone drives while any wait.** A round that ends while releases are detached starts the background
//!   driver if it was not ([`Fanout::background`](super::Fanout::background)) and wakes it if nobody drives;
//!   whoever puts the driver back hands it to the background driver while releases wait
//!   ([`Inner::successor`]); the background driver keeps driving while they wait ([`Inner::detached_due`]),
//!   looking at least every [`DETACHED_PACE`], and while a connection holds one queued whose reply is still to
//!   come (a write cut short may need a turn; see "Driven to the end" in
//!   [`detached`](crate::net::detached)), or holds any bytes not written yet ([`Inner::needs_driver`]: a
//!   round's release queued behind a connect or a batch, its round ended); then it lingers, and gives the
//!   driver back. A release queued is otherwise like any request whose round ended: written in that turn's
//!   batch, its replies read and dropped.

use std::time::{Duration, Instant};

use super::{Inner, Shared, token};
use crate::net::conn::Conn;
use crate::net::detached::{Detached, Placed};
use crate::net::slots::{Slots, Wake};
use crate::net::state::{Filing, Priority, Room, Waiter};
use crate::time::later;

/// How long the background driver may poll, at the most, while detached releases wait and nothing is read: a
/// node that was down may be dialled again meanwhile (room is made by replies, which end the poll anyway).
pub(super) const DETACHED_PACE: Duration = Duration::from_millis(10);

impl Inner {
    /// Until when, at the latest, the driver must come out of its poll for the detached releases; `None` if none
    /// waits and no connection holds one whose reply is still to come (see "Driven to the end" in
    /// [`detached`](crate::net::detached)).
    pub(super) fn detached_due(&mut self) -> Option<Instant> {
        if self.detached.needs_driver() && self.detached.is_empty() {
            let held = self.conns.iter().any(|c| c.state.holds_detached());
            self.detached.settled(held);
        }
        let pace = later(Instant::now(), DETACHED_PACE);
        match self.detached.earliest() {
            Some(t) => Some(t.min(pace)),
            None => self.needs_driver().then_some(pace),
        }
    }
}

impl Shared {
    /// Keeps `bytes` (a release round's request, expecting `replies` replies), held for room on `node` by a round
    /// that can no longer wait for it, to be placed when the node has room; given up at once past the node's cap.
    pub(super) fn detach(
        &self,
        detached: &mut Detached,
        (node, bytes, replies): (usize, Vec<u8>, usize),
        now: Instant,
    ) {
        let Some(stats) = self.stats.get(node) else {
            return;
        };
        stats.detached(replies);
        let give_up_at = later(now, self.opts.hung_timeout);
        let cap = self.opts.max_in_flight.saturating_mul(2);
        if !detached.detach(node, bytes, replies, give_up_at, cap) {
            stats.given_up(replies);
        }
    }

    /// Places the detached releases that fit now, and gives up those past their bound (see the module doc).
    pub(super) fn place_detached(
        &self,
        (conns, slots, detached): (&mut [Conn], &mut Slots, &mut Detached),
        now: Instant,
        wake: &mut Vec<Wake>,
    ) {
        if detached.is_empty() {
            return;
        }
        detached.place(
            now,
            |node, bytes, replies| {
                let Some(conn) = conns.get_mut(node) else {
                    return Placed::Drop;
                };
                let mut out = Filing {
                    slots: &mut *slots,
                    wake: &mut *wake,
                };
                // Down and in its backoff: it may be back before the bound. Connecting, or its set-up not
                // answered yet: placed once the set-up went through, so that a node still loading its data set
                // (which fails the set-up, see "A node that is loading" in `state`) never refuses it unread.
                let ready = conn
                    .ensure(
                        &self.registry,
                        |g| token(node, g),
                        &self.opts,
                        now,
                        &mut out,
                    )
                    .is_ok()
                    && conn.state.is_set_up();
                if !ready || conn.state.room(replies, Priority::Release, &self.opts) != Room::Yes {
                    return Placed::Wait;
                }
                conn.state.queue(bytes, Waiter::Detached, replies, now);
                Placed::Queued
            },
            |node, replies| {
                if let Some(s) = self.stats.get(node) {
                    s.given_up(replies);
                }
            },
        );
    }

    /// Makes way for a request expecting `replies` replies, of `priority`, on `node`, whose connection `conn` can take
    /// bytes (its `ensure` succeeded: up, or connecting): the room the request has, as [`NodeState::room`] says,
    /// with the node's detached releases ahead of it. If some wait, they are queued first, and only if they and
    /// the request fit together (`Room::Yes`); else nothing is queued, and the caller refuses or holds its request
    /// as for a full node. So a request never overtakes a release detached before it was offered (see
    /// [`detached`](crate::net::detached), "In order per node"). The caller queues its request right after, in the
    /// same critical section: on a connection still connecting or setting up, the releases go out with it behind
    /// the set-up, whether or not its round still waits then (the background driver drives while a connection
    /// holds them: "Driven to the end" in [`detached`](crate::net::detached)).
    ///
    /// [`NodeState::room`]: crate::net::state::NodeState::room
    pub(super) fn make_way(
        &self,
        (conn, detached): (&mut Conn, &mut Detached),
        (node, replies, priority): (usize, usize, Priority),
        now: Instant,
    ) -> Room {
        let ahead = detached.waiting_on(node);
        if ahead == 0 {
            return conn.state.room(replies, priority, &self.opts);
        }
        let room = conn
            .state
            .room(ahead.saturating_add(replies), priority, &self.opts);
        if room == Room::Yes {
            let stats = self.stats.get(node);
            detached.take_node(
                node,
                now,
                |bytes, r| conn.state.queue(bytes, Waiter::Detached, r, now),
                |r| {
                    if let Some(s) = stats {
                        s.given_up(r);
                    }
                },
            );
        }
        room
    }

    /// Gives up every detached release (the fanout is dropped).
    pub(super) fn give_up_detached(&self, inner: &mut Inner) {
        inner.detached.clear(|node, replies| {
            if let Some(s) = self.stats.get(node) {
                s.given_up(replies);
            }
        });
    }
}
