//! [`WaitRoom`]: the queue of this process' waiters for each resource, and how they are woken.
//!
//! Waiters for one resource line up first come, first served: only the head of the line contends on the nodes
//! (the others would only add `SET`s that fail), and the line moves on when the head gets the lock or gives up.
//! A waiter is woken, rather than polling, by:
//!
//! - a release of the resource in this process ([`LockManager::unlock`](super::LockManager::unlock), a guard's
//!   release or drop): [`WaitRoom::notify`], right after the release round;
//! - a change of the key seen by the watchdog's tracker connections (client-side tracking's invalidation: deleted,
//!   overwritten or expired, by any client anywhere): the watchdog calls [`WaitRoom::notify`];
//! - its own timer: the holder's remaining lease as the nodes reported it, plus a little jitter (an expiry's
//!   invalidation can lag the TTL, and nodes without RESP3 send none).
//!
//! # Invariants
//!
//! - Each resource's [`Line`] has a `generation` that every notify bumps. The head reads it *before* its attempt
//!   and sleeps only while it is unchanged, so a release between a failed attempt and the sleep is never missed.
//! - `rooms` is taken briefly and never across I/O; waiters park outside it. A notify unparks the head only (the
//!   others wait for their turn, not for the key); a head that leaves unparks the next one.
//! - `waiting` counts the waiters of all resources, so that the release path of a process nobody waits in takes no
//!   lock at all.
//! - `cancels` only grows. A waiter reads it when it starts and gives up once it has changed
//!   ([`WaitRoom::cancel_all`] bumps it *before* it unparks everyone, so a waiter about to park finds the unpark
//!   token and looks again).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::core::Core;
use super::error::{Error, Outcome, Report, Result};
use super::fenced::FencedLock;
use super::lock::Lock;
use super::quorum::Failure;
use super::stats::Activity;
use crate::net::{Fanout, NodeError};
use crate::resp::{Value, encode_command};
use crate::sync::lock;
use crate::time::later;

mod handoff;

/// A waiter's place in its resource's line.
pub(crate) type Ticket = u64;

#[derive(Debug, Default)]
struct Line {
    next_ticket: Ticket,
    queue: VecDeque<(Ticket, Thread)>,
    generation: u64,
    /// Why the head's last attempt failed, for waiters that give up before their turn.
    last_error: Option<Error>,
}

/// The lines of waiters, per resource.
#[derive(Debug, Default)]
pub(crate) struct WaitRoom {
    waiting: AtomicUsize,
    /// Bumped by [`WaitRoom::cancel_all`]: waiters that started before give up.
    cancels: AtomicU64,
    rooms: Mutex<HashMap<Vec<u8>, Line>>,
}

impl WaitRoom {
    /// Joins the end of `resource`'s line.
    pub(crate) fn join(&self, resource: &[u8]) -> Ticket {
        let mut rooms = lock(&self.rooms);
        let line = rooms.entry(resource.to_vec()).or_default();
        line.next_ticket += 1;
        let ticket = line.next_ticket;
        line.queue.push_back((ticket, thread::current()));
        self.waiting.fetch_add(1, Ordering::AcqRel);
        ticket
    }

    /// Leaves the line (with the lock, or giving up), and wakes the next waiter if this one was the head.
    pub(crate) fn leave(&self, resource: &[u8], ticket: Ticket) {
        let mut rooms = lock(&self.rooms);
        let Some(line) = rooms.get_mut(resource) else {
            return;
        };
        let Some(at) = line.queue.iter().position(|(t, _)| *t == ticket) else {
            return;
        };
        line.queue.remove(at);
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        let next = match at {
            0 => line.queue.front().map(|(_, t)| t.clone()),
            _ => None,
        };
        if line.queue.is_empty() {
            rooms.remove(resource);
        }
        drop(rooms);
        if let Some(t) = next {
            t.unpark();
        }
    }

