//! [`Guard`]: a lock held for as long as the holder needs it. The manager's watchdog renews it in the background,
//! and the guard says — before the lease ends — when the holder can no longer rely on it.
//!
//! # When a guard is lost
//!
//! - **At once**, when the watchdog learns that too few nodes still hold the guard's value for a majority: a
//!   renewal found the key gone or overwritten, or (on nodes that speak RESP3) an invalidation from client-side
//!   tracking led to a check that found it so ([`Lost::Taken`]); or a renewal found the nodes that still hold it
//!   too few once those that are down are counted out ([`Lost::Down`]), or once those whose clocks disagree with
//!   this client's are ([`Lost::Clock`]: the clock check saw a jump, a clock running fast, or one behind).
//! - **By time**, at [`Guard::deadline`]: the end of the lease as last confirmed, minus a margin, if no renewal has
//!   confirmed a majority by then (nodes down or unreachable, or the holder's process paused past it).
//!   [`Lost::Expired`]. This needs no thread to fire: a holder that wakes from a pause sees
//!   [`is_lost`](Guard::is_lost) true at once.
//!
//! A lost guard is never renewed again: an extension cannot revive an expired lock.
//!
//! # When a guard is renewed, and until when it is relied on
//!
//! Both come from the lease the guard holds (`HeldState::valid_until`: the end of the lease last confirmed by a
//! majority, on this process' clock), never from the TTL it asked for. The lease is shorter than the TTL by the
//! drift allowance, and a fresh lock's also by its acquisition's rounds, which can be long: a patient acquisition
//! may last a third of the TTL, and a fenced lock's confirmation rounds come after the grant its validity counts
//! from. The deadline is that lease minus the margin (the margin alone comes from the TTL: the time the holder
//! needs to stop its work); the next renewal is due a third of what is left of the lease later, and no later than
//! a round timeout before the deadline, so that a renewal whose round takes all of it is still confirmed in time
//! (no sooner than a third of the time left before the deadline, though: `schedule::renewal_due`). A renewal's verdict sets the lease, and so the next due time, afresh. Counted from
//! the TTL, a first renewal would come due a third of the TTL after the guard was made, past the point where it can
//! be confirmed before a short lease's deadline: a guard lost with every node answering
//! (`simulation::a_guard_renews_from_the_lease_it_holds_not_the_ttl_asked_directed`).

pub(crate) mod turns;
pub(crate) mod watchdog;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::net::{NodeError, NodeSet};
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::renew::Renewal;
use crate::redlock::engine::seam::{Clock, Nodes, block};
use crate::redlock::engine::{Engine, is_gone};
use crate::redlock::error::{Error, Outcome, Result};
use crate::redlock::guard::watchdog::Watchdog;
use crate::redlock::kind::Lock;
use crate::redlock::kind::owned::Owner;
use crate::redlock::kind::queued::HandOn;
use crate::redlock::kind::{self, Kind};
use crate::redlock::lost::Lost;
use crate::redlock::observe;
use crate::redlock::quorum::Failure;
use crate::redlock::schedule::{GuardId, lost_margin, renewal_due, retry_due};
use crate::redlock::stats::Activity;
use crate::redlock::token;
use crate::redlock::waiters::WaitRoom;
use crate::sync::lock;
use turns::Turns;

/// What a manager's handles and its guards share: the engine, the watchdog that renews the guards (its thread
/// holds only a `Weak` on this), this process' waiters, and what guards and waiters did. The last handle or
/// guard to go stops the watchdog.
#[derive(Debug)]
pub(crate) struct Keeper {
    pub(crate) engine: Engine,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) waits: WaitRoom,
    /// The turn listener of this manager's waiters in the nodes' queues (`turns.rs`).
    pub(crate) turns: Turns,
    pub(crate) activity: Activity,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.watchdog.stop();
        self.turns.stop();
        // Task guards dropped last (a service's end): their queued releases run here, or nobody would run them. All
        // of them at once, bounded by one release round (a plain lock's is patient: up to 40 round timeouts while
        // nodes answer slowly).
        self.release_all(self.watchdog.take_releases());
    }
}

