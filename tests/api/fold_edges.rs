//! Folded releases' hard cases (`engine/fold.rs`, `Config::with_fold_releases(true)`), on real servers (Redis 7.0
//! and Valkey 9.1). Each test is one hazard, named for what holds; a hazard left as a documented limit is a test
//! of that limit.
//!
//! The way a fold is made on purpose: a lone release goes out while two nodes of three are paused (SIGSTOP), so
//! its round waits for them and holds the gate; releases asked for meanwhile queue, in the order they are asked,
//! and go out as one fold when the nodes resume.

use crate::support;

use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, Error, Lock, LockManager};
use support::locks::{manager, one_attempt, wait_until};
use support::process::valkey_or_skip;
use support::{RedisServer, cmd};

const TTL: Duration = Duration::from_secs(30);

/// A release to run on a thread of its own.
type Releaser = Box<dyn FnOnce(&LockManager) -> muxlock::Result<usize> + Send>;
const ROUND: Duration = Duration::from_secs(2);

fn config() -> Config {
    one_attempt(ROUND).with_fold_releases(true)
}

fn redis(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn valkeys(n: usize) -> Option<Vec<RedisServer>> {
    let bin = valkey_or_skip()?;
    Some(
        (0..n)
            .map(|_| RedisServer::builder().binary(bin).start())
            .collect(),
    )
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}

fn user_urls(servers: &[RedisServer], user: &str) -> Vec<String> {
    servers
        .iter()
        .map(|s| format!("redis://{user}:pw@127.0.0.1:{}", s.port()))
        .collect()
}

/// Creates user `name` (password `pw`) on every server with the keys `lock:*` and `perms` only.
#[track_caller]
fn set_user(servers: &[RedisServer], name: &str, perms: &[&str]) {
    for server in servers {
        let mut args = vec!["ACL", "SETUSER", name, "reset", "on", ">pw", "~lock:*"];
        args.extend_from_slice(perms);
        assert_eq!(server.raw(&cmd(&args)), b"+OK\r\n", "ACL SETUSER {args:?}");
    }
}

#[track_caller]
fn get(server: &RedisServer, key: &str) -> Vec<u8> {
    server.raw(&cmd(&["GET", key]))
}

#[track_caller]
fn take(locks: &LockManager, name: &str) -> Lock {
    locks
        .request(name)
        .ttl(TTL)
        .once()
        .acquire()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Pauses nodes 1 and 2 and releases `lone` on a thread: its round holds the gate until they resume. Returns
/// the thread (its verdict).
fn hold_the_gate(
    locks: &Arc<LockManager>,
    servers: &mut [RedisServer],
    lone: Lock,
) -> thread::JoinHandle<muxlock::Result<usize>> {
    servers[1].pause();
    servers[2].pause();
    let handle = {
        let locks = Arc::clone(locks);
        thread::spawn(move || locks.unlock(lone))
    };
    // The lone round is out (it has the gate) before anything else releases.
    thread::sleep(Duration::from_millis(150));
    handle
}

fn resume(servers: &mut [RedisServer]) {
    servers[1].resume();
    servers[2].resume();
}

/// Runs `f` on a thread and waits up to `limit` for it: `None` if it did not return by then (the thread is left
/// behind, stuck).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// Hazard (hang): a blocking release queued behind an async release waits for that future to be polled
/// again, without any bound: on a current-thread runtime, a task that releases by `unlock_async` and another
/// that releases by the blocking `unlock` (or drops a guard of `.hold()`, whose drop releases inline) deadlock
/// for ever, the blocking caller parked in the fold's queue on the only thread that could poll the gate's
/// holder. Without folding the blocking release is one round of its own, bounded by the round timeout.
#[test]
fn a_blocking_release_behind_an_unpolled_async_release_is_bounded() {
    let servers = redis(3);
    let locks = Arc::new(manager(urls(&servers), config()));
    let (a, b) = (take(&locks, "fold:async"), take(&locks, "fold:blocking"));
    let verdict = within(Duration::from_secs(10), {
        let locks = Arc::clone(&locks);
        move || {
            let rt = support::rt::current_thread();
            rt.block_on(async {
                let task = tokio::spawn({
                    let locks = Arc::clone(&locks);
                    async move { locks.unlock_async(a).await }
                });
                // The task runs up to its round's first await: it holds the gate.
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                // A blocking release on the runtime's thread (a guard of `.hold()` dropped in a task does this).
                let blocking = locks.unlock(b);
                let task = task.await.expect("the task ran");
                (blocking, task)
            })
        }
    });
    let (blocking, task) =
        verdict.expect("the blocking release never returned: deadlocked in the fold's queue");
    assert!(matches!(blocking, Ok(n) if n >= 2), "{blocking:?}");
    assert!(matches!(task, Ok(n) if n >= 2), "{task:?}");
    locks.inspect("fold:after").expect("the nodes answer");
    for key in ["fold:async", "fold:blocking"] {
        wait_until(Duration::from_secs(5), key, || {
            servers.iter().all(|s| get(s, key) == b"$-1\r\n")
        });
    }
}

/// The hang above, without a runtime: a release future polled once (it takes the gate) and then left
/// unpolled for a while holds every other release of the manager, blocking callers included, for as long.
#[test]
fn a_release_future_left_unpolled_does_not_hold_the_others() {
    let mut servers = redis(3);
    let locks = Arc::new(manager(urls(&servers), config()));
    let b = take(&locks, "fold:other");
    let unpolled = take(&locks, "fold:unpolled");
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // With two nodes of three paused, the first poll cannot find a majority of replies: the release is out, and
    // its future holds whatever it took. The nodes resume before anyone else releases.
    servers[1].pause();
    servers[2].pause();
    let mut future = Box::pin(locks.unlock_async(unpolled));
    let first = future.as_mut().poll(&mut cx);
    resume(&mut servers);
    assert!(
        first.is_pending(),
        "decided with two nodes of three paused: {first:?}"
    );
    let started = Instant::now();
    let other = within(Duration::from_secs(5), {
        let locks = Arc::clone(&locks);
        move || locks.unlock(b)
    });
    let took = started.elapsed();
    drop(future); // lets a stuck `other` go (its thread is then left to finish on its own)
    let other =
        other.expect("a blocking release waited > 5 s for another caller's future to be polled");
    assert!(matches!(other, Ok(n) if n >= 2), "{other:?}");
    assert!(took < ROUND * 3, "took {took:?}");
}

/// Hazard (lost release, another caller's): a key of another type (a hash under a plain lock's name, say a
/// lock that expired and whose name another application reused) makes `RELEASE_BATCH` fail with `WRONGTYPE` on
/// every script node, for every key of the fold: the other callers' releases fail (`Quorum`) and their keys stay
/// until their lease ends; keys before it in the script are deleted but reported unconfirmed. Alone, only the
/// caller of the hash key gets the error.
#[test]
fn a_wrongtype_key_in_a_fold_fails_only_its_own_release() {
    let mut servers = redis(3);
    let locks = Arc::new(manager(urls(&servers), config()));
    for s in &servers {
        assert_eq!(s.raw(&cmd(&["HSET", "fold:hash", "f", "v"])), b":1\r\n");
    }
    let lone = take(&locks, "fold:lone");
    let (before, after) = (take(&locks, "fold:before"), take(&locks, "fold:after"));
    let gate = hold_the_gate(&locks, &mut servers, lone);
    let spawn = |f: Releaser| {
        let locks = Arc::clone(&locks);
        let h = thread::spawn(move || f(&locks));
        thread::sleep(Duration::from_millis(30)); // queued in this order
        h
    };
    let before = spawn(Box::new(move |l| l.unlock(before)));
    let hash = spawn(Box::new(|l| {
        l.unlock_value("fold:hash", "not-a-lock-value")
    }));
    let after = spawn(Box::new(move |l| l.unlock(after)));
    resume(&mut servers);
    assert!(gate.join().expect("lone").is_ok());
    let hash = hash.join().expect("hash");
    assert!(hash.is_err(), "{hash:?}");
    let (before, after) = (before.join().expect("t"), after.join().expect("t"));
    assert_eq!(locks.stats().releases.folded_rounds, 1, "one fold of 3");
    locks.inspect("fold:check").expect("the nodes answer");
    for s in &servers {
        assert_eq!(
            get(s, "fold:after"),
            b"$-1\r\n",
            "a key after the hash in the fold left held"
        );
        assert_eq!(get(s, "fold:before"), b"$-1\r\n");
    }
    assert!(matches!(before, Ok(n) if n >= 2), "{before:?}");
    assert!(matches!(after, Ok(n) if n >= 2), "{after:?}");
}

/// Hazard (lost release, another caller's): a release by value of a name outside the user's key pattern
/// (`~lock:*`) is refused by the ACL for the whole `RELEASE_BATCH` (`NOPERM`, the script's keys are checked
/// before it runs), so every other release of the fold fails on that node too, and their keys stay until their
/// lease ends. Alone, only that caller's release is refused.
#[test]
fn a_key_outside_the_acl_in_a_fold_fails_only_its_own_release() {
    let mut servers = redis(3);
    set_user(
        &servers,
        "locker",
        &[
            "+set",
            "+get",
            "+del",
            "+pexpire",
            "+eval",
            "+evalsha",
            "+script|load",
            "+info",
            "+time",
            "+pttl",
        ],
    );
    let locks = Arc::new(manager(user_urls(&servers, "locker"), config()));
    let lone = take(&locks, "lock:lone");
    let mine = take(&locks, "lock:mine");
    let gate = hold_the_gate(&locks, &mut servers, lone);
    let other = {
        let locks = Arc::clone(&locks);
        thread::spawn(move || locks.unlock_value("other:x", "some-value"))
    };
    thread::sleep(Duration::from_millis(30));
    let mine = {
        let locks = Arc::clone(&locks);
        thread::spawn(move || locks.unlock(mine))
    };
    thread::sleep(Duration::from_millis(30));
    resume(&mut servers);
    assert!(gate.join().expect("lone").is_ok());
    let other = other.join().expect("other");
    assert!(other.is_err(), "{other:?}");
    let mine = mine.join().expect("mine");
    assert_eq!(locks.stats().releases.folded_rounds, 1, "one fold of 2");
    assert!(matches!(mine, Ok(n) if n >= 2), "{mine:?}");
    wait_until(
        Duration::from_secs(5),
        "lock:mine released everywhere",
        || servers.iter().all(|s| get(s, "lock:mine") == b"$-1\r\n"),
    );
}

/// Hazard (lost release, every later one on the connection; not the fold's own: the lone path does the same):
/// a `NOPERM` for a *key* (a release by value of a name outside `~lock:*`) is read as a refusal of the native
/// *command*: the node is switched to the scripts for the rest of its connection. For the README's Lua-free user
/// (`+set +delifeq +command|info +info +time`), every later release on those connections then fails with `NOPERM`
/// (no `+evalsha`), until they reconnect: locks stay until their lease ends.
#[test]
fn a_key_outside_the_acl_does_not_turn_a_node_off_its_native_release() {
    let Some(servers) = valkeys(3) else { return };
    set_user(
        &servers,
        "nolua",
        &["+set", "+delifeq", "+command|info", "+info", "+time"],
    );
    let locks = manager(user_urls(&servers, "nolua"), config());
    let warm = take(&locks, "lock:warm");
    assert!(locks.unlock(warm).expect("native release") >= 2);
    let refused = locks.unlock_value("other:x", "some-value");
    assert!(refused.is_err(), "{refused:?}");
    let mine = take(&locks, "lock:mine");
    let released = locks.unlock(mine);
    assert!(matches!(released, Ok(n) if n >= 2), "{released:?}");
    wait_until(
        Duration::from_secs(5),
        "lock:mine released everywhere",
        || servers.iter().all(|s| get(s, "lock:mine") == b"$-1\r\n"),
    );
}

/// Hazard (lost release): a fold sent by script to a node whose set-up was not read yet. A Lua-free user's
/// releases go to such a node as the batch script (its natives are not known yet); the node refuses it
/// (`NOPERM` without `+eval`) and, the fold decided by the other two nodes first, nobody reads the refusal. Node
/// 2 is paused from the start, so it grants the keys when it resumes (the acquisitions wait in its socket) and
/// then refuses their folded release: the keys must still go there (`unlock`'s contract: nodes that had not
/// answered delete the key when the request reaches them), as a lone release's do (its native releases follow).
#[test]
fn a_fold_sent_to_a_lua_free_node_before_its_set_up_still_deletes_the_keys_there() {
    let Some(mut servers) = valkeys(3) else {
        return;
    };
    set_user(
        &servers,
        "nolua",
        &["+set", "+delifeq", "+command|info", "+info", "+time"],
    );
    servers[2].pause();
    let locks = Arc::new(manager(user_urls(&servers, "nolua"), config()));
    wait_until(Duration::from_secs(5), "nodes 0 and 1 set up", || {
        locks
            .request("lock:warm")
            .ttl(TTL)
            .once()
            .acquire()
            .is_ok_and(|l| locks.unlock(l).is_ok())
    });
    let lone = take(&locks, "lock:lone");
    let lone_value = lone.value().to_owned();
    let folded: Vec<Lock> = (0..2)
        .map(|i| take(&locks, &format!("lock:f{i}")))
        .collect();
    let values: Vec<String> = folded.iter().map(|l| l.value().to_owned()).collect();
    // The lone release holds the gate while node 1 is paused too; the other two queue and fold behind it.
    servers[1].pause();
    let first = {
        let locks = Arc::clone(&locks);
        thread::spawn(move || locks.unlock(lone))
    };
    thread::sleep(Duration::from_millis(150));
    let rest: Vec<_> = folded
        .into_iter()
        .map(|lock| {
            let locks = Arc::clone(&locks);
            thread::spawn(move || locks.unlock(lock))
        })
        .collect();
    thread::sleep(Duration::from_millis(150));
    servers[1].resume();
    let first = first.join().expect("lone release");
    assert!(matches!(first, Ok(n) if n >= 2), "{first:?}");
    for handle in rest {
        let released = handle.join().expect("folded release");
        assert!(matches!(released, Ok(n) if n >= 2), "{released:?}");
    }
    servers[2].resume();
    // Node 2's replies are read by the next round to it: an inspection, until every request was answered.
    wait_until(
        Duration::from_secs(5),
        "node 2 answered every request",
        || {
            let _ = locks.inspect("lock:other");
            let n = &locks.stats().nodes[2].net;
            n.requests > 0 && n.replies >= n.requests
        },
    );
    assert!(
        !String::from_utf8_lossy(&get(&servers[2], "lock:lone")).contains(lone_value.as_str()),
        "the lone release (not folded) left its key on node 2"
    );
    for (i, value) in values.iter().enumerate() {
        let key = format!("lock:f{i}");
        let left = get(&servers[2], &key);
        assert!(
            !String::from_utf8_lossy(&left).contains(value.as_str()),
            "released (confirmed by a majority), yet node 2 keeps {key} for its lease: {:?}",
            String::from_utf8_lossy(&left)
        );
    }
}

/// Hazard (lost release): a fold is not bounded by `max_in_flight`. On a node that releases natively (one
/// `DELIFEQ` per key in one request), a fold of more than twice `max_in_flight` keys never fits the node's queue
/// (a release may use twice the bound, then waits for room): it waits out the round and every release of the
/// fold fails there. Unfolded, the same releases go one by one and all succeed.
#[test]
fn a_fold_larger_than_max_in_flight_still_releases_on_native_nodes() {
    const MAX: usize = 8;
    const QUEUED: usize = 3 * MAX;
    let Some(mut servers) = valkeys(3) else {
        return;
    };
    let locks = Arc::new(manager(urls(&servers), config().with_max_in_flight(MAX)));
    // A new connection's set-up (a dozen `SCRIPT LOAD`s) fills a queue this small: wait until it is done.
    wait_until(Duration::from_secs(5), "the connections set up", || {
        locks
            .request("fold:warm")
            .ttl(TTL)
            .once()
            .acquire()
            .is_ok_and(|l| locks.unlock(l).is_ok())
    });
    let lone = take(&locks, "fold:lone");
    let queued: Vec<Lock> = (0..QUEUED)
        .map(|i| take(&locks, &format!("fold:many:{i}")))
        .collect();
    let gate = hold_the_gate(&locks, &mut servers, lone);
    let threads: Vec<_> = queued
        .into_iter()
        .map(|lock| {
            let locks = Arc::clone(&locks);
            thread::spawn(move || locks.unlock(lock))
        })
        .collect();
    thread::sleep(Duration::from_millis(200));
    resume(&mut servers);
    assert!(gate.join().expect("lone").is_ok());
    let verdicts: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().expect("release"))
        .collect();
    let folds = locks.stats().releases;
    assert!(folds.folded_rounds >= 1, "{folds:?}");
    let failed: Vec<_> = verdicts
        .iter()
        .filter(|v| !matches!(v, Ok(n) if *n >= 2))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {QUEUED} folded releases failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    // Gone from every node: each release confirmed by a majority reaches every node it was sent to (a release
    // held for room on a node whose queue stayed full goes once its round is over).
    locks.inspect("fold:after").expect("the nodes answer");
    for i in 0..QUEUED {
        let key = format!("fold:many:{i}");
        wait_until(Duration::from_secs(5), &key, || {
            servers.iter().all(|s| get(s, &key) == b"$-1\r\n")
        });
    }
    let net: Vec<_> = locks.stats().nodes.iter().map(|n| n.net.clone()).collect();
    assert!(net.iter().all(|n| n.given_up == 0), "{net:?}");
}

/// Held: the same resource released twice in one fold, by value, with the same value (a guard's drop and an
/// `unlock_value` from elsewhere, say), and a third time with another holder's value. As one after the other,
/// in whichever order the threads queued: one of the two releases by value deletes it (`Ok(3)`), the other finds
/// it gone (`LockLost`), the wrong value touches nothing.
/// On script and native nodes.
#[test]
fn the_same_resource_twice_in_a_fold() {
    let run = |mut servers: Vec<RedisServer>| {
        let locks = Arc::new(manager(urls(&servers), config()));
        let lone = take(&locks, "fold:lone");
        let twice = take(&locks, "fold:twice");
        let value = twice.value().as_bytes().to_vec();
        let gate = hold_the_gate(&locks, &mut servers, lone);
        let threads: Vec<_> = [value.clone(), b"another-holders-value".to_vec(), value]
            .into_iter()
            .map(|v| {
                let locks = Arc::clone(&locks);
                let h = thread::spawn(move || locks.unlock_value("fold:twice", v));
                thread::sleep(Duration::from_millis(30));
                h
            })
            .collect();
        resume(&mut servers);
        assert!(gate.join().expect("lone").is_ok());
        let v: Vec<_> = threads.into_iter().map(|t| t.join().expect("t")).collect();
        assert_eq!(locks.stats().releases.folded_rounds, 1);
        let by_value = [&v[0], &v[2]];
        assert_eq!(
            by_value.iter().filter(|r| matches!(r, Ok(3))).count(),
            1,
            "{v:?}"
        );
        assert_eq!(
            by_value
                .iter()
                .filter(|r| matches!(r, Err(Error::LockLost(_))))
                .count(),
            1,
            "{v:?}"
        );
        assert!(matches!(v[1], Err(Error::LockLost(_))), "{v:?}");
        drop(twice);
    };
    run(redis(3));
    if let Some(v) = valkeys(3) {
        run(v);
    }
}

/// Held: a release folded with another holder's release of the same name (the first lock expired, a second
/// holder took it, the first releases late): the late release deletes nothing, the holder's release deletes its
/// own key; both orders, on script and native nodes.
#[test]
fn a_late_release_folded_with_the_new_holders_never_deletes_the_new_key() {
    for native in [false, true] {
        for late_first in [true, false] {
            let mut servers = match native {
                false => redis(3),
                true => match valkeys(3) {
                    Some(v) => v,
                    None => return,
                },
            };
            let locks = Arc::new(manager(urls(&servers), config()));
            let lone = take(&locks, "fold:lone");
            let late = take(&locks, "fold:r");
            // The first lease ends; a second holder takes the name (by hand: as another process would).
            for s in &servers {
                assert_eq!(
                    s.raw(&cmd(&["SET", "fold:r", "second-holder", "PX", "60000"])),
                    b"+OK\r\n"
                );
            }
            let gate = hold_the_gate(&locks, &mut servers, lone);
            let mut order: Vec<Releaser> = vec![
                Box::new(move |l| l.unlock(late)),
                Box::new(|l| l.unlock_value("fold:r", "second-holder")),
            ];
            if !late_first {
                order.reverse();
            }
            let threads: Vec<_> = order
                .into_iter()
                .map(|f| {
                    let locks = Arc::clone(&locks);
                    let h = thread::spawn(move || f(&locks));
                    thread::sleep(Duration::from_millis(30));
                    h
                })
                .collect();
            resume(&mut servers);
            assert!(gate.join().expect("lone").is_ok());
            let mut v: Vec<_> = threads.into_iter().map(|t| t.join().expect("t")).collect();
            if !late_first {
                v.reverse();
            }
            assert!(
                matches!(v[0], Err(Error::LockLost(_))),
                "native {native}: {v:?}"
            );
            assert!(matches!(v[1], Ok(3)), "native {native}: {v:?}");
            assert_eq!(locks.stats().releases.folded_rounds, 1);
        }
    }
}

/// Held: a fold across a node restart (node 0 restarted, without its data, while the fold queues; it comes
/// back on a new connection) and a node killed: every verdict is what the live nodes say, never a release
/// confirmed by a node that does not hold the key.
#[test]
fn a_fold_across_a_restart_and_a_kill() {
    let mut servers = redis(5);
    let locks = Arc::new(manager(urls(&servers), config()));
    let lone = take(&locks, "fold:lone");
    let queued: Vec<Lock> = (0..8)
        .map(|i| take(&locks, &format!("fold:rk:{i}")))
        .collect();
    servers[3].pause();
    servers[4].pause();
    servers[1].pause();
    let gate = {
        let locks = Arc::clone(&locks);
        thread::spawn(move || locks.unlock(lone))
    };
    thread::sleep(Duration::from_millis(150));
    let threads: Vec<_> = queued
        .into_iter()
        .map(|lock| {
            let locks = Arc::clone(&locks);
            thread::spawn(move || locks.unlock(lock))
        })
        .collect();
    thread::sleep(Duration::from_millis(100));
    servers[0].restart_without_files(); // its keys are gone: it can confirm nothing
    servers[2].kill();
    servers[3].resume();
    servers[4].resume();
    servers[1].resume();
    let _ = gate.join().expect("lone");
    for t in threads {
        // Nodes 1, 3, 4 hold the keys: 3 of 5 confirm; node 0 answers "not ours" (or failed), node 2 is down.
        let v = t.join().expect("release");
        assert!(matches!(v, Ok(3) | Err(Error::Quorum(_))), "{v:?}");
    }
    for i in 0..8 {
        for s in [1, 3, 4] {
            wait_until(Duration::from_secs(5), "released", || {
                get(&servers[s], &format!("fold:rk:{i}")) == b"$-1\r\n"
            });
        }
    }
}

/// Held: async callers mixed with threads, some futures dropped at random points (before their first poll,
/// queued, leading), on a 2-worker runtime beside 8 threads, 20 rounds: no caller waits past its bound, no key
/// of a caller that finished with `Ok` is left, and every key is gone once the nodes ran what they were sent.
#[test]
fn async_and_threads_with_cancellations() {
    let servers = redis(3);
    let locks = Arc::new(manager(urls(&servers), config()));
    let rt = support::rt::two_workers();
    let (mut ok, mut unconfirmed) = (0, 0);
    for round in 0..20u64 {
        let names: Vec<String> = (0..24).map(|i| format!("fold:mix:{round}:{i}")).collect();
        let mut taken: Vec<Lock> = names.iter().map(|n| take(&locks, n)).collect();
        let threads: Vec<_> = taken
            .drain(..8)
            .map(|lock| {
                let locks = Arc::clone(&locks);
                thread::spawn(move || locks.unlock(lock))
            })
            .collect();
        let tasks: Vec<_> = taken
            .into_iter()
            .enumerate()
            .map(|(i, lock)| {
                let locks = Arc::clone(&locks);
                // Drop some at 0, 50, 200 us; let the others finish.
                let cut = match (i as u64 + round) % 4 {
                    0 => Some(0),
                    1 => Some(50),
                    2 => Some(200),
                    _ => None,
                };
                rt.spawn(async move {
                    match cut {
                        Some(us) => {
                            let _ = tokio::time::timeout(
                                Duration::from_micros(us),
                                locks.unlock_async(lock),
                            )
                            .await;
                            None
                        }
                        None => Some(locks.unlock_async(lock).await),
                    }
                })
            })
            .collect();
        let started = Instant::now();
        let mut verdicts: Vec<muxlock::Result<usize>> = threads
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect();
        for t in tasks {
            if let Some(v) = rt.block_on(t).expect("task") {
                verdicts.push(v);
            }
        }
        for v in verdicts {
            match v {
                Ok(n) if n >= 2 => ok += 1,
                // A leader cancelled mid-round gives the rest of its fold the replies counted so far
                // (`a_task_leader_dropped_just_after_sending_..`).
                Err(Error::Quorum(_)) => unconfirmed += 1,
                other => panic!("{other:?}"),
            }
        }
        assert!(started.elapsed() < ROUND * 2, "{:?}", started.elapsed());
        locks.inspect("fold:after").expect("the nodes answer");
        for n in &names {
            wait_until(Duration::from_secs(5), n, || {
                servers.iter().all(|s| get(s, n) == b"$-1\r\n")
            });
        }
    }
    let folds = locks.stats().releases;
    eprintln!("{ok} released, {unconfirmed} told unconfirmed although their key went; {folds:?}");
}

/// Held: a very large fold (2,000 releases queued behind one round) on mixed script and native nodes: one
/// `RELEASE_BATCH` per script node, every verdict `Ok(3)`, every key gone.
#[test]
fn a_very_large_fold() {
    const K: usize = 2_000;
    let Some(mut v) = valkeys(1) else { return };
    let mut servers = redis(2);
    servers.insert(1, v.pop().expect("1"));
    let locks = Arc::new(manager(urls(&servers), config()));
    let lone = take(&locks, "fold:lone");
    let names: Vec<String> = (0..K).map(|i| format!("fold:big:{i}")).collect();
    let taken: Vec<Lock> = names.iter().map(|n| take(&locks, n)).collect();
    let rt = support::rt::two_workers();
    let gate = hold_the_gate(&locks, &mut servers, lone);
    let tasks: Vec<_> = taken
        .into_iter()
        .map(|lock| {
            let locks = Arc::clone(&locks);
            rt.spawn(async move { locks.unlock_async(lock).await })
        })
        .collect();
    thread::sleep(Duration::from_millis(300));
    let before = servers[0].calls("eval");
    resume(&mut servers);
    assert!(gate.join().expect("lone").is_ok());
    for t in tasks {
        let v = rt.block_on(t).expect("task");
        assert!(matches!(v, Ok(n) if n >= 2), "{v:?}");
    }
    let folds = locks.stats().releases;
    assert!(folds.folded >= K as u64 - 10, "{folds:?}");
    assert!(
        servers[0].calls("eval") - before <= 3,
        "one script per fold"
    );
    locks.inspect("fold:after").expect("the nodes answer");
    for n in &names {
        wait_until(Duration::from_secs(5), n, || {
            servers.iter().all(|s| get(s, n) == b"$-1\r\n")
        });
    }
}

/// Hazard (a release reported unconfirmed that went through, for other callers): an async caller that leads a
/// fold and is dropped just after sending it (a `timeout` around `unlock_async`, a `select!` that went the other
/// way) gives every other caller of the fold the verdict of the replies counted so far: none, so
/// `Err(Quorum)`, although every node then deletes their keys. One caller's cancellation turns the others'
/// successful releases into errors (a guard's drop ignores it; an `unlock` caller is told its lock may still be
/// held until its lease ends). Alone, their releases would have been confirmed. Fixed where the fold has a
/// blocking caller (here the thread): it is made the leader, and cannot be dropped part-way; the async caller is
/// then a follower, whose drop leaves its key to the fold. A fold of tasks alone: see the next test.
#[test]
fn a_leader_dropped_just_after_sending_does_not_fail_the_others() {
    let mut servers = redis(3);
    let locks = Arc::new(manager(urls(&servers), config()));
    let lone = take(&locks, "fold:lone");
    let (led, other) = (take(&locks, "fold:leader"), take(&locks, "fold:follower"));
    let gate = hold_the_gate(&locks, &mut servers, lone);
    let mut leader = Box::pin(locks.unlock_async(led));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(leader.as_mut().poll(&mut cx).is_pending(), "queued first");
    let follower = {
        let locks = Arc::clone(&locks);
        thread::spawn(move || locks.unlock(other))
    };
    thread::sleep(Duration::from_millis(30));
    resume(&mut servers);
    assert!(gate.join().expect("lone").is_ok());
    // The batch is made. Were the task its leader, polled once it would send the fold, and go before any reply is
    // read. It is not (the thread leads): it has its verdict already, or is dropped as a follower.
    if let std::task::Poll::Ready(v) = leader.as_mut().poll(&mut cx) {
        assert!(matches!(v, Ok(n) if n >= 2), "{v:?}");
    }
    drop(leader);
    let verdict = follower.join().expect("follower");
    wait_until(Duration::from_secs(5), "the fold ran on every node", || {
        servers
            .iter()
            .all(|s| get(s, "fold:follower") == b"$-1\r\n" && get(s, "fold:leader") == b"$-1\r\n")
    });
    assert_eq!(locks.stats().releases.folded_rounds, 1);
    assert!(
        matches!(verdict, Ok(n) if n >= 2),
        "the follower's key went on every node, but it was told {verdict:?}"
    );
}

/// The documented limit of a fold of tasks alone (`engine/fold.rs`, Cancel; RELIABILITY.md, Known limits): one
/// task is its leader, and dropped just after sending the fold it cannot wait for the replies (abandoned with its
/// round), so the other tasks of the fold are told the verdict of the replies counted so far: none, `Quorum`
/// ("unconfirmed", never a false success), with every node not awaited, though their keys go on every node (the
/// fold's requests still run). Fails if the limit changes either way: a follower told `Ok`, or told anything
/// but `Quorum`, or a key left.
#[test]
fn a_task_leader_dropped_just_after_sending_leaves_the_other_tasks_unconfirmed_though_their_keys_go()
 {
    let mut servers = redis(3);
    let locks = Arc::new(manager(urls(&servers), config()));
    let lone = take(&locks, "fold:lone");
    let (led, other) = (take(&locks, "fold:leader"), take(&locks, "fold:follower"));
    let gate = hold_the_gate(&locks, &mut servers, lone);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut leader = Box::pin(locks.unlock_async(led));
    assert!(leader.as_mut().poll(&mut cx).is_pending(), "queued first");
    let mut follower = Box::pin(locks.unlock_async(other));
    assert!(
        follower.as_mut().poll(&mut cx).is_pending(),
        "queued second"
    );
    resume(&mut servers);
    assert!(gate.join().expect("lone").is_ok());
    // Every node paused while the leader sends the fold: no reply can be read within that poll.
    servers.iter_mut().for_each(RedisServer::pause);
    assert!(
        leader.as_mut().poll(&mut cx).is_pending(),
        "the fold answered by paused nodes"
    );
    drop(leader);
    servers.iter_mut().for_each(RedisServer::resume);
    let started = Instant::now();
    let verdict = loop {
        if let std::task::Poll::Ready(v) = follower.as_mut().poll(&mut cx) {
            break v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the follower never ended"
        );
        thread::sleep(Duration::from_millis(5));
    };
    wait_until(Duration::from_secs(5), "the fold ran on every node", || {
        servers
            .iter()
            .all(|s| get(s, "fold:follower") == b"$-1\r\n" && get(s, "fold:leader") == b"$-1\r\n")
    });
    match verdict {
        Err(Error::Quorum(report)) => assert!(
            report
                .nodes()
                .iter()
                .all(|(_, o)| *o == muxlock::Outcome::NotAwaited),
            "the follower's verdict counts no reply: {report}"
        ),
        other => {
            panic!("the limit changed: a follower of a dropped task leader was told {other:?}")
        }
    }
}

/// Hazard (lost release on a minority of nodes; in the network layer, folding or not): a release round's
/// request held for room on a node whose queue is full (a release may use twice `max_in_flight`, then waits) was
/// dropped with its round when the round ended, which it does as soon as a majority confirmed: the node never got
/// it and kept the key until its lease ended, although "dropping a round abandons its replies, not its requests"
/// (`seam.rs`) and a release "must reach every reachable node" (`Fanout::release_round`). With folding, a fold
/// whose keys do not fit a slow node's queue at once left all of them there. Here without folding: node 2 is
/// paused while 24 lone releases go out with `max_in_flight` 8; its queue takes 16, the others decide on nodes
/// 0 and 1, and the last 8 are held for room on node 2. Fixed: a held release whose round ends is detached from
/// it and sent once the node has room (`net/detached.rs`; more cases in `tests/api/lost_release.rs`).
#[test]
fn a_release_held_for_room_still_reaches_the_node() {
    const MAX: usize = 8;
    const RELEASES: usize = 3 * MAX;
    let Some(mut servers) = valkeys(3) else {
        return;
    };
    let config = one_attempt(ROUND).with_max_in_flight(MAX);
    let locks = Arc::new(manager(urls(&servers), config));
    // Until every node has granted once: its connection's set-up no longer fills its queue.
    wait_until(Duration::from_secs(5), "the connections set up", || {
        let lock = locks.request("held:warm").ttl(TTL).once().acquire();
        lock.is_ok_and(|l| locks.unlock(l).is_ok())
            && locks.stats().nodes.iter().all(|n| n.granted > 0)
    });
    // Each set on every node (an acquisition refused on a node still behind, its queue this small, goes again).
    let taken: Vec<Lock> = (0..RELEASES)
        .map(|i| {
            let name = format!("held:{i}");
            (0..100)
                .find_map(|_| {
                    let lock = take(&locks, &name);
                    let want = format!("${}\r\n{}\r\n", lock.value().len(), lock.value());
                    if servers.iter().all(|s| get(s, &name) == want.as_bytes()) {
                        return Some(lock);
                    }
                    let _ = locks.unlock(lock);
                    thread::sleep(Duration::from_millis(10));
                    None
                })
                .unwrap_or_else(|| panic!("{name} never set on every node"))
        })
        .collect();
    servers[2].pause();
    let threads: Vec<_> = taken
        .into_iter()
        .map(|lock| {
            let locks = Arc::clone(&locks);
            thread::spawn(move || locks.unlock(lock))
        })
        .collect();
    for t in threads {
        let v = t.join().expect("release");
        assert!(matches!(v, Ok(2)), "{v:?}");
    }
    assert!(locks.stats().nodes[2].net.detached >= 1, "nothing was held");
    servers[2].resume();
    locks.inspect("held:after").expect("the nodes answer");
    thread::sleep(Duration::from_millis(300));
    let left: Vec<usize> = (0..RELEASES)
        .filter(|i| get(&servers[2], &format!("held:{i}")) != b"$-1\r\n")
        .collect();
    assert!(left.is_empty(), "released but left on node 2: {left:?}");
}

/// Held: a fold on Valkey nodes whose user has the scripts but not `DELIFEQ`, with every script cache flushed
/// while the fold queues: the lone release before it finds `DELIFEQ` refused (`NOPERM` for the command) and turns
/// the nodes to the scripts; the fold's `RELEASE_BATCH` by hash then meets `NOSCRIPT` and goes in full: every
/// release confirmed, every key gone from a majority. (A native command refused key by key inside a fold is left to the
/// simulator: a real fold always follows a round that has met the refusal first.)
#[test]
fn a_fold_through_every_fallback_at_once() {
    let Some(mut servers) = valkeys(3) else {
        return;
    };
    set_user(
        &servers,
        "lua",
        &[
            "+set",
            "+time",
            "+get",
            "+del",
            "+pexpire",
            "+eval",
            "+evalsha",
            "+script|load",
            "+command|info",
        ],
    );
    let locks = Arc::new(manager(user_urls(&servers, "lua"), config()));
    let lone = take(&locks, "lock:lone");
    let queued: Vec<Lock> = (0..8)
        .map(|i| take(&locks, &format!("lock:fb:{i}")))
        .collect();
    let gate = hold_the_gate(&locks, &mut servers, lone);
    let threads: Vec<_> = queued
        .into_iter()
        .map(|lock| {
            let locks = Arc::clone(&locks);
            thread::spawn(move || locks.unlock(lock))
        })
        .collect();
    thread::sleep(Duration::from_millis(100));
    servers[0].raw(&cmd(&["SCRIPT", "FLUSH"]));
    resume(&mut servers);
    for s in &servers[1..] {
        s.raw(&cmd(&["SCRIPT", "FLUSH"]));
    }
    let _ = gate.join().expect("lone");
    for t in threads {
        let v = t.join().expect("release");
        assert!(matches!(v, Ok(n) if n >= 2), "{v:?}");
    }
    assert_eq!(locks.stats().releases.folded_rounds, 1);
    // Gone from every node: releases go in full, so no node's reply after the majority can be a `NOSCRIPT`.
    locks.inspect("lock:after").expect("the nodes answer");
    for i in 0..8 {
        let key = format!("lock:fb:{i}");
        wait_until(Duration::from_secs(5), &key, || {
            servers.iter().all(|s| get(s, &key) == b"$-1\r\n")
        });
    }
    assert!(servers[0].calls("eval") >= 1, "the scripts went in full");
}

/// The hang of a blocking release behind an async one, in a batch: on a current-thread runtime, a task queues its
/// release, then a blocking release on the runtime's thread queues behind it; when the round before them ends, the task
/// is made the fold's leader but cannot run (its thread is parked in the blocking release, in the same fold), which
/// would last for ever. The blocking caller leaves the fold after three round timeouts and releases alone; the task
/// then runs the fold without it.
#[test]
fn a_blocking_release_in_a_fold_led_by_a_stuck_task_is_bounded() {
    const ROUND: Duration = Duration::from_millis(800);
    let mut servers = redis(3);
    let locks = Arc::new(manager(
        urls(&servers),
        one_attempt(ROUND).with_fold_releases(true),
    ));
    let lone = take(&locks, "fold:lone");
    let (a, b) = (take(&locks, "fold:task"), take(&locks, "fold:thread"));
    let pids: Vec<u32> = servers.iter().map(RedisServer::pid).collect();
    let gate = hold_the_gate(&locks, &mut servers, lone);
    // Nodes 1 and 2 resume from another thread once both releases have queued.
    let resumer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        for pid in &pids[1..] {
            support::process::signal(*pid, "CONT");
        }
    });
    let started = Instant::now();
    let verdicts = within(Duration::from_secs(10), {
        let locks = Arc::clone(&locks);
        move || {
            let rt = support::rt::current_thread();
            rt.block_on(async {
                let task = tokio::spawn({
                    let locks = Arc::clone(&locks);
                    async move { locks.unlock_async(a).await }
                });
                tokio::task::yield_now().await; // the task queues first
                let blocking = locks.unlock(b);
                (blocking, task.await.expect("the task ran"))
            })
        }
    });
    resumer.join().expect("resumer");
    servers[1].resume(); // the guards' bookkeeping (the processes already run)
    servers[2].resume();
    let _ = gate.join().expect("lone");
    let (blocking, task) =
        verdicts.expect("deadlocked: the fold's leader waits for the thread parked in its fold");
    assert!(started.elapsed() < ROUND * 5, "{:?}", started.elapsed());
    assert!(matches!(blocking, Ok(n) if n >= 2), "{blocking:?}");
    assert!(matches!(task, Ok(n) if n >= 2), "{task:?}");
    locks.inspect("fold:after").expect("the nodes answer");
    for key in ["fold:task", "fold:thread"] {
        wait_until(Duration::from_secs(5), key, || {
            servers.iter().all(|s| get(s, key) == b"$-1\r\n")
        });
    }
}
