//! Admission: how many acquisition rounds a [`Fanout`](super::Fanout) lets run at once.
//!
//! # Why
//!
//! A node answers in order, so a request sent behind thousands of others waits for all of them. With 10,000
//! tasks on one manager each node's pipeline grew 10,000 deep, and on a loaded 2-vCPU machine a reply took
//! longer than the round's deadline (50 ms by default): calls failed as "timed out" against nodes that were
//! answering as fast as they could, only behind the caller's own queue (issue #26; 760 of 11,654 one-attempt
//! calls failed so while other builds shared the machine). A deeper pipeline buys no throughput once the servers
//! are busy; it only moves the waiting into the round, where it costs the deadline and the lease.
//!
//! So an attempt waits here, **before its clock starts**: the engine takes the time of the attempt after
//! admission (a lease is measured from when its request is sent), so the wait costs no validity and no vote. It
//! is the admission of a connection pool, not a second timeout.
//!
//! # The limit
//!
//! At most `limit` admitted attempts run at once. It starts at [`START_LIMIT`] and adapts only on what a round's
//! deadline says: when an attempt ends after some round of the fanout timed out a request of a node that showed
//! life in the round's last `admission_target` (it answers, only too slowly: behind our own queue), the limit is
//! cut by a quarter, at most once per `admission_target` (one cut per "round trip", as TCP does); while callers
//! wait and attempts end without such timeouts, it grows by an eighth after `limit` of them. A node silent that
//! long is hung or down, and fewer attempts would not make it answer: its timeouts cut nothing (a hung minority
//! with a split vote, whose rounds run to their deadline, cut the limit for every caller before:
//! `tests/admit_review.rs`). The limit stays between [`MIN_LIMIT`] (or `max_in_flight`, if smaller) and
//! `max_in_flight`. Latency alone is no signal: on a 2-vCPU machine a round is slow mostly because the executor or
//! the OS ran something else, and fewer rounds in flight then only mean smaller batches (a cut on latency took
//! 10,000 tasks from 9,000 to 1,900 cycles/s in a test). A lone caller, or a few dozen threads, never wait: one
//! lock and two counters per attempt.
//!
//! A waiter is admitted at the latest after the wait bound (`Options::admission_wait`, 40 round timeouts and at
//! least 2 s from a lock manager), limit or not, so that no caller waits without bound behind attempts that
//! cannot end sooner.
//!
//! # Who holds what, who wakes whom
//!
//! - One mutex holds the counters and the line of waiters (first come, first served); it is held only to read
//!   or change them, never while a thread parks or a waker is woken.
//! - A caller is admitted at once if nobody waits and there is room; otherwise it joins the line's back and waits
//!   (a thread parks, a task leaves its waker), and only the line's head may take room that frees up.
//! - Whoever frees room (a [`Permit`] dropped) or changes the head (the head admitted, or a waiter dropped) wakes
//!   the new head if there is room for it; an admitted head wakes the next one while room is left. A woken head
//!   that finds no room waits again; a spurious wake-up only makes it look again. A dropped waiter leaves the
//!   line at once, so the line never waits on someone who left.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use crate::sync::lock;
use crate::time::later;

/// The limit a gate starts at: far more attempts at once than the servers need to be kept busy (64 threads do),
/// fewer than a node's pipeline can serve within a 50 ms round on this project's 2-vCPU machine under load.
pub(crate) const START_LIMIT: usize = 1024;
/// The least a limit falls to.
pub(crate) const MIN_LIMIT: usize = 16;

/// The admission of acquisition attempts (see the module doc).
#[derive(Debug)]
pub(crate) struct Gate {
    state: Mutex<State>,
    /// Requests timed out by the fanout's rounds so far.
    timeouts: AtomicU64,
    /// At most one cut per this long (the round timeout).
    target: Duration,
    /// A waiter is admitted after this long whatever the limit.
    wait: Duration,
    /// The least the limit falls to: [`MIN_LIMIT`], or `max` if lower.
    min: usize,
    max: usize,
}

#[derive(Debug)]
struct State {
    limit: usize,
    active: usize,
    line: VecDeque<Entry>,
    next_id: u64,
    /// Fast attempts since the limit last grew.
    fast: usize,
    /// When the limit was last cut.
    cut: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    waiter: Option<Waiter>,
}

