//! The guard room from the outside: what its `Keeper` owns (the watchdog, the waiters, the counters), against
//! real redis-server nodes.
//!
//! - A guard keeps its lock alive after its manager is gone (every kind of guard), and the watchdog thread and
//!   its tracker connections end with the last handle and guard (no leak either way).
//! - Every release verb of this process wakes this process' waiter at once, on nodes without RESP3 (no
//!   tracking: only the in-process wake-up or a poll can wake it).
//! - A released or lost guard is never renewed again.
//! - `stats()` counts guards, renewals and losses as before.
//! - No deadlock and no two valid holders when guards, watches, waiters, cancels and managers churn together.
//!
//! Each test here runs alone ([`crate::alone`]): one of them counts the process' watchdog threads, and they all
//! start watchdogs.

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, Error, Guard, LockManager, Lost};
use support::locks::{manager, one_attempt, wait_until};
use support::wire::cmd;
use support::{Cluster, RedisServer};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How long a waiter would take to notice a release by polling (its retry pause).
const POLL: Duration = Duration::from_secs(2);
/// A bound that an in-process wake-up meets and a poll does not, with room for a busy machine.
const AT_ONCE: Duration = Duration::from_millis(500);

/// Rounds of 1 s (answered on a busy machine), one attempt, a poll only after [`POLL`].
fn waiter_config() -> Config {
    one_attempt(Duration::from_secs(1))
        .with_retry_delay(POLL)
        .with_retry_jitter(Duration::ZERO)
}

/// Guards of 1 s renewed by rounds of 100 ms.
fn guard_config() -> Config {
    one_attempt(ms(100))
}

/// Servers that cannot speak RESP3: no client-side tracking, so nothing but this process can wake its waiters
/// before their poll.
fn resp2_cluster() -> Cluster {
    Cluster::builder(3)
        .server(RedisServer::builder().args(["--rename-command", "HELLO", ""]))
        .start()
}

/// This process' watchdog threads (the kernel keeps 15 bytes of a thread's name).
fn watchdog_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "muxlock-watchdo")
        .count()
}

/// Clients with client-side tracking on (the watchdog's tracker connections), on every node.
fn tracking_clients(cluster: &Cluster) -> usize {
    (0..cluster.len())
        .map(|i| {
            let list = cluster.node(i).raw(&cmd(&["CLIENT", "LIST"]));
            String::from_utf8_lossy(&list)
                .lines()
                .filter(|l| {
                    l.split(' ')
                        .any(|f| f.starts_with("flags=") && f.contains('t'))
                })
                .count()
        })
        .sum()
}

fn pttl(cluster: &Cluster, i: usize, key: &str) -> i64 {
    let reply = cluster.node(i).raw(&cmd(&["PTTL", key]));
    let text = String::from_utf8_lossy(&reply);
    text.trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("PTTL {key}: {text}"))
}

