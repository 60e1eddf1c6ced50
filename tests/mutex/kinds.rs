//! The lock kinds beyond a plain lock under faults, each with a control that must see the hazard: batches
//! (`try_lock_batch` / `unlock_batch`) beside a slow node and a second thread driving the poll, and guards renewed
//! in batches while another client overwrites their keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use muxlock::redlock::{Error, LockManager};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use super::support::checker::{
    Checked, Entry, FreezeMonitor, Hold, Recorder, Stats, Work, Writers, instant_ns, mono_ns,
    overlaps, report, worker,
};
use super::support::faults::{self, Burst, Struck};
use super::support::proxy::{Fault, FaultProxy};
use super::support::wire::{cmd, roundtrip};
use super::support::{Cluster, RedisServer};
use super::{assert_safe, config, long_work, managers, seconds, wait_until_usable};

/// One batch worker: a random batch of 4 of `work.resources` at a time with `try_lock_batch`; writes to each name
/// it got while the lease has its margin left (after [`Work::pause`] if one falls on this batch), then releases
/// them with `unlock_batch`. Every name acquired is a hold of its own, `[batch returned, min(valid_until, batch
/// released)]`. Also run over cluster members (`mutex/clusters.rs`).
pub(super) fn batch_worker(
    name: &str,
    locks: &LockManager,
    work: &Work,
    protected: std::net::SocketAddr,
    recorder: &Recorder,
    stats: &Stats,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(work.seed);
    let mut writers = Writers::connect(protected);
    let mut batches = 0;
    while Instant::now() < work.until {
        let mut names = work.resources.clone();
        // A random 4 of them, in a random order.
        for i in 0..4 {
            let j = i + rng.next_u32() as usize % (names.len() - i);
            names.swap(i, j);
        }
        names.truncate(4);
        let mut got = Vec::new();
        for (r, result) in names.iter().zip(locks.try_lock_batch(&names, work.ttl)) {
            match result {
                Ok(Some(lock)) => got.push((r.clone(), lock)),
                Ok(None) => Stats::add(&stats.held),
                Err(Error::Quorum(report)) => stats.no_quorum(&report),
                Err(_) => Stats::add(&stats.other),
            }
        }
        let start = mono_ns();
        if !got.is_empty() {
            batches += 1;
            work.pause_before(batches);
        }
        let work_for = work
            .max_work
            .mul_f64(f64::from(rng.next_u32() % 1000) / 1000.0);
        let checked = Checked::now();
        let usable: Vec<bool> = got
            .iter()
            .map(|(_, l)| l.validity() > work.margin())
            .collect();
        for ((r, lock), &usable) in got.iter().zip(&usable) {
            Stats::add(&stats.acquired);
            if !usable {
                Stats::add(&stats.expired_unused);
                continue;
            }
            match writers.enter(r, instant_ns(lock.valid_until())) {
                Entry::Alone => {}
                Entry::WithOverrunner => Stats::add(&stats.entered_with_overrunner),
                Entry::WithHolder => Stats::add(&stats.concurrent_writers),
            }
        }
        thread::sleep(work_for);
        for ((r, lock), &usable) in got.iter().zip(&usable) {
            if usable {
                writers.leave(r);
                if !lock.is_valid() {
                    stats.overran_in(checked, mono_ns());
                }
            }
        }
        let end = mono_ns();
        for (r, lock) in &got {
            recorder.record(Hold {
                resource: r.clone(),
                holder: name.to_owned(),
                start,
                end: end.min(instant_ns(lock.valid_until())),
            });
        }
        let locks_got: Vec<_> = got.into_iter().map(|(_, l)| l).collect();
        if locks_got.is_empty() {
            // Nothing this time: do not spin on a node that is down.
            thread::sleep(Duration::from_millis(5));
        } else if locks.unlock_batch(locks_got).iter().any(Result::is_err) {
            Stats::add(&stats.release_failed);
        }
    }
}

/// What [`batches_round`] saw.
struct BatchRun {
    stats: Arc<Stats>,
    violations: Vec<(Hold, Hold)>,
    exposed: usize,
    struck: Struck,
    /// Requests that timed out on the slow node: its replies came after their round had ended, and were read by
    /// whichever thread drove the poll next.
    slow_timeouts: u64,
}