#[derive(Debug)]
enum Waiter {
    Thread(Thread),
    Task(Waker),
}

impl Waiter {
    fn wake(self) {
        match self {
            Waiter::Thread(t) => t.unpark(),
            Waiter::Task(w) => w.wake(),
        }
    }
}

impl State {
    /// Admits the caller `id` (`None`: not in the line) if there is room and nobody is ahead of it.
    fn take(&mut self, id: Option<u64>) -> bool {
        if self.active >= self.limit {
            return false;
        }
        match (id, self.line.front()) {
            (None, None) => {}
            (Some(id), Some(head)) if head.id == id => {
                self.line.pop_front();
            }
            _ => return false,
        }
        self.active += 1;
        true
    }

    /// The head's waiter, to wake, if there is room for it.
    fn head_to_wake(&mut self) -> Option<Waiter> {
        match self.active < self.limit {
            true => self.line.front_mut().and_then(|e| e.waiter.take()),
            false => None,
        }
    }

    fn remove(&mut self, id: u64) -> bool {
        match self.line.iter().position(|e| e.id == id) {
            Some(at) => {
                self.line.remove(at);
                at == 0
            }
            None => false,
        }
    }
}

impl Gate {
    /// A gate that cuts its limit at most once per `target` (the round timeout), whose waiters wait at most `wait`,
    /// and whose limit never exceeds `max` (at least 1).
    pub(crate) fn new(target: Duration, wait: Duration, max: usize) -> Gate {
        let max = max.max(1);
        Gate {
            state: Mutex::new(State {
                limit: START_LIMIT.min(max),
                active: 0,
                line: VecDeque::new(),
                next_id: 0,
                fast: 0,
                cut: None,
            }),
            timeouts: AtomicU64::new(0),
            target,
            wait,
            min: MIN_LIMIT.min(max),
            max,
        }
    }

    /// Waits for room for one attempt: at once if there is room and nobody waits. Under
    /// [`block`](crate::redlock) (a blocking verb) the thread parks inside the first poll; under an executor the
    /// future is woken when it is the line's head and room frees up, or at the wait bound.
    pub(crate) fn admit(&self, blocking: bool) -> Admit<'_> {
        Admit {
            gate: self,
            blocking,
            id: None,
            until: None,
            sleep: None,
        }
    }

    /// The current limit and how many attempts run (for tests and stats).
    pub(crate) fn load(&self) -> (usize, usize, usize) {
        let s = lock(&self.state);
        (s.limit, s.active, s.line.len())
    }

    /// A round timed `n` requests out (the fanout tells).
    pub(crate) fn timed_out(&self, n: u32) {
        self.timeouts.fetch_add(u64::from(n), Ordering::Relaxed);
    }

    fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    /// An admitted attempt ended; `late`: some round timed a request out while it ran.
    fn done(&self, late: bool) {
        let mut s = lock(&self.state);
        s.active = s.active.saturating_sub(1);
        if late {
            let now = Instant::now();
            if s.cut.is_none_or(|at| now.duration_since(at) >= self.target) {
                s.limit = (s.limit - s.limit / 4).max(self.min);
                s.cut = Some(now);
                s.fast = 0;
            }
        } else if !s.line.is_empty() {
            s.fast += 1;
            if s.fast >= s.limit {
                s.limit = (s.limit + s.limit / 8).min(self.max);
                s.fast = 0;
            }
        }
        let wake = s.head_to_wake();
        drop(s);
        if let Some(w) = wake {
            w.wake();
        }
    }
}

/// Room for one attempt; dropping it frees the room (and tells the gate how long the attempt took).
#[derive(Debug)]
#[must_use = "the room is freed when the permit is dropped"]
pub struct Permit<'a> {
    gate: &'a Gate,
    /// The fanout's timeouts when it was admitted.
    timeouts: u64,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.gate.done(self.gate.timeouts() != self.timeouts);
    }
}

/// Waiting for a [`Permit`] (see [`Gate::admit`]). Dropped while it waits, it leaves the line.
#[derive(Debug)]
pub struct Admit<'a> {
    gate: &'a Gate,
    blocking: bool,
    /// Its place in the line, once it waits.
    id: Option<u64>,
    /// Admitted by then whatever the limit.
    until: Option<Instant>,
    /// A task's timer for `until`.
    sleep: Option<crate::timer::Sleep>,
}

