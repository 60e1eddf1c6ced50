//! A hostile review of the vacant connections of cluster members (a map refresh dials the nodes its table does
//! not know on connections kept for them: `Fanout::with_vacancies`, `Fanout::occupy`, `Members::refresh`) and
//! of detached releases going with their scripts in full (`net/detached.rs`, `in_full`): attempts to get one
//! server voting for two members, a TLS node dialled in clear, a lost release, a panic or a hang.
//!
//! Real servers and clusters throughout (`tests/support`). Each finding's test fails on the code it was found
//! in; those not fixed here are `#[ignore]`d with what breaks. The tests of things that held up are named for
//! what they show.
//!
//! Findings:
//!
//! 1. Two cluster members unmapped at build (their seeds two masters of one cluster: the build compares seeds
//!    only, and they differ) each dial the cluster's third master on a vacant connection when their first maps
//!    come: both refreshes start in the same round (no slot is served yet), and each takes its list of the
//!    other members' servers before either occupied anything. One server then votes for two members: a lock
//!    is extended on that server's "yes" alone, with the third member refusing. Fixed: a refresh reads the other
//!    members' servers and occupies under one lock (`Routes::occupying`), so the second refresh sees what the
//!    first dialled (the list taken before the refresh, as it was: extended on one server, caught).
//! 2. A `rediss://` node given a vacant connection under a host that is no valid TLS server name (an
//!    all-numeric hostname such as `2130706433`, which the C library resolves to 127.0.0.1, and a node may
//!    announce) was dialled in plain TCP: `Shared::occupy` took the connector's `None` target as "a plain node",
//!    where building with the same node is refused. Its set-up (an `AUTH` password) and every command went in
//!    clear; and once in the member's table, every later map refresh of that member failed (its map read builds
//!    a fanout of the table's nodes, which refuses the name): no new map for the member again. Fixed: occupying
//!    with a TLS node that cannot be named is refused (the vacancy kept); the check removed, the plain server
//!    behind the name answers `PONG`, caught.
//! 3. (decided, not changed: the README's ACL table now says a release detached for room needs `+eval`; the
//!    safety of the rewrite against a `SCRIPT FLUSH` weighs more than a user without `+eval`, who loses only
//!    releases held for room on an overloaded node, to their lease) A detached release is always rewritten to `EVAL` of its script (`in_full`), which needs
//!    `+eval`; the README's permission table says the release needs `+evalsha` and that without `+eval` only
//!    "the fallback fails" (after a `SCRIPT FLUSH`). For such a user every detached release is refused
//!    (`NOPERM`) and its key stays for its whole lease: a lost release on every overload, where the `EVALSHA` it
//!    was before the change ran (the rewrite removed: released, caught). A fix is a choice: make `+eval` required
//!    in the README, or send `SCRIPT LOAD` + `EVALSHA` (one more reply, needs `+script|load`) where the
//!    connection's set-up showed the load allowed, `EVAL` elsewhere.

mod support;

use std::thread;
use std::time::Duration;

use bytes::BytesMut;
use muxlock::net::cluster::key_slot;
use muxlock::net::{Fanout, NodeAddr, Options};
use muxlock::resp::{Value, encode_command};
use muxlock::{Error, LockManager};
use support::locks::{manager, one_attempt, wait_until};
use support::wire::show;
use support::{Fault, FaultProxy, RedisCluster, RedisServer};

const ROUND: Duration = Duration::from_millis(500);

/// Sends `ACL SETUSER default <rules>` to node `i` of `c`.
#[track_caller]
fn acl(c: &RedisCluster, i: usize, rules: &[&str]) {
    let mut parts = vec!["ACL", "SETUSER", "default"];
    parts.extend_from_slice(rules);
    c.command_ok(i, &parts);
}

/// The nodes `nodes` of `c` refuse `CLUSTER SHARDS` and `CLUSTER SLOTS` while `f` runs (a manager built then
/// cannot read the member's map: its table is its seeds, unmapped), and answer them again after.
fn without_maps<T>(c: &RedisCluster, nodes: &[usize], f: impl FnOnce() -> T) -> T {
    for &i in nodes {
        acl(c, i, &["-cluster|shards", "-cluster|slots"]);
    }
    let out = f();
    for &i in nodes {
        acl(c, i, &["+cluster|shards", "+cluster|slots"]);
    }
    out
}

/// The value `key` holds on node `i` of `c` (`None`: absent or not served there).
#[track_caller]
fn get(c: &RedisCluster, i: usize, key: &str) -> Option<Vec<u8>> {
    let raw = c.node(i).raw(&support::cmd(&["GET", key]));
    if raw == b"$-1\r\n" || raw.starts_with(b"-") {
        return None;
    }
    let body = raw
        .splitn(2, |&b| b == b'\n')
        .nth(1)
        .unwrap_or_else(|| panic!("GET: {}", show(&raw)));
    Some(body.strip_suffix(b"\r\n").unwrap_or(body).to_vec())
}

