//! [`Slots`]: the mailboxes of the rounds in progress, as plain bookkeeping (no sockets, no clock of its own).
//!
//! A round owns one slot while it runs. Requests it sends are *expected* per node; each outcome (a reply, a
//! connection failure, a timeout) is *filed* once, and the round takes it from its arrivals. When the round ends,
//! its slot is closed: the generation moves on, so outcomes of its requests that come later (a late reply, read
//! and dropped) are recognised as stale and ignored, and the slot is reused by the next round.
//!
//! # Invariant: a node's outcomes come out in the order its requests were sent
//!
//! Callers match outcomes to commands by position (the i-th outcome of a node is for the i-th command sent to
//! it: a batch's names, a watchdog round's guards, `GET` then `PTTL`), so the slot keeps that order exact.
//! A slot knows no request by name, only how many of each node's are still awaited; the order holds because:
//!
//! - **The wire is a FIFO.** A connection files exactly one outcome per queued request, in queue order (a reply,
//!   or the error that broke the connection), so the n-th outcome filed for a node is for its n-th request.
//! - **A timeout takes all of a node's awaited requests at once** ([`Slots::time_out_node`]): replies on a
//!   connection come in order, so once one request of the round has timed out on a node, every later one has too.
//!   Their replies may still come (a node that was only slow): they are counted as *stale* and dropped as they
//!   are filed, so a late reply is never handed out in the position of the next command. (The bug this rule
//!   fixed: one timeout per call, so the first command's late reply was filed under the count left for the
//!   second, and a batch counted a node's `OK` for `r0` as its vote for `r1`.)
//! - **An outcome decided before the wire's** (a request refused for lack of room, or because its node is
//!   down, [`Slots::refuse`]) takes its own place in the node's order: it waits behind the node's requests that
//!   were on the wire when it was refused (it remembers how many outcomes are *ahead* of it), and is handed out
//!   right after the last of them, before any request accepted later. (It once waited until the node had no
//!   request of the round on the wire at all: a request accepted after the refusal, a routed round's resend or a
//!   smaller request that fitted where a larger one did not, was handed out first, its `OK` in the refused
//!   command's place: the read-only review of #27, finding 1.)
//!
//! A release round that holds a request for room on a node holds the round's later requests to that node behind
//! it, each with its own bytes, whatever the node's state (`fanout`'s `offer` and `retry_held`), so the order in
//! which requests are expected is the order in which they are queued. When a held request is refused (past the
//! deadline, or its node down), the ones still held behind it are not ahead of it: `refuse` is told how many
//! outcomes they expect (`behind`), and the refusal comes before them whether they go on the wire or are refused
//! in turn (`tests/net.rs`: 3 on the wire, 2 refused at the deadline, 1 that fitted after them).

use std::collections::{BTreeSet, VecDeque};
use std::task::Waker;
use std::thread::Thread;
use std::time::Instant;

use super::error::NodeError;
use crate::resp::Value;

/// One node's answer to one request: its reply (which may be an error reply), or why there is none.
pub type Reply = Result<Value, NodeError>;

/// Who waits for a round's outcomes: a thread parked in [`Round::next`](super::Round::next), or a task whose
/// future returned `Pending` from [`Round::poll_next`](super::Round::poll_next). Woken the same way, always after
/// the fanout's lock is let go (a waker may run executor code).
#[derive(Debug)]
pub enum Wake {
    /// Unparked.
    Thread(Thread),
    /// Woken: its executor polls the round's future again.
    Task(Waker),
}

impl Wake {
    /// Unparks the thread or wakes the task.
    pub fn wake(self) {
        match self {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(w) => w.wake(),
        }
    }
}

/// What [`Slots::successor`] found for a driver that was just put back.
#[derive(Debug)]
pub enum Successor {
    /// A sleeping thread (taken from its slot): unpark it, it takes the poll.
    Thread(Thread),
    /// No thread sleeps, but tasks wait: the fanout's background driver must take the poll.
    Tasks,
    /// Nobody waits.
    Nobody,
}

/// Names one round's slot: its index and the generation it had when the round opened it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRef {
    pub(crate) index: usize,
    pub(crate) generation: u64,
}

