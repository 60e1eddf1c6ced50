//! Deterministic simulation of the lock engine (issue #22, first stage): many clients run the real engine's
//! verbs through the seam against simulated nodes with faults chosen by a seed, on a virtual clock, and a checker
//! judges each history (see `tests/sim/`).
//!
//! - `MUXLOCK_SIM_SEED=S` replays exactly the history of seed `S` (and prints it);
//! - `MUXLOCK_SIM_SEEDS=N` runs seeds `0..N` (default: a bounded number for CI);
//! - `MUXLOCK_SIM_CONTROL=unattributed` releases reentrant holds with issue #20's unattributed script: the
//!   checker must then find two holders (`control_unattributed_release_is_caught` does it by itself).
//!
//! Needs the `sim` feature: `cargo test --features sim --test simulation`.

mod sim;

use std::sync::Arc;
use std::time::{Duration, Instant};

use muxlock::Config;
use muxlock::redlock::sim::{Clock, Engine};

use sim::check::Hold;
use sim::node::{MS, Time};
use sim::{Rng, Setup, Sim, SimClock, SimNodes, Struck};

/// Seeds run by default (CI): about 20 s in debug on 2 vCPUs.
const DEFAULT_SEEDS: u64 = 200;

/// Virtual time each client works for.
const HORIZON: Time = 8_000 * MS;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// What one client does: a random mix of every engine-level verb on a few contended resources.
fn client(nodes: SimNodes, clock: SimClock, seed: u64, unattributed: bool) {
    let sim = Arc::clone(clock.sim());
    let me = clock.me();
    let config = Config::default()
        .with_retry_count(2)
        .with_restart_window(Duration::from_millis(2_500));
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8] = me as u8;
    let Ok(engine) = Engine::new(nodes, clock, config, key) else {
        return;
    };
    let mut rng = Rng::new(seed ^ ((me as u64 + 1) << 40));
    let now = |sim: &Sim| sim.world().now;
    let at = |sim: &Sim, i: Instant| sim.world().time(me, i);
    let hold = |sim: &Sim, kind, resource: &[u8], holder: &[u8], until: Instant, token| {
        let mut w = sim.world();
        let (from, until) = (w.now, w.time(me, until));
        w.history.hold(Hold {
            client: me,
            kind,
            resource: resource.to_vec(),
            holder: holder.to_vec(),
            from,
            until,
            token,
        })
    };
    let end = |sim: &Sim, i: usize| {
        let mut w = sim.world();
        let t = w.now;
        w.history.end(i, t);
    };
    let extended = |sim: &Sim, i: usize, until: Instant| {
        let mut w = sim.world();
        let (t, u) = (w.now, w.time(me, until));
        w.history.extend(i, t, u);
    };
    let op = |sim: &Sim| sim.world().history.ops += 1;
    let clock = engine.clock();
    let pause = |rng: &mut Rng, ttl: Duration| {
        let ms = rng.range(0, ttl.as_millis() as u64 * 6 / 5);
        Duration::from_millis(ms)
    };
    let owner = engine.owner().ok();
    while now(&sim) < HORIZON {
        let r = format!("r{}", rng.range(0, 2));
        let ttl = Duration::from_millis(rng.range(100, 1_500));
        op(&sim);
        match rng.range(0, 6) {
            0 => {
                let got = match rng.chance(0.5) {
                    true => engine.try_lock(r.as_bytes(), ttl),
                    false => engine.lock(r.as_bytes(), ttl).map(Some),
                };
                if let Ok(Some(mut lock)) = got {
                    let i = hold(
                        &sim,
                        "lock",
                        r.as_bytes(),
                        lock.value().as_bytes(),
                        lock.valid_until(),
                        None,
                    );
                    clock.sleep(pause(&mut rng, ttl) / 2);
                    if rng.chance(0.5) {
                        op(&sim);
                        if engine.extend(&mut lock, ttl).is_ok() {
                            extended(&sim, i, lock.valid_until());
                        }
                        clock.sleep(pause(&mut rng, ttl) / 2);
                    }
                    end(&sim, i);
                    op(&sim);
                    let _ = engine.unlock(lock);
                }
            }
            1 => {
                // By value, as another process (`muxlock extend`) would: it extends what it believes it holds.
                if let Ok(Some(lock)) = engine.try_lock(r.as_bytes(), ttl) {
                    let value = lock.value().as_bytes().to_vec();
                    let i = hold(&sim, "lock", r.as_bytes(), &value, lock.valid_until(), None);
                    clock.sleep(pause(&mut rng, ttl));
                    op(&sim);
                    let still = at(&sim, lock.valid_until()) > now(&sim);
                    let mut by_value = None;
                    match engine.extend_value(r.as_bytes(), &value, ttl) {
                        Ok(until) if still => extended(&sim, i, until),
                        // Expired meanwhile, yet extended by value: a new claim from now on.
                        Ok(until) => {
                            by_value =
                                Some(hold(&sim, "by value", r.as_bytes(), &value, until, None))
                        }
                        Err(_) => {}
                    }
                    clock.sleep(pause(&mut rng, ttl) / 3);
                    end(&sim, i);
                    if let Some(j) = by_value {
                        end(&sim, j);
                    }
                    op(&sim);
                    let _ = engine.unlock_value(r.as_bytes(), &value);
                }
            }
            2 => {
                let names: Vec<String> = (0..rng.range(1, 3)).map(|k| format!("r{k}")).collect();
                let refs: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
                let mut held = Vec::new();
                let mut locks = Vec::new();
                for (name, got) in names.iter().zip(engine.try_lock_batch(&refs, ttl)) {
                    if let Ok(Some(lock)) = got {
                        held.push(hold(
                            &sim,
                            "batch",
                            name.as_bytes(),
                            lock.value().as_bytes(),
                            lock.valid_until(),
                            None,
                        ));
                        locks.push(lock);
                    }
                }
                clock.sleep(pause(&mut rng, ttl));
                held.iter().for_each(|&i| end(&sim, i));
                if !locks.is_empty() {
                    op(&sim);
                    let _ = engine.unlock_batch(locks);
                }
            }
            3 => {
                let names = [format!("r{}", rng.range(0, 1)), "r2".to_owned()];
                let refs: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
                if let Ok(Some(mut set)) = engine.lock_many(&refs, ttl, rng.chance(0.5)) {
                    let value = set.value().as_bytes().to_vec();
                    let held: Vec<usize> = names
                        .iter()
                        .map(|n| hold(&sim, "set", n.as_bytes(), &value, set.valid_until(), None))
                        .collect();
                    clock.sleep(pause(&mut rng, ttl) / 2);
                    op(&sim);
                    if engine.extend_many(&mut set, ttl).is_ok() {
                        held.iter()
                            .for_each(|&i| extended(&sim, i, set.valid_until()));
                    }
                    clock.sleep(pause(&mut rng, ttl) / 2);
                    held.iter().for_each(|&i| end(&sim, i));
                    op(&sim);
                    let _ = engine.unlock_many(set);
                }
            }
            4 => {
                if let Ok(Some(lock)) = engine.lock_fenced(r.as_bytes(), ttl, rng.chance(0.5)) {
                    let i = hold(
                        &sim,
                        "fenced",
                        r.as_bytes(),
                        lock.lock().value().as_bytes(),
                        lock.lock().valid_until(),
                        Some(lock.token()),
                    );
                    clock.sleep(pause(&mut rng, ttl));
                    end(&sim, i);
                    op(&sim);
                    let _ = engine.unlock_fenced(lock);
                }
            }
            _ => {
                let Some(owner) = &owner else { continue };
                if let Ok(outer) = engine.lock_reentrant(owner, r.as_bytes(), ttl) {
                    let who = owner.as_str().as_bytes();
                    let i = hold(
                        &sim,
                        "reentrant",
                        r.as_bytes(),
                        who,
                        outer.valid_until(),
                        None,
                    );
                    // Nested hold/release pairs: each must leave the outer hold where it is.
                    for _ in 0..rng.range(1, 4) {
                        op(&sim);
                        if let Ok(inner) = engine.lock_reentrant(owner, r.as_bytes(), ttl) {
                            clock.sleep(pause(&mut rng, ttl) / 8);
                            op(&sim);
                            let _ = engine.unlock_reentrant(&inner, unattributed);
                        }
                    }
                    // The outer hold stays ours until its validity: work on.
                    clock.sleep(pause(&mut rng, ttl) / 2);
                    end(&sim, i);
                    op(&sim);
                    let _ = engine.unlock_reentrant(&outer, unattributed);
                }
            }
        }
        clock.sleep(Duration::from_millis(rng.range(0, 30)));
    }
}

