//! `LockManager::inspect`, `extend_value` and `unlock_value` against real redis-server masters: a lock held by its
//! value alone, as a script or another process holds it (the CLI's `status`, `extend` and `release`).

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, Error, KeyState, Outcome};
use support::{Cluster, cmd, locks};

const TTL: Duration = Duration::from_secs(10);

/// One attempt per call, no restart guard (these servers have just started), a roomy round timeout for a
/// loaded machine.
/// The raw reply of `PTTL key` on node `i`, as a number.
fn pttl(cluster: &Cluster, i: usize, key: &str) -> i64 {
    let reply = cluster.node(i).raw(&cmd(&["PTTL", key]));
    let text = String::from_utf8_lossy(&reply);
    text.trim_start_matches(':').trim_end().parse().unwrap()
}

#[test]
fn inspect_reads_every_node_without_changing_anything() {
    let mut cluster = Cluster::start(5);
    let locks = locks::quick_manager_of(&cluster);
    let free = locks.inspect("res").expect("valid resource");
    assert_eq!(free.resource(), b"res");
    assert_eq!(
        (free.quorum(), free.answered(), free.holder()),
        (3, 5, None)
    );
    assert!(
        free.nodes().iter().all(|(_, s)| *s == KeyState::Absent),
        "{free}"
    );

    let lock = locks.request("res").ttl(TTL).acquire().expect("free");
    let seen = locks.inspect("res").expect("valid resource");
    assert_eq!(seen.holder(), Some(lock.value().as_bytes()), "{seen}");
    for (node, state) in seen.nodes() {
        match state {
            KeyState::Held {
                value,
                ttl: Some(ttl),
            } => {
                assert_eq!(value, lock.value().as_bytes(), "{node}");
                assert!(
                    *ttl > TTL - Duration::from_secs(5) && *ttl <= TTL,
                    "{node}: {ttl:?}"
                );
            }
            other => panic!("{node}: {other:?}"),
        }
    }
    // Inspecting changed nothing: the TTL still runs, the key is still ours.
    assert!(pttl(&cluster, 0, "res") > 5_000);

    // One node down, one holding a key without expiry, one holding another type: each is told apart, and the
    // majority still holds the lock.
    cluster.kill(1);
    cluster.node(2).raw(&cmd(&["SET", "res", "squatter"]));
    cluster.node(3).raw(&cmd(&["DEL", "res"]));
    cluster.node(3).raw(&cmd(&["LPUSH", "res", "x"]));
    let seen = locks.inspect("res").expect("valid resource");
    let states: Vec<&KeyState> = seen.nodes().iter().map(|(_, s)| s).collect();
    assert!(
        matches!(states[1], KeyState::Failed(Outcome::Failed(_))),
        "{seen}"
    );
    assert_eq!(
        *states[2],
        KeyState::Held {
            value: b"squatter".to_vec(),
            ttl: None
        }
    );
    assert!(
        matches!(states[3], KeyState::Failed(Outcome::ErrorReply(m)) if m.starts_with("WRONGTYPE")),
        "{seen}"
    );
    // An error reply is no usable answer: 3 answered.
    assert_eq!(
        (seen.answered(), seen.holding(lock.value().as_bytes())),
        (3, 2)
    );
    assert_eq!(seen.holder(), None, "2 of 5 is no majority");

    assert!(locks.inspect("").unwrap_err().is_config());
}

