//! The turn listener: how a waiter in the nodes' queue (`wait/handoff.rs`) hears that its turn came without asking.
//!
//! A waiter that is not the head of a queue waits for its turn key (`muxlock:turn:<id>:<line>`) to change: the
//! waiter ahead bumps it as it takes the lock or leaves, a release bumps it as it hands the key on, a node bumps
//! it as it drops a dead head. Read on the tracker connections (`watchdog.rs`), the key is tracked until its next
//! change only: each wait paid one read per node to arm it again, a request to every node per grant.
//!
//! Every waiter id of one manager starts with the manager's **prefix** (8 random hex digits, then 16 random ones
//! per entry), so all its turn keys start with `muxlock:turn:<prefix>`. The listener keeps one more connection to
//! each node, with `CLIENT TRACKING ON BCAST PREFIX muxlock:turn:<prefix>`: the node pushes an invalidation for
//! every change of any of those keys, with no read to arm it and for as long as the connection lives. A thread
//! of its own takes the pushes and wakes the line each key is about ([`WaitRoom::notify`]).
//!
//! # When a waiter may rely on it
//!
//! A node's push reaches the listener for every change made after the node ran the listener's set-up, until its
//! connection drops. So a waiter notes, before it sends an attempt, which nodes' listener connections have
//! completed their set-up, and in which session ([`Turns::armed`]); after a refusal, each node whose connection
//! is still in that session ([`Turns::tracked`]) ran the set-up before the attempt, and any change of the turn
//! key after the attempt is pushed. The waiter read its line's generation before the attempt, and sleeps only
//! while it is unchanged (`waiters.rs`), so a push taken at any moment after that read wakes it. A waiter with
//! fewer such nodes than a quorum arms its key by reading it on the tracker, as before (the first refusal of a
//! manager's first wait, a reconnect); a connection that drops wakes every line (a push may have been lost with
//! it). A stray push (another manager with the same prefix, a turn key's expiry) costs one early attempt.
//!
//! Only wake-ups depend on it: what a waiter holds is decided by its attempts' quorums, as without it.
//!
//! # Threads
//!
//! The listener's thread holds a weak reference to the manager's [`Keeper`] and the connections; it ends when
//! the manager is gone or [`Turns::stop`] is called (from the keeper's `Drop`, which interrupts its wait).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread;
use std::time::Instant;

use bytes::BytesMut;

use super::Keeper;
use super::watchdog::{IDLE, invalidated, listener};
use crate::net::{Fanout, NodeSet};
use crate::redlock::kind::queued::{TURN_PREFIX, handed_marker};
use crate::redlock::token;
use crate::resp::encode_command;
use crate::sync::lock;
use crate::time::later;

/// A handed marker pushed: the value it names, the node, and the listener's session of that node when it was
/// taken.
type Marker = (token::Value, usize, u64);

/// How many handed markers are kept per waiter between two of its attempts (one per node is expected).
const MAX_HANDED: usize = 64;

/// The turn listener of one manager (its connections and thread start with the first refusal of a queued wait).
#[derive(Debug)]
pub(crate) struct Turns {
    prefix: u32,
    /// Per waiter of this manager in a plain lock's line ([`Turns::expect`]): the handed markers pushed since its
    /// last attempt was sent, each as (value, node, the listener's session of that node when the push was
    /// taken: never an earlier session than the one the push came on).
    handed: Mutex<HashMap<Vec<u8>, Vec<Marker>>>,
    /// The listener's connections, once made (`None`: not to be had: the OS refused an event poll, or the
    /// manager's members are clusters, which have no tracker).
    fanout: OnceLock<Option<Arc<Fanout>>>,
    stop: AtomicBool,
}

/// Per node, the listener session a waiter's attempt was sent in, if that connection had completed its set-up.
pub(crate) type Armed = Vec<Option<u64>>;

impl Turns {
    /// A listener for a manager whose waiter ids start with `prefix`.
    pub(crate) fn new(prefix: u32) -> Turns {
        Turns {
            prefix,
            handed: Mutex::new(HashMap::new()),
            fanout: OnceLock::new(),
            stop: AtomicBool::new(false),
        }
    }

    /// The manager's part of every waiter id it makes.
    pub(crate) fn prefix(&self) -> u32 {
        self.prefix
    }

    /// Makes the connections and starts the thread, once; later calls do nothing.
    pub(crate) fn start(&self, keeper: &Arc<Keeper>) {
        let engine = &keeper.engine;
        if engine.fanout.is_routed() {
            return;
        }
        let mut started = false;
        let fanout = self.fanout.get_or_init(|| {
            started = true;
            let mut tracking = BytesMut::new();
            let prefix = [TURN_PREFIX, format!("{:08x}", self.prefix).as_bytes()].concat();
            encode_command(
                &[b"CLIENT", b"TRACKING", b"ON", b"BCAST", b"PREFIX", &prefix],
                &mut tracking,
            );
            listener(engine, tracking.freeze())
        });
        if let (true, Some(fanout)) = (started, fanout) {
            let (fanout, weak) = (Arc::clone(fanout), Arc::downgrade(keeper));
            let spawned = thread::Builder::new()
                .name("muxlock-turns".into())
                .spawn(move || listen(&fanout, &weak));
            // No thread: no pushes are taken; `tracked` then finds no session moving on and waiters would
            // sleep to their refresh, so the connections are given up and waiters arm by reading.
            if spawned.is_err() {
                self.stop.store(true, Ordering::Release);
            }
        }
    }

