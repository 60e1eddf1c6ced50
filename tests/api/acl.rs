//! ACL users: a Redis user with only the permissions muxlock needs ([`least`], documented in the README and the
//! crate docs) locks, extends and unlocks, with the restart guard on (its `INFO`) and with the scripts flushed
//! (the `EVAL` fallback), and holds guards and waits for locks with the watchdog's tracker connections
//! (`HELLO 3`, `CLIENT TRACKING`, `GET`, `PTTL`); without any one of those permissions something fails: a
//! lock permission with the server's `NOPERM`, a guard or waiting one by a guard no longer lost at once or a
//! waiter woken by its retry timer instead of the release. Keys outside the user's pattern are refused; a wrong
//! password is an authentication error naming the node, never showing the password.

use crate::support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, Error, LockManager};
use support::{Cluster, RedisServer, cmd, locks};

/// What locks need: the lock (`SET`), the release script in full (`EVAL`: releases always go in full), the
/// extend script by hash and, after a `SCRIPT FLUSH` or a restart, in full (`EVALSHA`, `EVAL`), with the
/// commands they call (`GET`, `DEL`, `PEXPIRE`), loading them on each connection (`SCRIPT LOAD`) and the
/// restart guard's `INFO`, and the clock check's `TIME` with every acquisition and extension. `AUTH` and `HELLO`
/// need no permission;
/// `SELECT` is needed only with a database in the URL (`+select`).
const FOR_LOCKS: &[&str] = &[
    "+set", "+get", "+del", "+pexpire", "+eval", "+evalsha", "+info", "+time",
];
/// What saves a round trip but is not needed (the `SCRIPT LOAD`s are optional set-up steps, for users
/// without Lua): without it each script's first call on a connection gets `NOSCRIPT` and goes in full (`EVAL`).
const FOR_SPEED: &[&str] = &["+script|load"];
/// What guards and waiters add: the watchdog's tracker connections turn tracking on (`CLIENT TRACKING`) and read
/// guards' keys (`GET`, above); a waiter asks the holder's remaining lease (`PTTL`), which also arms the tracking
/// of the key on the tracker. Without them guards and waiters still work, but late: a guard is found lost only
/// at its next renewal, and a waiter polls at the retry delay instead of being woken by the release.
const FOR_WAITING: &[&str] = &["+pttl", "+client|tracking"];
/// The least permissions of a muxlock user (the README's list): [`FOR_LOCKS`], [`FOR_SPEED`], [`FOR_WAITING`].
fn least() -> Vec<&'static str> {
    FOR_LOCKS
        .iter()
        .chain(FOR_SPEED)
        .chain(FOR_WAITING)
        .copied()
        .collect()
}

