//! Hand-off across processes: which waiter tries when a lock is released (issue #24).
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
//! the client and sent to every node. Acquisition is [`lua::QUEUE_ACQUIRE`], one script per node:
//!
//! - if the queue is empty or this waiter heads it: the plain `SET key value NX PX ttl`;
//! - otherwise the node refuses (a "taken" vote) and the waiter joins or stays in the queue with its ticket, and
//!   learns its rank and its turn key's value.
//!
//! A waiter that got a majority leaves the queue on every node ([`lua::QUEUE_LEAVE`], sent without waiting), which
//! bumps the next waiter's *turn key* (`muxlock:turn:<id>:<resource>`). It does not leave in the acquisition
//! script itself: a grant that turns out partial (the round fails) would have taken it off some nodes' queues
//! only, and two waiters, each heading one live node of 3, refused each other until an entry expired (found by
//! `tests/handoff.rs`, 1.5 s stalls).
//!
//! The head of the queue waits on the lock key (it reads it on the tracker connections, as before: a release,
//! overwrite or expiry wakes it); every other waiter reads only its own turn key on the tracker, so a release
//! wakes one process, and a grant wakes one more (the new head, which then watches the lock key). A release
//! costs the head's one round, and a grant one leave (not awaited) and the new head's two (its refused attempt, its
//! `PTTL` on the tracker); nobody else sends anything.
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
//! the unchanged [`Quorum`] (a majority of grants within the validity, drift allowance included), and a failed
//! round releases its partial grants as `lock` does. So every argument for Redlock's mutual exclusion (and every
//! test of it: `tests/mutex`) applies as is; the queue can delay a grant, not cause one.
//!
//! # Liveness: a waiter that dies, a node that is down
//!
//! - Every entry has a deadline on its node (`muxlock:queue-deadlines:<resource>`, in the node's own clock: only
//!   durations on one clock are compared) of one [`entry_lease`]: a waiter refreshes it with every attempt, and
//!   wakes at least every quarter lease to do so. An entry past its deadline is dropped by the next attempt of any
//!   other waiter, and the new head's turn key is bumped. A waiter that dies (crash, `kill -9`, a paused process)
//!   therefore blocks the others for at most one lease plus a quarter after its last refresh: the bounded fallback.
//! - A waiter that gives up (its `max_wait`, a cancel, an error) leaves the queue on every node at once, as a
//!   granted one does. The queue's keys expire one lease after the last waiter's refresh.
//! - A node down or hung does not vote; the head's grants from the others make the majority (4 of 5, 2 of 3) as for
//!   any acquisition, and the round ends at the majority, without waiting for the silent node.
//! - The head is decided per node, and a waiter counts as the head if any node says so (an inconsistent queue then
//!   costs a refused attempt, not a stall); if it is refused although the nodes say the key is free, it looks again
//!   at once up to three times, then after the retry pause (`Config::retry_delay`).
//! - Clients that do not queue (`lock`, `try_lock`, other Redlock clients) are not slowed: their `SET NX` wins
//!   whenever the key is free. Queued waiters then wait on the key again.
//!
//! Only [`LockManager::lock_wait`](crate::redlock::LockManager::lock_wait) and what builds on it (`hold_wait`)
//! queue; `hold_fenced_wait` still waits as before.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;

use super::super::core::{Core, is_noscript, settle};
use super::super::error::{Error, Outcome, Report, Result};
use super::super::lock::Lock;
use super::super::lua::{self, Lua};
use super::super::quorum::{Failure, Quorum, Status, Vote, drift};
use super::super::scripts::{self, Script};
use super::super::seam::Clock;
use super::super::stats::Activity;
use super::{FREE_STREAK, Place};
use crate::net::{NodeSet, Reply};
use crate::resp::{Decimal, Value, encode_command};
use crate::time::later;

/// The start of every turn key: `muxlock:turn:<16 hex digits of the waiter's id>:<resource>`.
pub(crate) const TURN_PREFIX: &[u8] = b"muxlock:turn:";
/// The length of a waiter's id (hex digits).
const ID_LEN: usize = 16;

