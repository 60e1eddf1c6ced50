//! Folded releases (`engine/fold.rs`) against real servers: plain releases of one manager's threads
//! that meet go out as one `RELEASE_BATCH` per script node (one native command per key on a Valkey node), and
//! each caller still gets the verdict a lone release would have given it, from the replies to its own key only:
//! keys taken by another value on one, two or all nodes are left alone and reported as a lone release reports
//! them (`Ok(2)`, `LockLost`); `SCRIPT FLUSH` before every burst falls back to `EVAL` without a lost vote; a
//! manager over Redis 7.0 and Valkey 9.1 nodes folds on the first and goes native on the others; async callers
//! that give up in the queue, or while leading a fold, neither strand the others nor keep their key.
//!
//! Each burst's servers' `INFO commandstats` shows the fold: a Redis node ran one `EVALSHA` per lone release
//! and one per folded round, not one per key.

use crate::support;

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Error, Lock, LockManager};
use support::locks::{manager, one_attempt, wait_until};
use support::process::valkey_or_skip;
use support::{Cluster, RedisServer, cmd};

const TTL: Duration = Duration::from_secs(30);
const THREADS: usize = 16;
const BURSTS: usize = 12;

#[track_caller]
fn get(server: &RedisServer, key: &str) -> Vec<u8> {
    server.raw(&cmd(&["GET", key]))
}

/// How many of the 3 nodes a thief takes the key on before the release, by thread and burst: none, one (the
/// release still has a majority: `Ok(2)`), two or all three (no majority can have held it: `LockLost`).
fn stolen(t: usize, burst: usize) -> usize {
    (t + burst) % 4
}

/// `THREADS` threads, `BURSTS` times: each takes a key of its own, a thief overwrites it on some nodes
/// ([`stolen`]), then all release at once (a barrier). Checks every verdict against what a lone release gives,
/// that no key a thief holds was deleted, that every other is gone from every node, and that releases folded; returns the number of releases. `before` runs on one thread before each burst's
/// releases (a `SCRIPT FLUSH`, say).
#[track_caller]
fn bursts(locks: &Arc<LockManager>, nodes: &[&RedisServer], before: &(dyn Fn() + Sync)) -> u64 {
    assert_eq!(nodes.len(), 3);
    let barrier = Barrier::new(THREADS);
    // A thread records what went wrong and goes on to the barriers: one that panicked would leave the others
    // waiting there for ever.
    let wrong = Mutex::new(Vec::<String>::new());
    thread::scope(|s| {
        for t in 0..THREADS {
            let (locks, barrier, wrong) = (Arc::clone(locks), &barrier, &wrong);
            s.spawn(move || {
                let note =
                    |what: String| wrong.lock().unwrap_or_else(|e| e.into_inner()).push(what);
                for burst in 0..BURSTS {
                    let key = format!("fold:{t}:{burst}");
                    let lock = locks.request(&key).ttl(TTL).once().acquire();
                    let thief = format!("thief-{t}-{burst}");
                    for node in &nodes[..stolen(t, burst)] {
                        node.raw(&cmd(&["SET", &key, &thief, "PX", "60000"]));
                    }
                    if barrier.wait().is_leader() {
                        before();
                    }
                    barrier.wait();
                    let lock = match lock {
                        Ok(lock) => lock,
                        Err(e) => {
                            note(format!("{key}: not acquired: {e}"));
                            continue;
                        }
                    };
                    match (stolen(t, burst), locks.unlock(lock)) {
                        (0, Ok(n)) if n >= 2 => {}
                        (1, Ok(2)) => {}
                        (2 | 3, Err(Error::LockLost(_))) => {}
                        (k, v) => note(format!("{key} taken on {k} of 3 nodes: released as {v:?}")),
                    }
                }
            });
        }
    });
    let wrong = wrong.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(
        wrong.is_empty(),
        "{} of {} releases wrong, e.g. {:?}",
        wrong.len(),
        THREADS * BURSTS,
        &wrong[..wrong.len().min(4)]
    );
    // Every release has run on every node by now: an inspection round follows them on each connection.
    locks.inspect("fold:after").expect("the nodes answer");
    for t in 0..THREADS {
        for burst in 0..BURSTS {
            let key = format!("fold:{t}:{burst}");
            let thief = format!("thief-{t}-{burst}");
            for (i, node) in nodes.iter().enumerate() {
                let found = get(node, &key);
                if i < stolen(t, burst) {
                    let want = format!("${}\r\n{thief}\r\n", thief.len()).into_bytes();
                    assert_eq!(found, want, "{key}: the thief's key deleted on node {i}");
                } else {
                    // Releases go in full: after a flush too, no node's late reply is a `NOSCRIPT`.
                    assert_eq!(found, b"$-1\r\n", "{key} on node {i}");
                }
            }
        }
    }
    let folds = locks.stats().releases;
    eprintln!(
        "{} releases: {} folded in {} rounds",
        THREADS * BURSTS,
        folds.folded,
        folds.folded_rounds
    );
    assert!(
        folds.folded_rounds > 0 && folds.folded > folds.folded_rounds,
        "{THREADS} threads releasing at once never folded: {folds:?}"
    );
    (THREADS * BURSTS) as u64
}

