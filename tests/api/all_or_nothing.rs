//! All-or-nothing sets (`request_all`: acquired, extended, released) against real redis-servers.

use crate::support;

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use muxlock::Config;
use muxlock::redlock::lua;
use support::locks;
use support::stall::{self, Asked, Held};
use support::wire::roundtrip;
use support::{Cluster, cmd};

const TTL: Duration = Duration::from_secs(10);

fn quick() -> Config {
    locks::one_attempt(Duration::from_millis(500))
}

fn get(cluster: &Cluster, i: usize, key: &str) -> Vec<u8> {
    cluster.node(i).raw(&cmd(&["GET", key]))
}

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

/// `GET key` on a node by address, from any thread; `None` if the node does not answer.
fn get_at(addr: SocketAddr, key: &str) -> Option<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    roundtrip(&mut stream, &cmd(&["GET", key]), 1, deadline).ok()
}

#[test]
fn a_set_is_held_extended_and_released_together() {
    let cluster = Cluster::start(5);
    let (ours, theirs) = (
        locks::manager_of(&cluster, quick()),
        locks::manager_of(&cluster, quick()),
    );
    let mut set = ours
        .request_all(["c", "a", "b", "a"])
        .ttl(TTL)
        .acquire()
        .expect("free set");
    assert_eq!(
        set.resources(),
        [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
    );
    for node in 0..5 {
        for key in ["a", "b", "c"] {
            assert_eq!(get(&cluster, node, key), bulk(set.value()));
        }
    }
    // Overlapping sets and single members are held.
    assert!(
        theirs
            .request_all(["d", "c"])
            .ttl(TTL)
            .once()
            .acquire()
            .unwrap_err()
            .is_held()
    );
    assert!(
        theirs
            .request_all(["b"])
            .ttl(TTL)
            .acquire()
            .unwrap_err()
            .is_held()
    );
    assert!(
        theirs
            .request("a")
            .ttl(TTL)
            .once()
            .acquire()
            .unwrap_err()
            .is_held()
    );
    // The failed overlapping attempt left nothing of "d".
    for node in 0..5 {
        assert_eq!(get(&cluster, node, "d"), b"$-1\r\n");
    }
    thread::sleep(Duration::from_millis(20));
    let before = set.valid_until();
    ours.extend(&mut set, TTL).expect("extended");
    assert!(set.valid_until() > before && set.extensions() == 1);
    let pttl = cluster.node(0).raw(&cmd(&["PTTL", "c"]));
    assert!(
        pttl.starts_with(b":9") || pttl.starts_with(b":10000"),
        "{pttl:?}"
    );
    assert!(ours.unlock(set).expect("released") >= 3);
    for node in 0..5 {
        for key in ["a", "b", "c"] {
            assert_eq!(get(&cluster, node, key), b"$-1\r\n");
        }
    }
    // Config errors: nothing sent.
    assert!(
        ours.request_all::<&str>([])
            .ttl(TTL)
            .acquire()
            .unwrap_err()
            .is_config()
    );
    assert!(
        ours.request_all(["x", ""])
            .ttl(TTL)
            .acquire()
            .unwrap_err()
            .is_config()
    );
}

/// The script itself: all or nothing on a node, and a key that holds any value blocks it, its own value too
/// (values are drawn per attempt: a key with this value is never this request's to take again).
#[test]
fn the_acquire_script_sets_all_or_nothing_and_any_held_key_blocks_it() {
    let cluster = Cluster::start(1);
    let node = cluster.node(0);
    let eval = |keys: &[&str], value: &str| {
        let mut parts = vec!["EVAL", lua::ACQUIRE_MANY.body];
        let n = keys.len().to_string();
        parts.push(&n);
        parts.extend_from_slice(keys);
        parts.extend_from_slice(&[value, "10000"]);
        node.raw(&cmd(&parts))
    };
    // A free set: every key is set.
    assert_eq!(eval(&["k0", "k2"], "mine"), b":1\r\n");
    assert_eq!(node.raw(&cmd(&["GET", "k0"])), bulk("mine"));
    assert_eq!(node.raw(&cmd(&["GET", "k2"])), bulk("mine"));
    // A key that holds this very value: blocked all the same, nothing else set.
    node.raw(&cmd(&["SET", "k1", "mine", "PX", "10000"]));
    assert_eq!(eval(&["k1", "k6"], "mine"), b":0\r\n");
    assert_eq!(node.raw(&cmd(&["EXISTS", "k6"])), b":0\r\n");
    // Another holder's key: nothing of the set is touched.
    node.raw(&cmd(&["SET", "k4", "other", "PX", "10000"]));
    assert_eq!(eval(&["k3", "k4", "k5"], "mine"), b":0\r\n");
    assert_eq!(node.raw(&cmd(&["EXISTS", "k3", "k5"])), b":0\r\n");
}

/// One member held on a minority: the set is still acquired on the majority. Held on a majority: the set fails
/// and none of its keys stays with our value anywhere.
#[test]
fn a_member_held_on_a_minority_or_a_majority() {
    let cluster = Cluster::start(5);
    let locks = locks::manager_of(&cluster, quick());
    for node in 0..2 {
        cluster
            .node(node)
            .raw(&cmd(&["SET", "m2", "stranger", "PX", "10000"]));
    }
    let set = locks
        .request_all(["m1", "m2", "m3"])
        .ttl(TTL)
        .acquire()
        .expect("3 of 5");
    assert_eq!(
        get(&cluster, 0, "m1"),
        b"$-1\r\n",
        "node 0's part is all or nothing"
    );
    assert_eq!(get(&cluster, 4, "m1"), bulk(set.value()));
    locks.unlock(set).expect("released");
    cluster
        .node(2)
        .raw(&cmd(&["SET", "m2", "stranger", "PX", "10000"]));
    let e = locks
        .request_all(["m1", "m2", "m3"])
        .ttl(TTL)
        .acquire()
        .unwrap_err();
    assert!(e.is_held(), "{e}");
    for node in 0..5 {
        assert_eq!(get(&cluster, node, "m1"), b"$-1\r\n", "node {node}");
        assert_eq!(get(&cluster, node, "m3"), b"$-1\r\n", "node {node}");
    }
}

/// Two threads, overlapping sets in opposite orders, each retrying: both make progress, never deadlock, and never
/// hold a shared member at the same time.
#[test]
fn overlapping_sets_in_opposite_orders_make_progress_and_exclude() {
    let cluster = Cluster::start(3);
    let config = Config::default()
        .with_restart_guard(false)
        .with_retry_count(50)
        .with_retry_delay(Duration::from_millis(2))
        .with_retry_jitter(Duration::from_millis(2))
        .with_round_timeout(Duration::from_millis(500));
    let sets: [&[&str]; 3] = [&["x", "y", "z"], &["z", "y", "w"], &["w", "x"]];
    let inside: Arc<Vec<AtomicUsize>> = Arc::new((0..4).map(|_| AtomicUsize::new(0)).collect());
    let index = |k: &str| ["w", "x", "y", "z"].iter().position(|n| *n == k).unwrap();
    let end = Instant::now() + Duration::from_secs(3);
    let counts: Vec<usize> = thread::scope(|s| {
        let handles: Vec<_> = sets
            .iter()
            .map(|set| {
                let locks = locks::manager_of(&cluster, config.clone());
                let inside = Arc::clone(&inside);
                s.spawn(move || {
                    let mut got = 0;
                    while Instant::now() < end {
                        let Ok(held) = locks
                            .request_all(*set)
                            .ttl(Duration::from_secs(5))
                            .acquire()
                        else {
                            continue;
                        };
                        for k in *set {
                            let before = inside[index(k)].fetch_add(1, Ordering::SeqCst);
                            assert_eq!(before, 0, "{k} held twice");
                        }
                        thread::sleep(Duration::from_millis(1));
                        for k in *set {
                            inside[index(k)].fetch_sub(1, Ordering::SeqCst);
                        }
                        locks.unlock(held).expect("released");
                        got += 1;
                    }
                    got
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (set, got) in sets.iter().zip(&counts) {
        assert!(*got >= 5, "{set:?} got its set {got} times: {counts:?}");
    }
}

/// Threads take private sets while three of five nodes are killed one by one. After every error, no key of that
/// attempt's set is held on the nodes that stay up (they answered); at the end no key of the run is held there
/// except those of sets whose release failed.
#[test]
fn an_error_never_leaves_part_of_a_set_locked() {
    let mut cluster = Cluster::start(5);
    let addrs = cluster.addrs();
    let survivors = [addrs[0], addrs[1]];
    let config = locks::one_attempt(Duration::from_millis(100));
    let stop = Arc::new(AtomicBool::new(false));
    let leftovers = Arc::new(Mutex::new(Vec::<String>::new()));
    let (errors, all_keys) = thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|t| {
                let locks = locks::manager_of(&cluster, config.clone());
                let (stop, leftovers) = (Arc::clone(&stop), Arc::clone(&leftovers));
                s.spawn(move || {
                    let (mut errors, mut keys) = (0, Vec::new());
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) && i < 5_000 {
                        let set: Vec<String> = (0..4).map(|k| format!("t{t}:{i}:{k}")).collect();
                        i += 1;
                        keys.extend(set.iter().cloned());
                        match locks
                            .request_all(&set)
                            .ttl(Duration::from_secs(10))
                            .acquire()
                        {
                            Ok(held) => {
                                if locks.unlock(held).is_err() {
                                    leftovers.lock().unwrap().extend(set);
                                }
                            }
                            Err(e) => {
                                assert!(e.is_quorum(), "{e}");
                                errors += 1;
                                for addr in survivors {
                                    for key in &set {
                                        if let Some(v) = get_at(addr, key) {
                                            assert_eq!(v, b"$-1\r\n", "{key} on {addr} after {e}");
                                        }
                                    }
                                }
                            }
                        }
                    }
                    (errors, keys)
                })
            })
            .collect();
        for node in [4, 3, 2] {
            thread::sleep(Duration::from_millis(300));
            cluster.kill(node);
        }
        thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::SeqCst);
        let mut errors = 0;
        let mut keys = Vec::new();
        for w in workers {
            let (e, k) = w.join().unwrap();
            errors += e;
            keys.extend(k);
        }
        (errors, keys)
    });
    assert!(errors > 0, "no attempt failed: the test saw nothing");
    let leftovers = leftovers.lock().unwrap();
    for addr in survivors {
        for key in all_keys.iter().filter(|k| !leftovers.contains(k)) {
            assert_eq!(get_at(addr, key).unwrap(), b"$-1\r\n", "{key} on {addr}");
        }
    }
}

/// A set under a guard: renewed together past its TTL, lost when one member is taken away on a majority, and
/// released together.
#[test]
fn a_guarded_set_is_renewed_lost_and_released_together() {
    let cluster = Cluster::start(3);
    // 100 ms rounds (a 900 ms guard allows up to about 128 ms): a first call that also connects is answered on a
    // busy machine.
    let locks = locks::manager_of(&cluster, locks::one_attempt(Duration::from_millis(100)));
    let ttl = Duration::from_millis(900);
    let guard = locks
        .request_all(["g2", "g1", "g3"])
        .ttl(ttl)
        .hold()
        .expect("free set");
    assert_eq!(guard.resources().len(), 3);
    assert_eq!(guard.resource(), b"g1");
    thread::sleep(Duration::from_millis(1500));
    assert!(
        !guard.is_lost() && guard.renewals() >= 2,
        "{:?}",
        guard.lost()
    );
    for node in 0..3 {
        assert_eq!(get(&cluster, node, "g3"), bulk(guard.value()));
    }
    guard.release().expect("released");
    for node in 0..3 {
        for key in ["g1", "g2", "g3"] {
            assert_eq!(get(&cluster, node, key), b"$-1\r\n");
        }
    }
    // One member deleted on two nodes of three: the next renewal finds the set not held on a majority.
    let guard = locks
        .request_all(["g1", "g2", "g3"])
        .ttl(ttl)
        .hold()
        .expect("free set");
    for node in 0..2 {
        cluster.node(node).raw(&cmd(&["DEL", "g3"]));
    }
    assert!(guard.wait_lost(Duration::from_secs(3)), "not lost");
    assert!(
        matches!(guard.lost(), Some(muxlock::Lost::Taken(_))),
        "{:?}",
        guard.lost()
    );
}

// ---------------------------------------------------------------------------------------------------------
// A failed attempt's clean-up, detached for room, and the same call's next attempt on a reconnecting node
// (`support::stall`).
// ---------------------------------------------------------------------------------------------------------

/// A set asked for with retries (`acquire`): a failed attempt's clean-up that runs late, after the next
/// attempt was granted on the same node, never deletes that attempt's keys.
#[test]
fn a_retried_set_stays_held_where_a_late_clean_up_of_its_failed_attempt_ran() {
    stall::late_clean_up_then_retry(Held::Set, Asked::Acquire);
}

/// The same for a set asked for with `wait`, whose attempts are the waiting loop's.
#[test]
fn a_waited_set_stays_held_where_a_late_clean_up_of_its_failed_attempt_ran() {
    stall::late_clean_up_then_retry(Held::Set, Asked::Wait);
}
