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
use crate::redlock::kind::queued::{Handed, TURN_PREFIX, handed_marker, turn_key_id};
use crate::redlock::token;
use crate::resp::encode_command;
use crate::sync::lock;
use crate::time::later;

/// A handed marker pushed: the value it names, the node, and the listener's session of that node when it was
/// taken.
type Marker = (token::Value, usize, u64);

/// What a waiter of this manager expects of the pushes since its last attempt was sent.
#[derive(Debug, Default)]
struct Expected {
    markers: Vec<Marker>,
    /// Once the attempt was refused: the markers that can count for it ([`Turns::await_markers`]).
    awaited: Option<Awaited>,
}

/// The markers that can count for a refused attempt: of its value, from the nodes that refused it (`from`), on
/// the listener session noted before it was sent; `counted`: those pushed so far.
#[derive(Debug)]
struct Awaited {
    value: token::Value,
    from: NodeSet,
    armed: Armed,
    quorum: usize,
    counted: NodeSet,
}

impl Awaited {
    /// Counts the marker of `value` pushed by `node` in `session`, if it can count: `None` if it cannot (another
    /// value, a node that did not refuse the attempt, another session), else whether the waiter is to be woken
    /// for it: at the first that counts (it waits a moment for the others, `wait/handoff.rs`) and at the one
    /// that makes the majority.
    fn count(&mut self, marker: &Marker) -> Option<bool> {
        let node = marker.1;
        if !(self.from.contains(node) && of_attempt(marker, &self.value, &self.armed)) {
            return None;
        }
        if self.counted.contains(node) {
            return Some(false);
        }
        self.counted.insert(node);
        let n = self.counted.count(self.armed.len());
        Some(n == 1 || n == self.quorum)
    }
}

/// Whether `marker` names `value` and was taken on the listener session `armed` notes for its node (the one set
/// up before the attempt that offered `value` was sent).
fn of_attempt((v, node, session): &Marker, value: &token::Value, armed: &Armed) -> bool {
    v == value && armed.get(*node).copied().flatten() == Some(*session)
}

/// How many handed markers are kept per waiter between two of its attempts (one per node is expected).
const MAX_HANDED: usize = 64;

