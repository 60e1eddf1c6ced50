//! Directed histories of what a waiting request's attempts leave on nodes whose replies come after the verdict.
//!
//! [`refused`]: an attempt refused everywhere has its verdict with the first majority of refusals, and reads on,
//! for as long again as the verdict took (at most a tenth of a round), for the refusals still owed
//! (`engine/scripted.rs`, `Reading::OnAfterRefusal`). A node whose refusal came within that time is left out of
//! the attempt's clean-up
//! (`engine/untouched.rs`); one whose reply came later is cleaned up (its request may have set the key: nothing
//! read says otherwise). One client, five nodes on links of fixed one-way delays: 1, 1, 1, 1.4 and 4 ms. Someone
//! else holds the key on every node. The client's attempt (the nodes' queue is empty: it heads it everywhere, and
//! `SET NX` is refused) has its verdict at about 2 ms (three refusals), reads on until about 4 ms, reads node 3's
//! refusal at 2.8 ms, and not node 4's (8 ms).
//!
//! [`granted_then_released`]: a waiter granted by a majority leaves the queue at once only where a reply read says
//! its entry is; where the reply was not read, its plain lock's release takes the entry off
//! (`kind/queued.rs`). Three nodes, node 2 at 5 ms one way, the others at 0.1 ms; someone else holds the key on
//! every node, on nodes 0 and 1 until 10 ms after the start. The waiter's first attempt (at the start) is refused
//! everywhere and queues it; its second, at 20 ms, is granted by nodes 0 and 1 (`SET NX`: the gate keeps the
//! entry), and node 2's refusal (it queues the waiter again) is not read by the verdict. The waiter leaves nodes 0
//! and 1 at once; its entry on node 2 stays until its release, which takes it off.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use muxlock::Config;
use muxlock::redlock::sim::{Clock, Engine, Waits};

use super::node::MS;

/// What the history of a refused attempt showed.
#[derive(Debug)]
pub struct Refused {
    /// The attempt was refused, held elsewhere, as planned.
    pub held: bool,
    /// Per node, the compare-and-delete requests it ran from the attempt's start until 50 ms after it.
    pub cleaned: Vec<u64>,
}

/// Runs the history of a refused attempt (see the module docs).
pub fn refused() -> Refused {
    let sim = super::directed_world(5, 1);
    let key = b"line".to_vec();
    // When the attempt starts (ms): the connections are set up by then.
    let start = 20;
    {
        let mut w = sim.world();
        // One-way delays in tenths of a millisecond.
        for (n, delay) in [10, 10, 10, 14, 40].into_iter().enumerate() {
            w.fix_link(0, n, delay * MS / 10);
        }
        for n in 0..5 {
            w.nodes[n].node.hold(&key, b"someone-else", 10_000 * MS);
        }
    }
    let seen = Rc::new(Cell::new(None));
    super::run(&sim, |nodes, clock| {
        let (seen, key) = (Rc::clone(&seen), key.clone());
        async move {
            let sim = Rc::clone(clock.sim());
            let Some(engine) = super::warmed_engine(nodes, clock).await else {
                return;
            };
            let clock = engine.clock();
            let ttl = Duration::from_millis(2_000);
            let left = (start * MS).saturating_sub(sim.world().now);
            clock.sleep(Duration::from_nanos(left)).await;
            let counts = |sim: &super::Sim| -> Vec<u64> {
                let w = sim.world();
                w.nodes.iter().map(|n| n.node.compare_deletes).collect()
            };
            let before = counts(&sim);
            let waits = Waits::Plain(&key);
            let entry = engine.queue_entry(waits, 1);
            let got = engine.queued_attempt(waits, ttl, &entry, false).await;
            let held = matches!(got, Ok(Err(ref r)) if r.held);
            clock.sleep(Duration::from_millis(50)).await;
            let after = counts(&sim);
            let cleaned = after.iter().zip(&before).map(|(a, b)| a - b).collect();
            seen.set(Some(Refused { held, cleaned }));
        }
    });
    seen.take().expect("the history ran")
}