#[test]
fn a_lock_extended_and_released_by_its_value_from_another_manager() {
    let cluster = Cluster::start(3);
    let owner = locks::quick_manager_of(&cluster);
    let lock = owner
        .request("job")
        .ttl(Duration::from_secs(2))
        .acquire()
        .expect("free");
    let value = lock.value().to_owned();
    // Another process knows only the value.
    let script = locks::quick_manager_of(&cluster);
    let before = Instant::now();
    let valid_until = script
        .extend_value("job", &value, Duration::from_secs(30))
        .expect("still ours");
    assert!(
        valid_until > before + Duration::from_secs(25),
        "{:?}",
        valid_until - before
    );
    assert!(valid_until <= Instant::now() + Duration::from_secs(30));
    for i in 0..3 {
        assert!(pttl(&cluster, i, "job") > 25_000, "node {i}");
    }
    // A wrong value neither extends nor releases, and leaves the key alone.
    let other = "0".repeat(40);
    let err = script
        .extend_value("job", &other, Duration::from_secs(30))
        .unwrap_err();
    assert!(matches!(err, Error::LockLost(_)), "{err}");
    // Every node answered "not this value": an error that cannot pass for a release.
    let err = script.unlock_value("job", &other).unwrap_err();
    assert!(
        matches!(&err, Error::LockLost(r) if r.taken() == 3),
        "{err}"
    );
    assert_eq!(
        script.inspect("job").unwrap().holder(),
        Some(value.as_bytes())
    );
    // The right value releases it everywhere.
    let released = script.unlock_value("job", &value).expect("nodes up");
    assert!(released >= 2, "{released}");
    locks::wait_until(Duration::from_secs(5), "the key is gone everywhere", || {
        let seen = script.inspect("job").unwrap();
        seen.nodes().iter().all(|(_, s)| *s == KeyState::Absent)
    });
    // Released, so the owner's own release deletes nothing: no longer held, it is lost to its owner.
    let err = owner.unlock(lock).unwrap_err();
    assert!(
        matches!(&err, Error::LockLost(r) if r.granted() == 0),
        "{err}"
    );
    // Invalid arguments are refused before anything is sent.
    assert!(script.unlock_value("job", "").unwrap_err().is_config());
    assert!(script.unlock_value("", &value).unwrap_err().is_config());
    assert!(script.extend_value("job", "", TTL).unwrap_err().is_config());
    assert!(
        script
            .extend_value("job", &value, Duration::ZERO)
            .unwrap_err()
            .is_config()
    );
}

#[test]
fn an_extension_by_value_cannot_revive_an_expired_key() {
    let cluster = Cluster::start(3);
    let locks = locks::quick_manager_of(&cluster);
    let lock = locks
        .request("short")
        .ttl(Duration::from_millis(200))
        .acquire()
        .expect("free");
    let value = lock.value().to_owned();
    locks::wait_until(Duration::from_secs(5), "the key expired", || {
        pttl(&cluster, 0, "short") == -2
            && pttl(&cluster, 1, "short") == -2
            && pttl(&cluster, 2, "short") == -2
    });
    let err = locks
        .extend_value("short", &value, Duration::from_secs(30))
        .unwrap_err();
    assert!(matches!(err, Error::LockLost(_)), "{err}");
    assert!(err.is_lost());
    thread::sleep(Duration::from_millis(20));
    for i in 0..3 {
        assert_eq!(
            pttl(&cluster, i, "short"),
            -2,
            "node {i}: no key was created"
        );
    }
    let err = locks.unlock_value("short", &value).unwrap_err();
    assert!(
        matches!(&err, Error::LockLost(r) if r.granted() == 0),
        "{err}"
    );
}

#[test]
fn value_operations_with_a_majority_down_are_quorum_errors() {
    let mut cluster = Cluster::start(3);
    let locks = locks::manager(
        cluster.urls(),
        Config::default()
            .with_retry_count(0)
            .with_restart_guard(false)
            .with_round_timeout(Duration::from_millis(300)),
    );
    let lock = locks.request("r").ttl(TTL).acquire().expect("free");
    cluster.kill(0);
    cluster.kill(1);
    let err = locks.extend_value("r", lock.value(), TTL).unwrap_err();
    assert!(err.is_quorum(), "{err}");
    let err = locks.unlock_value("r", lock.value()).unwrap_err();
    assert!(err.is_quorum(), "{err}");
    let seen = locks
        .inspect("r")
        .expect("an inspection never fails on nodes");
    assert_eq!((seen.answered(), seen.holder()), (1, None));
}