    /// Whether `ticket` heads its line, and the line's generation.
    pub(crate) fn head(&self, resource: &[u8], ticket: Ticket) -> (bool, u64) {
        let rooms = lock(&self.rooms);
        rooms.get(resource).map_or((false, 0), |line| {
            let head = line.queue.front().is_some_and(|(t, _)| *t == ticket);
            (head, line.generation)
        })
    }

    /// Parks the calling waiter until `until`, or until it heads its line and the generation is no longer
    /// `seen` (`None`: until it heads the line). Returns at once if that is already so. May return early
    /// (spurious wake-ups): callers look again.
    pub(crate) fn park(&self, resource: &[u8], ticket: Ticket, seen: Option<u64>, until: Instant) {
        let (head, generation) = self.head(resource, ticket);
        let ready = match seen {
            None => head,
            Some(g) => head && generation != g,
        };
        if !ready {
            thread::park_timeout(until.saturating_duration_since(Instant::now()));
        }
    }

    /// The key of `resource` may have come free, or (`resource` is a waiter's turn key) a waiter's turn in the
    /// nodes' queue came: wakes the head of its line, if anyone waits.
    pub(crate) fn notify(&self, resource: &[u8]) {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let resource = handoff::resource_of_turn(resource).unwrap_or(resource);
        let mut rooms = lock(&self.rooms);
        let Some(line) = rooms.get_mut(resource) else {
            return;
        };
        line.generation += 1;
        let head = line.queue.front().map(|(_, t)| t.clone());
        drop(rooms);
        if let Some(t) = head {
            t.unpark();
        }
    }

    /// Wakes the heads of every line (the tracker lost track of what changed).
    pub(crate) fn notify_all(&self) {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut heads = Vec::new();
        for line in lock(&self.rooms).values_mut() {
            line.generation += 1;
            heads.extend(line.queue.front().map(|(_, t)| t.clone()));
        }
        for t in heads {
            t.unpark();
        }
    }

    /// How many times [`cancel_all`](WaitRoom::cancel_all) was called: a waiter notes it when it starts.
    pub(crate) fn cancels(&self) -> u64 {
        self.cancels.load(Ordering::Acquire)
    }

    /// Makes every waiter that started before this call give up, and wakes them all (heads and the rest).
    pub(crate) fn cancel_all(&self) {
        self.cancels.fetch_add(1, Ordering::AcqRel);
        let mut all = Vec::new();
        for line in lock(&self.rooms).values_mut() {
            line.generation += 1;
            all.extend(line.queue.iter().map(|(_, t)| t.clone()));
        }
        for t in all {
            t.unpark();
        }
    }

    /// Records why the head's last attempt failed.
    pub(crate) fn set_error(&self, resource: &[u8], error: &Error) {
        if let Some(line) = lock(&self.rooms).get_mut(resource) {
            line.last_error = Some(error.clone());
        }
    }

    /// Why the head's last attempt failed, if it made one.
    pub(crate) fn last_error(&self, resource: &[u8]) -> Option<Error> {
        lock(&self.rooms)
            .get(resource)
            .and_then(|line| line.last_error.clone())
    }
}

/// A waiter's place in its line, left when dropped (with the lock, giving up, or on an error).
struct Place<'a> {
    room: &'a WaitRoom,
    resource: &'a [u8],
    ticket: Ticket,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.room.leave(self.resource, self.ticket);
    }
}

/// What a waiter learned from the nodes after a failed attempt.
struct Probe {
    /// How long until a majority lets the holder's key expire (zero: free already), if known.
    free_in: Option<Duration>,
    /// On how many nodes the key is now tracked: a release there will wake this process' waiters.
    tracked: usize,
}

/// After this many attempts in a row that failed although the nodes then said the key was free (a race with
/// other clients), the head pauses as after a failure.
const FREE_STREAK: u32 = 3;