impl<'a> Future for Admit<'a> {
    type Output = Permit<'a>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit<'a>> {
        let this = &mut *self;
        let gate = this.gate;
        loop {
            let mut s = lock(&gate.state);
            let mut admitted = s.take(this.id);
            // The clock is read only by a caller that waits: a lone caller pays the lock and two counters.
            let mut now = None;
            if !admitted {
                let t = Instant::now();
                now = Some(t);
                let until = *this.until.get_or_insert_with(|| later(t, gate.wait));
                if t >= until {
                    // Waited long enough: in, whatever the limit (see the module doc).
                    if let Some(id) = this.id {
                        s.remove(id);
                    }
                    s.active += 1;
                    admitted = true;
                }
            }
            if admitted {
                this.id = None;
                let wake = s.head_to_wake();
                drop(s);
                if let Some(w) = wake {
                    w.wake();
                }
                return Poll::Ready(Permit {
                    gate,
                    timeouts: gate.timeouts(),
                });
            }
            let waiter = match this.blocking {
                true => Waiter::Thread(thread::current()),
                false => Waiter::Task(cx.waker().clone()),
            };
            let old = match this.id {
                // Usually the head, woken: found at once.
                Some(id) => s
                    .line
                    .iter_mut()
                    .find(|e| e.id == id)
                    .and_then(|e| e.waiter.replace(waiter)),
                None => {
                    let id = s.next_id;
                    s.next_id += 1;
                    s.line.push_back(Entry {
                        id,
                        waiter: Some(waiter),
                    });
                    this.id = Some(id);
                    None
                }
            };
            drop(s);
            drop(old);
            let (now, until) = match (now, this.until) {
                (Some(now), Some(until)) => (now, until),
                _ => continue, // unreachable: both are set by a caller that waits
            };
            if this.blocking {
                thread::park_timeout(until.saturating_duration_since(now));
                continue;
            }
            let sleep = this
                .sleep
                .get_or_insert_with(|| crate::timer::sleep(until.saturating_duration_since(now)));
            if Pin::new(sleep).poll(cx).is_ready() {
                continue;
            }
            return Poll::Pending;
        }
    }
}

