//! Async waiters in the nodes' queue (the hand-off across processes, for tasks): several
//! managers (each with its own connections and tracker, as separate processes have) run tasks that wait on one
//! resource with `.wait(..).acquire_async()`, on real redis-servers. Every grant is timestamped on
//! CLOCK_MONOTONIC and checked for overlap; the queue on the nodes is sampled to show the tasks wait in it; a
//! waiting future dropped leaves the queue at once (the next waiter is not held up for an entry's lease).

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muxlock::{Config, LockManager};
use support::checker::{Hold, mono_ns, overlaps};
use support::rt::two_workers;
use support::wire::cmd;
use support::{Cluster, locks};

fn config() -> Config {
    Config::default()
        .with_restart_guard(false)
        .with_round_timeout(Duration::from_millis(200))
        .with_retry_delay(Duration::from_millis(20))
        .with_retry_jitter(Duration::from_millis(10))
}

/// How many entries node `i`'s queue for `resource` has.
fn queued(cluster: &Cluster, i: usize, resource: &str) -> i64 {
    let reply = cluster.nodes()[i].raw(&cmd(&["ZCARD", &format!("muxlock:queue:{resource}")]));
    String::from_utf8_lossy(&reply)
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap_or(-1)
}

/// 6 managers, a task each on one 2-worker runtime, loop for 2 s on one resource: wait (at most 3 s), hold
/// 200 µs, release. No overlap; the lock goes round (fair, not back to the releaser more than its share); no
/// quorum error; and the nodes' queue held waiters meanwhile (the tasks wait across processes, not each in its
/// own process' line).
#[test]
fn tasks_of_several_managers_share_one_resource_in_turn_through_the_queue() {
    let cluster = Cluster::start(5);
    let managers: Vec<LockManager> = (0..6)
        .map(|_| locks::manager(cluster.urls(), config()))
        .collect();
    let holds = Arc::new(Mutex::new(Vec::<Hold>::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let until = Instant::now() + Duration::from_secs(2);
    let rt = two_workers();
    let tasks: Vec<_> = managers
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let (m, holds, errors) = (m.clone(), Arc::clone(&holds), Arc::clone(&errors));
            rt.spawn(async move {
                while Instant::now() < until {
                    let got = m
                        .request("handoff")
                        .ttl(Duration::from_secs(2))
                        .wait(Duration::from_secs(3))
                        .acquire_async()
                        .await;
                    match got {
                        Ok(lock) => {
                            let start = mono_ns();
                            let spin = Instant::now();
                            while spin.elapsed() < Duration::from_micros(200) {
                                std::hint::spin_loop();
                            }
                            let end = mono_ns();
                            if lock.is_valid() {
                                holds.lock().expect("holds").push(Hold {
                                    resource: "handoff".into(),
                                    holder: format!("m{i}"),
                                    start,
                                    end,
                                });
                            }
                            let _ = m.unlock_async(lock).await;
                        }
                        Err(e) => errors.lock().expect("errors").push(e.to_string()),
                    }
                }
            })
        })
        .collect();
    // Meanwhile: how long the queue on node 0 was seen to hold more than one waiter.
    let mut most = 0;
    while Instant::now() < until {
        most = most.max(queued(&cluster, 0, "handoff"));
        std::thread::sleep(Duration::from_millis(5));
    }
    rt.block_on(async {
        for t in tasks {
            t.await.expect("task");
        }
    });
    let holds = holds.lock().expect("holds").clone();
    let errors = errors.lock().expect("errors").clone();
    let per: Vec<usize> = (0..6)
        .map(|i| holds.iter().filter(|h| h.holder == format!("m{i}")).count())
        .collect();
    let mut sorted: Vec<&Hold> = holds.iter().collect();
    sorted.sort_by_key(|h| h.start);
    let same = sorted
        .windows(2)
        .filter(|w| w[0].holder == w[1].holder)
        .count();
    let back = same as f64 / sorted.len().saturating_sub(1).max(1) as f64;
    println!(
        "{} grants {per:?}, back to the releaser {:.0} %, most queued on node 0: {most}, errors {errors:?}",
        holds.len(),
        100.0 * back
    );
    assert!(overlaps(&holds).is_empty(), "overlapping holds");
    assert!(errors.is_empty(), "errors: {errors:?}");
    assert!(holds.len() > 100, "too few grants");
    let (min, max) = (per.iter().min().copied(), per.iter().max().copied());
    assert!(
        min.unwrap_or(0) as f64 >= 0.5 * max.unwrap_or(1) as f64,
        "unfair: {per:?}"
    );
    assert!(back <= 1.0 / 6.0 + 0.2, "greedy: {back:.2}");
    assert!(most >= 2, "the tasks never waited in the nodes' queue");
}

