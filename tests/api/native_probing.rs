//! Native release and extension per node, the hard cases: how a node is probed, what a refusal of the native way
//! does. Real Valkey 9.1 and Redis 7.0 nodes (tests/support), and a scripted node only for replies a real server
//! may send.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use muxlock::LockManager;
use muxlock::redlock::scripts::{EXTEND_SHA1, RELEASE, RELEASE_SHA1};
use support::fake::{name, setup_reply};
use support::locks::{manager, one_attempt, wait_until};
use support::process::{find_binary, find_valkey, valkey_or_skip};
use support::{Action, FakeServer, RedisServer, cmd};

const ROUND: Duration = Duration::from_millis(200);

fn valkeys(n: usize) -> Option<Vec<RedisServer>> {
    let bin = valkey_or_skip()?;
    Some(
        (0..n)
            .map(|_| RedisServer::builder().binary(bin).start())
            .collect(),
    )
}

fn set_user(server: &RedisServer, name: &str, perms: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", name, "reset", "on", ">pw", "~lock:*"];
    args.extend_from_slice(perms);
    assert_eq!(server.raw(&cmd(&args)), b"+OK\r\n", "ACL SETUSER {args:?}");
}

fn user_urls(servers: &[RedisServer], user: &str) -> Vec<String> {
    servers
        .iter()
        .map(|s| format!("redis://{user}:pw@127.0.0.1:{}", s.port()))
        .collect()
}

/// A field of `INFO section` on `server` (`key:value` lines), e.g. `cmdstat_delifeq` or `errorstat_ERR`.
fn info_field(server: &RedisServer, section: &str, key: &str) -> Option<String> {
    let info = String::from_utf8_lossy(&server.raw(&cmd(&["INFO", section]))).into_owned();
    let prefix = format!("{key}:");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    let reply = server.raw(&cmd(&["PTTL", key]));
    String::from_utf8_lossy(&reply)
        .trim_start_matches(':')
        .trim_end()
        .parse()
        .expect("PTTL")
}

fn warm(locks: &LockManager) {
    locks.inspect("lock:warm-up").expect("every node answers");
}