/// One `EVAL` per lone release and one per folded round on a script node (releases go in full): what the fold saves.
#[track_caller]
fn one_script_per_round(locks: &LockManager, node: &RedisServer, releases: u64, before: u64) {
    let folds = locks.stats().releases;
    let lone = releases - folds.folded;
    assert_eq!(
        node.calls("eval") - before,
        lone + folds.folded_rounds,
        "{releases} releases, {folds:?}"
    );
}

#[test]
fn folded_releases_count_each_key_on_its_own() {
    let cluster = Cluster::start(3);
    let nodes: Vec<&RedisServer> = cluster.nodes().iter().collect();
    let locks = Arc::new(manager(
        cluster.urls(),
        one_attempt(Duration::from_secs(2)).with_fold_releases(true),
    ));
    locks.inspect("warm-up").expect("every node answers");
    let before: Vec<u64> = nodes.iter().map(|n| n.calls("eval")).collect();
    let releases = bursts(&locks, &nodes, &|| {});
    for (node, before) in nodes.iter().zip(before) {
        one_script_per_round(&locks, node, releases, before);
    }
}

#[test]
fn a_flushed_script_cache_costs_a_fold_no_vote() {
    let cluster = Cluster::start(3);
    let nodes: Vec<&RedisServer> = cluster.nodes().iter().collect();
    let locks = Arc::new(manager(
        cluster.urls(),
        one_attempt(Duration::from_secs(2)).with_fold_releases(true),
    ));
    locks.inspect("warm-up").expect("every node answers");
    let flush = || {
        for node in &nodes {
            assert_eq!(node.raw(&cmd(&["SCRIPT", "FLUSH"])), b"+OK\r\n");
        }
    };
    let evals: Vec<u64> = nodes.iter().map(|n| n.calls("eval")).collect();
    bursts(&locks, &nodes, &flush);
    for (node, before) in nodes.iter().zip(evals) {
        assert!(node.calls("eval") > before, "no release went by EVAL");
        // Flushed before the last burst, loaded again only by a fold's `EVAL` (no connection was set up since).
        let exists = node.raw(&cmd(&[
            "SCRIPT",
            "EXISTS",
            muxlock::redlock::lua::RELEASE_BATCH.sha1,
        ]));
        assert_eq!(
            exists, b"*1\r\n:1\r\n",
            "the folded script was not sent in full"
        );
    }
}

#[test]
fn valkey_nodes_go_native_in_a_fold() {
    let Some(bin) = valkey_or_skip() else {
        return;
    };
    let valkeys = [
        RedisServer::builder().binary(bin).start(),
        RedisServer::builder().binary(bin).start(),
    ];
    let redis = RedisServer::start();
    // The thieves strike the Valkey nodes first: their natives must compare too.
    let nodes = [&valkeys[0], &valkeys[1], &redis];
    let locks = Arc::new(manager(
        nodes.iter().map(|n| n.url()),
        one_attempt(Duration::from_secs(2)).with_fold_releases(true),
    ));
    locks.inspect("warm-up").expect("every node answers");
    let scripts = redis.calls("eval");
    let releases = bursts(&locks, &nodes, &|| {});
    one_script_per_round(&locks, &redis, releases, scripts);
    for valkey in &valkeys {
        assert_eq!(valkey.calls("delifeq"), releases, "one DELIFEQ per key");
        assert_eq!(
            valkey.calls("eval") + valkey.calls("evalsha"),
            0,
            "no script on a native node"
        );
    }
}

/// Two nodes of three paused: a lone release in flight on a thread waits for them, so releases after it queue.
/// Returns the manager, its cluster, the lone release's thread, and `extra` locks taken before the pause.
fn in_flight(extra: usize) -> (Arc<LockManager>, Cluster, thread::JoinHandle<()>, Vec<Lock>) {
    let mut cluster = Cluster::start(3);
    let locks = Arc::new(manager(
        cluster.urls(),
        one_attempt(Duration::from_secs(3)).with_fold_releases(true),
    ));
    let take = |name: String| locks.request(name).ttl(TTL).once().acquire().expect("free");
    let lone = take("fold:in-flight".into());
    let others = (0..extra)
        .map(|i| take(format!("fold:queued:{i}")))
        .collect();
    cluster.pause(1);
    cluster.pause(2);
    let thread = {
        let locks = Arc::clone(&locks);
        thread::spawn(move || {
            let n = locks.unlock(lone).expect("released once the nodes resume");
            assert!(n >= 2);
        })
    };
    // The lone round is out (it has the gate) before anything else releases.
    thread::sleep(Duration::from_millis(100));
    (locks, cluster, thread, others)
}

