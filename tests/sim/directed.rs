//! Directed histories of a holder and a contender: three nodes on fixed links, and the faults placed by hand
//! where the random worlds meet them by chance (or never). Each history is judged by the checker.
//!
//! A (client 0) takes `r0` for 2 s at 0 and holds it until 1.8 s, extending it once in some histories; B (client 1)
//! tries `r0` later, for 1 s. The restart guard is off (beside the point here, as in `tests/mutex/clocks.rs`).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use muxlock::Config;
use muxlock::redlock::sim::{Clock, Engine, SimGuard};

use super::check::Hold;
use super::node::{MS, Native, Time};
use super::{Setup, Sim};

/// What happens to the nodes' clocks and links, and what A does, while A holds.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// At 300 ms the clocks of nodes 0 and 1 jump 5 s ahead (their copies of A's key expire), at 600 ms they are
    /// set right; B tries at 800 ms.
    JumpAhead,
    /// At 300 ms the clocks of nodes 0 and 1 step 3 s back; at 400 ms A extends to 2 s (nodes 0 and 1 run it on
    /// their clocks, far behind: refused by the check, their copies now expire 2.6 s earlier on their clocks than
    /// the grant set); at 600 ms they are set right; B tries at 800 ms.
    StepBackAndExtend,
}

/// What a directed history gave: the checker's verdict, and whether B got the lock.
#[derive(Debug)]
pub struct Verdict {
    pub violation: Option<String>,
    pub b_got: bool,
}

/// Runs `shape`: the nodes' clocks step back as planned with `steps_back`, else a step back is a stop until the
/// clock has lost the step (`Setup::steps_back`); `check` turns the clients' clock check on.
pub fn history(shape: Shape, steps_back: bool, check: bool) -> Verdict {
    let setup = Setup {
        steps_back,
        ..Setup::directed(3, 2)
    };
    // The clocks' step (ms), A's extension (when, to what TTL), and when B tries.
    let (step, extend, b_at) = match shape {
        Shape::JumpAhead => (Some(5_000), None, 800),
        Shape::StepBackAndExtend => (Some(-3_000), Some((400, 2_000)), 800),
    };
    let config = Config::default();
    let sim = super::world(
        0,
        &setup,
        &muxlock::redlock::sim::options(&config, setup.nodes),
    );
    {
        let mut w = sim.world();
        for c in 0..2 {
            for n in 0..3 {
                w.fix_link(c, n, MS / 10);
            }
        }
        for n in 0..2 {
            if step.is_some() {
                w.move_clock(n, 300 * MS, step);
                w.move_clock(n, 600 * MS, None);
            }
        }
    }
    let b_got = Rc::new(Cell::new(false));
    super::run(&sim, |nodes, clock| {
        let b_got = Rc::clone(&b_got);
        async move {
            let me = clock.me();
            let sim = Rc::clone(clock.sim());
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false)
                .with_clock_check(check);
            let Ok(engine) = Engine::new(nodes, clock, config, [me as u8 + 1; 32]) else {
                return;
            };
            let (start, ttl, until) = match me {
                0 => (0, 2_000, 1_800),
                _ => (b_at, 1_000, b_at + 100),
            };
            let clock = engine.clock();
            sleep_until(&sim, clock, start).await;
            let Ok(Some(mut lock)) = engine.try_lock(b"r0", Duration::from_millis(ttl)).await
            else {
                return;
            };
            let i = hold(&sim, me, b"r0", lock.value().as_bytes(), lock.valid_until());
            b_got.set(me == 1);
            if let (0, Some((at, ttl))) = (me, extend) {
                sleep_until(&sim, clock, at).await;
                let extended = engine.extend(&mut lock, Duration::from_millis(ttl)).await;
                if extended.is_ok() {
                    // The hold runs to the new validity, shorter or longer.
                    let mut w = sim.world();
                    let until = w.time(me, lock.valid_until());
                    w.history.holds[i].until = until;
                    w.history
                        .note(format!("c{me} extended r0 until {until} ns"));
                }
            }
            sleep_until(&sim, clock, until).await;
            let now = sim.world().now;
            sim.world().history.end(i, now);
            let _ = engine.unlock(lock).await;
        }
    });
    let w = sim.world();
    Verdict {
        violation: w.history.violation(Time::MAX),
        b_got: b_got.get(),
    }
}