/// A guard of every kind outlives its manager: the watchdog keeps renewing it (several TTLs later it is not
/// lost, it was renewed, and a rival still cannot take it), and its release still frees the keys.
#[test]
fn every_kind_of_guard_keeps_renewing_after_its_manager_is_dropped() {
    let _alone = crate::alone();
    let cluster = Cluster::start(3);
    let rival = manager(cluster.urls(), waiter_config());
    let ttl = Duration::from_secs(1);
    let (plain, set, fenced) = {
        let locks = manager(cluster.urls(), guard_config());
        let plain = locks.request("orphan:plain").ttl(ttl).hold().expect("hold");
        let set = locks
            .request_all(["orphan:set:a", "orphan:set:b"])
            .ttl(ttl)
            .hold()
            .expect("set hold");
        let fenced = locks
            .request("orphan:fenced")
            .ttl(ttl)
            .fenced()
            .hold()
            .expect("fenced hold");
        (plain, set, fenced)
        // `locks` is dropped here: only the guards keep the manager's keeper.
    };
    thread::sleep(ttl * 3);
    for g in [&plain, &set, &fenced] {
        assert!(
            !g.is_lost(),
            "{:?} lost without its manager: {:?}",
            String::from_utf8_lossy(g.resource()),
            g.lost()
        );
        assert!(
            g.renewals() >= 4,
            "{:?}: {} renewals",
            String::from_utf8_lossy(g.resource()),
            g.renewals()
        );
    }
    for key in ["orphan:plain", "orphan:fenced"] {
        assert!(
            rival
                .request(key)
                .ttl(ttl)
                .once()
                .acquire()
                .expect_err("once")
                .is_held(),
            "{key} taken"
        );
    }
    assert!(
        rival
            .request_all(["orphan:set:b"])
            .ttl(ttl)
            .once()
            .acquire()
            .expect_err("request_all once")
            .is_held()
    );
    assert!(plain.release().expect("release") >= 2);
    drop(set);
    assert!(fenced.release().expect("release") >= 2);
    for key in [
        "orphan:plain",
        "orphan:set:a",
        "orphan:set:b",
        "orphan:fenced",
    ] {
        let lock = rival
            .request(key)
            .ttl(ttl)
            .once()
            .acquire()
            .unwrap_or_else(|e| panic!("{key} still held after the release: {e}"));
        rival.unlock(lock).expect("unlock");
    }
}

/// The watchdog thread (and its tracker connections) lives while a handle or a guard does, and ends with the
/// last of them: whether the manager or the guard goes last, and when only a waiter started it.
#[test]
fn the_watchdog_ends_with_the_last_handle_or_guard_and_not_before() {
    let _alone = crate::alone();
    let cluster = Cluster::start(3);
    let before = watchdog_threads();
    let ttl = Duration::from_secs(1);

    // The manager goes first, the guard last.
    let locks = manager(cluster.urls(), guard_config());
    let guard = locks.request("leak:a").ttl(ttl).hold().expect("hold");
    wait_until(Duration::from_secs(5), "the watchdog starts", || {
        watchdog_threads() == before + 1
    });
    wait_until(Duration::from_secs(5), "tracker connections", || {
        tracking_clients(&cluster) == 3
    });
    drop(locks);
    thread::sleep(ttl);
    assert_eq!(watchdog_threads(), before + 1, "ended with a guard alive");
    assert!(!guard.is_lost(), "{:?}", guard.lost());
    drop(guard);
    wait_until(Duration::from_secs(5), "the watchdog ends", || {
        watchdog_threads() == before
    });
    wait_until(
        Duration::from_secs(5),
        "the tracker connections close",
        || tracking_clients(&cluster) == 0,
    );

    // The guard goes first, the manager (and a clone) last.
    let locks = manager(cluster.urls(), guard_config());
    let clone = locks.clone();
    drop(locks.request("leak:b").ttl(ttl).hold().expect("hold"));
    wait_until(Duration::from_secs(5), "the watchdog starts", || {
        watchdog_threads() == before + 1
    });
    drop(locks);
    thread::sleep(ms(300));
    assert_eq!(watchdog_threads(), before + 1, "ended with a handle alive");
    drop(clone);
    wait_until(Duration::from_secs(5), "the watchdog ends", || {
        watchdog_threads() == before
    });

    // Only a waiter started it (to listen for the invalidations its probe arms).
    let holder = manager(cluster.urls(), waiter_config());
    let lock = holder
        .request("leak:c")
        .ttl(Duration::from_secs(30))
        .acquire()
        .expect("lock");
    let waiter = manager(cluster.urls(), waiter_config());
    assert!(
        waiter
            .request("leak:c")
            .ttl(ttl)
            .wait(ms(200))
            .acquire()
            .unwrap_err()
            .is_held()
    );
    wait_until(
        Duration::from_secs(5),
        "the waiter's watchdog starts",
        || watchdog_threads() == before + 1,
    );
    drop(waiter);
    wait_until(Duration::from_secs(5), "the waiter's watchdog ends", || {
        watchdog_threads() == before
    });
    holder.unlock(lock).expect("unlock");
}