/// What a run of one seed found.
struct Run {
    violation: Option<String>,
    struck: Struck,
    ops: u64,
    history: String,
}

fn run_seed(seed: u64, unattributed: bool) -> Run {
    let mut rng = Rng::new(seed ^ 0x5EED);
    let setup = Setup {
        nodes: [3, 5][rng.range(0, 1) as usize],
        clients: rng.range(2, 5) as usize,
        horizon: HORIZON,
    };
    let config = Config::default();
    let sim = sim::world(
        seed,
        &setup,
        &muxlock::redlock::sim::setup_commands(&config),
    );
    sim::run(&sim, move |nodes, clock| {
        client(nodes, clock, seed, unattributed)
    });
    let mut w = sim.world();
    let now = w.now;
    let tokens = !w.struck.counters_lost;
    let mut violation = w.history.violation(tokens);
    if violation.is_none() {
        // Every key left behind expires by its TTL (fence counters and the marker are documented exceptions).
        for (i, n) in w.nodes.iter_mut().enumerate() {
            let keys = n.node.keys_without_expiry(now);
            if !keys.is_empty() {
                violation = Some(format!("node {i} keeps keys without expiry: {keys:?}"));
                break;
            }
        }
    }
    Run {
        violation,
        struck: w.struck.clone(),
        ops: w.history.ops,
        history: w.history.tail(80),
    }
}