    /// Per node, the session of the listener's connection if it has completed its set-up now: noted before an
    /// attempt is sent.
    pub(crate) fn armed(&self) -> Armed {
        self.fanout().map_or_else(Vec::new, Fanout::set_up_sessions)
    }

    /// How many nodes have pushed, and still push, every change of this manager's turn keys since `armed` was
    /// noted: their listener connection was set up then and is the same one, still set up, now.
    pub(crate) fn tracked(&self, armed: &Armed) -> usize {
        let still = self.still(armed);
        (0..armed.len())
            .filter(|&node| still.contains(node))
            .count()
    }

    /// The nodes of [`tracked`](Turns::tracked) (below 64).
    pub(crate) fn still(&self, armed: &Armed) -> NodeSet {
        let mut nodes = NodeSet::EMPTY;
        if let Some(f) = self.fanout() {
            let now = f.set_up_sessions();
            for (node, (a, n)) in armed.iter().zip(&now).enumerate().take(64) {
                if a.is_some() && a == n {
                    nodes.insert(node);
                }
            }
        }
        nodes
    }

    /// The waiter `id` is about to send an attempt: the markers pushed for it so far are forgotten, and those
    /// pushed from now on kept (until the next attempt or [`forget`](Turns::forget)).
    pub(crate) fn expect(&self, id: &[u8]) {
        lock(&self.handed).entry(id.to_vec()).or_default().clear();
    }

    /// The waiter `id` has left: its markers are no longer kept.
    pub(crate) fn forget(&self, id: &[u8]) {
        lock(&self.handed).remove(id);
    }

    /// The nodes that pushed a handed marker of `value` for the waiter `id` on the listener connection that was
    /// set up when `armed` was noted (before the attempt that offered `value` was sent): each ran the hand-off
    /// after the attempt ran there, and has not restarted since the attempt was sent.
    pub(crate) fn pushed(&self, id: &[u8], value: &token::Value, armed: &Armed) -> NodeSet {
        let mut nodes = NodeSet::EMPTY;
        if let Some(seen) = lock(&self.handed).get(id) {
            for (_, node, session) in seen.iter().filter(|(v, ..)| v == value) {
                if armed.get(*node).copied().flatten() == Some(*session) {
                    nodes.insert(*node);
                }
            }
        }
        nodes
    }

    /// Keeps the handed markers among `keys`, pushed by `node` in `session`, for the waiters that expect them,
    /// and returns the keys whose lines to wake: every turn key, and the markers of waiters that still wait. A
    /// marker outlives its grant (it lives the waiter's TTL), and its expiry is pushed too: for a waiter that has
    /// left (forgotten), it is no hand-off, and woke the manager's next waiter on the line into an attempt the
    /// holder refuses.
    fn note_handed<'k>(
        &self,
        keys: &'k [(usize, Vec<u8>)],
        sessions: &[Option<u64>],
    ) -> Vec<&'k [u8]> {
        let mut handed = lock(&self.handed);
        let mut wake = Vec::with_capacity(keys.len());
        for (node, key) in keys {
            let Some((id, value, _)) = handed_marker(key) else {
                wake.push(&key[..]);
                continue;
            };
            if handed.contains_key(id) {
                wake.push(&key[..]);
            }
            let (Some(seen), Some(Some(session)), Ok(value)) = (
                handed.get_mut(id),
                sessions.get(*node),
                token::Value::try_from(value),
            ) else {
                continue;
            };
            // One marker per node and attempt is expected; a bound keeps a stray writer from growing it.
            if seen.len() < MAX_HANDED {
                seen.push((value, *node, *session));
            }
        }
        wake
    }

    /// Ends the thread (the manager is going away).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(Some(f)) = self.fanout.get() {
            f.interrupt();
        }
    }

    fn fanout(&self) -> Option<&Fanout> {
        match self.stop.load(Ordering::Acquire) {
            true => None,
            false => self.fanout.get().and_then(Option::as_deref),
        }
    }
}

/// The listener's thread: takes the pushes and wakes the lines of the keys they name; wakes every line when a
/// connection that was set up dropped, or was made anew (what changed while it was down was not pushed, and a
/// waiter that counted on it must arm its key another way). `recv_pushes` returns as soon as either happens,
/// and a connection down is dialled again here.
fn listen(fanout: &Fanout, weak: &Weak<Keeper>) {
    let mut before = fanout.set_up_sessions();
    loop {
        let got = fanout.recv_pushes(later(Instant::now(), IDLE));
        let Some(keeper) = weak.upgrade() else {
            return;
        };
        if keeper.turns.stop.load(Ordering::Acquire) {
            return;
        }
        let now = fanout.set_up_sessions();
        // A connection that was set up dropped, or one was made anew (not its first session: nobody counted on
        // a connection before it existed).
        let lost = (before.iter().zip(&now))
            .any(|(b, n)| b != n && (b.is_some() || n.is_some_and(|n| n > 1)));
        match invalidated(&got.pushes, got.dropped) {
            Some(keys) if !lost => {
                // Kept before the waiters are woken: a waiter woken by a marker finds it.
                for key in keeper.turns.note_handed(&keys, &now) {
                    keeper.waits.notify(key);
                }
            }
            // A lost connection: markers pushed with the drop are not kept (those of a session still up come
            // again on nothing; the waiter's next attempt takes what was handed to it).
            _ => keeper.waits.notify_all(),
        }
        if now.iter().any(Option::is_none) {
            fanout.redial();
        }
        before = now;
    }
}