/// Records client `me`'s hold of `resource` by `value` from now until `until`.
pub(super) fn hold(
    sim: &Sim,
    me: usize,
    resource: &[u8],
    value: &[u8],
    until: std::time::Instant,
) -> usize {
    let mut w = sim.world();
    let (from, until) = (w.now, w.time(me, until));
    w.history.hold(Hold {
        client: me,
        kind: "lock",
        resource: resource.to_vec(),
        holder: value.to_vec(),
        from,
        until,
        token: None,
    })
}

/// Sleeps until virtual time `ms` (at once if it has passed).
pub(super) async fn sleep_until(sim: &Sim, clock: &impl Clock, ms: u64) {
    let left = (ms * MS).saturating_sub(sim.world().now);
    clock.sleep(Duration::from_nanos(left)).await;
}

/// What [`guard_across_a_script_flush`] saw: the guard's renewals before every node lost its scripts, whether the
/// first renewal round after renewed it, and the checker's verdict.
#[derive(Debug)]
pub struct Flushed {
    pub renewals_before: u64,
    pub renewed_after: bool,
    pub violation: Option<String>,
}

/// Client 0 holds `r0` under a guard (TTL 1 s, renewed when due) on three nodes that all lose their scripts
/// (`SCRIPT FLUSH`) at 500 ms: the first renewal after goes by hash, is refused `NOSCRIPT` everywhere, and must
/// go again in full in the same round, so that the guard is renewed. `clock_check`: the client's clock check
/// (each lease request bracketed by `TIME`s, the batch sent again too).
pub fn guard_across_a_script_flush(clock_check: bool) -> Flushed {
    let sim = super::directed_world(3, 1);
    {
        let mut w = sim.world();
        for n in 0..3 {
            w.fix_link(0, n, MS / 10);
            w.push(500 * MS, super::Event::Flush { node: n });
        }
    }
    let seen = Rc::new(Cell::new((0, false)));
    super::run(&sim, |nodes, clock| {
        let seen = Rc::clone(&seen);
        async move {
            let sim = Rc::clone(clock.sim());
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false)
                .with_clock_check(clock_check);
            let Ok(engine) = Engine::new(nodes, clock, config, [1; 32]) else {
                return;
            };
            let ttl = Duration::from_millis(1_000);
            let Ok(Some(lock)) = engine.try_lock(b"r0", ttl).await else {
                return;
            };
            let mut guard = engine.guard(lock, ttl, None);
            while let Some(due) = guard.due() {
                let clock = engine.clock();
                clock
                    .sleep(due.saturating_duration_since(clock.now()))
                    .await;
                let before = guard.renewals();
                let flushed = sim.world().now > 500 * MS;
                engine.renew_guards(&mut [&mut guard]).await;
                if flushed {
                    seen.set((before, guard.renewals() > before));
                    break;
                }
            }
            let _ = engine.release_guard(guard).await;
        }
    });
    let w = sim.world();
    let (renewals_before, renewed_after) = seen.get();
    Flushed {
        renewals_before,
        renewed_after,
        violation: w.history.violation(Time::MAX),
    }
}

/// How long (virtual ms) each of a client's rounds took beside a node that answers late.
#[derive(Debug)]
pub struct Beside {
    /// A batch acquisition of two free names, both granted.
    pub batch: Option<u64>,
    /// A guard's renewal round, renewed.
    pub renewal: Option<u64>,
    /// An acquisition of a name held elsewhere, with two retries: when it gave up (`None`: it never did, or got
    /// the name).
    pub gave_up: Option<u64>,
}

