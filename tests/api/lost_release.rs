//! A release that a majority answered but fewer than a majority confirmed is [`Error::LockLost`] on every release
//! path (a result that cannot be mistaken for success), with every node's outcome; fewer than a
//! majority answering stays [`Error::Quorum`]. A nested reentrant hold's release deletes no key and still counts.
//! A release held for room on a full node still reaches it after its round was decided.

use crate::support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Error, Lock, LockManager};
use support::locks;
use support::process::valkey_or_skip;
use support::{Cluster, RedisServer, cmd};

const TTL: Duration = Duration::from_secs(10);

/// Deletes `keys` on nodes `on`, as an expiry (or an operator) would.
fn delete(cluster: &Cluster, on: &[usize], keys: &[&str]) {
    for &i in on {
        for k in keys {
            cluster.node(i).raw(&cmd(&["DEL", k]));
        }
    }
}

/// `result` is `LockLost` whose report has `granted` nodes that confirmed.
#[track_caller]
fn lost<T: std::fmt::Debug>(result: Result<T, Error>, granted: usize) {
    match result {
        Err(Error::LockLost(r)) => {
            assert_eq!(r.granted(), granted, "{r}");
            assert_eq!(r.nodes().len(), 3, "{r}");
        }
        other => panic!("expected LockLost with {granted} confirmed, got {other:?}"),
    }
}

#[test]
fn every_release_of_a_lock_no_longer_on_a_majority_is_lock_lost() {
    let cluster = Cluster::start(3);
    let locks = locks::quick_manager_of(&cluster);
    let acquire = |name: &str| locks.request(name).ttl(TTL).acquire().expect("free");

    // Plain: gone from two of three nodes; the third still deletes it, and that is not enough.
    let lock = acquire("lost:plain");
    delete(&cluster, &[0, 1], &["lost:plain"]);
    lost(locks.unlock(lock), 1);
    // By value, once nothing is left anywhere.
    let lock = acquire("lost:value");
    let value = lock.value().to_owned();
    delete(&cluster, &[0, 1, 2], &["lost:value"]);
    lost(locks.unlock_value("lost:value", &value), 0);
    drop(lock);

    // A set: gone from two of three nodes.
    let set = locks
        .request_all(["lost:a", "lost:b"])
        .ttl(TTL)
        .acquire()
        .expect("free");
    delete(&cluster, &[0, 1], &["lost:a", "lost:b"]);
    lost(locks.unlock(set), 1);

    // Fenced.
    let lock = locks
        .request("lost:fenced")
        .ttl(TTL)
        .fenced()
        .acquire()
        .expect("free");
    delete(&cluster, &[1, 2], &["lost:fenced"]);
    lost(locks.unlock(lock), 1);

    // A batch: each entry has its own verdict.
    let got: Vec<_> = locks
        .try_lock_batch(&["lost:x", "lost:y"], TTL)
        .into_iter()
        .map(|r| r.expect("nodes up").expect("free"))
        .collect();
    delete(&cluster, &[0, 1, 2], &["lost:x"]);
    let mut results = locks.unlock_batch(got).into_iter();
    lost(results.next().expect("two results"), 0);
    assert_eq!(results.next().expect("two results"), Ok(3));

    // A guard whose key went: its release says so; a lost guard dropped is released quietly.
    let guard = locks.request("lost:guard").ttl(TTL).hold().expect("free");
    delete(&cluster, &[0, 1, 2], &["lost:guard"]);
    lost(guard.release(), 0);
    let guard = locks.request("lost:dropped").ttl(TTL).hold().expect("free");
    delete(&cluster, &[0, 1, 2], &["lost:dropped"]);
    drop(guard);
}