/// 5 nodes; node 4 behind a fault proxy whose latency straddles the round deadline (one way 15–35 ms: round trips
/// of 30–70 ms against 50 ms rounds), so its replies come now before, now after, their round ended. One manager
/// runs 2 batch workers and, on the same manager, a plain worker whose calls drive the poll while a batch waits
/// (and read the slow node's late replies); a rival manager's 2 workers hold some of the same names for up to
/// 300 ms. Meanwhile [`Burst`]s of restarts without persistence among nodes 0–3.
fn batches_round(scenario: &str, restart_guard: bool, quiet: Duration, secs: Duration) -> BatchRun {
    let mut cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let slow = FaultProxy::start(cluster.addrs()[4]);
    let mut urls = cluster.urls();
    urls[4] = slow.url();
    let locks = managers(&urls, &config(restart_guard), 2);
    let (mine, rival) = (&locks[0], &locks[1]);
    let w = long_work(6, Duration::ZERO);
    wait_until_usable(mine, w.ttl);
    wait_until_usable(rival, w.ttl);
    let w = long_work(6, secs);
    let until = w.until;
    let recorder = Recorder::default();
    let stats = Arc::new(Stats::default());
    let monitor = FreezeMonitor::start(Arc::clone(&stats));
    let mut bursts = Vec::new();
    thread::scope(|s| {
        let seeded = |seed| Work { seed, ..w.clone() };
        let (recorder, stats, addr) = (&recorder, &*stats, protected.addr());
        for t in 0..2u64 {
            let w = seeded(100 + t);
            s.spawn(move || batch_worker(&format!("batch{t}"), mine, &w, addr, recorder, stats));
            let w = seeded(200 + t);
            s.spawn(move || worker(&format!("rival{t}"), rival, &w, addr, recorder, stats));
        }
        let w = seeded(300);
        s.spawn(move || worker("driver", mine, &w, addr, recorder, stats));
        let mut rng = ChaCha8Rng::seed_from_u64(20);
        let mut next_burst = Instant::now() + Duration::from_millis(150);
        while Instant::now() < until {
            slow.set(Fault::Latency(Duration::from_millis(
                15 + u64::from(rng.next_u32() % 21),
            )));
            if Instant::now() >= next_burst && Instant::now() + Duration::from_millis(500) < until {
                let (first, second) = Burst::pairs(&[0, 1, 2, 3], bursts.len());
                bursts.push(Burst::run(
                    &mut cluster,
                    first,
                    second,
                    Duration::from_millis(50),
                ));
                next_burst = Instant::now() + quiet;
            }
            thread::sleep(Duration::from_millis(30));
        }
    });
    drop(monitor);
    let holds = recorder.holds();
    let violations = overlaps(&holds);
    report(scenario, &stats, &holds, &violations);
    let struck = Struck::of(locks.iter().map(|l| &**l));
    let slow_timeouts = mine.stats().nodes[4].net.timeouts;
    let exposed = faults::exposed(&holds, &bursts);
    println!(
        "  {} bursts; holds exposed to a whole burst {exposed}; slow node's requests timed out {slow_timeouts}; \
         {struck}",
        bursts.len()
    );
    BatchRun {
        stats,
        violations,
        exposed,
        struck,
        slow_timeouts,
    }
}

/// Batches under a slow node, a second thread driving the poll, a rival holding some names, and minority restart
/// bursts: no name is ever held twice. The batch counts every vote through the restart guard (`Engine::counted`);
/// the slow node's late replies must never be counted for another lock of the batch. Control:
/// [`batches_with_the_restart_guard_off_hand_names_out_twice`].
#[test]
fn batches_beside_a_slow_node_and_a_second_driver() {
    // The bursts fall at random: a run where no hold happened to span a whole one proves nothing either way, and
    // is run again (up to 3 runs). Every run must be safe.
    for attempt in 1..=3 {
        let r = batches_round(
            &format!("batches, slow node, minority restarts, guard on (run {attempt})"),
            true,
            Duration::from_millis(1200),
            seconds(),
        );
        assert_safe(&r.stats, &r.violations);
        if r.exposed == 0 && attempt < 3 {
            continue;
        }
        assert!(r.exposed > 0, "no hold met a whole burst in 3 runs");
        assert!(
            r.slow_timeouts > 0 && r.struck.failed > 0 && r.struck.quarantined > 0,
            "the slow node must have timed out in rounds, restarts failed votes and the guard refused grants: {}",
            r.struck
        );
        return;
    }
}

