//! The request API's hard cases: each test is one hazard, written as the behaviour the documentation promises.
//! Real redis-server nodes (tests/support).

use crate::support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, Error, LockManager};
use support::locks::{manager, one_attempt};
use support::wire::cmd;
use support::{Cluster, RedisServer};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Rounds of 1 s: a first call that also connects on a busy machine is answered, not timed out.
fn steady() -> Config {
    one_attempt(Duration::from_secs(1))
}

/// Deletes `keys` on every node of `cluster`, as a node that lost them would (restart without persistence,
/// eviction, an operator's `DEL`): the lock is no longer held anywhere.
fn delete_everywhere(cluster: &Cluster, keys: &[&str]) {
    let mut args = vec!["DEL"];
    args.extend_from_slice(keys);
    for node in cluster.nodes() {
        node.raw(&cmd(&args));
    }
}

/// Hazard: `run` returns the closure's `Ok` although, while the closure ran, the lock was
/// lost and another client acquired it: two holders, and the result looks like success. The docs of
/// `Request::run` promise `Error::LockLost` when "the release found that fewer than a majority still held it",
/// but the release (`Guard::release` → `Engine::release` → `release_on`) returns `Ok(0)` for that, never
/// `LockLost`, so the `Err(e @ (Error::LockLost(_) | Error::Expired))` arm in `run` is dead.
///
/// The nodes here speak RESP2 only (`HELLO` renamed away), so no tracking push races the release: the guard's
/// watchdog would only notice at its first renewal, a third of the TTL later. (With RESP3 the same happens
/// whenever the release wins the race with the tracker's check.)
#[test]
fn run_is_an_error_when_the_release_finds_the_lock_taken() {
    let cluster = Cluster::builder(3)
        .server(RedisServer::builder().args(["--rename-command", "HELLO", ""]))
        .start();
    let locks = manager(cluster.urls(), steady());
    let rival = manager(cluster.urls(), steady());
    let mut rival_lock = None;
    let got = locks
        .request("report")
        .ttl(Duration::from_secs(6))
        .run(|guard| {
            // The key goes (a node restarts empty, an operator deletes it...), and another client takes it.
            delete_everywhere(&cluster, &["report"]);
            rival_lock = Some(
                rival
                    .request("report")
                    .ttl(Duration::from_secs(6))
                    .once()
                    .acquire()
                    .expect("rival's attempt"),
            );
            assert!(rival_lock.is_some(), "the rival holds it now");
            // The work is done; the guard has not noticed yet.
            guard.is_lost()
        });
    let rival_lock = rival_lock.expect("rival holds the lock");
    assert!(
        matches!(got, Err(Error::LockLost(_))),
        "run returned {got:?} while the rival held the lock: the closure's work overlapped another holder"
    );
    rival.unlock(rival_lock).expect("rival unlock");
}

/// Hazard: the same for `unlock`: a lock taken over by another holder releases with `Ok(0)`, which a caller
/// reads as success ("Results that cannot be mistaken for success": `unlock` must become an error
/// the caller cannot ignore, as the CLI's `release` exits 75). `manager/mod.rs` `unlock`, `engine/mod.rs`
/// `release_on`.
#[test]
fn unlock_of_a_lock_taken_by_another_holder_is_an_error() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), steady());
    let rival = manager(cluster.urls(), steady());
    let lock = locks.request("ledger").once().acquire().expect("lock");
    delete_everywhere(&cluster, &["ledger"]);
    let theirs = rival.request("ledger").once().acquire().expect("rival");
    let released = locks.unlock(lock);
    assert!(
        matches!(released, Err(Error::LockLost(_))),
        "unlock of a lock another client holds returned {released:?}"
    );
    rival.unlock(theirs).expect("rival unlock");
}

