//! The lock API against real redis-server masters: 1, 3 and 5 nodes, failures, contention.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use muxlock::redlock::scripts::{EXTEND, EXTEND_SHA1, RELEASE, RELEASE_SHA1};
use muxlock::redlock::{Config, Error, LockManager, Outcome};
use support::locks;
use support::proxy::{Fault, FaultProxy};
use support::{Cluster, cmd};

const TTL: Duration = Duration::from_secs(10);

/// A manager without the restart guard: these servers have just started, and the guard would not count them for
/// a whole TTL (the guard has its own test below).
fn manager(cluster: &Cluster, config: Config) -> LockManager {
    locks::manager(cluster.urls(), config.with_restart_guard(false))
}

fn quick() -> Config {
    locks::one_attempt(Duration::from_millis(500))
}

/// The value stored under `key` on node `i`, read with a raw command.
fn get(cluster: &Cluster, i: usize, key: &str) -> Vec<u8> {
    cluster.node(i).raw(&cmd(&["GET", key]))
}

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

#[test]
fn lock_extend_unlock_on_1_3_and_5_nodes() {
    for n in [1, 3, 5] {
        let cluster = Cluster::start(n);
        let locks = manager(&cluster, quick());
        assert_eq!(locks.quorum(), n / 2 + 1);
        let mut lock = locks
            .request("res")
            .ttl(TTL)
            .acquire()
            .expect("free resource");
        assert_eq!(lock.resource(), b"res");
        assert_eq!(lock.value().len(), 40);
        assert!(
            lock.is_valid()
                && lock.validity() > TTL - Duration::from_secs(1)
                && lock.validity() <= TTL
        );
        // The key holds our value on (at least) a majority; normally on all.
        let holding = (0..n)
            .filter(|&i| get(&cluster, i, "res") == bulk(lock.value()))
            .count();
        assert!(holding >= locks.quorum(), "{holding} of {n}");
        // A second client cannot take it.
        let other = manager(&cluster, quick());
        assert!(
            other
                .request("res")
                .ttl(TTL)
                .once()
                .acquire()
                .expect_err("nodes up")
                .is_held()
        );
        let err = other.request("res").ttl(TTL).acquire().expect_err("held");
        assert!(err.is_held(), "{err}");
        // Extend: new validity from now, counted.
        std::thread::sleep(Duration::from_millis(20));
        let before = lock.valid_until();
        locks
            .extend(&mut lock, Duration::from_secs(20))
            .expect("extend");
        assert!(lock.valid_until() > before + Duration::from_secs(9));
        assert_eq!(lock.extensions(), 1);
        let pttl = cluster.node(0).raw(&cmd(&["PTTL", "res"]));
        let pttl: u64 = std::str::from_utf8(&pttl[1..pttl.len() - 2])
            .unwrap()
            .parse()
            .unwrap();
        assert!(pttl > 15_000, "pttl {pttl}");
        // Release: a majority confirmed; then the other client gets it.
        let released = locks.unlock(lock).expect("release");
        assert!(released >= locks.quorum(), "{released}");
        let lock2 = other
            .request("res")
            .ttl(TTL)
            .once()
            .acquire()
            .expect("free again");
        let released = other.unlock(lock2).expect("release");
        assert!((n / 2 + 1..=n).contains(&released), "{released}");
    }
}