/// The resource a turn key is about, if `key` is one.
pub(crate) fn resource_of_turn(key: &[u8]) -> Option<&[u8]> {
    let rest = key.strip_prefix(TURN_PREFIX)?;
    match rest.get(ID_LEN) {
        Some(b':') => rest.get(ID_LEN + 1..),
        _ => None,
    }
}

/// How long a queue entry lives on a node without a refresh: 4 round timeouts, at least 1 s. A waiter refreshes it
/// every quarter of this; a dead waiter holds up the queue for at most this plus a quarter.
pub(crate) fn entry_lease(round_timeout: Duration) -> Duration {
    round_timeout.saturating_mul(4).max(Duration::from_secs(1))
}

/// A waiting process's place in the nodes' queue of one resource.
#[derive(Debug)]
struct Entry {
    id: Vec<u8>,
    ticket: Vec<u8>,
    lease_ms: Vec<u8>,
    lease: Duration,
    queue: Vec<u8>,
    deadlines: Vec<u8>,
    turn: Vec<u8>,
}

impl Entry {
    fn new(core: &Core, resource: &[u8]) -> Entry {
        let id = format!("{:016x}", core.tokens.random_u64().unwrap_or(0)).into_bytes();
        // The ticket orders the waiters: when this one began to wait, on the wall clock (the same on every node's
        // copy of the queue, whatever order the joins reach the nodes in).
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        let lease = entry_lease(core.config.round_timeout);
        let decimal = |v: u128| {
            Decimal::new(i64::try_from(v).unwrap_or(i64::MAX))
                .as_bytes()
                .to_vec()
        };
        let with = |prefix: &[u8]| [prefix, resource].concat();
        Entry {
            ticket: decimal(micros),
            lease_ms: decimal(lease.as_millis()),
            lease,
            queue: with(b"muxlock:queue:"),
            deadlines: with(b"muxlock:queue-deadlines:"),
            turn: [TURN_PREFIX, &id, b":", resource].concat(),
            id,
        }
    }

    /// The script call, with `value` and `ttl_ms` for an acquisition (empty for a leave).
    fn call(
        &self,
        buf: &mut BytesMut,
        lua: Lua,
        full: bool,
        resource: &[u8],
        value: &[u8],
        ttl: &[u8],
    ) {
        lua::eval(
            buf,
            lua,
            full,
            &[resource, &self.queue, &self.deadlines],
            &[value, ttl, &self.id, &self.ticket, &self.lease_ms, resource],
        );
    }
}

/// What the nodes that refused a queued attempt said.
#[derive(Debug)]
struct Refusal {
    /// Some node has this waiter at the head of its queue.
    head: bool,
    /// Per node, the turn key's value it reported.
    turns: Vec<Option<i64>>,
    /// How many nodes put the waiter in their queue.
    queued: usize,
}

/// A queued attempt's reply as a vote; a refusal's rank and turn go into `refusal`.
fn queue_vote(reply: &Reply, node: usize, refusal: &mut Refusal) -> (Vote, Outcome) {
    match reply {
        Ok(v) => match v.without_attributes() {
            Value::Integer(1) => (Vote::Yes, Outcome::Granted),
            Value::Array(items) => {
                if let (Some(Value::Integer(rank)), Some(Value::Integer(turn))) =
                    (items.first(), items.get(1))
                {
                    refusal.head |= *rank == 0;
                    refusal.queued += 1;
                    if let Some(t) = refusal.turns.get_mut(node) {
                        *t = Some(*turn);
                    }
                }
                (Vote::Taken, Outcome::Taken)
            }
            Value::Error(msg) | Value::BulkError(msg) => (
                Vote::Failed,
                Outcome::ErrorReply(String::from_utf8_lossy(msg).into_owned()),
            ),
            other => (
                Vote::Failed,
                Outcome::ErrorReply(format!("unexpected reply {other:?}")),
            ),
        },
        Err(e) => (Vote::Failed, Outcome::Failed(e.clone())),
    }
}