/// The same through an owned guard's `run`: the hold's release (RELEASE_REENTRANT) answers -1 on every node
/// (the key is another owner's), the hold's `unlock` counts that as answered and returns `Ok(0)`, and `run`
/// returns the closure's value.
#[test]
fn owned_run_is_an_error_when_the_release_finds_the_lock_taken() {
    let cluster = Cluster::builder(3)
        .server(RedisServer::builder().args(["--rename-command", "HELLO", ""]))
        .start();
    let locks = manager(cluster.urls(), steady());
    let rival = manager(cluster.urls(), steady());
    let me = locks.owner().expect("owner");
    let mut rival_lock = None;
    let got = locks
        .request("tree")
        .ttl(Duration::from_secs(6))
        .owned(&me)
        .run(|_guard| {
            delete_everywhere(&cluster, &["tree", "muxlock:holds:tree"]);
            rival_lock = Some(
                rival
                    .request("tree")
                    .ttl(Duration::from_secs(6))
                    .once()
                    .acquire()
                    .expect("rival's attempt"),
            );
            assert!(rival_lock.is_some(), "the rival holds it now");
        });
    let rival_lock = rival_lock.expect("rival holds the lock");
    assert!(
        matches!(got, Err(Error::LockLost(_))),
        "owned run returned {got:?} while the rival held the lock"
    );
    rival.unlock(rival_lock).expect("rival unlock");
}

/// Hazard: a reentrant (owned) acquisition that waits deadlocks behind a waiter for the very lock its owner
/// holds. The owned request joins this process' line for the resource (`wait.rs` `wait_for`: `join`, then
/// `park` while not the head) before trying; the head is a waiter that needs the owner to release first, and the
/// owner's thread is stuck in its nested acquisition. The nested hold, which `.once()` gets at once, fails with
/// `Error::Held` at the end of its wait, although its owner holds the lock.
#[test]
fn a_nested_owned_wait_is_not_queued_behind_a_waiter_for_the_lock_it_holds() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), steady());
    let me = locks.owner().expect("owner");
    let outer = locks
        .request("tree")
        .ttl(Duration::from_secs(10))
        .owned(&me)
        .once()
        .acquire()
        .expect("outer hold");
    // Another caller in this process waits for the lock (plain, queued).
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let locks = locks.clone();
        thread::spawn(move || {
            tx.send(()).expect("send");
            locks
                .request("tree")
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(6))
                .acquire()
        })
    };
    rx.recv().expect("waiter started");
    thread::sleep(ms(400)); // the waiter heads the line, parked on the holder
    // The owner takes a nested hold, waiting at most 2 s: its owner holds the lock, so it is granted at once.
    let t0 = Instant::now();
    let inner = locks
        .request("tree")
        .ttl(Duration::from_secs(10))
        .owned(&me)
        .wait(Duration::from_secs(2))
        .acquire();
    let took = t0.elapsed();
    let ok = inner.is_ok();
    if let Ok(inner) = inner {
        locks.unlock(inner).expect("inner");
    }
    locks.unlock(outer).expect("outer");
    let theirs = waiter
        .join()
        .expect("join")
        .expect("the waiter gets it after");
    locks.unlock(theirs).expect("waiter's unlock");
    assert!(
        ok && took < Duration::from_secs(1),
        "nested owned wait: ok={ok} after {took:?} (queued behind a waiter that needs this owner's release)"
    );
}