#[test]
fn a_nested_owned_release_counts_and_a_lost_hold_is_lock_lost() {
    let cluster = Cluster::start(3);
    let locks = locks::quick_manager_of(&cluster);
    let me = locks.owner().expect("randomness");
    let hold = || {
        locks
            .request("lost:tree")
            .ttl(TTL)
            .owned(&me)
            .acquire()
            .expect("free or mine")
    };
    let (outer, inner) = (hold(), hold());
    // The nested hold's release deletes no key: the nodes removed the hold, so it is confirmed (the round ends
    // at a majority).
    assert!(locks.unlock(inner).expect("confirmed") >= 2);
    delete(&cluster, &[0, 1], &["lost:tree"]);
    lost(locks.unlock(outer), 1);
}

#[test]
fn a_release_a_majority_did_not_answer_stays_a_quorum_error() {
    let mut cluster = Cluster::start(3);
    let locks = locks::quick_manager_of(&cluster);
    let lock = locks.request("lost:down").ttl(TTL).acquire().expect("free");
    delete(&cluster, &[0], &["lost:down"]);
    cluster.kill(1);
    cluster.kill(2);
    let err = locks.unlock(lock).expect_err("one node answered");
    assert!(err.is_quorum(), "{err}");
}

/// A release held for room on a full node, on every release path: node 2 is paused while `3 * MAX` releases go out with
/// `max_in_flight` `MAX`: its queue takes `2 * MAX` (the release reserve), the others' requests to it are held for
/// room, and every release is decided on nodes 0 and 1 (`Ok(2)`, or `Ok(n >= 2)` folded) before node 2 answers.
/// Once it resumes, the held requests, detached from their rounds, still reach it: no key is left there.
fn releases_held_for_room_reach_the_node(servers: &mut [RedisServer], fold: bool, tasks: bool) {
    const MAX: usize = 8;
    const RELEASES: usize = 3 * MAX;
    let config = locks::one_attempt(Duration::from_secs(2))
        .with_max_in_flight(MAX)
        .with_fold_releases(fold);
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let manager = Arc::new(locks::manager(urls, config));
    // A new connection's set-up fills a queue this small: wait until it is done on every node.
    let setup = |m: &LockManager| m.stats().nodes.iter().all(|n| n.granted > 0);
    locks::wait_until(Duration::from_secs(5), "the connections set up", || {
        let lock = manager.request("held:warm").ttl(TTL).once().acquire();
        lock.is_ok_and(|l| manager.unlock(l).is_ok()) && setup(&manager)
    });
    let names: Vec<String> = (0..RELEASES).map(|i| format!("held:{i}")).collect();
    let taken: Vec<Lock> = names
        .iter()
        .map(|n| take_everywhere(&manager, servers, n))
        .collect();
    let before = manager.stats().nodes[2].net.clone();
    servers[2].pause();
    let verdicts: Vec<muxlock::Result<usize>> = match tasks {
        false => taken
            .into_iter()
            .map(|lock| {
                let m = Arc::clone(&manager);
                thread::spawn(move || m.unlock(lock))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().expect("release"))
            .collect(),
        true => {
            let rt = support::rt::two_workers();
            let tasks: Vec<_> = taken
                .into_iter()
                .map(|lock| {
                    let m = Arc::clone(&manager);
                    rt.spawn(async move { m.unlock_async(lock).await })
                })
                .collect();
            tasks
                .into_iter()
                .map(|t| rt.block_on(t).expect("task"))
                .collect()
        }
    };
    for v in &verdicts {
        assert!(matches!(v, Ok(n) if *n >= 2), "{v:?}");
    }
    let net = manager.stats().nodes[2].net.since(&before);
    assert!(net.detached >= 1, "no request was held for room: {net:?}");
    servers[2].resume();
    // Nobody else uses the manager: the fanout drives for the detached releases on its own.
    let left = |servers: &[RedisServer]| -> Vec<String> {
        names
            .iter()
            .filter(|n| servers[2].raw(&cmd(&["GET", n])) != b"$-1\r\n")
            .cloned()
            .collect()
    };
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !left(servers).is_empty() && std::time::Instant::now() < until {
        thread::sleep(Duration::from_millis(2));
    }
    let net = manager.stats().nodes[2].net.since(&before);
    let still = left(servers);
    assert!(
        still.is_empty(),
        "keys left on node 2 after 5 s: {still:?}; node 2: {net:?}"
    );
    let net = manager.stats().nodes[2].net.since(&before);
    assert_eq!(net.given_up, 0, "{net:?}");
    // The late replies are read and dropped, none counted for another command: once they are in, node 2's next
    // vote is its own `OK` (a release's reply taken for it would be an integer: not a grant).
    let taken = manager.stats().nodes[2].taken;
    granted_by_node_2(&manager, "held:after");
    assert_eq!(manager.stats().nodes[2].taken, taken);
}

/// `name`'s lock, set on every node (an acquisition refused on a node whose queue was still full of set-up
/// replies is released and taken again).
#[track_caller]
fn take_everywhere(manager: &LockManager, servers: &[RedisServer], name: &str) -> Lock {
    for _ in 0..100 {
        let lock = manager.request(name).ttl(TTL).once().acquire().expect(name);
        let want = format!("${}\r\n{}\r\n", lock.value().len(), lock.value());
        if servers
            .iter()
            .all(|s| s.raw(&cmd(&["GET", name])) == want.as_bytes())
        {
            return lock;
        }
        let _ = manager.unlock(lock);
        thread::sleep(Duration::from_millis(10));
    }
    panic!("{name} never set on every node");
}

/// Acquires and releases `name` until node 2 grants it (its queue may still be full of replies unread), for up
/// to 5 s.
#[track_caller]
fn granted_by_node_2(manager: &LockManager, name: &str) {
    locks::wait_until(Duration::from_secs(5), "node 2 grants again", || {
        let before = manager.stats().nodes[2].granted;
        let lock = manager.request(name).ttl(TTL).once().acquire().expect(name);
        let granted = manager.stats().nodes[2].granted > before;
        assert!(matches!(manager.unlock(lock), Ok(n) if n >= 2));
        granted
    });
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

/// Plain `unlock` (not folded) by threads, on script nodes (Redis) and native ones (Valkey's `DELIFEQ`).
#[test]
fn a_plain_release_held_for_room_still_reaches_a_paused_node() {
    releases_held_for_room_reach_the_node(&mut redis(3), false, false);
    if let Some(mut v) = valkeys(3) {
        releases_held_for_room_reach_the_node(&mut v, false, false);
    }
}

/// `unlock_async` from tasks: a task's round is dropped the same way once decided.
#[test]
fn an_async_release_held_for_room_still_reaches_a_paused_node() {
    releases_held_for_room_reach_the_node(&mut redis(3), false, true);
}

/// Folded releases on native nodes (one `DELIFEQ` per key, one request per fold: a fold larger than the room
/// left is held whole), by threads and by tasks. (On script nodes a fold is one `RELEASE_BATCH`, one reply: a few
/// folds never fill a node's queue.)
#[test]
fn a_folded_release_held_for_room_still_reaches_a_paused_node() {
    let Some(mut v) = valkeys(3) else { return };
    releases_held_for_room_reach_the_node(&mut v, true, false);
    let Some(mut v) = valkeys(3) else { return };
    releases_held_for_room_reach_the_node(&mut v, true, true);
}

/// Releases detached on a node whose connection is being dialled again, when a round that then ends offers
/// that node a request: node 0 is paused with its queue full (`2 * MAX` releases of values nobody holds) and
/// two more releases, of locks held on every node, detached there; its connection is dropped as hung and the
/// redial waits in a full accept queue (`--tcp-backlog 0`, one place, taken). An acquisition of another lock
/// is offered to node 0 while it connects, and is decided on nodes 1 and 2. Node 0 resumes; nobody uses the
/// manager any more. The two released keys must still leave node 0 soon after its connect completes (a SYN
/// sent again about a second after the redial), well before their lease: whoever queued them on the connection
/// must see that someone drives the connect to its end and writes them, or leave them with the fanout, which
/// does.
#[test]
fn releases_detached_on_a_reconnecting_node_still_reach_it_after_the_round_that_met_them_ends() {
    // Room for the set-up of a new connection (15 commands), the two releases and one acquisition.
    const MAX: usize = 32;
    const LEASE: Duration = Duration::from_secs(30);
    const HUNG: Duration = Duration::from_secs(3);
    let mut x = RedisServer::builder().arg("--tcp-backlog").arg("0").start();
    let y = RedisServer::start();
    let z = RedisServer::start();
    let config = locks::one_attempt(Duration::from_millis(500))
        .with_max_in_flight(MAX)
        .with_hung_timeout(HUNG)
        .with_connect_timeout(Duration::from_secs(10));
    let servers = [x.url(), y.url(), z.url()];
    let manager = locks::manager(servers, config);
    locks::wait_until(Duration::from_secs(5), "the connections set up", || {
        let lock = manager.request("redial:warm").ttl(LEASE).once().acquire();
        lock.is_ok_and(|l| manager.unlock(l).is_ok())
            && manager.stats().nodes.iter().all(|n| n.granted > 0)
    });
    let all = [&x, &y, &z];
    let take = |name: &str| -> Lock {
        locks::wait_until(Duration::from_secs(5), "a lock set on every node", || {
            let lock = manager
                .request(name)
                .ttl(LEASE)
                .once()
                .acquire()
                .expect(name);
            let want = format!("${}\r\n{}\r\n", lock.value().len(), lock.value());
            let everywhere = all
                .iter()
                .all(|s| s.raw(&cmd(&["GET", name])) == want.as_bytes());
            let _ = manager.unlock(lock);
            everywhere
        });
        manager
            .request(name)
            .ttl(LEASE)
            .once()
            .acquire()
            .expect(name)
    };
    // Node 0's queue is filled by the releases of `2 * MAX` locks; the last two are held for room there.
    let fill: Vec<String> = (0..2 * MAX).map(|i| format!("redial:fill:{i}")).collect();
    let names = ["redial:a", "redial:b"];
    let held: Vec<Lock> = fill
        .iter()
        .map(String::as_str)
        .chain(names)
        .map(take)
        .collect();
    let before = manager.stats().nodes[0].net.clone();
    x.pause();
    // Node 0's accept queue is filled, so a redial waits until it is resumed.
    let filler = x.fill_accept_queue();
    // The first release queued starts node 0's hung clock; the last two are detached later, so that the
    // connection is dropped and dialled again well before they are given up.
    let mut held = held.into_iter();
    for lock in held.by_ref().take(2 * MAX) {
        assert!(
            matches!(manager.unlock(lock), Ok(2)),
            "released on nodes 1 and 2"
        );
    }
    thread::sleep(HUNG * 2 / 3);
    for lock in held {
        assert!(
            matches!(manager.unlock(lock), Ok(2)),
            "released on nodes 1 and 2"
        );
    }
    let net = manager.stats().nodes[0].net.since(&before);
    assert_eq!(net.detached, 2, "both releases detached on node 0: {net:?}");
    // Dropped as hung, then dialled again: the connect waits for node 0's accept queue.
    locks::wait_until(Duration::from_secs(5), "node 0 dialled again", || {
        manager.stats().nodes[0].net.connects > before.connects
    });
    let other = manager
        .request("redial:other")
        .ttl(LEASE)
        .once()
        .acquire()
        .expect("granted by nodes 1 and 2");
    x.resume();
    drop(filler);
    let left = || -> Vec<&str> {
        names
            .iter()
            .copied()
            .filter(|n| x.raw(&cmd(&["EXISTS", n])) != b":0\r\n")
            .collect()
    };
    let until = Instant::now() + Duration::from_secs(5);
    while !left().is_empty() && Instant::now() < until {
        thread::sleep(Duration::from_millis(5));
    }
    let net = manager.stats().nodes[0].net.since(&before);
    assert!(
        left().is_empty(),
        "released keys {:?} left on node 0 5 s after it resumed (lease {LEASE:?}); node 0: {net:?}",
        left()
    );
    assert_eq!(net.given_up, 0, "{net:?}");
    let _ = manager.unlock(other);
}

/// The servers close idle client connections (`timeout 1`, as deployments set to shed forgotten clients; a NAT
/// or a load balancer that drops idle flows does the same): a lock is taken, then the manager is left idle until
/// every node has closed its connection, then the lock is released. Every node is up and answers; the release
/// must reach each of them (a majority confirming, the key gone everywhere), not be written into connections the
/// nodes had already closed and be lost there, the keys left until their lease ends.
#[test]
fn a_release_on_connections_the_servers_closed_as_idle_still_deletes_the_keys() {
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::builder().arg("--timeout").arg("1").start())
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let manager = locks::manager(urls, locks::one_attempt(Duration::from_millis(200)));
    let lock = manager
        .request("idle:a")
        .ttl(Duration::from_secs(30))
        .once()
        .acquire()
        .expect("granted by the three nodes");
    // Each node closed the manager's connection: the only client left is the one asking.
    locks::wait_until(
        Duration::from_secs(10),
        "the nodes closed the idle connections",
        || {
            servers.iter().all(|s| {
                String::from_utf8_lossy(&s.raw(&cmd(&["INFO", "clients"])))
                    .contains("connected_clients:1\r\n")
            })
        },
    );
    let released = manager.unlock(lock);
    assert!(
        matches!(released, Ok(n) if n >= 2),
        "the release of a lock held on three live nodes: {released:?}"
    );
    // A node that did not answer within the round still deletes the key when the request reaches it (on a
    // connection dialled again, behind its set-up), soon after.
    let holding = || -> Vec<usize> {
        (0..3)
            .filter(|&i| servers[i].raw(&cmd(&["EXISTS", "idle:a"])) == b":1\r\n")
            .collect()
    };
    within(Duration::from_secs(3), || holding().is_empty());
    let left = holding();
    assert!(
        left.is_empty(),
        "released ({released:?}), yet the key is left on nodes {left:?}: {:?}",
        manager.stats().nodes
    );
}

/// Node 2 restarts with its data (every write on disk) while the manager is idle, as in a rolling restart: the
/// lock taken before stays on node 2. Its release is confirmed by nodes 0 and 1, and must reach node 2 as well,
/// which is up and answers ("nodes that had not answered still delete it when the request reaches them",
/// `unlock`'s contract): not be written into the connection node 2's old process closed, and be lost there with
/// no error, the key left until its lease ends.
#[test]
fn a_release_after_a_node_restarted_with_its_data_while_idle_reaches_it() {
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::builder().persist_every_write().start())
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let manager = locks::manager(urls, locks::one_attempt(Duration::from_millis(200)));
    let lock = manager
        .request("restarted:a")
        .ttl(Duration::from_secs(30))
        .once()
        .acquire()
        .expect("granted by the three nodes");
    let value = lock.value().to_owned();
    locks::wait_until(Duration::from_secs(2), "node 2 granted", || {
        String::from_utf8_lossy(&servers[2].raw(&cmd(&["GET", "restarted:a"]))).contains(&value)
    });
    servers[2].restart();
    assert!(
        String::from_utf8_lossy(&servers[2].raw(&cmd(&["GET", "restarted:a"]))).contains(&value),
        "node 2 kept the key across its restart"
    );
    let released = manager.unlock(lock);
    assert!(
        matches!(released, Ok(n) if n >= 2),
        "released by a majority: {released:?}"
    );
    // Node 2 was not awaited: its request reaches it on a new connection, behind the set-up, soon after.
    let read = || servers[2].raw(&cmd(&["GET", "restarted:a"]));
    within(Duration::from_secs(3), || read() == b"$-1\r\n");
    let left = read();
    assert!(
        !String::from_utf8_lossy(&left).contains(&value),
        "released (confirmed by nodes 0 and 1), yet node 2 keeps the key for its lease: {:?}; node 2: {:?}",
        String::from_utf8_lossy(&left),
        manager.stats().nodes[2].net
    );
}