impl Core {
    /// Acquires `resource`, waiting for it up to `max_wait`: see [`LockManager::lock_wait`].
    ///
    /// [`LockManager::lock_wait`]: super::LockManager::lock_wait
    pub(crate) fn lock_wait(
        self: &Arc<Core>,
        resource: &[u8],
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock> {
        let ttl_ms = self.check(resource, ttl)?;
        // Queued across processes: see `handoff`.
        self.queued_wait(resource, ttl, ttl_ms, max_wait)
    }

    /// Acquires `resource` with a fencing token, waiting for it up to `max_wait`: see
    /// [`LockManager::hold_fenced_wait`]. Each attempt is one [`Core::lock_fenced`] without retries.
    ///
    /// [`LockManager::hold_fenced_wait`]: super::LockManager::hold_fenced_wait
    pub(crate) fn lock_fenced_wait(
        self: &Arc<Core>,
        resource: &[u8],
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<FencedLock> {
        self.check(resource, ttl)?;
        self.wait_for(resource, max_wait, |core| {
            match core.lock_fenced(resource, ttl, false) {
                Ok(Some(lock)) => Ok(Ok(lock)),
                // Held: the per-node outcomes stay inside the fenced round; the probe that follows says how long
                // the holder has left.
                Ok(None) => Ok(Err((
                    Failure::Held,
                    core.report(
                        resource,
                        vec![Outcome::NotAwaited; core.fanout.len()],
                        core.quorum(),
                    ),
                ))),
                Err(Error::Quorum(report)) => Ok(Err((Failure::Unavailable, *report))),
                Err(e) => Err(e),
            }
        })
    }

    /// The waiting loop of [`lock_wait`](Core::lock_wait) around any kind of attempt: `attempt` makes one,
    /// returning the lock or why it failed.
    fn wait_for<T>(
        self: &Arc<Core>,
        resource: &[u8],
        max_wait: Duration,
        mut attempt: impl FnMut(&Core) -> Result<std::result::Result<T, (Failure, Report)>>,
    ) -> Result<T> {
        let until = later(Instant::now(), max_wait);
        let cancels = self.waits.cancels();
        let ticket = self.waits.join(resource);
        let _place = Place {
            room: &self.waits,
            resource,
            ticket,
        };
        let mut last: Option<Error> = None;
        let mut free_streak = 0;
        let mut waited = false;
        let activity = &self.activity;
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
                        self.quorum(),
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
            let (failure, mut report) = match attempt(self)? {
                Ok(lock) => return Ok(lock),
                Err(failed) => failed,
            };
            let now = Instant::now();
            let wake = match failure {
                Failure::Held => {
                    // Tracking needs the watchdog to listen for the invalidations the probe arms.
                    self.watchdog.ensure_started(Arc::downgrade(self));
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
                    // Too few nodes track the key for a release elsewhere to be seen (RESP2-only servers, nodes
                    // down): look again after the retry delay, as a polling client would.
                    match probe.tracked < self.quorum() {
                        true => wake.min(later(now, self.retry_pause())),
                        false => wake,
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
            let wake = wake.min(until);
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

    /// How long until a majority of nodes no longer hold `resource`'s key, as their `PTTL`s say: zero if it is
    /// free on a majority already, `None` if too few answered or the key has no expiry there. On the watchdog's
    /// tracker connections the `PTTL` also arms client-side tracking of the key, so that its release, overwrite
    /// or expiry wakes the waiters; the manager's own connections stand in for nodes the tracker cannot reach.
    fn probe(&self, resource: &[u8]) -> Probe {
        let mut request = BytesMut::with_capacity(24 + resource.len());
        encode_command(&[b"PTTL", resource], &mut request);
        let quorum = self.quorum();
        // Per node, milliseconds until the key is gone there (`u64::MAX`: never, it has no expiry).
        let mut left: Vec<Option<u64>> = vec![None; self.fanout.len()];
        let mut tracked = 0;
        if let Some(tracker) = self.watchdog.tracker(self) {
            // A tracker that never connected to some node has its set-up to do: give it the connect timeout.
            let fresh = (0..tracker.len()).any(|i| tracker.sessions(i) == 0);
            let wait = match fresh {
                true => self
                    .config
                    .round_timeout
                    .saturating_add(self.config.connect_timeout),
                false => self.config.round_timeout,
            };
            let errors = self.pttl_round(tracker, &request, &mut left, wait, quorum);
            self.watchdog.note_tracker_errors(errors.iter().map(Some));
            tracked = left.iter().flatten().count();
        }
        if tracked < quorum {
            let enough = quorum.saturating_sub(tracked);
            self.pttl_round(
                &self.fanout,
                &request,
                &mut left,
                self.config.round_timeout,
                enough,
            );
        }
        let mut known: Vec<u64> = left.into_iter().flatten().collect();
        known.sort_unstable();
        let free_in = known
            .get(quorum - 1)
            .filter(|ms| **ms != u64::MAX)
            .map(|ms| Duration::from_millis(*ms));
        Probe { free_in, tracked }
    }

    /// One `PTTL` round on `fanout` for the nodes whose entry in `left` is unknown, until `enough` of them have
    /// answered (a majority is enough: a node hung or down must not cost every probe a round timeout, #24) or the
    /// round ends; returns the errors seen. The nodes not awaited still run the `PTTL` (and arm tracking): a
    /// release is either seen by a reply or pushed, on every node of the answering majority.
    fn pttl_round(
        &self,
        fanout: &Fanout,
        request: &[u8],
        left: &mut [Option<u64>],
        wait: Duration,
        enough: usize,
    ) -> Vec<NodeError> {
        let mut round = fanout.round(later(Instant::now(), wait));
        let mut nodes = crate::net::NodeSet::EMPTY;
        for (node, l) in left.iter().enumerate() {
            if l.is_none() {
                nodes.insert(node);
            }
        }
        round.send_to(nodes, request, 1);
        round.need(enough);
        let mut errors = Vec::new();
        let mut answered = 0;
        while answered < enough {
            let Some((node, reply)) = round.next() else {
                break;
            };
            match reply {
                Ok(v) => {
                    if let (Value::Integer(ms), Some(l)) =
                        (v.without_attributes(), left.get_mut(node))
                    {
                        *l = match *ms {
                            -2 => Some(0),
                            ms if ms >= 0 => Some(ms.unsigned_abs()),
                            _ => Some(u64::MAX),
                        };
                        answered += 1;
                    }
                }
                Err(e) => errors.push(e),
            }
            round.need(enough.saturating_sub(answered));
        }
        errors
    }

    /// A little extra on a timer set for a holder's expiry: 1 ms for the nodes' millisecond clocks, and up to
    /// a sixteenth of the wait (at most 8 ms) at random, so that waiters of several processes do not all try at
    /// once.
    fn expiry_jitter(&self, wait: Duration) -> Duration {
        let spread = (wait / 16).min(Duration::from_millis(8)).as_micros() as u64;
        let r = self.tokens.random_u64().unwrap_or(0) % (spread + 1);
        Duration::from_millis(1) + Duration::from_micros(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_line_is_first_come_first_served_and_a_notify_changes_the_generation() {
        let room = WaitRoom::default();
        let a = room.join(b"r");
        let b = room.join(b"r");
        let other = room.join(b"s");
        assert_eq!(room.head(b"r", a), (true, 0));
        assert_eq!(room.head(b"r", b), (false, 0));
        assert_eq!(room.head(b"s", other), (true, 0));
        room.notify(b"r");
        assert_eq!(room.head(b"r", a), (true, 1));
        assert_eq!(room.head(b"s", other), (true, 0));
        // The head parks only while nothing changed.
        let t0 = Instant::now();
        room.park(b"r", a, Some(0), t0 + Duration::from_secs(5));
        assert!(t0.elapsed() < Duration::from_secs(1));
        room.leave(b"r", a);
        assert_eq!(room.head(b"r", b), (true, 1));
        room.leave(b"r", b);
        room.leave(b"s", other);
        assert_eq!(room.waiting.load(Ordering::Acquire), 0);
        assert!(lock(&room.rooms).is_empty());
    }
}
