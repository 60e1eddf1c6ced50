//! Batches of independent locks (`try_lock_batch`, `unlock_batch`) against real redis-server masters.

use crate::support;

use std::time::{Duration, Instant};

use muxlock::redlock::Config;
use muxlock::redlock::lua;
use support::locks;
use support::{Cluster, cmd};

const TTL: Duration = Duration::from_secs(10);

fn get(cluster: &Cluster, i: usize, key: &str) -> Vec<u8> {
    cluster.node(i).raw(&cmd(&["GET", key]))
}

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

#[test]
fn the_scripts_sha1s_are_the_servers() {
    let cluster = Cluster::start(1);
    for l in lua::ALL
        .into_iter()
        .chain(lua::QUEUED.into_iter().flat_map(|(q, s)| [q, s]))
    {
        let reply = cluster.node(0).raw(&cmd(&["SCRIPT", "LOAD", l.body]));
        assert_eq!(reply, bulk(l.sha1), "{}", l.body);
    }
}

/// 100 resources, every third held by another manager: each result says so, the others are locks held on a
/// majority, and nothing of the failed ones stays behind.
#[test]
fn a_batch_of_100_reports_each_result() {
    let cluster = Cluster::start(5);
    let (ours, theirs) = (
        locks::quick_manager_of(&cluster),
        locks::quick_manager_of(&cluster),
    );
    let names: Vec<String> = (0..100).map(|i| format!("job:{i}")).collect();
    let held: Vec<_> = names
        .iter()
        .step_by(3)
        .map(|r| theirs.request(r).ttl(TTL).acquire().expect("free"))
        .collect();
    let mut with_bad = names.clone();
    with_bad.push(String::new());
    let (sent, results) = (Instant::now(), ours.try_lock_batch(&with_bad, TTL));
    let returned = Instant::now();
    assert_eq!(results.len(), 101);
    assert!(results[100].as_ref().is_err_and(|e| e.is_config()));
    let mut got = Vec::new();
    for (i, r) in results.into_iter().take(100).enumerate() {
        let r = r.expect("nodes up");
        if i % 3 == 0 {
            assert!(r.is_none(), "{i} is held by another manager");
            // Still theirs on every node.
            let value = held[i / 3].value();
            for node in 0..5 {
                assert_eq!(get(&cluster, node, &names[i]), bulk(value));
            }
        } else {
            let lock = r.expect("free resource");
            assert_eq!(lock.resource(), names[i].as_bytes());
            // The lease counts from the batch's round, less the allowance (the drift's 100 ms of 10 s, and twice
            // the clock tolerance): from within the call, whatever the checks below it take.
            assert!(
                lock.valid_until() > sent + TTL - Duration::from_millis(500)
                    && lock.valid_until() < returned + TTL - Duration::from_millis(100),
                "a lease of {:?} from the call's start",
                lock.valid_until() - sent
            );
            for node in 0..5 {
                assert_eq!(get(&cluster, node, &names[i]), bulk(lock.value()));
            }
            got.push(lock);
        }
    }
    assert_eq!(got.len(), 66);
    // Values are distinct: each lock is its own.
    let mut values: Vec<_> = got.iter().map(|l| l.value().to_owned()).collect();
    values.sort();
    values.dedup();
    assert_eq!(values.len(), 66);
    // The same batch again: everything held now.
    for r in theirs.try_lock_batch(&names, TTL) {
        assert!(r.expect("nodes up").is_none());
    }
    let released = ours.unlock_batch(got);
    assert_eq!(released.len(), 66);
    for r in released {
        assert!(r.expect("released") >= 3);
    }
    for (i, name) in names.iter().enumerate() {
        if i % 3 != 0 {
            for node in 0..5 {
                assert_eq!(get(&cluster, node, name), b"$-1\r\n", "{name} on {node}");
            }
        }
    }
    // A duplicate within a batch: the first entry wins, the second finds it held.
    let twice = ours.try_lock_batch(&["dup", "dup"], TTL);
    assert!(twice[0].as_ref().is_ok_and(Option::is_some));
    assert!(twice[1].as_ref().is_ok_and(Option::is_none));
}

/// Two nodes of five down: the batch still gets its locks on the other three; three down: every entry is a
/// quorum error and nothing stays set on the nodes that answered.
#[test]
fn a_batch_survives_a_minority_down_and_cleans_up_without_a_majority() {
    let mut cluster = Cluster::start(5);
    let locks = locks::quick_manager_of(&cluster);
    let names: Vec<String> = (0..20).map(|i| format!("b:{i}")).collect();
    cluster.kill(3);
    cluster.kill(4);
    let got: Vec<_> = locks
        .try_lock_batch(&names, TTL)
        .into_iter()
        .map(|r| r.expect("a majority is up").expect("free"))
        .collect();
    for r in locks.unlock_batch(got) {
        assert_eq!(r.expect("released"), 3);
    }
    cluster.kill(2);
    for r in locks.try_lock_batch(&names, TTL) {
        let e = r.expect_err("no majority");
        assert!(e.is_quorum(), "{e}");
    }
    // The failed batch's keys are released on the nodes that had set them (asynchronously: wait a little).
    locks::wait_until(Duration::from_secs(2), "failed batch released", || {
        names
            .iter()
            .all(|n| (0..2).all(|node| get(&cluster, node, n) == b"$-1\r\n"))
    });
}