#[test]
fn an_expired_lock_cannot_be_released_or_extended_and_spares_the_next_holder() {
    let cluster = Cluster::start(3);
    let locks = manager(&cluster, quick());
    let mut old = locks
        .request("res")
        .ttl(Duration::from_millis(100))
        .acquire()
        .expect("lock");
    std::thread::sleep(Duration::from_millis(150));
    assert!(!old.is_valid());
    assert_eq!(old.validity(), Duration::ZERO);
    assert_eq!(locks.extend(&mut old, TTL), Err(Error::Expired));
    let next = locks
        .request("res")
        .ttl(TTL)
        .acquire()
        .expect("expired, so free");
    assert_ne!(
        next.value(),
        old.value(),
        "values are unique per acquisition"
    );
    // The old holder's release deletes nothing: every node answers "not ours", and the caller hears the lock
    // was lost (its work may have overlapped the next holder's).
    let err = locks.unlock(old).unwrap_err();
    assert!(
        matches!(&err, Error::LockLost(r) if r.taken() == 3 && r.granted() == 0),
        "{err}"
    );
    assert!(err.is_lost());
    let report = err.report().expect("a report");
    assert!(
        report.nodes().iter().all(|(_, o)| *o == Outcome::NotHeld),
        "a compare tells no absent key from another holder's: {report:?}"
    );
    assert!(
        err.to_string().contains("another holder's, or gone"),
        "{err}"
    );
    for i in 0..3 {
        assert_eq!(get(&cluster, i, "res"), bulk(next.value()), "node {i}");
    }
    // An acquisition refused by a key that exists is told as exactly that.
    let refused = locks
        .request("res")
        .ttl(TTL)
        .once()
        .acquire()
        .expect_err("held");
    let report = refused.report().expect("a report");
    assert!(
        report.taken() >= 2
            && report
                .nodes()
                .iter()
                .all(|(_, o)| matches!(o, Outcome::Taken | Outcome::NotAwaited)),
        "{report:?}"
    );
    assert!(
        refused.to_string().contains("held by another holder"),
        "{refused}"
    );
    assert!(locks.unlock(next).expect("release") >= 2);
}

#[test]
fn an_extension_never_recreates_a_lost_key() {
    let cluster = Cluster::start(3);
    let locks = manager(&cluster, quick());
    let mut lock = locks.request("res").ttl(TTL).acquire().expect("lock");
    // The keys vanish behind our back (eviction, FLUSHALL, failover): the extension reports the loss.
    cluster.flush_all();
    let err = locks.extend(&mut lock, TTL).expect_err("lost");
    assert!(matches!(err, Error::LockLost(_)), "{err}");
    assert!(
        !err.to_string().contains("held by another holder"),
        "no node holds the key, for anybody: {err}"
    );
    for i in 0..3 {
        assert_eq!(get(&cluster, i, "res"), b"$-1\r\n".to_vec());
    }
}

#[test]
fn two_of_five_down_still_locks_three_down_is_a_quorum_error_in_time() {
    let mut cluster = Cluster::start(5);
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(200));
    let locks = manager(&cluster, config);
    locks
        .unlock(locks.request("warm").ttl(TTL).acquire().expect("all up"))
        .expect("release");
    cluster.kill(0);
    cluster.kill(3);
    let lock = locks
        .request("a")
        .ttl(TTL)
        .acquire()
        .expect("3 of 5 are enough");
    locks.unlock(lock).expect("release");
    cluster.kill(4);
    let started = Instant::now();
    let err = locks.request("b").ttl(TTL).acquire().expect_err("2 of 5");
    assert!(
        started.elapsed() < Duration::from_millis(200) + Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    let Error::Quorum(report) = &err else {
        panic!("{err}")
    };
    assert_eq!(report.quorum(), 3);
    assert_eq!(report.nodes().len(), 5);
    for i in [0, 3, 4] {
        assert!(matches!(report.nodes()[i].1, Outcome::Failed(_)), "{err}");
    }
    // The message names every node and what happened to it.
    let msg = err.to_string();
    for node in cluster.urls() {
        assert!(msg.contains(&node), "{msg}");
    }
    assert!(
        msg.contains("granted") && (msg.contains("refused") || msg.contains("closed")),
        "{msg}"
    );
}

