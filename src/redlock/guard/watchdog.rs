//! The watchdog: one thread per manager that renews every guard's lease, and listens for changes to the keys of
//! guards and waiters.
//!
//! # What it does, each turn
//!
//! 1. **Renews the guards that are due** ([`Schedule`]: at a third of the lease left, a round before the deadline
//!    at the latest; soon again after an undecided attempt), all of them in one round on the manager's connections: every due guard's compare-and-pexpire
//!    script pipelined, so a tick costs one write per node whatever the number of guards (in chunks that stay well
//!    under a node's request bound).
//! 2. **Checks the guards' keys it was told about**: a `GET` of each, on the *tracker* connections, which both
//!    reads the key on every node and arms Redis' client-side tracking for it. A guard whose value enough nodes
//!    no longer hold for a majority is lost at once.
//! 3. **Waits** for the next renewal, in [`Fanout::recv_pushes`] on the tracker connections: an invalidation push
//!    (the key was deleted, overwritten, or expired and removed) puts a guard's key on the list for step 2, and
//!    wakes the key's waiters at once (waiters arm the tracking themselves: see `Request::wait`);
//!    [`Watchdog::poke`] wakes it for new work. A tracker connection that was made anew has forgotten what it
//!    tracked: every guard's key is checked again and every waiter woken.
//!
//! # Why client-side tracking, not pub/sub
//!
//! The other way to hear of a release is a channel per resource that the release script publishes to. It hears
//! only releases made by that script: not a lease that expires (the common end of a crashed holder's lock), not a
//! key deleted or overwritten by an operator or another client, and it costs every release a `PUBLISH` whether
//! anyone waits or not. Tracking is told of every change to a key the connection read, whoever made it, expiry
//! included, and costs nothing when nobody tracks the key. The price is a `GET` to arm it (per waiter's probe, per
//! guard after each change) and the need for RESP3.
//!
//! # Why a second set of connections
//!
//! Tracking needs RESP3 (`HELLO 3`) and `CLIENT TRACKING ON`, and its pushes need a thread that polls while the
//! holders work. On the manager's own connections that thread would take the poll from callers, and every lone
//! caller would have to hand its replies over. The tracker's connections are polled by the watchdog alone; the
//! callers' rounds never wait for it. A node that refuses RESP3 or tracking (Redis before 6) sends no pushes:
//! guards are then checked at each renewal only, and waiters wake on their timer (the holder's remaining TTL) or
//! on a release in this process.
//!
//! # Invariants
//!
//! - The thread holds only a `Weak` on the manager's [`Keeper`]: when the last handle and guard are gone, its
//!   next turn finds nothing to upgrade and it ends. [`Watchdog::stop`] (from the keeper's `Drop`) wakes it for
//!   that.
//! - `state` is taken briefly, never across a round, and never together with a guard's own state ([`Held`]) or
//!   the wait room.
//! - A guard leaves the schedule while it is being renewed, and comes back with its next due time, or not at all
//!   if it was lost. Its [`Held`] is shared with the user's [`Guard`](crate::redlock::Guard) (a `Weak` here): a guard
//!   dropped meanwhile is released by the drop and forgotten here.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::net::{Fanout, NodeError, Options};
use crate::redlock::engine::Engine;
use crate::redlock::engine::seam::{Clock, block};
use crate::redlock::error::Outcome;
use crate::redlock::guard::{Held, Keeper, lose, renew};
use crate::redlock::lost::Lost;
use crate::redlock::schedule::{GuardId, Schedule};
use crate::resp::{Value, encode_command};
use crate::sync::lock;
use crate::time::later;

/// Guards due within this much of a tick are renewed in it, together with the ones already due.
const SLACK: Duration = Duration::from_millis(20);
/// How long the thread waits when nothing is scheduled (it is also woken by [`Watchdog::poke`]).
pub(crate) const IDLE: Duration = Duration::from_secs(1);
/// Most requests of one kind in one round: well under a node's default bound of 16,384 requests in flight.
pub(crate) const CHUNK: usize = 256;

#[derive(Debug, Default)]
struct WatchState {
    schedule: Schedule,
    guards: HashMap<GuardId, Weak<Held>>,
    /// Per resource, the guards of this manager that hold it (several for an owner's nested holds, each told at
    /// once when the key goes).
    by_resource: HashMap<Vec<u8>, Vec<GuardId>>,
    next_id: GuardId,
    /// Guards' keys to read on the tracker: new guards, invalidated keys.
    check: HashSet<Vec<u8>>,
    /// Guards dropped by tasks, released here so that no executor thread blocks on a release round.
    releases: Vec<Arc<Held>>,
    stop: bool,
}

