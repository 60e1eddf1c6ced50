//! [`Slots`]: the mailboxes of the rounds in progress, as plain bookkeeping (no sockets, no clock of its own).
//!
//! A round owns one slot while it runs. Every reply it expects is named when the request is sent, by a
//! [`CommandId`]: the node, and the reply's place among all the replies the round expected from that node. Each
//! outcome (a reply, a connection failure, a refusal, a timeout) is *filed* once, under its id, and the round
//! takes it from its arrivals with that id. When the round ends, its slot is closed: the generation moves on, so
//! outcomes of its requests that come later (a late reply, read and dropped) are recognised as stale and ignored,
//! and the slot is reused by the next round.
//!
//! # Outcomes are matched by identity, never by position
//!
//! A caller looks each outcome up by its id (a batch's names, a watchdog round's guards, `GET` then `PTTL`, a
//! resend after `NOSCRIPT`), so the order in which outcomes are handed out carries no meaning, and no mechanism
//! below has to keep one:
//!
//! - **The wire** names its own: a connection's queue holds, for each reply it waits for, the round and id it is
//!   for, set when the request was queued. The reply read is filed under the id at the head of that queue.
//! - **A refusal** (no room, the node down, a held request past its deadline) is filed under the ids of the
//!   request refused, whatever else of the node is still on the wire.
//! - **A timeout** files every id of the node still awaited; a reply that comes for one of them later finds its
//!   id no longer awaited and is dropped. (A node's requests still time out together: a patient round judges a
//!   node, not a request.)
//!
//! One order is still checked, because it is a fact about the wire and not a rule callers rely on: a round's
//! requests to one node are queued in the order their ids were given (held requests keep it, see `fanout`), so a
//! reply from the wire is always for the oldest of the node's ids on a wire. A reply filed for any other awaited id
//! means the books and the wire disagree: [`Slots::file`] reports [`Disorder`], and the connection is dropped
//! (every request on it fails) rather than one reply being counted for another command.

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

/// Names one outcome of a round: the node it comes from, and `seq`, its place among every reply the round expected
/// from that node (0 for the first reply of the first request sent there; a request of `k` commands takes `k`
/// places; a request refused or held takes its places as one queued does).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommandId {
    /// The node (a connection index).
    pub node: usize,
    /// The reply's place among the round's replies from that node.
    pub seq: u32,
}

/// A reply filed from the wire for an id that is awaited, while an older id of the same round and node is still
/// awaited on a wire: the connection's queue and the round's books disagree. The connection must be dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disorder;

/// One reply a round still awaits from a node.
#[derive(Clone, Copy, Debug)]
struct Awaited {
    seq: u32,
    /// Queued on a connection (its bytes on a wire, or about to be); otherwise held for room or not offered yet.
    queued: bool,
}

/// The mailbox of one round.
#[derive(Debug)]
struct Slot {
    /// Its place in [`Slots::slots`] (for the waiters' index).
    index: usize,
    /// Bumped when the round ends.
    generation: u64,
    /// Outcomes filed and not yet taken, in filing order.
    arrivals: VecDeque<(CommandId, Reply)>,
    /// Per node: the replies whose outcome has not been filed yet, by `seq` (ascending).
    awaited: Vec<VecDeque<Awaited>>,
    /// Per node: the `seq` of the next reply expected.
    next_seq: Vec<u32>,
    /// Outcomes not filed yet: the sum of `awaited`'s lengths.
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

impl Slot {
    /// Where `seq` is in `node`'s awaited replies, if it is there.
    fn find(&self, node: usize, seq: u32) -> Option<usize> {
        let q = self.awaited.get(node)?;
        let at = q.partition_point(|a| a.seq < seq);
        q.get(at).filter(|a| a.seq == seq).map(|_| at)
    }

