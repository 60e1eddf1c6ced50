//! [`Round`]: one request/reply exchange with some or all nodes: sending (queued, written at once on an idle
//! node, held for room in a release round, or refused with its outcome filed), then waiting for outcomes, driving
//! the poll or sleeping while another thread drives (see the [parent](super)'s invariants).

use std::sync::MutexGuard;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use super::driver::Driver;
use super::{Fanout, Inner, NodeSet, unpark_all};
use crate::net::conn::WriteJob;
use crate::net::machine::RoundState;
use crate::net::slots::{CommandId, Reply, Wake};
use crate::net::state::Priority;
use crate::sync::lock;

impl Fanout {
    /// A round of `priority` (see [`Fanout::round`] and [`Fanout::release_round`]).
    pub(super) fn open(&self, deadline: Instant, priority: Priority) -> Round<'_> {
        let state = RoundState::open(&mut lock(&self.shared.inner).m, deadline, priority);
        Round {
            fanout: self,
            state,
            driver: None,
            need: 1,
        }
    }
}

thread_local! {
    /// A sender's write jobs, reused from round to round.
    static JOBS: std::cell::RefCell<Vec<WriteJob>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One request/reply exchange with some or all nodes, bounded by a deadline. Dropping it abandons the replies still
/// to come: they are read and dropped when they arrive. A release round's requests still held for room go on
/// their own (see [`Fanout::release_round`]).
#[derive(Debug)]
#[must_use = "a round does nothing until requests are sent and replies collected with next()"]
pub struct Round<'a> {
    pub(super) fanout: &'a Fanout,
    /// Its slot, deadlines, priority and held requests: the machine's side of the round.
    pub(super) state: RoundState,
    /// The poll, while this round's thread drives.
    pub(super) driver: Option<Box<Driver>>,
    /// Outcomes worth being woken for (see [`Round::need`]).
    pub(super) need: usize,
}

