//! Detached releases (releases held for room on a full node, handed to the fanout when their
//! round ends): what they survive (a node restarted with its data while they wait, `max_in_flight` 1, the
//! manager dropped while they wait) and what they do not (a script cache flushed while they wait).
//!
//! Queues here are counted in requests of one command: the managers run without the clock check, whose `TIME`
//! makes each acquisition two (and needs `max_in_flight` 2 at least).

use crate::support;

use std::io::Write;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Lock, LockManager};
use support::locks;
use support::{RedisServer, cmd};

const TTL: Duration = Duration::from_secs(10);

/// `name`'s lock, set on every node.
#[track_caller]
fn take_everywhere(manager: &LockManager, servers: &[RedisServer], name: &str) -> Lock {
    for _ in 0..100 {
        let lock = manager.request(name).ttl(TTL).once().acquire().expect(name);
        let want = format!("${}\r\n{}\r\n", lock.value().len(), lock.value());
        if servers
            .iter()
            .all(|s| s.raw(&cmd(&["GET", name])) == want.as_bytes())
        {
            return lock;
        }
        let _ = manager.unlock(lock);
        thread::sleep(Duration::from_millis(10));
    }
    panic!("{name} never set on every node");
}

/// A manager over `servers` with `max_in_flight` `max`, its connections set up; `3 * max` locks taken on every
/// node, then node 2 paused and every lock released by a thread each: decided on nodes 0 and 1, some requests
/// to node 2 detached. Node 2 is left paused. Returns the manager and the lock names.
fn detach_on_paused_node_2(
    servers: &mut [RedisServer],
    max: usize,
) -> (Arc<LockManager>, Vec<String>) {
    detach_on_paused_node_2_with(servers, max, None)
}

/// [`detach_on_paused_node_2`] with the manager's `hung_timeout` (the detached releases' bound) `hung`, if given.
fn detach_on_paused_node_2_with(
    servers: &mut [RedisServer],
    max: usize,
    hung: Option<Duration>,
) -> (Arc<LockManager>, Vec<String>) {
    let config = locks::one_attempt(Duration::from_secs(2))
        .with_max_in_flight(max)
        .with_clock_check(false);
    let config = match hung {
        Some(hung) => config.with_hung_timeout(hung),
        None => config,
    };
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let manager = Arc::new(locks::manager(urls, config));
    locks::wait_until(Duration::from_secs(5), "the connections set up", || {
        let lock = manager.request("held:warm").ttl(TTL).once().acquire();
        lock.is_ok_and(|l| manager.unlock(l).is_ok())
            && manager.stats().nodes.iter().all(|n| n.granted > 0)
    });
    let names: Vec<String> = (0..3 * max).map(|i| format!("held:{i}")).collect();
    let taken: Vec<Lock> = names
        .iter()
        .map(|n| take_everywhere(&manager, servers, n))
        .collect();
    let before = manager.stats().nodes[2].net.detached;
    servers[2].pause();
    let verdicts: Vec<muxlock::Result<usize>> = taken
        .into_iter()
        .map(|lock| {
            let m = Arc::clone(&manager);
            thread::spawn(move || m.unlock(lock))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().expect("release"))
        .collect();
    for v in &verdicts {
        assert!(matches!(v, Ok(n) if *n >= 2), "{v:?}");
    }
    let detached = manager.stats().nodes[2].net.detached - before;
    assert!(detached >= 1, "no request was held for room");
    (manager, names)
}

fn keys_left(server: &RedisServer, names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| server.raw(&cmd(&["GET", n])) != b"$-1\r\n")
        .cloned()
        .collect()
}

/// Acquires and releases `name` until node 2 grants it, for up to 5 s: its vote is its own `OK`.
#[track_caller]
fn granted_by_node_2(manager: &LockManager, name: &str) {
    locks::wait_until(Duration::from_secs(5), "node 2 grants again", || {
        let before = manager.stats().nodes[2].granted;
        let lock = manager.request(name).ttl(TTL).once().acquire().expect(name);
        let granted = manager.stats().nodes[2].granted > before;
        assert!(matches!(manager.unlock(lock), Ok(n) if n >= 2));
        granted
    });
}