impl Keeper {
    /// Puts a freshly acquired lock of any kind under the watchdog: renewed and released as its kind is.
    pub(crate) fn guard(self: &Arc<Keeper>, lock: Lock, ttl: Duration) -> Guard {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let margin = lost_margin(ttl, self.engine.config.round_timeout);
        let held = Arc::new(Held::new(
            self.watchdog.next_id(),
            lock,
            ttl,
            ttl_ms,
            margin,
        ));
        let due = held.due(self.engine.clock.now(), self.engine.config.round_timeout);
        self.watchdog.add(&held, due);
        Activity::add(&self.activity.guards, 1);
        self.watchdog.ensure_started(Arc::downgrade(self));
        Guard {
            keeper: Arc::clone(self),
            held,
            released: false,
            background: false,
        }
    }

    /// Releases the guards `helds` (dropped by tasks) all at once: their rounds go out together and are awaited
    /// together on this thread (a task-style poll, not under `block`: one round trip for all; one round after the
    /// other would starve the renewals of the other guards behind a burst of drops).
    /// Best effort, as a guard's drop is: an error leaves a key to expire with its lease. Plain locks' releases
    /// are patient rounds: while a majority's nodes answer slowly this thread (the watchdog's) waits for them, up
    /// to 40 round timeouts, and renewals due meanwhile wait too (they could not be confirmed by those nodes in a
    /// round timeout anyway).
    pub(crate) fn release_all(&self, helds: Vec<Arc<Held>>) {
        if helds.is_empty() {
            return;
        }
        let mut ends: Vec<_> = helds
            .iter()
            .map(|held| Some(Box::pin(self.end_guard(held))))
            .collect();
        let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
        let mut cx = Context::from_waker(&waker);
        while ends.iter().any(Option::is_some) {
            for end in &mut ends {
                if let Some(f) = end
                    && f.as_mut().poll(&mut cx).is_ready()
                {
                    *end = None;
                }
            }
            if ends.iter().any(Option::is_some) {
                // Woken by the driver that files an outcome; the timeout only bounds a missed wake-up.
                std::thread::park_timeout(Duration::from_millis(5));
            }
        }
    }

    /// Ends a guard: no more renewals, and [`end`]; then this process' waiters look.
    pub(crate) fn release(&self, held: &Held) -> Result<usize> {
        block(self.end_guard(held))
    }

    /// [`release`](Keeper::release) as a future: blocking under `block`, never blocking under an executor.
    pub(crate) async fn end_guard(&self, held: &Held) -> Result<usize> {
        self.watchdog.forget(held);
        Activity::add(&self.activity.guards_ended, 1);
        let engine = &self.engine;
        let op = observe::start(
            "release",
            held.kind.label(),
            engine.fanout.len(),
            engine.quorum(),
        );
        let released = op.instrument(end(engine, held)).await;
        op.finish(&released, None);
        held.kind
            .resources(&held.resource)
            .iter()
            .for_each(|r| self.waits.notify(r));
        released
    }
}

/// Ends a guard on the nodes: marked released (so it is never renewed again), and its lock released through the
/// engine directly, as its kind is released. Generic over the seam, as [`renew`] is.
pub(crate) async fn end<N: Nodes, C: Clock>(engine: &Engine<N, C>, held: &Held) -> Result<usize> {
    held.set_lost(Lost::Released, None);
    kind::release(engine, &held.lock()).await
}

/// Marks a guard lost, and counts it.
pub(crate) fn lose(activity: &Activity, g: &Held, why: Lost) {
    observe::lost(&why);
    g.set_lost(why, Some(&activity.lost));
}

