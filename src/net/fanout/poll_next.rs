//! A round awaited by a task: [`Round::poll_next`] never blocks the executor's thread. It takes what was filed,
//! and otherwise leaves its waker in its slot for the driver (a thread's round, or the background driver) to
//! wake (see the [parent](super)'s "Tasks" and invariants). Only while the fanout has no background driver (the
//! first task's first poll, or if the OS refused the thread) does it drive one zero-timeout turn itself.

use std::future::Future;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::Round;
use crate::net::slots::{CommandId, Reply};
use crate::sync::lock;
use crate::time::later;

/// How soon a task whose release round holds requests for room looks again (a sleeping thread's pace).
const HELD_RETRY: Duration = Duration::from_millis(1);

impl<'a> Round<'a> {
    /// The next outcome, as [`next`](Round::next) gives it, for a task: `Ready` with the outcome (or `None` once
    /// every request has its outcome), or `Pending` with `cx`'s waker registered, to be woken when outcomes are
    /// filed (as many as [`need`](Round::need) asks, or all) or once a turn has read the sockets after the
    /// deadline. Never blocks: the waiting is done by the fanout's background driver (started by the first task
    /// that waits), or by a thread that drives anyway; without a background driver, one zero-timeout turn.
    ///
    /// Dropping the round (or the future that polls it) at any point abandons its replies, as for a thread.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(CommandId, Reply)>> {
        let f = &*self.fanout.shared;
        let mut inner = lock(&f.inner);
        let mut turned = false;
        let outcome = loop {
            if self.state.holds() {
                inner = self.retry_held(inner);
            }
            if let Some(arrival) = inner.m.slots.take(self.state.slot) {
                break Some(arrival);
            }
            if inner.m.slots.settled(self.state.slot) {
                break None;
            }
            if self.state.time_out_due(&mut inner.m) {
                continue;
            }
            // A round moved from `next()` may still have the driver: a task never keeps it.
            if let Some(d) = self.driver.take() {
                inner.driver = Some(d);
                inner.kept_by = None;
            }
            // Only without a background driver: with one, a task's poll never reads nor decodes (a turn may find
            // thousands of replies of other rounds, milliseconds of work in one poll); handing the free driver to
            // it costs the same wake-up as the reply would have.
            if !turned && !self.fanout.has_background() {
                if let Some(mut d) = inner.driver.take() {
                    // Zero timeout: reads what has arrived, never waits.
                    let now = Instant::now();
                    inner = f.turn(inner, &mut d, now);
                    inner.driver = Some(d);
                    turned = true;
                    continue;
                }
            }
            // Wait, as a sleeping thread does (see `Round::sleep`).
            inner.m.slots.need(self.state.slot, self.need);
            let wake_at = match self.state.holds() {
                true => later(Instant::now(), HELD_RETRY),
                false => self.state.deadline,
            };
            let replaced = inner.m.slots.wait(self.state.slot, cx.waker(), wake_at);
            let poke = inner.polling_until.is_some_and(|until| until > wake_at);
            let free = inner.driver.is_some();
            drop(inner);
            drop(replaced);
            if poke {
                let _ = f.waker.wake();
            }
            match self.fanout.background() {
                Some(t) if free => t.unpark(),
                Some(_) => {}
                // No background driver: nobody would wait in the poll for us, so look again at once.
                None => cx.waker().wake_by_ref(),
            }
            return Poll::Pending;
        };
        // As in `next()`: a free driver goes to a sleeper, if any (it may have been woken to take it).
        let successor = match inner.driver.is_some() {
            true => inner.successor(),
            false => None,
        };
        drop(inner);
        if let Some(t) = successor {
            t.unpark();
        }
        Poll::Ready(outcome)
    }

    /// [`poll_next`](Round::poll_next) as a future: the next outcome, awaited.
    pub fn next_async(&mut self) -> impl Future<Output = Option<(CommandId, Reply)>> + '_ {
        std::future::poll_fn(move |cx| self.poll_next(cx))
    }
}