#[test]
fn a_hung_node_does_not_slow_acquisition_and_a_restarted_node_is_used_again() {
    let mut cluster = Cluster::start(5);
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_secs(2));
    let locks = manager(&cluster, config);
    locks
        .unlock(locks.request("warm").ttl(TTL).acquire().expect("all up"))
        .expect("release");
    cluster.pause(2);
    for i in 0..20 {
        let started = Instant::now();
        let lock = locks
            .request(format!("r{i}"))
            .ttl(TTL)
            .acquire()
            .expect("4 of 5 answer");
        locks.unlock(lock).expect("release");
        // Far below the 2 s round deadline: nobody waited for the hung node.
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "round {i}: {:?}",
            started.elapsed()
        );
    }
    cluster.resume(2);
    cluster.kill(1);
    cluster.restart(1);
    // Used again without the user doing anything: within a bounded time, a lock lands on node 1 too.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let lock = locks.request("back").ttl(TTL).acquire().expect("lock");
        std::thread::sleep(Duration::from_millis(20)); // slower replies land after the quorum
        let on_node_1 = get(&cluster, 1, "back") == bulk(lock.value());
        locks.unlock(lock).expect("release");
        if on_node_1 {
            break;
        }
        assert!(Instant::now() < until, "node 1 never used again");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A split of the live nodes that only a hung node could decide (another holder on 2 nodes of 5, this caller
/// granted 2, the fifth paused) ends as soon as the votes show it, once that node is seen silent for a round
/// timeout; the first attempt after the pause, whose votes come before the node has been silent that long (and
/// nothing looks again before the deadline), waits the round out. What the attempts set is released behind them,
/// on the paused node too.
#[test]
fn a_split_only_a_hung_node_could_decide_ends_without_waiting_for_it() {
    let mut cluster = Cluster::start(5);
    let round = Duration::from_millis(800);
    let locks = manager(&cluster, locks::one_attempt(round));
    locks
        .unlock(locks.request("warm").ttl(TTL).acquire().expect("all up"))
        .expect("release");
    for i in 0..2 {
        cluster
            .node(i)
            .raw(&cmd(&["SET", "split", "theirs", "PX", "60000"]));
    }
    cluster.pause(4);
    // One attempt, refused as held (the split's verdict): how long it took.
    let held_after = |which: &str| {
        let started = Instant::now();
        let got = locks.request("split").ttl(TTL).acquire();
        assert!(matches!(&got, Err(e) if e.is_held()), "{which}: {got:?}");
        started.elapsed()
    };
    let first_took = held_after("the first attempt");
    assert!(
        first_took >= round,
        "the first attempt did not wait for a node silent for less than a round: {first_took:?}"
    );
    // The node has been silent since just after the first attempt began, a round before its end: a margin, so
    // that the next attempts' judgement does not hang on the microseconds between that start and its request.
    std::thread::sleep(round / 8);
    for i in 0..5 {
        let took = held_after(&format!("attempt {i}"));
        assert!(
            took < round / 2,
            "attempt {i} waited for the silent node: {took:?}"
        );
    }
    // Each failed attempt's release goes out unawaited.
    locks::wait_until(Duration::from_secs(2), "nodes 2 and 3 released", || {
        (2..4).all(|i| get(&cluster, i, "split") == b"$-1\r\n")
    });
    cluster.resume(4);
    // Node 4 runs each attempt's SET NX, then its release: the key is gone there once it has caught up.
    locks::wait_until(
        Duration::from_secs(5),
        "node 4 released every attempt's key",
        || get(&cluster, 4, "split") == b"$-1\r\n",
    );
    for i in 0..2 {
        assert_eq!(get(&cluster, i, "split"), bulk("theirs"), "node {i}");
    }
}

/// Three nodes, node `far` reached through a fault proxy (no fault yet), and a manager of one attempt per call
/// with rounds of `round`.
fn with_far_node(far: usize, round: Duration) -> (Cluster, FaultProxy, LockManager) {
    let cluster = Cluster::start(3);
    let proxy = FaultProxy::start(cluster.addrs()[far]);
    let mut urls = cluster.urls();
    urls[far] = proxy.url();
    let locks = locks::manager(urls, locks::one_attempt(round));
    (cluster, proxy, locks)
}

/// A node that refused an acquisition because its key was still held is asked again when the votes split
/// (node 0 granted, node 1 "taken", node 2 paused): the holder's key leaves node 1 between the two asks (a
/// release on its way when a woken waiter's first request got there), and the second ask's grant decides the
/// split at once instead of leaving it to the paused node for the whole round.
#[test]
fn a_split_s_taken_vote_is_asked_again_and_its_grant_decides() {
    let round = Duration::from_secs(2);
    let (mut cluster, far, locks) = with_far_node(1, round);
    locks
        .unlock(locks.request("warm").ttl(TTL).acquire().expect("all up"))
        .expect("release");
    std::thread::sleep(Duration::from_millis(100)); // the warm-up's last replies are in
    far.set(Fault::Latency(Duration::from_millis(50)));
    cluster.pause(2);
    // What one ask costs node 1 (the command, and the clock check's `TIME`s around it).
    let requests = || locks.stats().nodes[1].net.requests;
    let before = requests();
    let one = locks
        .request("one")
        .ttl(TTL)
        .acquire()
        .expect("granted by nodes 0 and 1");
    let per_ask = requests() - before;
    locks.unlock(one).expect("release");
    // Held on node 1 for 80 ms: the first ask gets there at about 50 ms, the second at about 150.
    cluster
        .node(1)
        .raw(&cmd(&["SET", "asked", "theirs", "PX", "80"]));
    let before = requests();
    let started = Instant::now();
    let got = locks.request("asked").ttl(TTL).acquire();
    let took = started.elapsed();
    let asked = requests() - before;
    cluster.resume(2);
    let lock = got.expect("granted by nodes 0 and 1");
    assert_eq!(asked, 2 * per_ask, "node 1 was asked twice");
    assert!(
        took < round / 4,
        "the split waited for the paused node: {took:?}"
    );
    locks.unlock(lock).expect("release");
}

/// The split of [`a_split_s_taken_vote_is_asked_again_and_its_grant_decides`] in each scripted kind's round
/// (the pipeline's second request, `Engine::acquire_with`): a fenced lock, a set, an owned hold and a writer, each
/// refused on node 1 by another holder's key that leaves it between the two asks, node 2 paused. Each is granted
/// by nodes 0 and 1 at once, not after the paused node's silence (the 2 s round).
#[test]
fn a_split_s_taken_vote_is_asked_again_in_every_scripted_kind() {
    let round = Duration::from_secs(2);
    let (mut cluster, far, locks) = with_far_node(1, round);
    let owner = locks.owner().expect("owner");
    // Every kind once with all nodes up: connections set up, scripts known.
    for warm in [
        locks.request("warm-f").ttl(TTL).fenced(),
        locks.request_all(["warm-s", "warm-t"]).ttl(TTL),
        locks.request("warm-o").ttl(TTL).owned(&owner),
        locks.request("warm-w").ttl(TTL).write(),
    ] {
        locks
            .unlock(warm.acquire().expect("all up"))
            .expect("release");
    }
    std::thread::sleep(Duration::from_millis(100)); // the warm-up's last replies are in
    far.set(Fault::Latency(Duration::from_millis(50)));
    cluster.pause(2);
    let kinds = [
        (
            "fenced",
            "f-asked",
            locks.request("f-asked").ttl(TTL).fenced(),
        ),
        (
            "set",
            "s-asked-b",
            locks.request_all(["s-asked-a", "s-asked-b"]).ttl(TTL),
        ),
        (
            "owned",
            "o-asked",
            locks.request("o-asked").ttl(TTL).owned(&owner),
        ),
        (
            "writer",
            "{w-asked}:write",
            locks.request("w-asked").ttl(TTL).write(),
        ),
    ];
    let mut took = Vec::new();
    for (kind, key, request) in kinds {
        // Held on node 1 for 80 ms: the first ask gets there at about 50 ms, the second at about 150.
        cluster
            .node(1)
            .raw(&cmd(&["SET", key, "theirs", "PX", "80"]));
        let started = Instant::now();
        let got = request.acquire();
        took.push((kind, started.elapsed(), got.is_ok()));
        if let Ok(lock) = got {
            locks.unlock(lock).expect("release");
        }
    }
    cluster.resume(2);
    for (kind, took, granted) in took {
        assert!(granted, "{kind}: not granted by nodes 0 and 1");
        assert!(
            took < round / 4,
            "{kind}: the split waited for the paused node: {took:?}"
        );
    }
}

/// A failed attempt releases only where it may have set the key: nodes that refused it (another holder's key)
/// are sent no release, nodes that granted it are (the key is gone there). A plain lock (`SET NX`) and a writer
/// (a scripted kind's round, whose refusals are asked again), each held by another value on nodes 0 to 2 of 5 and
/// free on 3 and 4. The release is the one request here that reads the key (`GET` inside its script; the
/// acquisitions set it, `inspect` reads it once on every node).
#[test]
fn a_failed_attempt_releases_only_where_the_key_was_set() {
    let cluster = Cluster::start(5);
    let locks = manager(&cluster, quick());
    let warm = locks.request("warm").ttl(TTL).write().acquire();
    locks.unlock(warm.expect("all up")).expect("release");
    // Behind every warm-up reply.
    locks.inspect("warm").expect("every node answers");
    for (kind, name, key) in [
        ("plain", "p-held", "p-held"),
        ("writer", "w-held", "{w-held}:write"),
    ] {
        for i in 0..3 {
            cluster
                .node(i)
                .raw(&cmd(&["SET", key, "theirs", "PX", "60000"]));
        }
        let before: Vec<u64> = (0..5).map(|i| cluster.node(i).calls("get")).collect();
        let request = match kind {
            "plain" => locks.request(name).ttl(TTL),
            _ => locks.request(name).ttl(TTL).write(),
        };
        let err = request.acquire().expect_err("held on 3 of 5");
        assert!(err.is_held(), "{kind}: {err}");
        // Behind the clean-up on every connection: it has run wherever it was sent.
        locks.inspect(key).expect("every node answers");
        let reads: Vec<u64> = (0..5)
            .map(|i| cluster.node(i).calls("get") - before[i])
            .collect();
        let inspect = reads[0];
        assert_eq!(
            reads,
            [inspect, inspect, inspect, inspect + 1, inspect + 1],
            "{kind}: a release only on the nodes that granted"
        );
        for i in 0..3 {
            assert_eq!(get(&cluster, i, key), bulk("theirs"), "{kind}: node {i}");
        }
        for i in 3..5 {
            assert_eq!(get(&cluster, i, key), b"$-1\r\n", "{kind}: node {i}");
        }
    }
}

/// A split's "taken" vote whose second ask gets no answer within the round is still the holder's: a fenced
/// acquisition (a round that is not patient) granted by node 0, refused by node 1 behind a 200 ms round trip (its
/// second ask would be answered at about 400 ms, past the 300 ms round), node 2 paused (undecided when node 1's
/// vote comes, failed at the round's end), is held (the holder on node 1 and node 2's failure make the majority
/// impossible; the failure alone would not), not unavailable.
#[test]
fn a_taken_vote_asked_again_without_an_answer_in_the_round_is_still_held() {
    let (mut cluster, far, locks) = with_far_node(1, Duration::from_millis(300));
    locks
        .unlock(
            locks
                .request("warm")
                .ttl(TTL)
                .fenced()
                .acquire()
                .expect("all up"),
        )
        .expect("release");
    cluster
        .node(1)
        .raw(&cmd(&["SET", "held-far", "theirs", "PX", "10000"]));
    cluster.pause(2);
    far.set(Fault::Latency(Duration::from_millis(100)));
    let got = locks.request("held-far").ttl(TTL).fenced().acquire();
    far.set(Fault::None);
    cluster.resume(2);
    match got {
        Err(Error::Held(report)) => assert_eq!(report.taken(), 1, "{report:?}"),
        other => panic!("expected Held: {other:?}"),
    }
}

/// A node whose link slowed down (a round trip of 0.1 ms in its history, 700 ms now, of a 2 s round) answers
/// every request within the round, and is not silent: a split it decides (another holder on node 1, this caller
/// granted on node 0) waits for its vote, also while an earlier request of this caller to it is still on its way
/// (sent 580 ms before the attempt, its reply due at 700 ms). A node is silent only once it has gone without a
/// sign of life for as long as a round waits for one, as a patient round judges it, whatever its round trips
/// so far.
#[test]
fn a_node_on_a_slow_link_decides_a_split_while_an_earlier_request_to_it_is_on_its_way() {
    let (cluster, far, locks) = with_far_node(2, Duration::from_secs(2));
    locks
        .unlock(locks.request("warm").ttl(TTL).acquire().expect("all up"))
        .expect("release");
    std::thread::sleep(Duration::from_millis(100)); // the warm-up's last replies are in
    far.set(Fault::Latency(Duration::from_millis(350)));
    cluster
        .node(1)
        .raw(&cmd(&["SET", "split", "theirs", "PX", "60000"]));
    // Granted by nodes 0 and 1 at once; node 2's reply comes 700 ms after the request.
    let sent = Instant::now();
    let other = locks
        .request("other")
        .ttl(TTL)
        .acquire()
        .expect("nodes 0 and 1 grant");
    std::thread::sleep(Duration::from_millis(580).saturating_sub(sent.elapsed()));
    let started = Instant::now();
    let split = locks.request("split").ttl(TTL).acquire();
    let took = started.elapsed();
    assert!(
        split.is_ok(),
        "node 2 grants within the round, {took:?} after the attempt began: {split:?}"
    );
    for lock in [other].into_iter().chain(split) {
        locks.unlock(lock).expect("release");
    }
}

#[test]
fn contention_loses_no_update() {
    let cluster = Cluster::start(3);
    let config = Config::default()
        .with_retry_count(10_000)
        .with_retry_delay(Duration::from_millis(1))
        .with_retry_jitter(Duration::from_millis(1))
        .with_round_timeout(Duration::from_millis(500));
    let managers = [
        Arc::new(manager(&cluster, config.clone())),
        Arc::new(manager(&cluster, config)),
    ];
    let counter = Arc::new(AtomicU64::new(0));
    const THREADS: usize = 8;
    const ROUNDS: u64 = 250;
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let locks = Arc::clone(&managers[t % 2]);
            let counter = Arc::clone(&counter);
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    let lock = locks.request("counter").ttl(TTL).acquire().expect("lock");
                    // Non-atomic read-modify-write, with a yield in the middle to invite a lost update.
                    let v = counter.load(Ordering::SeqCst);
                    std::thread::yield_now();
                    counter.store(v + 1, Ordering::SeqCst);
                    assert!(lock.is_valid());
                    locks.unlock(lock).expect("release");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker");
    }
    assert_eq!(counter.load(Ordering::SeqCst), THREADS as u64 * ROUNDS);
}

