//! Hand-off across processes: which waiter tries when a lock is released.
//!
//! # The problem
//!
//! Within one process the [`WaitRoom`](super::WaitRoom) lets only the head of the line contend. Across processes,
//! every process's head is told of a release (client-side tracking) and they all send `SET NX` at once: the nodes
//! each grant whichever request reaches them first, the votes split, nobody has a majority, everyone releases and
//! waits again. Measured with 8 processes on 5 nodes: about 5 wake-ups and 17 refused votes per grant, 868 grants/s.
//!
//! # The design: a queue on every node decides who tries; `SET NX` decides who holds
//!
//! Each node keeps, per resource, a sorted set of the waiting processes' heads, `muxlock:queue:<resource>`: member =
//! a waiter's random id, score = its **ticket**, the wall-clock time (µs) at which it started to wait, drawn once by
//! the client and sent to every node. Acquisition is [`lua::QUEUE_ACQUIRE`](crate::redlock::lua::QUEUE_ACQUIRE), one
//! script per node:
//!
//! - if the queue is empty or this waiter heads it: the plain `SET key value NX PX ttl`;
//! - otherwise the node refuses (a "taken" vote) and the waiter joins or stays in the queue with its ticket, and
//!   learns its rank and its turn key's value.
//!
//! A waiter that got a majority leaves the queue wherever it may be in it
//! ([`lua::QUEUE_LEAVE`](crate::redlock::lua::QUEUE_LEAVE), sent without waiting), which bumps the next waiter's
//! *turn key* (`muxlock:turn:<id>:<resource>`); a plain lock's waiter leaves at once where a reply says its entry
//! is, and its lock's release (by any verb) takes the entry off the other nodes. It does not leave in the acquisition script itself: a grant that
//! turns out partial (the round fails) would have taken it off some nodes' queues only, and two waiters, each
//! heading one live node of 3, refused each other until an entry expired (found by `tests/api/handoff.rs`, 1.5 s
//! stalls).
//!
//! The head of the queue waits on the lock key (it reads it on the tracker connections, as before: a release,
//! overwrite or expiry wakes it); every other waiter waits for its own turn key, which its manager's turn
//! listener hears change without reading it (`guard/turns.rs`: broadcast tracking of the manager's turn keys;
//! a waiter reads its key on the tracker only while the listener is not up on a quorum of nodes), so a release
//! wakes one process, and a grant wakes one more (the new head, which then watches the lock key). A release
//! costs the head's one round, and a grant one leave (not awaited) and the new head's two (its refused attempt,
//! its `PTTL` on the tracker); nobody else sends anything.
//!
//! **Why the order is the same on every node.** The ticket is chosen by the client, not by the node, and the
//! sorted set orders by (ticket, id): a node that saw the joins in another order, or late (a paused node runs the
//! requests it buffered when it resumes), still orders them alike. Nodes differ only in *which* entries they hold
//! (a node that was down when a waiter joined, a node restarted empty); then two waiters may each head a minority
//! of nodes, and the vote may split as before, until the entries catch up (every attempt re-sends the entry). Clock
//! skew between hosts shifts tickets, so priority, by the skew; never safety.
//!
//! # Safety stays the quorum `SET NX`
//!
//! The script only adds a condition before the spec's `SET key value NX PX ttl` on each node: a node grants in
//! strictly fewer cases than plain Redlock's, never in more, and nothing else writes the lock key. The decision is
//! the unchanged [`Quorum`](crate::redlock::quorum::Quorum) (a majority of grants within the validity, drift allowance included), and a failed
//! round releases its partial grants as `lock` does. So every argument for Redlock's mutual exclusion (and every
//! test of it: `tests/mutex`) applies as is; the queue can delay a grant, not cause one.
//!
//! # The hand-off: a waiting request's plain lock is released to the next waiter
//!
//! A release that deletes the key lets every client's `SET NX` race for it, and wakes the queue's head only
//! through its tracker, after which it sends its attempt: the head's attempt then meets the greedy ones and the
//! next release's stragglers. A plain lock taken by a waiting request is therefore released with
//! [`lua::QUEUE_LEAVE`](crate::redlock::lua::QUEUE_LEAVE) given the lock's value, which, on each node, takes the
//! releasing waiter's own entry off the queue (wherever a reply not read, or a refusal, may have left it) and,
//! where the key holds the lock's value, **sets it to the value the queue's live head last offered, for the TTL that
//! waiter asked for** (the gate keeps, per waiter, the value and TTL of its last refused attempt:
//! `muxlock:queue-handed:<line>`), writes that waiter's *handed marker* (below), takes it off the queue (a
//! release by value alone, which cannot name the entry, then leaves none heading the queue) and bumps its turn
//! key (the next waiter, which heads the queue now, is not told: the lock handed on hands the key on to it as it
//! ends, and one that ends without a hand-off, released by value or expired, leaves it asleep until its entry's
//! refresh:
//! `api::handoff::the_waiter_behind_a_grant_by_push_has_the_lock_within_its_refresh_once_it_ends_without_a_hand_off`;
//! telling it cost every grant a refused attempt), and drops the hand-off values of any earlier waiter no longer
//! queued (their key has moved on); with nobody waiting it deletes the key as the spec's release does. The waiter
//! hears the marker and counts
//! it as a grant ("The grant by push", below); failing that (too few markers, too late) it attempts again, and its
//! gate finds in the key the value it offered before (or this attempt's own) and **takes it**: sets it to this
//! attempt's value for the TTL and leaves the queue there. A waiter that leaves while the key is handed to it (it
//! got the lock elsewhere, or gives up) hands it on in its leave, or in its lock's release where its attempt did
//! not take it (`api::handoff::a_release_frees_the_key_handed_to_its_waiter_where_its_attempt_did_not_take_it`).
//! Other releases (a lock taken without waiting, a batch, a native compare-and-delete, an expiry) free the key as
//! before, and the head takes it as before.
//!
//! **Why it is safe.** The decision is still one attempt's round counted by the plain quorum from the attempt's
//! start; only what a node grants changes. A gate grants the key in one more case than `SET NX`: when it holds
//! a value this waiter offered, that is, the value of one of its own earlier attempts (handed on to it, or left by
//! an ask again that set it) or of this attempt. An earlier attempt of a waiter that still waits failed (a waiter's
//! attempts follow one another, and it stops at its first success), so nobody counts on that value: for mutual
//! exclusion the node's key was as good as free, and the grant is the `SET NX` of a free key, made after the
//! attempt's start, whose lease counts from that start. A hand-off writes only where the key held the releaser's
//! value (the releaser no longer holds it: as a delete) or, in a leave, this waiter's handed value (nobody's
//! lock): it turns a key nobody holds into another key nobody holds. It never hands the key to the entry giving
//! it up: that entry goes first (left on a node its winning attempt reached late, the gate queued it there,
//! offering the lock's value; handed to it, the released value would stay).
//! A failed attempt's clean-up deletes only its
//! own value, so it never removes a key its successor took (the new value differs), and is not sent to nodes that
//! refused every request of the attempt (`engine/untouched.rs`; a refused waiter reads on past its verdict for
//! the refusals still owed, `engine/scripted.rs`, `Reading`): a key handed to this waiter after its refusal
//! stays for its next attempt. Every property of the spec's
//! argument (at most one value per key per node, a vote counted only within the validity, the restart guard and
//! the clock check on every vote) is the plain acquisition's, and every test of it runs this path: the waiting
//! workers of the mutual-exclusion suite (`tests/mutex/waiting.rs`) and the simulator's queued worlds and its
//! waiters' worlds (every client a waiter: thousands of keys handed on and taken), which must see hand-offs taken.
//!
//! **What it costs and gives.** A grant is the release's round and nothing else (the grant by push; the hand-off
//! took the waiter's entry off the queue there, keeping its hand-off values for its take or its leave, and its
//! lock's release takes it off wherever else it is); nobody else's `SET NX` can win the key meanwhile,
//! and the releaser's own next wait queues behind the waiters. A waiter that dies with a key handed to it holds
//! the others up for the TTL it asked for, as a holder that dies does: it may have counted the hand-off as its
//! grant (`api::handoff::a_key_handed_to_a_dead_waiter_is_held_for_its_ttl`).
//!
//! # The grant by push: a hand-off is a vote
//!
//! The waiter's refused attempt `A` (value `v`, its round started at `s` on this client's clocks, TTL `ttl`)
//! registered `v` and `ttl` on every node it reached. A release that hands the key on to the waiter on node `X`
//! sets the key to `v` for `ttl` and, in the same script, writes the **handed marker**
//! `muxlock:turn:<id>=<v>:<line>` (only a hand-off writes it; `v` is fresh per attempt, so the marker's name
//! exists nowhere before `A` ran on `X`). The waiter's turn listener (`guard/turns.rs`) is pushed every change of
//! every key under its manager's prefix: the marker's push is the node saying "the key holds `v` for `ttl`, set
//! after `A` ran here". [`queued::by_push`] counts node `X` as a grant of `A`, at the moment it looks, if and
//! only if:
//!
//! 1. **`X` refused every request of `A`, each reply read, each counted**: so `A`'s clean-up is never sent to `X`
//!    (`engine/untouched.rs`) and nothing of `A` deletes `v` there, and `A`'s clock check passed on `X`
//!    (`b ≥ s − T`: the node's clock before `A` ran, against this client's at `s`).
//! 2. **The marker of `v` came on the listener connection to `X` that had completed its set-up before `A` was
//!    sent, and was taken while that connection was still in that session**: `X` did not restart between `A`'s
//!    sending and the hand-off (a restart closes the connection). The session is read after the push is taken,
//!    so a push is never credited to an earlier session than its own.
//! 3. **The restart guard would count a grant from `X` now, and the clock check has not seen `X`'s clock ahead
//!    since** (`engine/clock.rs`, "A clock seen ahead").
//! 4. **`A` is the waiter's last attempt**: the markers are looked at only before the next attempt is sent (a
//!    later attempt takes the key handed as `v` and sets its own value: its own round counts then).
//!
//! The votes are then counted as `A`'s own round would have counted grants: a majority, the lease from `s`,
//! valid until `s + ttl − allowance` (drift and `2T`), and only while no more than a third of the TTL has run
//! since `s` (a guard's first renewal is due then; past it the waiter attempts, and takes what was handed).
//!
//! **Why it is safe.** On `X` the key holds `v` from the hand-off at node time `n_h` for `ttl`. `n_h` comes after
//! `A` ran there (the marker's name did not exist before), so `n_h ≥ b ≥ s − T` if `X`'s clock did not go back
//! (the clock check's premise), and the key lives until `n_h + ttl ≥ s + ttl − T` on `X`'s clock. Nothing
//! removes `v` before then but the waiter itself: other releases and leaves compare their own values (another
//! waiter's handed value, or a releaser's, both distinct from `v`), `SET NX` does not overwrite, `A`'s clean-up
//! skips `X` (1), and a later attempt is a later round (4). Another client's grant on `X` therefore needs the
//! node's clock past `s + ttl − T`, which its own clock check (`a ≤ r + T`) places after `s + ttl − 2T` in its
//! reading: after this lease has ended. That is the clock check's argument for a `SET NX` at `n_h`, with `A`'s
//! `b` for the grant's: a hand-off is a grant made later than `A`'s request ran, and a later grant only holds
//! longer. A node that restarted is excluded as a restarted node's grant is (3), and a majority of such votes
//! intersects any other majority as votes of one round do. (2) is a second line, not needed by the argument: a
//! restart that lost writes leaves the node untrusted by the restart guard for the window (3), one that lost
//! none is no restart for the key, and a hand-off after a restart needs a live holder's release of a value the
//! node kept (the simulator, which models listener sessions, finds no history where (2) alone matters:
//! `docs/simulator.md`). With the clock check off, the argument is the
//! spec's: the key was set after `s` and lives `ttl` on a clock that drifts within the allowance.
//!
//! A waiter woken by one node's marker, or by the key's change on the tracker, before the others' markers are
//! in waits for them while they could still make a majority (`kind::queued::markers_wait`); then it attempts.
//!
//! # Liveness: a waiter that dies, a node that is down
//!
//! - Every entry has a deadline on its node (`muxlock:queue-deadlines:<resource>`, in the node's own clock: only
//!   durations on one clock are compared) of one [`entry_lease`](crate::redlock::kind::queued::entry_lease): a waiter refreshes it with every attempt, and
//!   wakes at least every quarter lease to do so. An entry past its deadline is dropped by the next attempt of any
//!   other waiter, and the new head's turn key is bumped. A waiter that dies (crash, `kill -9`, a paused process)
//!   therefore blocks the others for at most one lease plus a quarter after its last refresh: the bounded fallback.
//! - A waiter that gives up (its `max_wait`, a cancel, an error) leaves the queue on every node at once. The queue's keys expire one lease after the last waiter's refresh.
//! - A node down or hung does not vote; the head's grants from the others make the majority (4 of 5, 2 of 3) as for
//!   any acquisition, and the round ends at the majority, without waiting for the silent node.
//! - The head is decided per node, and a waiter counts as the head if any node says so (an inconsistent queue then
//!   costs a refused attempt, not a stall); if it is refused although the nodes say the key is free, it looks again
//!   at once up to three times, then after the retry pause (`Config::retry_delay`).
//! - Clients that do not queue (requests that do not wait, other Redlock clients) are not slowed: their `SET NX` wins
//!   whenever the key is free. Queued waiters then wait on the key again.
//!
//! # Every kind that queues, behind one gate
//!
//! The queue is per waiting line (`Line::key`): a plain lock's resource, a semaphore's name, a read-write lock's
//! readers and, apart, its writers (each class in the order it came; a writer at the head of the writers'
//! queue that readers refuse marks its intent, which keeps new readers out: writers go first). The acquisition
//! script of each such kind is its own offer script run inside the same gate (`lua.rs`, `queued!`; the gate's
//! keys and arguments follow the kind's): [`lua::QUEUE_ACQUIRE`](crate::redlock::lua::QUEUE_ACQUIRE) around the spec's `SET NX PX`,
//! `QUEUE_PERMITS` around a semaphore's offer of its permits, `QUEUE_READ` and `QUEUE_WRITE` around a reader's
//! and a writer's. The head of a semaphore's queue takes whichever permit is free (the next waiter's turn comes
//! as it leaves the queue, and it takes the next free permit, if one is); the head of a read-write lock's queue
//! is a reader or a writer, and a writer at the head that readers refuse leaves its intent as a writer that does
//! not queue does. The argument above holds for each as it is: the gate runs the kind's script unchanged or not
//! at all, so a node grants a permit, a reader slot or the writer key in fewer cases than without the queue,
//! never in more; and each kind's own argument (`kind/semaphore.rs`, `kind/rwlock.rs`) is about what its script
//! grants, counted by its quorums, which the gate does not touch. The head probes its line's keys (any permit,
//! the writer and intent keys, the writer key and every reader slot); the others watch their turn keys.
//!
//! A plain, semaphore or read-write request that [waits](crate::redlock::Request::wait) queues (whatever its
//! terminal); sets, fenced locks and owned holds wait in this process' line only (`Kind::queues`).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;