/// How a waiter of this process waits: `.wait(..)` then `acquire`, `hold`, or `fenced().hold()`.
#[derive(Clone, Copy, Debug)]
enum Waiter {
    Lock,
    Hold,
    HoldFenced,
}

/// Starts a waiter for `resource` in its own thread; it reports when it returned and whether it got the lock
/// (releasing it at once).
fn start_waiter(
    locks: &LockManager,
    resource: &'static str,
    how: Waiter,
) -> (mpsc::Receiver<Instant>, thread::JoinHandle<bool>) {
    let (tx, rx) = mpsc::channel();
    let locks = locks.clone();
    let t = thread::spawn(move || {
        let ttl = Duration::from_secs(5);
        let max = Duration::from_secs(10);
        let got = match how {
            Waiter::Lock => locks
                .request(resource)
                .ttl(ttl)
                .wait(max)
                .acquire()
                .map(|l| drop(locks.unlock(l))),
            Waiter::Hold => locks.request(resource).ttl(ttl).wait(max).hold().map(drop),
            Waiter::HoldFenced => locks
                .request(resource)
                .ttl(ttl)
                .fenced()
                .wait(max)
                .hold()
                .map(drop),
        };
        tx.send(Instant::now()).expect("send");
        got.is_ok()
    });
    (rx, t)
}