/// The entry of a waiter that has joined the nodes' queue: it leaves it on every node when dropped, with the lock
/// or without.
struct Queued<'a> {
    core: &'a Core,
    resource: &'a [u8],
    entry: Option<Entry>,
    joined: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let (true, Some(entry)) = (self.joined, &self.entry) {
            self.core.leave_queue(self.resource, entry, NodeSet::ALL);
        }
    }
}

impl Core {
    /// [`Core::lock_wait`]'s loop: as [`wait_for`](Core::wait_for), with queued attempts, and a waiter that is not
    /// the queue's head waits on its turn key instead of the lock key.
    pub(super) fn queued_wait(
        self: &Arc<Core>,
        resource: &[u8],
        ttl: Duration,
        ttl_ms: u64,
        max_wait: Duration,
    ) -> Result<Lock> {
        let until = later(Instant::now(), max_wait);
        let cancels = self.waits.cancels();
        let ticket = self.waits.join(resource);
        let _place = Place {
            room: &self.waits,
            resource,
            ticket,
        };
        let mut queued = Queued {
            core: self,
            resource,
            entry: None,
            joined: false,
        };
        let mut last: Option<Error> = None;
        let mut free_streak = 0;
        let mut waited = false;
        let activity = &self.activity;
        let quorum = self.quorum();
        loop {
            let (head, generation) = self.waits.head(resource, ticket);
            let cancelled = self.waits.cancels() != cancels;
            if Instant::now() >= until || cancelled {
                let error = last.take().or_else(|| self.waits.last_error(resource));
                if error.is_some() || !head || cancelled {
                    Activity::add(&activity.waits_given_up, 1);
                }
                if let Some(e) = error {
                    return Err(e);
                }
                if !head || cancelled {
                    return Err(Error::Held(Box::new(self.report(
                        resource,
                        vec![Outcome::NotAwaited; self.fanout.len()],
                        quorum,
                    ))));
                }
                // The head makes one attempt, even with no time to wait at all.
            }
            if !head {
                if !waited {
                    waited = true;
                    Activity::add(&activity.waits, 1);
                }
                self.waits.park(resource, ticket, None, until);
                continue;
            }
            // The process's head takes a place in the nodes' queue when it first comes to the front here.
            let entry = queued
                .entry
                .get_or_insert_with(|| Entry::new(self, resource));
            let (failure, mut report, refusal) =
                match self.queued_attempt(resource, ttl, ttl_ms, entry, queued.joined)? {
                    // Held by a majority now: `queued` leaves the queue on every node as it drops (the next waiter's
                    // turn comes with it).
                    Ok(lock) => return Ok(lock),
                    Err(failed) => failed,
                };
            queued.joined |= refusal.queued > 0;
            let now = Instant::now();
            let refresh = later(now, entry.lease / 4);
            let wake = match failure {
                Failure::Held => {
                    // Tracking needs the watchdog to listen for the invalidations armed below.
                    self.watchdog.ensure_started(Arc::downgrade(self));
                    if refusal.head {
                        // Our turn: wait for the lock key, as a lone waiter does.
                        let probe = self.probe(resource);
                        report.holder_ttl = probe.free_in.filter(|d| !d.is_zero());
                        let wake = match probe.free_in {
                            Some(d) if d.is_zero() && free_streak < FREE_STREAK => {
                                free_streak += 1;
                                now
                            }
                            Some(d) if !d.is_zero() => {
                                free_streak = 0;
                                later(now, d + self.expiry_jitter(d))
                            }
                            _ => later(now, self.retry_pause()),
                        };
                        match probe.tracked < quorum {
                            true => wake.min(later(now, self.retry_pause())),
                            false => wake,
                        }
                    } else {
                        // Another waiter's turn: wait for ours (or refresh the entry).
                        let (changed, tracked) = self.arm_turn(entry, &refusal.turns);
                        if changed && free_streak < FREE_STREAK {
                            free_streak += 1;
                            now
                        } else if tracked < quorum {
                            later(now, self.retry_pause())
                        } else {
                            free_streak = 0;
                            refresh
                        }
                    }
                }
                Failure::Unavailable | Failure::TooLate => later(now, self.retry_pause()),
            };
            let error = match failure {
                Failure::Held => Error::Held(Box::new(report)),
                _ => Error::Quorum(Box::new(report)),
            };
            self.waits.set_error(resource, &error);
            last = Some(error);
            let wake = wake.min(refresh).min(until);
            if !waited {
                waited = true;
                Activity::add(&activity.waits, 1);
            }
            while Instant::now() < wake && self.waits.head(resource, ticket).1 == generation {
                self.waits.park(resource, ticket, Some(generation), wake);
            }
            if Instant::now() < until {
                Activity::add(&activity.wakeups, 1);
            }
        }
    }