/// One client on three nodes, nodes 0 and 1 on 0.1 ms links, node 2 on a 300 ms one (six round timeouts away).
/// Someone else holds `held` on every node for 10 s. After a first lock that opens the connections, the client
/// takes `r0` and `r1` in one batch, guards `r0` and renews it once, then asks for `held` with two retries
/// (200 ms apart, no jitter). A round whose every verdict is in (nodes 0 and 1 decide every lock) ends then, not
/// at its deadline; the acquisition of `held` gives up after its third attempt, long before the 10 s.
pub fn rounds_beside_a_slow_node() -> Beside {
    let sim = super::directed_world(3, 1);
    {
        let mut w = sim.world();
        w.fix_link(0, 0, MS / 10);
        w.fix_link(0, 1, MS / 10);
        w.fix_link(0, 2, 300 * MS);
        for n in 0..3 {
            w.nodes[n].node.hold(b"held", b"someone-else", 10_000 * MS);
        }
    }
    let seen = Rc::new(Cell::new((None, None, None)));
    super::run(&sim, |nodes, clock| {
        let seen = Rc::clone(&seen);
        async move {
            let sim = Rc::clone(clock.sim());
            let config = Config::default()
                .with_retry_count(2)
                .with_retry_jitter(Duration::ZERO)
                .with_restart_guard(false);
            let Ok(engine) = Engine::new(nodes, clock, config, [1; 32]) else {
                return;
            };
            let ttl = Duration::from_millis(2_000);
            let ms = |sim: &Sim| sim.world().now / MS;
            if let Ok(Some(first)) = engine.try_lock(b"first", ttl).await {
                let _ = engine.unlock(first).await;
            }
            sleep_until(&sim, engine.clock(), 1_000).await;
            let at = ms(&sim);
            let mut got = engine
                .try_lock_batch(&[b"r0", b"r1"], ttl)
                .await
                .into_iter()
                .flatten()
                .flatten();
            let (Some(r0), Some(r1)) = (got.next(), got.next()) else {
                return;
            };
            let batch = ms(&sim) - at;
            let mut guard = engine.guard(r0, ttl, None);
            let Some(due) = guard.due() else { return };
            let clock = engine.clock();
            clock
                .sleep(due.saturating_duration_since(clock.now()))
                .await;
            let (at, before) = (ms(&sim), guard.renewals());
            engine.renew_guards(&mut [&mut guard]).await;
            let renewal = (guard.renewals() > before).then(|| ms(&sim) - at);
            let at = ms(&sim);
            let gave_up = match engine.lock(b"held", ttl).await {
                Ok(lock) => {
                    let _ = engine.unlock(lock).await;
                    None
                }
                Err(_) => Some(ms(&sim) - at),
            };
            seen.set((Some(batch), renewal, gave_up));
            let _ = engine.unlock(r1).await;
            let _ = engine.release_guard(guard).await;
        }
    });
    let (batch, renewal, gave_up) = seen.get();
    Beside {
        batch,
        renewal,
        gave_up,
    }
}

/// How long (virtual µs) each acquisition of a name split beside a hung node took: the first, then the later ones.
#[derive(Debug)]
pub struct Split {
    pub first: Option<u64>,
    pub later: Vec<u64>,
}

/// One client on five nodes (0.1 ms links), through its members as a manager's; someone else holds `split` on nodes 0 and 1 for 10 s, and node 4
/// pauses from 5 ms for 5 s. The client opens its connections (a first lock, released), then from 10 ms tries
/// `split` once, waits an eighth of a round timeout, and tries it five more times: each attempt is granted by
/// nodes 2 and 3 and refused by 0 and 1 (asked again: still taken), a split only node 4 could decide. The first
/// attempt's votes come before node 4 has been silent for a round timeout, so it waits its round out; by the
/// later ones it has, and each ends as soon as its votes are in (`Engine::without_silent`), not at its deadline.
pub fn split_beside_a_hung_node() -> Split {
    let sim = super::directed_world(5, 1);
    {
        let mut w = sim.world();
        for n in 0..5 {
            w.fix_link(0, n, MS / 10);
        }
        for n in [0, 1] {
            w.nodes[n].node.hold(b"split", b"someone-else", 10_000 * MS);
        }
        let span = 5_000 * MS;
        w.push(5 * MS, super::Event::Pause { node: 4, span });
    }
    let seen = Rc::new(std::cell::RefCell::new(Split {
        first: None,
        later: Vec::new(),
    }));
    super::run(&sim, |nodes, clock| {
        let seen = Rc::clone(&seen);
        async move {
            let sim = Rc::clone(clock.sim());
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false);
            let round = config.round_timeout();
            // Through the members, as a manager sends its rounds.
            let nodes = nodes.members(&config);
            let Ok(engine) = Engine::new(nodes, clock, config, [1; 32]) else {
                return;
            };
            let ttl = Duration::from_millis(2_000);
            if let Ok(Some(first)) = engine.try_lock(b"first", ttl).await {
                let _ = engine.unlock(first).await;
            }
            let us = |sim: &Sim| sim.world().now / (MS / 1_000);
            sleep_until(&sim, engine.clock(), 10).await;
            for i in 0..6 {
                if i == 1 {
                    engine.clock().sleep(round / 8).await;
                }
                let at = us(&sim);
                let Ok(None) = engine.try_lock(b"split", ttl).await else {
                    return; // granted, or an error: the history did not run as planned
                };
                let took = us(&sim) - at;
                let mut seen = seen.borrow_mut();
                match i {
                    0 => seen.first = Some(took),
                    _ => seen.later.push(took),
                }
            }
        }
    });
    Rc::into_inner(seen)
        .expect("the client is done")
        .into_inner()
}

