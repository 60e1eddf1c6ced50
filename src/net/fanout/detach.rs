//! Releases held for room whose round ends before the node has room: detached from the round, kept by the fanout
//! (`Inner::detached`, bookkeeping in [`detached`](crate::net::detached), which states the invariants), and placed
//! on their node by whoever drives, as replies make room.
//!
//! - **Detached when** the round is dropped (it decided, or its caller went away) or, past its last deadline,
//!   counts a held request as overloaded (`Round::retry_held`): the round's outcome for that node is the same as
//!   before (no reply counted), and the request still goes.
//! - **Placed by the driver**: each turn, once the replies it read are filed (room made) and the hung connections
//!   dropped, before the turn's writes, so that detached releases take the room first and go out in that turn's
//!   batch. A node that is down is dialled again if its backoff allows (as a round's request would); a release
//!   is queued only on a connection that can take bytes now, within the release reserve.
//! - **Someone drives while any wait.** A round that ends while releases are detached starts the background
//!   driver if it was not ([`Fanout::background`](super::Fanout::background)) and wakes it if nobody drives;
//!   whoever puts the driver back hands it to the background driver while releases wait
//!   ([`Inner::successor`]); the background driver keeps driving while they wait ([`Inner::detached_due`]),
//!   looking at least every [`DETACHED_PACE`], and lingers, then gives the driver back, once none waits. A
//!   release queued is then like any request whose round ended: written in that turn's batch, its replies read
//!   and dropped by whoever drives next.

use std::time::{Duration, Instant};

use super::{Inner, Shared, token};
use crate::net::conn::Conn;
use crate::net::detached::{Detached, Placed, in_full};
use crate::net::slots::{Slots, Wake};
use crate::net::state::{Filing, Priority, Room, Waiter};
use crate::time::later;

/// How long the background driver may poll, at the most, while detached releases wait and nothing is read: a
/// node that was down may be dialled again meanwhile (room is made by replies, which end the poll anyway).
pub(super) const DETACHED_PACE: Duration = Duration::from_millis(10);

impl Inner {
    /// Until when, at the latest, the driver must come out of its poll for the detached releases; `None` if none
    /// waits.
    pub(super) fn detached_due(&self) -> Option<Instant> {
        self.detached
            .earliest()
            .map(|t| t.min(later(Instant::now(), DETACHED_PACE)))
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
        // Scripts in full: nobody will read a `NOSCRIPT` and send them again.
        let bytes = in_full(bytes, &self.opts.scripts);
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
                // Down and in its backoff: it may be back before the bound. Connecting: bytes queued now would
                // wait for a poll that nobody may run once none is detached; placed once it is open.
                let ready = conn
                    .ensure(
                        &self.registry,
                        |g| token(node, g),
                        &self.opts,
                        now,
                        &mut out,
                    )
                    .is_ok()
                    && conn.state.is_open();
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

    /// Gives up every detached release (the fanout is dropped).
    pub(super) fn give_up_detached(&self, inner: &mut Inner) {
        inner.detached.clear(|node, replies| {
            if let Some(s) = self.stats.get(node) {
                s.given_up(replies);
            }
        });
    }
}