    /// One queued acquisition round ([`lua::QUEUE_ACQUIRE`] on every node), decided by the plain [`Quorum`]. On a
    /// failure, partial grants are released at once, as [`Core::attempt`] does; the queue is left as it was.
    #[allow(clippy::type_complexity)]
    fn queued_attempt(
        &self,
        resource: &[u8],
        ttl: Duration,
        ttl_ms: u64,
        entry: &Entry,
        joined: bool,
    ) -> Result<std::result::Result<Lock, (Failure, Report, Refusal)>> {
        let value = self.tokens.next().map_err(|e| Error::Os {
            doing: "drawing the lock value from the OS's randomness",
            error: std::io::Error::from(e).into(),
        })?;
        let n = self.fanout.len();
        let ttl_digits = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let mut request = BytesMut::with_capacity(256 + 4 * resource.len());
        entry.call(
            &mut request,
            lua::QUEUE_ACQUIRE,
            false,
            resource,
            &value,
            ttl_digits.as_bytes(),
        );
        self.note_ttl(ttl_ms);
        // The clock starts before the first byte is sent, as the spec requires.
        let start = self.clock.now();
        let mut quorum = Quorum::new(n, start, ttl, drift(ttl, self.config.drift_factor));
        let mut round = self
            .fanout
            .round(later(start, self.config.round_timeout).min(quorum.deadline()));
        let nodes = round.send_all(&request, 1);
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let mut refusal = Refusal {
            head: false,
            turns: vec![None; n],
            queued: 0,
        };
        let mut resent: Vec<bool> = Vec::new();
        let mut status = Status::Pending;
        round.need(quorum.votes_to_decide());
        while let Some((node, reply)) = round.next() {
            if is_noscript(&reply) && !resent.get(node).copied().unwrap_or(false) {
                resent.resize(n, false);
                resent[node] = true;
                request.clear();
                entry.call(
                    &mut request,
                    lua::QUEUE_ACQUIRE,
                    true,
                    resource,
                    &value,
                    ttl_digits.as_bytes(),
                );
                round.send(node, &request, 1);
                continue;
            }
            let now = self.clock.now();
            let (vote, outcome) =
                self.counted(node, queue_vote(&reply, node, &mut refusal), now, None);
            self.votes[node].count(&outcome);
            outcomes[node] = outcome;
            status = quorum.vote(node, vote, now);
            if status != Status::Pending {
                break;
            }
            round.need(quorum.votes_to_decide());
        }
        drop(round);
        let now = self.clock.now();
        let status = match status {
            Status::Pending => quorum.closed(now),
            decided => decided,
        };
        match settle(status, &quorum, now) {
            Ok(valid_until) => {
                // A waiter that never queued may have been queued by this very round on the nodes that did not
                // grant (not awaited, or refused: another waiter headed them a moment ago): it leaves there, or
                // its entry would head those nodes' queues, unattended, for a lease. (A waiter that queued before
                // leaves everywhere as its `Queued` drops.)
                if !joined {
                    let mut others = NodeSet::EMPTY;
                    for (node, o) in outcomes.iter().enumerate() {
                        if !matches!(o, Outcome::Granted | Outcome::Quarantined)
                            && nodes.contains(node)
                        {
                            others.insert(node);
                        }
                    }
                    if others != NodeSet::EMPTY {
                        self.leave_queue(resource, entry, others);
                    }
                }
                Ok(Ok(Lock {
                    resource: resource.to_vec(),
                    value,
                    valid_until,
                    acquired: start,
                    extensions: 0,
                    nodes,
                }))
            }
            Err(failure) => {
                // Release at once wherever the key may have been set (the spec's "unlock all the instances").
                let mut release = BytesMut::new();
                scripts::call(&mut release, Script::Release, false, resource, &value, 0);
                let mut round = self.fanout.release_round(self.clock.now());
                round.send_to(nodes, &release, 1);
                Ok(Err((
                    failure,
                    self.report(resource, outcomes, quorum.quorum()),
                    refusal,
                )))
            }
        }
    }