#[test]
fn script_hashes_match_the_server_and_noscript_falls_back_to_eval() {
    let cluster = Cluster::start(3);
    for (script, sha) in [(RELEASE, RELEASE_SHA1), (EXTEND, EXTEND_SHA1)] {
        assert_eq!(
            cluster.node(0).raw(&cmd(&["SCRIPT", "LOAD", script])),
            bulk(sha)
        );
    }
    let locks = manager(&cluster, quick());
    let mut lock = locks.request("res").ttl(TTL).acquire().expect("lock");
    // The scripts vanish from the servers' caches: EVALSHA gets NOSCRIPT, EVAL takes over.
    for i in 0..3 {
        assert_eq!(
            cluster.node(i).raw(&cmd(&["SCRIPT", "FLUSH"])),
            b"+OK\r\n".to_vec()
        );
    }
    locks
        .extend(&mut lock, TTL)
        .expect("extend after SCRIPT FLUSH");
    assert!(locks.unlock(lock).expect("release after SCRIPT FLUSH") >= 2);
}

#[test]
fn bad_configuration_is_refused_at_build_time() {
    let cluster = Cluster::start(1);
    let url = cluster.urls()[0].clone();
    let cases: Vec<(Vec<String>, Config, &str)> = vec![
        (vec![], Config::default(), "no nodes"),
        (
            vec!["redis://h:notaport".into()],
            Config::default(),
            "port is not a number",
        ),
        (
            vec![url.clone(), url.clone()],
            Config::default(),
            "listed twice",
        ),
        (
            vec![url.clone(), url.replace("127.0.0.1", "localhost")],
            Config::default(),
            "listed twice",
        ),
        (
            vec![url.clone()],
            Config::default().with_ttl(Duration::ZERO),
            "ttl",
        ),
        (
            vec![url.clone()],
            Config::default().with_drift_factor(-1.0),
            "drift_factor",
        ),
    ];
    for (nodes, config, want) in cases {
        let err = LockManager::builder()
            .nodes(nodes.clone())
            .config(config)
            .build()
            .expect_err("invalid");
        assert!(err.is_config(), "{nodes:?}: {err}");
        assert!(err.to_string().contains(want), "{nodes:?}: {err}");
    }
    let locks = manager(&cluster, Config::default());
    for (resource, ttl, want) in [
        ("", TTL, "resource name is empty"),
        ("r", Duration::ZERO, "ttl must be more than zero"),
        (
            "r",
            Config::MAX_TTL + Duration::from_secs(1),
            "longer than the maximum",
        ),
    ] {
        let err = locks
            .request(resource)
            .ttl(ttl)
            .once()
            .acquire()
            .expect_err("invalid");
        assert!(err.is_config() && err.to_string().contains(want), "{err}");
    }
    // Resource names are bytes: not UTF-8 is fine.
    let lock = locks
        .request([0xff, 0xfe, 0x00])
        .ttl(TTL)
        .once()
        .acquire()
        .expect("free");
    assert_eq!(lock.resource(), &[0xff, 0xfe, 0x00]);
    assert_eq!(locks.unlock(lock), Ok(1));
}

