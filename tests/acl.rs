//! ACL users: a Redis user with only the permissions muxlock needs ([`LEAST`], documented in the README) locks,
//! extends and unlocks, with the restart guard on (its `INFO`) and with the scripts flushed (the `EVAL` fallback);
//! without any one of those permissions something fails with the server's `NOPERM`; keys outside the user's
//! pattern are refused; and a wrong password is an authentication error naming the node, never showing the
//! password.

mod support;

use std::time::{Duration, Instant};

use muxlock::{Config, Error, LockManager};
use support::{Cluster, RedisServer, cmd, locks};

/// The least permissions of a muxlock user: the lock (`SET`), the release and extend scripts by hash and, after a
/// `SCRIPT FLUSH` or a restart, in full (`EVALSHA`, `EVAL`) with the commands they call (`GET`, `DEL`,
/// `PEXPIRE`), loading them on each connection (`SCRIPT LOAD`) and the restart guard's `INFO`. `AUTH` and
/// `HELLO` need no permission; `SELECT` is needed only with a database in the URL (`+select`).
const LEAST: &[&str] = &[
    "+set",
    "+get",
    "+del",
    "+pexpire",
    "+eval",
    "+evalsha",
    "+script|load",
    "+info",
];
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
        std::thread::sleep(Duration::from_millis(100));
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
    let mut lock = locks.lock(name, TTL)?;
    locks.extend(&mut lock, TTL)?;
    for server in servers {
        assert_eq!(server.raw(&cmd(&["SCRIPT", "FLUSH"])), b"+OK\r\n");
    }
    locks.unlock(lock).map(|_| ())
}

#[test]
fn a_user_with_the_least_permissions_locks_extends_and_unlocks_on_three_nodes() {
    let cluster = Cluster::start(3);
    for node in cluster.nodes() {
        set_user(node, "locker", LEAST);
    }
    wait_uptime(cluster.node(0), 3);
    let servers: Vec<&RedisServer> = cluster.nodes().iter().collect();
    for query in ["", "?protocol=resp3"] {
        let urls: Vec<String> = cluster
            .nodes()
            .iter()
            .map(|n| format!("redis://locker:pw@127.0.0.1:{}{query}", n.port()))
            .collect();
        let locks = locks::manager(urls, config());
        for i in 0..3 {
            scenario(&locks, &servers, &format!("lock:{query}{i}"))
                .unwrap_or_else(|e| panic!("{query}: {e}"));
        }
        // Outside the key pattern: refused by every node.
        let err = locks.lock("other:1", TTL).expect_err("outside ~lock:*");
        assert!(
            err.is_quorum() && err.to_string().contains("NOPERM"),
            "{err}"
        );
    }
}

#[test]
fn each_of_the_least_permissions_is_needed() {
    let server = RedisServer::start();
    wait_uptime(&server, 3);
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    for (i, missing) in LEAST.iter().enumerate() {
        let perms: Vec<&str> = LEAST.iter().copied().filter(|p| p != missing).collect();
        set_user(&server, "locker", &perms);
        let locks = locks::manager([url.as_str()], config());
        let err = scenario(&locks, &[&server], &format!("lock:{i}"))
            .expect_err(&format!("without {missing}"));
        let shown = err.to_string();
        eprintln!("without {missing}: {shown}");
        assert!(
            // Redis 7.0's words: NOPERM for a command, "can't run this command" for one a script calls.
            shown.contains("NOPERM") || shown.contains("can't run this command"),
            "without {missing}: {shown}"
        );
    }
    set_user(&server, "locker", LEAST);
    let locks = locks::manager([url.as_str()], config());
    scenario(&locks, &[&server], "lock:all").expect("with every permission");
}

#[test]
fn a_wrong_password_is_an_auth_error_naming_the_node_and_never_showing_the_password() {
    let server = RedisServer::start();
    set_user(&server, "locker", LEAST);
    for query in ["", "?protocol=resp3"] {
        let url = format!(
            "redis://locker:notthepassword@127.0.0.1:{}{query}",
            server.port()
        );
        let locks = locks::manager([url.as_str()], locks::one_attempt(ROUND));
        let err = locks.lock("lock:x", TTL).expect_err("wrong password");
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