/// The mailbox of one round.
#[derive(Debug)]
struct Slot {
    /// Its place in [`Slots::slots`] (for the waiters' index).
    index: usize,
    /// Bumped when the round ends.
    generation: u64,
    /// Outcomes filed and not yet taken, in filing order.
    arrivals: VecDeque<(usize, Reply)>,
    /// Per node: requests whose outcome has not been filed yet (from the wire, or held back for room).
    pending: Vec<u32>,
    /// Per node: requests reported timed out whose outcome has not come from the wire yet; the next `stale`
    /// outcomes filed for the node are theirs, and are dropped.
    stale: Vec<u32>,
    /// Outcomes decided before the node's earlier requests were answered, handed out after them, in the order
    /// they were decided. Rare (a node out of room in the middle of a round), so empty and unallocated almost
    /// always.
    deferred: Vec<Deferred>,
    /// Outcomes not taken yet: the sum of `pending` and of the `deferred` counts.
    outstanding: usize,
    /// The round's deadline; every outcome is known by then.
    deadline: Instant,
    /// The round's thread while it sleeps, or its task while its future is pending, waiting for another
    /// thread's poll to file its outcomes.
    waiter: Option<Wake>,
    /// When the waiter must be woken even if nothing was filed: the deadline, or sooner for a task whose round
    /// holds requests for room (it looks again after each millisecond, as a sleeping thread does).
    wake_at: Instant,
    /// How many outcomes must be waiting before the sleeping thread is worth waking (at least 1): a round that
    /// cannot decide on fewer than 3 votes is woken once, not once per reply.
    need: usize,
}

/// `count` outcomes of one node decided before the wire's, to be handed out after the `ahead` outcomes of the
/// node's requests that were on the wire when they were decided.
#[derive(Debug)]
struct Deferred {
    node: usize,
    reply: Reply,
    count: u32,
    ahead: u32,
}

impl Slot {
    /// Hands out an outcome of `node` from the wire (or its timeout), then the deferred outcomes that came right
    /// after it.
    fn arrive(&mut self, node: usize, reply: Reply) {
        self.arrivals.push_back((node, reply));
        if self.deferred.is_empty() {
            return;
        }
        for d in self.deferred.iter_mut().filter(|d| d.node == node) {
            d.ahead = d.ahead.saturating_sub(1);
        }
        self.release_deferred(node);
    }

    /// Hands out `node`'s deferred outcomes that no outcome from the wire is ahead of any more, in the order they
    /// were decided (a later one never has fewer ahead of it). Invariant: `ahead` is at most the node's `pending`
    /// (both count down together); all are handed out once nothing is pending, whatever they count, so that no
    /// outcome can wait for a reply that will never be expected.
    fn release_deferred(&mut self, node: usize) {
        let wire_empty = self.pending.get(node).is_none_or(|&p| p == 0);
        let mut i = 0;
        while i < self.deferred.len() {
            let d = &self.deferred[i];
            if d.node != node {
                i += 1;
                continue;
            }
            if d.ahead > 0 && !wire_empty {
                return;
            }
            let d = self.deferred.remove(i);
            self.outstanding -= d.count as usize;
            for _ in 0..d.count {
                self.arrivals.push_back((d.node, d.reply.clone()));
            }
        }
    }

    /// The waiter, if the outcomes waiting are worth waking it for.
    fn wake(&mut self, waiting: &mut Waiting) -> Option<Wake> {
        if self.arrivals.len() >= self.need || self.outstanding == 0 {
            self.take_waiter(waiting)
        } else {
            None
        }
    }

    /// Takes the waiter out of the slot and of the index.
    fn take_waiter(&mut self, waiting: &mut Waiting) -> Option<Wake> {
        let w = self.waiter.take();
        waiting.remove(w.as_ref(), (self.wake_at, self.index));
        w
    }

    /// Puts `w` in the slot, to be woken at `wake_at` at the latest; returns the waiter it replaces.
    fn put_waiter(&mut self, waiting: &mut Waiting, w: Wake, wake_at: Instant) -> Option<Wake> {
        let old = self.take_waiter(waiting);
        self.wake_at = wake_at;
        waiting.insert(&w, (wake_at, self.index));
        self.waiter = Some(w);
        old
    }
}