/// The thread count below is the process's: the test that compares it runs alone ([`crate::alone`]), every
/// other test beside the others ([`crate::beside_others`]), or other tests' fanouts and servers' readers would
/// move it.
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("Threads: line")
}

/// With `max_in_flight` 1, node 2 killed while paused and restarted with its data (every write
/// persisted): its in-flight requests are lost with the connection, the detached releases go on the new
/// connection (whose set-up loads the scripts again), every key is gone, and node 2's next vote is its own.
#[test]
fn detached_releases_reach_a_node_restarted_with_its_data_at_max_in_flight_one() {
    let _others = crate::beside_others();
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::builder().persist_every_write().start())
        .collect();
    let (manager, names) = detach_on_paused_node_2(&mut servers, 1);
    servers[2].restart();
    // Every key whose release was in flight (lost with the old connection) may stay: the detached ones must not.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = keys_left(&servers[2], &names);
    while left.len() > 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        left = keys_left(&servers[2], &names);
    }
    // `max_in_flight` 1: one in flight, one in the release reserve; the rest (at least one) were detached.
    assert!(
        left.len() <= 2,
        "detached releases lost on restart: {left:?}"
    );
    let net = manager.stats().nodes[2].net.clone();
    assert_eq!(net.given_up, 0, "{net:?}");
    let taken = manager.stats().nodes[2].taken;
    granted_by_node_2(&manager, "held:after");
    assert_eq!(manager.stats().nodes[2].taken, taken);
}

/// Node 2 killed while paused and restarted with a data set that takes it a second to load. While it
/// loads it accepts connections, answers `HELLO` and `INFO`, and refuses everything else with `-LOADING`: the
/// client's set-up fails and it dials again until the load ends, and only then queues the detached releases,
/// which reach the node instead of being refused with nobody reading the refusal.
#[test]
fn detached_releases_reach_a_node_that_restarted_while_it_loads_its_data_set() {
    let _others = crate::beside_others();
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|i| {
            let node = RedisServer::builder().persist_every_write();
            match i {
                2 => node.args(["--enable-debug-command", "yes"]),
                _ => node,
            }
            .start()
        })
        .collect();
    // A million filler keys, written to the append-only file's base by a rewrite, make the load last.
    assert_eq!(
        servers[2].raw(&cmd(&["DEBUG", "POPULATE", "1000000", "filler"])),
        b"+OK\r\n"
    );
    servers[2].raw(&cmd(&["BGREWRITEAOF"]));
    locks::wait_until(Duration::from_secs(30), "the rewrite done", || {
        let info =
            String::from_utf8_lossy(&servers[2].raw(&cmd(&["INFO", "persistence"]))).into_owned();
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
    let (manager, names) = detach_on_paused_node_2(&mut servers, 1);
    let connects = manager.stats().nodes[2].net.connects;
    let start = Instant::now();
    servers[2].restart();
    let loaded_in = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = keys_left(&servers[2], &names);
    while left.len() > 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        left = keys_left(&servers[2], &names);
    }
    let stats = manager.stats().nodes[2].clone();
    assert!(
        left.len() <= 2,
        "detached releases lost to a loading node: {left:?} (restart and load took {loaded_in:?}); {stats:?}"
    );
    // Not vacuous: the client dialled the node while it loaded, and was refused.
    assert!(
        stats.net.connects >= connects + 2,
        "no connection met the load ({loaded_in:?}): {stats:?}"
    );
    assert_eq!(stats.net.given_up, 0, "{stats:?}");
    granted_by_node_2(&manager, "held:after");
}