/// Every release verb wakes this process' waiter for the key at once (it is the only thing that can, before the
/// waiter's poll, on nodes without tracking): unlock (of a plain lock, a set, a fenced lock, an owner's last
/// hold), unlock_value, unlock_batch, a guard's release and drop (plain, set, fenced) and run's end; whether the
/// waiter acquires, holds, or holds a fenced lock.
#[test]
fn every_release_in_this_process_wakes_its_waiter_at_once_without_tracking() {
    let _alone = crate::alone();
    let cluster = resp2_cluster();
    let locks = manager(cluster.urls(), waiter_config());
    let long = Duration::from_secs(30);
    // A guard needs short rounds for a short TTL; here the TTL is long, so the waiter's config serves.
    type Release = Box<dyn FnOnce()>;
    let cases: Vec<(&str, &'static str, Waiter, Release)> = vec![
        ("unlock", "wake:unlock", Waiter::Lock, {
            let (l, lock) = (
                locks.clone(),
                locks
                    .request("wake:unlock")
                    .ttl(long)
                    .acquire()
                    .expect("lock"),
            );
            Box::new(move || {
                l.unlock(lock).expect("unlock");
            })
        }),
        ("unlock_value", "wake:value", Waiter::Hold, {
            let (l, lock) = (
                locks.clone(),
                locks
                    .request("wake:value")
                    .ttl(long)
                    .acquire()
                    .expect("lock"),
            );
            let value = lock.value().to_owned();
            Box::new(move || {
                l.unlock_value("wake:value", value).expect("unlock_value");
            })
        }),
        ("unlock_batch", "wake:batch", Waiter::Lock, {
            let l = locks.clone();
            let got: Vec<_> = locks
                .try_lock_batch(&["wake:batch", "wake:batch:other"], long)
                .into_iter()
                .map(|r| r.expect("batch").expect("acquired"))
                .collect();
            Box::new(move || {
                for r in l.unlock_batch(got) {
                    r.expect("unlock_batch");
                }
            })
        }),
        ("unlock of a set", "wake:many:b", Waiter::HoldFenced, {
            let l = locks.clone();
            let set = locks
                .request_all(["wake:many:a", "wake:many:b"])
                .ttl(long)
                .acquire()
                .expect("request_all");
            Box::new(move || {
                l.unlock(set).expect("unlock of a set");
            })
        }),
        ("unlock of a fenced lock", "wake:fenced", Waiter::Lock, {
            let l = locks.clone();
            let lock = locks
                .request("wake:fenced")
                .ttl(long)
                .fenced()
                .acquire()
                .expect("fenced request");
            Box::new(move || {
                l.unlock(lock).expect("unlock of a fenced lock");
            })
        }),
        (
            "unlock of an owner's last hold",
            "wake:reentrant",
            Waiter::Lock,
            {
                let l = locks.clone();
                let me = locks.owner().expect("owner");
                let outer = locks
                    .request("wake:reentrant")
                    .ttl(long)
                    .owned(&me)
                    .acquire()
                    .expect("owned request");
                let inner = locks
                    .request("wake:reentrant")
                    .ttl(long)
                    .owned(&me)
                    .acquire()
                    .expect("owned request");
                Box::new(move || {
                    l.unlock(inner).expect("unlock of an owned hold");
                    l.unlock(outer).expect("unlock of an owned hold");
                })
            },
        ),
        ("Guard::release", "wake:guard", Waiter::Hold, {
            let g = locks.request("wake:guard").ttl(long).hold().expect("hold");
            Box::new(move || {
                g.release().expect("release");
            })
        }),
        ("Guard dropped", "wake:dropped", Waiter::Lock, {
            let g = locks
                .request("wake:dropped")
                .ttl(long)
                .hold()
                .expect("hold");
            Box::new(move || drop(g))
        }),
        ("a set's guard dropped", "wake:set:b", Waiter::Lock, {
            let g = locks
                .request_all(["wake:set:a", "wake:set:b"])
                .ttl(long)
                .hold()
                .expect("set hold");
            Box::new(move || drop(g))
        }),
        (
            "a fenced guard released",
            "wake:fguard",
            Waiter::HoldFenced,
            {
                let g = locks
                    .request("wake:fguard")
                    .ttl(long)
                    .fenced()
                    .hold()
                    .expect("fenced hold");
                Box::new(move || {
                    g.release().expect("release");
                })
            },
        ),
    ];
    let mut slow = Vec::new();
    for (case, resource, how, release) in cases {
        let (rx, t) = start_waiter(&locks, resource, how);
        // The waiter has tried, found the key held, probed it and gone to sleep until its poll.
        thread::sleep(ms(400));
        assert!(rx.try_recv().is_err(), "{case}: returned while held");
        release();
        let released = Instant::now();
        let woke = rx.recv_timeout(Duration::from_secs(10)).expect("returned");
        assert!(t.join().expect("join"), "{case}: no lock");
        let took = woke.saturating_duration_since(released);
        if took >= AT_ONCE {
            slow.push(format!("{case} ({how:?}): {took:?}"));
        }
    }
    assert!(
        slow.is_empty(),
        "releases that did not wake this process' waiter (it waited for its poll): {slow:?}"
    );

    // run's end, for a waiter that is already asleep when the work ends.
    let (go, work) = mpsc::channel::<()>();
    let l = locks.clone();
    let holder = thread::spawn(move || {
        l.request("wake:with")
            .ttl(long)
            .run(|_| work.recv_timeout(Duration::from_secs(10)))
            .expect("run")
            .expect("told to end");
    });
    wait_until(Duration::from_secs(5), "run holds", || {
        locks
            .inspect("wake:with")
            .is_ok_and(|i| i.holder().is_some())
    });
    let (rx, t) = start_waiter(&locks, "wake:with", Waiter::Lock);
    thread::sleep(ms(400));
    go.send(()).expect("send");
    holder.join().expect("join");
    let released = Instant::now();
    let woke = rx.recv_timeout(Duration::from_secs(10)).expect("returned");
    assert!(t.join().expect("join"));
    let took = woke.saturating_duration_since(released);
    assert!(took < AT_ONCE, "run's end woke its waiter after {took:?}");
}

