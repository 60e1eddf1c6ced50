//! The workload's owned holder: one owner's holds of one resource, taken through the one retry loop
//! as [`Lock`]s of kind owned. The outer hold is under a [`SimGuard`] half the time (renewed when due by the
//! guard's own round, `EXTEND_REENTRANT`); then, step by step, the holder takes nested holds (half of them under
//! guards), extends the unguarded ones with [`Engine::extend`] (TTLs drawn afresh: often shorter than what the
//! key has left, which an extension must never cut), releases holds in any order (the outer one too, while
//! nested ones live on) and works in between.
//!
//! Before each step it looks at every hold, as a careful holder does: a guard that says it is lost, or a
//! [`Lock`] past its validity, is dropped (released). Every other hold is one the holder relies on at that
//! instant: its claim runs in the history (a guard's to its deadline), and a majority of nodes must hold the
//! owner's value on the key, or have come back without their data since the hold was taken (`check.rs`).
//!
//! The control `shortening` (`MUXLOCK_SIM_CONTROL=shortening`) extends with
//! [`lua::EXTEND_REENTRANT_SHORTENING`](muxlock::redlock::lua::EXTEND_REENTRANT_SHORTENING), which sets the
//! expiry to the extension's TTL whatever the key had: the checker must catch it.

use std::time::Duration;

use muxlock::redlock::sim::{Clock, SimGuard};
use muxlock::redlock::{Lock, Owner};

use super::check::Hold;
use super::node::{MS, Time};
use super::{Rng, Sim};

type SimEngine = super::calls::Checked;

/// One hold of the owner: under a guard, or a bare [`Lock`] the holder extends.
enum Held {
    Guard(SimGuard),
    Lock(Box<Lock>),
}

/// A hold and what the history knows of it.
struct Owned {
    held: Held,
    /// Its claim in the history.
    hold: usize,
    /// When its acquisition began (virtual time): nodes that lost their data since are excused.
    since: Time,
    /// The outer hold (the session's first).
    outer: bool,
}

/// The virtual time now.
fn now(sim: &Sim) -> Time {
    sim.world().now
}

/// A TTL for one hold or extension: 100 ms to 1.5 s.
fn draw_ttl(rng: &mut Rng) -> Duration {
    Duration::from_millis(rng.range(100, 1_500))
}

/// Takes one hold of `owner` on `resource` (under a guard if `guarded`), recorded in the history.
async fn take(
    engine: &SimEngine,
    sim: &Sim,
    owner: &Owner,
    resource: &[u8],
    ttl: Duration,
    guarded: bool,
    outer: bool,
) -> Option<Owned> {
    let me = engine.clock().me();
    let since = now(sim);
    sim.world().history.ops += 1;
    let lock = engine.lock_owned(owner, resource, ttl).await.ok()?;
    let (held, valid, kind) = match guarded {
        true => {
            let guard = engine.guard(lock, ttl, None);
            let deadline = guard.deadline();
            let kind = match outer {
                true => "owned guard",
                false => "nested owned guard",
            };
            (Held::Guard(guard), deadline, kind)
        }
        false => {
            let valid = lock.valid_until();
            let kind = match outer {
                true => "owned",
                false => "nested owned",
            };
            (Held::Lock(Box::new(lock)), valid, kind)
        }
    };
    let mut w = sim.world();
    let (from, until) = (w.now, w.time(me, valid));
    let hold = w.history.hold(Hold {
        client: me,
        kind,
        resource: resource.to_vec(),
        holder: owner.as_str().as_bytes().to_vec(),
        from,
        until,
        token: None,
    });
    Some(Owned {
        held,
        hold,
        since,
        outer,
    })
}

/// Releases one hold (its claim ends now) for `why`: a guard by the guard's release, a [`Lock`] by `unlock`.
async fn release(engine: &SimEngine, sim: &Sim, o: Owned, why: &str) {
    {
        let mut w = sim.world();
        let t = w.now;
        let h = &w.history.holds[o.hold];
        let line = format!("c{} lets go of its {} ({why}):", h.client, h.kind);
        w.history.note(line);
        w.history.end(o.hold, t);
        w.history.ops += 1;
    }
    match o.held {
        Held::Guard(g) => {
            sim.world().struck.guard_renewals += g.renewals();
            let _ = engine.release_guard(g).await;
        }
        Held::Lock(lock) => {
            let _ = engine.unlock(*lock).await;
        }
    }
}

/// The holder relies on `o` now, until `until` (virtual time): its claim runs until then, and a majority of nodes
/// must hold the owner's value on `resource`.
fn relied_on(sim: &Sim, o: &Owned, resource: &[u8], owner: &[u8], until: Time) {
    let mut w = sim.world();
    let now = w.now;
    w.struck.owned_checks += 1;
    w.history.rely(o.hold, now, until);
    let (holding, excused) = w.holding(resource, owner, o.since);
    let quorum = w.members.len() / 2 + 1;
    if holding + excused < quorum {
        let h = &w.history.holds[o.hold];
        let what = format!(
            "an owned hold held by too few nodes: c{}'s {} of {} relied on at {} ms, held by {holding} of {} \
             nodes ({excused} came back without their data or had their clocks moved ahead)",
            h.client,
            h.kind,
            String::from_utf8_lossy(resource),
            now / MS,
            w.members.len(),
        );
        w.history.breaks(what);
    }
}

