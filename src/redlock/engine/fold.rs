//! Folded releases: plain releases that separate callers of one engine ask for while another release round is in
//! flight wait in a queue, and go out together as **one** compare-and-delete per node ([`lua::RELEASE_BATCH`] on the
//! script nodes), so that the servers' cost per release falls with load: a node runs one script call for the whole
//! fold, not one `EVALSHA` per key. A lone caller goes out exactly as an unfolded release does.
//!
//! # The decision
//!
//! One gate per engine, [`Fold`]: at most one plain release round (a lone one or a folded one) is in flight.
//!
//! - **A caller that finds the gate open takes it** and runs the lone round ([`Engine::release_alone`]: the
//!   script by hash or the node's native command, the refusal fallback of `script_round`) exactly as before the
//!   fold existed: one uncontended mutex lock and unlock more, nothing allocated.
//! - **A caller that finds it taken joins the queue** ([`Entry`]: a copy of its key, value and nodes) and waits.
//! - **When a round ends**, its runner hands the gate on ([`Engine::fold_finish`]): it takes the queue as
//!   the next batch (its first [`Config::max_in_flight`](crate::redlock::Config::max_in_flight) releases: a
//!   node's queue could never take more native commands in one request) and makes one of its callers still
//!   waiting the batch's **leader** (the first that blocks its thread, if any, else the first: see Cancel),
//!   which runs the folded round
//!   ([`Engine::release_folded`]) for everyone in it, itself included, then hands the gate on in turn. An empty
//!   queue opens the gate. So the batch grows with the load, and a round's latency is what collects the next one.
//! - **Per node, the cheapest way**: a script node gets one `RELEASE_BATCH` with every key asked of it (in full,
//!   as every release: `scripts`, "Releases go in full"); a node with a native compare-and-delete (`DELIFEQ`, `DELEX`; [`Engine::via`])
//!   gets one native command per key, pipelined in one write, which costs it less than a script.
//!
//! # Invariants
//!
//! - **Each caller gets what a lone release would have given it** (unless its fold's leader is dropped mid-round:
//!   see Cancel): its own [`Tally`], fed only the replies to
//!   its own key: every outcome names the command it answers (the seam's contract), and the round notes, under
//!   each id it sends, what that outcome answers ([`Expect`] in an [`Awaiting`]: a batch script, whose reply is
//!   an array with one element per key in the order of its keys; or one key's own command). An outcome is
//!   counted for the entry its id names and for no other; a reply of another round never reaches this
//!   one (each round has its own slots). The verdict is [`Tally::finish`]: `Ok(n)`, [`Error::LockLost`] or
//!   [`Error::Quorum`]. The round ends once every release in it is decided (a
//!   majority confirmed), or when every outcome is in.
//! - **A key costs only its own release**: `RELEASE_BATCH` reads each key with `redis.pcall` (a key of another
//!   type is that key's error), and a batch answered by an error as a whole (`NOPERM`: the ACL checks a
//!   script's keys before it runs) goes again on that node key by key, each as its own script.
//! - **A refusal costs no vote**: a batch script (in full: it cannot be refused with `NOSCRIPT`) refused
//!   (`NOPERM` without `+eval`) goes as the node's native commands if it has them; a native
//!   command refused (an ACL without it) goes again as that key's script ([`Engine::next_via`], each way once per
//!   key and node). The refused outcome is not counted; the resent request's is. As in `script_round`, nodes sent
//!   a native command not yet seen to run on their connection are awaited until all of them answered, so a
//!   refusal is always seen and the key released the other way.
//! - **Who holds what**: the gate (`Queue::busy`) is held by the runner of the round in flight, through a drop
//!   guard ([`Gate`] for a lone round, [`Leading`] for a folded one) that hands it on when the round ends *or*
//!   when its future is dropped. A queued entry is shared (`Arc`) by its caller and the queue, then the batch.
//! - **Who wakes whom**: the runner of a folded round delivers every entry's verdict (and wakes its caller: a
//!   parked thread, or a task's waker), then hands the gate on, which makes the next batch's leader (woken the
//!   same way). A caller under [`block`](crate::redlock::engine::seam::block) parks its thread (bounded by the
//!   round timeout, then it looks again); a task registers its waker.
//! - **Bounded**: a caller waits for the round in flight, then for its own. One whose turn does not come (the runner
//!   is a task not being polled: its executor's thread is busy, or blocked, perhaps by this very caller in a blocking
//!   release, which would deadlock if it waited on) leaves the queue after one round timeout, or its batch after
//!   three, and releases alone ([`Follower::give_up`]). Lock order: the fold's queue, then an entry's slot, never the
//!   other way; neither is held while sending or waiting.
//! - **Cancel** (an async caller's future dropped): a queued caller that goes leaves its entry in the queue, marked
//!   abandoned: its key is still released with the batch (a release that outlives its caller), and its verdict is
//!   dropped. A caller made leader that goes before it ran its batch hands the batch to the next caller of it still
//!   waiting, or, if none is left, sends every key of it unawaited ([`Engine::release_unawaited`]) and hands the gate
//!   on. A leader dropped in the middle of its round cannot wait for the replies still to come (they are abandoned
//!   with the round; its requests still run on the nodes): [`Leading`]'s drop gives every other caller of the batch
//!   the verdict of the replies counted so far, which is never a false success (`Ok` only if a majority confirmed;
//!   typically [`Error::Quorum`], "unconfirmed"), and hands the gate on. No caller ever waits for a round that nobody
//!   runs. So a blocking caller of the batch, if there is one, is made its leader ([`Engine::hand_on`]): it cannot be
//!   dropped part-way, and every caller of its batch gets its true verdict. Only a batch of tasks alone is led by a
//!   task, and its other callers are told "unconfirmed" if that task is dropped mid-round: handing the round itself
//!   over (its slot, what each outcome answers, the tallies) to another caller is not implemented.
//!
//! Only plain releases fold (`unlock`, `unlock_value`, a plain guard's release or drop); fenced, set and owned
//! releases have scripts of their own and go alone, as do `unlock_batch` (one script already) and the unawaited
//! releases of failed attempts. The guards' renewals are already one round
//! per watchdog turn (`renew.rs`), one compare-and-pexpire per guard pipelined in one write per node (native
//! `SET IFEQ PX` where the node has it, else one `EVALSHA` per guard): not one multi-key script.