/// What the history of a granted waiter showed: per node, how many entries its line's queue held.
#[derive(Debug)]
pub struct Granted {
    /// The second attempt was granted, as planned.
    pub granted: bool,
    /// 50 ms after the grant, still held.
    pub held: Vec<usize>,
    /// 50 ms after the release.
    pub after_release: Vec<usize>,
}

/// Runs the history of a granted waiter that then releases (see the module docs).
pub fn granted_then_released() -> Granted {
    let sim = super::directed_world(3, 1);
    let key = b"line".to_vec();
    let queue = [&b"muxlock:queue:"[..], &key].concat();
    let start = 20;
    {
        let mut w = sim.world();
        for (n, delay) in [1, 1, 50].into_iter().enumerate() {
            w.fix_link(0, n, delay * MS / 10);
        }
        w.nodes[2].node.hold(&key, b"someone-else", 10_000 * MS);
    }
    let seen = Rc::new(Cell::new(None));
    super::run(&sim, |nodes, clock| {
        let (seen, key, queue) = (Rc::clone(&seen), key.clone(), queue.clone());
        async move {
            let sim = Rc::clone(clock.sim());
            let Some(engine) = super::warmed_engine(nodes, clock).await else {
                return;
            };
            let clock = engine.clock();
            let ttl = Duration::from_millis(2_000);
            let sleep_until = |ms: u64| {
                let left = (ms * MS).saturating_sub(sim.world().now);
                clock.sleep(Duration::from_nanos(left))
            };
            sleep_until(start).await;
            {
                let mut w = sim.world();
                let until = w.now + 10 * MS;
                for n in [0, 1] {
                    w.nodes[n].node.hold(&key, b"someone-else", until);
                }
            }
            let queued = |sim: &super::Sim| -> Vec<usize> {
                let mut w = sim.world();
                let now = w.now;
                w.nodes
                    .iter_mut()
                    .map(|n| n.node.waiting(&queue, now))
                    .collect()
            };
            let waits = Waits::Plain(&key);
            let entry = engine.queue_entry(waits, 1);
            let first = engine.queued_attempt(waits, ttl, &entry, false).await;
            if !matches!(first, Ok(Err(ref r)) if r.held) {
                return;
            }
            sleep_until(start + 20).await;
            let got = engine.queued_attempt(waits, ttl, &entry, true).await;
            let Ok(Ok(lock)) = got else {
                seen.set(Some(Granted {
                    granted: false,
                    held: Vec::new(),
                    after_release: Vec::new(),
                }));
                return;
            };
            clock.sleep(Duration::from_millis(50)).await;
            let held = queued(&sim);
            let _ = engine.unlock(lock).await;
            clock.sleep(Duration::from_millis(50)).await;
            let after_release = queued(&sim);
            seen.set(Some(Granted {
                granted: true,
                held,
                after_release,
            }));
        }
    });
    seen.take().expect("the history ran")
}

/// What the history of a granted waiter whose lock is released, then of another waiter, showed.
#[derive(Debug)]
pub struct Batched {
    /// The waiter's second attempt was granted, and its release confirmed, as planned.
    pub granted: bool,
    /// Per node, how many entries the line's queue held 5 ms after the release.
    pub after_release: Vec<usize>,
    /// The other waiter's one attempt after the release: granted.
    pub other_granted: bool,
}