/// As above, with a load that outlasts the detached release's own bound: the manager's `hung_timeout` is 1.5 s, and
/// node 2 takes longer to restart and load its data set (20,000 keys, each delayed by `key-load-delay`: about 2 s; it answers
/// between keys, `loading-process-events-interval-bytes`). The node answers `-LOADING` to every set-up (it is
/// dialled at least every second, `backoff_max`), so the release waits for it and goes once the load ends:
/// none is given up, and every detached key is gone.
#[test]
fn a_detached_release_waits_for_a_node_whose_load_outlasts_its_bound() {
    let _others = crate::beside_others();
    const HUNG: Duration = Duration::from_millis(1_500);
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|i| {
            let node = RedisServer::builder().persist_every_write();
            match i {
                2 => node.args([
                    "--enable-debug-command",
                    "yes",
                    "--key-load-delay",
                    "20",
                    "--loading-process-events-interval-bytes",
                    "1024",
                ]),
                _ => node,
            }
            .start()
        })
        .collect();
    assert_eq!(
        servers[2].raw(&cmd(&["DEBUG", "POPULATE", "20000", "filler"])),
        b"+OK\r\n"
    );
    servers[2].raw(&cmd(&["BGREWRITEAOF"]));
    locks::wait_until(Duration::from_secs(30), "the rewrite done", || {
        let info =
            String::from_utf8_lossy(&servers[2].raw(&cmd(&["INFO", "persistence"]))).into_owned();
        info.contains("aof_rewrite_in_progress:0") && info.contains("aof_rewrite_scheduled:0")
    });
    let (manager, names) = detach_on_paused_node_2_with(&mut servers, 1, Some(HUNG));
    let start = Instant::now();
    servers[2].restart();
    let loaded_in = start.elapsed();
    // Not vacuous: the load outlasted the bound the release had without it.
    assert!(loaded_in > HUNG, "loaded in {loaded_in:?}");
    // The requests in flight when node 2 was killed are lost with it (two with `max_in_flight` 1); the detached
    // one goes after the load.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = keys_left(&servers[2], &names);
    while left.len() > 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        left = keys_left(&servers[2], &names);
    }
    let stats = manager.stats().nodes[2].clone();
    assert_eq!(
        stats.net.given_up, 0,
        "given up while node 2 loaded ({loaded_in:?}): {stats:?}"
    );
    assert!(
        left.len() <= 2,
        "detached releases lost to a long load: {left:?} (loaded in {loaded_in:?}); {stats:?}"
    );
    granted_by_node_2(&manager, "held:after");
}

/// The manager dropped while releases wait detached on a paused node returns at once (the fanout gives
/// them up and joins its background driver), and repeating it leaves no thread behind.
#[test]
fn dropping_the_manager_while_releases_are_detached_is_prompt_and_leaks_no_thread() {
    let _alone = crate::alone();
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut baseline = None;
    for round in 0..3 {
        let (manager, _names) = detach_on_paused_node_2(&mut servers, 2);
        let manager = Arc::try_unwrap(manager).expect("the only handle");
        let start = Instant::now();
        drop(manager);
        let took = start.elapsed();
        assert!(took < Duration::from_secs(1), "drop took {took:?}");
        servers[2].resume();
        for s in &servers {
            s.raw(&cmd(&["FLUSHALL"]));
        }
        // Background threads of the dropped fanout are joined by its drop.
        let now = threads();
        match baseline {
            None => baseline = Some(now),
            Some(b) => assert!(
                now <= b,
                "round {round}: {now} threads, {b} after the first"
            ),
        }
    }
}