use super::{FREE_STREAK, Place, Young, give_up, note_wait, park, sleep, wake_for_holder};
use crate::net::NodeSet;
use crate::redlock::engine::seam::NodeRound;
use crate::redlock::error::{Error, Outcome, Report, Result};
use crate::redlock::guard::Keeper;
use crate::redlock::guard::turns::Armed;
use crate::redlock::kind::queued::{self, ByPush, Entry, Handed};
use crate::redlock::kind::{Ask, Intent, Kind, Line, Lock};
use crate::redlock::quorum::Failure;
use crate::redlock::stats::Activity;
use crate::resp::{Value, encode_command};
use crate::time::later;

/// The nodes refuse the queue's script: [`queued_wait`] gives up on the queue, and the caller waits without it.
#[derive(Debug)]
pub(super) struct Refused;

/// Whether a queued attempt failed because enough nodes refuse the queue's script that it can never get a
/// majority: an ACL without the commands or keys the script uses (`NOPERM`), `EVAL` disabled or unknown. Only
/// error replies of that kind count; a node down, hung or holding the lock does not.
fn refuses_the_queue(report: &Report, quorum: usize) -> bool {
    let refusing = report
        .nodes
        .iter()
        .filter(|(_, o)| {
            matches!(o, Outcome::ErrorReply(m)
                if m.starts_with("NOPERM") || m.starts_with("ERR unknown command") || m.contains("disabled"))
        })
        .count();
    refusing > report.nodes.len() - quorum
}