/// Runs the history of a granted waiter released by [`unlock_batch`](muxlock::redlock::sim::Engine::unlock_batch)
/// (`batch`; else by [`unlock`](muxlock::redlock::sim::Engine::unlock), the control), then another waiter that
/// reaches nodes 1 and 2 only (node 0 is cut off from it).
///
/// Three nodes; the waiter (client 0) is 0.1 ms from nodes 0 and 1 and 5 ms from node 2, the other (client 1) 0.1
/// ms from every node. Someone else holds the key on nodes 0 and 1 until 30 ms and on node 2 until 50 ms. The
/// waiter's first attempt (20 ms) is refused everywhere and queues it; its second (40 ms) is granted by nodes 0
/// and 1 (`SET NX`: the gates keep the entry, and the waiter leaves there at once), and node 2 queues it again
/// (the key is held there until 50 ms), a reply the verdict does not read. At 60 ms the waiter releases its lock.
/// At 70 ms the other waiter, the key free everywhere, makes one queued attempt: nodes 1 and 2 must grant it
/// (node 0 it never reaches).
pub fn granted_then_released_by(batch: bool) -> Batched {
    let sim = super::directed_world(3, 2);
    let key = b"line".to_vec();
    let queue = [&b"muxlock:queue:"[..], &key].concat();
    let start = 20;
    {
        let mut w = sim.world();
        for (n, delay) in [1, 1, 50].into_iter().enumerate() {
            w.fix_link(0, n, delay * MS / 10);
            w.fix_link(1, n, MS / 10);
        }
        w.cut(1, 0, 0, 10_000 * MS);
        for n in [0, 1] {
            w.nodes[n]
                .node
                .hold(&key, b"someone-else", (start + 10) * MS);
        }
        w.nodes[2]
            .node
            .hold(&key, b"someone-else", (start + 30) * MS);
    }
    let seen = Rc::new(Cell::new(None));
    let other = Rc::new(Cell::new(None));
    super::run(&sim, |nodes, clock| {
        let (seen, other, key, queue) = (
            Rc::clone(&seen),
            Rc::clone(&other),
            key.clone(),
            queue.clone(),
        );
        async move {
            let sim = Rc::clone(clock.sim());
            let me = clock.me();
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false);
            let seed = [u8::try_from(me + 1).unwrap_or(1); 32];
            let Ok(engine) = Engine::new(nodes, clock, config, seed) else {
                return;
            };
            let clock = engine.clock();
            let ttl = Duration::from_millis(2_000);
            if me == 0 {
                // Connections set up (the other is cut off from node 0: it does not warm up).
                if let Ok(Some(first)) = engine.try_lock(b"first", ttl).await {
                    let _ = engine.unlock(first).await;
                }
            }
            let sleep_until = |ms: u64| {
                let left = (ms * MS).saturating_sub(sim.world().now);
                clock.sleep(Duration::from_nanos(left))
            };
            let waits = Waits::Plain(&key);
            if me == 1 {
                sleep_until(start + 50).await;
                let entry = engine.queue_entry(waits, 2);
                let got = engine.queued_attempt(waits, ttl, &entry, false).await;
                other.set(Some(matches!(got, Ok(Ok(_)))));
                if let Ok(Ok(lock)) = got {
                    let _ = engine.unlock(lock).await;
                }
                return;
            }
            sleep_until(start).await;
            let entry = engine.queue_entry(waits, 1);
            let first = engine.queued_attempt(waits, ttl, &entry, false).await;
            let not_granted = Batched {
                granted: false,
                after_release: Vec::new(),
                other_granted: false,
            };
            if !matches!(first, Ok(Err(ref r)) if r.held) {
                seen.set(Some(not_granted));
                return;
            }
            sleep_until(start + 20).await;
            let Ok(Ok(lock)) = engine.queued_attempt(waits, ttl, &entry, true).await else {
                seen.set(Some(not_granted));
                return;
            };
            sleep_until(start + 40).await;
            let confirmed = match batch {
                true => matches!(engine.unlock_batch(vec![lock]).await.as_slice(), [Ok(_)]),
                false => engine.unlock(lock).await.is_ok(),
            };
            sleep_until(start + 45).await;
            let after_release = {
                let mut w = sim.world();
                let now = w.now;
                w.nodes
                    .iter_mut()
                    .map(|n| n.node.waiting(&queue, now))
                    .collect()
            };
            seen.set(Some(Batched {
                granted: confirmed,
                after_release,
                other_granted: false,
            }));
        }
    });
    let mut batched: Batched = seen.take().expect("the history ran");
    batched.other_granted = other.take().expect("the other waiter ran");
    batched
}