/// One renewal of each guard in `guards`, all in one round of the engine. Returns, per guard, when to renew it
/// next, or `None` if it is lost (its state says why, and whoever waits on it was woken).
///
/// A renewal counts only if a majority confirms it before the guard's deadline (its lease minus the margin):
/// a lost guard is never revived. A renewal that fails for want of answers is tried again soon, until the
/// deadline; one that finds the key gone or taken on too many nodes, or those nodes down (refusing or closing
/// connections: a node that restarts without persistence comes back without the key), ends the guard at once.
///
/// Generic over the engine's seam, so that the simulator renews guards on its virtual clock as the watchdog
/// does on the real one.
pub(crate) async fn renew<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    activity: &Activity,
    guards: &[Arc<Held>],
) -> Vec<Option<Instant>> {
    let now = engine.clock.now();
    let mut next = vec![None; guards.len()];
    // The guards still worth renewing, and until when each renewal must be confirmed.
    let mut live: Vec<(usize, Instant, NodeSet)> = Vec::with_capacity(guards.len());
    for (i, g) in guards.iter().enumerate() {
        let s = lock(&g.state);
        if let Some(lost) = g.lost_at(&s, now) {
            drop(s);
            lose(activity, g, lost);
            continue;
        }
        live.push((i, g.deadline_of(&s), s.nodes));
    }
    if live.is_empty() {
        return next;
    }
    let renewals: Vec<Renewal<'_>> = live
        .iter()
        .map(|&(i, decide_by, _)| {
            let g = &guards[i];
            Renewal {
                resource: &g.resource,
                value: &g.value,
                script: kind::extension(&g.kind, &g.resource, &g.value, engine.fanout.routed()),
                ttl: g.ttl,
                ttl_ms: g.ttl_ms,
                acquired: g.acquired,
                decide_by,
            }
        })
        .collect();
    let (start, renewed) = engine.renew(&renewals).await;
    Activity::add(&activity.renewal_rounds, 1);
    for (&(i, _, _), renewed) in live.iter().zip(renewed) {
        let g = &guards[i];
        next[i] = settle(
            engine,
            activity,
            g,
            start,
            renewed.verdict,
            renewed.outcomes,
        );
    }
    next
}

/// Applies one renewal's verdict to a guard; returns when to renew it next, `None` if it is lost.
fn settle<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    activity: &Activity,
    g: &Held,
    start: Instant,
    verdict: std::result::Result<Instant, Failure>,
    outcomes: Vec<crate::redlock::error::Outcome>,
) -> Option<Instant> {
    let n = engine.fanout.len();
    let quorum = engine.quorum();
    let now = engine.clock.now();
    let mut s = lock(&g.state);
    if verdict.is_err() {
        // The renewal may have run on nodes whose replies did not count: never a shorter lease than the guard's
        // (it renews to its own TTL, later than the lease it has), but the rule is the extension's.
        s.valid_until = engine.after_failed_extension(s.valid_until, start, g.ttl);
    }
    let deadline = g.deadline_of(&s);
    match verdict {
        // Confirmed in time, and nobody can have seen the guard lost yet (that is decided under this lock).
        Ok(valid_until) if s.lost.is_none() && now < deadline => {
            s.valid_until = valid_until;
            s.renewals += 1;
            observe::renewed(valid_until.saturating_duration_since(now));
            Activity::add(&activity.renewals, 1);
            s.last_error = None;
            let due = g.due_of(&s, start, engine.config.round_timeout);
            drop(s);
            g.changed.notify_all();
            g.wake_tasks();
            return Some(due);
        }
        Ok(_) => {
            drop(s);
            lose(activity, g, Lost::Expired(None));
            return None;
        }
        Err(_) => {}
    }
    let report = Box::new(engine.report(&g.resource, outcomes, quorum));
    let taken = report.taken();
    let gone = report.nodes.iter().filter(|(_, o)| is_gone(o)).count();
    if taken > n - quorum {
        drop(s);
        lose(activity, g, Lost::Taken(report));
        return None;
    }
    if taken + gone > n - quorum {
        drop(s);
        lose(activity, g, Lost::Down(report));
        return None;
    }
    // Clocks that disagree: a copy of the key on a node whose clock jumped forward or runs fast may expire early
    // (it may have already), so the lock is not counted on there; nothing says it comes back before the lease
    // ends, and another client's acquisition does not count those nodes either.
    let clocks = report
        .nodes
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Failed(NodeError::Clock(_))))
        .count();
    if clocks > 0 && taken + gone + clocks > n - quorum {
        drop(s);
        lose(activity, g, Lost::Clock(report));
        return None;
    }
    s.last_error = Some(Error::Quorum(report));
    if now >= deadline {
        let last = s.last_error.take().map(Box::new);
        drop(s);
        lose(activity, g, Lost::Expired(last));
        return None;
    }
    Some(retry_due(now, g.ttl, engine.config.round_timeout, deadline))
}