/// A key whose slot is on shard `shard` of `c`.
fn key_on(c: &RedisCluster, shard: usize, prefix: &str) -> String {
    (0..100_000)
        .map(|i| format!("{prefix}:{i}"))
        .find(|k| c.owner_of(key_slot(k.as_bytes())) == c.master_index(shard))
        .expect("a key on that shard")
}

// ---------------------------------------------------------------------------------------------------------
// Finding 1: two members' refreshes dial the same new node at once.
// ---------------------------------------------------------------------------------------------------------

/// Members 0 and 1 are the same cluster of three masters, given by different seeds (masters 0 and 1), both
/// unmapped at build (the build compares their seeds, which differ: accepted, as before this change, when each
/// member served only its seed's slots). Member 2 is a plain server. A key of master 2's slots: the first round
/// finds no slot served on either member and asks both for a map; both refreshes take their list of "other
/// members' servers" before either dialled master 2, so both dial it, and it answers for both. An acquisition
/// cannot show it (the second `SET NX` on the same server is refused), an extension does: taken with master 2
/// and member 2, the lock is extended with member 2 refusing, on master 2's "yes" counted for members 0 and 1.
#[test]
fn two_members_refreshing_at_once_never_dial_the_same_new_node() {
    let c = RedisCluster::start(3);
    let plain = RedisServer::start();
    let proxy = FaultProxy::start(plain.addr());
    let (m0, m1, m2) = (c.master_index(0), c.master_index(1), c.master_index(2));
    let urls = vec![
        format!("redis+cluster://127.0.0.1:{}", c.node(m0).port()),
        format!("redis+cluster://127.0.0.1:{}", c.node(m1).port()),
        proxy.url(),
    ];
    let a: LockManager = without_maps(&c, &[m0, m1], || manager(urls, one_attempt(ROUND)));
    let key = key_on(&c, 2, "twice");
    let ttl = Duration::from_secs(5);
    let take = || {
        let got = a.request(&key).ttl(ttl).once().acquire();
        if got.is_err() {
            thread::sleep(Duration::from_millis(150));
        }
        got.ok()
    };
    let mut first = None;
    wait_until(
        Duration::from_secs(5),
        "a first lock on master 2 and member 2",
        || {
            first = take();
            first.is_some()
        },
    );
    a.unlock(first.expect("taken")).expect("released");
    // Both members' maps are read by now (their refreshes started in the same round); once more, to be sure.
    thread::sleep(Duration::from_millis(300));
    let mut lock = None;
    wait_until(Duration::from_secs(5), "the lock again", || {
        lock = take();
        lock.is_some()
    });
    let mut lock = lock.expect("taken");
    assert_eq!(get(&c, m2, &key).as_deref(), Some(lock.value().as_bytes()));
    assert_eq!(plain.raw(&support::cmd(&["EXISTS", &key])), b":1\r\n");
    proxy.set(Fault::Refuse);
    match a.extend(&mut lock, ttl) {
        Err(Error::LockLost(report)) => eprintln!("lost, as it should be: {report}"),
        Err(e) => panic!("unexpected error: {e}"),
        Ok(()) => panic!(
            "extended with member 2 refusing: master 2 alone said yes ({}), counted for members 0 and 1",
            show(&c.node(m2).raw(&support::cmd(&["PTTL", &key])))
        ),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Finding 2: a `rediss://` node occupying a vacancy is dialled in clear.
// ---------------------------------------------------------------------------------------------------------

/// A host that resolves (the C library reads `2130706433` as 127.0.0.1) but is no valid TLS server name (an
/// all-numeric name is neither a DNS name nor an IP literal to rustls): what a map may name a node by (its
/// announced hostname), given to a TLS vacancy. Building with it is refused (`Fanout::new`: not a valid TLS
/// server name); occupying with it dialled plain TCP, sending everything (an `AUTH` password included) in
/// clear to what should have been a TLS port. A plain server behind it shows it: it answered `PONG`.
#[test]
fn a_tls_node_that_cannot_be_named_never_occupies_a_vacancy_in_clear() {
    let plain = RedisServer::start();
    let odd: NodeAddr = format!("rediss://2130706433:{}#insecure", plain.port())
        .parse()
        .expect("an address");
    assert!(
        odd.resolve().is_ok_and(|a| !a.is_empty()),
        "the name resolves here"
    );
    let err = Fanout::new(vec![odd.clone()], Options::default()).expect_err("refused at build");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    // One vacancy whose placeholder is a TLS node (a TLS member's seed): the TLS settings are made at build.
    let seed: NodeAddr = format!("rediss://127.0.0.1:{}#insecure", plain.port())
        .parse()
        .expect("an address");
    let fanout = Fanout::with_vacancies(vec![seed], 1, Options::default()).expect("a fanout");
    let occupied = fanout.occupy(0, odd);
    let mut ping = BytesMut::new();
    encode_command(&[b"PING"], &mut ping);
    let mut round = fanout.round(std::time::Instant::now() + Duration::from_secs(1));
    round.send(0, &ping, 1);
    let reply = round.next().map(|(_, r)| r);
    drop(round);
    assert!(
        !matches!(reply, Some(Ok(Value::SimpleString(_)))),
        "a rediss:// node was spoken to in clear (occupied: {occupied}): {reply:?}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// Finding 3: a detached release in full needs `+eval`, which the README says only the fallback needs.
// ---------------------------------------------------------------------------------------------------------

/// Every node gets user `locker` with the README's permissions for the scripts (its table: `+evalsha` for the
/// release and extend scripts, `+script|load`, `+get +del +pexpire`, `+info`), without `+eval`, which the table
/// says only the fallback after a `SCRIPT FLUSH` needs. A manager with `max_in_flight` 2 takes six locks on
/// every node, node 2 is paused, and every lock is released (decided on nodes 0 and 1; some of node 2's
/// requests held for room, then detached). Nothing is flushed. When node 2 resumes, a detached release goes as
/// `EVAL` of its script (`in_full`), which this user may not run (`NOPERM`): its key stays on node 2 for its
/// whole lease, where the `EVALSHA` it was would have run.
#[test]
#[ignore = "finding 3, by decision: a release detached for room goes as EVAL, so it needs +eval (README's ACL table says so now); a user without it loses such releases to their lease"]
fn a_detached_release_reaches_a_node_whose_user_may_run_the_scripts_by_hash_only() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for s in &servers {
        let reply = s.raw(&support::cmd(&[
            "ACL",
            "SETUSER",
            "locker",
            "on",
            ">s3cret",
            "~held:*",
            "+set",
            "+get",
            "+del",
            "+pexpire",
            "+evalsha",
            "+script|load",
            "+info",
            "+ping",
        ]));
        assert_eq!(reply, b"+OK\r\n", "{}", show(&reply));
    }
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("redis://locker:s3cret@127.0.0.1:{}", s.port()))
        .collect();
    let max = 2;
    let ttl = Duration::from_secs(30);
    let config = one_attempt(Duration::from_secs(2)).with_max_in_flight(max);
    let a = std::sync::Arc::new(manager(urls, config));
    wait_until(Duration::from_secs(5), "the connections set up", || {
        let lock = a.request("held:warm").ttl(ttl).once().acquire();
        lock.is_ok_and(|l| a.unlock(l).is_ok()) && a.stats().nodes.iter().all(|n| n.granted > 0)
    });
    let names: Vec<String> = (0..3 * max).map(|i| format!("held:{i}")).collect();
    let everywhere = |name: &str| {
        for _ in 0..100 {
            let lock = a.request(name).ttl(ttl).once().acquire().expect(name);
            let want = format!("${}\r\n{}\r\n", lock.value().len(), lock.value());
            if servers
                .iter()
                .all(|s| s.raw(&support::cmd(&["GET", name])) == want.as_bytes())
            {
                return lock;
            }
            let _ = a.unlock(lock);
            thread::sleep(Duration::from_millis(10));
        }
        panic!("{name} never set on every node");
    };
    let taken: Vec<_> = names.iter().map(|n| everywhere(n)).collect();
    let before = a.stats().nodes[2].net.detached;
    servers[2].pause();
    let releases: Vec<_> = taken
        .into_iter()
        .map(|lock| {
            let m = std::sync::Arc::clone(&a);
            thread::spawn(move || m.unlock(lock))
        })
        .collect();
    for r in releases {
        let v = r.join().expect("release");
        assert!(matches!(v, Ok(n) if n >= 2), "{v:?}");
    }
    let detached = a.stats().nodes[2].net.detached - before;
    assert!(detached >= 1, "no request was held for room");
    servers[2].resume();
    thread::sleep(Duration::from_millis(300));
    let net = a.stats().nodes[2].net.clone();
    assert_eq!(net.given_up, 0, "{net:?}");
    let left: Vec<&String> = names
        .iter()
        .filter(|n| servers[2].raw(&support::cmd(&["GET", n])) != b"$-1\r\n")
        .collect();
    let errors = String::from_utf8_lossy(&servers[2].raw(&support::cmd(&["INFO", "errorstats"])))
        .into_owned();
    assert!(
        left.is_empty(),
        "released locks still on node 2 for their lease: {left:?} ({detached} detached); node 2's errors: {errors}"
    );
}