/// Hazard: a set waiter lines up on its first name in this process (`wait.rs`: `want.resource()`), so while
/// it waits for *another* of its names, every waiter for the first name in this process waits behind it, though
/// that name is free on every node; it gives up with `Error::Held` (and the set's report). a plain waiter of
/// "a" here never got to try.
#[test]
fn a_set_waiter_does_not_block_waiters_of_a_free_first_name() {
    let cluster = Cluster::start(3);
    let holder = manager(cluster.urls(), steady());
    let locks = manager(cluster.urls(), steady());
    let b = holder
        .request("b")
        .ttl(Duration::from_secs(10))
        .once()
        .acquire()
        .expect("b held elsewhere");
    let (tx, rx) = mpsc::channel();
    let set_waiter = {
        let locks = locks.clone();
        thread::spawn(move || {
            tx.send(()).expect("send");
            locks
                .request_all(["a", "b"])
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(4))
                .acquire()
        })
    };
    rx.recv().expect("started");
    thread::sleep(ms(400)); // the set waiter heads line "a"
    let t0 = Instant::now();
    let a = locks
        .request("a")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(2))
        .acquire();
    let took = t0.elapsed();
    let shown = format!("{a:?}");
    let ok = a.is_ok();
    if let Ok(a) = a {
        locks.unlock(a).expect("unlock a");
    }
    holder.unlock(b).expect("unlock b");
    if let Ok(set) = set_waiter.join().expect("join") {
        locks.unlock(set).expect("unlock set");
    }
    assert!(
        ok && took < Duration::from_secs(1),
        "waiting for the free resource \"a\" took {took:?}: {shown}"
    );
}

/// Hazard (loss detection): two owned guards of one owner on one resource in one manager. The watchdog keeps
/// one guard per resource (`watchdog.rs` `by_resource: HashMap<Vec<u8>, GuardId>`, `add` overwrites), so a
/// deletion seen by tracking is checked for the newer guard only; the older one keeps reporting itself held
/// until its next renewal (a third of the TTL), though a plain guard is told at once.
#[test]
fn every_owned_guard_of_a_resource_is_told_at_once_when_the_key_goes() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), steady());
    let me = locks.owner().expect("owner");
    let ttl = Duration::from_secs(15);
    let outer = locks
        .request("tree")
        .ttl(ttl)
        .owned(&me)
        .hold()
        .expect("outer");
    let inner = locks
        .request("tree")
        .ttl(ttl)
        .owned(&me)
        .hold()
        .expect("inner");
    thread::sleep(ms(300)); // both checked and tracked
    delete_everywhere(&cluster, &["tree", "muxlock:holds:tree"]);
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && !(outer.is_lost() && inner.is_lost()) {
        thread::sleep(ms(10));
    }
    let (o, i) = (outer.is_lost(), inner.is_lost());
    drop((outer, inner));
    assert!(
        o && i,
        "lost within 2 s of the key's deletion: outer {o}, inner {i}"
    );
}

/// Control for the test above: one plain guard is told at once.
#[test]
fn control_a_plain_guard_is_told_at_once_when_the_key_goes() {
    let cluster = Cluster::start(3);
    let locks: LockManager = manager(cluster.urls(), steady());
    let guard = locks
        .request("plain")
        .ttl(Duration::from_secs(15))
        .hold()
        .expect("hold");
    thread::sleep(ms(300));
    delete_everywhere(&cluster, &["plain"]);
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && !guard.is_lost() {
        thread::sleep(ms(10));
    }
    assert!(guard.is_lost());
}

/// Hazard (two holders): `unlock_batch` takes `Lock`s — the one handle of every kind — but releases
/// each by the plain compare-and-delete of its first key (`engine/batch.rs` `unlock_batch`, `RELEASE_BATCH` with
/// `lock.resource`/`lock.value`), ignoring the kind. For an owned hold the key's value is the owner's, so the
/// "release" of one nested hold deletes the key under the owner's other holds: another owner acquires while the
/// outer hold still reports itself valid.
#[test]
fn unlock_batch_of_an_owned_hold_keeps_the_owners_other_holds() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), steady());
    let (me, other) = (locks.owner().expect("owner"), locks.owner().expect("owner"));
    let ttl = Duration::from_secs(10);
    let outer = locks
        .request("tree")
        .ttl(ttl)
        .owned(&me)
        .once()
        .acquire()
        .expect("outer");
    let inner = locks
        .request("tree")
        .ttl(ttl)
        .owned(&me)
        .once()
        .acquire()
        .expect("inner");
    assert_eq!(inner.holds(), Some(2));
    let released = locks.unlock_batch(vec![inner]);
    let theirs = locks
        .request("tree")
        .ttl(ttl)
        .owned(&other)
        .once()
        .acquire();
    let two_holders = theirs.is_ok() && outer.is_valid();
    if let Ok(theirs) = theirs {
        let _ = locks.unlock(theirs);
    }
    let _ = locks.unlock(outer);
    assert!(
        !two_holders,
        "after unlock_batch of the nested hold ({released:?}) another owner acquired while the outer hold was valid"
    );
}

