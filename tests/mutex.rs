//! Mutual exclusion under faults: workers in several threads, managers and processes compete for a few resources
//! while real redis-server nodes are killed, restarted, paused; the checker must find no overlapping holds and no
//! concurrent writers, except where safety is broken on purpose.
//!
//! Each scenario runs for `MUXLOCK_FAULT_SECS` seconds (default 3; CI runs the default) and prints one line of
//! counts; dated runs are kept in `benchmarks/results/`, and RELIABILITY.md's fault matrix names each test.
//!
//! Every fault scenario (1) holds long enough for its faults to meet the holds, (2) asserts that the faults struck
//! lock rounds (the managers' own counters, [`Struck`], not only the proxy's or the cluster's), and (3) has a
//! control: the same faults with the scenario's protection removed (restart guard off, restarts not delayed,
//! nodes that forget, no watchdog, holders that ignore their lease's end), or where the faults take away no
//! protection the lock has (node pauses, network faults, mixed faults, several processes) with the lock itself
//! broken (managers that share no majority), which must see the hazard. The cluster members' random mixes
//! have none yet (RELIABILITY.md's table says which scenarios have which). Kinds other than a plain lock are in `mutex/kinds.rs`
//! (batches, guards), `mutex/sets.rs` (sets, fenced locks) `mutex/semaphores.rs` (permits, counted per name) and `mutex/rwlocks.rs` (readers and writers, counted per access); cluster members in `mutex/clusters.rs`
//! (their other kinds in `mutex/cluster_kinds.rs`).

#[path = "mutex/clocks.rs"]
mod clocks;
#[path = "mutex/cluster_clocks.rs"]
mod cluster_clocks;
#[path = "mutex/clusters.rs"]
mod clusters;
#[path = "mutex/extensions.rs"]
mod extensions;
#[path = "mutex/kinds.rs"]
mod kinds;
#[path = "mutex/rwlocks.rs"]
mod rwlocks;
#[path = "mutex/semaphores.rs"]
mod semaphores;
#[path = "mutex/sets.rs"]
mod sets;
mod support;
#[path = "mutex/waiting.rs"]
mod waiting;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::redlock::{Config, LockManager};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use support::checker::{
    Entry, FreezeMonitor, Hold, Recorder, Stats, Work, Writers, guard_worker, mono_ns, overlaps,
    report, worker,
};
use support::faults::{self, Burst, Struck};
use support::proxy::{Fault, FaultProxy};
use support::{Cluster, RedisServer};