/// Hazard (lost release): a detached release is the round's own request, encoded for the connection it was
/// held on, on Redis by `EVALSHA`. Once detached nobody reads its reply, so a node whose script cache was flushed
/// while it waited (`SCRIPT FLUSH` by an operator) answers `NOSCRIPT` (seen here in `INFO errorstats`, one per
/// detached release) and keeps the key for its whole lease, where the round, still waiting, would have sent the
/// script in full (`next_via`). The requests in flight during the pause, sent before the flush ran, are not
/// lost: only the detached ones, which go out later (up to `hung_timeout` later). The undo paths nobody awaits
/// already send scripts in full for this reason (`kind/owned.rs`). The same class:
/// a detached native command refused on a later connection (the node now another server), and a routed release
/// answered `MOVED`/`ASK` (slot migrated while it waited): the round's fallbacks are gone once it is detached.
/// Fixed for scripts: every release goes in full from the start (`redlock/scripts.rs`, "Releases go in full"),
/// so a detached one carries its script's body (sent by hash instead: this fails again). The native commands and the routed
/// redirections of that class remain (README, "Cluster members").
#[test]
fn a_detached_release_survives_a_script_flush_while_it_waits() {
    let _others = crate::beside_others();
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let (manager, names) = detach_on_paused_node_2(&mut servers, 2);
    // Queued in the paused node's socket: it runs when the node resumes, before any detached request is written
    // (those go only once the in-flight requests' replies made room).
    let mut admin = servers[2].connect();
    admin.write_all(&cmd(&["SCRIPT", "FLUSH"])).expect("write");
    servers[2].resume();
    thread::sleep(Duration::from_millis(300));
    let net = manager.stats().nodes[2].net.clone();
    assert_eq!(net.given_up, 0, "{net:?}");
    let left = keys_left(&servers[2], &names);
    let errors =
        String::from_utf8_lossy(&servers[2].raw(&cmd(&["INFO", "errorstats"]))).into_owned();
    assert!(
        left.is_empty(),
        "released locks still on node 2: {left:?} ({} detached, {} given up); node 2's errors: {errors}",
        net.detached,
        net.given_up
    );
}

