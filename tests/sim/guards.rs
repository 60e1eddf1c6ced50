//! The workload's guard holder: one or two locks held under [`SimGuard`]s (plain, a set, fenced), renewed when
//! [`SimGuard::due`] says (the watchdog's turn, [`Engine::renew_guards`]), with work steps in between, each after
//! a look at [`SimGuard::lost_at`] as a careful holder takes; released with [`Engine::release_guard`].
//!
//! Each time a guard tells its holder it is not lost, the history records what the holder may rely on (the
//! guard's hold runs until its [`deadline`](SimGuard::deadline)), and the nodes are checked: a majority must
//! hold the guard's value on each of its keys (see `check.rs`).
//!
//! The control `ignore_lost` (`MUXLOCK_SIM_CONTROL=ignore-lost`) is a holder that never looks: it works through
//! its planned steps whatever its guards say, relying on them until the end of each step. The checker must
//! catch it.

use std::time::Duration;

use muxlock::redlock::sim::{Clock, SimGuard};

use super::check::Hold;
use super::node::{MS, Time};
use super::{Rng, Sim};

type SimEngine = super::calls::Checked;

/// A guard and what the history knows of it.
struct Guarded {
    guard: SimGuard,
    /// Its holds in the history (one per key), and its keys.
    holds: Vec<usize>,
    keys: Vec<Vec<u8>>,
    /// When its acquisition began (virtual time): nodes that lost their data since are excused.
    since: Time,
}

/// The virtual time now.
fn now(sim: &Sim) -> Time {
    sim.world().now
}

/// Acquires one guard of a kind drawn by `rng` (fenced ones half the time in fencing worlds), or `None`.
async fn acquire(
    engine: &SimEngine,
    sim: &Sim,
    rng: &mut Rng,
    ttl: Duration,
    fencing: bool,
) -> Option<Guarded> {
    let me = engine.clock().me();
    let since = now(sim);
    let r = format!("r{}", rng.range(0, 2));
    let kind = match fencing && rng.chance(0.5) {
        true => 2,
        false => rng.range(0, 2),
    };
    let (guard, keys, name) = match kind {
        0 => {
            let got = match rng.chance(0.5) {
                true => engine.try_lock(r.as_bytes(), ttl).await,
                false => engine.lock(r.as_bytes(), ttl).await.map(Some),
            };
            let lock = got.ok().flatten()?;
            (engine.guard(lock, ttl, None), vec![r.into_bytes()], "guard")
        }
        1 => {
            let names = [format!("r{}", rng.range(0, 1)), "r2".to_owned()];
            let refs: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
            let set = engine
                .lock_many(&refs, ttl, rng.chance(0.5))
                .await
                .ok()
                .flatten()?;
            let guard = engine.guard(set, ttl, None);
            let keys = guard.resources().unwrap_or_default().to_vec();
            (guard, keys, "set guard")
        }
        _ => {
            let lock = engine
                .lock_fenced(r.as_bytes(), ttl, rng.chance(0.5))
                .await
                .ok()
                .flatten()?;
            (
                engine.guard(lock, ttl, None),
                vec![r.into_bytes()],
                "fenced guard",
            )
        }
    };
    let mut w = sim.world();
    let (from, until) = (w.now, w.time(me, guard.deadline()));
    let holds = keys
        .iter()
        .map(|key| {
            w.history.hold(Hold {
                client: me,
                kind: name,
                resource: key.clone(),
                holder: guard.value().to_vec(),
                from,
                until,
                token: guard.token(),
            })
        })
        .collect();
    Some(Guarded {
        guard,
        holds,
        keys,
        since,
    })
}

/// The guard told its holder, at the present instant, that it may rely on it until `until` (virtual time): the
/// hold runs until then, and a majority of nodes must hold its value on every key.
fn relied_on(sim: &Sim, g: &Guarded, until: Time) {
    let mut w = sim.world();
    let now = w.now;
    w.struck.guard_checks += 1;
    for (&i, key) in g.holds.iter().zip(&g.keys) {
        w.history.rely(i, now, until);
        let (holding, excused) = w.holding(key, g.guard.value(), g.since);
        let quorum = w.members.len() / 2 + 1;
        if holding + excused < quorum {
            let client = w.history.holds[i].client;
            let what = format!(
                "a guard held by too few nodes: c{client}'s guard of {} relied on at {} ms, held by {holding} \
                 of {} nodes ({excused} came back without their data or had their clocks moved ahead)",
                String::from_utf8_lossy(key),
                now / MS,
                w.members.len(),
            );
            w.history.breaks(what);
        }
    }
}

/// Holds one or two guards for a while (one to three TTLs), renewing them when due and working in steps,
/// then releases them.
pub async fn hold(
    engine: &SimEngine,
    sim: &Sim,
    rng: &mut Rng,
    ttl: Duration,
    fencing: bool,
    ignore_lost: bool,
) {
    let me = engine.clock().me();
    let clock = engine.clock();
    let mut held = Vec::new();
    for k in 0..rng.range(1, 2) {
        if k > 0 {
            sim.world().history.ops += 1; // the caller counted the first
        }
        if let Some(g) = acquire(engine, sim, rng, ttl, fencing).await {
            held.push(g);
        }
    }
    if held.is_empty() {
        return;
    }
    let ttl_ns = ttl.as_nanos() as Time;
    let until = now(sim) + rng.range(ttl_ns, 3 * ttl_ns);
    loop {
        // The watchdog's turn: one round for the guards due.
        let t = clock.now();
        let mut due: Vec<&mut SimGuard> = held
            .iter_mut()
            .map(|g| &mut g.guard)
            .filter(|g| g.due().is_some_and(|d| d <= t))
            .collect();
        if !due.is_empty() {
            sim.world().history.ops += 1;
            engine.renew_guards(&mut due).await;
            continue;
        }
        if now(sim) >= until {
            break;
        }
        // A step of work: until the next renewal is due, at most a quarter of the TTL.
        let step = Duration::from_millis(rng.range(1, ttl.as_millis() as u64 / 4));
        let step = held
            .iter()
            .filter_map(|g| g.guard.due())
            .map(|d| d.saturating_duration_since(t))
            .fold(step, Duration::min);
        if ignore_lost {
            // Never looks: relies on every guard until the end of the step.
            let end = {
                let w = sim.world();
                w.time(me, t + step)
            };
            held.iter().for_each(|g| relied_on(sim, g, end));
        } else {
            // Looks first, as a holder must: all its guards still held, or it stops.
            if held.iter().any(|g| g.guard.lost_at(t).is_some()) {
                sim.world().struck.guards_lost += 1;
                break;
            }
            for g in &held {
                let deadline = sim.world().time(me, g.guard.deadline());
                relied_on(sim, g, deadline);
            }
        }
        clock.sleep(step).await;
    }
    for g in held {
        {
            let mut w = sim.world();
            let t = w.now;
            g.holds.iter().for_each(|&i| w.history.end(i, t));
            w.history.ops += 1;
            w.struck.guard_renewals += g.guard.renewals();
        }
        let _ = engine.release_guard(g.guard).await;
    }
}
