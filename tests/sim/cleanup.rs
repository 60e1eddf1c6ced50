//! A directed history of a set's retry and its failed attempt's clean-up, which the random worlds do not reach: the
//! clean-up must be held for room and detached (a node's queue past the release reserve), the node's connection
//! dropped and dialled again, and the retry offered while the new connection's set-up waits, with room for it
//! behind the set-up. The room rules make that rare: an ordinary request takes no more than `max_in_flight`, so
//! only releases fill a queue past it, and a queue that full is seldom dropped and dialled again just before a
//! retry.
//!
//! Five nodes on fixed links; A (client 0) and F (client 1) share a process whose fanout takes 20 requests in
//! flight per connection (releases 40) and drops a node silent for 150 ms; B (client 2) is a process of its own.
//! Someone else holds `r2` on nodes 1 and 2 until 300 ms. Node 0 pauses from 5 ms to 260 ms; node 4 from 29 ms to
//! 85 ms and from 245 ms to 265 ms, so that A's attempt and its retry each wait on node 4 too, which was not silent
//! when they began: a split that waits only on nodes silent for a round timeout ends at once
//! (`Engine::without_silent`), and node 0 is.
//!
//! - 10 ms: F releases 19 names by value (held on nodes 1 to 4: confirmed at once): node 0's queue holds 19.
//! - 30 ms: A asks for the set `r0, r2`, retrying with the first attempt's value
//!   (`Engine::lock_many_one_value`). The attempt is queued on node 0 (20), granted by node 3, refused by 1 and
//!   2; it fails at its deadline (80 ms, nodes 0 and 4 silent).
//! - 35 ms: F releases 20 more: node 0's queue holds 40.
//! - 80 ms: the clean-up (`RELEASE_MANY` of A's value) finds node 0 full: held, detached at 130 ms.
//! - 160 ms: node 0's connection is dropped (silent with requests waiting) and dialled again; its set-up waits for
//!   the paused node.
//! - 250 ms: A's retry, with the same value: on node 0, 15 set-up commands, the clean-up and the retry fit in 20.
//!   The clean-up must go first (`Machine::make_way`): run after the retry, it deletes what the retry set there.
//! - 260 ms: node 0 runs what waited; with node 4's at 265 ms, its grant makes A's third: A holds the set.
//! - 320 ms: B tries `r2` (free on nodes 1 and 2 since 300 ms): it must not get it from nodes 0, 1 and 2.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use muxlock::Config;
use muxlock::redlock::sim::Engine;

use super::check::Hold;
use super::directed::sleep_until;
use super::node::{MS, Time};
use super::{Event, Setup, Sim};

/// What the history gave: the checker's verdict, whether A got the set and B `r2`, and how many releases were
/// detached (the clean-up must have been).
#[derive(Debug)]
pub struct Verdict {
    pub violation: Option<String>,
    pub a_got: bool,
    pub b_got: bool,
    pub detached: u64,
}

/// Runs the history (see the module docs).
pub fn history() -> Verdict {
    let setup = Setup {
        durable: false,
        per_process: Some(2),
        ..Setup::directed(5, 3)
    };
    let opts = muxlock::redlock::sim::options(&config(), setup.nodes)
        .with_max_in_flight(20)
        .with_hung_timeout(Duration::from_millis(150));
    let sim = super::world(0, &setup, &opts);
    {
        let mut w = sim.world();
        // The room is the history's own (no room drawn by the seed).
        assert_eq!(w.procs[0].fanout.options().max_in_flight(), 20);
        for c in 0..3 {
            for n in 0..5 {
                w.fix_link(c, n, MS / 10);
            }
        }
        for n in [1, 2] {
            w.nodes[n].node.hold(b"r2", b"someone-else", 300 * MS);
        }
        // What F releases, held on the nodes that answer: each release is confirmed at once.
        for n in 1..5 {
            for i in 0..39 {
                w.nodes[n]
                    .node
                    .hold(format!("f{i}").as_bytes(), b"f", 1_000 * MS);
            }
        }
        let span = 255 * MS;
        w.push(5 * MS, Event::Pause { node: 0, span });
        // Node 4 pauses across A's attempt and its retry, so that neither waits on node 0 alone (see the docs).
        w.push(
            29 * MS,
            Event::Pause {
                node: 4,
                span: 56 * MS,
            },
        );
        w.push(
            245 * MS,
            Event::Pause {
                node: 4,
                span: 20 * MS,
            },
        );
    }
    let got = Rc::new(Cell::new((false, false)));
    super::run(&sim, |nodes, clock| {
        let got = Rc::clone(&got);
        async move {
            let me = clock.me();
            let sim = Rc::clone(clock.sim());
            let Ok(engine) = Engine::new(nodes, clock, config(), [me as u8 + 1; 32]) else {
                return;
            };
            let clock = engine.clock();
            // Every connection up and set up before node 0 pauses.
            let _ = engine.unlock_value(b"warm", b"up").await;
            match me {
                0 => {
                    sleep_until(&sim, clock, 30).await;
                    let ttl = Duration::from_millis(1_000);
                    let Ok(set) = engine.lock_many_one_value(&[b"r0", b"r2"], ttl).await else {
                        return;
                    };
                    let value = set.value().as_bytes().to_vec();
                    let held = [&b"r0"[..], b"r2"].map(|r| hold(&sim, me, "set", r, &value, &set));
                    got.set((true, got.get().1));
                    sleep_until(&sim, clock, 600).await;
                    let now = sim.world().now;
                    held.iter().for_each(|&i| sim.world().history.end(i, now));
                    let _ = engine.unlock(set).await;
                }
                1 => {
                    for (at, from, to) in [(10, 0, 19), (35, 19, 39)] {
                        sleep_until(&sim, clock, at).await;
                        for i in from..to {
                            let name = format!("f{i}");
                            let _ = engine.unlock_value(name.as_bytes(), b"f").await;
                        }
                    }
                }
                _ => {
                    sleep_until(&sim, clock, 320).await;
                    let ttl = Duration::from_millis(500);
                    let Ok(Some(lock)) = engine.try_lock(b"r2", ttl).await else {
                        return;
                    };
                    let value = lock.value().as_bytes().to_vec();
                    let i = hold(&sim, me, "lock", b"r2", &value, &lock);
                    got.set((got.get().0, true));
                    sleep_until(&sim, clock, 400).await;
                    let now = sim.world().now;
                    sim.world().history.end(i, now);
                }
            }
        }
    });
    let mut w = sim.world();
    w.count_net();
    let (a_got, b_got) = got.get();
    Verdict {
        violation: w.history.violation(Time::MAX),
        a_got,
        b_got,
        detached: w.struck.detached,
    }
}

/// The clients' configuration: one retry, 120 ms after a failed attempt; the restart guard and the clock check off (beside
/// the point here: the set-up is then 15 commands, and every request one reply).
fn config() -> Config {
    Config::default()
        .with_retry_count(1)
        .with_retry_delay(Duration::from_millis(120))
        .with_retry_jitter(Duration::ZERO)
        .with_restart_guard(false)
        .with_clock_check(false)
}

/// Records client `me`'s hold of `resource` by `value` from now until `lock`'s validity.
fn hold(
    sim: &Sim,
    me: usize,
    kind: &'static str,
    resource: &[u8],
    value: &[u8],
    lock: &muxlock::Lock,
) -> usize {
    let mut w = sim.world();
    let (from, until) = (w.now, w.time(me, lock.valid_until()));
    w.history.hold(Hold {
        client: me,
        kind,
        resource: resource.to_vec(),
        holder: value.to_vec(),
        from,
        until,
        token: None,
    })
}