    /// Hands out the outcome of `id`, awaited at `at` of its node's list.
    fn arrive(&mut self, id: CommandId, at: usize, reply: Reply) {
        if let Some(q) = self.awaited.get_mut(id.node) {
            q.remove(at);
            self.outstanding -= 1;
            self.arrivals.push_back((id, reply));
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
    /// Outcomes read from the wire and dropped: their round had ended, or their id was no longer awaited. Read by
    /// the simulator only.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    late: u64,
    /// Outcomes filed so far (replies, refusals, timeouts). Read by the simulator only.
    #[cfg_attr(not(feature = "sim"), allow(dead_code))]
    filed: u64,
}

impl Slots {
    /// How many outcomes read from the wire were dropped so far: late replies (their round had ended, or had
    /// timed their node out).
    #[cfg(feature = "sim")]
    pub fn late(&self) -> u64 {
        self.late
    }

    /// How many outcomes were filed so far (replies, refusals, timeouts): a driver that wakes rounds itself (the
    /// simulator's) tells by it whether anything came.
    #[cfg(feature = "sim")]
    pub fn filed(&self) -> u64 {
        self.filed
    }

    /// Opens a slot for a round over `nodes` nodes that ends by `deadline`.
    pub fn open(&mut self, nodes: usize, deadline: Instant) -> SlotRef {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    index: self.slots.len(),
                    generation: 0,
                    arrivals: VecDeque::new(),
                    awaited: Vec::new(),
                    next_seq: Vec::new(),
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
        // Kept cleared by `close`: only grown here (a reused slot of a smaller round, or a first one).
        if slot.awaited.len() < nodes {
            slot.awaited.resize_with(nodes, VecDeque::new);
            slot.next_seq.resize(nodes, 0);
        }
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

    /// The `seq` the next reply expected from `node` in round `r` will get (0 if the round has ended).
    pub fn next_seq(&mut self, r: SlotRef, node: usize) -> u32 {
        self.live(r)
            .and_then(|s| s.next_seq.get(node).copied())
            .unwrap_or(0)
    }

    /// Records that `replies` more outcomes are expected from `node`, not queued yet; returns the `seq` of the
    /// first (the others follow it).
    pub fn expect(&mut self, r: SlotRef, node: usize, replies: usize) -> u32 {
        let Some(s) = self.live(r) else {
            return 0;
        };
        let (Some(q), Some(next)) = (s.awaited.get_mut(node), s.next_seq.get_mut(node)) else {
            return 0;
        };
        let first = *next;
        let n = u32::try_from(replies).unwrap_or(u32::MAX);
        *next = next.saturating_add(n);
        q.extend((0..n).map(|i| Awaited {
            seq: first.wrapping_add(i),
            queued: false,
        }));
        s.outstanding += n as usize;
        first
    }

    /// Records that the `replies` outcomes from `first` on of `node` were queued on its connection: from now on
    /// they come from the wire, before any of the node's later ones.
    pub fn queued(&mut self, r: SlotRef, node: usize, first: u32, replies: usize) {
        let Some(s) = self.live(r) else {
            return;
        };
        let Some(q) = s.awaited.get_mut(node) else {
            return;
        };
        let end = u64::from(first) + replies as u64;
        let at = q.partition_point(|a| a.seq < first);
        for a in q.iter_mut().skip(at) {
            if u64::from(a.seq) >= end {
                break;
            }
            a.queued = true;
        }
    }

    /// Files the outcome read from the wire for `id` of round `r`; returns the round's waiter to wake, if it
    /// waits. An outcome for a round that has ended, or for an id no longer awaited (timed out, or never
    /// expected), is dropped. `Err`: `id` is awaited, but an older id of its node was queued and is still
    /// awaited: the wire and the books disagree, and the caller drops the connection (which files every
    /// request on it as failed, in order).
    pub fn file(
        &mut self,
        r: SlotRef,
        id: CommandId,
        reply: Reply,
    ) -> Result<Option<Wake>, Disorder> {
        let found = live(&mut self.slots, r).and_then(|s| Some((s.find(id.node, id.seq)?, s)));
        let Some((at, s)) = found else {
            self.late += 1;
            return Ok(None);
        };
        let older_on_a_wire = s.awaited[id.node].iter().take(at).any(|a| a.queued);
        if older_on_a_wire {
            return Err(Disorder);
        }
        s.arrive(id, at, reply);
        self.filed += 1;
        Ok(s.wake(&mut self.waiting))
    }

    /// Files `reply` for the `count` outcomes of `node` from `first` on, known before the wire's (the node had no
    /// room for the request, or is down); those no longer awaited are skipped. Returns the round's waiter to wake,
    /// if it waits.
    pub fn refuse(
        &mut self,
        r: SlotRef,
        node: usize,
        first: u32,
        count: usize,
        reply: Reply,
    ) -> Option<Wake> {
        let s = live(&mut self.slots, r)?;
        let end = u64::from(first) + count as u64;
        let mut filed = false;
        loop {
            let q = s.awaited.get(node)?;
            let at = q.partition_point(|a| a.seq < first);
            let Some(a) = q.get(at).filter(|a| u64::from(a.seq) < end) else {
                break;
            };
            let id = CommandId { node, seq: a.seq };
            s.arrive(id, at, reply.clone());
            self.filed += 1;
            filed = true;
        }
        match filed {
            true => s.wake(&mut self.waiting),
            false => None,
        }
    }

    /// Sets how many outcomes must be waiting before `r`'s sleeping thread is woken (at least 1; all of them, if
    /// fewer are still to come).
    pub fn need(&mut self, r: SlotRef, outcomes: usize) {
        if let Some(s) = self.live(r) {
            s.need = outcomes.max(1);
        }
    }

    /// The next outcome filed for round `r`, with its id.
    pub fn take(&mut self, r: SlotRef) -> Option<(CommandId, Reply)> {
        self.live(r)?.arrivals.pop_front()
    }

    /// Whether every expected outcome of `r` has been filed (and so will be taken, or has been).
    pub fn settled(&mut self, r: SlotRef) -> bool {
        self.live(r).is_none_or(|s| s.outstanding == 0)
    }

    /// Reports every request of one node of `r` that has had no outcome as timed out: files a
    /// [`NodeError::Timeout`] under each of its ids, and returns the node and how many timed out. Their replies,
    /// if they still come, find their ids no longer awaited and are dropped. The caller calls this only after the
    /// round's deadline, once the replies that had arrived by then were read.
    pub fn time_out_node(&mut self, r: SlotRef) -> Option<(usize, u32)> {
        let node = self.live(r)?.awaited.iter().position(|q| !q.is_empty())?;
        self.time_out(r, node).map(|n| (node, n))
    }

    /// Like [`time_out_node`](Slots::time_out_node), for `node`: reports every request of `node` in `r` that has
    /// had no outcome as timed out, and returns how many (`None` if it had none awaited).
    pub fn time_out(&mut self, r: SlotRef, node: usize) -> Option<u32> {
        let s = self.live(r)?;
        let q = s.awaited.get_mut(node).filter(|q| !q.is_empty())?;
        let n = q.len();
        for a in q.drain(..) {
            let id = CommandId { node, seq: a.seq };
            s.arrivals.push_back((id, Err(NodeError::Timeout)));
        }
        s.outstanding -= n;
        self.filed += n as u64;
        Some(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// The nodes that still owe `r` an outcome (requests queued or held, none filed nor timed out).
    pub fn pending_nodes(&mut self, r: SlotRef) -> impl Iterator<Item = usize> + '_ {
        self.live(r)
            .into_iter()
            .flat_map(|s| s.awaited.iter().enumerate().filter(|(_, q)| !q.is_empty()))
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

    /// Whether `r`'s thread is still recorded as sleeping: nobody has taken it out of its slot to wake it.
    pub fn asleep(&mut self, r: SlotRef) -> bool {
        self.live(r)
            .is_some_and(|s| matches!(s.waiter, Some(Wake::Thread(_))))
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
        s.awaited.iter_mut().for_each(VecDeque::clear);
        s.next_seq.iter_mut().for_each(|n| *n = 0);
        s.outstanding = 0;
        let waiter = s.take_waiter(&mut self.waiting);
        self.free.push(r.index);
        waiter
    }
}

#[cfg(test)]
mod tests;