fn seconds() -> Duration {
    let secs = std::env::var("MUXLOCK_FAULT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

fn config(restart_guard: bool) -> Config {
    Config::default()
        .with_retry_count(3)
        .with_retry_delay(Duration::from_millis(5))
        .with_retry_jitter(Duration::from_millis(5))
        .with_round_timeout(Duration::from_millis(50))
        .with_restart_guard(restart_guard)
}

fn managers(urls: &[String], config: &Config, n: usize) -> Vec<Arc<LockManager>> {
    (0..n)
        .map(|_| Arc::new(support::locks::manager(urls.to_vec(), config.clone())))
        .collect()
}

/// Waits (bounded) until `locks` can take a lock: fresh nodes are not trusted by the restart guard at first.
#[track_caller]
fn wait_until_usable(locks: &LockManager, ttl: Duration) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        match locks.request("warm-up").ttl(ttl).once().acquire() {
            Ok(lock) => {
                let _ = locks.unlock(lock);
                return;
            }
            Err(_) => assert!(Instant::now() < until, "the nodes never became usable"),
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `threads` workers per manager for `work.until`, while `inject` runs in this thread; returns the holds.
fn run(
    scenario: &str,
    locks: &[Arc<LockManager>],
    threads: usize,
    work: &Work,
    protected: &RedisServer,
    inject: impl FnOnce(),
) -> (Arc<Stats>, Vec<Hold>, Vec<(Hold, Hold)>) {
    run_with(scenario, locks, threads, work, protected, inject, worker)
}

/// One worker's loop: [`worker`] or another of its shape.
type WorkerFn = fn(&str, &LockManager, &Work, std::net::SocketAddr, &Recorder, &Stats);

/// [`run`] with workers that run `each`.
fn run_with(
    scenario: &str,
    locks: &[Arc<LockManager>],
    threads: usize,
    work: &Work,
    protected: &RedisServer,
    inject: impl FnOnce(),
    each: WorkerFn,
) -> (Arc<Stats>, Vec<Hold>, Vec<(Hold, Hold)>) {
    let recorder = Recorder::default();
    let stats = Arc::new(Stats::default());
    let monitor = FreezeMonitor::start(Arc::clone(&stats));
    let handles: Vec<_> = locks
        .iter()
        .enumerate()
        .flat_map(|(m, locks)| (0..threads).map(move |t| (m, t, Arc::clone(locks))))
        .map(|(m, t, locks)| {
            let (recorder, stats, addr) = (recorder.clone(), Arc::clone(&stats), protected.addr());
            let work = Work {
                seed: work.seed + (m * 100 + t) as u64,
                // With waiting workers, every third manager takes plain locks beside them (they do not queue).
                wait: work.wait.filter(|_| m % 3 != 2),
                ..work.clone()
            };
            thread::spawn(move || {
                each(&format!("m{m}t{t}"), &locks, &work, addr, &recorder, &stats)
            })
        })
        .collect();
    inject();
    for h in handles {
        h.join().expect("worker");
    }
    drop(monitor);
    let holds = recorder.holds();
    let violations = overlaps(&holds);
    report(scenario, &stats, &holds, &violations);
    (stats, holds, violations)
}

fn work(resources: usize, ttl: Duration, secs: Duration) -> Work {
    Work {
        resources: (0..resources).map(|i| format!("res{i}")).collect(),
        ttl,
        until: Instant::now() + secs,
        max_work: Duration::from_millis(2),
        pause: None,
        seed: 7,
        wait: None,
    }
}

/// Safety: no overlapping holds, no concurrent writers, and no worker that outlived its lease unless the machine
/// froze it meanwhile.
///
/// A worker writes only with more than `max_work + 20 ms` of lease left, so one that finds its lease over when it
/// leaves lost more than 20 ms somewhere between that check and leaving: either this process was kept from running
/// (a stolen vCPU, not the lock's doing) or the lease it was given was wrong. Each overrun is recorded with its own
/// interval, and is excused only if the freeze monitor measured this process frozen for at least half that spare
/// time *within that interval* (half: the monitor samples every 1 ms and records freezes of 5 ms and more, so it
/// may see less of a freeze than the worker lost). A freeze elsewhere in the run excuses nothing: a check that
/// skipped every overrun once any freeze anywhere exceeded the margin could not fail on a busy machine.
#[track_caller]
fn assert_safe(stats: &Stats, violations: &[(Hold, Hold)]) {
    assert!(violations.is_empty(), "overlapping holds: {violations:?}");
    assert_eq!(
        Stats::get(&stats.concurrent_writers),
        0,
        "concurrent writers: {stats}"
    );
    let unexplained = stats.unexplained_overruns(SPARE / 2);
    assert!(
        unexplained.is_empty(),
        "workers overran their lease in {unexplained:?} (mono ns) with no freeze of this process measured within: \
         {stats}"
    );
    assert!(
        Stats::get(&stats.acquired) > 0,
        "no lock was ever acquired: {stats}"
    );
}

/// What a worker's margin leaves beyond its longest write ([`Work::margin`]).
const SPARE: Duration = Duration::from_millis(20);

#[test]
fn the_checker_catches_overlaps_and_only_overlaps() {
    let h = |r: &str, s, e| Hold {
        resource: r.into(),
        holder: format!("{r}{s}"),
        start: s,
        end: e,
    };
    let fine = [h("a", 0, 10), h("a", 10, 20), h("b", 5, 15), h("a", 25, 30)];
    assert!(overlaps(&fine).is_empty());
    // A long hold overlapping a later one that does not overlap its direct predecessor.
    let broken = [h("a", 0, 100), h("a", 10, 20), h("a", 30, 40), h("b", 0, 1)];
    assert_eq!(overlaps(&broken).len(), 2);
    let line = h("x", 3, 4).to_line();
    assert_eq!(Hold::from_line(&line), Some(h("x", 3, 4)));
}

/// An overrun is excused only by a freeze measured within its own interval, not by one elsewhere in the run, or
/// by its worker's own wait for a CPU within it.
#[test]
fn the_checker_excuses_an_overrun_only_by_a_freeze_or_a_wait_for_a_cpu_within_it() {
    let ms = 1_000_000;
    let stats = Stats::default();
    stats.overran((100 * ms, 150 * ms), Duration::ZERO);
    stats.overran((300 * ms, 340 * ms), Duration::ZERO);
    stats.overran((500 * ms, 600 * ms), Duration::from_millis(90));
    stats.overran((700 * ms, 800 * ms), Duration::from_millis(2));
    // A long freeze elsewhere, and one that covers most of the second overrun.
    stats
        .freezes
        .lock()
        .unwrap()
        .extend([(0, 90 * ms), (310 * ms, 330 * ms)]);
    assert_eq!(
        stats.unexplained_overruns(SPARE / 2),
        [(100 * ms, 150 * ms), (700 * ms, 800 * ms)]
    );
    assert_eq!(
        stats.frozen_during(0, 1000 * ms),
        Duration::from_millis(110)
    );
}

#[test]
fn no_faults() {
    let cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let locks = managers(&cluster.urls(), &config(true), 3);
    let ttl = Duration::from_millis(500);
    wait_until_usable(&locks[0], ttl);
    let (stats, _, violations) = run(
        "no faults",
        &locks,
        2,
        &work(3, ttl, seconds()),
        &protected,
        || {},
    );
    assert_safe(&stats, &violations);
}

/// Heavy contention on one shared manager: 64 threads, 4 resources. Most attempts find the resource held; the
/// writes must still never overlap.
#[test]
fn sixty_four_threads_contend_for_four_resources() {
    let cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let locks = managers(&cluster.urls(), &config(true), 1);
    let ttl = Duration::from_millis(500);
    wait_until_usable(&locks[0], ttl);
    let (stats, _, violations) = run(
        "contention: 64 threads, 4 resources",
        &locks,
        64,
        &work(4, ttl, seconds()),
        &protected,
        || {},
    );
    assert_safe(&stats, &violations);
}

/// What a run of [`minority_bursts`] gave.
struct BurstRun {
    stats: Arc<Stats>,
    violations: Vec<(Hold, Hold)>,
    bursts: usize,
    exposed: usize,
    struck: Struck,
}

/// Workers whose holds last long enough for a burst of restarts to meet them: up to 300 ms of a 600 ms lease (the
/// old scenario held for 2 ms against 100 ms outages, so a restart almost never met a hold).
fn long_work(resources: usize, secs: Duration) -> Work {
    Work {
        max_work: Duration::from_millis(300),
        ..work(resources, Duration::from_millis(600), secs)
    }
}

/// 3 managers × 2 workers on 5 nodes without persistence, while [`Burst`]s of minority restarts run: two
/// disjoint pairs of nodes, each down for `down`, one pair after the other, then `quiet`; for `secs`.
fn minority_bursts(
    scenario: &str,
    restart_guard: bool,
    down: Duration,
    quiet: Duration,
    (secs, wait): (Duration, Option<Duration>),
) -> BurstRun {
    let mut cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let locks = managers(&cluster.urls(), &config(restart_guard), 3);
    let w = long_work(3, Duration::ZERO);
    wait_until_usable(&locks[0], w.ttl);
    let w = Work {
        wait,
        ..long_work(3, secs)
    };
    let until = w.until;
    let mut bursts = Vec::new();
    let (stats, holds, violations) = run(scenario, &locks, 2, &w, &protected, || {
        // Let holds begin, then burst for as long as a burst still ends well inside the run (a rival must have
        // time to come after it).
        thread::sleep(Duration::from_millis(150));
        while Instant::now() + 2 * down + Duration::from_millis(400) < until {
            let (first, second) = Burst::pairs(&[0, 1, 2, 3, 4], bursts.len());
            bursts.push(Burst::run(&mut cluster, first, second, down));
            thread::sleep(quiet);
        }
    });
    let struck = Struck::of(locks.iter().map(|l| &**l));
    let exposed = faults::exposed(&holds, &bursts);
    println!(
        "  {} bursts; holds exposed to a whole burst {exposed}; {struck}",
        bursts.len()
    );
    BurstRun {
        stats,
        violations,
        bursts: bursts.len(),
        exposed,
        struck,
    }
}

/// Minority restarts with the restart guard: restarted nodes' grants do not count for a window longer than the
/// TTL, so a key wiped off 4 of 5 nodes by two minority restarts in a row is not handed out again while its holder
/// runs. Control: [`minority_restarts_with_no_protection_hand_locks_out_twice`].
#[test]
fn minority_nodes_killed_and_restarted_at_random() {
    let r = minority_bursts(
        "minority restart bursts, guard on",
        true,
        Duration::from_millis(50),
        Duration::from_millis(1200),
        (seconds(), None),
    );
    assert_safe(&r.stats, &r.violations);
    assert!(r.bursts > 0 && r.exposed > 0, "no hold met a whole burst");
    assert!(
        r.struck.failed > 0 && r.struck.quarantined > 0,
        "the restarts must fail votes and the guard must refuse restarted nodes' grants in lock rounds: {}",
        r.struck
    );
}

/// The spec's remedy alone, with muxlock's restart guard off: every killed node stays down longer than the TTL.
/// A key set on the 3 nodes left during the first outage is wiped off 2 of them by the second, but those come back
/// only after the lease ended. Control: [`minority_restarts_with_no_protection_hand_locks_out_twice`].
#[test]
fn delayed_restart_alone_keeps_safety_without_the_guard() {
    let ttl = long_work(1, Duration::ZERO).ttl;
    let r = minority_bursts(
        "minority restart bursts, restarts delayed by TTL + 200 ms, guard off",
        false,
        ttl + Duration::from_millis(200),
        Duration::from_millis(100),
        (seconds(), None),
    );
    assert_safe(&r.stats, &r.violations);
    assert!(r.bursts > 0 && r.exposed > 0, "no hold met a whole burst");
    assert!(
        r.struck.failed > 0 && r.struck.quarantined == 0,
        "the kills must fail votes in lock rounds (and nothing is quarantined, the guard is off): {}",
        r.struck
    );
}

/// The control of the two scenarios above: the same bursts with neither protection (restarts after 50 ms, guard
/// off). A lock taken before a burst is left on one node, and a rival gets the other four: the checker must see
/// it. The hazard needs a hold to span a burst while a rival tries, so a run may miss it: up to 4 runs.
#[test]
fn minority_restarts_with_no_protection_hand_locks_out_twice() {
    let secs = Duration::from_millis(2500);
    for attempt in 1..=4 {
        let r = minority_bursts(
            &format!("control: minority restart bursts, no delay, guard off (run {attempt})"),
            false,
            Duration::from_millis(50),
            Duration::from_millis(300),
            (secs, None),
        );
        assert!(r.struck.failed > 0, "{}", r.struck);
        if !r.violations.is_empty() {
            return;
        }
    }
    panic!("4 runs of minority restart bursts without protection never handed a lock out twice");
}

/// **The controls' broken configuration where the faults take no protection away** (node pauses, network faults,
/// mixed faults, several processes): `n` managers that share no majority. Manager `m` knows 3 of the 5 nodes,
/// `2m, 2m + 1, 2m + 2` (mod 5), and counts 2 of its 3 as a majority: managers 0 and 1 meet on node 2 alone, so
/// each grants what the other holds. Under the scenario's faults and workers, the checker must report it.
fn managers_without_a_shared_majority(
    urls: &[String],
    config: &Config,
    n: usize,
) -> Vec<Arc<LockManager>> {
    (0..n)
        .map(|m| {
            Arc::new(support::locks::manager(
                three_nodes(urls, m),
                config.clone(),
            ))
        })
        .collect()
}

/// The nodes manager `m` of [`managers_without_a_shared_majority`] knows.
fn three_nodes(urls: &[String], m: usize) -> Vec<String> {
    (0..3)
        .map(|i| urls[(2 * m + i) % urls.len()].clone())
        .collect()
}

/// The lock managers of a scenario: 3 over all the nodes, or for its control 3 that share no majority.
fn scenario_managers(
    urls: &[String],
    config: &Config,
    share_a_majority: bool,
) -> Vec<Arc<LockManager>> {
    match share_a_majority {
        true => managers(urls, config, 3),
        false => managers_without_a_shared_majority(urls, config, 3),
    }
}

/// What a run of a random fault scenario gave: its counts, its overlaps, what struck the managers' rounds.
struct FaultRun {
    stats: Arc<Stats>,
    violations: Vec<(Hold, Hold)>,
    struck: Struck,
}

/// Up to 2 of 5 nodes paused (SIGSTOP) for 100–500 ms at a time, then resumed, for `secs`; 3 managers × 2
/// workers, or for the control managers that share no majority.
fn paused_at_random(scenario: &str, share_a_majority: bool, secs: Duration) -> FaultRun {
    let mut cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let locks = scenario_managers(&cluster.urls(), &config(true), share_a_majority);
    let ttl = Duration::from_millis(500);
    for l in &locks {
        wait_until_usable(l, ttl);
    }
    let w = work(3, ttl, secs);
    let until = w.until;
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let (stats, _, violations) = run(scenario, &locks, 2, &w, &protected, || {
        while Instant::now() < until {
            let victims = [rng.next_u32() as usize % 5, rng.next_u32() as usize % 5];
            for &v in &victims {
                cluster.pause(v);
            }
            thread::sleep(Duration::from_millis(u64::from(100 + rng.next_u32() % 400)));
            for &v in &victims {
                cluster.resume(v);
            }
            thread::sleep(Duration::from_millis(100));
        }
    });
    let struck = Struck::of(locks.iter().map(|l| &**l));
    println!("  {struck}");
    FaultRun {
        stats,
        violations,
        struck,
    }
}

/// Control: [`nodes_paused_at_random_overlap_when_the_managers_share_no_majority`].
#[test]
fn nodes_paused_and_resumed_at_random() {
    let r = paused_at_random("pause/resume", true, seconds());
    assert_safe(&r.stats, &r.violations);
    // A paused node answers nothing: the rounds that met it ended before its replies came.
    assert!(
        r.struck.timeouts > 0 && r.struck.failed > 0,
        "no pause met a lock round: {}",
        r.struck
    );
}

/// The control of [`nodes_paused_and_resumed_at_random`]: the same pauses, managers that share no majority.
#[test]
fn nodes_paused_at_random_overlap_when_the_managers_share_no_majority() {
    let r = paused_at_random(
        "control: pause/resume, no shared majority",
        false,
        Duration::from_millis(2000),
    );
    assert!(
        r.struck.timeouts > 0 && r.struck.failed > 0,
        "no pause met a lock round: {}",
        r.struck
    );
    assert!(
        !r.violations.is_empty(),
        "managers without a shared majority never overlapped under pauses"
    );
}

/// A fault proxy in front of each of 5 nodes; up to two of them at once get one of: added latency, a black hole,
/// byte-at-a-time delivery, a reset in the middle of a reply, refused connections; for `secs`. 3 managers × 2
/// workers, or for the control managers that share no majority.
fn network_faults(scenario: &str, share_a_majority: bool, secs: Duration) -> FaultRun {
    let cluster = Cluster::start(5);
    let protected = RedisServer::start();
    // This kernel has no netem: faults are injected in user space.
    let proxies: Vec<FaultProxy> = cluster.addrs().into_iter().map(FaultProxy::start).collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let locks = scenario_managers(&urls, &config(true), share_a_majority);
    let ttl = Duration::from_millis(500);
    for l in &locks {
        wait_until_usable(l, ttl);
    }
    let w = work(3, ttl, secs);
    let until = w.until;
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let mut injected = [0u32; 5];
    let (stats, _, violations) = run(scenario, &locks, 2, &w, &protected, || {
        while Instant::now() < until {
            let victims = [rng.next_u32() as usize % 5, rng.next_u32() as usize % 5];
            for &v in &victims {
                let kind = rng.next_u32() as usize % 5;
                injected[kind] += 1;
                proxies[v].set(match kind {
                    0 => Fault::Latency(Duration::from_millis(u64::from(5 + rng.next_u32() % 40))),
                    1 => Fault::BlackHole,
                    2 => Fault::Trickle(Duration::from_millis(1)),
                    3 => Fault::ResetMidReply,
                    _ => Fault::Refuse,
                });
            }
            thread::sleep(Duration::from_millis(u64::from(150 + rng.next_u32() % 250)));
            for &v in &victims {
                proxies[v].set(Fault::None);
            }
            thread::sleep(Duration::from_millis(50));
        }
    });
    println!(
        "network faults injected: latency {}, black hole {}, trickle {}, reset {}, refuse {}",
        injected[0], injected[1], injected[2], injected[3], injected[4]
    );
    assert!(
        proxies.iter().map(|p| p.stats().resets).sum::<u64>() > 0,
        "no reset was injected"
    );
    let struck = Struck::of(locks.iter().map(|l| &**l));
    println!("  {struck}");
    FaultRun {
        stats,
        violations,
        struck,
    }
}

/// Control: [`network_faults_overlap_when_the_managers_share_no_majority`].
#[test]
fn network_faults_between_client_and_nodes() {
    let r = network_faults("network faults", true, seconds());
    assert_safe(&r.stats, &r.violations);
    // The faults must have met lock rounds, not only idle connections: votes failed, requests outlived their
    // round (latency, black hole, trickle), connections dropped (reset, refused).
    assert!(
        r.struck.failed > 0 && r.struck.timeouts > 0 && r.struck.drops > 0,
        "the network faults did not strike lock rounds: {}",
        r.struck
    );
}

/// The control of [`network_faults_between_client_and_nodes`]: the same faults, managers that share no majority.
#[test]
fn network_faults_overlap_when_the_managers_share_no_majority() {
    let r = network_faults(
        "control: network faults, no shared majority",
        false,
        Duration::from_millis(2000),
    );
    assert!(
        r.struck.failed > 0 && r.struck.drops > 0,
        "the network faults did not strike lock rounds: {}",
        r.struck
    );
    assert!(
        !r.violations.is_empty(),
        "managers without a shared majority never overlapped under network faults"
    );
}

/// When the majority restarts, relative to the wall clock's whole seconds: Redis reports its uptime as a
/// difference of whole unix seconds, so a restart just before a second ends reads as "up 1 s" a few
/// milliseconds later. The guard must not take that reading at face value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timing {
    /// Whenever the test gets there.
    Whenever,
    /// The restart ends just before a wall-clock second ends, and the contender first connects just after it.
    AcrossSecond,
}

/// Waits until the wall clock's fraction of a second is at least `frac` (within the next second).
fn sleep_until_fraction(frac: f64) {
    let now = wall_fraction();
    let wait = if now <= frac {
        frac - now
    } else {
        1.0 - now + frac
    };
    thread::sleep(Duration::from_secs_f64(wait));
}

/// The wall clock's fraction of the current second, as Redis' `time(NULL)` truncates it.
fn wall_fraction() -> f64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("wall clock after 1970");
    f64::from(since.subsec_nanos()) / 1e9
}

fn wall_second() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("wall clock after 1970")
        .as_secs()
}