#[test]
fn unlock_batch_after_script_flush_and_oversized_batches() {
    let cluster = Cluster::start(3);
    let locks = locks::quick_manager_of(&cluster);
    let names: Vec<String> = (0..10).map(|i| format!("f:{i}")).collect();
    let got: Vec<_> = locks
        .try_lock_batch(&names, TTL)
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .collect();
    for i in 0..3 {
        assert_eq!(cluster.node(i).raw(&cmd(&["SCRIPT", "FLUSH"])), b"+OK\r\n");
    }
    for r in locks.unlock_batch(got) {
        assert!(r.expect("released after SCRIPT FLUSH") >= 2);
    }
    let small = locks::manager(
        cluster.urls(),
        Config::default()
            .with_restart_guard(false)
            .with_max_in_flight(8),
    );
    for r in small.try_lock_batch(&names, TTL) {
        assert!(r.is_err_and(|e| e.is_config()));
    }
}

/// The restart guard in every new round type: on freshly started nodes (indistinguishable from restarted ones)
/// no grant counts, so batches, sets, fenced and reentrant locks all fail for want of a quorum, and the outcome
/// says why; nothing they set stays behind for long (failed attempts release).
#[test]
fn every_new_round_counts_only_nodes_the_restart_guard_trusts() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(
        cluster.urls(),
        Config::default()
            .with_retry_count(0)
            .with_round_timeout(Duration::from_millis(500)),
    );
    let quarantined = |e: &muxlock::Error| {
        let text = e.to_string();
        e.is_quorum() && text.contains("not counted")
    };
    for r in locks.try_lock_batch(&["q1", "q2"], TTL) {
        let e = r.expect_err("no trusted node");
        assert!(quarantined(&e), "{e}");
    }
    let e = locks
        .request_all(["q1", "q2"])
        .ttl(TTL)
        .acquire()
        .unwrap_err();
    assert!(quarantined(&e), "{e}");
    let e = locks.request("q3").ttl(TTL).fenced().acquire().unwrap_err();
    assert!(quarantined(&e), "{e}");
    let owner = locks.owner().unwrap();
    let e = locks
        .request("q4")
        .ttl(TTL)
        .owned(&owner)
        .acquire()
        .unwrap_err();
    assert!(quarantined(&e), "{e}");
    locks::wait_until(Duration::from_secs(2), "failed attempts released", || {
        (0..3).all(|i| {
            cluster.node(i).raw(&cmd(&[
                "EXISTS",
                "q1",
                "q2",
                "q3",
                "q4",
                "muxlock:holds:q4",
            ])) == b":0\r\n"
        })
    });
}

/// A batch awaited as a task, one node of three hung (`SIGSTOP`): the two others decide every lock, so the batch
/// ends as soon as their replies are in, not at the round's deadline. With the clock check and without it alike:
/// the check's `TIME` after each node's request must not make the task wait for the hung node.
#[test]
fn an_async_batch_is_decided_by_a_majority_without_waiting_for_a_hung_node() {
    let mut cluster = Cluster::start(3);
    let rt = support::rt::current_thread();
    let round = Duration::from_secs(3);
    let names: Vec<String> = (0..10).map(|i| format!("hung:{i}")).collect();
    for check in [false, true] {
        let locks = locks::manager_of(&cluster, locks::one_attempt(round).with_clock_check(check));
        // Connections and scripts in place on every node first.
        let warm = rt.block_on(locks.try_lock_batch_async(&["warm"], TTL));
        let warm: Vec<_> = warm.into_iter().filter_map(|r| r.ok().flatten()).collect();
        rt.block_on(locks.unlock_batch_async(warm));
        cluster.pause(2);
        let t0 = std::time::Instant::now();
        let got = rt.block_on(locks.try_lock_batch_async(&names, TTL));
        let took = t0.elapsed();
        cluster.resume(2);
        let got: Vec<_> = got
            .into_iter()
            .map(|r| r.expect("a majority is up").expect("free"))
            .collect();
        assert!(
            took < round / 2,
            "clock check {check}: the batch took {took:?}, waiting for the hung node (round {round:?})"
        );
        for r in rt.block_on(locks.unlock_batch_async(got)) {
            r.expect("released");
        }
    }
}