/// The control of the batch scenario: the same with the restart guard off must hand a name out twice (the
/// hazard needs a hold to span a burst while a rival tries: up to 4 runs).
#[test]
fn batches_with_the_restart_guard_off_hand_names_out_twice() {
    for attempt in 1..=4 {
        let r = batches_round(
            &format!("control: batches, slow node, minority restarts, guard off (run {attempt})"),
            false,
            Duration::from_millis(300),
            Duration::from_millis(2500),
        );
        assert!(r.struck.failed > 0, "{}", r.struck);
        // The hazard must meet a batch's hold, not only the plain workers beside it.
        let batch = |h: &Hold| h.holder.starts_with("batch");
        if r.violations.iter().any(|(a, b)| batch(a) || batch(b)) {
            return;
        }
    }
    panic!("4 runs of batches with the guard off never handed a batch's name out twice");
}

/// How long after overwriting a guard's key on a majority the overwriter's holder starts using it. The guard must
/// have reported itself lost by then: a renewal comes every TTL / 3 (300 ms) and reads the key, and client-side
/// tracking tells the watchdog at once; while its lease, as last confirmed, could run up to TTL − margin (810 ms).
const TAKEOVER: Duration = Duration::from_millis(400);
const GUARD_TTL: Duration = Duration::from_millis(900);

/// What [`overwritten_round`] saw.
struct GuardRun {
    violations: Vec<(Hold, Hold)>,
    overwrites: u64,
    seen_lost: u64,
    struck: Struck,
    renewals: (u64, u64),
}