use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::thread::Thread;

use bytes::BytesMut;

use crate::net::NodeSet;
use crate::redlock::engine::Engine;
use crate::redlock::engine::awaiting::Awaiting;
use crate::redlock::engine::batch::array_votes;
use crate::redlock::engine::compare::Tried;
use crate::redlock::engine::compare::natives_unawaited;
use crate::redlock::engine::release::Tally;
use crate::redlock::engine::reply::{refused, script_vote};
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes, blocking};
use crate::redlock::error::Result;
use crate::redlock::lua;
use crate::redlock::scripts::{self, Native, Script, Via};
use crate::sync::lock;
use crate::time::later;

use crate::redlock::error::Error;

/// The engine's release gate and the queue of releases waiting for it (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct Fold {
    queue: Mutex<Queue>,
    /// Folded rounds run, and releases that went out in them (for [`Stats`](crate::redlock::Stats)).
    rounds: std::sync::atomic::AtomicU64,
    folded: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
struct Queue {
    /// A release round is in flight: its runner holds the gate.
    busy: bool,
    /// Releases waiting for the gate, in arrival order.
    waiting: Vec<Arc<Entry>>,
}

impl Fold {
    /// Takes the gate if it is open (`None`: the caller runs its release alone), else queues the release.
    fn enter(&self, resource: &[u8], value: &[u8], nodes: NodeSet) -> Option<Arc<Entry>> {
        let mut queue = lock(&self.queue);
        if !queue.busy {
            queue.busy = true;
            return None;
        }
        let entry = Arc::new(Entry {
            resource: resource.to_vec(),
            value: value.to_vec(),
            nodes,
            slot: Mutex::new(Slot {
                state: State::Queued,
                waiter: None,
                abandoned: false,
            }),
        });
        queue.waiting.push(Arc::clone(&entry));
        Some(entry)
    }

    /// The next batch (the queue's first `cap` releases, `cap` at least 1), the gate staying taken; `None` (and the
    /// gate opened) if none waits. A node's queue takes a request of at most twice `max_in_flight` replies (a
    /// release's reserve): a fold of more keys, one native command each, was refused there (`Overloaded`).
    fn next_batch(&self, cap: usize) -> Option<Vec<Arc<Entry>>> {
        let mut queue = lock(&self.queue);
        if queue.waiting.is_empty() {
            queue.busy = false;
            return None;
        }
        if queue.waiting.len() <= cap.max(1) {
            return Some(std::mem::take(&mut queue.waiting));
        }
        Some(queue.waiting.drain(..cap.max(1)).collect())
    }

    /// Takes `entry` out of the queue if it is still there (in no batch yet); returns whether it did.
    fn withdraw(&self, entry: &Arc<Entry>) -> bool {
        let mut queue = lock(&self.queue);
        match queue.waiting.iter().position(|e| Arc::ptr_eq(e, entry)) {
            Some(i) => {
                queue.waiting.remove(i);
                true
            }
            None => false,
        }
    }

