//! Cluster members under faults: three members, each a Redis Cluster of three masters with a replica
//! each (node timeout 1 s, so a master down or stalled that long is replaced), while nodes are paused (late
//! replies; a master stalled past the node timeout is deposed while it holds our requests), killed and
//! restarted at once (a master back empty before anyone replaced it; one member persists every write, so its
//! nodes also come back with their data), killed long enough to be failed over (then back as replicas), their
//! clients' connections reset, and the masters of two members wiped at once (a majority's keys lost). The
//! checker must find no overlapping holds and no concurrent writers, and the managers' counters must show the
//! faults struck lock rounds. The control runs the wipe with the restart guard off: it must see two holders.
//! Batches, sets, fenced locks and reentrant holds under the same faults: `mutex/cluster_kinds.rs`.

#[path = "cluster_kinds.rs"]
mod kinds;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::redlock::{Config, LockManager};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use super::support::checker::{Hold, Recorder, Stats, Work, guard_worker, mono_ns};
use super::support::faults::Struck;
use super::support::{RedisCluster, RedisServer, RedisServerBuilder};
use super::{assert_safe, managers, run, run_with, seconds, work};

/// The scenarios here take turns: each starts 18 nodes (three members of six), and together with the rest of
/// this file's tests they would starve the 2 vCPUs of the machines this runs on.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Masters per member (automatic failover needs a majority of masters to elect a replica: 3 survive one loss).
const MASTERS: usize = 3;
/// The members' cluster node timeout: a master unreachable this long is failed over.
const NODE_TIMEOUT: Duration = Duration::from_millis(1_000);

/// The member whose nodes persist every write: a kill or wipe loses no key there.
const PERSISTENT: usize = 2;

/// Three members started at once; member [`PERSISTENT`]'s nodes persist every write (`appendfsync always`).
fn members() -> Vec<RedisCluster> {
    members_with(RedisServer::builder())
}

/// [`members`] whose replicas start a full sync from a master at once (`repl-diskless-sync-delay 0`; the servers'
/// default waits 5 s for more replicas to come), for a scenario that must show the restart guard refusing grants
/// of restarted masters. A master back without its keys starts a new replication history, so its replica syncs
/// in full, and the replication check (`WAIT`) refuses that master's grants until it has: with the default delay,
/// about 6 s after a wipe, past the restart window, so the guard never judged a grant of a restarted master.
/// With the delay off the replicas are back in step within about a second, and what keeps a forgetful master's
/// grants from counting is the guard alone.
fn members_syncing_at_once() -> Vec<RedisCluster> {
    members_with(RedisServer::builder().args(["--repl-diskless-sync-delay", "0"]))
}

fn members_with(server: RedisServerBuilder) -> Vec<RedisCluster> {
    thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let server = match i {
                    PERSISTENT => server.clone().persist_every_write(),
                    _ => server.clone(),
                };
                s.spawn(move || {
                    RedisCluster::builder(MASTERS)
                        .replicas(1)
                        .node_timeout(NODE_TIMEOUT)
                        .server(server)
                        .start()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a member"))
            .collect()
    })
}

/// The restart window of [`members_syncing_at_once`]'s scenario, longer than its 1.5 s leases: a master of a
/// cluster member back from a restart refuses every write (`CLUSTERDOWN`) for its first 2 s (the servers'
/// `CLUSTER_WRITABLE_DELAY`), and for 1.8–2.5 s after a wipe on a loaded machine, so a window of one lease ran out
/// before it granted anything. Twice the longest return seen leaves the guard seconds of grants to refuse after
/// each restart.
const RESTART_WINDOW: Duration = Duration::from_secs(5);

fn config(restart_guard: bool) -> Config {
    Config::default()
        .with_retry_count(3)
        .with_retry_delay(Duration::from_millis(5))
        .with_retry_jitter(Duration::from_millis(5))
        .with_round_timeout(Duration::from_millis(100))
        .with_restart_guard(restart_guard)
}

/// Whether node `i` of `c` says it is a master now (a node that does not answer: no).
fn is_master(c: &RedisCluster, i: usize) -> bool {
    c.node(i)
        .try_raw(&super::support::cmd(&["ROLE"]), Duration::from_millis(500))
        .is_ok_and(|r| r.starts_with(b"*3\r\n$6\r\nmaster"))
}

/// Kills the masters of members `victims` and restarts them at once: keys not persisted are gone from them
/// (member 2 persists every write), before any replica could be promoted.
fn wipe(cs: &mut [RedisCluster], victims: [usize; 2]) {
    let mut killed = Vec::new();
    for m in victims {
        let masters: Vec<usize> = (0..cs[m].len()).filter(|&i| is_master(&cs[m], i)).collect();
        for i in masters {
            cs[m].node_mut(i).kill();
            killed.push((m, i));
        }
    }
    for (m, i) in killed {
        cs[m].node_mut(i).restart();
    }
}