/// What [`renewals_decided_at_different_nodes`] saw: per guard, whether its renewal renewed it, and the checker's
/// verdict.
#[derive(Debug)]
pub struct Renewals {
    pub renewed: [bool; 2],
    pub violation: Option<String>,
}

/// One client on five nodes (through its members, as a manager's) whose replies come in node order (node `i` on a link of `0.1 × (i + 1)` ms) holds
/// `r0` and `r1` under guards (TTL 1 s); then nodes 0 and 1 lose `r1` (a majority still holds it) and both guards
/// are renewed in one round. `r0`'s renewal is decided by node 2's reply, `r1`'s only by node 4's: the round must
/// go on after one renewal's verdict until every renewal has its own, and renew both.
pub fn renewals_decided_at_different_nodes() -> Renewals {
    let sim = super::directed_world(5, 1);
    {
        let mut w = sim.world();
        for n in 0..5 {
            w.fix_link(0, n, MS / 10 * (n as Time + 1));
        }
    }
    let seen = Rc::new(Cell::new(None));
    super::run(&sim, |nodes, clock| {
        let seen = Rc::clone(&seen);
        async move {
            let sim = Rc::clone(clock.sim());
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false);
            let nodes = nodes.members(&config);
            let Ok(engine) = Engine::new(nodes, clock, config, [1; 32]) else {
                return;
            };
            let ttl = Duration::from_millis(1_000);
            let (Ok(Some(r0)), Ok(Some(r1))) = (
                engine.try_lock(b"r0", ttl).await,
                engine.try_lock(b"r1", ttl).await,
            ) else {
                return;
            };
            let mut guards = [engine.guard(r0, ttl, None), engine.guard(r1, ttl, None)];
            let holds: Vec<usize> = guards
                .iter()
                .map(|g| hold(&sim, 0, g.resource(), g.value(), g.deadline()))
                .collect();
            {
                let mut w = sim.world();
                for n in [0, 1] {
                    w.nodes[n].node.keys.remove(&b"r1"[..]);
                }
            }
            let before: Vec<u64> = guards.iter().map(SimGuard::renewals).collect();
            let [g0, g1] = &mut guards;
            engine.renew_guards(&mut [g0, g1]).await;
            let renewed = [0, 1].map(|i| guards[i].renewals() > before[i]);
            seen.set(Some(renewed));
            let now = sim.world().now;
            for i in holds {
                sim.world().history.end(i, now);
            }
            for g in guards {
                let _ = engine.release_guard(g).await;
            }
        }
    });
    let w = sim.world();
    Renewals {
        renewed: seen.get().unwrap_or_default(),
        violation: w.history.violation(Time::MAX),
    }
}

/// The kinds of lock [`guard_on_slow_links`] guards.
#[derive(Clone, Copy, Debug)]
pub enum Guarded {
    Plain,
    Reader,
    Writer,
    Permit,
    Fenced,
    Set,
    Owned,
}

impl Guarded {
    pub const ALL: [Guarded; 7] = [
        Guarded::Plain,
        Guarded::Reader,
        Guarded::Writer,
        Guarded::Permit,
        Guarded::Fenced,
        Guarded::Set,
        Guarded::Owned,
    ];
}

/// What [`guard_on_slow_links`] saw: how long the acquisition took and how much of the lease it left (virtual ms),
/// the guard's renewals, why it was lost if it was, and the checker's verdict.
#[derive(Debug)]
pub struct SlowGuard {
    pub acquired_in: u64,
    pub lease_left: u64,
    pub renewals: u64,
    pub lost: Option<String>,
    pub violation: Option<String>,
}