/// The turn listener of one manager (its connections and thread start with the first refusal of a queued wait).
#[derive(Debug)]
pub(crate) struct Turns {
    prefix: u32,
    /// Per waiter of this manager in a plain lock's line ([`Turns::expect`]): the handed markers pushed since its
    /// last attempt was sent, each as (value, node, the listener's session of that node when the push was
    /// taken: never an earlier session than the one the push came on).
    handed: Mutex<HashMap<Vec<u8>, Expected>>,
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
        self.still(armed).count(armed.len())
    }

    /// The nodes of [`tracked`](Turns::tracked) (below 64).
    pub(crate) fn still(&self, armed: &Armed) -> NodeSet {
        match self.fanout() {
            Some(f) => still_in(armed, &f.set_up_sessions()),
            None => NodeSet::EMPTY,
        }
    }

    /// The waiter `id` is about to send an attempt: the markers pushed for it so far are forgotten, and those
    /// pushed from now on kept (until the next attempt or [`forget`](Turns::forget)).
    pub(crate) fn expect(&self, id: &[u8]) {
        let mut handed = lock(&self.handed);
        match handed.get_mut(id) {
            Some(expected) => {
                expected.markers.clear();
                expected.awaited = None;
            }
            None => {
                handed.insert(id.to_vec(), Expected::default());
            }
        }
    }

    /// The waiter `id`'s attempt (`handed`, sent when `armed` was noted) was refused: from now on its line is
    /// woken for that attempt's markers only at the first that counts and at the one that makes `quorum` (the
    /// turn key bumped by the same hand-offs wakes nobody), not at every node's.
    pub(crate) fn await_markers(&self, id: &[u8], handed: &Handed, armed: &Armed, quorum: usize) {
        let mut all = lock(&self.handed);
        let Some(expected) = all.get_mut(id) else {
            return;
        };
        let mut awaited = Awaited {
            value: handed.value,
            from: handed.refused,
            armed: armed.clone(),
            quorum,
            counted: NodeSet::EMPTY,
        };
        for marker in &expected.markers {
            awaited.count(marker);
        }
        expected.awaited = Some(awaited);
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
        if let Some(expected) = lock(&self.handed).get(id) {
            for marker in &expected.markers {
                if of_attempt(marker, value, armed) {
                    nodes.insert(marker.1);
                }
            }
        }
        nodes
    }

    /// Keeps the handed markers among `keys` (each with the node that pushed it; `sessions`: the listener's
    /// sessions now) for the waiters that expect them, and says, per key, whether its line is to be woken. A
    /// marker wakes it only where it counts for the attempt its waiter awaits markers for, at the first and at the
    /// majority ([`Awaited::count`]); any other marker is no news the waiter acts on (it outlives its grant for
    /// the waiter's TTL, and its expiry is pushed too), and a hand-off to a waiter bumps its turn key in the same
    /// script. A turn key wakes its line unless a marker that counted came with it from the same node (the same
    /// hand-off); every other key wakes its line.
    pub(crate) fn note_handed(
        &self,
        keys: &[(usize, Vec<u8>)],
        sessions: &[Option<u64>],
    ) -> Vec<bool> {
        let mut handed = lock(&self.handed);
        let mut wake = vec![true; keys.len()];
        let mut counted = Vec::new();
        for ((node, key), wake) in keys.iter().zip(&mut wake) {
            let Some((id, value, _)) = handed_marker(key) else {
                continue;
            };
            *wake = false;
            let (Some(expected), Some(Some(session)), Ok(value)) = (
                handed.get_mut(id),
                sessions.get(*node),
                token::Value::try_from(value),
            ) else {
                continue;
            };
            let marker = (value, *node, *session);
            if let Some(first_or_majority) =
                expected.awaited.as_mut().and_then(|a| a.count(&marker))
            {
                *wake = first_or_majority;
                counted.push((*node, id));
            }
            // One marker per node and attempt is expected; a bound keeps a stray writer from growing it.
            if expected.markers.len() < MAX_HANDED {
                expected.markers.push(marker);
            }
        }
        for ((node, key), wake) in keys.iter().zip(&mut wake) {
            if turn_key_id(key).is_some_and(|id| counted.contains(&(*node, id))) {
                *wake = false;
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

/// The nodes (below 64) whose listener connection was set up when `armed` was noted and is the same one, set
/// up, in `now` (each node's session now, as [`Fanout::set_up_sessions`] reads it).
pub(crate) fn still_in(armed: &Armed, now: &[Option<u64>]) -> NodeSet {
    let mut nodes = NodeSet::EMPTY;
    for (node, (a, n)) in armed.iter().zip(now).enumerate().take(64) {
        if a.is_some() && a == n {
            nodes.insert(node);
        }
    }
    nodes
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
                let wake = keeper.turns.note_handed(&keys, &now);
                for ((_, key), wake) in keys.iter().zip(wake) {
                    if wake {
                        keeper.waits.notify(key);
                    }
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A release hands the key on at 5 nodes: each node pushes the waiter's marker and its turn key. The line is
    /// woken at the first marker that counts and at the third (the majority), not for the others, and not for
    /// the turn keys bumped by the same hand-offs; a marker that cannot count (another value, a node that did
    /// not refuse the attempt, another session) wakes nobody, a turn key bumped without a counted marker does.
    #[test]
    fn a_waiter_awaiting_markers_is_woken_at_the_first_and_at_the_majority() {
        let turns = Turns::new(0xabcd_0123);
        let id = b"abcd01230000000000000007";
        let value: token::Value = *b"0123456789abcdef0123456789abcdef01234567";
        let other: token::Value = *b"fedcba9876543210fedcba9876543210fedcba98";
        let marker = |v: &token::Value| [TURN_PREFIX, id, b"=", v, b":jobs"].concat();
        let turn = [TURN_PREFIX, id, b":jobs"].concat();
        let mut refused = NodeSet::EMPTY;
        for node in 0..4 {
            refused.insert(node);
        }
        let handed = Handed {
            value,
            start: Instant::now(),
            ttl: Duration::from_secs(2),
            refused,
        };
        let armed: Armed = vec![Some(1), Some(1), Some(2), Some(1), Some(1)];
        turns.expect(id);
        turns.await_markers(id, &handed, &armed, 3);
        let sessions = vec![Some(1), Some(1), Some(3), Some(1), Some(1)];
        let batch = |node: usize, key: &[u8]| (node, key.to_vec());
        let wake = turns.note_handed(
            &[
                batch(0, &marker(&value)),
                batch(0, &turn),
                batch(1, &marker(&value)),
                batch(1, &turn),
            ],
            &sessions,
        );
        assert_eq!(wake, [true, false, false, false]);
        // Node 2's session moved on, node 4 did not refuse the attempt, node 3's marker is another value's (an
        // expiry, say): none counts, and none wakes the line; the turn key bumped beside one does.
        let wake = turns.note_handed(
            &[
                batch(2, &marker(&value)),
                batch(2, &turn),
                batch(4, &marker(&value)),
                batch(3, &marker(&other)),
            ],
            &sessions,
        );
        assert_eq!(wake, [false, true, false, false]);
        assert_eq!(turns.pushed(id, &value, &armed).intersection(refused), {
            let mut s = NodeSet::EMPTY;
            s.insert(0);
            s.insert(1);
            s
        });
        // Node 3's marker of the value makes the majority; a turn key bumped alone wakes.
        let wake = turns.note_handed(&[batch(3, &marker(&value))], &sessions);
        assert_eq!(wake, [true]);
        assert_eq!(turns.note_handed(&[batch(1, &turn)], &sessions), [true]);
        // The next attempt forgets them all; a waiter that awaits nothing is woken by the turn key, not by the
        // marker; nor is anyone by a marker of a waiter that left.
        turns.expect(id);
        assert_eq!(turns.pushed(id, &value, &armed), NodeSet::EMPTY);
        let wake = turns.note_handed(&[batch(0, &marker(&value)), batch(0, &turn)], &sessions);
        assert_eq!(wake, [false, true]);
        turns.forget(id);
        assert_eq!(
            turns.note_handed(&[batch(0, &marker(&value))], &sessions),
            [false]
        );
    }
}