    /// `(folded rounds, releases that went out in them)`.
    pub(crate) fn counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.rounds.load(Relaxed), self.folded.load(Relaxed))
    }
}

/// One queued release: what it releases, and where its caller stands.
#[derive(Debug)]
pub(crate) struct Entry {
    resource: Vec<u8>,
    value: Vec<u8>,
    nodes: NodeSet,
    slot: Mutex<Slot>,
}

#[derive(Debug)]
struct Slot {
    state: State,
    /// Who to wake when the state moves on.
    waiter: Option<Waiter>,
    /// The caller went (its future was dropped): nobody reads the verdict, nobody may lead.
    abandoned: bool,
}

#[derive(Debug)]
enum State {
    /// In the queue, or in a batch someone else runs.
    Queued,
    /// Made the leader of this batch (itself among it); not started yet.
    Lead(Vec<Arc<Entry>>),
    /// Leading its batch.
    Running,
    /// Its verdict.
    Done(Result<usize>),
    /// The verdict was read.
    Taken,
}

#[derive(Debug)]
enum Waiter {
    Thread(Thread),
    Task(Waker),
}

impl Waiter {
    fn wake(self) {
        match self {
            Waiter::Thread(thread) => thread.unpark(),
            Waiter::Task(waker) => waker.wake(),
        }
    }
}

/// What a queued caller is told to do next.
enum Step {
    Lead(Vec<Arc<Entry>>),
    Done(Result<usize>),
    /// Waited past its bound ([`Follower::give_up`]): release alone. `true` if its entry was in a batch already
    /// (now marked abandoned: the batch may still release it, or may have already).
    Alone(bool),
}

impl Entry {
    /// The verdict for this release (dropped if its caller went), and its caller woken.
    fn deliver(&self, result: Result<usize>) {
        let waiter = {
            let mut slot = lock(&self.slot);
            if !matches!(slot.state, State::Queued | State::Running) {
                return;
            }
            slot.state = State::Done(result);
            slot.waiter.take()
        };
        if let Some(waiter) = waiter {
            waiter.wake();
        }
    }

    /// Makes this entry's caller the leader of `batch` (moved out of it) if the caller is still there and
    /// waiting; returns whether it did.
    fn promote(&self, batch: &mut Vec<Arc<Entry>>) -> bool {
        let waiter = {
            let mut slot = lock(&self.slot);
            if slot.abandoned || !matches!(slot.state, State::Queued) {
                return false;
            }
            slot.state = State::Lead(std::mem::take(batch));
            slot.waiter.take()
        };
        if let Some(waiter) = waiter {
            waiter.wake();
        }
        true
    }

    /// Whether this entry's caller waits by parking its thread (a blocking release), as far as it said so yet.
    fn blocks(&self) -> bool {
        matches!(lock(&self.slot).waiter, Some(Waiter::Thread(_)))
    }

    /// Marks this entry abandoned if it is still only queued in a batch (not leading, no verdict); returns whether
    /// it did.
    fn leave_batch(&self) -> bool {
        let mut slot = lock(&self.slot);
        if slot.abandoned || !matches!(slot.state, State::Queued) {
            return false;
        }
        slot.abandoned = true;
        slot.waiter = None;
        true
    }

    /// What to do next, if anything yet; otherwise `waiter` is registered to be woken when there is.
    fn step(&self, waiter: impl FnOnce() -> Waiter) -> Option<Step> {
        let mut slot = lock(&self.slot);
        match std::mem::replace(&mut slot.state, State::Taken) {
            State::Lead(batch) => {
                slot.state = State::Running;
                Some(Step::Lead(batch))
            }
            State::Done(result) => Some(Step::Done(result)),
            other => {
                slot.state = other;
                let new = waiter();
                let same = matches!(
                    (&slot.waiter, &new),
                    (Some(Waiter::Task(old)), Waiter::Task(new)) if old.will_wake(new)
                );
                if !same {
                    slot.waiter = Some(new);
                }
                None
            }
        }
    }
}

/// What one outcome of a folded round answers, on its node.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// The node's batch script (its members' keys, in order), sent this way.
    Batch(Via),
    /// Entry `j`'s own command (native, or its script after a refusal), sent this way.
    Key(usize, Via),
}

/// The gate, held by a lone round's runner (or the leader of a batch of one): hands it on when dropped.
struct Gate<'e, N: Nodes, C: Clock> {
    engine: &'e Engine<N, C>,
}

impl<N: Nodes, C: Clock> Drop for Gate<'_, N, C> {
    fn drop(&mut self) {
        self.engine.fold_finish();
    }
}

/// A queued caller: if its future is dropped, its entry is marked abandoned (it is released all the same), and a
/// leadership it was handed but did not take up goes on to another.
struct Follower<'e, N: Nodes, C: Clock> {
    engine: &'e Engine<N, C>,
    entry: Arc<Entry>,
}