/// Hazard (lost release): `unlock_batch` of a set `Lock` deletes only its first name and reports success; the
/// other names stay locked for the whole lease.
#[test]
fn unlock_batch_of_a_set_releases_every_name() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), steady());
    let rival = manager(cluster.urls(), steady());
    let set = locks
        .request_all(["x", "y"])
        .ttl(Duration::from_secs(10))
        .once()
        .acquire()
        .expect("set");
    let released = locks.unlock_batch(vec![set]);
    let y = match rival
        .request("y")
        .ttl(Duration::from_secs(10))
        .once()
        .acquire()
    {
        Ok(y) => Some(y),
        Err(e) if e.is_held() => None,
        Err(e) => panic!("attempt: {e}"),
    };
    let ok = y.is_some();
    if let Some(y) = y {
        rival.unlock(y).expect("unlock");
    }
    assert!(
        ok,
        "after unlock_batch of the set ({released:?}) \"y\" is still held"
    );
}

/// An owned guard keeps renewing (EXTEND_REENTRANT) and an owned `Lock` extends after `SCRIPT FLUSH`
/// on every node (NOSCRIPT → the script in full).
#[test]
fn owned_renewal_and_extension_survive_script_flush() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), one_attempt(ms(100)));
    let me = locks.owner().expect("owner");
    let guard = locks
        .request("tree")
        .ttl(ms(900))
        .owned(&me)
        .hold()
        .expect("guard");
    let mut lock = locks
        .request("tree")
        .ttl(ms(900))
        .owned(&me)
        .once()
        .acquire()
        .expect("nested");
    for node in cluster.nodes() {
        assert_eq!(node.raw(&cmd(&["SCRIPT", "FLUSH"])), b"+OK\r\n");
    }
    locks
        .extend(&mut lock, Duration::from_secs(2))
        .expect("extend after SCRIPT FLUSH");
    thread::sleep(ms(1500));
    assert!(!guard.is_lost(), "{:?}", guard.lost());
    assert!(guard.renewals() >= 2);
    locks.unlock(lock).expect("unlock nested");
    guard.release().expect("release");
    // Gone on all three nodes, whichever answered last (releases go in full: see
    // `a_release_reaches_a_late_node_that_lost_its_scripts`).
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while cluster
        .nodes()
        .iter()
        .any(|n| n.raw(&cmd(&["EXISTS", "tree", "muxlock:holds:tree"])) != b":0\r\n")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "a released hold left on a node"
        );
        thread::sleep(ms(20));
    }
}

/// Hazard (lost release, minority): a failed owned attempt's undo is sent by `EVALSHA` with no `NOSCRIPT`
/// fallback (`kind/owned.rs` `attempt`: `lua::eval(.., false, ..)` on a bare `release_round`,
/// not awaited). After `SCRIPT FLUSH` the acquisition itself is resent in full (`pipelined`) and granted on the
/// free node, but `EVAL` caches only the acquisition's script, so the undo is refused there and the failed
/// attempt's hold stays on that node for the whole TTL (no later release can remove it: its hold id is gone).
#[test]
fn a_failed_owned_attempt_is_undone_after_script_flush() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), steady());
    let me = locks.owner().expect("owner");
    // Another holder has the key on nodes 0 and 1.
    for node in &cluster.nodes()[..2] {
        assert_eq!(
            node.raw(&cmd(&["SET", "tree", "someone-else", "PX", "10000"])),
            b"+OK\r\n"
        );
    }
    locks
        .request("warm")
        .once()
        .acquire()
        .map(|l| locks.unlock(l))
        .expect("connected")
        .ok();
    for node in cluster.nodes() {
        assert_eq!(node.raw(&cmd(&["SCRIPT", "FLUSH"])), b"+OK\r\n");
    }
    let e = locks
        .request("tree")
        .ttl(Duration::from_secs(10))
        .owned(&me)
        .once()
        .acquire()
        .expect_err("held by another on a majority");
    assert!(e.is_held(), "{e}");
    thread::sleep(ms(300)); // the undo is not awaited
    let left = cluster
        .node(2)
        .raw(&cmd(&["EXISTS", "tree", "muxlock:holds:tree"]));
    assert_eq!(
        left,
        b":0\r\n",
        "the failed attempt's hold is still on node 2: {}",
        String::from_utf8_lossy(&left)
    );
}