/// The slots that have a waiter, by the instant it must be woken at, threads apart from tasks: so that the
/// questions every poll turn asks (who is due? when is the next one due? does a task wait? which thread sleeps?)
/// cost a look at the front of a set, not a scan of every open round (10,000 tasks waiting made every turn scan
/// 10,000 slots three times). Invariant: a slot is in one of the sets, under `(wake_at, index)`, exactly while
/// it has a waiter; only [`Slot::take_waiter`] and [`Slot::put_waiter`] change either.
#[derive(Debug, Default)]
struct Waiting {
    threads: BTreeSet<(Instant, usize)>,
    tasks: BTreeSet<(Instant, usize)>,
}

impl Waiting {
    fn set(&mut self, w: &Wake) -> &mut BTreeSet<(Instant, usize)> {
        match w {
            Wake::Thread(_) => &mut self.threads,
            Wake::Task(_) => &mut self.tasks,
        }
    }

    fn insert(&mut self, w: &Wake, key: (Instant, usize)) {
        self.set(w).insert(key);
    }

    fn remove(&mut self, w: Option<&Wake>, key: (Instant, usize)) {
        if let Some(w) = w {
            self.set(w).remove(&key);
        }
    }

    fn any(&self) -> bool {
        !self.threads.is_empty() || !self.tasks.is_empty()
    }
}

/// The slot of a round still in progress.
fn live(slots: &mut [Slot], r: SlotRef) -> Option<&mut Slot> {
    slots
        .get_mut(r.index)
        .filter(|s| s.generation == r.generation)
}

/// Every slot, in use or free.
#[derive(Debug, Default)]
pub struct Slots {
    slots: Vec<Slot>,
    free: Vec<usize>,
    waiting: Waiting,
}

impl Slots {
    /// Opens a slot for a round over `nodes` nodes that ends by `deadline`.
    pub fn open(&mut self, nodes: usize, deadline: Instant) -> SlotRef {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    index: self.slots.len(),
                    generation: 0,
                    arrivals: VecDeque::new(),
                    pending: vec![0; nodes],
                    stale: vec![0; nodes],
                    deferred: Vec::new(),
                    outstanding: 0,
                    deadline,
                    waiter: None,
                    wake_at: deadline,
                    need: 1,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.deadline = deadline;
        slot.wake_at = deadline;
        slot.need = 1;
        SlotRef {
            index,
            generation: slot.generation,
        }
    }

    /// The slot of a round still in progress.
    fn live(&mut self, r: SlotRef) -> Option<&mut Slot> {
        live(&mut self.slots, r)
    }

    /// Records that `replies` more outcomes are expected from `node`.
    pub fn expect(&mut self, r: SlotRef, node: usize, replies: usize) {
        if let Some(s) = self.live(r) {
            if let Some(p) = s.pending.get_mut(node) {
                *p = p.saturating_add(u32::try_from(replies).unwrap_or(u32::MAX));
                s.outstanding += replies;
            }
        }
    }

    /// Takes back an [`expect`](Slots::expect) for a request that was not sent after all.
    pub fn unexpect(&mut self, r: SlotRef, node: usize, replies: usize) {
        if let Some(s) = self.live(r) {
            if let Some(p) = s.pending.get_mut(node) {
                let n = u32::try_from(replies).unwrap_or(u32::MAX).min(*p);
                *p -= n;
                s.outstanding -= n as usize;
                s.release_deferred(node);
            }
        }
    }

    /// Files the next outcome from the wire of `node` for round `r`; returns the round's waiter to wake, if it
    /// waits. An outcome for a round that has ended, one for a request already reported timed out, or one that
    /// was not expected, is dropped.
    pub fn file(&mut self, r: SlotRef, node: usize, reply: Reply) -> Option<Wake> {
        let s = live(&mut self.slots, r)?;
        match s.stale.get_mut(node) {
            Some(stale) if *stale > 0 => {
                *stale -= 1;
                return None;
            }
            _ => {}
        }
        match s.pending.get_mut(node) {
            Some(p) if *p > 0 => *p -= 1,
            _ => return None,
        }
        s.outstanding -= 1;
        s.arrive(node, reply);
        s.wake(&mut self.waiting)
    }