    /// Takes `entry` off the queue on `nodes` ([`lua::QUEUE_LEAVE`]), without waiting for the replies (a node that
    /// lost the script keeps the entry until its deadline).
    fn leave_queue(&self, resource: &[u8], entry: &Entry, nodes: NodeSet) {
        let mut request = BytesMut::with_capacity(256 + 4 * resource.len());
        entry.call(&mut request, lua::QUEUE_LEAVE, false, resource, b"", b"0");
        let mut round = self.fanout.release_round(self.clock.now());
        round.send_to(nodes, &request, 1);
    }

    /// Reads the waiter's turn key on the tracker connections, which arms tracking of it: the waiter ahead that
    /// takes the lock (or a node dropping a dead head) bumps it, and the push wakes this waiter. Returns whether
    /// some node's value already differs from what the attempt saw (the turn came meanwhile), and on how many
    /// nodes the key is now tracked.
    fn arm_turn(&self, entry: &Entry, seen: &[Option<i64>]) -> (bool, usize) {
        let Some(tracker) = self.watchdog.tracker(self) else {
            return (false, 0);
        };
        let fresh = (0..tracker.len()).any(|i| tracker.sessions(i) == 0);
        let wait = match fresh {
            true => self
                .config
                .round_timeout
                .saturating_add(self.config.connect_timeout),
            false => self.config.round_timeout,
        };
        let mut request = BytesMut::with_capacity(16 + entry.turn.len());
        encode_command(&[b"GET", &entry.turn], &mut request);
        let mut round = tracker.round(later(Instant::now(), wait));
        round.send_all(&request, 1);
        // A majority of answers is enough (as for the probe): a bump on a node that answered after it is pushed.
        let enough = self.quorum();
        round.need(enough);
        let (mut changed, mut tracked) = (false, 0);
        let mut errors = Vec::new();
        while tracked < enough {
            let Some((node, reply)) = round.next() else {
                break;
            };
            let now = match reply {
                Ok(v) => match v.without_attributes() {
                    Value::BulkString(b) => {
                        std::str::from_utf8(b).ok().and_then(|s| s.parse().ok())
                    }
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
        self.watchdog.note_tracker_errors(errors.iter().map(Some));
        (changed, tracked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_key_names_its_resource() {
        assert_eq!(
            resource_of_turn(b"muxlock:turn:0123456789abcdef:jobs:42"),
            Some(&b"jobs:42"[..])
        );
        assert_eq!(
            resource_of_turn(b"muxlock:turn:0123456789abcdef:"),
            Some(&b""[..])
        );
        assert_eq!(resource_of_turn(b"muxlock:turn:0123:jobs"), None);
        assert_eq!(resource_of_turn(b"jobs"), None);
        assert_eq!(
            entry_lease(Duration::from_millis(50)),
            Duration::from_secs(1)
        );
        assert_eq!(entry_lease(Duration::from_secs(1)), Duration::from_secs(4));
    }
}