/// While node 2 drains detached releases (`max_in_flight` 2, three pause/resume cycles), threads of the
/// same manager race acquisitions of keys another manager holds on every node, and of free keys. No grant of a
/// held key (a detached release's reply counted as a vote would be one), and every lock granted is set to its
/// own value on a majority.
#[test]
fn votes_stay_their_own_while_detached_releases_drain() {
    let _others = crate::beside_others();
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let other = locks::manager(urls, locks::one_attempt(Duration::from_secs(2)));
    let busy: Vec<Lock> = (0..4)
        .map(|i| take_everywhere(&other, &servers, &format!("busy:{i}")))
        .collect();

    let granted = Arc::new(AtomicUsize::new(0));
    let mut detached_total = 0;
    for cycle in 0..3 {
        let (manager, names) = detach_on_paused_node_2(&mut servers, 2);
        detached_total += manager.stats().nodes[2].net.detached;
        let stop = Arc::new(AtomicBool::new(false));
        let contenders: Vec<_> = (0..6)
            .map(|t| {
                let (m, stop, granted) = (
                    Arc::clone(&manager),
                    Arc::clone(&stop),
                    Arc::clone(&granted),
                );
                thread::spawn(move || {
                    let mut k = 0usize;
                    let end = Instant::now() + Duration::from_secs(3);
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) && Instant::now() < end && k < 10_000 {
                        k += 1;
                        let name = match k % 2 {
                            0 => format!("busy:{}", (k / 2 + t) % 4),
                            _ => format!("free:{cycle}:{t}:{k}"),
                        };
                        if let Ok(lock) = m.request(&name).ttl(TTL).once().acquire() {
                            granted.fetch_add(1, Ordering::Relaxed);
                            out.push((name, lock.value().to_string()));
                            let _ = m.unlock(lock);
                        }
                    }
                    out
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(50));
        servers[2].resume();
        thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        for c in contenders {
            for (name, _value) in c.join().expect("contender") {
                assert!(
                    !name.starts_with("busy:"),
                    "cycle {cycle}: {name} granted while another manager holds it"
                );
            }
        }
        locks::wait_until(Duration::from_secs(5), "detached releases drained", || {
            keys_left(&servers[2], &names).is_empty()
        });
        drop(manager);
    }
    assert!(detached_total >= 3, "no release detached");
    assert!(
        granted.load(Ordering::Relaxed) > 0,
        "nothing granted at all"
    );
    for (i, lock) in busy.into_iter().enumerate() {
        let name = format!("busy:{i}");
        let on: Vec<Vec<u8>> = servers
            .iter()
            .map(|s| s.raw(&cmd(&["GET", &name])))
            .collect();
        let value = lock.value().to_string();
        let want = format!("${}\r\n{value}\r\n", value.len()).into_bytes();
        assert!(
            on.iter().all(|v| *v == want),
            "{name} ({value}) changed under its holder: {on:?}"
        );
        let r = other.unlock(lock);
        assert!(matches!(r, Ok(n) if n >= 2), "{name}: {r:?}");
    }
}

/// The value of `key` on any node of `c` that serves it (read with `ASKING`), or `None`.
fn cluster_get(c: &support::RedisCluster, key: &str) -> Option<Vec<u8>> {
    let mut bytes = cmd(&["ASKING"]);
    bytes.extend(cmd(&["GET", key]));
    (0..c.shard_count()).find_map(|i| {
        let raw = c.node(i).raw(&bytes);
        let rest = raw.strip_prefix(b"+OK\r\n")?.to_vec();
        (rest.starts_with(b"$") && rest != b"$-1\r\n").then_some(rest)
    })
}

/// Routed rounds under overload. Members: two plain Redis nodes and a Redis Cluster of 3 masters, with
/// `max_in_flight` 2, so that a routed round's `send_each` meets full connections. Six threads acquire and release
/// for about 1.5 s while one cluster master is paused for 300 ms mid-way; keys another manager holds are never
/// granted, every call returns within its bound, and once the master is back every released key is gone from the
/// cluster within 5 s.
#[test]
fn routed_rounds_under_overload_grant_no_held_key_and_lose_releases_only_by_the_cap() {
    let _others = crate::beside_others();
    use std::sync::atomic::{AtomicBool, Ordering};
    let plain: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let mut cluster = support::RedisCluster::start(3);
    let urls = vec![plain[0].url(), plain[1].url(), cluster.seed_url()];
    let round = Duration::from_millis(300);
    let other = locks::manager(urls.clone(), locks::one_attempt(round));
    let busy: Vec<Lock> = (0..4)
        .map(|i| {
            let name = format!("busy:{i}");
            let lock = other.request(&name).ttl(TTL).once().acquire().expect(&name);
            assert!(
                cluster_get(&cluster, &name).is_some(),
                "{name} not on the cluster"
            );
            lock
        })
        .collect();
    let manager = Arc::new(locks::manager(
        urls,
        locks::one_attempt(round)
            .with_max_in_flight(2)
            .with_clock_check(false),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..6)
        .map(|t| {
            let (m, stop) = (Arc::clone(&manager), Arc::clone(&stop));
            thread::spawn(move || {
                let (mut released, mut slowest) = (Vec::new(), Duration::ZERO);
                let end = Instant::now() + Duration::from_secs(3);
                let mut k = 0usize;
                while !stop.load(Ordering::Relaxed) && Instant::now() < end && k < 20_000 {
                    k += 1;
                    let name = match k % 3 {
                        0 => format!("busy:{}", (k + t) % 4),
                        _ => format!("w:{t}:{k}"),
                    };
                    let start = Instant::now();
                    let got = m.request(&name).ttl(TTL).once().acquire();
                    slowest = slowest.max(start.elapsed());
                    if let Ok(lock) = got {
                        assert!(!name.starts_with("busy:"), "{name} granted to two holders");
                        let start = Instant::now();
                        if matches!(m.unlock(lock), Ok(n) if n >= 2) {
                            released.push(name);
                        }
                        slowest = slowest.max(start.elapsed());
                    }
                }
                (released, slowest)
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    cluster.node_mut(0).pause();
    thread::sleep(Duration::from_millis(300));
    cluster.node_mut(0).resume();
    thread::sleep(Duration::from_millis(900));
    stop.store(true, Ordering::Relaxed);
    let mut released = Vec::new();
    for w in workers {
        let (r, slowest) = w.join().expect("worker");
        // A round's bound, a patient release's few round lengths, and a loaded machine's slack.
        assert!(slowest < Duration::from_secs(3), "a call took {slowest:?}");
        released.extend(r);
    }
    assert!(!released.is_empty(), "nothing was released");
    let deadline = Instant::now() + Duration::from_secs(5);
    let left = loop {
        let left: Vec<&String> = released
            .iter()
            .filter(|n| cluster_get(&cluster, n).is_some())
            .collect();
        if left.is_empty() || Instant::now() >= deadline {
            break left;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let stats = manager.stats();
    eprintln!(
        "{} of {} released keys left on the cluster; member 0: {:?}; member 2: {:?}",
        left.len(),
        released.len(),
        stats.nodes[0].net,
        stats.nodes[2].net
    );
    // Releases given up by the documented bound (`2 * max_in_flight` replies' worth detached per node) may stay: no
    // more keys than that.
    assert!(
        left.len() as u64 <= stats.nodes[2].net.given_up,
        "{} of {} released keys left on the cluster, e.g. {:?}; member 2: {:?}",
        left.len(),
        released.len(),
        &left[..left.len().min(5)],
        stats.nodes[2]
    );
    for (i, lock) in busy.into_iter().enumerate() {
        let name = format!("busy:{i}");
        let value = lock.value().to_string();
        let want = format!("${}\r\n{value}\r\n", value.len()).into_bytes();
        assert_eq!(cluster_get(&cluster, &name), Some(want), "{name} changed");
        assert!(matches!(other.unlock(lock), Ok(n) if n >= 2));
    }
}

/// The mutual-exclusion checker under overload with `max_in_flight` 1 and 2 (folded releases on the
/// second run), three managers of four threads over three nodes, while node 2 and then node 0 are paused for
/// 150 ms at a time (releases detached on them): no two holds overlap, no two writers meet, and releases were
/// detached (over both runs).
#[test]
fn the_checker_finds_no_overlap_under_overload_with_tiny_max_in_flight() {
    let _others = crate::beside_others();
    use support::checker::{FreezeMonitor, Recorder, Stats, Work, overlaps, report, worker};
    let mut total_detached = 0;
    for (max, fold) in [(1, false), (2, true)] {
        let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let protected = RedisServer::start();
        let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
        let config = locks::one_attempt(Duration::from_millis(200))
            .with_max_in_flight(max)
            .with_clock_check(false)
            .with_fold_releases(fold)
            .with_retry_count(2)
            .with_retry_delay(Duration::from_millis(5));
        let managers: Vec<Arc<LockManager>> = (0..3)
            .map(|_| Arc::new(locks::manager(urls.clone(), config.clone())))
            .collect();
        let recorder = Recorder::default();
        let stats = Arc::new(Stats::default());
        let monitor = FreezeMonitor::start(Arc::clone(&stats));
        let work = Work {
            resources: (0..3).map(|i| format!("res{i}")).collect(),
            ttl: Duration::from_millis(600),
            until: Instant::now() + Duration::from_secs(3),
            max_work: Duration::from_millis(2),
            pause: None,
            seed: 11,
            wait: None,
        };
        let handles: Vec<_> = managers
            .iter()
            .enumerate()
            .flat_map(|(m, l)| (0..4).map(move |t| (m, t, Arc::clone(l))))
            .map(|(m, t, l)| {
                let (recorder, stats, addr) =
                    (recorder.clone(), Arc::clone(&stats), protected.addr());
                let work = Work {
                    seed: work.seed + (m * 100 + t) as u64,
                    ..work.clone()
                };
                thread::spawn(move || {
                    worker(&format!("m{m}t{t}"), &l, &work, addr, &recorder, &stats)
                })
            })
            .collect();
        for node in [2, 0, 2, 0] {
            thread::sleep(Duration::from_millis(300));
            servers[node].pause();
            thread::sleep(Duration::from_millis(150));
            servers[node].resume();
        }
        for h in handles {
            h.join().expect("worker");
        }
        drop(monitor);
        let holds = recorder.holds();
        let violations = overlaps(&holds);
        report(
            &format!("max_in_flight {max}, fold {fold}"),
            &stats,
            &holds,
            &violations,
        );
        assert!(violations.is_empty(), "overlapping holds: {violations:?}");
        assert_eq!(Stats::get(&stats.concurrent_writers), 0, "{stats}");
        assert!(Stats::get(&stats.acquired) > 0, "{stats}");
        let detached: u64 = managers
            .iter()
            .flat_map(|m| m.stats().nodes)
            .map(|n| n.net.detached)
            .sum();
        eprintln!("max_in_flight {max}, fold {fold}: {detached} detached");
        total_detached += detached;
    }
    // The faults struck: releases were held for room and detached (a folded run may detach none: few, large
    // requests).
    assert!(total_detached > 0, "the pauses detached no release");
}

/// Node 2 behind a proxy that black-holes it while releases go out (`max_in_flight` 2), then resets
/// every connection to it for 100 ms: the requests in flight die with the connection, the detached ones go on
/// the next connection (behind its set-up): only keys whose release was in flight or given up by the cap stay, and
/// node 2's next vote is its own.
#[test]
fn detached_releases_go_on_the_connection_after_a_reset() {
    let _others = crate::beside_others();
    use support::{Fault, FaultProxy};
    const MAX: usize = 2;
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let proxy = FaultProxy::start(servers[2].addr());
    let urls = vec![servers[0].url(), servers[1].url(), proxy.url()];
    let config = locks::one_attempt(Duration::from_secs(2))
        .with_max_in_flight(MAX)
        .with_clock_check(false);
    let manager = Arc::new(locks::manager(urls, config));
    locks::wait_until(Duration::from_secs(5), "the connections set up", || {
        let lock = manager.request("held:warm").ttl(TTL).once().acquire();
        lock.is_ok_and(|l| manager.unlock(l).is_ok())
            && manager.stats().nodes.iter().all(|n| n.granted > 0)
    });
    let names: Vec<String> = (0..4 * MAX).map(|i| format!("held:{i}")).collect();
    let taken: Vec<Lock> = names
        .iter()
        .map(|n| take_everywhere(&manager, &servers, n))
        .collect();
    let before = manager.stats().nodes[2].net.clone();
    proxy.set(Fault::BlackHole);
    let verdicts: Vec<muxlock::Result<usize>> = taken
        .into_iter()
        .map(|lock| {
            let m = Arc::clone(&manager);
            thread::spawn(move || m.unlock(lock))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().expect("release"))
        .collect();
    for v in &verdicts {
        assert!(matches!(v, Ok(n) if *n >= 2), "{v:?}");
    }
    let net = manager.stats().nodes[2].net.since(&before);
    assert!(net.detached >= 1, "no request was held for room: {net:?}");
    proxy.set(Fault::Refuse);
    thread::sleep(Duration::from_millis(100));
    proxy.set(Fault::None);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut left = keys_left(&servers[2], &names);
    while left.len() > 2 * MAX && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
        left = keys_left(&servers[2], &names);
    }
    // Give the last detached ones a moment more, then judge: at most the in-flight ones (the queue and its
    // release reserve) may be left.
    thread::sleep(Duration::from_millis(200));
    let left = keys_left(&servers[2], &names);
    let net = manager.stats().nodes[2].net.since(&before);
    // The cap keeps `2 * MAX` replies' worth detached per node; the rest were given up at once (documented).
    assert!(net.detached > net.given_up, "none kept: {net:?}");
    assert!(
        left.len() as u64 <= 2 * MAX as u64 + net.given_up,
        "left on node 2: {left:?} ({net:?})"
    );
    let taken = manager.stats().nodes[2].taken;
    granted_by_node_2(&manager, "held:after");
    assert_eq!(manager.stats().nodes[2].taken, taken);
    eprintln!("left {} of {}: {net:?}", left.len(), names.len());
}

/// Async releases dropped mid-round. Nodes 1 and 2 are paused, so no release can be decided; each
/// `unlock_async` is dropped by a 50 ms timeout while its requests to them are in flight or held for room
/// (`max_in_flight` 2, six releases: four in flight and two held per paused node). Once both resume, every key
/// is gone from every node, and nothing was given up.
#[test]
fn async_releases_dropped_mid_round_still_reach_paused_nodes() {
    let _others = crate::beside_others();
    const MAX: usize = 2;
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let config = locks::one_attempt(Duration::from_secs(2))
        .with_max_in_flight(MAX)
        .with_clock_check(false);
    let manager = Arc::new(locks::manager(urls, config));
    locks::wait_until(Duration::from_secs(5), "the connections set up", || {
        let lock = manager.request("held:warm").ttl(TTL).once().acquire();
        lock.is_ok_and(|l| manager.unlock(l).is_ok())
            && manager.stats().nodes.iter().all(|n| n.granted > 0)
    });
    let names: Vec<String> = (0..3 * MAX).map(|i| format!("held:{i}")).collect();
    let taken: Vec<Lock> = names
        .iter()
        .map(|n| take_everywhere(&manager, &servers, n))
        .collect();
    servers[1].pause();
    servers[2].pause();
    let rt = support::rt::two_workers();
    let tasks: Vec<_> = taken
        .into_iter()
        .map(|lock| {
            let m = Arc::clone(&manager);
            rt.spawn(async move {
                tokio::time::timeout(Duration::from_millis(50), m.unlock_async(lock))
                    .await
                    .is_err()
            })
        })
        .collect();
    for t in tasks {
        assert!(
            rt.block_on(t).expect("task"),
            "a release decided with two nodes paused"
        );
    }
    let detached: u64 = manager.stats().nodes.iter().map(|n| n.net.detached).sum();
    assert!(detached >= 2, "no request was held for room");
    servers[1].resume();
    servers[2].resume();
    locks::wait_until(
        Duration::from_secs(5),
        "every key gone from every node",
        || servers.iter().all(|s| keys_left(s, &names).is_empty()),
    );
    let given_up: u64 = manager.stats().nodes.iter().map(|n| n.net.given_up).sum();
    assert_eq!(given_up, 0);
}

/// While releases wait detached for a black-holed node (the background driver then keeps the poll), a
/// blocking thread's acquisitions on other keys are still decided by the two live nodes, each well within its
/// round, and the detached ones are given up by `hung_timeout` (500 ms here), after which the driver is
/// handed back.
#[test]
fn blocking_rounds_stay_prompt_while_releases_wait_detached() {
    let _others = crate::beside_others();
    use support::{Fault, FaultProxy};
    const MAX: usize = 2;
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let proxy = FaultProxy::start(servers[2].addr());
    let urls = vec![servers[0].url(), servers[1].url(), proxy.url()];
    let round = Duration::from_millis(300);
    let config = locks::one_attempt(round)
        .with_max_in_flight(MAX)
        .with_clock_check(false)
        .with_hung_timeout(Duration::from_millis(500));
    let manager = Arc::new(locks::manager(urls, config));
    locks::wait_until(Duration::from_secs(5), "the connections set up", || {
        let lock = manager.request("held:warm").ttl(TTL).once().acquire();
        lock.is_ok_and(|l| manager.unlock(l).is_ok())
            && manager.stats().nodes.iter().all(|n| n.granted > 0)
    });
    let taken: Vec<Lock> = (0..3 * MAX)
        .map(|i| take_everywhere(&manager, &servers, &format!("held:{i}")))
        .collect();
    proxy.set(Fault::BlackHole);
    for lock in taken {
        assert!(matches!(manager.unlock(lock), Ok(n) if n >= 2));
    }
    assert!(manager.stats().nodes[2].net.detached >= 1, "none detached");
    let (mut slowest, mut ok) = (Duration::ZERO, 0);
    let end = Instant::now() + Duration::from_secs(1);
    for i in 0..200 {
        if Instant::now() >= end {
            break;
        }
        let start = Instant::now();
        let got = manager
            .request(format!("other:{i}"))
            .ttl(TTL)
            .once()
            .acquire();
        slowest = slowest.max(start.elapsed());
        if let Ok(lock) = got {
            ok += 1;
            let _ = manager.unlock(lock);
        }
    }
    assert!(ok > 0, "no acquisition decided by the two live nodes");
    assert!(
        slowest < round + Duration::from_millis(200),
        "slowest {slowest:?}"
    );
    proxy.set(Fault::None);
    // Given up by now (the connection hung past 500 ms and was dropped): counted, nothing waits.
    locks::wait_until(
        Duration::from_secs(3),
        "the detached releases given up or sent",
        || {
            let net = &manager.stats().nodes[2].net;
            net.given_up >= 1 || keys_left(&servers[2], &["held:0".to_string()]).is_empty()
        },
    );
}