    /// Files `count` outcomes of `node` for round `r` that are known before the wire's (the node had no room for
    /// the request, or is down): `count` of the node's expected requests, followed only by `behind` expected
    /// outcomes of requests still held back (a release round's, held behind this one: not on the wire yet). They
    /// are handed out right after the node's earlier requests still awaited from the wire, before any sent later.
    /// Returns the round's waiter to wake, if it waits.
    ///
    /// The refused outcomes are counted from the node's newest pending ones (less `behind`), so they must still be
    /// pending: a held request whose node already timed out ([`time_out`](Slots::time_out) took it) is refused
    /// for nothing, unless a request was expected on that node after the timeout: its place would then be taken
    /// (its reply dropped as stale, the refusal handed out in its place). No caller expects a request on a node
    /// after its timeout (a redirection is not followed past the deadline, a `NOSCRIPT` resend needs a reply that
    /// was not stale).
    pub fn refuse(
        &mut self,
        r: SlotRef,
        node: usize,
        count: usize,
        behind: usize,
        reply: Reply,
    ) -> Option<Wake> {
        let s = live(&mut self.slots, r)?;
        let p = s.pending.get_mut(node)?;
        let count = u32::try_from(count).unwrap_or(u32::MAX).min(*p);
        if count == 0 {
            return None;
        }
        *p -= count;
        let ahead = p.saturating_sub(u32::try_from(behind).unwrap_or(u32::MAX));
        s.deferred.push(Deferred {
            node,
            reply,
            count,
            ahead,
        });
        s.release_deferred(node);
        s.wake(&mut self.waiting)
    }

    /// Sets how many outcomes must be waiting before `r`'s sleeping thread is woken (at least 1; all of them, if
    /// fewer are still to come).
    pub fn need(&mut self, r: SlotRef, outcomes: usize) {
        if let Some(s) = self.live(r) {
            s.need = outcomes.max(1);
        }
    }

    /// The next outcome filed for round `r`.
    pub fn take(&mut self, r: SlotRef) -> Option<(usize, Reply)> {
        self.live(r)?.arrivals.pop_front()
    }

    /// Whether every expected outcome of `r` has been filed (and so will be taken, or has been).
    pub fn settled(&mut self, r: SlotRef) -> bool {
        self.live(r).is_none_or(|s| s.outstanding == 0)
    }

    /// Reports every request of one node of `r` that has had no outcome as timed out: files a
    /// [`NodeError::Timeout`] for each (the node's deferred outcomes each in its place), and returns the node and how many
    /// timed out. Their replies, if they still come, are dropped (see the module doc). The caller calls this only
    /// after the round's deadline, once the replies that had arrived by then were read.
    pub fn time_out_node(&mut self, r: SlotRef) -> Option<(usize, u32)> {
        let node = self.live(r)?.pending.iter().position(|&p| p > 0)?;
        self.time_out(r, node).map(|n| (node, n))
    }

    /// Like [`time_out_node`](Slots::time_out_node), for `node`: reports every request of `node` in `r` that has
    /// had no outcome as timed out, and returns how many (`None` if it had none pending).
    pub fn time_out(&mut self, r: SlotRef, node: usize) -> Option<u32> {
        let s = self.live(r)?;
        let n = *s.pending.get(node).filter(|p| **p > 0)?;
        s.stale[node] += n;
        s.outstanding -= n as usize;
        // One at a time, as if from the wire: a refusal between two of them keeps its place (`pending` counts
        // down with them: a deferred outcome is handed out early once nothing is pending).
        for _ in 0..n {
            s.pending[node] -= 1;
            s.arrive(node, Err(NodeError::Timeout));
        }
        Some(n)
    }