impl<N: Nodes, C: Clock> Drop for Follower<'_, N, C> {
    fn drop(&mut self) {
        let lead = {
            let mut slot = lock(&self.entry.slot);
            slot.abandoned = true;
            slot.waiter = None;
            match std::mem::replace(&mut slot.state, State::Taken) {
                State::Lead(batch) => Some(batch),
                other => {
                    slot.state = other;
                    None
                }
            }
        };
        if let Some(batch) = lead {
            self.engine.hand_on(batch);
        }
    }
}

impl<N: Nodes, C: Clock> Follower<'_, N, C> {
    /// Waits until this caller must lead a batch or has its verdict, or has waited past its bound
    /// ([`Follower::give_up`]).
    async fn next(&self) -> Step {
        let since = self.engine.clock.now();
        let bound = self.engine.config.round_timeout;
        if blocking() {
            loop {
                if let Some(step) = self.entry.step(|| Waiter::Thread(std::thread::current())) {
                    return step;
                }
                if let Some(step) = self.give_up(since) {
                    return step;
                }
                // Unparked by whoever moves the state on; the timeout bounds the wait (see `give_up`).
                std::thread::park_timeout(bound);
            }
        }
        // A task looks at its bound whenever it is polled (woken by whoever moves its state on; the watchdog's
        // releases are polled every few milliseconds): no timer of its own.
        poll_fn(|cx| {
            if let Some(step) = self.entry.step(|| Waiter::Task(cx.waker().clone())) {
                return Poll::Ready(step);
            }
            match self.give_up(since) {
                Some(step) => Poll::Ready(step),
                None => Poll::Pending,
            }
        })
        .await
    }

    /// A caller waits for the round in flight (at most a round timeout) and then for its own: past that, whoever
    /// should move it on is not running (a task not polled: its executor's thread is blocked, perhaps by this very
    /// caller, or busy). Still in the queue after one round timeout, it leaves the queue and releases alone; in a
    /// batch that has not ended after three (the round before it, its own, and slack for a leader woken late), it
    /// leaves the batch (abandoned: released with it if it ever runs) and releases alone. `None`: wait on.
    fn give_up(&self, since: std::time::Instant) -> Option<Step> {
        let waited = self.engine.clock.now().saturating_duration_since(since);
        let bound = self.engine.config.round_timeout;
        if waited < bound {
            return None;
        }
        if self.engine.fold.withdraw(&self.entry) {
            return Some(Step::Alone(false));
        }
        if waited >= bound.saturating_mul(3) && self.entry.leave_batch() {
            return Some(Step::Alone(true));
        }
        None
    }
}

/// A folded round's runner: its batch and their tallies. Dropped (the round over, or the leader's future
/// dropped part-way), it gives every entry the verdict of its tally and hands the gate on.
struct Leading<'e, N: Nodes, C: Clock> {
    engine: &'e Engine<N, C>,
    batch: Vec<Arc<Entry>>,
    tallies: Vec<Tally<'e>>,
}