#[test]
fn the_restart_guard_ignores_grants_of_fresh_and_restarted_nodes_until_the_window_passed() {
    let mut cluster = Cluster::start(3);
    let window = Duration::from_millis(1500);
    let config = Config::default()
        .with_retry_count(0)
        .with_restart_window(window);
    assert!(config.restart_guard(), "on by default");
    let locks = LockManager::builder()
        .nodes(cluster.urls())
        .config(config)
        .build()
        .expect("valid");
    let ttl = Duration::from_millis(500);
    // The servers are seconds old: their grants do not count.
    let err = locks
        .request("r")
        .ttl(ttl)
        .acquire()
        .expect_err("quarantined");
    let report = err.report().expect("a report");
    // Each node that answered granted, but not one counted; two were enough to make a majority impossible.
    let quarantined = report
        .nodes()
        .iter()
        .filter(|(_, o)| *o == Outcome::Quarantined)
        .count();
    assert!(quarantined >= 2 && report.granted() == 0, "{err}");
    assert!(err.to_string().contains("not counted yet"), "{err}");
    // Once they have been up longer than the window (uptime counts whole seconds), they do.
    let until = Instant::now() + Duration::from_secs(10);
    let lock = loop {
        match locks.request("r").ttl(ttl).acquire() {
            Ok(lock) => break lock,
            Err(e) => assert!(Instant::now() < until, "never trusted: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    locks.unlock(lock).expect("release");
    // Node 0 restarts without persistence: it is not trusted again. With node 1 down too, the majority would
    // need node 0's grant, so there is no lock, and the report says why.
    cluster.restart(0);
    cluster.kill(1);
    let until = Instant::now() + Duration::from_secs(5);
    let report = loop {
        let err = locks
            .request("r")
            .ttl(ttl)
            .acquire()
            .expect_err("no majority without node 0");
        let report = err.report().expect("a report").clone();
        // The first attempt may still find the old connection broken; wait for the reconnect.
        if report.nodes()[0].1 == Outcome::Quarantined {
            break report;
        }
        assert!(Instant::now() < until, "node 0 never reconnected: {err}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        matches!(report.nodes()[1].1, Outcome::Failed(_)),
        "{report}"
    );
}

#[test]
fn public_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<LockManager>();
    assert_send_sync::<muxlock::Lock>();
    assert_send_sync::<Error>();
    assert_send_sync::<muxlock::net::Fanout>();
}

/// What a caller matches on is at the crate root, and errors keep what caused them: a logging crate walking
/// `source()` reaches the address error or the OS error.
#[test]
fn errors_keep_their_sources_and_their_types_are_at_the_root() {
    use muxlock::{AddrError, NodeAddr, NodeError, Outcome, Report};
    use std::error::Error as _;

    let err = LockManager::new(["redis://host:99999"]).expect_err("a bad port");
    assert!(err.is_config(), "{err}");
    let addr = err
        .source()
        .and_then(|s| s.source())
        .and_then(|s| s.downcast_ref::<AddrError>())
        .expect("the address error is the source of the config error");
    assert_eq!(addr.reason(), "port is not a number from 1 to 65535");

    // Nothing listens on port 1: the report names the node, and its outcome is a `NodeError` at the root.
    let locks = support::locks::manager(["127.0.0.1:1"], quick());
    let err = locks
        .request("r")
        .ttl(TTL)
        .once()
        .acquire()
        .expect_err("no node");
    let report: &Report = err.report().expect("a report");
    let (node, outcome): &(NodeAddr, Outcome) = &report.nodes()[0];
    assert_eq!(node.port(), 1);
    assert_eq!(*outcome, Outcome::Failed(NodeError::Refused));

    // An OS error inside a node error is kept whole, comparable and cloneable like the error around it.
    let reset = std::io::Error::from_raw_os_error(104); // ECONNRESET
    let node_err = NodeError::Io(reset.into());
    let os = node_err
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the io::Error is the source");
    assert_eq!(os.raw_os_error(), Some(104));
    assert_eq!(node_err.clone(), node_err);
}

#[test]
fn huge_timeouts_are_accepted_without_overflow() {
    // The longest accepted (a year; longer is refused by `Config::validate`): deadlines saturate.
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Config::MAX_TTL)
        .with_connect_timeout(Config::MAX_TTL);
    // Nothing listens on port 1: refused at once, whatever the timeouts.
    let locks = LockManager::builder()
        .node("127.0.0.1:1")
        .config(config)
        .build()
        .expect("valid");
    let err = locks
        .request("r")
        .ttl(TTL)
        .once()
        .acquire()
        .expect_err("refused");
    assert!(err.is_quorum(), "{err}");
}

/// An even number of nodes is allowed: the majority is N/2 + 1, so 4 nodes tolerate one failure, like 3.
#[test]
fn an_even_number_of_nodes_needs_n_over_2_plus_1() {
    let mut cluster = Cluster::start(4);
    let locks = manager(&cluster, quick());
    assert_eq!(locks.quorum(), 3);
    cluster.kill(0);
    let lock = locks
        .request("even")
        .ttl(TTL)
        .acquire()
        .expect("3 of 4 are a majority");
    locks.unlock(lock).expect("release");
    cluster.kill(1);
    let err = locks
        .request("even")
        .ttl(TTL)
        .acquire()
        .expect_err("2 of 4 are not");
    assert!(err.is_quorum(), "{err}");
    // Decided as soon as two failures made 3 grants impossible.
    assert!(
        err.to_string().contains("of 4 nodes granted, 3 needed"),
        "{err}"
    );
}

/// The longest timeouts `Config::validate` accepts never make a call panic on `Duration` arithmetic
/// (`hold` with `round_timeout` = `Duration::MAX`, say); longer ones are refused when the manager is built.
#[test]
fn the_longest_accepted_timeouts_never_panic_and_longer_ones_are_refused() {
    let cluster = Cluster::start(1);
    let max = Config::MAX_TTL;
    let config = Config::default()
        .with_round_timeout(max)
        .with_connect_timeout(max)
        .with_hung_timeout(max)
        .with_retry_delay(Duration::from_millis(1))
        .with_retry_count(0)
        .with_restart_guard(false);
    let locks = locks::manager(cluster.urls(), config);
    let err = locks
        .request("r")
        .ttl(Duration::from_secs(10))
        .hold()
        .unwrap_err();
    assert!(err.is_config(), "{err}");
    let lock = locks
        .request("r")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_millis(100))
        .acquire()
        .expect("a free lock");
    locks.unlock(lock).expect("released");
    let built = LockManager::builder()
        .nodes(cluster.urls())
        .config(Config::default().with_round_timeout(Duration::MAX))
        .build();
    assert!(built.unwrap_err().is_config());
}