/// A new entry in the queue of `line`: a random id, and a ticket from the wall clock now. `hands_on`: the line is
/// a plain lock's resource.
fn new_entry(keeper: &Keeper, (line, hands_on): (&[u8], bool)) -> Entry {
    let engine = &keeper.engine;
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    Entry::new(
        (
            keeper.turns.prefix(),
            engine.tokens.random_u64().unwrap_or(0),
        ),
        micros,
        engine.config.round_timeout,
        (line, hands_on),
    )
}

/// The entry of a waiter that has joined the nodes' queue, or whose attempt is under way (a task's future dropped
/// then may have been queued by it anywhere, once the nodes run it): it leaves the queue on every node when
/// dropped, with the lock or without.
struct Queued<'a> {
    keeper: &'a Keeper,
    entry: Option<Entry>,
    joined: bool,
    attempting: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(entry) = &self.entry {
            self.keeper.turns.forget(entry.id());
            if self.joined || self.attempting {
                queued::leave(&self.keeper.engine, entry, NodeSet::ALL);
            }
        }
    }
}

/// A waiting request's loop for a kind that queues: as [`wait_for`](super::wait_for), with queued attempts, and a
/// waiter that is not the queue's head waits on its turn key instead of the line's keys. For threads (under
/// `block`) and tasks alike; a task's future dropped part-way leaves the nodes' queue (`Queued`) and this process'
/// line (`Place`), and an attempt cut short releases what it may have been granted (`kind/queued.rs`, `attempt`).
pub(super) async fn queued_wait(
    keeper: &Arc<Keeper>,
    ask: &Ask,
    line: &Line,
    max_wait: Duration,
    intent: &Intent<'_>,
) -> std::result::Result<Result<Lock>, Refused> {
    let until = later(Instant::now(), max_wait);
    let cancels = keeper.waits.cancels();
    let key = &line.key[..];
    let ticket = keeper.waits.join_for(key, &line.grouped);
    let _place = Place {
        room: &keeper.waits,
        resource: key,
        ticket,
    };
    let engine = &keeper.engine;
    let mut queued = Queued {
        keeper,
        entry: None,
        joined: false,
        attempting: false,
    };
    let mut last: Option<Error> = None;
    let mut free_streak = 0;
    let mut waited = false;
    let mut young = Young::new();
    let activity = &keeper.activity;
    let quorum = engine.quorum();
    // A plain lock's last refused attempt, and the listener's sessions noted before it was sent: what a grant
    // by push counts.
    let mut refused: Option<(Handed, Armed)> = None;
    let mut coming: Option<Instant> = None;
    loop {
        let (head, generation) = keeper.waits.head(key, ticket);
        let cancelled = keeper.waits.cancels() != cancels;
        if let Some(e) = give_up(
            keeper,
            (key, &line.name),
            (head, cancelled, until),
            &mut last,
        ) {
            return Ok(Err(e));
        }
        if !head {
            note_wait(&mut waited, activity);
            park(&keeper.waits, (key, ticket, None), until).await;
            continue;
        }
        // The process's head takes a place in the nodes' queue when it first comes to the front here.
        let entry = queued
            .entry
            .get_or_insert_with(|| new_entry(keeper, (key, matches!(ask.kind, Kind::Plain))));
        // The keys handed on to this waiter since its last refusal may make the lock its without an attempt
        // ("The grant by push"). Woken while the markers that could still come would make a majority, it waits
        // for them (from its first look, as long as `by_push` says: longer once one is in) before an attempt
        // takes what was handed.
        if let Some((handed, armed)) = &refused {
            let pushed = keeper.turns.pushed(entry.id(), &handed.value, armed);
            let listening = keeper.turns.still(armed);
            match queued::by_push(engine, (entry, &ask.resource), handed, (pushed, listening)) {
                ByPush::Granted(lock) => {
                    Activity::add(&activity.granted_by_push, 1);
                    queued.joined = false;
                    return Ok(Ok(*lock));
                }
                ByPush::Coming(wait) => {
                    let now = Instant::now();
                    let rest = later(*coming.get_or_insert(now), wait)
                        .min(later(handed.start, handed.ttl / 3));
                    if now < rest {
                        sleep(keeper, (key, ticket, generation), rest.min(until), until).await;
                        continue;
                    }
                }
                ByPush::No => {}
            }
            (refused, coming) = (None, None);
        }
        // Before the attempt goes: the nodes whose turn listener will push any change of the turn key after the
        // node runs it (`guard/turns.rs`), and the markers of keys handed on to it (kept from now on).
        let armed = keeper.turns.armed();
        if entry.hands_on() {
            keeper.turns.expect(entry.id());
        }
        queued.attempting = true;
        let attempt = queued::attempt(engine, ask, (entry, queued.joined), intent).await;
        queued.attempting = false;
        let (failure, mut report, refusal) = match attempt {
            // Held by a majority now: the attempt left the queue wherever the waiter may still be in it (the
            // next waiter's turn comes with it).
            Ok(Ok(lock)) => {
                queued.joined = false;
                return Ok(Ok(lock));
            }
            Ok(Err(failed)) => failed,
            Err(e) => return Ok(Err(e)),
        };
        // The request may have queued this waiter on any node it reached, whether or not its reply was read (a
        // node hung past the round runs it when it resumes): from the first failed attempt on, the waiter leaves
        // everywhere as it goes, with the lock or without, or giving up on the queue where most nodes refuse it.
        queued.joined = true;
        if refuses_the_queue(&report, quorum) {
            return Err(Refused);
        }
        if let (Failure::Held, Some(handed)) = (failure, &refusal.handed) {
            keeper
                .turns
                .await_markers(entry.id(), handed, &armed, quorum);
            refused = Some((handed.clone(), armed.clone()));
        }
        young.note(&report);
        let now = Instant::now();
        let refresh = later(now, entry.lease / 4);
        let wake = match failure {
            Failure::Held => {
                // Tracking needs the watchdog to listen for the invalidations armed below.
                keeper.watchdog.ensure_started(Arc::downgrade(keeper));
                // A quorum of nodes pushes every change of the turn key since before the attempt: a change
                // after the refusal moves the line's generation, read before the attempt, and the sleep below
                // ends at once. Otherwise the waiter arms the key by reading it (and starts the listener for its
                // next attempts).
                let listened = keeper.turns.tracked(&armed);
                if listened < quorum {
                    keeper.turns.start(keeper);
                }
                let arm = async || match listened >= quorum {
                    true => (false, listened),
                    false => arm_turn(keeper, entry, &refusal.turns).await,
                };
                // A key handed on to this waiter bumps its turn key: the head of a plain lock's line watches it
                // too, so that a hand-off that came between the refused attempt and the look at the line's keys
                // is seen now, and a later one wakes it.
                let handed = refusal.head && entry.hands_on() && arm().await.0;
                if handed {
                    now
                } else if refusal.head {
                    // Our turn: wait for the line's keys, as a lone waiter does.
                    let wake = wake_for_holder(
                        keeper,
                        (&line.probed(), line.any),
                        &mut report,
                        &mut free_streak,
                        now,
                    )
                    .await;
                    // A refused head's mark lapses with its lease (a writer's intent): it tries again within
                    // half a lease (`Line::marks`).
                    match line.marks {
                        true => wake.min(later(now, ask.ttl / 2)),
                        false => wake,
                    }
                } else {
                    // Another waiter's turn: wait for ours (or refresh the entry).
                    let (changed, tracked) = arm().await;
                    if changed && free_streak < FREE_STREAK {
                        free_streak += 1;
                        now
                    } else if tracked < quorum {
                        later(now, engine.retry_pause())
                    } else {
                        free_streak = 0;
                        refresh
                    }
                }
            }
            Failure::Unavailable | Failure::TooLate => later(now, engine.retry_pause()),
        };
        let error = match failure {
            Failure::Held => Error::Held(Box::new(report)),
            _ => Error::Quorum(Box::new(report)),
        };
        keeper.waits.set_error(key, &error);
        last = Some(error);
        note_wait(&mut waited, activity);
        sleep(
            keeper,
            (key, ticket, generation),
            wake.min(refresh).min(until),
            until,
        )
        .await;
    }
}