/// A waiting future dropped (a timeout around it) leaves the nodes' queue at once: its entry is gone from every
/// node, and the next waiter (another manager) is granted as soon as the holder releases, not one entry lease
/// later.
#[test]
fn a_dropped_waiting_future_leaves_the_nodes_queue() {
    let cluster = Cluster::start(3);
    let holder = locks::manager(cluster.urls(), config());
    let quitter = locks::manager(cluster.urls(), config());
    let next = locks::manager(cluster.urls(), config());
    let rt = two_workers();
    rt.block_on(async {
        let lock = holder
            .request("q")
            .ttl(Duration::from_secs(10))
            .acquire_async()
            .await
            .expect("held");
        let wait = quitter
            .request("q")
            .ttl(Duration::from_secs(2))
            .wait(Duration::from_secs(10))
            .acquire_async();
        let cut = tokio::time::timeout(Duration::from_millis(300), wait).await;
        assert!(cut.is_err(), "still waiting when cut: {cut:?}");
        // The leave is sent as the future drops, unawaited: a moment for it to land.
        let deadline = Instant::now() + Duration::from_secs(1);
        while (0..3).any(|i| queued(&cluster, i, "q") != 0) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let left: Vec<i64> = (0..3).map(|i| queued(&cluster, i, "q")).collect();
        assert_eq!(left, [0, 0, 0], "entries left in the queue");
        // The next waiter is not held up behind the one that left.
        let next_wait = {
            let next = next.clone();
            tokio::spawn(async move {
                let asked = Instant::now();
                let got = next
                    .request("q")
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(5))
                    .acquire_async()
                    .await;
                (got, asked)
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        holder.unlock_async(lock).await.expect("released");
        let (got, _) = next_wait.await.expect("task");
        let lock = got.expect("granted");
        let after = released.elapsed();
        println!("granted {after:?} after the release");
        assert!(
            after < Duration::from_millis(500),
            "held up {after:?} after the release"
        );
        next.unlock_async(lock).await.expect("released");
    });
    // The lock key is gone from every node.
    for node in cluster.nodes() {
        assert_eq!(node.raw(&cmd(&["EXISTS", "q"])), b":0\r\n");
    }
}

/// A waiting future dropped during its first queued attempt (the nodes hang, so the attempt's replies are not in
/// yet) leaves the nodes' queue as one dropped later does: the nodes run the buffered offer when they resume and
/// queue the waiter (every permit is held), and its entry must not head their queues after it is gone. A
/// semaphore's queue (the line `\0semaphore\0<name>`); the next waiter is granted as soon as the holder releases,
/// not one entry lease later.
#[test]
fn a_waiting_future_dropped_during_its_first_attempt_leaves_the_nodes_queue() {
    let mut cluster = Cluster::start(3);
    let holder = locks::manager(cluster.urls(), config());
    let quitter = locks::manager(cluster.urls(), config());
    let next = locks::manager(cluster.urls(), config());
    let rt = two_workers();
    let queue = "muxlock:queue:\0semaphore\0pool";
    let zcard = |cluster: &Cluster, i: usize| {
        let reply = cluster.nodes()[i].raw(&cmd(&["ZCARD", queue]));
        String::from_utf8_lossy(&reply).trim().to_string()
    };
    rt.block_on(async {
        // Every manager connected (and its scripts loaded) before the nodes hang.
        for m in [&quitter, &next] {
            let warm = m
                .request("warm")
                .permits(1)
                .ttl(Duration::from_secs(2))
                .wait(Duration::from_secs(2))
                .acquire_async()
                .await
                .expect("warm-up");
            m.unlock_async(warm).await.expect("warm-up");
        }
    });
    let lock = rt
        .block_on(
            holder
                .request("pool")
                .permits(1)
                .ttl(Duration::from_secs(10))
                .acquire_async(),
        )
        .expect("the holder");
    for i in 0..3 {
        cluster.pause(i);
    }
    rt.block_on(async {
        let wait = quitter
            .request("pool")
            .permits(1)
            .ttl(Duration::from_secs(2))
            .wait(Duration::from_secs(10))
            .acquire_async();
        // Cut within the first attempt's round (200 ms): no reply is read.
        let cut = tokio::time::timeout(Duration::from_millis(80), wait).await;
        assert!(cut.is_err(), "still waiting when cut: {cut:?}");
    });
    for i in 0..3 {
        cluster.resume(i);
    }
    std::thread::sleep(Duration::from_millis(150));
    let left: Vec<String> = (0..3).map(|i| zcard(&cluster, i)).collect();
    println!("entries left on the nodes: {left:?}");
    let (after, lock) = rt.block_on(async {
        let next_wait = {
            let next = next.clone();
            tokio::spawn(async move {
                next.request("pool")
                    .permits(1)
                    .ttl(Duration::from_secs(2))
                    .wait(Duration::from_secs(5))
                    .acquire_async()
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let released = Instant::now();
        holder.unlock_async(lock).await.expect("released");
        let got = next_wait.await.expect("task");
        (released.elapsed(), got.expect("granted"))
    });
    println!("the next waiter was granted {after:?} after the release");
    rt.block_on(next.unlock_async(lock)).expect("released");
    assert!(
        left.iter().all(|z| z == ":0"),
        "a waiter dropped mid-attempt is still queued: ZCARD {left:?}; the next waiter waited {after:?}"
    );
    assert!(after < Duration::from_millis(500), "held up {after:?}");
}