/// A manager, warmed up, of a user on `nodes` whose ACL has the scripts but not `DELIFEQ` (the case the
/// script fallback is for).
fn scripts_without_delifeq(nodes: &[RedisServer]) -> LockManager {
    for node in nodes {
        set_user(
            node,
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
    }
    let locks = manager(user_urls(nodes, "lua"), one_attempt(ROUND));
    warm(&locks);
    locks
}

/// A failed acquisition releases its partial grants at once ("so a failed attempt does not block others
/// until the TTL"). With a user whose ACL has the scripts but not `DELIFEQ` (the very case the fallback is for),
/// that release goes out as `DELIFEQ`, fire-and-forget: the node refuses it (`NOPERM`), nobody sends the script,
/// and the partial grant blocks the key for its whole TTL.
#[test]
fn failed_attempt_leaves_no_grant_when_delifeq_is_refused() {
    let Some(nodes) = valkeys(3) else { return };
    let locks = scripts_without_delifeq(&nodes);
    // Someone else holds the key on two nodes of three: our attempt gets node 0 only, and fails.
    for node in &nodes[1..] {
        node.raw(&cmd(&["SET", "lock:c", "other", "PX", "60000"]));
    }
    let got = locks
        .request("lock:c")
        .ttl(Duration::from_secs(30))
        .once()
        .acquire()
        .expect_err("held by someone else");
    assert!(got.is_held(), "a clean refusal: {got}");
    wait_until(
        Duration::from_secs(2),
        "the failed attempt's grant on node 0 released",
        || nodes[0].raw(&cmd(&["EXISTS", "lock:c"])) == b":0\r\n",
    );
}

/// The batch form of the above: a failed batch lock (`try_lock_batch`) releases its partial grants at once,
/// unawaited, by a native compare-and-delete per key on a node whose probe found one. With a user whose ACL has
/// the scripts but not `DELIFEQ`, that release is refused (`NOPERM`) and nobody reads the refusal: the batch's
/// release script must go as well (both compare and delete the same value), or the grant blocks the key for its
/// whole TTL.
#[test]
fn a_failed_batch_lock_leaves_no_grant_when_delifeq_is_refused() {
    let Some(nodes) = valkeys(3) else { return };
    let locks = scripts_without_delifeq(&nodes);
    // Someone else holds the key on two nodes of three: our batch gets node 0 only, and fails.
    for node in &nodes[1..] {
        node.raw(&cmd(&["SET", "lock:b", "other", "PX", "60000"]));
    }
    let got = locks.try_lock_batch(&["lock:b"], Duration::from_secs(30));
    assert!(
        matches!(got.as_slice(), [Ok(None)]),
        "held by another on nodes 1 and 2: {got:?}"
    );
    wait_until(
        Duration::from_secs(2),
        "the failed batch's grant on node 0 released",
        || nodes[0].raw(&cmd(&["EXISTS", "lock:b"])) == b":0\r\n",
    );
}

/// A node restarted as another server behind the same address: Valkey 9.1 -> Redis 7.0 -> Valkey 9.1. Each new
/// connection's probe is read again: Redis gets scripts only (not one refused `DELIFEQ`: no `ERR` in its
/// errorstats), Valkey natives again, and every cycle is released by all three nodes.
#[test]
fn node_restarted_as_another_server_is_probed_again() {
    let Some(mut nodes) = valkeys(3) else { return };
    let redis = find_binary().expect("redis-server").clone();
    let valkey = find_valkey().expect("valkey").clone();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let locks = manager(urls, one_attempt(ROUND));
    warm(&locks);
    let cycle = |locks: &LockManager, nodes_ref: &[RedisServer], r: &str| {
        let mut lock = locks
            .request(r)
            .ttl(Duration::from_secs(2))
            .acquire()
            .expect("lock");
        locks
            .extend(&mut lock, Duration::from_secs(5))
            .expect("extend");
        assert!(locks.unlock(lock).expect("unlock") >= 2, "{r}: released");
        wait_until(Duration::from_secs(2), "released on every node", || {
            nodes_ref
                .iter()
                .all(|s| s.raw(&cmd(&["EXISTS", r])) == b":0\r\n")
        });
    };
    cycle(&locks, &nodes, "lock:r0");
    assert!(nodes[0].calls("delifeq") >= 1);
    nodes[0].restart_as(&redis);
    wait_until(Duration::from_secs(5), "the node back", || {
        locks.inspect("lock:x").is_ok_and(|i| i.answered() == 3)
    });
    for i in 0..3 {
        cycle(&locks, &nodes, &format!("lock:r1:{i}"));
    }
    assert_eq!(
        info_field(&nodes[0], "errorstats", "errorstat_ERR"),
        None,
        "Redis 7.0 was never sent a native command"
    );
    assert!(
        nodes[0].calls("eval") >= 3,
        "releases by script, in full, on Redis 7.0"
    );
    nodes[0].restart_as(&valkey);
    wait_until(Duration::from_secs(5), "the node back", || {
        locks.inspect("lock:x").is_ok_and(|i| i.answered() == 3)
    });
    for i in 0..3 {
        cycle(&locks, &nodes, &format!("lock:r2:{i}"));
    }
    assert!(nodes[0].calls("delifeq") >= 3, "natives again on Valkey");
    assert_eq!(nodes[0].calls("evalsha") + nodes[0].calls("eval"), 0);
}

/// Guards holding single keys and a set (`request_all(..).hold()`) on Valkey: one renewal batch per node mixes `SET IFEQ PX`
/// replies (`+OK`) and the set's script replies (`:1`), matched by position. Every renewal counts, the leases
/// keep an expiry, and nothing is left after the release.
#[test]
fn mixed_batch_of_native_and_set_renewals() {
    let Some(nodes) = valkeys(3) else { return };
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let locks = manager(urls, one_attempt(ROUND));
    warm(&locks);
    let ttl = Duration::from_millis(1500);
    let a = locks.request("lock:ma").ttl(ttl).hold().expect("hold a");
    let set = locks
        .request_all(["lock:ms1", "lock:ms2"])
        .ttl(ttl)
        .hold()
        .expect("hold set");
    let b = locks.request("lock:mb").ttl(ttl).hold().expect("hold b");
    wait_until(Duration::from_secs(6), "three renewals each", || {
        a.renewals() >= 3 && b.renewals() >= 3 && set.renewals() >= 3
    });
    for node in &nodes {
        for key in ["lock:ma", "lock:mb", "lock:ms1", "lock:ms2"] {
            let left = pttl(node, key);
            assert!(
                left > 0 && left <= 1500,
                "{key}: a lease with an expiry: {left}"
            );
        }
        assert!(node.calls("set") >= 4, "native renewals");
    }
    assert!(!a.is_lost() && !b.is_lost() && !set.is_lost());
    assert!(a.release().expect("release") >= 2);
    assert!(b.release().expect("release") >= 2);
    assert!(set.release().expect("release") >= 2);
    for node in &nodes {
        for key in ["lock:ma", "lock:mb", "lock:ms1", "lock:ms2"] {
            assert_eq!(node.raw(&cmd(&["EXISTS", key])), b":0\r\n", "{key}");
        }
    }
}

/// The release script (by hash or in full) on [`node`]'s key space: deletes `KEYS[1]` if it holds `ARGV[1]`.
fn release(keys: &mut HashMap<Bytes, Bytes>, c: &[Bytes]) -> Action {
    let arg = |i: usize| c.get(i).cloned().unwrap_or_default();
    if keys.get(&arg(3)) == Some(&arg(4)) {
        keys.remove(&arg(3));
        Action::reply(":1\r\n")
    } else {
        Action::reply(":0\r\n")
    }
}

/// A node over a small key space: `SET NX PX`, the release script (by hash or in full), the extend script by
/// hash, `DELIFEQ`, `SET IFEQ PX` (as Valkey 9 answers them), and `COMMAND INFO` answered with `probe`.
fn node(keys: &Mutex<HashMap<Bytes, Bytes>>, probe: &'static [u8], c: &[Bytes]) -> Action {
    let arg = |i: usize| c.get(i).cloned().unwrap_or_default();
    let up = |i: usize| String::from_utf8_lossy(&arg(i)).to_ascii_uppercase();
    let mut keys = keys.lock().unwrap();
    match name(c).as_deref() {
        Some("COMMAND") if up(1) == "INFO" => Action::reply(probe),
        Some("SET") if c.len() == 6 && up(3) == "NX" => match keys.get(&arg(1)) {
            Some(_) => Action::reply("$-1\r\n"),
            None => {
                keys.insert(arg(1), arg(2));
                Action::reply("+OK\r\n")
            }
        },
        Some("SET") if c.len() == 7 && up(3) == "IFEQ" && up(5) == "PX" => {
            if keys.get(&arg(1)) == Some(&arg(4)) {
                Action::reply("+OK\r\n")
            } else {
                Action::reply("$-1\r\n")
            }
        }
        Some("DELIFEQ") => {
            if keys.get(&arg(1)) == Some(&arg(2)) {
                keys.remove(&arg(1));
                Action::reply(":1\r\n")
            } else {
                Action::reply(":0\r\n")
            }
        }
        Some("EVALSHA") if arg(1) == RELEASE_SHA1.as_bytes() => release(&mut keys, c),
        Some("EVAL") if arg(1) == RELEASE.as_bytes() => release(&mut keys, c),
        Some("EVALSHA") if arg(1) == EXTEND_SHA1.as_bytes() => {
            if keys.get(&arg(3)) == Some(&arg(4)) {
                Action::reply(":1\r\n")
            } else {
                Action::reply(":0\r\n")
            }
        }
        _ => setup_reply(c).unwrap_or_else(|| {
            Action::reply(format!(
                "-ERR unknown command '{}'\r\n",
                String::from_utf8_lossy(&arg(0))
            ))
        }),
    }
}

/// Odd replies to `COMMAND INFO DELEX DELIFEQ MSETEX` (a bulk string, errors, a RESP3 null, a map, one or four
/// elements): no panic, no wrong error; a node whose reply does not say "`DELIFEQ` known" gets the scripts, and
/// one that does (RESP3 `_` for `DELEX`; two elements, as a server asked for two names would answer, or three)
/// gets `DELIFEQ`.
#[test]
fn odd_probe_replies() {
    let info = "*1\r\n$7\r\ndelifeq\r\n";
    let table: Vec<(String, bool)> = vec![
        ("$7\r\ndelifeq\r\n".into(), false),
        ("-ERR unknown subcommand 'INFO'\r\n".into(), false),
        (
            "-NOPERM no permissions to run 'command|info'\r\n".into(),
            false,
        ),
        (format!("*2\r\n_\r\n{info}"), true),
        (format!("*2\r\n*-1\r\n{info}"), true),
        (format!("%1\r\n$7\r\ndelifeq\r\n{info}"), false),
        (format!("*1\r\n{info}"), false),
        (format!("*3\r\n$-1\r\n{info}$-1\r\n"), true),
        (format!("*4\r\n$-1\r\n{info}$-1\r\n$-1\r\n"), false),
        ("*0\r\n".into(), false),
        ("_\r\n".into(), false),
        (":1\r\n".into(), false),
    ];
    for (probe, native) in table {
        let probe: &'static [u8] = Box::leak(probe.into_bytes().into_boxed_slice());
        let keys: Arc<Mutex<HashMap<Bytes, Bytes>>> = Arc::default();
        let store = Arc::clone(&keys);
        let server = FakeServer::start(move |c: &[Bytes]| node(&store, probe, c));
        let locks = manager([server.url()], one_attempt(ROUND));
        let shown = String::from_utf8_lossy(probe).into_owned();
        let mut lock = locks
            .request("lock:p")
            .ttl(Duration::from_secs(2))
            .acquire()
            .unwrap_or_else(|e| panic!("{shown:?}: lock: {e}"));
        locks
            .extend(&mut lock, Duration::from_secs(3))
            .unwrap_or_else(|e| panic!("{shown:?}: extend: {e}"));
        assert_eq!(locks.unlock(lock).expect("unlock"), 1, "{shown:?}");
        assert!(keys.lock().unwrap().is_empty(), "{shown:?}: released");
        let names = server.names();
        let delifeq = names.iter().any(|n| n == "DELIFEQ");
        assert_eq!(delifeq, native, "{shown:?}: {names:?}");
    }
}
