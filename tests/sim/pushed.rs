//! Directed histories of the grant by push (`wait/handoff.rs`, "The grant by push"): a holder U, a waiter W and
//! a contender C on three nodes with fixed links, and what the random worlds meet only by chance placed by hand.
//! Each history is judged by the checker.
//!
//! **A push from a node whose refusal was not read** ([`unread_refusal`]). U (client 0) holds `r0` on nodes 0
//! and 1 (node 2 was someone else's then), taken by a waiting request's attempt: its release hands the key on. W
//! (client 1) is 60 ms from node 1 each way, 0.1 ms from the others. W's attempt at 300 ms (TTL 2 s) is refused by
//! node 0, granted by node 2 (free by then), and refused by node 1 at 360 ms, whose reply comes after the round's
//! timeout: the attempt fails (held), its clean-up (a compare-and-delete of W's value) goes to nodes 1 and 2.
//! U releases at 370 ms: nodes 0 and 1 hand the key on to W, set to W's value, and push W's handed marker. W's
//! clean-up deletes the key on node 1 at 410 ms; node 1's push reaches W at 430 ms. W asks its grant by push at
//! 440 ms: node 1 pushed, but its refusal was not read (it is not in the attempt's `refused`), and the clean-up
//! has deleted the key there, so node 0 alone is a vote: no grant. C (client 2) tries `r0` at 450 ms and gets
//! nodes 1 and 2. Counting node 1 would make W a holder beside C.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use muxlock::Config;
use muxlock::net::NodeSet;
use muxlock::redlock::sim::{Engine, Pushed, Waits};

use super::Setup;
use super::directed::{hold, sleep_until};
use super::node::{MS, Time};
use super::pushes::Plan;

/// What [`unread_refusal`] gave.
#[derive(Debug, Default, Clone, Copy)]
pub struct Unread {
    /// The nodes whose refusal of W's attempt was read and counted.
    pub refused: Option<NodeSet>,
    /// Handed markers W's listener took.
    pub pushes_taken: u64,
    /// W was granted the lock by push; C got it.
    pub w_granted: bool,
    pub c_got: bool,
}

/// The history of a push from a node whose refusal was not read (see the module docs), and the checker's verdict.
pub fn unread_refusal() -> (Unread, Option<String>) {
    let setup = Setup::directed(3, 3);
    let config = Config::default();
    let sim = super::world(
        0,
        &setup,
        &muxlock::redlock::sim::options(&config, setup.nodes),
    );
    {
        let mut w = sim.world();
        w.listening.plan = Plan::steady();
        for c in 0..3 {
            for n in 0..3 {
                w.fix_link(c, n, MS / 10);
            }
        }
        w.fix_link(1, 1, 60 * MS);
        // Node 2 is someone else's when U takes the lock, free when W tries.
        w.nodes[2].node.hold(b"r0", b"someone-else", 250 * MS);
    }
    let seen = Rc::new(Cell::new(Unread::default()));
    super::run(&sim, |nodes, clock| {
        let seen = Rc::clone(&seen);
        async move {
            let me = clock.me();
            let sim = Rc::clone(clock.sim());
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false);
            let Ok(engine) = Engine::new(nodes, clock, config, [me as u8 + 1; 32]) else {
                return;
            };
            let engine = engine.with_turn_prefix(0x5100_0000 + me as u32);
            sim.world().listen(me, engine.listener());
            let clock = engine.clock();
            // The connections, set up.
            if let Ok(Some(first)) = engine.try_lock(b"first", Duration::from_secs(2)).await {
                let _ = engine.unlock(first).await;
            }
            let waits = Waits::Plain(b"r0");
            let ttl = Duration::from_millis(2_000);
            match me {
                0 => {
                    sleep_until(&sim, clock, 150).await;
                    let entry = engine.queue_entry(waits, 1);
                    let Ok(Ok(lock)) = engine.queued_attempt(waits, ttl, &entry, false).await
                    else {
                        return;
                    };
                    let i = hold(&sim, me, b"r0", lock.value().as_bytes(), lock.valid_until());
                    sleep_until(&sim, clock, 370).await;
                    let now = sim.world().now;
                    sim.world().history.end(i, now);
                    let _ = engine.unlock(lock).await;
                }
                1 => {
                    sleep_until(&sim, clock, 300).await;
                    let entry = engine.queue_entry(waits, 2);
                    let armed = sim.world().sessions(me);
                    let got = engine.queued_attempt(waits, ttl, &entry, false).await;
                    let Ok(Err(refused)) = got else {
                        return;
                    };
                    let Some(handed) = refused.handed.filter(|_| refused.held) else {
                        return;
                    };
                    sleep_until(&sim, clock, 440).await;
                    let now = sim.world().sessions(me);
                    let mut s = seen.get();
                    s.refused = Some(handed.refused());
                    s.pushes_taken = sim.world().struck.pushes[1];
                    match engine.by_push(waits, &entry, &handed, (&armed, &now)) {
                        Pushed::Granted(lock) => {
                            s.w_granted = true;
                            seen.set(s);
                            let i =
                                hold(&sim, me, b"r0", lock.value().as_bytes(), lock.valid_until());
                            sleep_until(&sim, clock, 900).await;
                            let now = sim.world().now;
                            sim.world().history.end(i, now);
                            let _ = engine.unlock(*lock).await;
                        }
                        Pushed::Coming(_) | Pushed::No => {
                            seen.set(s);
                            engine.leave_queue(&entry);
                        }
                    }
                }
                _ => {
                    sleep_until(&sim, clock, 450).await;
                    let ttl = Duration::from_millis(1_000);
                    if let Ok(Some(lock)) = engine.try_lock(b"r0", ttl).await {
                        let mut s = seen.get();
                        s.c_got = true;
                        seen.set(s);
                        let i = hold(&sim, me, b"r0", lock.value().as_bytes(), lock.valid_until());
                        sleep_until(&sim, clock, 900).await;
                        let now = sim.world().now;
                        sim.world().history.end(i, now);
                        let _ = engine.unlock(lock).await;
                    }
                }
            }
        }
    });
    let w = sim.world();
    (seen.get(), w.history.violation(Time::MAX))
}
