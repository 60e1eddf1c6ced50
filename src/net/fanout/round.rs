//! [`Round`]: one request/reply exchange with some or all nodes: sending (queued, written at once on an idle
//! node, held for room in a release round, or refused with its outcome filed), then waiting for outcomes, driving
//! the poll or sleeping while another thread drives (see the [parent](super)'s invariants).

use std::sync::MutexGuard;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use super::driver::Driver;
use super::{Fanout, Inner, NodeSet, token, unpark_all};
use crate::net::conn::WriteJob;
use crate::net::error::NodeError;
use crate::net::slots::{CommandId, Reply, SlotRef, Wake};
use crate::net::state::{Filing, Priority, Room, Waiter};
use crate::sync::lock;

impl Fanout {
    /// A round of `priority` (see [`Fanout::round`] and [`Fanout::release_round`]).
    pub(super) fn open(&self, deadline: Instant, priority: Priority) -> Round<'_> {
        let slot = lock(&self.shared.inner)
            .slots
            .open(self.shared.addrs.len(), deadline);
        Round {
            fanout: self,
            slot,
            deadline,
            hard: deadline,
            patience: Duration::ZERO,
            priority,
            driver: None,
            held: None,
            need: 1,
        }
    }
}

thread_local! {
    /// A sender's write jobs, reused from round to round.
    static JOBS: std::cell::RefCell<Vec<WriteJob>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What became of a request offered to one node.
enum Offer {
    /// Queued, or held for room.
    Sent,
    /// Not sent: down, failed, or overloaded; the outcome is filed.
    Refused,
    /// The node has no room for an ordinary request right now.
    Full,
}

/// Requests of a release round waiting for room on full nodes, in the order they were sent: each with its own
/// bytes and reply count (a round may hold its first request on one node and a resend on another).
#[derive(Debug, Default)]
pub(super) struct Held {
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

/// One request/reply exchange with some or all nodes, bounded by a deadline. Dropping it abandons the replies still
/// to come: they are read and dropped when they arrive. A release round's requests still held for room go on
/// their own (see [`Fanout::release_round`]).
#[derive(Debug)]
#[must_use = "a round does nothing until requests are sent and replies collected with next()"]
pub struct Round<'a> {
    pub(super) fanout: &'a Fanout,
    pub(super) slot: SlotRef,
    pub(super) deadline: Instant,
    /// How far a patient round may move its deadline ([`Round::patient_until`]); `deadline` otherwise.
    pub(super) hard: Instant,
    /// A patient round's measure of life: a node silent for this long (the round's first length) is not waited for.
    pub(super) patience: Duration,
    pub(super) priority: Priority,
    /// The poll, while this round's thread drives.
    pub(super) driver: Option<Box<Driver>>,
    pub(super) held: Option<Box<Held>>,
    /// Outcomes worth being woken for (see [`Round::need`]).
    pub(super) need: usize,
}

impl<'a> Round<'a> {
    /// The instant by which every outcome of this round is known.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Makes this round **patient**: past its deadline, a node that is still answering earlier requests (it showed
    /// a sign of life, bytes read, within the round's first length, the `patience`) is waited for, up to `hard`;
    /// only a node silent for that long counts as [`NodeError::Timeout`] then. Call it right after opening the
    /// round; `hard` earlier than the deadline changes nothing.
    ///
    /// # Why
    ///
    /// A deadline is there so that a down or hung node costs a round little (the Redlock spec's "small timeout").
    /// Under overload a node is neither: its replies come, behind thousands of requests of the same client's
    /// other rounds, and a request deeper in that queue than the node can serve by the deadline would time out
    /// although the node answers — an error (and a retry, more load) caused by the client's own queue. A patient
    /// round tells the two apart by the node's own sign of life:
    ///
    /// - a node down, refused, or hung (no byte for `patience`, e.g. `SIGSTOP`) times out at the first deadline,
    ///   as in any round; one that hangs just after answering costs at most one `patience` more;
    /// - a node answering slowly is waited for while it keeps answering, and never past `hard`.
    ///
    /// Timeouts still come last (a node is judged right after a turn that read the sockets) and a node's requests
    /// still time out all together. The caller chooses `hard` so that waiting longer is safe and useful: an
    /// acquisition no later than its lease's validity (a vote after it counts for nothing anyway), a release a few
    /// round lengths; rounds whose length other checks rely on (a guard's renewal) are not made patient.
    pub fn patient_until(&mut self, hard: Instant) {
        if hard > self.deadline {
            self.patience = self.deadline.saturating_duration_since(Instant::now());
            self.hard = hard;
        }
    }

    /// Past the deadline (a turn has read the sockets at or after it): files the timeouts due, one node at a
    /// time, or, for a patient round, those of every node silent for `patience` while moving the deadline for
    /// the others. Returns whether it filed or moved anything (the caller looks again).
    pub(super) fn time_out_due(&mut self, inner: &mut Inner) -> bool {
        let Some(read_at) = inner.last_read.filter(|t| *t >= self.deadline) else {
            return false;
        };
        let stats = &self.fanout.shared.stats;
        if self.hard > self.deadline {
            // Nodes that owe an outcome, and until when each one's last sign of life keeps it awaited.
            let owing: Vec<(usize, Option<Instant>)> = {
                let Inner { slots, conns, .. } = &mut *inner;
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
                        let n = inner.slots.time_out(self.slot, node).unwrap_or(0);
                        (0..n).for_each(|_| stats[node].timeout());
                    }
                    self.deadline = until;
                    inner.slots.extend(self.slot, until);
                    return true;
                }
                // Nobody still answers (or `hard` has come): an ordinary round from here on.
                None => self.hard = self.deadline,
            }
        }
        // All of a node's requests at once: a late reply must never be counted for a later command.
        match inner.slots.time_out_node(self.slot) {
            Some((node, n)) => {
                (0..n).for_each(|_| stats[node].timeout());
                true
            }
            None => false,
        }
    }

    /// Sends `request` (encoded commands expecting `replies` replies in all) to every node: one write per node,
    /// shared with other callers' requests to the same node. Returns the nodes it was queued for.
    pub fn send_all(&mut self, request: &[u8], replies: usize) -> NodeSet {
        self.send_where(|_| true, request, replies)
    }

    /// Sends `request` (encoded commands expecting `replies` replies in all) to node `node` only.
    pub fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet {
        self.send_where(|n| n == node, request, replies)
    }

    /// Sends `request` to the nodes in `nodes`. Each node's outcome comes from [`next`](Round::next): a reply, or
    /// at once the reason it was not sent (down, [`NodeError::Overloaded`]). Returns the nodes the request was
    /// queued for (or, in a release round, held for room).
    pub fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        self.send_where(|n| nodes.contains(n), request, replies)
    }

    /// Sends several requests at once, each `(node, request, replies)` as [`send`](Round::send) would, in this
    /// order (two for one node keep it): one lock and one pass of writes for all, where a call each would take
    /// the fanout's lock and write once per call. Returns the nodes at least one was queued for. For a caller
    /// that sends different bytes to different nodes in one step (the cluster routing layer).
    pub fn send_each(&mut self, requests: &[(usize, &[u8], usize)]) -> NodeSet {
        self.send_items(requests.iter().copied())
    }

    fn send_where(
        &mut self,
        include: impl Fn(usize) -> bool,
        request: &[u8],
        replies: usize,
    ) -> NodeSet {
        let nodes = self.fanout.shared.addrs.len();
        self.send_items(
            (0..nodes)
                .filter(|&n| include(n))
                .map(|n| (n, request, replies)),
        )
    }

    fn send_items<'r>(
        &mut self,
        requests: impl Iterator<Item = (usize, &'r [u8], usize)>,
    ) -> NodeSet {
        let f = &*self.fanout.shared;
        let mut jobs = JOBS.with(|j| std::mem::take(&mut *j.borrow_mut()));
        let mut wake = Vec::new();
        let mut sent = NodeSet::EMPTY;
        let mut full: Vec<(usize, &[u8], u32, usize)> = Vec::new();
        let mut inner = lock(&f.inner);
        let now = Instant::now();
        for (node, request, replies) in requests {
            if node >= f.addrs.len() {
                continue;
            }
            // Its ids, whatever becomes of it (queued, held, refused).
            let first = inner.slots.expect(self.slot, node, replies);
            // Behind a request that found its node full, the node's later ones wait too: a node's requests of a
            // round are queued in the order of their ids (see `slots`).
            if full.iter().any(|&(n, ..)| n == node) {
                full.push((node, request, first, replies));
                continue;
            }
            let ask = (first, replies);
            match self.offer(&mut inner, node, request, ask, now, &mut jobs, &mut wake) {
                Offer::Sent => sent.insert(node),
                Offer::Full => full.push((node, request, first, replies)),
                Offer::Refused => {}
            }
        }
        if !full.is_empty() {
            // A full node may have answered already, its replies unread because nobody polls: read them first.
            if let Some(mut d) = inner.driver.take() {
                inner = f.turn(inner, &mut d, now);
                inner.driver = Some(d);
                wake.extend(inner.successor().map(Wake::Thread));
            }
            for (node, request, first, replies) in full {
                let ask = (first, replies);
                match self.offer(&mut inner, node, request, ask, now, &mut jobs, &mut wake) {
                    Offer::Sent => sent.insert(node),
                    Offer::Refused => {}
                    Offer::Full => {
                        f.stats[node].refused(replies);
                        let r = Err(NodeError::Overloaded);
                        wake.extend(inner.slots.refuse(self.slot, node, first, replies, r));
                    }
                }
            }
        }
        drop(inner);
        unpark_all(&mut wake);
        f.run_writes(&mut jobs);
        JOBS.with(|j| *j.borrow_mut() = jobs);
        sent
    }

    /// Offers the request (its replies' ids: `replies` from `first` on, already expected) to one node: queues
    /// it, holds it for room (a release), or files why it was not sent. A node without room for an ordinary
    /// request is reported `Full` and left to the caller.
    #[allow(clippy::too_many_arguments)]
    fn offer(
        &mut self,
        inner: &mut Inner,
        node: usize,
        request: &[u8],
        (first, replies): (u32, usize),
        now: Instant,
        jobs: &mut Vec<WriteJob>,
        wake: &mut Vec<Wake>,
    ) -> Offer {
        let f = &*self.fanout.shared;
        let Inner {
            conns,
            slots,
            detached,
            ..
        } = inner;
        let Some(conn) = conns.get_mut(node) else {
            return Offer::Refused;
        };
        // Behind a request of this round still held for room on the node: held too, whatever the node's state
        // (`retry_held` judges them in order), so that the node's requests go on the wire in the order of their
        // ids (see `slots`).
        if self.held.as_ref().is_some_and(|h| h.holds(node)) {
            self.hold(node, request, first, replies);
            return Offer::Sent;
        }
        let mut out = Filing { slots, wake };
        let refused = match conn.ensure(&f.registry, |g| token(node, g), &f.opts, now, &mut out) {
            Err(e) => e,
            // Behind the node's detached releases, if any (queued first here, or this request waits too).
            Ok(()) => match f.make_way((conn, detached), (node, replies, self.priority), now) {
                Room::Yes => {
                    // Written now on an idle node, or by a caller that will not wait for replies (nobody might
                    // poll); else flushed with the next batch when the node's replies come (see `state`).
                    let idle = !conn.state.busy();
                    conn.state
                        .queue(request, Waiter::Round(self.slot, first), replies, now);
                    out.slots.queued(self.slot, node, first, replies);
                    if idle || self.deadline <= now {
                        jobs.extend(conn.take_write());
                    }
                    return Offer::Sent;
                }
                // Offered once more by the caller, or refused then.
                Room::No => return Offer::Full,
                Room::Wait => {
                    self.hold(node, request, first, replies);
                    return Offer::Sent;
                }
            },
        };
        let r = Err(refused);
        out.wake
            .extend(out.slots.refuse(self.slot, node, first, replies, r));
        Offer::Refused
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

    /// The id the next reply expected from `node` will get: its place among every reply this round expected from
    /// the node (see [`CommandId`]). A caller that sends a node several requests notes it before each, and looks
    /// each outcome up by the id it comes with.
    pub fn next_seq(&self, node: usize) -> u32 {
        lock(&self.fanout.shared.inner)
            .slots
            .next_seq(self.slot, node)
    }

    /// Sets how many outcomes are worth waiting for before this round's thread is woken, while another thread
    /// polls (default 1): a caller that cannot decide on fewer (a majority of votes, say) then sleeps through
    /// the first replies instead of waking for each. [`next`](Round::next) still returns outcomes one at a time,
    /// and whatever is there when it is called.
    pub fn need(&mut self, outcomes: usize) {
        self.need = outcomes.max(1);
    }

    /// The next outcome as outcomes are filed, with the id of the command it answers (`id.node`, and its place
    /// among the replies expected from that node): callers look it up by id, never by the order of arrival.
    /// After the deadline, each request still unanswered comes back as [`NodeError::Timeout`], once the replies
    /// that had arrived by the deadline have been read. `None` once every request of the round has its outcome.
    ///
    /// Blocks at most until shortly after the deadline. A round that polls for everyone keeps doing so between
    /// calls, until it ends: do little between them, and do not wait on another round of the same fanout from
    /// this thread meanwhile (end or drop this one first). Such a round can read no reply until the first is
    /// called again, which cannot happen while this thread waits: it sleeps to its deadline, then reports every
    /// request still without an outcome as [`NodeError::Timeout`] without reading the sockets (a reply that had
    /// arrived is dropped when it is read later). Its requests may have reached their nodes.
    #[allow(clippy::should_implement_trait)] // blocking, with a deadline: not an Iterator
    pub fn next(&mut self) -> Option<(CommandId, Reply)> {
        let f = &*self.fanout.shared;
        let mut inner = lock(&f.inner);
        let outcome = loop {
            if self.held.is_some() {
                inner = self.retry_held(inner);
            }
            if let Some(arrival) = inner.slots.take(self.slot) {
                break Some(arrival);
            }
            if inner.slots.settled(self.slot) {
                break None;
            }
            if self.time_out_due(&mut inner) {
                continue;
            }
            if self.driver.is_none() {
                self.driver = inner.driver.take();
            }
            match self.driver.take() {
                Some(mut d) => {
                    inner = f.turn(inner, &mut d, self.deadline);
                    self.driver = Some(d);
                }
                None if self.stranded(&inner) => self.time_out_stranded(&mut inner),
                None => inner = self.sleep(inner),
            }
        };
        // A round that drives keeps the poll while it goes on: giving it up between two outcomes would cost a
        // hand-off each time. It gives it up when it ends (here, or when dropped). A round that does not drive
        // hands a free poll on to a sleeper, if any (it may have been woken to take it).
        if outcome.is_none() || self.driver.is_none() {
            let successor = self.leave(&mut inner);
            drop(inner);
            if let Some(t) = successor {
                t.unpark();
            }
        } else {
            inner.kept_by = Some(thread::current().id());
        }
        outcome
    }

    /// Whether this round, past its deadline, waits for a poll that only another round of this very thread
    /// could run: that round kept the driver when its `next()` returned, and it cannot be called while this
    /// thread waits here. (If it was moved to another thread since, that thread has had until this deadline to
    /// call it: timing out then is what a turn would have done.)
    fn stranded(&self, inner: &Inner) -> bool {
        inner.driver.is_none()
            && inner.kept_by == Some(thread::current().id())
            && Instant::now() >= self.deadline
    }

    /// Files every outcome still due as [`NodeError::Timeout`], for a [`stranded`](Round::stranded) round: no
    /// turn will read the sockets for it, so neither the replies that may have arrived nor a patient round's
    /// signs of life can be known.
    fn time_out_stranded(&mut self, inner: &mut Inner) {
        self.hard = self.deadline;
        let stats = &self.fanout.shared.stats;
        while let Some((node, n)) = inner.slots.time_out_node(self.slot) {
            (0..n).for_each(|_| stats[node].timeout());
        }
    }

    /// Waits for another thread's poll to file an outcome, to hand this round the poll, or for the deadline.
    fn sleep(&self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        let now = Instant::now();
        inner.slots.need(self.slot, self.need);
        inner.slots.sleep(self.slot, thread::current());
        // The driver must come out of its poll by this round's deadline; a lingering background driver, at once
        // (it gives the driver back after that turn).
        inner.wanted |= inner.lingering;
        let poke = inner.lingering
            || inner
                .polling_until
                .is_some_and(|until| until > self.deadline);
        drop(inner);
        if poke {
            let _ = self.fanout.shared.waker.wake();
        }
        // Past the deadline, the turn that reads the sockets wakes us; a round waiting for room looks again soon.
        let wait = match now < self.deadline && self.held.is_none() {
            true => self.deadline - now,
            false => Duration::from_millis(1),
        };
        thread::park_timeout(wait);
        let mut inner = lock(&self.fanout.shared.inner);
        inner.slots.awake(self.slot);
        inner
    }

    /// Queues held requests on nodes that now have room; past the deadline (a patient round's last one), counts
    /// the rest as overloaded.
    pub(super) fn retry_held(&mut self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        let Some(mut held) = self.held.take() else {
            return inner;
        };
        let f = &*self.fanout.shared;
        let now = Instant::now();
        let mut jobs = Vec::new();
        let mut wake = Vec::new();
        let Inner {
            conns,
            slots,
            detached,
            ..
        } = &mut *inner;
        // Nodes with a request still held in this pass: their later requests wait behind it (a node's requests
        // go on the wire in the order of their ids).
        let mut blocked: Vec<usize> = Vec::new();
        held.requests.retain_mut(|h| {
            let Some(conn) = conns.get_mut(h.node) else {
                return false;
            };
            if blocked.contains(&h.node) {
                return true;
            }
            // The connection the request was held for may have been dropped meanwhile (a reset, a restart, a
            // hang): its queue emptied, so there is room, but a request queued on a connection that is down has
            // no bytes on any wire, and the next connection would hand it its first reply (every later reply
            // shifted by one, each counted for the id at the head of the queue). As `offer` does: dial anew if
            // the backoff allows, else the node's error is the request's outcome.
            let mut out = Filing {
                slots,
                wake: &mut wake,
            };
            if let Err(e) = conn.ensure(&f.registry, |g| token(h.node, g), &f.opts, now, &mut out) {
                wake.extend(slots.refuse(self.slot, h.node, h.first, h.replies, Err(e)));
                return false;
            }
            let room = f.make_way(
                (conn, detached),
                (h.node, h.replies, Priority::Release),
                now,
            );
            if room == Room::Yes {
                conn.state.queue(
                    &h.request,
                    Waiter::Round(self.slot, h.first),
                    h.replies,
                    now,
                );
                slots.queued(self.slot, h.node, h.first, h.replies);
                jobs.extend(conn.take_write());
                return false;
            }
            // A patient round may still move its deadline for a node that answers (`time_out_due`): its held
            // requests wait for room until the round can no longer be extended. Then the round counts the node
            // as overloaded, and the release goes on its own once the node has room (`detach.rs`).
            if now >= self.deadline && self.hard <= self.deadline {
                f.stats[h.node].refused(h.replies);
                let r = Err(NodeError::Overloaded);
                wake.extend(slots.refuse(self.slot, h.node, h.first, h.replies, r));
                let bytes = std::mem::take(&mut h.request);
                f.detach(detached, (h.node, bytes, h.replies), now);
                return false;
            }
            blocked.push(h.node);
            true
        });
        if !held.requests.is_empty() {
            self.held = Some(held);
        }
        if jobs.is_empty() && wake.is_empty() {
            return inner;
        }
        drop(inner);
        unpark_all(&mut wake);
        f.run_writes(&mut jobs);
        lock(&f.inner)
    }

    /// Puts the poll back if this round had it, and returns a sleeping round to wake if nobody drives now.
    fn leave(&mut self, inner: &mut Inner) -> Option<Thread> {
        if let Some(d) = self.driver.take() {
            inner.driver = Some(d);
            inner.kept_by = None;
        }
        match inner.driver.is_some() {
            true => inner.successor(),
            false => None,
        }
    }
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        let f = &*self.fanout.shared;
        let mut inner = lock(&f.inner);
        let waiter = inner.slots.close(self.slot);
        // Requests still held for room go on their own (`detach.rs`): a release must reach every reachable node,
        // whether or not anybody waits for its reply.
        if let Some(held) = self.held.take() {
            let now = Instant::now();
            for h in held.requests {
                f.detach(&mut inner.detached, (h.node, h.request, h.replies), now);
            }
        }
        // Detached now, or earlier by this round's `retry_held` or another round; or queued by `make_way` on a
        // connection that may need a turn to send them (see "Driven to the end" in `detached`); or this round's
        // requests (or others') queued and not written yet (`Inner::needs_driver`).
        let detached = inner.needs_driver();
        let successor = self.leave(&mut inner);
        let wake_background = detached && successor.is_none() && inner.driver.is_some();
        drop(inner);
        // A task's waker is dropped here, never woken (see the parent's "Who wakes whom").
        drop(waiter);
        if let Some(t) = successor {
            t.unpark();
        }
        // Someone must drive while detached releases wait: the background driver, started now if it was not
        // (whoever drives hands it the driver when done, `Inner::successor`).
        if detached {
            match self.fanout.background() {
                Some(t) if wake_background => t.unpark(),
                _ => {}
            }
        }
    }
}
