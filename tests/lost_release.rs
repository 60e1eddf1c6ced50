//! A release that a majority answered but fewer than a majority confirmed is [`Error::LockLost`] on every release
//! path (issue #23: a result that cannot be mistaken for success), with every node's outcome; fewer than a
//! majority answering stays [`Error::Quorum`]. A nested reentrant hold's release deletes no key and still counts.

mod support;

use std::time::Duration;

use muxlock::{Error, LockManager};
use support::locks;
use support::{Cluster, cmd};

const TTL: Duration = Duration::from_secs(10);

fn manager(cluster: &Cluster) -> LockManager {
    locks::manager(
        cluster.urls(),
        locks::one_attempt(Duration::from_millis(500)),
    )
}

/// Deletes `keys` on nodes `on`, as an expiry (or an operator) would.
fn delete(cluster: &Cluster, on: &[usize], keys: &[&str]) {
    for &i in on {
        for k in keys {
            cluster.node(i).raw(&cmd(&["DEL", k]));
        }
    }
}

/// `result` is `LockLost` whose report has `granted` nodes that confirmed.
#[track_caller]
fn lost<T: std::fmt::Debug>(result: Result<T, Error>, granted: usize) {
    match result {
        Err(Error::LockLost(r)) => {
            assert_eq!(r.granted(), granted, "{r}");
            assert_eq!(r.nodes().len(), 3, "{r}");
        }
        other => panic!("expected LockLost with {granted} confirmed, got {other:?}"),
    }
}

#[test]
fn every_release_of_a_lock_no_longer_on_a_majority_is_lock_lost() {
    let cluster = Cluster::start(3);
    let locks = manager(&cluster);
    let acquire = |name: &str| locks.request(name).ttl(TTL).acquire().expect("free");

    // Plain: gone from two of three nodes; the third still deletes it, and that is not enough.
    let lock = acquire("lost:plain");
    delete(&cluster, &[0, 1], &["lost:plain"]);
    lost(locks.unlock(lock), 1);
    // By value, once nothing is left anywhere.
    let lock = acquire("lost:value");
    let value = lock.value().to_owned();
    delete(&cluster, &[0, 1, 2], &["lost:value"]);
    lost(locks.unlock_value("lost:value", &value), 0);
    drop(lock);

    // A set: gone from two of three nodes.
    let set = locks
        .request_all(["lost:a", "lost:b"])
        .ttl(TTL)
        .acquire()
        .expect("free");
    delete(&cluster, &[0, 1], &["lost:a", "lost:b"]);
    lost(locks.unlock(set), 1);

    // Fenced.
    let lock = locks
        .request("lost:fenced")
        .ttl(TTL)
        .fenced()
        .acquire()
        .expect("free");
    delete(&cluster, &[1, 2], &["lost:fenced"]);
    lost(locks.unlock(lock), 1);

    // A batch: each entry has its own verdict.
    let got: Vec<_> = locks
        .try_lock_batch(&["lost:x", "lost:y"], TTL)
        .into_iter()
        .map(|r| r.expect("nodes up").expect("free"))
        .collect();
    delete(&cluster, &[0, 1, 2], &["lost:x"]);
    let mut results = locks.unlock_batch(got).into_iter();
    lost(results.next().expect("two results"), 0);
    assert_eq!(results.next().expect("two results"), Ok(3));

    // A guard whose key went: its release says so; a lost guard dropped is released quietly.
    let guard = locks.request("lost:guard").ttl(TTL).hold().expect("free");
    delete(&cluster, &[0, 1, 2], &["lost:guard"]);
    lost(guard.release(), 0);
    let guard = locks.request("lost:dropped").ttl(TTL).hold().expect("free");
    delete(&cluster, &[0, 1, 2], &["lost:dropped"]);
    drop(guard);
}

#[test]
fn a_nested_owned_release_counts_and_a_lost_hold_is_lock_lost() {
    let cluster = Cluster::start(3);
    let locks = manager(&cluster);
    let me = locks.owner().expect("randomness");
    let hold = || {
        locks
            .request("lost:tree")
            .ttl(TTL)
            .owned(&me)
            .acquire()
            .expect("free or mine")
    };
    let (outer, inner) = (hold(), hold());
    // The nested hold's release deletes no key: the nodes removed the hold, so it is confirmed (the round ends
    // at a majority).
    assert!(locks.unlock(inner).expect("confirmed") >= 2);
    delete(&cluster, &[0, 1], &["lost:tree"]);
    lost(locks.unlock(outer), 1);
}

/// The deprecated reentrant release hands the hold back in `Unreleased`, whose error is the same `LockLost`.
#[test]
#[allow(deprecated)]
fn the_reentrant_wrapper_hands_back_a_lost_hold_with_lock_lost() {
    let cluster = Cluster::start(3);
    let locks = manager(&cluster);
    let me = locks.owner().expect("randomness");
    let outer = locks.lock_reentrant(&me, "lost:old", TTL).expect("free");
    let inner = locks.lock_reentrant(&me, "lost:old", TTL).expect("mine");
    assert!(locks.unlock_reentrant(inner).expect("confirmed") >= 2);
    delete(&cluster, &[0, 1], &["lost:old"]);
    let unreleased = locks.unlock_reentrant(outer).expect_err("lost");
    assert!(unreleased.error().is_lost(), "{unreleased}");
    lost(Err::<(), _>(unreleased.into_parts().0), 1);
}

#[test]
fn a_release_a_majority_did_not_answer_stays_a_quorum_error() {
    let mut cluster = Cluster::start(3);
    let locks = manager(&cluster);
    let lock = locks.request("lost:down").ttl(TTL).acquire().expect("free");
    delete(&cluster, &[0], &["lost:down"]);
    cluster.kill(1);
    cluster.kill(2);
    let err = locks.unlock(lock).expect_err("one node answered");
    assert!(err.is_quorum(), "{err}");
}
