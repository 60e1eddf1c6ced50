//! Extensions that fail after they ran: an extension to a shorter lease sets the key's new expiry on every node
//! that runs it, whether or not its reply is counted. The holder must then count its lease no longer than those
//! nodes keep the key, or a second client gets the lock while the first still counts it held. Each kind's
//! extension (the compare-and-pexpire of a plain or fenced key, a set's script, an owned hold's script) is run
//! against real servers, a majority of them paused while the extension is under way, its verdict awaited or its
//! future dropped before one (an async caller that gave up: the requests went out all the same). (An owned
//! hold's script keeps the longer of the key's expiry and the new TTL, so its nodes never shorten it; the
//! holder's cut is checked all the same.)

use std::time::{Duration, Instant};

use muxlock::redlock::{Config, LockManager};

use super::support::{Cluster, locks};

/// The lease taken, and the shorter one the failed extension asks for.
const TTL: Duration = Duration::from_secs(10);
const SHORTER: Duration = Duration::from_millis(1_500);

fn config() -> Config {
    Config::default()
        .with_restart_guard(false)
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(100))
}

/// How each kind is acquired: one resource, a set, a fenced lock, an owned hold.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    Set,
    Fenced,
    Owned,
}

fn acquire(locks: &LockManager, kind: Kind, name: &str) -> Result<muxlock::Lock, muxlock::Error> {
    let set = [format!("{name}:a"), format!("{name}:b")];
    match kind {
        Kind::Plain => locks.request(name).ttl(TTL).once().acquire(),
        Kind::Set => locks.request_all(&set).ttl(TTL).once().acquire(),
        Kind::Fenced => locks.request(name).fenced().ttl(TTL).once().acquire(),
        Kind::Owned => {
            let owner = locks.owner()?;
            locks.request(name).owned(&owner).ttl(TTL).once().acquire()
        }
    }
}

/// A holds a lock on all three nodes; nodes 1 and 2 are paused while A extends it to [`SHORTER`]: the extension
/// fails (their replies come after the round), and runs there as they resume. Once those keys expire, B gets
/// the lock: A's lease must be over by then.
fn failed_shorter_extension(kind: Kind) {
    let mut cluster = Cluster::start(3);
    let (a, b) = (
        locks::manager(cluster.urls(), config()),
        locks::manager(cluster.urls(), config()),
    );
    let name = format!("ext:{kind:?}");
    let mut held = acquire(&a, kind, &name).expect("A's lock");
    // Every node holds A's keys before the pause (the acquisition was decided by the first two replies).
    let key = String::from_utf8_lossy(&held.resources()[0]).into_owned();
    for node in cluster.nodes() {
        locks::wait_until(Duration::from_secs(2), "A's key on every node", || {
            node.raw(&crate::support::cmd(&["EXISTS", &key])) == b":1\r\n"
        });
    }
    cluster.pause(1);
    cluster.pause(2);
    let extended = a.extend(&mut held, SHORTER);
    cluster.resume(1);
    cluster.resume(2);
    assert!(
        extended.is_err(),
        "{kind:?}: the extension counted though a majority was paused"
    );
    // B tries until it gets the lock (the keys expire [`SHORTER`] after the resumed nodes ran the extension).
    let until = Instant::now() + TTL;
    let second = loop {
        if let Ok(lock) = acquire(&b, kind, &name) {
            break lock;
        }
        assert!(
            Instant::now() < until,
            "{kind:?}: B never got the lock, though the extension ran on nodes 1 and 2"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !held.is_valid(),
        "{kind:?}: two holders: A counts its lease {:?} more while B holds for {:?}",
        held.validity(),
        second.validity()
    );
}

#[test]
fn a_plain_lock_whose_shorter_extension_failed_ends_its_lease_before_another_holder() {
    failed_shorter_extension(Kind::Plain);
}

#[test]
fn a_set_whose_shorter_extension_failed_ends_its_lease_before_another_holder() {
    failed_shorter_extension(Kind::Set);
}

#[test]
fn a_fenced_lock_whose_shorter_extension_failed_ends_its_lease_before_another_holder() {
    failed_shorter_extension(Kind::Fenced);
}

#[test]
fn an_owned_hold_whose_shorter_extension_failed_ends_its_lease_before_another_holder() {
    failed_shorter_extension(Kind::Owned);
}

/// As [`failed_shorter_extension`], but A gives up on the extension instead of waiting for its verdict: its
/// `extend_async` future is dropped (a timeout around it) while nodes 1 and 2 are paused. The extension was sent,
/// and runs there as they resume; once those keys expire B gets the lock, and A's lease must be over by then.
fn abandoned_shorter_extension(kind: Kind) {
    let mut cluster = Cluster::start(3);
    let (a, b) = (
        locks::manager(cluster.urls(), config()),
        locks::manager(cluster.urls(), config()),
    );
    let name = format!("abandoned:{kind:?}");
    let mut held = acquire(&a, kind, &name).expect("A's lock");
    let key = String::from_utf8_lossy(&held.resources()[0]).into_owned();
    for node in cluster.nodes() {
        locks::wait_until(Duration::from_secs(2), "A's key on every node", || {
            node.raw(&crate::support::cmd(&["EXISTS", &key])) == b":1\r\n"
        });
    }
    cluster.pause(1);
    cluster.pause(2);
    // Given up well within the round (100 ms): no verdict, the requests already written to every node.
    let abandoned = crate::support::rt::current_thread().block_on(async {
        tokio::time::timeout(
            Duration::from_millis(30),
            a.extend_async(&mut held, SHORTER),
        )
        .await
    });
    cluster.resume(1);
    cluster.resume(2);
    assert!(
        abandoned.is_err(),
        "{kind:?}: the extension ended before it was given up: {abandoned:?}"
    );
    let until = Instant::now() + TTL;
    let second = loop {
        if let Ok(lock) = acquire(&b, kind, &name) {
            break lock;
        }
        assert!(
            Instant::now() < until,
            "{kind:?}: B never got the lock, though the extension ran on nodes 1 and 2"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !held.is_valid(),
        "{kind:?}: two holders: A counts its lease {:?} more while B holds for {:?}",
        held.validity(),
        second.validity()
    );
}

#[test]
fn a_plain_lock_whose_shorter_extension_was_abandoned_ends_its_lease_before_another_holder() {
    abandoned_shorter_extension(Kind::Plain);
}

#[test]
fn a_set_whose_shorter_extension_was_abandoned_ends_its_lease_before_another_holder() {
    abandoned_shorter_extension(Kind::Set);
}

#[test]
fn a_fenced_lock_whose_shorter_extension_was_abandoned_ends_its_lease_before_another_holder() {
    abandoned_shorter_extension(Kind::Fenced);
}
