//! Attacks on the vacant connections of cluster members (a map refresh dials the nodes its table does
//! not know on connections kept for them: `Fanout::with_vacancies`, `Fanout::occupy`, `Members::refresh`) and
//! of detached releases going with their scripts in full (`redlock/scripts.rs`, "Releases go in full"): attempts to get one
//! server voting for two members, a TLS node dialled in clear, a lost release, a panic or a hang.
//!
//! Real servers and clusters throughout (`tests/support`). A known limit is a test that asserts
//! what happens there; the tests of what holds are named for what they show.
//!
//! Hazards:
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
//! 3. A detached release went as `EVAL` of its script, which needs `+eval`, where the
//!    README's permission table said the release needs `+evalsha` and only the fallback after a `SCRIPT FLUSH`
//!    needs `+eval`: for a user without it every detached release was refused (`NOPERM`) and its key stayed for
//!    its lease, silently. Decided: every release on a node without a native compare-and-delete goes in full
//!    (`redlock/scripts.rs`, "Releases go in full"), so `+eval` is what a release needs (the README's table says
//!    so); a user without it is refused *every* such release, and each awaited one reports it (an error naming
//!    `NOPERM`, never `Ok`): the gap shows at the first release, not only under overload. With the README's
//!    permissions, a detached release reaches its node.

use crate::support;

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
// Hazard 1: two members' refreshes dial the same new node at once.
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
// Hazard 2: a `rediss://` node occupying a vacancy is dialled in clear.
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
// Hazard 3: a release in full needs `+eval`; without it the release is refused and says so.
// ---------------------------------------------------------------------------------------------------------

/// The README's permissions for the scripts (its table: `+eval` for releases, `+evalsha` for extensions,
/// `+script|load`, `+get +del +pexpire`, `+info`), for keys `~held:*`, with `+eval` or without.
fn script_user(servers: &[RedisServer], eval: bool) -> Vec<String> {
    for s in servers {
        let mut parts = vec![
            "ACL",
            "SETUSER",
            "locker",
            "reset",
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
            "+time",
            "+ping",
        ];
        if eval {
            parts.push("+eval");
        }
        let reply = s.raw(&support::cmd(&parts));
        assert_eq!(reply, b"+OK\r\n", "{}", show(&reply));
    }
    servers
        .iter()
        .map(|s| format!("redis://locker:s3cret@127.0.0.1:{}", s.port()))
        .collect()
}

/// A manager with `max_in_flight` 2 for the README's script user takes six locks on every node, node 2 is
/// paused, and every lock is released (decided on nodes 0 and 1; some of node 2's requests held for room, then
/// detached). Nothing is flushed. When node 2 resumes, every detached release runs there: nothing is left on it.
#[test]
fn a_detached_release_reaches_a_node_whose_user_has_the_readme_permissions() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls = script_user(&servers, true);
    let max = 2;
    let ttl = Duration::from_secs(30);
    // Counted in requests of one command: without the clock check, whose `TIME`s make an acquisition three.
    let config = one_attempt(Duration::from_secs(2))
        .with_max_in_flight(max)
        .with_clock_check(false);
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
    let left = |servers: &[RedisServer]| -> Vec<String> {
        names
            .iter()
            .filter(|n| servers[2].raw(&support::cmd(&["GET", n])) != b"$-1\r\n")
            .cloned()
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while !left(&servers).is_empty() && std::time::Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let net = a.stats().nodes[2].net.clone();
    assert_eq!(net.given_up, 0, "{net:?}");
    let errors = String::from_utf8_lossy(&servers[2].raw(&support::cmd(&["INFO", "errorstats"])))
        .into_owned();
    assert!(
        left(&servers).is_empty(),
        "released locks still on node 2 for their lease: {:?} ({detached} detached); node 2's errors: {errors}",
        left(&servers)
    );
}

/// The same user without `+eval`: locks are taken (`SET`), and every release is refused on every node
/// (`NOPERM`, nothing runs) and reported so, an error naming `NOPERM`, never `Ok`; the key stays on every node,
/// as the error says it may. The control: with `+eval` the same release is confirmed.
#[test]
fn without_eval_every_release_is_refused_and_reported() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let ttl = Duration::from_secs(30);
    for eval in [false, true] {
        let urls = script_user(&servers, eval);
        let locks = manager(urls, one_attempt(ROUND));
        let name = format!("held:eval-{eval}");
        let lock = locks
            .request(&name)
            .ttl(ttl)
            .once()
            .acquire()
            .expect("locked: SET needs no Lua");
        let value = lock.value().to_owned();
        let released = locks.unlock(lock);
        match eval {
            false => {
                let kept = servers
                    .iter()
                    .filter(|s| {
                        s.raw(&support::cmd(&["GET", &name]))
                            == format!("${}\r\n{value}\r\n", value.len()).as_bytes()
                    })
                    .count();
                let e = released.expect_err("refused without +eval");
                assert!(
                    e.is_quorum() && e.to_string().contains("NOPERM"),
                    "without +eval: {e}"
                );
                assert_eq!(kept, 3, "without +eval, nothing ran: {e}");
            }
            true => {
                assert!(
                    matches!(released, Ok(n) if n >= 2),
                    "with +eval: {released:?}"
                );
                wait_until(Duration::from_secs(2), "released on every node", || {
                    servers
                        .iter()
                        .all(|s| s.raw(&support::cmd(&["GET", &name])) == b"$-1\r\n")
                });
            }
        }
    }
}