/// The watchdog of one manager (its thread starts with the first guard or waiter).
#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    state: Mutex<WatchState>,
    /// Wakes the thread while it waits without a tracker.
    wake: Condvar,
    started: AtomicBool,
    /// The tracker connections, once made (`None`: the OS refused an event poll for them).
    tracker: OnceLock<Option<Arc<Fanout>>>,
    /// Set once every node refused tracking (RESP2-only servers): waiters then read TTLs on the manager's own
    /// connections, and nobody tries the tracker again.
    untracked: AtomicBool,
}

/// Connections to every node that keep the RESP3 pushes of client-side tracking, set up with `tracking` (a
/// `CLIENT TRACKING ON ...` command): the nodes' own URLs (so `rediss://` nodes are reached over TLS, with the
/// same logins) and the manager's TLS settings, since a listener must reach whatever the lock connections reach.
/// `None` if the OS refuses an event poll for them.
pub(crate) fn listener(core: &Engine, tracking: Bytes) -> Option<Arc<Fanout>> {
    let opts = Options::default()
        .with_connect_timeout(core.config.connect_timeout)
        .with_hung_timeout(core.config.hung_timeout)
        .with_tls(core.fanout.options().tls().clone())
        .with_pushes(true)
        .with_setup(vec![tracking]);
    let addrs = core
        .fanout
        .addrs()
        .iter()
        .map(|a| a.clone().with_resp3(true))
        .collect();
    Fanout::new(addrs, opts).ok().map(Arc::new)
}

/// Whether a connection was made anew between two looks at the sessions of a fanout's connections (`before`,
/// empty before the first look, and `now`): a session came after another, so what the earlier one tracked is
/// forgotten. A connection's first session follows none: nothing could have been tracked before it.
fn made_anew(before: &[u64], now: &[u64]) -> bool {
    before.iter().zip(now).any(|(&b, &n)| n != b && n > 1)
}

/// The keys that tracking `pushes` say changed, each with the node that pushed it; `None` when anything may
/// have (a node flushed its keys or its tracking table was full, or `dropped`: pushes were lost).
pub(crate) fn invalidated(
    pushes: &[(usize, Value)],
    dropped: bool,
) -> Option<Vec<(usize, Vec<u8>)>> {
    let mut keys = Vec::new();
    let mut all = dropped;
    for (node, push) in pushes {
        let Value::Push(items) = push else {
            continue;
        };
        match items.first() {
            Some(Value::BulkString(kind)) if &kind[..] == b"invalidate" => {}
            _ => continue,
        }
        match items.get(1) {
            Some(Value::Array(names)) => keys.extend(names.iter().filter_map(|n| match n {
                Value::BulkString(b) => Some((*node, b.to_vec())),
                _ => None,
            })),
            // A null: the node flushed its keys (FLUSHALL) or its tracking table was full.
            _ => all = true,
        }
    }
    (!all).then_some(keys)
}

impl Watchdog {
    /// A fresh guard id.
    pub(crate) fn next_id(&self) -> GuardId {
        let mut s = lock(&self.state);
        s.next_id += 1;
        s.next_id
    }

    /// Starts the thread if it is not running yet.
    pub(crate) fn ensure_started(self: &Arc<Watchdog>, keeper: Weak<Keeper>) {
        if self.started.load(Ordering::Acquire) || self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let dog = Arc::clone(self);
        let spawned = thread::Builder::new()
            .name("muxlock-watchdog".into())
            .spawn(move || dog.run(&keeper));
        if spawned.is_err() {
            // No thread: guards are lost by time (their deadline), never silently kept; waiters wake on their
            // timers. The next guard or waiter tries again.
            self.started.store(false, Ordering::Release);
        }
    }

    /// Takes a new guard: renewed from `due` on ([`Held::due`]), and its key checked (and tracked) at once.
    pub(crate) fn add(&self, held: &Arc<Held>, due: Instant) {
        let mut s = lock(&self.state);
        s.schedule.set(held.id, due);
        s.guards.insert(held.id, Arc::downgrade(held));
        s.by_resource
            .entry(held.resource.clone())
            .or_default()
            .push(held.id);
        s.check.insert(held.resource.clone());
        drop(s);
        self.poke();
    }

