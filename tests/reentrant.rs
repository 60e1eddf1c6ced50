//! Reentrant locks by owner (`owner`, `lock_reentrant`, `unlock_reentrant`) against real redis-servers.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use muxlock::{Config, LockManager};
use support::locks;
use support::{Cluster, cmd};

const TTL: Duration = Duration::from_secs(10);

fn manager(cluster: &Cluster, config: Config) -> LockManager {
    locks::manager(cluster.urls(), config)
}

#[test]
fn nested_holds_count_up_and_down() {
    let cluster = Cluster::start(3);
    let locks = manager(&cluster, locks::one_attempt(Duration::from_millis(200)));
    let (me, other) = (locks.owner().unwrap(), locks.owner().unwrap());
    assert_ne!(me, other);
    let outer = locks.lock_reentrant(&me, "tree", TTL).expect("free");
    let inner = locks.lock_reentrant(&me, "tree", TTL).expect("reentrant");
    assert_eq!((outer.holds(), inner.holds()), (1, 2));
    let e = locks.lock_reentrant(&other, "tree", TTL).unwrap_err();
    assert!(e.is_held(), "{e}");
    assert!(
        locks.try_lock("tree", TTL).unwrap().is_none(),
        "plain locks see it held"
    );
    locks.unlock_reentrant(inner).expect("released");
    for node in 0..3 {
        let v = cluster.node(node).raw(&cmd(&["GET", "tree"]));
        assert_eq!(v, format!("$40\r\n{}\r\n", me.as_str()).into_bytes());
    }
    locks.unlock_reentrant(outer).expect("released");
    for node in 0..3 {
        let gone = cluster
            .node(node)
            .raw(&cmd(&["EXISTS", "tree", "muxlock:holds:tree"]));
        assert_eq!(gone, b":0\r\n");
    }
}

/// Four threads of one owner take and release the lock, nested, while a thread of another owner tries: the other
/// owner never holds it while any thread of the first does, both make progress, and the counts balance (the key
/// is gone at the end).
#[test]
fn counts_balance_across_threads_of_one_owner() {
    let cluster = Cluster::start(3);
    let config = Config::default()
        .with_restart_guard(false)
        .with_retry_count(500)
        .with_retry_delay(Duration::from_millis(1))
        .with_retry_jitter(Duration::from_millis(1))
        .with_round_timeout(Duration::from_millis(300));
    let locks = manager(&cluster, config);
    let me = locks.owner().unwrap();
    let mine = Arc::new(AtomicUsize::new(0));
    let theirs = Arc::new(AtomicUsize::new(0));
    let got_other = thread::scope(|s| {
        for _ in 0..4 {
            let (locks, me, mine, theirs) = (
                locks.clone(),
                me.clone(),
                Arc::clone(&mine),
                Arc::clone(&theirs),
            );
            s.spawn(move || {
                for _ in 0..40 {
                    let a = locks.lock_reentrant(&me, "shared", TTL).expect("acquired");
                    mine.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(theirs.load(Ordering::SeqCst), 0, "both owners hold it");
                    let b = locks.lock_reentrant(&me, "shared", TTL).expect("nested");
                    assert!(b.holds() >= 2);
                    locks.unlock_reentrant(b).expect("released");
                    mine.fetch_sub(1, Ordering::SeqCst);
                    locks.unlock_reentrant(a).expect("released");
                }
            });
        }
        let other = s.spawn(|| {
            let them = locks.owner().unwrap();
            let mut got = 0;
            for _ in 0..20 {
                let Ok(l) = locks.lock_reentrant(&them, "shared", TTL) else {
                    continue;
                };
                theirs.fetch_add(1, Ordering::SeqCst);
                assert_eq!(mine.load(Ordering::SeqCst), 0, "both owners hold it");
                thread::sleep(Duration::from_millis(1));
                theirs.fetch_sub(1, Ordering::SeqCst);
                locks.unlock_reentrant(l).expect("released");
                got += 1;
            }
            got
        });
        other.join().unwrap()
    });
    assert!(got_other > 0, "the other owner never got the lock");
    for node in 0..3 {
        let gone = cluster
            .node(node)
            .raw(&cmd(&["EXISTS", "shared", "muxlock:holds:shared"]));
        assert_eq!(gone, b":0\r\n", "node {node}: counts did not balance");
    }
}