/// A reentrant hold that is not the last leaves the key held: its release must not hand the key over.
#[test]
fn releasing_an_inner_reentrant_hold_does_not_let_a_waiter_in() {
    let _alone = crate::alone();
    let cluster = resp2_cluster();
    let locks = manager(cluster.urls(), waiter_config());
    let long = Duration::from_secs(30);
    let me = locks.owner().expect("owner");
    let outer = locks
        .request("inner")
        .ttl(long)
        .owned(&me)
        .acquire()
        .expect("outer");
    let inner = locks
        .request("inner")
        .ttl(long)
        .owned(&me)
        .acquire()
        .expect("inner");
    let (rx, t) = start_waiter(&locks, "inner", Waiter::Lock);
    thread::sleep(ms(400));
    locks.unlock(inner).expect("unlock inner");
    assert!(
        rx.recv_timeout(Duration::from_secs(1)).is_err(),
        "a waiter got the key while its owner still held it"
    );
    locks.unlock(outer).expect("unlock outer");
    let released = Instant::now();
    let woke = rx.recv_timeout(Duration::from_secs(10)).expect("returned");
    assert!(t.join().expect("join"));
    let took = woke.saturating_duration_since(released);
    assert!(took < AT_ONCE, "woken after {took:?}");
}

/// Sets `key` to `value` for 20 s on every node, as if the guard's lock were back.
fn put_back(cluster: &Cluster, key: &str, value: &str) {
    for node in cluster.nodes() {
        let reply = node.raw(&cmd(&["SET", key, value, "PX", "20000"]));
        assert_eq!(reply, b"+OK\r\n");
    }
}

/// A guard that was released, or found lost, is never renewed again: with its value put back on the nodes
/// (20 s), nothing pexpires it to the guard's TTL.
#[test]
fn a_released_or_lost_guard_is_never_renewed_again() {
    let _alone = crate::alone();
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), guard_config());
    let ttl = ms(600);

    // Released (by `release`, and by a drop).
    for (case, key) in [("released", "again:released"), ("dropped", "again:dropped")] {
        let guard = locks.request(key).ttl(ttl).hold().expect("hold");
        let value = guard.value().to_owned();
        let watch = guard.watch();
        thread::sleep(ttl / 2); // a renewal is due about now
        match case {
            "released" => drop(guard.release().expect("release")),
            _ => drop(guard),
        }
        assert_eq!(watch.lost(), Some(Lost::Released));
        put_back(&cluster, key, &value);
        thread::sleep(ttl * 2);
        for i in 0..3 {
            let left = pttl(&cluster, i, key);
            assert!(left > 10_000, "{case}: node {i} renewed to {left} ms");
        }
    }

    // Lost (its key deleted on every node, while a waiter-less watchdog tracks it).
    let guard = locks.request("again:lost").ttl(ttl).hold().expect("hold");
    let value = guard.value().to_owned();
    for node in cluster.nodes() {
        node.raw(&cmd(&["DEL", "again:lost"]));
    }
    assert!(guard.wait_lost(Duration::from_secs(3)), "not lost");
    assert!(
        matches!(guard.lost(), Some(Lost::Taken(_) | Lost::Down(_))),
        "{:?}",
        guard.lost()
    );
    put_back(&cluster, "again:lost", &value);
    thread::sleep(ttl * 2);
    for i in 0..3 {
        let left = pttl(&cluster, i, "again:lost");
        assert!(left > 10_000, "lost: node {i} renewed to {left} ms");
    }
    assert!(guard.is_lost());
    drop(guard);
}