/// Wakes a thread parked in [`Keeper::release_all`].
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// What a guard, its watches and the watchdog share.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) id: GuardId,
    pub(crate) resource: Vec<u8>,
    pub(crate) value: token::Value,
    pub(crate) ttl: Duration,
    pub(crate) ttl_ms: u64,
    /// When the acquisition round started (see [`Lock`]'s field of that name).
    pub(crate) acquired: Instant,
    /// How long before the end of the lease the guard counts as lost without a confirmed renewal.
    pub(crate) margin: Duration,
    /// The lock's kind: how it is renewed and released (a set's keys together, a fenced lock by the fenced
    /// release, an owned hold by its own field).
    pub(crate) kind: Kind,
    /// The line's queue a release hands the key on to (a plain lock taken by a waiting request).
    pub(crate) hand_on: Option<Box<HandOn>>,
    pub(crate) state: Mutex<HeldState>,
    /// Notified whenever `state` changes (renewed, lost).
    pub(crate) changed: Condvar,
    /// The wakers of tasks awaiting the loss ([`LostWatch::until_lost`]), woken with `changed`.
    tasks: Mutex<Vec<Waker>>,
}

#[derive(Debug)]
pub(crate) struct HeldState {
    /// The lease's end as last confirmed by a majority (local monotonic clock, drift allowed for).
    pub(crate) valid_until: Instant,
    /// The nodes the acquisition's `SET` was queued for.
    pub(crate) nodes: NodeSet,
    pub(crate) lost: Option<Lost>,
    pub(crate) renewals: u64,
    /// Why the last renewal did not confirm, if it did not.
    pub(crate) last_error: Option<Error>,
}