/// One session of owned holds of `resource` by `owner`: the outer hold, then steps of nested holds, extensions,
/// releases in any order and work, for one to three TTLs; every hold left is released at the end, in a random
/// order.
pub async fn hold(
    engine: &SimEngine,
    sim: &Sim,
    rng: &mut Rng,
    owner: &Owner,
    resource: &[u8],
    ttl: Duration,
    shortening: bool,
) {
    let me = engine.clock().me();
    let clock = engine.clock();
    let who = owner.as_str().as_bytes();
    let guarded = rng.chance(0.5);
    let Some(outer) = take(engine, sim, owner, resource, ttl, guarded, true).await else {
        return;
    };
    sim.world().struck.owned_sessions += 1;
    let mut held = vec![outer];
    let ttl_ns = ttl.as_nanos() as Time;
    let until = now(sim) + rng.range(ttl_ns, 3 * ttl_ns);
    loop {
        // The guards' turn: one renewal round for those due.
        let t = clock.now();
        let mut due: Vec<&mut SimGuard> = held
            .iter_mut()
            .filter_map(|o| match &mut o.held {
                Held::Guard(g) if g.due().is_some_and(|d| d <= t) => Some(g),
                _ => None,
            })
            .collect();
        if !due.is_empty() {
            sim.world().history.ops += 1;
            engine.renew_guards(&mut due).await;
            continue;
        }
        if now(sim) >= until || held.is_empty() {
            break;
        }
        // Looks at every hold at this instant: the others are relied on now, then the lost and the expired
        // are let go (their releases take time: the next look is at a new instant).
        let (gone, kept): (Vec<Owned>, Vec<Owned>) =
            held.into_iter().partition(|o| match &o.held {
                Held::Guard(g) => g.lost_at(t).is_some(),
                Held::Lock(lock) => t >= lock.valid_until(),
            });
        held = kept;
        for o in &held {
            let relied = match &o.held {
                Held::Guard(g) => g.deadline(),
                Held::Lock(lock) => lock.valid_until(),
            };
            let until = sim.world().time(me, relied);
            relied_on(sim, o, resource, who, until);
        }
        if !gone.is_empty() {
            sim.world().struck.owned_lost += gone.len() as u64;
            for o in gone {
                release(engine, sim, o, "lost or expired").await;
            }
            continue;
        }
        match rng.range(0, 5) {
            0 if held.len() < 4 => {
                let nested = draw_ttl(rng);
                if let Some(o) =
                    take(engine, sim, owner, resource, nested, rng.chance(0.5), false).await
                {
                    held.push(o);
                }
            }
            1 | 2 => {
                // Extends a bare hold (any of them, the outer one too) with a TTL drawn afresh.
                let locks: Vec<usize> = (0..held.len())
                    .filter(|&k| matches!(held[k].held, Held::Lock(_)))
                    .collect();
                if locks.is_empty() {
                    continue;
                }
                let k = locks[rng.range(0, locks.len() as u64 - 1) as usize];
                let extension = draw_ttl(rng);
                let o = &mut held[k];
                let Held::Lock(lock) = &mut o.held else {
                    continue;
                };
                sim.world().history.ops += 1;
                if engine
                    .extend_owned(lock, extension, shortening)
                    .await
                    .is_ok()
                {
                    let mut w = sim.world();
                    let (t, u) = (w.now, w.time(me, lock.valid_until()));
                    w.history.extend(o.hold, t, u);
                    w.struck.owned_extensions += 1;
                }
            }
            3 if held.len() > 1 || rng.chance(0.2) => {
                // Releases any hold, the outer one first now and then: the nested ones keep the key.
                let k = rng.range(0, held.len() as u64 - 1) as usize;
                if held[k].outer && held.len() > 1 {
                    sim.world().struck.outer_released_first += 1;
                }
                let o = held.swap_remove(k);
                release(engine, sim, o, "done").await;
            }
            _ => {
                // A step of work: until the next renewal is due, at most a quarter of the TTL.
                let step = Duration::from_millis(rng.range(1, ttl.as_millis() as u64 / 4));
                let step = held
                    .iter()
                    .filter_map(|o| match &o.held {
                        Held::Guard(g) => g.due(),
                        Held::Lock(_) => None,
                    })
                    .map(|d| d.saturating_duration_since(t))
                    .fold(step, Duration::min);
                clock.sleep(step).await;
            }
        }
    }
    while !held.is_empty() {
        let k = rng.range(0, held.len() as u64 - 1) as usize;
        let o = held.swap_remove(k);
        release(engine, sim, o, "the session ends").await;
    }
}
