//! The workload's read-write lock holder: a reader or (one time in three) the writer of `rw0` or `rw1`, taken
//! with one attempt or with retries, held as a bare `Lock` (worked on, extended half the time, released) or under
//! a `SimGuard` renewed when due.
//!
//! Every holder is recorded twice: as an [`RwHold`] (the checker's "never a writer beside any other holder of the
//! name") and, for its key (its reader slot, or the writer key), as an ordinary hold (mutual exclusion per key). A
//! guard relied on is checked on the nodes as any guard is: its key holds its value on a majority.
//!
//! The control `ignoring_writer` (`MUXLOCK_SIM_CONTROL=ignoring-writer`) takes readers with an offer that ignores
//! the writer and intent keys (`kind/rwlock.rs`): the checker must see a writer beside a reader.

use std::time::Duration;

use muxlock::redlock::sim::{Clock, Waits};

use super::check::{Hold, RwHold};
use super::node::{MS, Time};
use super::workload::queued;
use super::{Rng, Sim};

type SimEngine = super::calls::Checked;

/// The virtual time now.
fn now(sim: &Sim) -> Time {
    sim.world().now
}

/// A holder as the history knows it: its read-write hold and its key's hold.
struct Held {
    rw: usize,
    hold: usize,
}

impl Held {
    /// The holder is told at the present instant that it holds until `until` (an `Instant` of client `me`).
    fn until(&self, sim: &Sim, me: usize, until: std::time::Instant) {
        let mut w = sim.world();
        let (t, u) = (w.now, w.time(me, until));
        w.history.rw_until(self.rw, t, u);
        w.history.counts(self.hold, t, u);
    }

    /// The holder lets go now.
    fn end(&self, sim: &Sim) {
        let mut w = sim.world();
        let t = w.now;
        let until = w.history.rw[self.rw].until.min(t);
        w.history.rw_until(self.rw, t, until);
        w.history.end(self.hold, t);
    }
}

/// Records a holder of `lock` (a reader or the writer of `name`) granted now.
fn record(sim: &Sim, me: usize, name: &str, write: bool, lock: &muxlock::Lock) -> Held {
    let mut w = sim.world();
    let (from, until) = (w.now, w.time(me, lock.valid_until()));
    let holder = lock.value().as_bytes().to_vec();
    let rw = w.history.rw(RwHold {
        client: me,
        name: name.as_bytes().to_vec(),
        write,
        holder: holder.clone(),
        from,
        until,
    });
    let hold = w.history.hold(Hold {
        client: me,
        kind: match write {
            true => "writer",
            false => "reader",
        },
        resource: lock.resource().to_vec(),
        holder,
        from,
        until,
        token: None,
    });
    Held { rw, hold }
}

/// One read-write lock holder's session: a reader or the writer, held for a while (bare, extended half the time,
/// or under a guard), released.
pub async fn hold(
    engine: &SimEngine,
    sim: &Sim,
    rng: &mut Rng,
    ttl: Duration,
    ignoring_writer: bool,
) {
    let me = engine.clock().me();
    let clock = engine.clock();
    let name = format!("rw{}", rng.range(0, 1));
    let write = rng.chance(1.0 / 3.0);
    let since = now(sim);
    let retry = rng.chance(0.5);
    // A third of the time (not the control's), a waiter in the nodes' queue of the read-write lock.
    let waits = match write {
        true => Waits::Write(name.as_bytes()),
        false => Waits::Read(name.as_bytes()),
    };
    let got = match !ignoring_writer && rng.chance(1.0 / 3.0) {
        true => Ok(queued(engine, sim, rng, waits, ttl).await),
        false => {
            engine
                .lock_rw(name.as_bytes(), write, ttl, (retry, ignoring_writer))
                .await
        }
    };
    let Ok(Some(mut lock)) = got else {
        return;
    };
    let held = record(sim, me, &name, write, &lock);
    let ms = ttl.as_millis() as u64;
    if rng.chance(1.0 / 3.0) {
        // Under a guard, renewed when due, for one to two TTLs; each look at it is relied on and checked.
        let mut guard = engine.guard(lock, ttl, None);
        let key = guard.resource().to_vec();
        let until = now(sim) + rng.range(ms, 2 * ms) * MS;
        loop {
            let t = clock.now();
            if guard.due().is_some_and(|d| d <= t) {
                sim.world().history.ops += 1;
                engine.renew_guards(&mut [&mut guard]).await;
                continue;
            }
            if now(sim) >= until || guard.lost_at(t).is_some() {
                break;
            }
            held.until(sim, me, guard.deadline());
            relied_on(sim, &key, guard.value(), since);
            let step = Duration::from_millis(rng.range(1, ms / 4));
            let step = guard
                .due()
                .map_or(step, |d| step.min(d.saturating_duration_since(t)));
            clock.sleep(step).await;
        }
        held.end(sim);
        {
            let mut w = sim.world();
            w.history.ops += 1;
            w.struck.guard_renewals += guard.renewals();
        }
        let _ = engine.release_guard(guard).await;
        return;
    }
    let pause = Duration::from_millis(rng.range(0, ms * 6 / 5));
    clock.sleep(pause / 2).await;
    if rng.chance(0.5) {
        sim.world().history.ops += 1;
        let to = Duration::from_millis(rng.range(100, ms + 1));
        let _ = engine.extend(&mut lock, to).await;
        held.until(sim, me, lock.valid_until());
        clock.sleep(pause / 2).await;
    }
    held.end(sim);
    sim.world().history.ops += 1;
    let _ = engine.unlock(lock).await;
}

/// A guard's key relied on now must be held on a majority (or on nodes excused: `World::holding`).
fn relied_on(sim: &Sim, key: &[u8], value: &[u8], since: Time) {
    let mut w = sim.world();
    w.struck.guard_checks += 1;
    let (holding, excused) = w.holding(key, value, since);
    let quorum = w.nodes.len() / 2 + 1;
    if holding + excused < quorum {
        let what = format!(
            "a read-write lock's guard held by too few nodes: {} relied on at {} ms, held by {holding} of {} \
             nodes ({excused} excused)",
            String::from_utf8_lossy(key),
            w.now / MS,
            w.nodes.len(),
        );
        w.history.breaks(what);
    }
}