impl Held {
    pub(crate) fn new(
        id: GuardId,
        lock: Lock,
        ttl: Duration,
        ttl_ms: u64,
        margin: Duration,
    ) -> Held {
        let Lock {
            lease,
            kind,
            hand_on,
        } = lock;
        Held {
            id,
            resource: lease.resource,
            value: lease.value,
            ttl,
            ttl_ms,
            acquired: lease.acquired,
            margin,
            kind,
            hand_on,
            state: Mutex::new(HeldState {
                valid_until: lease.valid_until,
                nodes: lease.nodes,
                lost: None,
                renewals: 0,
                last_error: None,
            }),
            changed: Condvar::new(),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// Wakes the tasks awaiting the loss (a change they look at: a loss, a renewal that moves the deadline).
    pub(crate) fn wake_tasks(&self) {
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        tasks.into_iter().for_each(Waker::wake);
    }

    /// The lock as it stands: the lease last confirmed, on the nodes its acquisition was sent to.
    pub(crate) fn lock(&self) -> Lock {
        let s = lock(&self.state);
        let mut held = Lock::new(
            Lease::new(
                self.resource.clone(),
                self.value,
                (self.acquired, s.valid_until),
                s.nodes,
            ),
            self.kind.clone(),
        );
        held.hand_on = self.hand_on.clone();
        held
    }

    /// When to renew the guard next, its lease confirmed at `confirmed` (a renewal's round start, or the guard's
    /// making): from the lease it holds, [`renewal_due`] (a third of what is left, a round before the deadline if
    /// that is sooner), never from the TTL asked.
    pub(crate) fn due(&self, confirmed: Instant, round_timeout: Duration) -> Instant {
        let s = lock(&self.state);
        self.due_of(&s, confirmed, round_timeout)
    }

    /// As [`due`](Held::due), with the state at hand.
    pub(crate) fn due_of(
        &self,
        s: &HeldState,
        confirmed: Instant,
        round_timeout: Duration,
    ) -> Instant {
        renewal_due(confirmed, s.valid_until, self.deadline_of(s), round_timeout)
    }

    /// Until when the holder may rely on the lock: the confirmed lease minus the margin.
    pub(crate) fn deadline_of(&self, s: &HeldState) -> Instant {
        s.valid_until
            .checked_sub(self.margin)
            .unwrap_or(s.valid_until)
    }

    /// Why the guard is lost at `now`, if it is.
    pub(crate) fn lost_at(&self, s: &HeldState, now: Instant) -> Option<Lost> {
        if let Some(lost) = &s.lost {
            return Some(lost.clone());
        }
        (now >= self.deadline_of(s)).then(|| Lost::Expired(s.last_error.clone().map(Box::new)))
    }

    /// Marks the guard lost (the first reason wins) and wakes whoever waits on it. A first loss is counted in
    /// `counter` before anyone is woken, so that a holder woken by it reads it in
    /// [`LockManager::stats`](crate::redlock::LockManager::stats) (`tests/threads/guard_room.rs` saw the count lag the wake-up).
    pub(crate) fn set_lost(&self, lost: Lost, counter: Option<&AtomicU64>) {
        let mut s = lock(&self.state);
        if s.lost.is_none() {
            s.lost = Some(lost);
            if let Some(counter) = counter {
                Activity::add(counter, 1);
            }
        }
        drop(s);
        self.changed.notify_all();
        self.wake_tasks();
    }

    fn wait_lost(&self, timeout: Duration) -> bool {
        let until = crate::time::later(Instant::now(), timeout);
        let mut s = lock(&self.state);
        loop {
            let now = Instant::now();
            if self.lost_at(&s, now).is_some() {
                return true;
            }
            if now >= until {
                return false;
            }
            // Wake at the earlier of the timeout and the deadline; a renewal moves the deadline and notifies.
            let wait = until
                .min(self.deadline_of(&s))
                .saturating_duration_since(now);
            s = match self.changed.wait_timeout(s, wait) {
                Ok((s, _)) => s,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

/// A lock held until dropped or [released](Guard::release), renewed in the background by the manager's watchdog
/// (at a third of the lease it holds, about a third of the TTL, and a round timeout before its
/// [deadline](Guard::deadline) at the latest; all guards that fall due together in one batch), which can tell the
/// holder — before the lease ends — that it can no longer rely on the lock.
///
/// Check [`is_lost`](Guard::is_lost) before each step that needs the lock, or block on
/// [`wait_lost`](Guard::wait_lost) (or a [`LostWatch`] in another thread) to stop work as soon as it is lost.
/// Dropping a guard releases the lock (best effort). The release of a plain lock is a patient round (see
/// [`Config::round_timeout`](crate::Config::round_timeout)): a down or hung node costs it one round timeout, but
/// while a majority's nodes are answering slowly (overload) the dropping thread waits for them, up to 40 round
/// timeouts (2 s at the default); the other kinds' releases take at most one round timeout.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use muxlock::LockManager;
///
/// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
/// let guard = locks.request("nightly-report").ttl(Duration::from_secs(30)).hold()?;
/// for chunk in 0..1_000 {
///     if guard.is_lost() {
///         eprintln!("lock lost: {}", guard.lost().map(|l| l.to_string()).unwrap_or_default());
///         break;
///     }
///     // ... process chunk, for as long as it takes: the watchdog keeps the lock alive ...
/// }
/// guard.release()?;
/// # Ok::<(), muxlock::Error>(())
/// ```
#[must_use = "a guard releases its lock when dropped"]
#[derive(Debug)]
pub struct Guard {
    keeper: Arc<Keeper>,
    held: Arc<Held>,
    released: bool,
    /// Made for a task ([`Request::hold_async`](crate::redlock::Request::hold_async)): dropping it releases on
    /// the watchdog's thread instead of blocking the executor's.
    background: bool,
}

impl Guard {
    /// The locked resource's name (the Redis key); for a guard of a set, the first of its names (sorted).
    pub fn resource(&self) -> &[u8] {
        &self.held.resource
    }

    /// Every resource: the one resource, or a set's names (sorted, without duplicates).
    pub fn resources(&self) -> &[Vec<u8>] {
        self.held.kind.resources(&self.held.resource)
    }

    /// The owner of a guard over an [owned](crate::redlock::Request::owned) (reentrant) hold, `None` for other
    /// kinds.
    pub fn owner(&self) -> Option<&Owner> {
        self.held.kind.owner()
    }

    /// The value stored in the key on each node (40 hex digits): this acquisition's own, unique; for an owned
    /// hold, the owner's, shared by all its holds (releasing by that value with
    /// [`unlock_value`](crate::redlock::LockManager::unlock_value) would end every hold of the owner).
    pub fn value(&self) -> &str {
        std::str::from_utf8(&self.held.value).unwrap_or_default()
    }

    /// The instant until which the holder may rely on the lock, as things stand: the end of the lease last
    /// confirmed by a majority, minus a margin (a tenth of the TTL, at least two round timeouts, at most half the
    /// TTL). Each confirmed renewal moves it later. Past it, the guard is lost.
    pub fn deadline(&self) -> Instant {
        self.watch().deadline()
    }

    /// Whether the holder can no longer rely on the lock: lost on the nodes, past its [deadline](Guard::deadline)
    /// with no renewal confirmed, or released. Cheap (no I/O); call it before every step that needs the lock.
    pub fn is_lost(&self) -> bool {
        self.lost().is_some()
    }

    /// Why the lock is lost, if it is.
    pub fn lost(&self) -> Option<Lost> {
        self.watch().lost()
    }

    /// Blocks until the lock is lost or `timeout` passes; `true` if lost. Returns at the deadline at the latest
    /// if no renewal comes.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.held.wait_lost(timeout)
    }

    /// A handle on this guard's state for another thread: it can wait for the loss while this one works.
    pub fn watch(&self) -> LostWatch {
        LostWatch {
            held: Arc::clone(&self.held),
        }
    }

    /// The fencing token of a guard over a [fenced](crate::redlock::Request::fenced) lock, `None` for other
    /// kinds. Renewals do not change it.
    pub fn token(&self) -> Option<u64> {
        self.held.kind.token()
    }

    /// How a guard over a read-write lock holds it ([`read`](crate::redlock::Request::read) or
    /// [`write`](crate::redlock::Request::write)), `None` for other kinds.
    pub fn access(&self) -> Option<crate::redlock::kind::rwlock::Access> {
        self.held.kind.access()
    }

    /// The index of the permit held by a guard over a semaphore's [permit](crate::redlock::Request::permits),
    /// `None` for other kinds.
    pub fn permit(&self) -> Option<u32> {
        self.held.kind.permit()
    }

    /// How many times the watchdog has renewed the lease.
    pub fn renewals(&self) -> u64 {
        lock(&self.held.state).renewals
    }

    /// Makes this guard's drop release on the watchdog's thread (a guard held by a task).
    pub(crate) fn in_background(mut self) -> Guard {
        self.background = true;
        self
    }

    /// As [`release`](Guard::release), as a future that never blocks the executor's thread.
    ///
    /// # Errors
    ///
    /// As [`release`](Guard::release).
    pub async fn release_async(mut self) -> Result<usize> {
        let released = self.keeper.end_guard(&self.held).await;
        // Only now: a release future dropped part-way leaves the guard's drop to release again (idempotent).
        self.released = true;
        released
    }

    /// A future that completes with why the lock is lost — at once if it is, else when a renewal finds it lost or
    /// its [deadline](Guard::deadline) passes with no renewal confirmed — for `select!` beside the work it
    /// guards. Never blocks; needs no runtime (the crate's timer thread wakes it at the deadline).
    pub fn until_lost(&self) -> impl std::future::Future<Output = Lost> + Send + use<> {
        self.watch().until_lost()
    }

    /// Stops the renewals and releases the lock on all nodes at once; returns what
    /// [`LockManager::unlock`](crate::redlock::LockManager::unlock) returns.
    ///
    /// # Errors
    ///
    /// As [`LockManager::unlock`](crate::redlock::LockManager::unlock): [`Error::LockLost`](crate::Error::LockLost)
    /// if no majority can still have held the key (the guard was lost before, e.g. its renewals failed: the work
    /// under it may have overlapped another holder's), [`Error::Quorum`](crate::Error::Quorum) if the release is
    /// unconfirmed. Dropping a guard instead releases it the same way and ignores the result.
    pub fn release(mut self) -> Result<usize> {
        self.released = true;
        self.keeper.release(&self.held)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.background {
            // A task's guard: released on the watchdog's thread, never blocking the executor's.
            self.keeper
                .watchdog
                .release_later(Arc::clone(&self.held), Arc::downgrade(&self.keeper));
            return;
        }
        // Best effort, bounded by the release's round (a plain lock's is patient: up to 40 round timeouts while
        // nodes answer slowly); an error leaves the key to expire with its lease.
        let _ = self.keeper.release(&self.held);
    }
}

/// Another thread's view of a [`Guard`]: whether the lock is lost, until when the holder may rely on it, and a
/// way to wait for the loss. Cheap to clone; it does not keep the lock (the guard does).
#[derive(Clone, Debug)]
pub struct LostWatch {
    held: Arc<Held>,
}

impl LostWatch {
    /// As [`Guard::deadline`].
    pub fn deadline(&self) -> Instant {
        let s = lock(&self.held.state);
        self.held.deadline_of(&s)
    }

    /// As [`Guard::is_lost`].
    pub fn is_lost(&self) -> bool {
        self.lost().is_some()
    }

    /// As [`Guard::lost`].
    pub fn lost(&self) -> Option<Lost> {
        let s = lock(&self.held.state);
        self.held.lost_at(&s, Instant::now())
    }

    /// As [`Guard::wait_lost`].
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.held.wait_lost(timeout)
    }

    /// As [`Guard::until_lost`].
    pub fn until_lost(&self) -> impl Future<Output = Lost> + Send + use<> {
        let held = Arc::clone(&self.held);
        let mut timer: Option<(Instant, crate::timer::Sleep)> = None;
        poll_fn(move |cx| {
            // The waker first, the state then: a loss filed in between wakes this task.
            {
                let mut tasks = lock(&held.tasks);
                if !tasks.iter().any(|w| w.will_wake(cx.waker())) {
                    tasks.push(cx.waker().clone());
                }
            }
            let now = Instant::now();
            let (lost, deadline) = {
                let s = lock(&held.state);
                (held.lost_at(&s, now), held.deadline_of(&s))
            };
            if let Some(lost) = lost {
                return Poll::Ready(lost);
            }
            // Woken at the deadline (the loss by time), or sooner by a renewal or a loss.
            if timer.as_ref().is_none_or(|(at, _)| *at != deadline) {
                timer = Some((
                    deadline,
                    crate::timer::sleep(deadline.saturating_duration_since(now)),
                ));
            }
            if let Some((_, t)) = timer.as_mut()
                && Pin::new(t).poll(cx).is_ready()
            {
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        })
    }
}