impl<N: Nodes, C: Clock> Drop for Leading<'_, N, C> {
    fn drop(&mut self) {
        for (entry, tally) in self.batch.iter().zip(self.tallies.drain(..)) {
            entry.deliver(tally.finish(self.engine, &entry.resource));
        }
        self.engine.fold_finish();
    }
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// A plain release (`unlock`, `unlock_value`, a plain guard's drop): alone if no release round is in flight,
    /// else folded with the others waiting (see the module doc).
    pub(crate) async fn release_folding(
        &self,
        resource: &[u8],
        value: &[u8],
        nodes: NodeSet,
    ) -> Result<usize> {
        if !self.config.fold_releases {
            return self.release_alone(resource, value, nodes).await;
        }
        let Some(entry) = self.fold.enter(resource, value, nodes) else {
            let _gate = Gate { engine: self };
            return self.release_alone(resource, value, nodes).await;
        };
        let follower = Follower {
            engine: self,
            entry,
        };
        loop {
            match follower.next().await {
                Step::Done(result) => return result,
                Step::Lead(batch) => self.lead(batch).await,
                Step::Alone(in_batch) => {
                    let result = self.release_alone(resource, value, nodes).await;
                    return match (in_batch, result) {
                        // The batch it left may have deleted the key first: "not ours" then proves nothing.
                        (true, Err(Error::LockLost(report))) => Err(Error::Quorum(report)),
                        (_, result) => result,
                    };
                }
            }
        }
    }

    /// Runs `batch` (its leader's own entry among it); every entry has its verdict when this ends.
    async fn lead(&self, batch: Vec<Arc<Entry>>) {
        if let [entry] = &batch[..] {
            // The leader alone: the lone round, as a caller that found the gate open runs it.
            let _gate = Gate { engine: self };
            let result = self
                .release_alone(&entry.resource, &entry.value, entry.nodes)
                .await;
            entry.deliver(result);
            return;
        }
        let (n, quorum) = (self.fanout.len(), self.quorum());
        let tallies = batch
            .iter()
            .map(|e| Tally::new(&self.votes, n, quorum, e.nodes))
            .collect();
        let mut leading = Leading {
            engine: self,
            batch,
            tallies,
        };
        {
            use std::sync::atomic::Ordering::Relaxed;
            self.fold.rounds.fetch_add(1, Relaxed);
            self.fold
                .folded
                .fetch_add(leading.batch.len() as u64, Relaxed);
        }
        let Leading { batch, tallies, .. } = &mut leading;
        self.release_folded(batch, tallies).await;
    }

    /// Hands the gate on after a round: to the next batch's leader, or open.
    fn fold_finish(&self) {
        if let Some(batch) = self.fold.next_batch(self.config.max_in_flight) {
            self.hand_on(batch);
        }
    }

    /// Gives `batch` to one of its callers still waiting, to lead: the first that blocks its thread if any, else
    /// the first; if every one went, sends its releases unawaited and goes on with the next batch (or opens the
    /// gate).
    ///
    /// A blocking caller first: it runs the round to its end on its own thread, where a task may be dropped
    /// part-way (the other callers would then get the verdict of the replies counted so far) or not be polled at
    /// all (its thread parked in a blocking release).
    fn hand_on(&self, mut batch: Vec<Arc<Entry>>) {
        loop {
            for blocking_only in [true, false] {
                for i in 0..batch.len() {
                    let entry = Arc::clone(&batch[i]);
                    if (!blocking_only || entry.blocks()) && entry.promote(&mut batch) {
                        return;
                    }
                }
            }
            let mut request = BytesMut::new();
            for entry in &batch {
                request.clear();
                self.release_unawaited(&mut request, entry.nodes, &entry.resource, &entry.value);
            }
            match self.fold.next_batch(self.config.max_in_flight) {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// The folded round: every entry of `batch` released on its nodes, each node sent its keys the cheapest way
    /// it has, each outcome counted into the tally of the entry it answers (see the module doc).
    async fn release_folded(&self, batch: &[Arc<Entry>], tallies: &mut [Tally<'_>]) {
        let (n, k) = (self.fanout.len(), batch.len());
        // Per node, the entries asked there, in the order of their keys in its request.
        let members: Vec<Vec<usize>> = (0..n)
            .map(|node| (0..k).filter(|&j| batch[j].nodes.contains(node)).collect())
            .collect();
        let mut ways: Vec<Tried> = (0..n)
            .map(|node| Tried::new(self.via(Script::Release, node)))
            .collect();
        let mut round = self
            .fanout
            .release_round(later(self.clock.now(), self.config.round_timeout));
        // As a lone release: nodes still answering are waited for, a few round lengths.
        round.patient_until(self.patient_from(self.clock.now()));
        let mut request = BytesMut::with_capacity(64 + k * 96);
        // What each outcome answers, by its id.
        let mut expect: Awaiting<Expect> = Awaiting::new(n);
        // Nodes sent a native command not yet seen to run on their connection: awaited to the end (see above).
        let mut unsure = vec![false; n];
        // One encoding per way and set of members in use (one of each way on a uniform cluster).
        let mut sent = vec![false; n];
        for first in 0..n {
            if sent[first] || members[first].is_empty() {
                continue;
            }
            let via = ways[first].last;
            let group: Vec<usize> = (first..n)
                .filter(|&o| !sent[o] && ways[o].last == via && members[o] == members[first])
                .collect();
            request.clear();
            let replies = encode(&mut request, via, batch, &members[first]);
            for &o in &group {
                sent[o] = true;
                let at = round.next_seq(o);
                self.expect((&mut expect, at), &mut unsure[o], o, via, &members[o]);
            }
            if n <= 64 {
                let mut set = NodeSet::EMPTY;
                group.iter().for_each(|&o| set.insert(o));
                round.send_to(set, &request, replies);
            } else {
                group.iter().for_each(|&o| {
                    round.send(o, &request, replies);
                });
            }
        }
        // Nodes sent the script before their set-up was read (as in `script_round`): a refusal not read in the
        // round (a user without `+eval`) is followed by their native releases after it (below).
        let mut blind: Vec<bool> = (0..n)
            .map(|node| {
                !members[node].is_empty()
                    && !matches!(ways[node].last, Via::Native(_))
                    && self.restart.natives.unknown(&self.fanout, node)
            })
            .collect();
        // Per (node, entry): the ways its own command was tried (allocated only after a refusal).
        let mut tried: Vec<Option<Tried>> = Vec::new();
        // Nodes whose batch script was answered by an error and sent again key by key (see below).
        let mut unfolded = vec![false; n];
        round.need(need(tallies, &expect, &unsure));
        while let Some((id, reply)) = round.next().await {
            let node = id.node;
            let Some(what) = expect.take(id) else {
                continue; // an outcome nothing was sent for: never happens; count nothing
            };
            // Answered: a refusal is followed here. Timed out or dropped: it may run later, refused.
            if reply.is_ok() {
                blind[node] = false;
            }
            match what {
                Expect::Batch(via) => {
                    if let Some(why) = refused(&reply) {
                        if let Some(next) =
                            self.next_via(node, Script::Release, &mut ways[node], via, why)
                        {
                            request.clear();
                            let replies = encode(&mut request, next, batch, &members[node]);
                            let at = round.next_seq(node);
                            round.send(node, &request, replies);
                            self.expect(
                                (&mut expect, at),
                                &mut unsure[node],
                                node,
                                next,
                                &members[node],
                            );
                            round.need(need(tallies, &expect, &unsure));
                            continue;
                        }
                    }
                    // An error for the whole script (`NOPERM` for a key outside the user's patterns, checked before
                    // the script runs) must not cost the other callers their release: each key goes again as its own
                    // script, as it would alone, and gets its own answer.
                    if !unfolded[node] && members[node].len() > 1 && is_error(&reply) {
                        unfolded[node] = true;
                        let via = Script::Release.scripted();
                        request.clear();
                        for &j in &members[node] {
                            let e = &batch[j];
                            scripts::compare(
                                &mut request,
                                Script::Release,
                                via,
                                &e.resource,
                                &e.value,
                                0,
                            );
                        }
                        let at = round.next_seq(node);
                        round.send(node, &request, members[node].len());
                        let keys = members[node].iter().map(|&j| Expect::Key(j, via));
                        expect.expect(node, at, keys);
                        round.need(need(tallies, &expect, &unsure));
                        continue;
                    }
                    let votes = array_votes(&reply, members[node].len());
                    for (&j, vote) in members[node].iter().zip(votes) {
                        tallies[j].vote(node, vote);
                    }
                }
                Expect::Key(j, via) => {
                    if let Some(why) = refused(&reply) {
                        if tried.is_empty() {
                            tried = vec![None; n * k];
                        }
                        let t = tried[node * k + j].get_or_insert(Tried::new(via));
                        if let Some(next) = self.next_via(node, Script::Release, t, via, why) {
                            request.clear();
                            let e = &batch[j];
                            scripts::compare(
                                &mut request,
                                Script::Release,
                                next,
                                &e.resource,
                                &e.value,
                                0,
                            );
                            let at = round.next_seq(node);
                            round.send(node, &request, 1);
                            expect.expect(node, at, [Expect::Key(j, next)]);
                            round.need(need(tallies, &expect, &unsure));
                            continue;
                        }
                    } else if matches!(via, Via::Native(_)) {
                        // Ran, or no answer (a hung node is waited for once per connection, not every round).
                        self.restart.natives.note_ran(node, Script::Release);
                    }
                    tallies[j].vote(node, script_vote(&reply));
                }
            }
            match need(tallies, &expect, &unsure) {
                0 => break,
                more => round.need(more),
            }
        }
        // A blind node not answered: its native releases follow, unawaited (each compares and deletes the same
        // value, so whichever the node allows deletes the key; the others find nothing or are refused).
        if blind.iter().any(|&b| b) {
            drop(round);
            let mut late = self.fanout.release_round(self.clock.now());
            for node in (0..n).filter(|&node| blind[node]) {
                let mut one = NodeSet::EMPTY;
                one.insert(node);
                let pairs = members[node]
                    .iter()
                    .map(|&j| (&batch[j].resource[..], &batch[j].value[..]));
                let both = [Native::DelIfEq, Native::DelEx];
                natives_unawaited(&mut late, &mut request, one, &both, pairs);
            }
        }
    }

    /// Notes what `node`'s outcomes from id `at` on will answer once it is sent `members`' keys `via` that way.
    fn expect(
        &self,
        (expect, at): (&mut Awaiting<Expect>, u32),
        unsure: &mut bool,
        node: usize,
        via: Via,
        members: &[usize],
    ) {
        match via {
            Via::Sha | Via::Full => expect.expect(node, at, [Expect::Batch(via)]),
            Via::Native(_) => {
                expect.expect(node, at, members.iter().map(|&j| Expect::Key(j, via)));
                *unsure |= !self.restart.natives.ran(node, Script::Release);
            }
        }
    }
}

/// Whether `reply` is an error reply (not a failure to get one).
fn is_error(reply: &crate::net::Reply) -> bool {
    use crate::resp::Value;
    matches!(
        reply.as_ref().map(Value::without_attributes),
        Ok(Value::Error(_) | Value::BulkError(_))
    )
}

/// Encodes the release of `members`' keys `via` that way: one batch script, or one native command per key.
/// Returns how many replies it asks for.
fn encode(buf: &mut BytesMut, via: Via, batch: &[Arc<Entry>], members: &[usize]) -> usize {
    match via {
        Via::Sha | Via::Full => {
            let keys: Vec<&[u8]> = members.iter().map(|&j| &batch[j].resource[..]).collect();
            let vals: Vec<&[u8]> = members.iter().map(|&j| &batch[j].value[..]).collect();
            lua::eval(buf, lua::RELEASE_BATCH, via == Via::Full, &keys, &vals);
            1
        }
        Via::Native(_) => {
            for &j in members {
                scripts::compare(
                    buf,
                    Script::Release,
                    via,
                    &batch[j].resource,
                    &batch[j].value,
                    0,
                );
            }
            members.len()
        }
    }
}

/// How many more outcomes are worth waiting for: while some release is undecided, the fewest confirmations one
/// of them still needs (an outcome is at most one vote for each); then the native commands still unanswered on
/// nodes that may refuse them; 0 to end the round.
fn need(tallies: &[Tally<'_>], expect: &Awaiting<Expect>, unsure: &[bool]) -> usize {
    if let Some(fewest) = tallies.iter().map(Tally::needed).filter(|&m| m > 0).min() {
        return fewest;
    }
    unsure
        .iter()
        .enumerate()
        .filter(|(_, unsure)| **unsure)
        .map(|(node, _)| {
            expect
                .of(node)
                .filter(|x| matches!(x, Expect::Key(_, Via::Native(_))))
                .count()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::test_peer::{Peer, block_on};
    use std::time::Duration;

    /// The gate is handed to a caller that blocks its thread before a task queued ahead of it: a task may never be
    /// polled again (its executor's thread parked in that very blocking release), a blocking caller runs the round
    /// to its end. The batch goes to its leader whole; the task stays queued in it, its verdict to come.
    #[test]
    fn the_gate_goes_to_a_blocking_caller_before_a_task_queued_ahead_of_it() {
        let e = crate::redlock::engine::test_engine(vec![crate::net::test_peer::nobody()]);
        assert!(e.fold.enter(b"lead", b"v", NodeSet::ALL).is_none());
        let task = e.fold.enter(b"task", b"v", NodeSet::ALL).expect("queued");
        let thread = e.fold.enter(b"thread", b"v", NodeSet::ALL).expect("queued");
        assert!(task.step(|| Waiter::Task(Waker::noop().clone())).is_none());
        assert!(
            thread
                .step(|| Waiter::Thread(std::thread::current()))
                .is_none()
        );
        assert!(thread.blocks() && !task.blocks());
        e.fold_finish();
        match thread.step(|| Waiter::Thread(std::thread::current())) {
            Some(Step::Lead(batch)) => {
                let names: Vec<&[u8]> = batch.iter().map(|x| &x.resource[..]).collect();
                assert_eq!(names, [&b"task"[..], b"thread"]);
            }
            _ => panic!("the blocking caller was not made the batch's leader"),
        }
        assert!(
            task.step(|| Waiter::Task(Waker::noop().clone())).is_none(),
            "the task was told to lead or given a verdict"
        );
    }

    /// A caller whose turn does not come (the round in flight is run by a task nobody polls) waits a round
    /// timeout in the queue, then leaves it and releases alone; one already in a batch waits three, then leaves
    /// the batch (abandoned: the batch may still release it) and releases alone. Sooner, it waits on.
    #[test]
    fn a_release_whose_turn_does_not_come_leaves_the_queue_after_a_round_and_its_batch_after_three()
    {
        let mut e = crate::redlock::engine::test_engine(vec![crate::net::test_peer::nobody()]);
        // Long enough that the test's own pace never reaches the next bound.
        let round = Duration::from_secs(60);
        e.config = e.config.with_round_timeout(round);
        let ago = |d: Duration| {
            e.clock
                .now()
                .checked_sub(d)
                .expect("the monotonic clock has run that long")
        };
        let second = Duration::from_secs(1);
        assert!(e.fold.enter(b"lead", b"v", NodeSet::ALL).is_none());
        let queued = Follower {
            engine: &e,
            entry: e.fold.enter(b"queued", b"v", NodeSet::ALL).expect("queued"),
        };
        assert!(
            queued.give_up(ago(round - second)).is_none(),
            "in its first round"
        );
        assert!(
            matches!(queued.give_up(ago(round)), Some(Step::Alone(false))),
            "still queued after a round timeout"
        );
        assert!(!e.fold.withdraw(&queued.entry), "it left the queue");
        // Another caller, taken into the next batch, whose leader does not run it.
        let batched = Follower {
            engine: &e,
            entry: e
                .fold
                .enter(b"batched", b"v", NodeSet::ALL)
                .expect("queued"),
        };
        let batch = e.fold.next_batch(16).expect("a batch");
        assert_eq!(batch.len(), 1);
        for waited in [round, round * 3 - second] {
            assert!(
                batched.give_up(ago(waited)).is_none(),
                "in a batch for {waited:?}"
            );
        }
        assert!(
            matches!(batched.give_up(ago(round * 3)), Some(Step::Alone(true))),
            "still in its batch after three round timeouts"
        );
        assert!(lock(&batched.entry.slot).abandoned);
    }

    /// A caller in a batch whose verdict came, or that was made the leader, in the moment before it looked at the
    /// clock does not leave the batch however long it waited: it takes its verdict, or leads (leaving, it would
    /// lose the verdict and release its key again, or leave its batch with no leader).
    #[test]
    fn a_release_past_its_bound_that_has_its_verdict_or_the_lead_stays_in_its_batch() {
        let mut e = crate::redlock::engine::test_engine(vec![crate::net::test_peer::nobody()]);
        let round = Duration::from_secs(60);
        e.config = e.config.with_round_timeout(round);
        let long_ago = e
            .clock
            .now()
            .checked_sub(round * 4)
            .expect("the monotonic clock has run that long");
        assert!(e.fold.enter(b"lead", b"v", NodeSet::ALL).is_none());
        let answered = Follower {
            engine: &e,
            entry: e
                .fold
                .enter(b"answered", b"v", NodeSet::ALL)
                .expect("queued"),
        };
        assert_eq!(e.fold.next_batch(16).map(|b| b.len()), Some(1));
        answered.entry.deliver(Ok(1));
        assert!(
            answered.give_up(long_ago).is_none(),
            "it left with its verdict in"
        );
        let slot = lock(&answered.entry.slot);
        assert!(
            !slot.abandoned && matches!(slot.state, State::Done(Ok(1))),
            "{slot:?}"
        );
        drop(slot);
        let leader = Follower {
            engine: &e,
            entry: e.fold.enter(b"leader", b"v", NodeSet::ALL).expect("queued"),
        };
        let batch = e.fold.next_batch(16).expect("a batch");
        lock(&leader.entry.slot).state = State::Lead(batch);
        assert!(
            leader.give_up(long_ago).is_none(),
            "it left the batch it leads"
        );
        assert!(!lock(&leader.entry.slot).abandoned);
    }

    /// Two releases folded, `a` held on the three nodes and `b` on nodes 1 and 2 only: node 0 is sent `a`'s key
    /// alone, nodes 1 and 2 one request with both keys. Each node gets the keys held there, never another node's
    /// (each outcome is read as the answer for its node's own keys: another node's request would count `a`'s
    /// deletion as `b`'s, and leave `b` on the node).
    #[test]
    fn a_fold_sends_each_node_the_keys_held_there() {
        let peers: Vec<Peer> = (0..3).map(|_| Peer::start()).collect();
        let e = crate::redlock::engine::test_engine(peers.iter().map(Peer::addr).collect());
        assert!(
            e.fold.enter(b"lead", b"v", NodeSet::ALL).is_none(),
            "the gate was open"
        );
        let mut on_1_and_2 = NodeSet::EMPTY;
        on_1_and_2.insert(1);
        on_1_and_2.insert(2);
        let a = e.fold.enter(b"a", b"va", NodeSet::ALL).expect("queued");
        let b = e.fold.enter(b"b", b"vb", on_1_and_2).expect("queued");
        let batch = vec![a, b];
        let mut tallies: Vec<Tally<'_>> = batch
            .iter()
            .map(|x| Tally::new(&e.votes, 3, e.quorum(), x.nodes))
            .collect();
        block_on(e.release_folded(&batch, &mut tallies));
        let has = |args: &[Vec<u8>], key: &[u8]| args.iter().any(|x| x == key);
        for (node, peer) in peers.iter().enumerate() {
            let first = peer.log().into_iter().map(|(_, args)| args).next();
            let first = first.expect("a request");
            assert!(has(&first, b"a"), "node {node}: {first:?}");
            assert_eq!(has(&first, b"b"), node > 0, "node {node}: {first:?}");
        }
    }
}