/// What one majority-restart round saw.
#[derive(Debug)]
struct RestartRound {
    overlapping: usize,
    concurrent: u64,
    b_acquired: bool,
    /// For [`Timing::AcrossSecond`]: the restarts all ended in one wall-clock second and the contender
    /// connected in the next one, so the nodes reported "up 1 s" after a few milliseconds.
    across: bool,
}

/// The spec's crash-recovery hazard: a majority restarts at once without persistence while a lock is held.
/// Returns whether a second holder got the lock while the first still held it (by the checker and by the
/// protected resource).
fn majority_restart(restart_guard: bool, timing: Timing) -> RestartRound {
    let mut cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let ttl = Duration::from_millis(1500);
    let holder = managers(&cluster.urls(), &config(false), 1).remove(0);
    let recorder = Recorder::default();
    let stats = Stats::default();
    if timing == Timing::AcrossSecond {
        // A's lock, then the restarts (a few tens of milliseconds), before the second ends.
        sleep_until_fraction(0.75);
    }
    let lock = holder
        .request("res")
        .ttl(ttl)
        .acquire()
        .expect("fresh cluster, guard off");
    let a_start = mono_ns();
    let a_end = support::checker::instant_ns(lock.valid_until());
    // A writes for as long as its lease allows, in its own thread, as a careful holder would.
    let protected_addr = protected.addr();
    let stats = Arc::new(stats);
    let monitor = FreezeMonitor::start(Arc::clone(&stats));
    let a = thread::spawn(move || {
        let mut writers = Writers::connect(protected_addr);
        let alone = writers.enter("res", a_end) == Entry::Alone;
        let checked = mono_ns();
        thread::sleep(lock.validity().saturating_sub(Duration::from_millis(100)));
        writers.leave("res");
        (alone, lock.is_valid(), (checked, mono_ns()))
    });
    let restart_began = wall_second();
    for i in 0..3 {
        cluster.kill(i);
    }
    for i in 0..3 {
        cluster.restart(i);
    }
    let restart_ended = wall_second();
    if timing == Timing::AcrossSecond {
        sleep_until_fraction(0.005);
    }
    let b_connected = wall_second();
    let contender = managers(
        &cluster.urls(),
        &config(restart_guard).with_retry_count(0),
        1,
    )
    .remove(0);
    let until = Instant::now() + ttl + Duration::from_secs(6);
    let mut b_acquired = false;
    let mut b_after_a = None;
    while Instant::now() < until {
        if let Ok(b) = contender.request("res").ttl(ttl).once().acquire() {
            let b_start = mono_ns();
            b_after_a = Some((b_start as i64 - a_end as i64) / 1_000_000);
            let mut writers = Writers::connect(protected.addr());
            match writers.enter("res", support::checker::instant_ns(b.valid_until())) {
                Entry::Alone => {}
                Entry::WithOverrunner => {
                    stats
                        .entered_with_overrunner
                        .fetch_add(1, Ordering::Relaxed);
                }
                Entry::WithHolder => {
                    stats.concurrent_writers.fetch_add(1, Ordering::Relaxed);
                }
            }
            writers.leave("res");
            let b_end = mono_ns().min(support::checker::instant_ns(b.valid_until()));
            recorder.record(Hold {
                resource: "res".into(),
                holder: "B".into(),
                start: b_start,
                end: b_end,
            });
            b_acquired = true;
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let (alone, in_time, (checked, left)) = a.join().expect("holder A");
    drop(monitor);
    assert!(alone, "A found a writer when it entered");
    // A left 100 ms of its lease: only a freeze of this process within A's own section excuses an overrun.
    let froze = stats.frozen_during(checked, left);
    assert!(
        in_time || froze >= Duration::from_millis(50),
        "A left its protected section after its lease, though this process froze only {froze:?} meanwhile"
    );
    recorder.record(Hold {
        resource: "res".into(),
        holder: "A".into(),
        start: a_start,
        end: a_end,
    });
    let holds = recorder.holds();
    let violations = overlaps(&holds);
    let across = restart_began == restart_ended && b_connected == restart_ended + 1;
    let name = format!(
        "majority restart ({timing:?}{}), guard {}",
        if timing == Timing::AcrossSecond && !across {
            ", missed the second"
        } else {
            ""
        },
        if restart_guard { "on" } else { "off" }
    );
    report(&name, &stats, &holds, &violations);
    match b_after_a {
        Some(ms) => println!("  B got the lock {ms:+} ms after A's lease ended"),
        None => println!("  B never got the lock"),
    }
    RestartRound {
        overlapping: violations.len(),
        concurrent: Stats::get(&stats.concurrent_writers),
        b_acquired,
        across,
    }
}

#[test]
fn a_majority_restart_breaks_safety_without_the_guard_and_the_checker_sees_it() {
    let round = majority_restart(false, Timing::Whenever);
    assert!(round.b_acquired, "the second client never got the lock");
    assert_eq!(round.overlapping, 1, "the checker must report the overlap");
    assert_eq!(
        round.concurrent, 1,
        "the protected resource must see two writers"
    );
}

/// Rounds timed across a wall-clock second, where Redis' whole-second uptime reads 1 a few milliseconds after
/// the restart (the guard once trusted such a node up to a second early), and one round timed at random.
#[test]
fn a_majority_restart_is_safe_with_the_restart_guard() {
    let mut across = 0;
    for timing in [
        Timing::AcrossSecond,
        Timing::AcrossSecond,
        Timing::AcrossSecond,
        Timing::Whenever,
    ] {
        let round = majority_restart(true, timing);
        assert_eq!((round.overlapping, round.concurrent), (0, 0), "{timing:?}");
        assert!(
            round.b_acquired,
            "the second client must get the lock once the first expired and the window passed"
        );
        across += usize::from(round.across);
    }
    // The rounds can miss their second on a loaded machine; at least one must have hit it, or this test would
    // stop checking what it is for without saying so.
    assert!(
        across >= 1,
        "no round restarted the majority just before a second ended"
    );
}

/// What one "persistent majority loses its files" round saw.
#[derive(Debug)]
struct LostFiles {
    overlapping: usize,
    concurrent: u64,
    /// B's attempts refused because a node's grant was not counted (the guard at work).
    quarantined: usize,
    b_acquired: bool,
}

/// Nodes that persist every write (`appendfsync always`), provisioned and so trusted at once, lose their
/// files (an ephemeral disk) while A holds a lock: a majority restarts empty. A writes to the protected resource for
/// its whole lease; B, a fresh client, tries until it gets the lock. With the guard, B must wait for the new
/// markers (or processes) to be a window old, by which time A's lease is over; without it (the control), B gets
/// the lock at once and the checker must see the overlap.
fn persistent_majority_loses_its_files(restart_guard: bool) -> LostFiles {
    let mut cluster = Cluster::builder(3)
        .server(RedisServer::builder().persist_every_write())
        .start();
    support::locks::provision_marker(&cluster);
    let protected = RedisServer::start();
    let ttl = Duration::from_millis(2000);
    let holder = managers(&cluster.urls(), &config(true), 1).remove(0);
    let lock = holder
        .request("res")
        .ttl(ttl)
        .acquire()
        .expect("provisioned persistent nodes: trusted at once");
    let (a_start, a_end) = (mono_ns(), support::checker::instant_ns(lock.valid_until()));
    let stats = Arc::new(Stats::default());
    let monitor = FreezeMonitor::start(Arc::clone(&stats));
    let protected_addr = protected.addr();
    let a = thread::spawn(move || {
        let mut writers = Writers::connect(protected_addr);
        let alone = writers.enter("res", a_end) == Entry::Alone;
        thread::sleep(lock.validity().saturating_sub(Duration::from_millis(100)));
        writers.leave("res");
        alone
    });
    for i in 0..2 {
        cluster.restart_without_files(i);
    }
    let contender = managers(
        &cluster.urls(),
        &config(restart_guard)
            .with_retry_count(0)
            .with_restart_window(ttl),
        1,
    )
    .remove(0);
    let recorder = Recorder::default();
    let (mut b_acquired, mut quarantined) = (false, 0);
    let until = Instant::now() + ttl * 2 + Duration::from_secs(6);
    while Instant::now() < until {
        match contender.request("res").ttl(ttl).once().acquire() {
            Ok(b) => {
                let b_start = mono_ns();
                let mut writers = Writers::connect(protected.addr());
                match writers.enter("res", support::checker::instant_ns(b.valid_until())) {
                    Entry::Alone => {}
                    Entry::WithOverrunner => {
                        stats
                            .entered_with_overrunner
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Entry::WithHolder => {
                        stats.concurrent_writers.fetch_add(1, Ordering::Relaxed);
                    }
                }
                writers.leave("res");
                let b_end = mono_ns().min(support::checker::instant_ns(b.valid_until()));
                recorder.record(Hold {
                    resource: "res".into(),
                    holder: "B".into(),
                    start: b_start,
                    end: b_end,
                });
                b_acquired = true;
                break;
            }
            Err(e) if e.is_held() => {}
            Err(e) => {
                quarantined += usize::from(e.report().is_some_and(|r| {
                    r.nodes()
                        .iter()
                        .any(|(_, o)| *o == muxlock::redlock::Outcome::Quarantined)
                }));
            }
        }
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        a.join().expect("holder A"),
        "A found a writer when it entered"
    );
    drop(monitor);
    recorder.record(Hold {
        resource: "res".into(),
        holder: "A".into(),
        start: a_start,
        end: a_end,
    });
    let holds = recorder.holds();
    let violations = overlaps(&holds);
    let name = format!(
        "persistent majority loses its files, guard {}",
        if restart_guard { "on" } else { "off" }
    );
    report(&name, &stats, &holds, &violations);
    LostFiles {
        overlapping: violations.len(),
        concurrent: Stats::get(&stats.concurrent_writers),
        quarantined,
        b_acquired,
    }
}

#[test]
fn persistent_nodes_that_lose_their_files_keep_safety_with_the_guard() {
    let round = persistent_majority_loses_its_files(true);
    assert_eq!((round.overlapping, round.concurrent), (0, 0), "{round:?}");
    assert!(
        round.quarantined > 0,
        "the restarts must have struck B's attempts: {round:?}"
    );
    assert!(
        round.b_acquired,
        "B must get the lock once the window passed"
    );
}

#[test]
fn persistent_nodes_that_lose_their_files_break_safety_without_the_guard() {
    let round = persistent_majority_loses_its_files(false);
    assert!(round.b_acquired, "{round:?}");
    assert_eq!(round.overlapping, 1, "the checker must report the overlap");
    assert_eq!(
        round.concurrent, 1,
        "the protected resource must see two writers"
    );
}

#[test]
fn holders_paused_past_their_lease_lose_it_before_the_next_holder_comes() {
    let cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let locks = managers(&cluster.urls(), &config(true), 2);
    let ttl = Duration::from_millis(200);
    for l in &locks {
        wait_until_usable(l, ttl);
    }
    // Targeted: a holder sleeps past its TTL (a GC pause); another takes the lock meanwhile.
    let paused = locks[0].request("gc").ttl(ttl).acquire().expect("lock");
    let paused_end = support::checker::instant_ns(paused.valid_until());
    thread::sleep(ttl + Duration::from_millis(100));
    assert!(
        !paused.is_valid(),
        "a holder that slept past its TTL must see its lock invalid"
    );
    let next = locks[1]
        .request("gc")
        .ttl(ttl)
        .acquire()
        .expect("expired, so free");
    assert!(
        mono_ns() > paused_end,
        "the next holder came after the pause's lease ended"
    );
    let err = locks[0].unlock(paused).unwrap_err();
    assert!(
        matches!(&err, muxlock::Error::LockLost(r) if r.granted() == 0),
        "the paused holder deletes nothing, and hears its lock was lost: {err}"
    );
    assert!(locks[1].unlock(next).expect("release") >= 2);
    // And at random, under contention: every third hold pauses for 1.5 TTL before writing.
    let w = Work {
        pause: Some((3, ttl.mul_f64(1.5))),
        ..work(2, ttl, seconds())
    };
    let (stats, _, violations) = run("GC pauses past the TTL", &locks, 2, &w, &protected, || {});
    assert_safe(&stats, &violations);
    assert!(
        Stats::get(&stats.expired_unused) > 0,
        "no pause outlived its lease: {stats}"
    );
}

/// The control of the random GC pauses above: the same pauses, taken by careless holders
/// ([`support::checker::heedless_worker`]: they write after the pause whatever their lease has left, and take
/// themselves for the holder until they release). The checker must report their holds overlapping the next
/// holder's.
#[test]
fn heedless_holders_paused_past_their_lease_overlap_the_next_holder() {
    let cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let locks = managers(&cluster.urls(), &config(true), 2);
    let ttl = Duration::from_millis(200);
    wait_until_usable(&locks[0], ttl);
    let w = Work {
        pause: Some((3, ttl.mul_f64(1.5))),
        ..work(2, ttl, Duration::from_millis(2000))
    };
    let (_, _, violations) = run_with(
        "control: GC pauses past the TTL, heedless holders",
        &locks,
        2,
        &w,
        &protected,
        || {},
        support::checker::heedless_worker,
    );
    assert!(
        !violations.is_empty(),
        "holders that wrote after pausing past their lease never overlapped the next holder"
    );
}

const CHILD_ENV: &str = "MUXLOCK_CHECKER_CHILD";

/// What the child processes of [`processes`] reported.
struct ProcessRun {
    holds: Vec<Hold>,
    acquired: u64,
    concurrent: u64,
}

/// Runs 3 child processes of this test binary, each the test `test` with [`CHILD_ENV`] set: each takes locks
/// with its own manager and 2 threads for `secs` and prints its holds. `share_a_majority: false` gives child
/// `i` a manager over nodes `2i..2i+2` (mod 5) only (the control: see [`managers_without_a_shared_majority`]).
fn processes(test: &str, share_a_majority: bool, secs: Duration) -> ProcessRun {
    let cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let spec = format!(
        "{}|{}|{}",
        cluster.urls().join(","),
        protected.addr(),
        secs.as_secs_f64()
    );
    let exe = std::env::current_exe().expect("test binary");
    let mut children: Vec<_> = (0..3)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", test, "--nocapture", "--test-threads=1"])
                .env(
                    CHILD_ENV,
                    format!(
                        "{spec}|p{i}|{}",
                        if share_a_majority { "all" } else { "three" }
                    ),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    let mut run = ProcessRun {
        holds: Vec::new(),
        acquired: 0,
        concurrent: 0,
    };
    for child in &mut children {
        let out = child.stdout.take().expect("stdout");
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            // The test harness may print its own words in front of a line.
            if let Some(h) = line.find("HOLD ").and_then(|i| Hold::from_line(&line[i..])) {
                run.holds.push(h);
            } else if let Some(rest) = line.find("STATS ").map(|i| &line[i + 6..]) {
                let n: Vec<u64> = rest.split(' ').filter_map(|x| x.parse().ok()).collect();
                run.acquired += n[0];
                run.concurrent += n[1];
            }
        }
    }
    let deadline = Instant::now() + secs + Duration::from_secs(30);
    for mut child in children {
        loop {
            match child.try_wait().expect("wait") {
                Some(status) => {
                    assert!(status.success(), "a child failed: {status}");
                    break;
                }
                None if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("a child did not finish in time");
                }
                None => thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    run
}

/// Several OS processes, each with its own manager and threads. The same test function is the parent or, when
/// started with `MUXLOCK_CHECKER_CHILD`, a child that prints its holds on stdout. Control:
/// [`several_processes_overlap_when_they_share_no_majority`].
#[test]
fn several_processes_never_overlap() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    let run = processes("several_processes_never_overlap", true, seconds());
    let violations = overlaps(&run.holds);
    println!(
        "3 processes: {} holds, acquired {}, concurrent writers {}",
        run.holds.len(),
        run.acquired,
        run.concurrent
    );
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(run.concurrent, 0);
    assert!(run.acquired > 0 && run.holds.len() as u64 == run.acquired);
    let holders: std::collections::HashSet<_> = run.holds.iter().map(|h| &h.holder[..2]).collect();
    assert_eq!(
        holders.len(),
        3,
        "every process held the lock at some point"
    );
}

/// The control of [`several_processes_never_overlap`]: each process's manager knows another 3 of the 5 nodes.
/// Holds reported by two different processes must be found overlapping (the checker reads them across
/// processes, on one clock).
#[test]
fn several_processes_overlap_when_they_share_no_majority() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    let run = processes(
        "several_processes_overlap_when_they_share_no_majority",
        false,
        Duration::from_millis(2000),
    );
    let violations = overlaps(&run.holds);
    println!(
        "control: 3 processes, no shared majority: {} holds, concurrent writers {}, overlapping holds {}",
        run.holds.len(),
        run.concurrent,
        violations.len()
    );
    assert!(
        violations
            .iter()
            .any(|(a, b)| a.holder[..2] != b.holder[..2]),
        "no two processes' holds overlapped: {violations:?}"
    );
}

fn child(spec: &str) {
    let parts: Vec<&str> = spec.split('|').collect();
    let urls: Vec<String> = parts[0].split(',').map(str::to_owned).collect();
    let protected: std::net::SocketAddr = parts[1].parse().expect("addr");
    let secs = Duration::from_secs_f64(parts[2].parse().expect("secs"));
    let name = parts[3];
    let locks = match parts.get(4) {
        Some(&"three") => {
            let i: usize = name[1..].parse().expect("p<i>");
            managers(&three_nodes(&urls, i), &config(true), 1).remove(0)
        }
        _ => managers(&urls, &config(true), 1).remove(0),
    };
    let stats = Arc::new(Stats::default());
    let recorder = Recorder::default();
    // The restart guard does not trust freshly started nodes for their first window: wait it out first.
    wait_until_usable(&locks, Duration::from_millis(300));
    let w = work(2, Duration::from_millis(300), secs);
    thread::scope(|s| {
        for t in 0..2 {
            let (locks, stats, recorder, w) = (&locks, &stats, &recorder, &w);
            s.spawn(move || {
                let w = Work {
                    seed: t,
                    ..w.clone()
                };
                worker(
                    &format!("{name}t{t}"),
                    locks,
                    &w,
                    protected,
                    recorder,
                    stats,
                )
            });
        }
    });
    for h in recorder.holds() {
        println!("{}", h.to_line());
    }
    println!(
        "STATS {} {}",
        Stats::get(&stats.acquired),
        Stats::get(&stats.concurrent_writers)
    );
}

const GUARD_CHILD_ENV: &str = "MUXLOCK_GUARD_CHECKER_CHILD";

/// What [`stopped_guard_processes`] saw: the children's holds and counts, and how often it stopped one.
struct GuardRun {
    holds: Vec<Hold>,
    acquired: u64,
    concurrent: u64,
    lost_seen: u64,
    stops: u32,
}

/// Holders under guards in 3 child processes (the test `test` with [`GUARD_CHILD_ENV`] set; `heed: false` runs
/// [`support::checker::heedless_guard_worker`]s, the control), while this process stops them (SIGSTOP) for
/// longer than the TTL: first all three for 1 s, then one at a time, for `secs`.
fn stopped_guard_processes(test: &str, heed: bool, secs: Duration) -> GuardRun {
    let cluster = Cluster::start(3);
    let protected = RedisServer::start();
    let spec = format!(
        "{}|{}|{}",
        cluster.urls().join(","),
        protected.addr(),
        secs.as_secs_f64()
    );
    let exe = std::env::current_exe().expect("test binary");
    let mut children: Vec<_> = (0..3)
        .map(|i| {
            Command::new(&exe)
                .args(["--exact", test, "--nocapture", "--test-threads=1"])
                .env(
                    GUARD_CHILD_ENV,
                    format!("{spec}|g{i}|{}", if heed { "heed" } else { "heedless" }),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    let pids: Vec<u32> = children.iter().map(std::process::Child::id).collect();
    // Read the children's output meanwhile (a full pipe would block them).
    let readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let out = c.stdout.take().expect("stdout");
            thread::spawn(move || {
                BufReader::new(out)
                    .lines()
                    .map_while(Result::ok)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let until = Instant::now() + secs;
    let mut stops = 0u32;
    thread::sleep(Duration::from_millis(300));
    // First all three at once for longer than the TTL (400 ms): whatever guards they hold surely expire. Then one
    // at a time, longer than the TTL or not, while the others take its locks.
    for pid in &pids {
        support::process::signal(*pid, "STOP");
    }
    thread::sleep(Duration::from_millis(1000));
    for pid in &pids {
        support::process::signal(*pid, "CONT");
    }
    stops += 1;
    while Instant::now() + Duration::from_millis(1200) < until {
        thread::sleep(Duration::from_millis(100 + u64::from(rng.next_u32() % 200)));
        let pid = pids[(rng.next_u32() % 3) as usize];
        support::process::signal(pid, "STOP");
        stops += 1;
        thread::sleep(Duration::from_millis(100 + u64::from(rng.next_u32() % 800)));
        support::process::signal(pid, "CONT");
    }
    let mut holds = Vec::new();
    let (mut acquired, mut concurrent, mut lost_seen) = (0, 0, 0);
    for reader in readers {
        for line in reader.join().expect("reader") {
            if let Some(h) = line.find("HOLD ").and_then(|i| Hold::from_line(&line[i..])) {
                holds.push(h);
            } else if let Some(rest) = line.find("STATS ").map(|i| &line[i + 6..]) {
                let n: Vec<u64> = rest.split(' ').filter_map(|x| x.parse().ok()).collect();
                acquired += n[0];
                concurrent += n[1];
                lost_seen += n[2];
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for mut child in children {
        loop {
            match child.try_wait().expect("wait") {
                Some(status) => {
                    assert!(status.success(), "a child failed: {status}");
                    break;
                }
                None if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("a child did not finish in time");
                }
                None => thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    GuardRun {
        holds,
        acquired,
        concurrent,
        lost_seen,
        stops,
    }
}

/// Holders under guards in 3 processes, while the parent stops one of them (SIGSTOP) now and then for longer than
/// the TTL: a stopped process's guards expire and others take the locks; when it runs again, its workers must see
/// their guards lost before their next step. The checker must find no overlapping holds and no writer beside a
/// holder whose lease runs (a writer stopped in the middle of a step overruns its lease; that is counted apart).
/// Control: [`heedless_guards_of_stopped_processes_overlap_the_next_holder`].
#[test]
fn guards_of_stopped_processes_are_lost_before_the_next_holder_comes() {
    if let Ok(spec) = std::env::var(GUARD_CHILD_ENV) {
        return guard_child(&spec);
    }
    let r = stopped_guard_processes(
        "guards_of_stopped_processes_are_lost_before_the_next_holder_comes",
        true,
        seconds(),
    );
    let violations = overlaps(&r.holds);
    println!(
        "guards, 3 processes stopped {} times: {} holds, acquired {}, guards seen lost before a step {}, \
         concurrent writers {}, overlapping holds {}",
        r.stops,
        r.holds.len(),
        r.acquired,
        r.lost_seen,
        r.concurrent,
        violations.len()
    );
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(r.concurrent, 0);
    assert!(r.acquired > 0 && r.holds.len() as u64 == r.acquired);
    assert!(r.stops > 0 && r.lost_seen > 0, "no stop outlasted a guard");
}

/// The control of [`guards_of_stopped_processes_are_lost_before_the_next_holder_comes`]: the same stops, with
/// holders that go on with their steps when their guard is lost. The checker must report their holds
/// overlapping the next holder's.
#[test]
fn heedless_guards_of_stopped_processes_overlap_the_next_holder() {
    if let Ok(spec) = std::env::var(GUARD_CHILD_ENV) {
        return guard_child(&spec);
    }
    let r = stopped_guard_processes(
        "heedless_guards_of_stopped_processes_overlap_the_next_holder",
        false,
        Duration::from_millis(2500),
    );
    let violations = overlaps(&r.holds);
    println!(
        "control: heedless guards, 3 processes stopped {} times: {} holds, guards lost {}, concurrent writers {}, \
         overlapping holds {}",
        r.stops,
        r.holds.len(),
        r.lost_seen,
        r.concurrent,
        violations.len()
    );
    assert!(r.lost_seen > 0, "no stop outlasted a guard");
    assert!(
        !violations.is_empty(),
        "holders that went on after losing their guard never overlapped the next holder"
    );
}

fn guard_child(spec: &str) {
    let parts: Vec<&str> = spec.split('|').collect();
    let urls: Vec<String> = parts[0].split(',').map(str::to_owned).collect();
    let protected: std::net::SocketAddr = parts[1].parse().expect("addr");
    let secs = Duration::from_secs_f64(parts[2].parse().expect("secs"));
    let name = parts[3];
    let heed = parts.get(4) != Some(&"heedless");
    let locks = managers(&urls, &config(false), 1).remove(0);
    let stats = Arc::new(Stats::default());
    let recorder = Recorder::default();
    let w = Work {
        max_work: Duration::from_millis(5),
        ..work(2, Duration::from_millis(400), secs)
    };
    thread::scope(|s| {
        for t in 0..2 {
            let (locks, stats, recorder, w) = (&locks, &stats, &recorder, &w);
            s.spawn(move || {
                let w = Work {
                    seed: t + 100 * u64::from(name.as_bytes()[1]),
                    ..w.clone()
                };
                let each = match heed {
                    true => guard_worker,
                    false => support::checker::heedless_guard_worker,
                };
                each(
                    &format!("{name}t{t}"),
                    locks,
                    (&w, 200),
                    protected,
                    recorder,
                    stats,
                )
            });
        }
    });
    for h in recorder.holds() {
        println!("{}", h.to_line());
    }
    println!(
        "STATS {} {} {}",
        Stats::get(&stats.acquired),
        Stats::get(&stats.concurrent_writers),
        Stats::get(&stats.expired_unused)
    );
}