/// Calls of `EVAL` on `server` so far (`INFO commandstats`).
#[track_caller]
fn evals(server: &RedisServer) -> u64 {
    let info = String::from_utf8_lossy(&server.raw(&cmd(&["INFO", "commandstats"]))).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_eval:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
/// The keys the user may touch: the lock names it uses.
const KEYS: &str = "~lock:*";
const TTL: Duration = Duration::from_secs(1);
const ROUND: Duration = Duration::from_millis(500);

/// Creates (or replaces) user `name` with password `pw`, the keys [`KEYS`], and `perms` only.
#[track_caller]
fn set_user(server: &RedisServer, name: &str, perms: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", ">pw", KEYS];
    args.extend_from_slice(perms);
    assert_eq!(server.raw(&cmd(&args)), b"+OK\r\n", "ACL SETUSER {args:?}");
}

/// Waits (bounded) until `server` reports an uptime of `secs` seconds: the restart guard then trusts it for
/// [`TTL`]-long leases.
#[track_caller]
fn wait_uptime(server: &RedisServer, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs + 10);
    loop {
        let info = String::from_utf8_lossy(&server.raw(&cmd(&["INFO", "server"]))).into_owned();
        let up = info
            .lines()
            .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if up >= secs {
            return;
        }
        assert!(Instant::now() < deadline, "uptime stays at {up} s");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The default configuration (restart guard on), one attempt per call.
fn config() -> Config {
    Config::default()
        .with_retry_count(0)
        .with_round_timeout(ROUND)
}

/// Lock, extend, flush the scripts (so that the release falls back to `EVAL`), unlock: the first failure.
fn scenario(locks: &LockManager, servers: &[&RedisServer], name: &str) -> Result<(), Error> {
    let mut lock = locks.request(name).ttl(TTL).acquire()?;
    locks.extend(&mut lock, TTL)?;
    for server in servers {
        assert_eq!(server.raw(&cmd(&["SCRIPT", "FLUSH"])), b"+OK\r\n");
    }
    locks.unlock(lock).map(|_| ())
}

/// Guards and waiting, with the rounds short enough for a short guard TTL and no restart guard (its window
/// would grow with the guards' long leases; `INFO` is shown needed by [`scenario`]).
fn waiting_config() -> Config {
    locks::one_attempt(Duration::from_millis(150))
}

/// Less than the watchdog's first renewal of a [`LOST_TTL`] guard, and than a waiter's retry delay: what tracking
/// must beat.
const AT_ONCE: Duration = Duration::from_millis(700);
/// A guard lease whose first renewal (at a third) comes well after [`AT_ONCE`].
const LOST_TTL: Duration = Duration::from_secs(6);

/// A guard renewed by the watchdog, found lost at once when its key is deleted (the tracker's `GET` and
/// invalidation), and a waiter of another manager woken by a release at once (its tracker's `PTTL` armed the
/// tracking), not by its retry timer: the first failure, in words.
fn guards_and_waiting(urls: &[String], servers: &[&RedisServer], name: &str) -> Result<(), String> {
    let holder = locks::manager(urls.iter().cloned(), waiting_config());
    let slow_poll = waiting_config()
        .with_retry_delay(Duration::from_secs(3))
        .with_retry_jitter(Duration::ZERO);
    let waiter = locks::manager(urls.iter().cloned(), slow_poll);

    // Renewed: the extend script.
    let renewed = holder
        .request(format!("{name}:renewed"))
        .ttl(Duration::from_millis(1500))
        .hold()
        .map_err(|e| format!("hold: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while renewed.renewals() == 0 && !renewed.is_lost() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    if let Some(lost) = renewed.lost() {
        return Err(format!("renewal: lost: {lost}"));
    }
    if renewed.renewals() == 0 {
        return Err("renewal: none within 5 s".into());
    }
    renewed.release().map_err(|e| format!("release: {e}"))?;

    // Lost at once when its key is deleted.
    let key = format!("{name}:deleted");
    let guard = holder
        .request(&key)
        .ttl(LOST_TTL)
        .hold()
        .map_err(|e| format!("hold: {e}"))?;
    thread::sleep(Duration::from_millis(500)); // the tracker is up and has read the key
    for server in servers {
        server.raw(&cmd(&["DEL", &key]));
    }
    if !guard.wait_lost(AT_ONCE) {
        return Err(format!("a deleted guard was not lost within {AT_ONCE:?}"));
    }

    // A waiter of another manager is woken by the release.
    let key = format!("{name}:waited");
    let guard = holder
        .request(&key)
        .ttl(LOST_TTL)
        .hold()
        .map_err(|e| format!("hold: {e}"))?;
    let (tx, rx) = mpsc::channel();
    let t = thread::spawn(move || {
        let got = waiter
            .request(&key)
            .ttl(TTL)
            .wait(Duration::from_secs(10))
            .acquire();
        let _ = tx.send(Instant::now());
        got.and_then(|lock| waiter.unlock(lock))
    });
    // It has tried, found the lock held, and sleeps. (Its watchdog also wakes it once, up to a second after its
    // tracker connected, to look again: by now that has passed, and only the release or its timer can wake it.)
    thread::sleep(Duration::from_millis(1500));
    guard.release().map_err(|e| format!("release: {e}"))?;
    let released = Instant::now();
    let woke = rx.recv_timeout(Duration::from_secs(10));
    let got = t.join().map_err(|_| "the waiter panicked".to_string())?;
    got.map_err(|e| format!("wait: {e}"))?;
    let took = woke
        .map_err(|_| "the waiter never returned".to_string())?
        .saturating_duration_since(released);
    if took >= AT_ONCE {
        return Err(format!(
            "the waiter was woken {took:?} after the release (by its timer)"
        ));
    }
    Ok(())
}

#[test]
fn a_user_with_the_least_permissions_locks_holds_and_waits_on_three_nodes() {
    let cluster = Cluster::start(3);
    for node in cluster.nodes() {
        set_user(node, "locker", &least());
    }
    // Every node past the restart guard's window, not only the first: under load they start seconds apart.
    for node in cluster.nodes() {
        wait_uptime(node, 3);
    }
    let servers: Vec<&RedisServer> = cluster.nodes().iter().collect();
    for query in ["", "?protocol=resp3"] {
        let urls: Vec<String> = cluster
            .nodes()
            .iter()
            .map(|n| format!("redis://locker:pw@127.0.0.1:{}{query}", n.port()))
            .collect();
        let locks = locks::manager(urls.iter().cloned(), config());
        for i in 0..3 {
            scenario(&locks, &servers, &format!("lock:{query}{i}"))
                .unwrap_or_else(|e| panic!("{query}: {e}"));
        }
        // Outside the key pattern: refused by every node.
        let err = locks
            .request("other:1")
            .ttl(TTL)
            .acquire()
            .expect_err("outside ~lock:*");
        assert!(
            err.is_quorum() && err.to_string().contains("NOPERM"),
            "{err}"
        );
        guards_and_waiting(&urls, &servers, &format!("lock:g{query}"))
            .unwrap_or_else(|e| panic!("{query}: {e}"));
    }
}

#[test]
fn each_of_the_least_permissions_is_needed() {
    let server = RedisServer::start();
    wait_uptime(&server, 3);
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    let least = least();
    for (i, missing) in least.iter().enumerate() {
        let perms: Vec<&str> = least.iter().copied().filter(|p| p != missing).collect();
        set_user(&server, "locker", &perms);
        let locks = locks::manager([url.as_str()], config());
        let evals_before = evals(&server);
        let locked = scenario(&locks, &[&server], &format!("lock:{i}"));
        if FOR_SPEED.contains(missing) {
            locked.unwrap_or_else(|e| panic!("without {missing}, locks: {e}"));
            let sent_in_full = evals(&server) - evals_before;
            eprintln!("without {missing}: {sent_in_full} scripts sent in full (EVAL)");
            assert!(
                sent_in_full > 0,
                "without {missing}: the scripts went in full"
            );
        } else if FOR_LOCKS.contains(missing) {
            let shown = locked.expect_err(&format!("without {missing}")).to_string();
            eprintln!("without {missing}: {shown}");
            assert!(
                // Redis 7.0's words: NOPERM for a command, "can't run this command" for one a script calls.
                shown.contains("NOPERM") || shown.contains("can't run this command"),
                "without {missing}: {shown}"
            );
        } else {
            // Only guards and waiting need it: plain locks work without.
            locked.unwrap_or_else(|e| panic!("without {missing}, locks: {e}"));
            let shown = guards_and_waiting(
                std::slice::from_ref(&url),
                &[&server],
                &format!("lock:g{i}"),
            )
            .expect_err(&format!("without {missing}"));
            eprintln!("without {missing}: {shown}");
        }
    }
    set_user(&server, "locker", &least);
    let locks = locks::manager([url.as_str()], config());
    scenario(&locks, &[&server], "lock:all").expect("with every permission");
    guards_and_waiting(std::slice::from_ref(&url), &[&server], "lock:gall")
        .expect("with every permission");
}

#[test]
fn a_wrong_password_is_an_auth_error_naming_the_node_and_never_showing_the_password() {
    let server = RedisServer::start();
    set_user(&server, "locker", &least());
    for query in ["", "?protocol=resp3"] {
        let url = format!(
            "redis://locker:notthepassword@127.0.0.1:{}{query}",
            server.port()
        );
        let locks = locks::manager([url.as_str()], locks::one_attempt(ROUND));
        let err = locks
            .request("lock:x")
            .ttl(TTL)
            .acquire()
            .expect_err("wrong password");
        assert!(err.is_auth(), "{err}");
        let shown = err.to_string();
        let node = format!(
            "redis://locker:***@127.0.0.1:{}{query}: authentication failed: WRONGPASS",
            server.port()
        );
        assert!(shown.contains(&node), "{shown}");
        let everything = format!("{err} {err:?} {locks:?} {}", locks.stats());
        assert!(!everything.contains("notthepassword"), "{everything}");
    }
}

/// Connections `server` has accepted so far (`INFO stats`).
#[track_caller]
fn connections_received(server: &RedisServer) -> u64 {
    let info = String::from_utf8_lossy(&server.raw(&cmd(&["INFO", "stats"]))).into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A user allowed everything but `CLIENT TRACKING`: a waiter behind another starts its
/// manager's turn listener, whose set-up every node refuses. The waits still end with the lock, and the listener
/// does not dial the nodes again and again to be refused each time (a connection and an `ACL LOG` entry per node
/// per second, for as long as the manager lives).
#[test]
fn a_turn_listener_whose_set_up_the_nodes_refuse_does_not_redial_them() {
    let cluster = Cluster::start(3);
    for node in cluster.nodes() {
        set_user(node, "locker", &["~*", "+@all", "-client|tracking"]);
    }
    let urls: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| format!("redis://locker:pw@127.0.0.1:{}", n.port()))
        .collect();
    let config =
        locks::one_attempt(Duration::from_millis(200)).with_retry_delay(Duration::from_millis(50));
    let ms: Vec<LockManager> = (0..3)
        .map(|_| locks::manager(urls.iter().cloned(), config.clone()))
        .collect();
    let held = ms[0]
        .request("lock:refused")
        .ttl(Duration::from_secs(5))
        .acquire()
        .expect("the holder");
    thread::scope(|s| {
        let waiters: Vec<_> = ms[1..]
            .iter()
            .map(|m| {
                let t = s.spawn(move || {
                    let l = m
                        .request("lock:refused")
                        .ttl(Duration::from_secs(2))
                        .wait(Duration::from_secs(5))
                        .acquire()
                        .expect("a waiter");
                    m.unlock(l).expect("unlock");
                });
                thread::sleep(Duration::from_millis(100));
                t
            })
            .collect();
        thread::sleep(Duration::from_millis(300));
        ms[0].unlock(held).expect("unlock");
        for t in waiters {
            t.join().expect("a waiter");
        }
    });
    // Both waiting managers' listeners are past their first dials and refusals.
    thread::sleep(Duration::from_millis(500));
    let before: Vec<u64> = cluster.nodes().iter().map(connections_received).collect();
    thread::sleep(Duration::from_secs(3));
    let after: Vec<u64> = cluster.nodes().iter().map(connections_received).collect();
    // `INFO` itself comes on a connection of its own: one per look.
    let dialled: Vec<u64> = before.iter().zip(&after).map(|(b, a)| a - b - 1).collect();
    println!("connections in 3 s, per node: {dialled:?}");
    assert!(dialled.iter().all(|&n| n == 0), "redialled: {dialled:?}");
}