    /// Forgets a guard (released or lost).
    pub(crate) fn forget(&self, held: &Held) {
        let mut s = lock(&self.state);
        s.schedule.remove(held.id);
        s.guards.remove(&held.id);
        if let Some(ids) = s.by_resource.get_mut(&held.resource) {
            ids.retain(|&id| id != held.id);
            if ids.is_empty() {
                s.by_resource.remove(&held.resource);
            }
        }
    }

    /// Releases `held` on the watchdog's thread (a guard dropped in a task): its release round must not block
    /// the executor's thread. Starts the thread if needed.
    pub(crate) fn release_later(self: &Arc<Watchdog>, held: Arc<Held>, keeper: Weak<Keeper>) {
        lock(&self.state).releases.push(held);
        self.ensure_started(keeper);
        self.poke();
    }

    /// The releases queued by dropped task guards, taken (the thread's turn, or the manager's end).
    pub(crate) fn take_releases(&self) -> Vec<Arc<Held>> {
        std::mem::take(&mut lock(&self.state).releases)
    }

    /// Wakes the thread to look at new work.
    pub(crate) fn poke(&self) {
        self.wake.notify_all();
        if let Some(Some(tracker)) = self.tracker.get() {
            tracker.interrupt();
        }
    }

    /// Asks the thread to end (the manager is going away).
    pub(crate) fn stop(&self) {
        lock(&self.state).stop = true;
        self.poke();
    }

    /// The tracker connections, made on first use: RESP3, client-side tracking on, pushes kept. `None` if they
    /// cannot be had (no event poll, or every node refused tracking before).
    pub(crate) fn tracker(&self, core: &Engine) -> Option<&Fanout> {
        // A manager with cluster members has no tracker: its keys live on many masters per member. Guards are then
        // checked at each renewal, and waiters wake on their timer or on a release in this process, as with servers
        // that refuse tracking.
        if self.untracked.load(Ordering::Acquire) || core.fanout.is_routed() {
            return None;
        }
        let tracker = self.tracker.get_or_init(|| {
            let mut tracking = BytesMut::new();
            encode_command(&[b"CLIENT", b"TRACKING", b"ON"], &mut tracking);
            listener(core, tracking.freeze())
        });
        tracker.as_deref()
    }