/// 12 holders on one manager, each on a name of its own, through fault proxies (one node at a time gets 20 ms of
/// latency or a reset mid-reply); `guarded`: under guards (the watchdog renews them in batches and checks their
/// keys), else as plain locks of the same TTL (the control: nothing tells the holder of an overwrite). Another
/// client overwrites a held name on 3 of the 5 nodes every 150–250 ms, directly; its holder uses the name from
/// [`TAKEOVER`] later until its key expires. A holder's hold is `[acquired, the moment it saw the lock lost, or
/// released]`.
fn overwritten_round(scenario: &str, guarded: bool, secs: Duration) -> GuardRun {
    let cluster = Cluster::start(5);
    let proxies: Vec<FaultProxy> = cluster.addrs().into_iter().map(FaultProxy::start).collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let cfg = config(false).with_round_timeout(Duration::from_millis(100));
    let locks = managers(&urls, &cfg, 1).remove(0);
    let until = Instant::now() + secs;
    let recorder = Recorder::default();
    let (overwrites, seen_lost) = (AtomicU64::new(0), AtomicU64::new(0));
    let names: Vec<String> = (0..12).map(|i| format!("guarded{i}")).collect();
    thread::scope(|s| {
        for (i, name) in names.iter().enumerate() {
            let (locks, recorder, seen_lost) = (&locks, &recorder, &seen_lost);
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(i as u64);
                while Instant::now() < until {
                    let plan = Duration::from_millis(300 + u64::from(rng.next_u32() % 1200));
                    let (start, end) = if guarded {
                        let Ok(guard) = locks.request(name).ttl(GUARD_TTL).hold() else {
                            thread::sleep(Duration::from_millis(20));
                            continue;
                        };
                        let start = mono_ns();
                        let lost = guard.wait_lost(plan);
                        let end = mono_ns();
                        seen_lost.fetch_add(u64::from(lost), Ordering::Relaxed);
                        let _ = guard.release();
                        (start, end)
                    } else {
                        let Ok(lock) = locks.request(name).ttl(GUARD_TTL).acquire() else {
                            thread::sleep(Duration::from_millis(20));
                            continue;
                        };
                        let start = mono_ns();
                        // A plain lock learns nothing of an overwrite: it is valid to its holder until its lease
                        // ends.
                        thread::sleep(plan.min(lock.validity()));
                        let end = mono_ns().min(instant_ns(lock.valid_until()));
                        let _ = locks.unlock(lock);
                        (start, end)
                    };
                    recorder.record(Hold {
                        resource: name.clone(),
                        holder: format!("holder{i}"),
                        start,
                        end,
                    });
                }
            });
        }
        // The overwriter, straight to the nodes.
        s.spawn(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(99);
            let mut conns: Vec<_> = cluster.nodes().iter().map(RedisServer::connect).collect();
            let ttl_ms = GUARD_TTL.as_millis().to_string();
            thread::sleep(Duration::from_millis(300));
            while Instant::now() + TAKEOVER < until {
                let name = &names[rng.next_u32() as usize % names.len()];
                let skip = rng.next_u32() as usize % 5;
                let overwrite = cmd(&["SET", name, "overwriter", "PX", &ttl_ms]);
                let at = mono_ns();
                let mut wrote = 0;
                for (n, conn) in conns.iter_mut().enumerate() {
                    // 3 of 5: a majority, and not the next node in line (skip + 1) either.
                    if n == skip || n == (skip + 1) % 5 {
                        continue;
                    }
                    let deadline = Instant::now() + Duration::from_secs(5);
                    roundtrip(conn, &overwrite, 1, deadline).expect("overwrite");
                    wrote += 1;
                }
                assert_eq!(wrote, 3);
                overwrites.fetch_add(1, Ordering::Relaxed);
                // Its holder: from TAKEOVER after the overwrite until the key expires (its lease measured from
                // before the first write, less 1 % drift).
                let takeover = at + TAKEOVER.as_nanos() as u64;
                let expiry = at + GUARD_TTL.mul_f64(0.99).as_nanos() as u64;
                recorder.record(Hold {
                    resource: name.clone(),
                    holder: "overwriter".into(),
                    start: takeover,
                    end: expiry,
                });
                thread::sleep(Duration::from_millis(150 + u64::from(rng.next_u32() % 100)));
            }
        });
        // Faults on one node at a time, through its proxy.
        let mut rng = ChaCha8Rng::seed_from_u64(98);
        while Instant::now() < until {
            let p = &proxies[rng.next_u32() as usize % 5];
            p.set(match rng.next_u32() % 2 {
                0 => Fault::Latency(Duration::from_millis(20)),
                _ => Fault::ResetMidReply,
            });
            thread::sleep(Duration::from_millis(150));
            p.set(Fault::None);
        }
    });
    let holds = recorder.holds();
    let violations = overlaps(&holds);
    let stats = locks.stats();
    let struck = Struck::of([&*locks]);
    let renewals = (stats.guards.renewals, stats.guards.renewal_rounds);
    println!(
        "{scenario}: {} holds, {} overwrites, holders saw their lock lost {} times, renewals {} in {} rounds, \
         guards lost {}; {struck}; overlapping holds {}",
        holds.len(),
        overwrites.load(Ordering::Relaxed),
        seen_lost.load(Ordering::Relaxed),
        renewals.0,
        renewals.1,
        stats.guards.lost,
        violations.len()
    );
    GuardRun {
        violations,
        overwrites: overwrites.load(Ordering::Relaxed),
        seen_lost: seen_lost.load(Ordering::Relaxed),
        struck,
        renewals,
    }
}

/// Guards renewed in batches while another client overwrites their keys on a majority, beside network faults:
/// every holder must see its guard lost before the overwriter's holder starts. Control:
/// [`plain_locks_overwritten_overlap_the_overwriter`].
#[test]
fn guards_renewed_in_batches_see_overwrites_before_the_next_holder() {
    let r = overwritten_round("guards overwritten on a majority", true, seconds());
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(
        r.overwrites > 0 && r.seen_lost > 0,
        "no overwrite met a guard"
    );
    let (renewals, rounds) = r.renewals;
    assert!(
        rounds > 0 && renewals > rounds,
        "the watchdog must renew guards in batches (renewals {renewals} in {rounds} rounds)"
    );
    assert!(
        r.struck.failed > 0 && (r.struck.timeouts > 0 || r.struck.drops > 0),
        "the network faults did not strike lock rounds: {}",
        r.struck
    );
}

/// The control: the same holders on plain locks, which nothing tells of an overwrite, must overlap the
/// overwriter's holder (up to 3 runs).
#[test]
fn plain_locks_overwritten_overlap_the_overwriter() {
    for attempt in 1..=3 {
        let r = overwritten_round(
            &format!("control: plain locks overwritten on a majority (run {attempt})"),
            false,
            Duration::from_millis(1500),
        );
        if !r.violations.is_empty() {
            return;
        }
    }
    panic!("3 runs of overwritten plain locks never overlapped the overwriter's holder");
}
