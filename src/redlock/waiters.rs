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
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::Waker;
use std::thread::{self, Thread};
use std::time::Instant;

use crate::redlock::error::Error;
use crate::redlock::kind::queued::line_of_turn;
use crate::sync::lock;

/// A waiter's place in its resource's line.
pub(crate) type Ticket = u64;

/// Who waits in a line: a thread (parked) or a task (its waker, updated at each poll).
#[derive(Debug, Clone)]
pub(crate) enum Waiter {
    Thread(Thread),
    Task(Waker),
}

impl Waiter {
    fn unpark(&self) {
        match self {
            Waiter::Thread(t) => t.unpark(),
            Waiter::Task(w) => w.wake_by_ref(),
        }
    }
}

#[derive(Debug, Default)]
struct Line {
    /// The resources whose release may let this line's head in, when the line's key is not one: a set's names,
    /// an owner's resource (see [`WaitRoom::join_for`]). Empty: the key is the resource.
    names: Vec<Vec<u8>>,
    next_ticket: Ticket,
    queue: VecDeque<(Ticket, Waiter)>,
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
    /// How many lines have `names` (a notify then also looks for the lines among whose names the resource is).
    grouped: AtomicUsize,
    /// Set once the nodes refused the cross-process queue's script (`wait/handoff.rs`): waits go without it.
    unqueued: AtomicBool,
}

impl WaitRoom {
    /// Whether the nodes refused the cross-process queue: this manager's waits then go without it.
    pub(crate) fn unqueued(&self) -> bool {
        self.unqueued.load(Ordering::Relaxed)
    }

    /// Notes that the nodes refuse the cross-process queue's script.
    pub(crate) fn set_unqueued(&self) {
        self.unqueued.store(true, Ordering::Relaxed);
    }

    /// Joins the end of the line `key`, whose head a release of any of `names` may let in (a set waits in a line
    /// of its own, keyed by all its names, so that it neither blocks the waiters of one of its names nor misses
    /// the release of another; an owner's waiters in a line of the owner's, so that a nested hold is never
    /// queued behind a waiter for the lock its owner holds). No `names`: `key` is the resource.
    pub(crate) fn join_for(&self, key: &[u8], names: &[Vec<u8>]) -> Ticket {
        self.join_as(key, names, Waiter::Thread(thread::current()))
    }

    /// As [`join_for`](WaitRoom::join_for), for `waiter` (a task joins with its waker).
    pub(crate) fn join_as(&self, key: &[u8], names: &[Vec<u8>], waiter: Waiter) -> Ticket {
        let mut rooms = lock(&self.rooms);
        let line = rooms.entry(key.to_vec()).or_default();
        if line.names.is_empty() && !names.is_empty() {
            line.names = names.to_vec();
            self.grouped.fetch_add(1, Ordering::AcqRel);
        }
        line.next_ticket += 1;
        let ticket = line.next_ticket;
        line.queue.push_back((ticket, waiter));
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
            if !line.names.is_empty() {
                self.grouped.fetch_sub(1, Ordering::AcqRel);
            }
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

    /// A task's [`park`](WaitRoom::park): `true` if it may go on now (it heads its line and, with `seen`, the
    /// generation moved on); otherwise its waker becomes `waker` (woken as a parked thread would be unparked)
    /// and `false`: the task waits for that wake or its own timer.
    pub(crate) fn ready_or_register(
        &self,
        resource: &[u8],
        ticket: Ticket,
        seen: Option<u64>,
        waker: &Waker,
    ) -> bool {
        let mut rooms = lock(&self.rooms);
        let Some(line) = rooms.get_mut(resource) else {
            return true;
        };
        let head = line.queue.front().is_some_and(|(t, _)| *t == ticket);
        let ready = match seen {
            None => head,
            Some(g) => head && line.generation != g,
        };
        if !ready && let Some((_, w)) = line.queue.iter_mut().find(|(t, _)| *t == ticket) {
            match w {
                Waiter::Task(old) if old.will_wake(waker) => {}
                _ => *w = Waiter::Task(waker.clone()),
            }
        }
        ready
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

    /// The key of `resource` may have come free, or (`resource` is a waiter's turn key, see `wait/handoff.rs`) a
    /// waiter's turn in the nodes' queue came: wakes the head of its line, if anyone waits.
    pub(crate) fn notify(&self, resource: &[u8]) {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let resource = line_of_turn(resource).unwrap_or(resource);
        let mut heads = Vec::new();
        let mut rooms = lock(&self.rooms);
        if let Some(line) = rooms.get_mut(resource) {
            line.generation += 1;
            heads.extend(line.queue.front().map(|(_, t)| t.clone()));
        }
        if self.grouped.load(Ordering::Acquire) > 0 {
            for line in rooms.values_mut() {
                if line.names.iter().any(|n| n[..] == resource[..]) {
                    line.generation += 1;
                    heads.extend(line.queue.front().map(|(_, t)| t.clone()));
                }
            }
        }
        drop(rooms);
        for t in heads {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_line_is_first_come_first_served_and_a_notify_changes_the_generation() {
        let room = WaitRoom::default();
        let a = room.join_for(b"r", &[]);
        let b = room.join_for(b"r", &[]);
        let other = room.join_for(b"s", &[]);
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

    #[test]
    fn a_grouped_line_is_woken_by_any_of_its_names_and_blocks_none_of_their_lines() {
        let room = WaitRoom::default();
        let names = [b"a".to_vec(), b"b".to_vec()];
        let set = room.join_for(b"\0set\0a\0b", &names);
        let plain = room.join_for(b"a", &[]);
        // The set's waiter does not head "a"'s line: the plain waiter does.
        assert_eq!(room.head(b"a", plain), (true, 0));
        assert_eq!(room.head(b"\0set\0a\0b", set), (true, 0));
        room.notify(b"b");
        assert_eq!(room.head(b"\0set\0a\0b", set), (true, 1));
        assert_eq!(room.head(b"a", plain), (true, 0));
        room.notify(b"a");
        assert_eq!(room.head(b"\0set\0a\0b", set), (true, 2));
        assert_eq!(room.head(b"a", plain), (true, 1));
        room.leave(b"\0set\0a\0b", set);
        room.leave(b"a", plain);
        assert_eq!(room.grouped.load(Ordering::Acquire), 0);
        assert!(lock(&room.rooms).is_empty());
    }
}