/// `stats()`'s guard counters: held goes back to zero whatever ended the guards, renewals add up to what the
/// guards say, a loss is counted once (its release after does not count), and waits, wake-ups and give-ups
/// count as they did.
#[test]
fn stats_count_guards_renewals_losses_and_waits() {
    let _alone = crate::alone();
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), guard_config());
    let ttl = Duration::from_secs(1);
    let a = locks.request("stats:a").ttl(ttl).hold().expect("hold");
    let b = locks
        .request_all(["stats:b", "stats:c"])
        .ttl(ttl)
        .hold()
        .expect("set hold");
    let c = locks
        .request("stats:d")
        .ttl(ttl)
        .fenced()
        .hold()
        .expect("fenced hold");
    assert_eq!(locks.stats().guards.held, 3);
    thread::sleep(ttl + ttl / 2);
    let renewed: u64 = [&a, &b, &c].iter().map(|g| g.renewals()).sum();
    let g = locks.stats().guards;
    assert!(renewed >= 6, "{renewed}");
    // A renewal may land between the two reads: the stats never see fewer than the guards said.
    assert!(
        g.renewals >= renewed && g.renewals <= renewed + 3,
        "{g:?} vs {renewed}"
    );
    assert!(
        g.renewal_rounds >= 2 && g.renewal_rounds <= g.renewals,
        "{g:?}"
    );
    assert_eq!((g.held, g.lost), (3, 0), "{g:?}");

    // One lost (key deleted), then released: counted once as lost, and no longer held.
    for node in cluster.nodes() {
        node.raw(&cmd(&["DEL", "stats:a"]));
    }
    assert!(a.wait_lost(Duration::from_secs(3)));
    assert_eq!(locks.stats().guards.lost, 1);
    // Its release deletes nothing (the key is gone everywhere): the lost lock, as an error.
    let err = a.release().unwrap_err();
    assert!(matches!(err, Error::LockLost(_)), "{err}");
    drop(b);
    let c_renewals = c.renewals();
    drop(c.release());
    let g = locks.stats().guards;
    assert_eq!((g.held, g.lost), (0, 1), "{g:?}");
    assert!(c_renewals > 0);

    // A wait woken by a release, and one that gives up.
    let lock = locks
        .request("stats:w")
        .ttl(Duration::from_secs(30))
        .acquire()
        .expect("lock");
    let waiter = locks.clone();
    let t = thread::spawn(move || {
        waiter
            .request("stats:w")
            .ttl(ttl)
            .wait(Duration::from_secs(10))
            .acquire()
            .map(|l| waiter.unlock(l))
    });
    thread::sleep(ms(300));
    locks.unlock(lock).expect("unlock");
    assert!(t.join().expect("join").is_ok());
    let held = locks
        .request("stats:w")
        .ttl(Duration::from_secs(30))
        .acquire()
        .expect("lock");
    assert!(
        locks
            .request("stats:w")
            .ttl(ttl)
            .wait(ms(200))
            .acquire()
            .is_err()
    );
    locks.unlock(held).expect("unlock");
    let g = locks.stats().guards;
    assert_eq!(
        (g.held, g.lost, g.waits, g.waits_given_up),
        (0, 1, 2, 1),
        "{g:?}"
    );
    assert!(g.wakeups >= 1, "{g:?}");
}

/// Holds recorded by the churn: (resource, from, to) of guards that were valid through the whole hold.
type Valid = Arc<Mutex<Vec<(usize, Instant, Instant)>>>;