impl<'a> Round<'a> {
    /// The instant by which every outcome of this round is known.
    pub fn deadline(&self) -> Instant {
        self.state.deadline
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
    ///
    /// [`NodeError::Timeout`]: crate::net::NodeError::Timeout
    pub fn patient_until(&mut self, hard: Instant) {
        self.state.patient_until(hard, Instant::now());
    }

    /// Ends the round by `at` if that is sooner than its deadline: an outcome not filed by then is
    /// [`NodeError::Timeout`], as at any deadline, and a patient round waits no longer either. For a caller that
    /// has its verdict and reads on a little for the outcomes still owed (they tell what its requests did where),
    /// without waiting a whole round for a node that does not answer.
    ///
    /// [`NodeError::Timeout`]: crate::net::NodeError::Timeout
    pub fn cut_short(&mut self, at: Instant) {
        let mut inner = lock(&self.fanout.shared.inner);
        self.state.cut_short(&mut inner.m, at);
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
        let mut writes = Vec::new();
        let mut wake = Vec::new();
        let mut full = Vec::new();
        let mut inner = lock(&f.inner);
        let mut now = Instant::now();
        if inner.m.has_unread(now) {
            // Replies of ended rounds wait unread (nobody polled since), perhaps with the server's close of the
            // connection behind them (`timeout`, a restart): read them first, so that this round's requests go on
            // a connection dialled again rather than into one the server closed.
            if let Some(mut d) = inner.driver.take() {
                inner = f.turn(inner, &mut d, now);
                inner.driver = Some(d);
                wake.extend(inner.successor().map(Wake::Thread));
                now = Instant::now();
            }
        }
        let out = (&mut writes, &mut wake);
        let mut sent = self
            .state
            .offer_each(&mut inner.m, requests, now, out, &mut full);
        if !full.is_empty() {
            // A full node may have answered already, its replies unread because nobody polls: read them first.
            if let Some(mut d) = inner.driver.take() {
                inner = f.turn(inner, &mut d, now);
                inner.driver = Some(d);
                wake.extend(inner.successor().map(Wake::Thread));
            }
            let out = (&mut writes, &mut wake);
            sent = sent.union(self.state.offer_again(&mut inner.m, full, now, out));
        }
        drop(inner);
        unpark_all(&mut wake);
        jobs.extend(writes.into_iter().map(WriteJob::new));
        f.run_writes(&mut jobs);
        JOBS.with(|j| *j.borrow_mut() = jobs);
        sent
    }

    /// The id the next reply expected from `node` will get: its place among every reply this round expected from
    /// the node (see [`CommandId`]). A caller that sends a node several requests notes it before each, and looks
    /// each outcome up by the id it comes with.
    pub fn next_seq(&self, node: usize) -> u32 {
        lock(&self.fanout.shared.inner)
            .m
            .slots
            .next_seq(self.state.slot, node)
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
            if self.state.holds() {
                inner = self.retry_held(inner);
            }
            if let Some(arrival) = inner.m.slots.take(self.state.slot) {
                break Some(arrival);
            }
            if inner.m.slots.settled(self.state.slot) {
                break None;
            }
            if self.state.time_out_due(&mut inner.m) {
                continue;
            }
            if self.driver.is_none() {
                self.driver = inner.driver.take();
            }
            match self.driver.take() {
                Some(mut d) => {
                    inner = f.turn(inner, &mut d, self.state.deadline);
                    self.driver = Some(d);
                }
                None if self.stranded(&inner) => self.state.time_out_all(&mut inner.m),
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
            && Instant::now() >= self.state.deadline
    }

    /// Waits for another thread's poll to file an outcome, to hand this round the poll, or for the deadline.
    fn sleep(&self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        let now = Instant::now();
        inner.m.slots.need(self.state.slot, self.need);
        inner.m.slots.sleep(self.state.slot, thread::current());
        // The driver must come out of its poll by this round's deadline; a lingering background driver, at once
        // (it gives the driver back after that turn).
        inner.wanted |= inner.lingering;
        let poke = inner.lingering
            || inner
                .polling_until
                .is_some_and(|until| until > self.state.deadline);
        drop(inner);
        if poke {
            let _ = self.fanout.shared.waker.wake();
        }
        // Past the deadline, the turn that reads the sockets wakes us; a round waiting for room looks again soon.
        // Whoever wakes a sleeper takes it out of its slot first: while it is still there, an unpark was not for
        // this round (a token left over from an earlier wake-up of this thread), and it sleeps on.
        let deadline = self.state.deadline;
        let mut now = now;
        loop {
            let wait = match now < deadline && !self.state.holds() {
                true => deadline - now,
                false => Duration::from_millis(1),
            };
            thread::park_timeout(wait);
            let mut inner = lock(&self.fanout.shared.inner);
            now = Instant::now();
            if now < deadline && !self.state.holds() && inner.m.slots.asleep(self.state.slot) {
                drop(inner);
                continue;
            }
            inner.m.slots.awake(self.state.slot);
            return inner;
        }
    }

    /// Queues held requests on nodes that now have room; past the deadline (a patient round's last one), counts
    /// the rest as overloaded (see [`RoundState::retry_held`]), then writes what it queued without the lock.
    pub(super) fn retry_held(&mut self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        let f = &*self.fanout.shared;
        let (mut writes, mut wake) = (Vec::new(), Vec::new());
        let now = Instant::now();
        if !self
            .state
            .retry_held(&mut inner.m, now, &mut writes, &mut wake)
        {
            return inner;
        }
        drop(inner);
        unpark_all(&mut wake);
        let mut jobs = writes.into_iter().map(WriteJob::new).collect();
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
        // Requests still held for room go on their own (`machine/detach.rs`): a release must reach every reachable
        // node, whether or not anybody waits for its reply.
        let waiter = self.state.close(&mut inner.m, Instant::now());
        // Detached now, or earlier by this round's `retry_held` or another round; or queued by `make_way` on a
        // connection that may need a turn to send them (see "Driven to the end" in `detached`); or this round's
        // requests (or others') queued and not written yet (`Machine::needs_driver`).
        let detached = inner.m.needs_driver();
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