    /// The nodes that still owe `r` an outcome from the wire (requests sent, no reply filed nor timed out).
    pub fn pending_nodes(&mut self, r: SlotRef) -> impl Iterator<Item = usize> + '_ {
        self.live(r)
            .into_iter()
            .flat_map(|s| s.pending.iter().enumerate().filter(|(_, p)| **p > 0))
            .map(|(node, _)| node)
    }

    /// Moves `r`'s deadline to `deadline` (a patient round past its first deadline, see
    /// `Round::patient_until`). A waiter registered for the old deadline is woken at it anyway (a spurious
    /// wake-up: it looks, and waits again until the new one).
    pub fn extend(&mut self, r: SlotRef, deadline: Instant) {
        if let Some(s) = self.live(r) {
            s.deadline = deadline;
        }
    }

    /// Records that `r`'s thread sleeps until woken (by [`file`](Slots::file) or [`wake_due`](Slots::wake_due)).
    pub fn sleep(&mut self, r: SlotRef, thread: Thread) {
        if let Some(s) = live(&mut self.slots, r) {
            let deadline = s.deadline;
            s.put_waiter(&mut self.waiting, Wake::Thread(thread), deadline);
        }
    }

    /// Records that `r`'s task waits until woken (by [`file`](Slots::file), or by [`wake_due`](Slots::wake_due)
    /// once a turn has read the sockets at or after `wake_at`). Returns the waiter it replaces, if any, to be
    /// dropped once the fanout's lock is let go; a waker that already wakes the same task is kept as it is.
    pub fn wait(&mut self, r: SlotRef, waker: &Waker, wake_at: Instant) -> Option<Wake> {
        let s = live(&mut self.slots, r)?;
        let wake_at = wake_at.min(s.deadline);
        let waker = match s.waiter.take() {
            Some(Wake::Task(w)) if w.will_wake(waker) => {
                // The same task: keep its waker, only file it under the new instant.
                self.waiting.tasks.remove(&(s.wake_at, s.index));
                w
            }
            other => {
                s.waiter = other;
                let old = s.take_waiter(&mut self.waiting);
                s.put_waiter(&mut self.waiting, Wake::Task(waker.clone()), wake_at);
                return old;
            }
        };
        s.wake_at = wake_at;
        self.waiting.tasks.insert((wake_at, s.index));
        s.waiter = Some(Wake::Task(waker));
        None
    }

    /// Forgets `r`'s sleeping thread (it woke by itself).
    pub fn awake(&mut self, r: SlotRef) {
        if let Some(s) = live(&mut self.slots, r) {
            s.take_waiter(&mut self.waiting);
        }
    }

    /// The earliest instant a waiter (a sleeping thread or a waiting task) must be woken at, for the poll's
    /// timeout.
    pub fn earliest_sleeper(&self) -> Option<Instant> {
        let thread = self.waiting.threads.first().map(|k| k.0);
        let task = self.waiting.tasks.first().map(|k| k.0);
        thread.into_iter().chain(task).min()
    }

    /// The earliest instant a waiting task must be woken at: `None` if no task waits (the background driver then
    /// gives the poll back).
    pub fn earliest_task(&self) -> Option<Instant> {
        self.waiting.tasks.first().map(|k| k.0)
    }

    /// Takes the waiters of rounds due at or before `read_at`: a poll turn that read the sockets at `read_at` has
    /// filed every reply that had arrived by their deadline, so they can now count the rest as timed out (or, a
    /// task holding requests for room, look again).
    pub fn wake_due(&mut self, read_at: Instant, wake: &mut Vec<Wake>) {
        if !self.waiting.any() {
            return;
        }
        loop {
            let due =
                |set: &BTreeSet<(Instant, usize)>| set.first().filter(|k| k.0 <= read_at).copied();
            let Some((_, index)) = due(&self.waiting.threads).or_else(|| due(&self.waiting.tasks))
            else {
                return;
            };
            wake.extend(self.slots[index].take_waiter(&mut self.waiting));
        }
    }

    /// Takes the thread of one sleeping round, to hand it the poll.
    #[cfg(test)]
    fn any_sleeper(&mut self) -> Option<Thread> {
        match self.successor() {
            Successor::Thread(t) => Some(t),
            _ => None,
        }
    }

    /// Who should take a poll that was just put back: a sleeping thread (taken from its slot), else, if tasks
    /// wait, the background driver (the tasks' wakers stay in place).
    pub fn successor(&mut self) -> Successor {
        if let Some(&(_, index)) = self.waiting.threads.first() {
            if let Some(Wake::Thread(t)) = self.slots[index].take_waiter(&mut self.waiting) {
                return Successor::Thread(t);
            }
        }
        match !self.waiting.tasks.is_empty() {
            true => Successor::Tasks,
            false => Successor::Nobody,
        }
    }

    /// Ends round `r`: its slot is reusable, and outcomes of its requests that come later are dropped. Returns
    /// the round's waiter, never to be woken now: drop it once the fanout's lock is let go.
    pub fn close(&mut self, r: SlotRef) -> Option<Wake> {
        let s = live(&mut self.slots, r)?;
        s.generation = s.generation.wrapping_add(1);
        s.arrivals.clear();
        s.pending.iter_mut().for_each(|p| *p = 0);
        s.stale.iter_mut().for_each(|p| *p = 0);
        s.deferred.clear();
        s.outstanding = 0;
        let waiter = s.take_waiter(&mut self.waiting);
        self.free.push(r.index);
        waiter
    }
}

#[cfg(test)]
mod tests;