/// The same release, deterministically behind unread replies and requests. Node 2 sleeps (`DEBUG SLEEP`, then
/// `CLIENT PAUSE WRITE`) while a key is inspected (a read) and a second lock is acquired, both decided without
/// it; when it wakes it answers the read, holds the acquisition (a write) unanswered, and nobody polls. Then it
/// is restarted with its data. The release's first turn reads the read's replies and the close together, with
/// the acquisition still outstanding: the connection had everything written and no sign of life for longer than
/// the node's backoff before that turn, so the close is not the node's failure (it restarted while nobody
/// looked): it is dialled again at once and the release reaches it. Judged a failure (the replies taken for a
/// sign of life just before the close, or the close for one of a node that fails what it is sent), the node's
/// backoff refused the release for it and left the key for its lease.
#[test]
fn a_release_after_a_node_restarted_behind_unread_replies_reaches_it() {
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|i| {
            let node = RedisServer::builder().persist_every_write();
            match i {
                2 => node.args(["--enable-debug-command", "yes"]),
                _ => node,
            }
            .start()
        })
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    // A round of a second: the release is decided by nodes 0 and 1 on a loaded machine too (they write every key
    // to disk before they answer); node 2's share of it goes whatever the round's length.
    let manager = locks::manager(urls, locks::one_attempt(Duration::from_secs(1)));
    let ttl = Duration::from_secs(30);
    let acquire = |name: &str| manager.request(name).ttl(ttl).once().acquire().expect(name);
    let lock = acquire("unread:a");
    let value = lock.value().to_owned();
    let on_node_2 = |servers: &[RedisServer]| {
        String::from_utf8_lossy(&servers[2].raw(&cmd(&["GET", "unread:a"]))).contains(&value)
    };
    locks::wait_until(Duration::from_secs(2), "node 2 granted", || {
        on_node_2(&servers)
    });
    let mut admin = servers[2].connect();
    let mut pipeline = cmd(&["DEBUG", "SLEEP", "2"]);
    pipeline.extend(cmd(&["CLIENT", "PAUSE", "10000", "WRITE"]));
    std::io::Write::write_all(&mut admin, &pipeline).expect("write");
    thread::sleep(Duration::from_millis(50));
    let seen = manager.inspect("unread:a").expect("nodes 0 and 1 answer");
    assert_eq!(seen.answered(), 2, "node 2 answered in its sleep");
    let unanswered = acquire("unread:b");
    let mut replies = [0u8; 10];
    std::io::Read::read_exact(&mut admin, &mut replies).expect("+OK twice");
    assert_eq!(&replies, b"+OK\r\n+OK\r\n");
    // Answered after the pause began: node 2 has run its pending reads (the inspection's replies are out).
    assert_eq!(servers[2].raw(&cmd(&["PING"])), b"+PONG\r\n");
    servers[2].restart();
    assert!(
        on_node_2(&servers),
        "node 2 kept the key across its restart"
    );
    let before = manager.stats().nodes[2].net.clone();
    let released = manager.unlock(lock);
    assert!(
        matches!(released, Ok(n) if n >= 2),
        "released by a majority: {released:?}"
    );
    let read = || servers[2].raw(&cmd(&["GET", "unread:a"]));
    within(Duration::from_secs(3), || read() == b"$-1\r\n");
    let net = manager.stats().nodes[2].net.since(&before);
    assert_eq!(
        String::from_utf8_lossy(&read()),
        "$-1\r\n",
        "released ({released:?}), yet node 2 keeps the key for its lease; node 2 since the restart: {net:?}"
    );
    drop(unanswered);
}

/// Waits until `done` or `limit` passes, looking every 10 ms.
fn within(limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
}
