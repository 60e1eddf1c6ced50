//! A timer for tasks that needs no runtime: [`sleep`] returns a future woken by one process-wide thread
//! ("muxlock-timer") that waits on a heap of `(instant, waker)` entries, the way `async-io`'s reactor thread
//! serves its timers. The thread is started by the first sleep that has to wait (a program that never awaits a
//! pause has none) and lives as long as the process.
//!
//! # Who holds what
//!
//! - The heap is behind one mutex, held only to push or pop entries: never while a waker is woken (a waker may
//!   run executor code) or while the thread waits (the condition variable lets it go).
//! - A pending [`Sleep`] has one entry, whose waker slot it shares: polled again with another waker, it replaces
//!   the waker in the slot; dropped, it empties the slot, so the entry (popped at its instant) keeps no task alive
//!   and wakes nobody: a cancelled wait's waker does not stay alive until its `max_wait`.
//! - The thread is woken (the condition variable) when an entry earlier than every other one is pushed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::sync::lock;
use crate::time::later;

/// A waker due at an instant; ordered by the instant, then by arrival (no two entries compare equal).
#[derive(Debug)]
struct Entry {
    at: Instant,
    seq: u64,
    slot: Slot,
}

/// The waker an entry wakes, shared with its [`Sleep`] (emptied when the sleep is dropped).
type Slot = std::sync::Arc<Mutex<Option<Waker>>>;

impl PartialEq for Entry {
    fn eq(&self, other: &Entry) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Entry) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Debug, Default)]
struct Heap {
    entries: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

#[derive(Debug, Default)]
struct Timer {
    heap: Mutex<Heap>,
    changed: Condvar,
}

/// The timer, its thread started on first use; `None` if the OS refused the thread.
fn timer() -> Option<&'static Timer> {
    static TIMER: OnceLock<Option<&'static Timer>> = OnceLock::new();
    *TIMER.get_or_init(|| {
        static STATE: OnceLock<Timer> = OnceLock::new();
        let t: &'static Timer = STATE.get_or_init(Timer::default);
        std::thread::Builder::new()
            .name("muxlock-timer".into())
            .spawn(move || t.run())
            .ok()
            .map(|_| t)
    })
}

impl Timer {
    fn run(&self) {
        let mut due = Vec::new();
        let mut heap = lock(&self.heap);
        loop {
            let now = Instant::now();
            while heap.entries.peek().is_some_and(|Reverse(e)| e.at <= now) {
                due.extend(
                    heap.entries
                        .pop()
                        .and_then(|Reverse(e)| lock(&e.slot).take()),
                );
            }
            if !due.is_empty() {
                drop(heap);
                due.drain(..).for_each(Waker::wake);
                heap = lock(&self.heap);
                continue;
            }
            heap = match heap.entries.peek().map(|Reverse(e)| e.at) {
                Some(at) => {
                    let wait = at.saturating_duration_since(now);
                    self.changed
                        .wait_timeout(heap, wait)
                        .map_or_else(|e| e.into_inner().0, |(g, _)| g)
                }
                None => self
                    .changed
                    .wait(heap)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }

    fn push(&self, at: Instant, slot: Slot) {
        let mut heap = lock(&self.heap);
        let first = heap.entries.peek().is_none_or(|Reverse(e)| at < e.at);
        heap.seq = heap.seq.wrapping_add(1);
        let seq = heap.seq;
        heap.entries.push(Reverse(Entry { at, seq, slot }));
        drop(heap);
        if first {
            self.changed.notify_one();
        }
    }
}

/// A pause of `pause` from now, as a future (see the module doc).
pub(crate) fn sleep(pause: Duration) -> Sleep {
    Sleep {
        at: later(Instant::now(), pause),
        slot: None,
    }
}

/// The future of [`sleep`]: ready once its instant has passed.
#[derive(Debug)]
#[must_use = "a pause does nothing unless awaited"]
pub(crate) struct Sleep {
    at: Instant,
    /// Its timer entry's waker slot, once it has an entry.
    slot: Option<Slot>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            return Poll::Ready(());
        }
        if let Some(slot) = &self.slot {
            let mut waker = lock(slot);
            if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
        match timer() {
            Some(t) => {
                let slot: Slot = std::sync::Arc::new(Mutex::new(Some(cx.waker().clone())));
                t.push(self.at, std::sync::Arc::clone(&slot));
                self.slot = Some(slot);
            }
            // No timer thread: look again at once (slower, never blocking).
            None => cx.waker().wake_by_ref(),
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            lock(slot).take();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;
    use std::thread::{self, Thread};

    struct Unpark(Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }

    /// Polls `fut` on this thread, parking between polls; returns how many polls it took.
    fn block_on(fut: impl Future<Output = ()>) -> usize {
        let waker = Waker::from(Arc::new(Unpark(thread::current())));
        let mut cx = Context::from_waker(&waker);
        let mut fut = std::pin::pin!(fut);
        let mut polls = 0;
        loop {
            polls += 1;
            if fut.as_mut().poll(&mut cx).is_ready() {
                return polls;
            }
            thread::park();
        }
    }

    #[test]
    fn sleeps_end_after_their_pause_in_order() {
        let t0 = Instant::now();
        let polls = block_on(sleep(Duration::from_millis(20)));
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(20), "{took:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");
        assert!(polls >= 2, "pending first, then woken");
        // Zero: ready at once, no thread needed.
        assert_eq!(block_on(sleep(Duration::ZERO)), 1);
        // Many at once, from several threads: each ends after its own pause.
        let handles: Vec<_> = (0..8u64)
            .map(|i| {
                thread::spawn(move || {
                    let t = Instant::now();
                    block_on(sleep(Duration::from_millis(5 * (8 - i))));
                    t.elapsed() >= Duration::from_millis(5 * (8 - i))
                })
            })
            .collect();
        assert!(handles.into_iter().all(|h| h.join().unwrap_or(false)));
    }
}