/// Reads the waiter's turn key on the tracker connections (where the turn listener does not cover a quorum of
/// nodes), which arms tracking of it: the waiter ahead that
/// takes the lock (or a node dropping a dead head) bumps it, and the push wakes this waiter. Returns whether
/// some node's value already differs from what the attempt saw (the turn came meanwhile), and on how many
/// nodes the key is now tracked.
async fn arm_turn(keeper: &Keeper, entry: &Entry, seen: &[Option<i64>]) -> (bool, usize) {
    let engine = &keeper.engine;
    let Some(tracker) = keeper.watchdog.tracker(engine) else {
        return (false, 0);
    };
    let fresh = (0..tracker.len()).any(|i| tracker.sessions(i) == 0);
    let wait = match fresh {
        true => engine
            .config
            .round_timeout
            .saturating_add(engine.config.connect_timeout),
        false => engine.config.round_timeout,
    };
    let mut request = BytesMut::with_capacity(16 + entry.turn.len());
    encode_command(&[b"GET", &entry.turn], &mut request);
    let mut round = tracker.round(later(Instant::now(), wait));
    round.send_all(&request, 1);
    // A majority of answers is enough (as for the probe): a bump on a node that answered after it is pushed.
    let enough = engine.quorum();
    round.need(enough);
    let (mut changed, mut tracked) = (false, 0);
    let mut errors = Vec::new();
    while tracked < enough {
        // Blocks a thread under `block`; a task's poll never blocks (the seam's `next`).
        // One request per node: its outcome is the node's.
        let Some((id, reply)) = NodeRound::next(&mut round).await else {
            break;
        };
        let node = id.node;
        let now = match reply {
            Ok(v) => match v.without_attributes() {
                Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
                Value::Null | Value::NullBulk => Some(0),
                _ => None,
            },
            Err(e) => {
                errors.push(e);
                None
            }
        };
        if let Some(now) = now {
            tracked += 1;
            changed |= seen.get(node).copied().flatten().is_some_and(|s| s != now);
        }
        round.need(enough.saturating_sub(tracked));
    }
    drop(round);
    keeper.watchdog.note_tracker_errors(errors.iter().map(Some));
    (changed, tracked)
}