/// A release round ends once a majority confirmed; a node whose reply comes later is read by nobody. After
/// `SCRIPT FLUSH` on that node, a release sent by hash would be answered `NOSCRIPT` there, to nobody, and the
/// key (an owned hold's field too) would stay to its lease. Releases go in full (`redlock/scripts.rs`,
/// "Releases go in full"), so the late node runs them. Here node 2 is slow (paused) for the release; every
/// kind: plain, set, owned. The control: node 2 has lost the release script when the releases go (`SCRIPT
/// EXISTS`), so a release by hash would be refused there.
#[test]
fn a_release_reaches_a_late_node_that_lost_its_scripts() {
    let mut cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), steady());
    let me = locks.owner().expect("owner");
    let ttl = Duration::from_secs(20);
    let plain = locks.request("p").ttl(ttl).once().acquire().expect("plain");
    let set = locks
        .request_all(["s1", "s2"])
        .ttl(ttl)
        .once()
        .acquire()
        .expect("set");
    let owned = locks
        .request("o")
        .ttl(ttl)
        .owned(&me)
        .once()
        .acquire()
        .expect("owned");
    assert_eq!(cluster.node(2).raw(&cmd(&["SCRIPT", "FLUSH"])), b"+OK\r\n");
    // The control: node 2 has lost the release script, so a release by hash would be refused there.
    let sha = muxlock::redlock::scripts::RELEASE_SHA1;
    assert_eq!(
        cluster.node(2).raw(&cmd(&["SCRIPT", "EXISTS", sha])),
        b"*1\r\n:0\r\n"
    );
    cluster.pause(2);
    let released = [locks.unlock(plain), locks.unlock(set), locks.unlock(owned)];
    cluster.resume(2);
    for r in &released {
        assert!(matches!(r, Ok(n) if *n >= 2), "released {released:?}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let left = loop {
        let left = cluster
            .node(2)
            .raw(&cmd(&["EXISTS", "p", "s1", "s2", "o", "muxlock:holds:o"]));
        if left == b":0\r\n" || std::time::Instant::now() >= deadline {
            break left;
        }
        thread::sleep(ms(20));
    };
    assert_eq!(
        left,
        b":0\r\n",
        "released {released:?}; keys left on node 2: {}",
        String::from_utf8_lossy(&left)
    );
}

/// The combinations the nodes cannot do, empty names and sets, and a guard's too-short TTL are
/// `Error::Config` before anything is sent (no node counted a vote), with every terminal and waiting policy.
#[test]
fn config_errors_send_nothing() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), steady());
    let me = locks.owner().expect("owner");
    let none: [&str; 0] = [];
    let checks: Vec<(&str, Result<(), Error>)> = vec![
        (
            "fenced set",
            locks.request_all(["a", "b"]).fenced().acquire().map(drop),
        ),
        (
            "fenced set wait",
            locks
                .request_all(["a"])
                .fenced()
                .wait(ms(500))
                .hold()
                .map(drop),
        ),
        (
            "owned set",
            locks
                .request_all(["a", "b"])
                .owned(&me)
                .run(|_| ())
                .map(drop),
        ),
        (
            "empty set",
            locks.request_all(none).wait(ms(500)).acquire().map(drop),
        ),
        (
            "empty name in set",
            locks.request_all(["a", ""]).acquire().map(drop),
        ),
        (
            "empty name",
            locks
                .request("")
                .owned(&me)
                .wait(ms(500))
                .acquire()
                .map(drop),
        ),
        (
            "empty name fenced",
            locks.request("").fenced().hold().map(drop),
        ),
        (
            "zero ttl",
            locks.request("a").ttl(Duration::ZERO).acquire().map(drop),
        ),
        (
            "short guard",
            locks.request("a").ttl(ms(10)).owned(&me).hold().map(drop),
        ),
    ];
    for (what, got) in checks {
        assert!(matches!(got, Err(Error::Config(_))), "{what}: {got:?}");
    }
    let sent: u64 = locks
        .stats()
        .nodes
        .iter()
        .map(|n| n.granted + n.taken + n.failed)
        .sum();
    assert_eq!(sent, 0);
}

