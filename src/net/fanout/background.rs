//! The background driver: a thread of the fanout's own that drives the poll for tasks (rounds awaited as
//! futures), which must never wait in it themselves (see the [parent](super)'s "Tasks"), and for releases
//! detached from their rounds, which nobody waits for (`machine/detach.rs`).
//!
//! # Who holds what
//!
//! - The thread is started by the first task that waits, or the first round that detaches a release
//!   ([`Fanout::background`]), once per fanout, and holds an `Arc` of the shared state (not the [`Fanout`]): the
//!   fanout's drop sets `Inner::closing`, pokes the poll, unparks the thread and joins it; the thread puts the
//!   driver back, if it has it, and ends.
//! - It takes the driver only while tasks wait (a task's waker in a slot), detached releases do, or bytes wait
//!   unwritten on a connection after the rounds that queued them ended (`Machine::needs_driver`), and the driver
//!   is free; it keeps it turn after turn, each poll waiting until the earliest task's wake-up instant at
//!   the latest (so a task's round times out after a turn that read the sockets at or after its deadline, as a
//!   thread's does), or `DETACHED_PACE` while releases are detached.
//! - When no task waits any more it lingers: it keeps polling for [`LINGER`] (a lone task's next round finds it
//!   still in the poll, and saves a wake-up: 80-90 µs a round became 65-70 µs, against 50 µs for a lone thread),
//!   unless a thread asks for the driver: a round that comes to sleep, or a thread waiting for pushes, sets
//!   `Inner::wanted` and pokes the poll while `Inner::lingering` is set, and the driver goes back after that turn
//!   (to that thread if it still sleeps, [`Inner::successor`]; else its next round finds it free). So a lone
//!   thread pays at most one hand-off after the last task, then drives itself.
//! - Without the driver it parks, with no timeout: whoever then puts the driver back while tasks wait unparks it
//!   (`Inner::successor`), as does a task that registers while the driver is free, and the fanout's drop. Spurious
//!   wake-ups only make it look again.

use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use super::{Fanout, Inner, Shared};
use crate::sync::lock;
use crate::time::later;

/// How long the background driver keeps polling after the last task stopped waiting, unless a thread asks for
/// the driver: a lone task's next round comes within microseconds, and finds it still polling (no wake-up).
const LINGER: Duration = Duration::from_millis(1);

impl Fanout {
    /// The background driver's thread, started now if it was not; `None` if the OS refused a thread (tasks then
    /// drive with zero-timeout turns only, woken again at once: slower, never blocking).
    pub(super) fn background(&self) -> Option<&Thread> {
        let handle = self.background.get_or_init(|| {
            let shared = Arc::clone(&self.shared);
            let handle = thread::Builder::new()
                .name("muxlock-fanout".into())
                .spawn(move || shared.drive_for_tasks())
                .ok()?;
            lock(&self.shared.inner).background = Some(handle.thread().clone());
            // It may have looked before `background` was set, when nobody could hand it the driver yet.
            handle.thread().unpark();
            Some(handle)
        });
        handle.as_ref().map(|h| h.thread())
    }
}

impl Fanout {
    /// Whether the background driver runs.
    pub(super) fn has_background(&self) -> bool {
        self.background.get().is_some_and(Option::is_some)
    }
}

impl Drop for Fanout {
    fn drop(&mut self) {
        lock(&self.shared.inner).m.give_up_detached();
        let Some(Some(handle)) = self.background.take() else {
            return;
        };
        lock(&self.shared.inner).closing = true;
        let _ = self.shared.waker.wake();
        handle.thread().unpark();
        // It ends within one turn (the poll was just poked); its `Arc` of the connections goes with it.
        let _ = handle.join();
    }
}

impl Shared {
    /// The background driver's loop (see the module doc).
    fn drive_for_tasks(&self) {
        let mut driver = None;
        // While no task waits and nobody else asks for the driver: until when it keeps polling anyway.
        let mut linger: Option<Instant> = None;
        let mut inner = lock(&self.inner);
        while !inner.closing {
            // Tasks wait, or releases detached from their rounds (`machine/detach.rs`): drive for them.
            let detached = inner.m.detached_due(Instant::now());
            let due = match inner
                .m
                .slots
                .earliest_task()
                .into_iter()
                .chain(detached)
                .min()
            {
                Some(due) => {
                    linger = None;
                    due
                }
                None => {
                    let now = Instant::now();
                    let until = *linger.get_or_insert_with(|| later(now, LINGER));
                    // A thread that sleeps or waits for pushes wants the driver: give it back at once.
                    let wanted = std::mem::take(&mut inner.wanted)
                        || inner.m.slots.earliest_sleeper().is_some()
                        || inner.push_waiter.is_some();
                    if driver.is_none() || wanted || now >= until {
                        linger = None;
                        // No task waits: give the driver back, to a sleeping thread if any.
                        let successor = match driver.take() {
                            Some(d) => {
                                inner.driver = Some(d);
                                inner.successor()
                            }
                            None => None,
                        };
                        drop(inner);
                        if let Some(t) = successor {
                            t.unpark();
                        }
                        thread::park();
                        inner = lock(&self.inner);
                        continue;
                    }
                    until
                }
            };
            if driver.is_none() {
                driver = inner.driver.take();
            }
            match driver.take() {
                Some(mut d) => {
                    // While it lingers, a thread that comes to sleep pokes the poll, to be handed the driver.
                    inner.lingering = linger.is_some();
                    inner = self.turn(inner, &mut d, due);
                    inner.lingering = false;
                    driver = Some(d);
                }
                // A thread drives, and serves the tasks too; whoever puts the driver back unparks us.
                None => {
                    drop(inner);
                    thread::park();
                    inner = lock(&self.inner);
                }
            }
        }
        put_back(&mut inner, driver);
    }
}

fn put_back(inner: &mut Inner, driver: Option<Box<super::Driver>>) {
    if let Some(d) = driver {
        inner.driver = Some(d);
    }
}