impl Drop for Admit<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id else {
            return;
        };
        let mut s = lock(&self.gate.state);
        let was_head = s.remove(id);
        let wake = match was_head {
            true => s.head_to_wake(),
            false => None,
        };
        drop(s);
        if let Some(w) = wake {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
            thread::yield_now();
        }
    }

    fn gate(max: usize) -> Gate {
        Gate::new(Duration::from_secs(10), Duration::from_secs(5), max)
    }

    #[test]
    fn a_lone_caller_is_admitted_at_once() {
        let g = gate(10_000);
        let p = block_on(g.admit(true));
        assert_eq!(g.load(), (START_LIMIT, 1, 0));
        drop(p);
        assert_eq!(g.load(), (START_LIMIT, 0, 0));
    }

    #[test]
    fn never_more_than_the_limit_and_first_come_first_served() {
        // MIN_LIMIT is the limit when max is that low.
        let g = Arc::new(gate(MIN_LIMIT));
        let mut held: Vec<_> = (0..MIN_LIMIT).map(|_| block_on(g.admit(true))).collect();
        let order = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Arc::new(Mutex::new(rx));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (gt, order, rx) = (Arc::clone(&g), Arc::clone(&order), Arc::clone(&rx));
                let t = thread::spawn(move || {
                    let p = block_on(gt.admit(true));
                    order.lock().unwrap().push(i);
                    // Keeps its room until told.
                    let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(10));
                    drop(p);
                });
                // Joined in order: the next one starts once this one is in the line.
                let deadline = Instant::now() + Duration::from_secs(5);
                while g.load().2 <= i && Instant::now() < deadline {
                    thread::yield_now();
                }
                t
            })
            .collect();
        assert_eq!(g.load(), (MIN_LIMIT, MIN_LIMIT, 8), "all eight wait");
        // Room for one at a time: each goes to the line's head.
        for k in 1..=8 {
            drop(held.pop());
            let deadline = Instant::now() + Duration::from_secs(5);
            while order.lock().unwrap().len() < k && Instant::now() < deadline {
                thread::yield_now();
            }
            assert_eq!(*order.lock().unwrap(), (0..k).collect::<Vec<_>>());
            assert_eq!(g.load().1, MIN_LIMIT, "never more than the limit");
        }
        drop(tx);
        for t in threads {
            t.join().unwrap();
        }
        drop(held);
        assert_eq!(g.load().1, 0);
    }

    #[test]
    fn a_dropped_waiter_leaves_the_line_and_passes_its_turn_on() {
        let g = gate(MIN_LIMIT);
        let held: Vec<_> = (0..MIN_LIMIT).map(|_| block_on(g.admit(true))).collect();
        let mut cx = Context::from_waker(Waker::noop());
        let mut first = Box::pin(g.admit(false));
        let mut second = Box::pin(g.admit(false));
        assert!(first.as_mut().poll(&mut cx).is_pending());
        assert!(second.as_mut().poll(&mut cx).is_pending());
        assert_eq!(g.load().2, 2);
        drop(held.into_iter().next());
        drop(first);
        assert_eq!(g.load().2, 1);
        assert!(
            second.as_mut().poll(&mut cx).is_ready(),
            "the next in line takes the room"
        );
    }

    #[test]
    fn a_max_below_the_floor_is_the_limit() {
        // `Config::with_max_in_flight(4)`: more than 4 attempts at once would be refused by the node.
        let g = gate(4);
        let mut held: Vec<_> = (0..4).map(|_| block_on(g.admit(true))).collect();
        assert_eq!(g.load(), (4, 4, 0));
        let mut cx = Context::from_waker(Waker::noop());
        let mut fifth = Box::pin(g.admit(false));
        assert!(fifth.as_mut().poll(&mut cx).is_pending(), "the fifth waits");
        // An attempt that saw a timeout ends: the limit stays at 4, its floor.
        g.timed_out(1);
        drop(held.pop());
        assert_eq!(g.load(), (4, 3, 1));
        match fifth.as_mut().poll(&mut cx) {
            Poll::Ready(p) => held.push(p),
            Poll::Pending => panic!("the fifth goes in"),
        }
        drop(held);
        assert_eq!(g.load(), (4, 0, 0));
        // A max of 1: one at a time, never cut to 0.
        let one = gate(1);
        let p = block_on(one.admit(true));
        one.timed_out(1);
        drop(p);
        assert_eq!(one.load(), (1, 0, 0));
    }

    #[test]
    fn a_waiter_goes_in_after_the_wait_bound() {
        let g = Gate::new(
            Duration::from_millis(25),
            Duration::from_millis(30),
            MIN_LIMIT,
        );
        let _held: Vec<_> = (0..MIN_LIMIT).map(|_| block_on(g.admit(true))).collect();
        let t0 = Instant::now();
        let p = block_on(g.admit(true));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert_eq!(g.load(), (MIN_LIMIT, MIN_LIMIT + 1, 0));
        drop(p);
    }

    #[test]
    fn the_limit_falls_on_timeouts_and_grows_while_callers_wait() {
        let g = gate(100_000);
        let held: Vec<_> = (0..START_LIMIT).map(|_| block_on(g.admit(true))).collect();
        let mut cx = Context::from_waker(Waker::noop());
        let mut waiting = Box::pin(g.admit(false));
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        // Attempts that saw a timeout: one cut per round timeout.
        g.done(true);
        g.done(true);
        let (limit, ..) = g.load();
        assert_eq!(limit, START_LIMIT - START_LIMIT / 4);
        // Attempts without one while someone waits: an eighth more after `limit` of them.
        for _ in 0..limit {
            g.done(false);
        }
        assert_eq!(g.load().0, limit + limit / 8);
        // A permit sees the timeouts filed while it was held.
        std::mem::forget(held); // their counts were taken back by hand above
        drop(waiting);
        let p = block_on(g.admit(true));
        g.timed_out(1);
        drop(p);
        assert_eq!(
            g.load().0,
            limit + limit / 8,
            "no second cut within the round timeout"
        );
    }
}
