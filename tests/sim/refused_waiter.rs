//! A directed history of a waiting request's attempt refused everywhere: its verdict comes with the first
//! majority of refusals, and it reads on, for as long again as the verdict took, for the refusals still owed
//! (`engine/scripted.rs`, `Reading::OnAfterRefusal`). A node whose refusal came within that time is left out of
//! the attempt's clean-up (`engine/untouched.rs`); one whose reply came later is cleaned up (its request may have
//! set the key: nothing read says otherwise).
//!
//! One client, five nodes on links of fixed one-way delays: 1, 1, 1, 1.4 and 4 ms. Someone else holds the key on
//! every node. The client's attempt (the nodes' queue is empty: it heads it everywhere, and `SET NX` is refused)
//! has its verdict at about 2 ms (three refusals), reads on until about 4 ms, reads node 3's refusal at 2.8 ms,
//! and not node 4's (8 ms).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use muxlock::Config;
use muxlock::redlock::sim::{Clock, Engine, Waits};

use super::node::MS;

/// What the history showed.
#[derive(Debug)]
pub struct Refused {
    /// The attempt was refused, held elsewhere, as planned.
    pub held: bool,
    /// Per node, the compare-and-delete requests it ran from the attempt's start until 50 ms after it.
    pub cleaned: Vec<u64>,
}

/// Runs the history (see the module docs).
pub fn history() -> Refused {
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
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false);
            let Ok(engine) = Engine::new(nodes, clock, config, [1; 32]) else {
                return;
            };
            let clock = engine.clock();
            let ttl = Duration::from_millis(2_000);
            if let Ok(Some(first)) = engine.try_lock(b"first", ttl).await {
                let _ = engine.unlock(first).await;
            }
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
            let held = matches!(got, Ok(Err(true)));
            clock.sleep(Duration::from_millis(50)).await;
            let after = counts(&sim);
            let cleaned = after.iter().zip(&before).map(|(a, b)| a - b).collect();
            seen.set(Some(Refused { held, cleaned }));
        }
    });
    seen.take().expect("the history ran")
}