/// One client on three nodes 20 ms away (40 ms round trips: every round answered within its 50 ms timeout; no
/// fault at all), the default settings (clock check on): a lock of `kind` with a TTL of 320 ms, about the shortest a
/// guard takes (`hold` refuses below 308 ms), guarded as soon as granted and renewed when due for 1.5 s. The lease
/// the guard starts with is shorter than the TTL less the allowance by the acquisition's rounds (one; two for a
/// fenced lock), so its first renewal is due earlier than a third of the TTL after it was made: later than a round
/// before its deadline, and the renewal, confirmed after the deadline, loses a guard whose every node answered.
pub fn guard_on_slow_links(kind: Guarded) -> Option<SlowGuard> {
    let sim = super::directed_world(3, 1);
    {
        let mut w = sim.world();
        for n in 0..3 {
            w.fix_link(0, n, 20 * MS);
        }
    }
    let seen = Rc::new(Cell::new(None));
    super::run(&sim, |nodes, clock| {
        let seen = Rc::clone(&seen);
        async move {
            let sim = Rc::clone(clock.sim());
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false);
            let Ok(engine) = Engine::new(nodes, clock, config, [1; 32]) else {
                return;
            };
            let ttl = Duration::from_millis(320);
            let ms = |sim: &Sim| sim.world().now / MS;
            // A first lock opens the connections: the acquisition measured is one of open connections.
            if let Ok(Some(first)) = engine.try_lock(b"first", ttl).await {
                let _ = engine.unlock(first).await;
            }
            sleep_until(&sim, engine.clock(), 500).await;
            let at = ms(&sim);
            let got = match kind {
                Guarded::Plain => engine.try_lock(b"r0", ttl).await,
                Guarded::Reader => engine.lock_rw(b"rw0", false, ttl, (false, false)).await,
                Guarded::Writer => engine.lock_rw(b"rw0", true, ttl, (false, false)).await,
                Guarded::Permit => engine.lock_permit(b"s2", 2, ttl, (false, false)).await,
                Guarded::Fenced => engine.lock_fenced(b"r0", ttl, false).await,
                Guarded::Set => engine.lock_many(&[b"r0", b"r1"], ttl, false).await,
                Guarded::Owned => match engine.owner() {
                    Ok(owner) => engine.lock_owned(&owner, b"r0", ttl).await.map(Some),
                    Err(e) => Err(e),
                },
            };
            let Ok(Some(lock)) = got else {
                return;
            };
            let acquired_in = ms(&sim) - at;
            let clock = engine.clock();
            let lease_left = lock.valid_until().saturating_duration_since(clock.now());
            let mut guard = engine.guard(lock, ttl, None);
            let end = at + 1_500;
            while let Some(due) = guard.due() {
                clock
                    .sleep(due.saturating_duration_since(clock.now()))
                    .await;
                if ms(&sim) >= end {
                    break;
                }
                engine.renew_guards(&mut [&mut guard]).await;
            }
            seen.set(Some(SlowGuard {
                acquired_in,
                lease_left: lease_left.as_millis() as u64,
                renewals: guard.renewals(),
                lost: guard.lost_at(clock.now()).map(|l| l.to_string()),
                violation: None,
            }));
            let _ = engine.release_guard(guard).await;
        }
    });
    let violation = sim.world().history.violation(Time::MAX);
    seen.take().map(|s| SlowGuard { violation, ..s })
}

/// What [`guards_renewed_in_one_round_on_native_nodes`] saw: each guard's renewals, the native `SET IFEQ`s the
/// nodes ran, and the checker's verdict.
#[derive(Debug)]
pub struct Together {
    pub renewals: [u64; 2],
    pub native_calls: u64,
    pub violation: Option<String>,
}

/// Client 0 holds `r0` and `r1` under two guards (TTL 1 s) on three nodes whose servers have `SET IFEQ`, and
/// renews both in one round, three times: every node is sent the two renewals as `SET IFEQ`s in one request, and
/// each renewal's outcome must be read as the native command's (`+OK`), the second as well as the first.
pub fn guards_renewed_in_one_round_on_native_nodes() -> Together {
    let sim = super::directed_world(3, 1);
    {
        let mut w = sim.world();
        for n in 0..3 {
            w.nodes[n].node.native = Native::DelIfEq;
            w.fix_link(0, n, MS / 10);
        }
    }
    let seen = Rc::new(Cell::new([0, 0]));
    super::run(&sim, |nodes, clock| {
        let seen = Rc::clone(&seen);
        async move {
            let config = Config::default()
                .with_retry_count(0)
                .with_restart_guard(false);
            let Ok(engine) = Engine::new(nodes, clock, config, [1; 32]) else {
                return;
            };
            let ttl = Duration::from_millis(1_000);
            let (Ok(Some(a)), Ok(Some(b))) = (
                engine.try_lock(b"r0", ttl).await,
                engine.try_lock(b"r1", ttl).await,
            ) else {
                return;
            };
            let (mut a, mut b) = (engine.guard(a, ttl, None), engine.guard(b, ttl, None));
            for _ in 0..3 {
                engine.clock().sleep(Duration::from_millis(100)).await;
                engine.renew_guards(&mut [&mut a, &mut b]).await;
            }
            seen.set([a.renewals(), b.renewals()]);
            let _ = engine.release_guard(a).await;
            let _ = engine.release_guard(b).await;
        }
    });
    let w = sim.world();
    Together {
        renewals: seen.get(),
        native_calls: w.nodes.iter().map(|n| n.node.native_calls).sum(),
        violation: w.history.violation(Time::MAX),
    }
}
