//! A directed history of the restart guard's rule for extensions (`src/redlock/engine/restart/mod.rs`,
//! "Extensions"): a node's "yes" to an extension proves the lock only if the window rule trusts the node, or its
//! process has been up since before the lock was taken. A node restored from a snapshot older than a release may
//! hold the released value again, while the holder who came after it is gone from the node.
//!
//! Three nodes that persist by snapshots only (no AOF: never trusted at once), up for an hour, on fixed links. A
//! (client 0) takes `r0` at 0 for 2 s; every node snapshots at 100 ms (A's key in it); A's key is released by
//! value at 200 ms (another process's `unlock_value`), and A keeps its `Lock`; B (client 1) takes `r0` at 300 ms
//! for 2 s and holds it to 1.8 s; nodes 0 and 1 restart from their snapshot at 400 ms (A's key back, B's gone);
//! at 600 ms A extends the `Lock` it kept. Nodes 0 and 1 say yes, and they restarted after A's `SET`: without the
//! guard, A holds `r0` again beside B, which the checker must see.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use muxlock::Config;
use muxlock::redlock::sim::Engine;

use super::check::Hold;
use super::directed::sleep_until;
use super::node::{MS, Restart, Time};
use super::{Event, Sim};

/// What the history gave.
#[derive(Debug)]
pub struct Restored {
    /// The checker's verdict.
    pub violation: Option<String>,
    /// B got `r0` after A's key was released.
    pub b_got: bool,
    /// A's extension of the `Lock` it kept was confirmed.
    pub a_extended: bool,
    /// Nodes restarted (two planned).
    pub restarts: u64,
}

/// Runs the history, the clients' restart guard on (`guard`) or off.
pub fn history(guard: bool) -> Restored {
    let sim = super::directed_world(3, 2);
    {
        let mut w = sim.world();
        for n in 0..3 {
            for c in 0..2 {
                w.fix_link(c, n, MS / 10);
            }
            let node = &mut w.nodes[n].node;
            node.aof_always = false;
            // Up for an hour: both acquisitions count at once.
            node.started -= 3_600_000 * MS;
            w.push(100 * MS, Event::Snapshot { node: n });
        }
        for n in 0..2 {
            w.push(
                400 * MS,
                Event::Down {
                    node: n,
                    span: 10 * MS,
                    kind: Restart::Snapshot,
                },
            );
        }
    }
    let (b_got, a_extended) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(false)));
    super::run(&sim, |nodes, clock| {
        let (b_got, a_extended) = (Rc::clone(&b_got), Rc::clone(&a_extended));
        async move {
            let me = clock.me();
            let sim = Rc::clone(clock.sim());
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(guard);
            let Ok(engine) = Engine::new(nodes, clock, config, [me as u8 + 1; 32]) else {
                return;
            };
            let clock = engine.clock();
            let ttl = Duration::from_secs(2);
            if me == 1 {
                sleep_until(&sim, clock, 300).await;
                let Ok(Some(lock)) = engine.try_lock(b"r0", ttl).await else {
                    return;
                };
                let i = hold(
                    &sim,
                    me,
                    "lock",
                    lock.value().as_bytes(),
                    lock.valid_until(),
                );
                b_got.set(true);
                sleep_until(&sim, clock, 1_800).await;
                end(&sim, i);
                let _ = engine.unlock(lock).await;
                return;
            }
            let Ok(Some(mut lock)) = engine.try_lock(b"r0", ttl).await else {
                return;
            };
            let value = lock.value().as_bytes().to_vec();
            let i = hold(&sim, me, "lock", &value, lock.valid_until());
            sleep_until(&sim, clock, 200).await;
            end(&sim, i);
            let _ = engine.unlock_value(b"r0", &value).await;
            sleep_until(&sim, clock, 600).await;
            if engine.extend(&mut lock, ttl).await.is_ok() {
                // Released, yet extended: a new claim from now on.
                a_extended.set(true);
                let j = hold(&sim, me, "kept lock", &value, lock.valid_until());
                sleep_until(&sim, clock, 1_000).await;
                end(&sim, j);
            }
        }
    });
    let w = sim.world();
    Restored {
        violation: w.history.violation(Time::MAX),
        b_got: b_got.get(),
        a_extended: a_extended.get(),
        restarts: w.struck.restarts,
    }
}

/// Records client `me`'s hold of `r0` by `value` from now until `until`.
fn hold(
    sim: &Sim,
    me: usize,
    kind: &'static str,
    value: &[u8],
    until: std::time::Instant,
) -> usize {
    let mut w = sim.world();
    let (from, until) = (w.now, w.time(me, until));
    w.history.hold(Hold {
        client: me,
        kind,
        resource: b"r0".to_vec(),
        holder: value.to_vec(),
        from,
        until,
        token: None,
    })
}

/// Ends hold `i` now (its holder stopped relying on it).
fn end(sim: &Sim, i: usize) {
    let mut w = sim.world();
    let now = w.now;
    w.history.end(i, now);
}