/// One fault of [`inject`]'s: which (its place in the schedule's cycle: [`KILLS`] stop nodes, [`WIPE`] is the
/// last), from when to when ([`mono_ns`]), and the members whose masters may have come back without their keys
/// (a node killed and back at once, or back before it was failed over, may have been one).
#[derive(Clone, Copy, Debug)]
struct Injected {
    what: usize,
    start: u64,
    end: u64,
    forgot: [bool; 3],
}

/// [`Injected::what`] of the faults that kill nodes: restarted at once, failed over, wiped.
const KILLS: [usize; 3] = [1, 2, WIPE];
/// [`Injected::what`] of a wipe of two members' masters.
const WIPE: usize = 4;

/// `MUXLOCK_FAULT_SEED`, added to every scenario's own fault seed (0 if unset): a soak run with other schedules
/// (with `MUXLOCK_FAULT_SECS` for longer ones) needs no edit.
fn seed_offset() -> u64 {
    std::env::var("MUXLOCK_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The fault schedule: one fault at a time, each kind in turn (shuffled), for `until`.
fn inject(cs: &mut [RedisCluster], until: Instant, seed: u64) -> Vec<Injected> {
    let seed = seed.wrapping_add(seed_offset());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut below = |n: u32| rng.next_u32() % n;
    let mut faults = Vec::new();
    while Instant::now() < until {
        let m = below(3) as usize;
        let i = below(cs[m].len() as u32) as usize;
        let (what, start) = (faults.len() % 5, mono_ns());
        let mut forgot = [false; 3];
        match what {
            0 => {
                // Late replies; past the node timeout, a stalled master is replaced while it holds requests.
                cs[m].node_mut(i).pause();
                thread::sleep(Duration::from_millis(u64::from(200 + below(1_600))));
                cs[m].node_mut(i).resume();
            }
            1 => {
                // Back at once: a master is still the master, without the keys it did not persist.
                cs[m].node_mut(i).kill();
                thread::sleep(Duration::from_millis(u64::from(50 + below(300))));
                cs[m].node_mut(i).restart();
                forgot[m] = m != PERSISTENT;
            }
            2 => {
                // Down past the node timeout: a master's replica takes over; the node comes back as a replica.
                cs[m].node_mut(i).kill();
                thread::sleep(NODE_TIMEOUT * 2 + Duration::from_millis(u64::from(below(1_000))));
                // A loaded machine may not have failed it over yet: a master back now is back empty.
                let masters = (0..cs[m].len()).filter(|&n| is_master(&cs[m], n)).count();
                cs[m].node_mut(i).restart();
                forgot[m] = m != PERSISTENT && masters < MASTERS;
            }
            3 => {
                // Every client connection of the member's nodes reset (ours among them).
                for n in 0..cs[m].len() {
                    let _ = cs[m].node(n).try_raw(
                        &super::support::cmd(&["CLIENT", "KILL", "TYPE", "normal"]),
                        Duration::from_millis(500),
                    );
                }
            }
            _ => {
                for v in [m, (m + 1) % 3] {
                    forgot[v] = v != PERSISTENT;
                }
                wipe(cs, [m, (m + 1) % 3]);
            }
        }
        faults.push(Injected {
            what,
            start,
            end: mono_ns(),
            forgot,
        });
        thread::sleep(Duration::from_millis(u64::from(100 + below(300))));
    }
    faults
}

/// Waits (bounded) until `locks` can take a lock on every member: the restart guard trusts nodes only once
/// they have been up a window.
fn wait_until_usable(locks: &LockManager, ttl: Duration) {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if let Ok(lock) = locks.request("warm-up").ttl(ttl).once().acquire() {
            let _ = locks.unlock(lock);
            return;
        }
        thread::sleep(Duration::from_millis(100));
    }
    panic!("the members never became usable");
}

/// Holds long enough for faults to meet them: every `every`-th hold sleeps `pause` before writing (a GC pause
/// with the lock held), then writes up to 30 ms.
fn long_holds(secs: Duration, ttl: Duration, (every, pause): (u64, Duration)) -> Work {
    Work {
        max_work: Duration::from_millis(30),
        pause: Some((every, pause)),
        ..work(4, ttl, secs)
    }
}

#[test]
fn cluster_members_killed_paused_reset_and_failed_over_at_random() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut cs = members();
    let protected = RedisServer::start();
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    let ttl = Duration::from_millis(1_500);
    let locks = managers(&urls, &config(true), 2);
    wait_until_usable(&locks[0], ttl);
    // The warm-up's votes (nodes younger than the restart window at first) are not the faults'.
    let warmed = Struck::of(locks.iter().map(|l| &**l));
    // Every kind of fault at least twice.
    let secs = seconds().max(Duration::from_secs(16));
    let w = long_holds(secs, ttl, (2, ttl / 2));
    let until = w.until;
    let mut faults = Vec::new();
    let (stats, _, violations) = run("cluster members", &locks, 2, &w, &protected, || {
        faults = inject(&mut cs, until, 11);
    });
    let struck = Struck::of(locks.iter().map(|l| &**l)).since(warmed);
    println!("  {} faults; {struck}", faults.len());
    assert_safe(&stats, &violations);
    assert!(
        struck.timeouts > 0 && struck.failed > 0 && struck.quarantined > 0 && struck.drops > 0,
        "the faults did not strike lock rounds in every way: {struck}"
    );
}