/// Once every node ran what it was sent: `key` is gone everywhere.
#[track_caller]
fn gone_everywhere(locks: &LockManager, cluster: &Cluster, key: &str) {
    locks.inspect("fold:after").expect("the nodes answer");
    wait_until(Duration::from_secs(5), key, || {
        cluster.nodes().iter().all(|n| get(n, key) == b"$-1\r\n")
    });
}

#[test]
fn a_queued_release_given_up_still_goes_and_strands_nobody() {
    let rt = support::rt::current_thread();
    let (locks, mut cluster, lone, mut queued) = in_flight(2);
    let (waits, gives_up) = (queued.pop().expect("2"), queued.pop().expect("2"));
    let started = Instant::now();
    let verdict = rt.block_on(async {
        let given_up =
            tokio::time::timeout(Duration::from_millis(20), locks.unlock_async(gives_up)).await;
        assert!(
            given_up.is_err(),
            "queued behind a round that cannot end yet"
        );
        let waiting = tokio::spawn({
            let locks = Arc::clone(&locks);
            async move { locks.unlock_async(waits).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        cluster.resume(1);
        cluster.resume(2);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the queue went on without the caller that gave up")
            .expect("the task ran")
    });
    assert!(matches!(verdict, Ok(n) if n >= 2), "{verdict:?}");
    lone.join().expect("the lone release");
    assert!(started.elapsed() < Duration::from_secs(3));
    gone_everywhere(&locks, &cluster, "fold:queued:0");
    gone_everywhere(&locks, &cluster, "fold:queued:1");
    let folds = locks.stats().releases;
    assert_eq!((folds.folded_rounds, folds.folded), (1, 2), "{folds:?}");
}

#[test]
fn a_queue_whose_every_caller_gave_up_is_released_unawaited() {
    let rt = support::rt::current_thread();
    let (locks, mut cluster, lone, mut queued) = in_flight(1);
    rt.block_on(async {
        let release = locks.unlock_async(queued.pop().expect("1"));
        let given_up = tokio::time::timeout(Duration::from_millis(20), release).await;
        assert!(
            given_up.is_err(),
            "queued behind a round that cannot end yet"
        );
    });
    cluster.resume(1);
    cluster.resume(2);
    lone.join().expect("the lone release");
    gone_everywhere(&locks, &cluster, "fold:queued:0");
    assert_eq!(locks.stats().releases.folded_rounds, 0);
}

#[test]
fn a_leader_dropped_mid_round_gives_the_others_a_verdict_and_its_requests_still_run() {
    let rt = support::rt::current_thread();
    let (locks, mut cluster, lone, mut queued) = in_flight(2);
    let (other, leader) = (queued.pop().expect("2"), queued.pop().expect("2"));
    let verdict = rt.block_on(async {
        let mut leader = Box::pin(locks.unlock_async(leader));
        let first = tokio::time::timeout(Duration::from_millis(20), &mut leader).await;
        assert!(first.is_err(), "queued first");
        let other = tokio::spawn({
            let locks = Arc::clone(&locks);
            async move { locks.unlock_async(other).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        cluster.resume(1);
        cluster.resume(2);
        lone.join().expect("the lone release");
        // The queue's first caller leads the fold; its round then meets two paused nodes and its caller goes.
        cluster.pause(1);
        cluster.pause(2);
        let led = tokio::time::timeout(Duration::from_millis(100), &mut leader).await;
        assert!(led.is_err(), "the fold waits for a majority");
        drop(leader);
        let started = Instant::now();
        let verdict = tokio::time::timeout(Duration::from_secs(1), other)
            .await
            .expect("the other caller is not left to the abandoned round's timeout")
            .expect("the task ran");
        assert!(started.elapsed() < Duration::from_millis(500));
        verdict
    });
    // One node confirmed, two did not answer: unconfirmed, never a success.
    assert!(matches!(verdict, Err(Error::Quorum(_))), "{verdict:?}");
    cluster.resume(1);
    cluster.resume(2);
    gone_everywhere(&locks, &cluster, "fold:queued:0");
    gone_everywhere(&locks, &cluster, "fold:queued:1");
    let folds = locks.stats().releases;
    assert_eq!((folds.folded_rounds, folds.folded), (1, 2), "{folds:?}");
}

#[test]
fn folding_off_sends_every_release_alone() {
    let cluster = Cluster::start(3);
    let config = one_attempt(Duration::from_secs(2)).with_fold_releases(false);
    let locks = Arc::new(manager(cluster.urls(), config));
    locks.inspect("warm-up").expect("every node answers");
    let before = cluster.node(0).calls("eval");
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        for t in 0..THREADS {
            let (locks, barrier) = (Arc::clone(&locks), &barrier);
            s.spawn(move || {
                let lock = locks
                    .request(format!("unfolded:{t}"))
                    .ttl(TTL)
                    .once()
                    .acquire();
                barrier.wait();
                lock.map(|lock| locks.unlock(lock))
            });
        }
    });
    let folds = locks.stats().releases;
    assert_eq!((folds.folded_rounds, folds.folded), (0, 0));
    assert_eq!(cluster.node(0).calls("eval") - before, THREADS as u64);
}

/// The servers' own time per lock cycle with and without folding, 64 threads on one manager, alternated in one
/// run: `INFO commandstats` (time executing commands, summed over every command and node) and `/proc` (the
/// servers' whole CPU: parsing, system calls, the event loop). A measurement: CI runs it for 0.2 s a side and
/// asserts only that its figures mean something (every side made cycles, the servers spent time on them, the
/// manager without folding folded nothing); for figures, `MUXLOCK_FOLD_SECS=3 cargo test --release --test api
/// fold::server_time -- --nocapture`.
#[test]
fn server_time_per_cycle_with_and_without_folding() {
    const CALLERS: usize = 64;
    let secs: f64 = std::env::var("MUXLOCK_FOLD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.2);
    let cluster = Cluster::start(5);
    let config = one_attempt(Duration::from_millis(200)).with_fold_releases(true);
    let folding = Arc::new(manager(cluster.urls(), config.clone()));
    let alone = Arc::new(manager(cluster.urls(), config.with_fold_releases(false)));
    for m in [&folding, &alone] {
        m.inspect("warm-up").expect("every node answers");
    }
    let exec_usec = || -> u64 {
        let mut total = 0;
        for node in cluster.nodes() {
            let info =
                String::from_utf8_lossy(&node.raw(&cmd(&["INFO", "commandstats"]))).into_owned();
            for line in info.lines().filter(|l| l.starts_with("cmdstat_")) {
                let usec = line
                    .split(',')
                    .find_map(|f| f.strip_prefix("usec="))
                    .and_then(|u| u.parse::<u64>().ok());
                total += usec.unwrap_or(0);
            }
        }
        total
    };
    let ticks = || -> u64 {
        cluster
            .nodes()
            .iter()
            .map(|n| {
                let stat =
                    std::fs::read_to_string(format!("/proc/{}/stat", n.pid())).unwrap_or_default();
                let after = stat.rsplit(')').next().unwrap_or_default();
                let f: Vec<u64> = after
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                // utime and stime: fields 14 and 15 of stat(5), 11 and 12 after the state.
                f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0)
            })
            .sum()
    };
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("load before: {}", load().trim());
    let mut rows = Vec::new();
    for rep in 0..3 {
        for (name, m) in [("folded", &folding), ("alone", &alone)] {
            let (e0, t0, s0) = (exec_usec(), ticks(), cluster.node(0).calls("eval"));
            let folds0 = m.stats().releases;
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let cycles: u64 = thread::scope(|s| {
                let handles: Vec<_> = (0..CALLERS)
                    .map(|t| {
                        let m = Arc::clone(m);
                        s.spawn(move || {
                            let mut n = 0u64;
                            while Instant::now() < end {
                                let key = format!("tp:{name}:{rep}:{t}:{n}");
                                if let Ok(lock) = m.request(&key).ttl(TTL).once().acquire() {
                                    if m.unlock(lock).is_ok() {
                                        n += 1;
                                    }
                                }
                            }
                            n
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
            });
            let (e1, t1, s1) = (exec_usec(), ticks(), cluster.node(0).calls("eval"));
            let folds = m.stats().releases;
            let c = cycles.max(1) as f64;
            // INFO commandstats itself is counted: 5 calls per reading, negligible beside thousands of cycles.
            let row = format!(
                "{name:>6} rep {rep}: {:>7.0} cycles/s, servers' command time {:.2} µs/cycle, servers' CPU {:.1} \
                 µs/cycle, node 0 EVALSHA {:.3}/cycle, {:.1} releases per folded round",
                c / secs,
                (e1 - e0) as f64 / c,
                (t1 - t0) as f64 * 10_000.0 / c,
                (s1 - s0) as f64 / c,
                (folds.folded - folds0.folded) as f64
                    / (folds.folded_rounds - folds0.folded_rounds).max(1) as f64
            );
            eprintln!("{row}");
            assert!(cycles > 0 && e1 > e0, "{row}");
            if name == "alone" {
                assert_eq!(folds.folded, folds0.folded, "{row}");
            }
            rows.push(row);
        }
    }
    eprintln!("load after: {}", load().trim());
}