fn fail(seed: u64, run: &Run) -> ! {
    panic!(
        "seed {seed}: {}\nreplay: MUXLOCK_SIM_SEED={seed} cargo test --features sim --test simulation\nlast events:\n{}",
        run.violation.as_deref().unwrap_or("?"),
        run.history
    );
}

#[test]
fn seeds_keep_every_property() {
    let unattributed = std::env::var("MUXLOCK_SIM_CONTROL").is_ok_and(|v| v == "unattributed");
    let seeds: Vec<u64> = match env_u64("MUXLOCK_SIM_SEED") {
        Some(seed) => vec![seed],
        None => (0..env_u64("MUXLOCK_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS)).collect(),
    };
    let started = Instant::now();
    let mut total = Struck::default();
    let mut ops = 0;
    for &seed in &seeds {
        let run = run_seed(seed, unattributed);
        if seeds.len() == 1 {
            println!(
                "seed {seed}: {} ops, struck {:?}\n{}",
                run.ops, run.struck, run.history
            );
        }
        if run.violation.is_some() {
            fail(seed, &run);
        }
        ops += run.ops;
        let s = &run.struck;
        total.timeouts += s.timeouts;
        total.resets_before += s.resets_before;
        total.resets_after += s.resets_after;
        total.refused += s.refused;
        total.restarts += s.restarts;
        total.noscript += s.noscript;
        total.late += s.late;
        total.pauses += s.pauses;
    }
    println!(
        "{} seeds, {ops} lock operations in {:?}; faults that struck rounds: {total:?}",
        seeds.len(),
        started.elapsed()
    );
    if seeds.len() >= 10 {
        // The faults must have struck rounds, or the run proves nothing.
        assert!(total.timeouts > 0 && total.late > 0, "{total:?}");
        assert!(
            total.resets_before > 0 && total.resets_after > 0,
            "{total:?}"
        );
        assert!(
            total.refused > 0 && total.restarts > 0 && total.noscript > 0,
            "{total:?}"
        );
    }
}

#[test]
fn one_seed_gives_one_history() {
    let a = run_seed(7, false);
    let b = run_seed(7, false);
    assert_eq!(a.ops, b.ops);
    assert_eq!(a.history, b.history);
}

/// The control: with issue #20's unattributed reentrant release, the checker must find two holders.
#[test]
#[ignore = "a search: run with --ignored to see which seed finds the bug and after how long"]
fn control_unattributed_release_is_caught() {
    let started = Instant::now();
    for seed in 0..2_000 {
        let run = run_seed(seed, true);
        if let Some(v) = run.violation.filter(|v| v.starts_with("two holders")) {
            println!("found by seed {seed} after {:?}: {v}", started.elapsed());
            return;
        }
    }
    panic!("the unattributed release was not caught in 2000 seeds");
}

/// Simulated lock operations per second of one core (timed, not asserted).
#[test]
#[ignore = "a measurement: run with --release --ignored --nocapture"]
fn bench_ops_per_second() {
    let started = Instant::now();
    let mut ops = 0;
    for seed in 0..20 {
        ops += run_seed(seed, false).ops;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{ops} simulated lock operations in {secs:.2} s: {:.0} ops/s",
        ops as f64 / secs
    );
}
