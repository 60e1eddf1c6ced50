//! The workload's semaphore holder: one permit of a semaphore (`s1`, `s2`, `s3`: the digit is its number of
//! permits, the same for every client), taken with one attempt or with retries, held as a bare `Lock` (worked
//! on, extended half the time, released) or under a `SimGuard` renewed when due; and the directed history of
//! the majority-of-counters hazard.
//!
//! Every holder is recorded twice: as a [`Permit`] (the checker's "at most `k` holders, at most one per index")
//! and, for the permit's key, as an ordinary hold (mutual exclusion per key, as any lock). A guard relied on is
//! checked on the nodes as any guard is: its permit's key holds its value on a majority.
//!
//! The control `counted_per_node` (`MUXLOCK_SIM_CONTROL=counted-per-node`) takes permits with the
//! majority-of-counters construction (`kind/semaphore.rs`'s module doc): the checker must see more than `k`
//! holders ([`crossed_majorities`] builds the history that shows it; seeds may find it too).

use std::time::Duration;

use muxlock::Config;
use muxlock::redlock::sim::{Clock, Engine, Waits};

use super::check::{Hold, Permit};
use super::node::{MS, Time};
use super::workload::queued;
use super::{Rng, Sim};

type SimEngine = super::calls::Checked;

/// The virtual time now.
fn now(sim: &Sim) -> Time {
    sim.world().now
}

/// A permit's holder as the history knows it: its permit (and, with an index, its key's hold).
struct Held {
    permit: usize,
    hold: Option<usize>,
}

impl Held {
    /// The holder is told at the present instant that it holds until `until` (an `Instant` of client `me`).
    fn until(&self, sim: &Sim, me: usize, until: std::time::Instant) {
        let mut w = sim.world();
        let (t, u) = (w.now, w.time(me, until));
        w.history.permit_until(self.permit, t, u);
        if let Some(h) = self.hold {
            w.history.counts(h, t, u);
        }
    }

    /// The holder lets go now.
    fn end(&self, sim: &Sim) {
        let mut w = sim.world();
        let t = w.now;
        let until = w.history.permits[self.permit].until.min(t);
        w.history.permit_until(self.permit, t, until);
        if let Some(h) = self.hold {
            w.history.end(h, t);
        }
    }
}

/// Records a holder of `lock` (a permit of `name`, of `count` permits) granted now.
fn record(sim: &Sim, me: usize, (name, count): (&str, u32), lock: &muxlock::Lock) -> Held {
    let mut w = sim.world();
    let (from, until) = (w.now, w.time(me, lock.valid_until()));
    let holder = lock.value().as_bytes().to_vec();
    let permit = w.history.permit(Permit {
        client: me,
        name: name.as_bytes().to_vec(),
        permits: count,
        index: lock.permit(),
        holder: holder.clone(),
        from,
        until,
    });
    let hold = lock.permit().map(|_| {
        w.history.hold(Hold {
            client: me,
            kind: "permit",
            resource: lock.resource().to_vec(),
            holder,
            from,
            until,
            token: None,
        })
    });
    Held { permit, hold }
}

/// One semaphore holder's session: a permit taken, held for a while (bare, extended half the time, or under a
/// guard), released.
pub async fn hold(
    engine: &SimEngine,
    sim: &Sim,
    rng: &mut Rng,
    ttl: Duration,
    counted_per_node: bool,
) {
    let me = engine.clock().me();
    let clock = engine.clock();
    let count = rng.range(1, 3) as u32;
    let name = format!("s{count}");
    let since = now(sim);
    let retry = rng.chance(0.5);
    // A third of the time (not the control's), a waiter in the nodes' queue of the semaphore.
    let got = match !counted_per_node && rng.chance(1.0 / 3.0) {
        true => Ok(queued(engine, sim, rng, Waits::Permit(name.as_bytes(), count), ttl).await),
        false => {
            engine
                .lock_permit(name.as_bytes(), count, ttl, (retry, counted_per_node))
                .await
        }
    };
    let Ok(Some(mut lock)) = got else {
        return;
    };
    let held = record(sim, me, (&name, count), &lock);
    let ms = ttl.as_millis() as u64;
    if lock.permit().is_some() && rng.chance(1.0 / 3.0) {
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
    if lock.permit().is_some() && rng.chance(0.5) {
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

/// A guard's permit relied on now must be held on a majority (or on nodes excused: `World::holding`).
fn relied_on(sim: &Sim, key: &[u8], value: &[u8], since: Time) {
    let mut w = sim.world();
    w.struck.guard_checks += 1;
    let (holding, excused) = w.holding(key, value, since);
    let quorum = w.nodes.len() / 2 + 1;
    if holding + excused < quorum {
        let what = format!(
            "a permit's guard held by too few nodes: {} relied on at {} ms, held by {holding} of {} nodes \
             ({excused} excused)",
            String::from_utf8_lossy(key),
            w.now / MS,
            w.nodes.len(),
        );
        w.history.breaks(what);
    }
}

/// The majority-of-counters hazard, directed: 3 nodes, a semaphore of 2 permits, three clients A, B, C starting
/// 100 ms apart, each cut off from one node (A from node 2, B from node 0, C from node 1), each holding what it
/// gets for the rest of the run. Returns the history's verdict and how many clients got a permit: with
/// `counted_per_node` A holds on {0, 1}, B on {1, 2}, C on {0, 2}: three holders; counted per permit, C's
/// grants name different permits on its two nodes and it gets none.
pub fn crossed_majorities(counted_per_node: bool) -> (Option<String>, usize) {
    let sim = super::directed_world(3, 3);
    {
        let mut w = sim.world();
        let near: Time = MS / 10;
        for c in 0..3 {
            for n in 0..3 {
                w.fix_link(c, n, near);
            }
        }
        for (c, n) in [(0, 2), (1, 0), (2, 1)] {
            w.cut(c, n, 0, Time::MAX);
        }
    }
    super::run(&sim, |nodes, clock| {
        let sim = std::rc::Rc::clone(clock.sim());
        async move {
            let me = clock.me();
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false);
            let Ok(engine) = Engine::new(nodes, clock, config, [me as u8 + 1; 32]) else {
                return;
            };
            let clock = engine.clock();
            clock.sleep(Duration::from_millis(100 * me as u64)).await;
            let ttl = Duration::from_secs(10);
            if let Ok(Some(lock)) = engine
                .lock_permit(b"s2", 2, ttl, (false, counted_per_node))
                .await
            {
                record(&sim, me, ("s2", 2), &lock);
            }
        }
    });
    let w = sim.world();
    (w.history.violation(Time::MAX), w.history.permits.len())
}