    /// Notes that a tracker round saw these outcomes: if every node refused RESP3 or tracking (a set-up error,
    /// as from a server older than Redis 6), the tracker is given up for good.
    pub(crate) fn note_tracker_errors<'a>(
        &self,
        errors: impl Iterator<Item = Option<&'a NodeError>>,
    ) {
        let (mut all, mut any) = (true, false);
        for e in errors {
            all &= matches!(e, Some(NodeError::Setup(_)));
            any = true;
        }
        if all && any {
            self.untracked.store(true, Ordering::Release);
        }
    }

    fn run(&self, weak: &Weak<Keeper>) {
        let mut sessions: Vec<u64> = Vec::new();
        loop {
            let Some(keeper) = weak.upgrade() else {
                return;
            };
            if lock(&self.state).stop {
                return;
            }
            keeper.release_all(self.take_releases());
            let due: Vec<Arc<Held>> = {
                let mut s = lock(&self.state);
                let ids = s.schedule.take_due(keeper.engine.clock.now(), SLACK);
                ids.iter()
                    .filter_map(|id| s.guards.get(id).and_then(Weak::upgrade))
                    .collect()
            };
            for chunk in due.chunks(CHUNK) {
                let next = block(renew(&keeper.engine, &keeper.activity, chunk));
                for (held, next) in chunk.iter().zip(next) {
                    match next {
                        Some(at) => lock(&self.state).schedule.set(held.id, at),
                        None => self.forget(held),
                    }
                }
            }
            let tracker = self.tracker(&keeper.engine);
            if let Some(tracker) = tracker {
                // A connection made anew tracks nothing: look at everything again.
                let now: Vec<u64> = (0..tracker.len()).map(|i| tracker.sessions(i)).collect();
                if made_anew(&sessions, &now) {
                    let mut s = lock(&self.state);
                    let keys: Vec<Vec<u8>> = s.by_resource.keys().cloned().collect();
                    s.check.extend(keys);
                    drop(s);
                    keeper.waits.notify_all();
                }
                sessions = now;
                let keys: Vec<Vec<u8>> = lock(&self.state).check.drain().collect();
                for chunk in keys.chunks(CHUNK) {
                    self.check(&keeper, tracker, chunk);
                }
            } else {
                lock(&self.state).check.clear();
            }
            let next = lock(&self.state)
                .schedule
                .next_due()
                .unwrap_or_else(|| later(Instant::now(), IDLE));
            drop(keeper);
            if !lock(&self.state).releases.is_empty() {
                continue;
            }
            match tracker {
                Some(tracker) => {
                    let got = tracker.recv_pushes(next);
                    let Some(keeper) = weak.upgrade() else {
                        return;
                    };
                    self.on_pushes(&keeper, &got.pushes, got.dropped);
                }
                None => {
                    let s = lock(&self.state);
                    let wait = next.saturating_duration_since(Instant::now());
                    if !s.stop && s.check.is_empty() && s.releases.is_empty() {
                        let _ = self.wake.wait_timeout(s, wait);
                    }
                }
            }
        }
    }

    /// Invalidation pushes: a guard's key goes on the check list, and the key's waiters are woken at once.
    fn on_pushes(&self, keeper: &Keeper, pushes: &[(usize, Value)], dropped: bool) {
        let Some(keys) = invalidated(pushes, dropped) else {
            let mut s = lock(&self.state);
            let every: Vec<Vec<u8>> = s.by_resource.keys().cloned().collect();
            s.check.extend(every);
            drop(s);
            keeper.waits.notify_all();
            return;
        };
        let mut s = lock(&self.state);
        for (_, key) in &keys {
            if s.by_resource.contains_key(key) {
                s.check.insert(key.clone());
            }
        }
        drop(s);
        for (_, key) in &keys {
            keeper.waits.notify(key);
        }
    }

    /// Reads the keys of the guards among `keys` on the tracker (which tracks them from then on): a guard whose
    /// value enough nodes answer they do not hold that a majority is impossible is lost at once.
    fn check(&self, keeper: &Keeper, tracker: &Fanout, keys: &[Vec<u8>]) {
        let core = &keeper.engine;
        let guards: Vec<Arc<Held>> = {
            let s = lock(&self.state);
            keys.iter()
                .filter_map(|k| s.by_resource.get(k))
                .flatten()
                .filter_map(|id| s.guards.get(id).and_then(Weak::upgrade))
                .collect()
        };
        if guards.is_empty() {
            return;
        }
        let mut request = BytesMut::with_capacity(guards.len() * 48);
        for g in &guards {
            encode_command(&[b"GET", &g.resource], &mut request);
        }
        let n = tracker.len();
        let mut round = tracker.round(later(Instant::now(), core.config.round_timeout));
        round.send_all(&request, guards.len());
        round.need(guards.len());
        let mut outcomes = vec![vec![Outcome::NotAwaited; n]; guards.len()];
        // One `GET` per guard, in order: the reply with id `i` is guard `i`'s.
        while let Some((id, reply)) = round.next() {
            let i = id.seq as usize;
            let (Some(g), Some(cell)) = (
                guards.get(i),
                outcomes.get_mut(i).and_then(|o| o.get_mut(id.node)),
            ) else {
                continue;
            };
            *cell = match reply {
                Ok(v) => match v.without_attributes() {
                    Value::BulkString(b) if b[..] == g.value[..] => Outcome::Granted,
                    Value::BulkString(_) => Outcome::Taken,
                    Value::Null | Value::NullBulk => Outcome::NotHeld,
                    other => Outcome::ErrorReply(format!("unexpected reply {other:?}")),
                },
                Err(e) => Outcome::Failed(e),
            };
        }
        drop(round);
        self.note_tracker_errors(outcomes.iter().flatten().map(|o| match o {
            Outcome::Failed(e) => Some(e),
            _ => None,
        }));
        let quorum = core.quorum();
        for (g, outcomes) in guards.iter().zip(outcomes) {
            let taken = outcomes
                .iter()
                .filter(|o| matches!(o, Outcome::Taken | Outcome::NotHeld))
                .count();
            if taken > n - quorum {
                lose(
                    &keeper.activity,
                    g,
                    Lost::Taken(Box::new(core.report(&g.resource, outcomes, quorum))),
                );
                self.forget(g);
            }
        }
    }
}