/// A guard worker of [`run_with`]'s shape: guards renewed over the members, up to 30 steps of up to 40 ms each
/// (holds of up to ~1.2 s on a 1 s TTL: they live on renewals).
fn guards(
    name: &str,
    locks: &LockManager,
    work: &Work,
    protected: std::net::SocketAddr,
    recorder: &Recorder,
    stats: &Stats,
) {
    guard_worker(name, locks, (work, 30), protected, recorder, stats);
}

/// Guards (renewal rounds, checked like acquisitions) under the same random mix of faults: no overlap, no
/// concurrent writers, and the faults struck.
#[test]
fn guards_on_cluster_members_under_the_same_faults() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut cs = members();
    let protected = RedisServer::start();
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    // A guard's TTL leaves room for renewals (at least 7 round timeouts of 100 ms).
    let ttl = Duration::from_millis(1_000);
    let locks = managers(&urls, &config(true), 2);
    wait_until_usable(&locks[0], ttl);
    let secs = seconds().max(Duration::from_secs(16));
    let w = Work {
        max_work: Duration::from_millis(40),
        ..work(3, ttl, secs)
    };
    let until = w.until;
    let mut faults = Vec::new();
    let (stats, _, violations) = run_with(
        "cluster members, guards",
        &locks,
        2,
        &w,
        &protected,
        || faults = inject(&mut cs, until, 23),
        guards,
    );
    let struck = Struck::of(locks.iter().map(|l| &**l));
    println!("  {} faults; {struck}", faults.len());
    assert_safe(&stats, &violations);
    assert!(
        struck.failed > 0 && struck.drops > 0,
        "the faults did not strike lock rounds: {struck}"
    );
}

/// Two members' masters wiped at once (killed, back empty) while one resource is held for most of an 8 s
/// lease and the other workers keep trying: runs of one wipe each, at most `runs`, until one shows two
/// holders. Returns the overlaps of the last run and what struck the managers.
fn wipes(guard: bool, runs: u64) -> (Vec<(Hold, Hold)>, Struck) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    // Replicas in step again within a second of the wipe: the guard, not the replication check, must be what
    // keeps the wiped masters' grants from counting.
    let mut cs = members_syncing_at_once();
    let protected = RedisServer::start();
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    // Leases and holds long enough to outlast the members' return after a wipe (`CLUSTERDOWN` for ~1.5 s,
    // until the restarted masters are seen again).
    let ttl = Duration::from_secs(8);
    let locks: Vec<Arc<LockManager>> = managers(&urls, &config(guard), 2);
    let mut seen = Vec::new();
    let mut warmed = None;
    for run_no in 0..runs {
        wait_until_usable(&locks[0], ttl);
        // The first warm-up's votes (fresh nodes younger than the window) are not the wipes'.
        warmed.get_or_insert_with(|| Struck::of(locks.iter().map(|l| &**l)));
        // One resource: while one worker holds it, the others keep trying.
        let w = Work {
            resources: vec!["res0".into()],
            ..long_holds(Duration::from_secs(7), ttl, (1, Duration::from_secs(6)))
        };
        let name = format!("cluster wipe, guard {guard}");
        let (stats, _, violations) = run(&name, &locks, 2, &w, &protected, || {
            // One wipe, once holds are under way; the members need a while to serve again after it.
            thread::sleep(Duration::from_millis(800 + 300 * run_no));
            wipe(&mut cs, [0, 1]);
        });
        if guard {
            assert_safe(&stats, &violations);
        }
        seen = violations;
        if !seen.is_empty() {
            break;
        }
    }
    let struck = Struck::of(locks.iter().map(|l| &**l));
    (seen, struck.since(warmed.unwrap_or_default()))
}

/// With the restart guard, the wiped masters' grants do not count for a window: nobody gets the lock while
/// its holder's lease runs.
#[test]
fn a_wipe_of_two_members_hands_no_lock_out_twice() {
    let (found, struck) = wipes(true, 1);
    assert!(found.is_empty(), "two holders: {found:?}");
    assert!(
        struck.quarantined > 0,
        "no wiped master was quarantined: {struck}"
    );
}

/// The control: the same wipe with the restart guard off. The holder's keys are gone from a majority, and a
/// rival gets them while it holds: the checker must see it. The hazard needs the hold to span the wipe: up to
/// 4 runs.
#[test]
fn control_a_wipe_of_two_members_without_the_guard_hands_a_lock_out_twice() {
    let (found, _) = wipes(false, 4);
    assert!(
        !found.is_empty(),
        "no two holders without the guard: the wipes did not strike"
    );
}