/// Guards made and ended from several threads (released, dropped, watched from another thread, some outliving
/// their manager clone), waiters and cancels on the same keys, while the watchdog renews: everything ends in
/// time (no deadlock between the keeper, a guard's state, the watchdog's and the wait room's locks), and no two
/// guards that stayed valid overlapped on one key.
#[test]
fn guards_waiters_cancels_and_managers_churn_without_deadlock_or_overlap() {
    let _alone = crate::alone();
    let cluster = Cluster::start(3);
    let base = manager(cluster.urls(), guard_config());
    let ttl = ms(700);
    const KEYS: usize = 3;
    let valid: Valid = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let (done, finished) = mpsc::channel::<String>();
    let mut threads = Vec::new();
    for w in 0..4 {
        let (locks, valid, done) = (base.clone(), Arc::clone(&valid), done.clone());
        threads.push(thread::spawn(move || {
            for round in 0..12 {
                let key = (w + round) % KEYS;
                let name = format!("churn:{key}");
                let got: Option<Guard> = match round % 3 {
                    0 => locks.request(&name).ttl(ttl).wait(ms(400)).hold().ok(),
                    1 => locks.request(&name).ttl(ttl).once().hold().ok(),
                    _ => {
                        // Through a clone that is gone before the guard.
                        let clone = locks.clone();
                        clone.request(&name).ttl(ttl).once().hold().ok()
                    }
                };
                let Some(guard) = got else {
                    continue;
                };
                let from = Instant::now();
                let watch = guard.watch();
                let watcher = thread::spawn(move || watch.wait_lost(ms(300)));
                thread::sleep(ms(20 + 15 * (round as u64 % 4)));
                let to = Instant::now();
                let still = !guard.is_lost();
                match round % 2 {
                    0 => drop(guard.release()),
                    _ => drop(guard),
                }
                if still {
                    valid.lock().expect("valid").push((key, from, to));
                }
                assert!(watcher.join().expect("watcher"), "released, yet not lost");
            }
            done.send(format!("worker {w}")).expect("send");
        }));
    }
    {
        let (locks, stop, done) = (base.clone(), Arc::clone(&stop), done.clone());
        let urls = cluster.urls();
        threads.push(thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Acquire) && n < 200 {
                locks.cancel_waits();
                let m = manager(urls.clone(), guard_config());
                drop(m.request("churn:0").ttl(ms(700)).once().hold());
                drop(m);
                thread::sleep(ms(40));
                n += 1;
            }
            done.send("canceller".into()).expect("send");
        }));
    }
    drop(done);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ended = Vec::new();
    while ended.len() < 4 {
        let left = deadline.saturating_duration_since(Instant::now());
        match finished.recv_timeout(left) {
            Ok(who) if who.starts_with("worker") => ended.push(who),
            Ok(_) => {}
            Err(e) => panic!("deadlock? only {ended:?} ended in 60 s ({e})"),
        }
    }
    stop.store(true, Ordering::Release);
    for t in threads {
        t.join().expect("join");
    }
    let holds = valid.lock().expect("valid").clone();
    let mut per_key: HashMap<usize, Vec<(Instant, Instant)>> = HashMap::new();
    for (k, from, to) in holds {
        per_key.entry(k).or_default().push((from, to));
    }
    for (k, mut spans) in per_key {
        spans.sort();
        for pair in spans.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "two valid guards of churn:{k} overlapped: {pair:?}"
            );
        }
    }
    assert_eq!(base.stats().guards.held, 0, "{:?}", base.stats().guards);
}

/// An `unlock_value` refused before anything is sent (an empty value: nothing can have been released) must not
/// wake this process' waiters: the manager's verb wakes them, whatever the engine did, a waiter woken for nothing
/// (counted in `stats().guards.wakeups`) would make a useless attempt on every node.
#[test]
fn an_unlock_value_refused_before_any_round_wakes_no_waiter() {
    let _alone = crate::alone();
    let cluster = resp2_cluster();
    let locks = manager(cluster.urls(), waiter_config());
    let holder = manager(cluster.urls(), waiter_config());
    let lock = holder
        .request("refused")
        .ttl(Duration::from_secs(30))
        .acquire()
        .expect("lock");
    let (rx, t) = start_waiter(&locks, "refused", Waiter::Lock);
    // The waiter has tried, probed and gone to sleep until its poll (`POLL` after its attempt).
    thread::sleep(ms(400));
    let before = locks.stats().guards;
    assert_eq!((before.waits, before.wakeups), (1, 0), "{before:?}");
    let refused = locks.unlock_value("refused", "");
    assert!(
        matches!(refused, Err(muxlock::Error::Config(_))),
        "{refused:?}"
    );
    thread::sleep(ms(300));
    let after = locks.stats().guards;
    assert!(rx.try_recv().is_err(), "returned while held");
    // Let the waiter have the key before asserting, so that the thread ends either way.
    holder.unlock(lock).expect("unlock");
    assert!(t.join().expect("join"));
    assert_eq!(
        after.wakeups, 0,
        "a refused unlock_value (nothing sent) woke the waiter: {after:?}"
    );
}