/// A fenced waiter gets a token above the previous holder's, and a guard over it keeps it; `Guard`
/// reports the kind's resources, token and owner.
#[test]
fn fenced_wait_token_increases_and_guards_report_their_kind() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), steady());
    let other = manager(cluster.urls(), steady());
    let first = other
        .request("ledger")
        .ttl(Duration::from_secs(8))
        .fenced()
        .hold()
        .expect("first");
    let t1 = first.token().expect("token");
    let waiter = {
        let locks = locks.clone();
        thread::spawn(move || {
            locks
                .request("ledger")
                .ttl(Duration::from_secs(8))
                .fenced()
                .wait(Duration::from_secs(5))
                .hold()
        })
    };
    thread::sleep(ms(300));
    first.release().expect("release");
    let second = waiter.join().expect("join").expect("waited");
    assert!(second.token().expect("token") > t1);
    assert_eq!(second.resources(), &[b"ledger".to_vec()]);
    assert!(second.owner().is_none());
    second.release().expect("release");
    let me = locks.owner().expect("owner");
    let owned = locks.request("o").owned(&me).hold().expect("owned");
    assert_eq!(owned.owner(), Some(&me));
    assert_eq!(owned.token(), None);
    let set = locks.request_all(["z", "y", "z"]).hold().expect("set");
    assert_eq!(set.resources(), &[b"y".to_vec(), b"z".to_vec()]);
    drop((owned, set));
}

/// Hazard (liveness vs docs): `Request::wait` says a set waiter is woken late only by a release of another of
/// its names *in another process*; a release in this process of a name other than the first notifies that
/// name's line (`LockManager::unlock` → `waits.notify("b")`), where the set waiter is not (it lines up on "a",
/// and its probe tracks "a" only), so it sleeps to its retry pause here as well.
#[test]
fn a_set_waiter_is_woken_by_a_release_of_its_second_name_in_this_process() {
    let cluster = Cluster::start(3);
    let config = one_attempt(Duration::from_secs(1))
        .with_retry_delay(Duration::from_secs(3))
        .with_retry_jitter(ms(1));
    let locks = manager(cluster.urls(), config);
    let b = locks
        .request("b")
        .ttl(Duration::from_secs(20))
        .once()
        .acquire()
        .expect("b");
    let (tx, rx) = mpsc::channel();
    let waiter = {
        let locks = locks.clone();
        thread::spawn(move || {
            let got = locks
                .request_all(["a", "b"])
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(8))
                .acquire();
            tx.send(Instant::now()).expect("send");
            got
        })
    };
    // Past its immediate retries and the one-off wake-up when the tracker first connects (the watchdog's idle
    // turn, 1 s): asleep until its retry pause.
    thread::sleep(ms(1500));
    locks.unlock(b).expect("unlock b");
    let released = Instant::now();
    let woke = rx.recv_timeout(Duration::from_secs(10)).expect("woken");
    let set = waiter.join().expect("join").expect("the set");
    locks.unlock(set).expect("unlock set");
    let took = woke.saturating_duration_since(released);
    assert!(
        took < ms(500),
        "woken {took:?} after this process released \"b\""
    );
}
