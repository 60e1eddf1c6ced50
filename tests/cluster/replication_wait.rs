//! The replication check's `WAIT` (`src/net/cluster/route/replid.rs`): every write a routed round sends to a
//! cluster node ends with `WAIT n t` (when `n` > 0), `CLUSTER REPLICAS <id>` and `INFO replication`; a grant
//! counts only if the master's id is the one seen before and at least `n` replicas, every one the reading shows
//! online and every one the master lists, acknowledged it. `n` is the larger of the replicas the member's last
//! map shows for the shard and those the connection's last reading showed online. Real clusters
//! (`tests/support/redis_cluster/`) and plain servers throughout.
//!
//! - **A replica that joined the shard after this manager's last map and reading** (moved from another shard, a
//!   new replica, an automatic replica migration) is in neither; if its link is down when its deposed master
//!   answers, `n` would be 0 and "0 of 0" would count. It takes over while its master is stalled; the deposed
//!   master's grant is lost in the full sync that makes it the new master's replica. The master's own list
//!   closes it (a deposed master still lists the one that took over); removing that count gives two holders
//!   again (seen). A replica the map shows failed that comes back before the map is read again is the same door,
//!   closed the same way. A master's first replica is not a door: Redis gives a master with no backlog a new id
//!   when its first replica attaches (the check then says "changed", seen).
//! - **A replica the cluster marked failed is still waited for** (a known limit, tested as such: the safe side
//!   of the previous item). `CLUSTER SHARDS` says `health` `fail` for it (Redis 7.0.15; the docs say `failed`);
//!   both the map and the master's own list count it, so its shard votes no until it is back or someone
//!   `CLUSTER FORGET`s it (README).
//! - Releases queued behind `WAIT`s for a stalled replica (six threads' writes, or one `WAIT` longer than
//!   `hung_timeout`): the release round is patient, the connection is not judged hung, the key is gone.
//!
//! Read and found sound: a skipped `WAIT` (the 1 s pause) never counts (`asked` > 0 and no acknowledgement);
//! the per-connection `acks` cell taken by each check in order (`MOVED`/`ASK` resends carry their own `WAIT`
//! and check); a `WAIT` error (`NOPERM` without `+wait`) is no count, a failed vote; `WAIT n 0` never sent (at
//! least 1 ms); Valkey 9.1.2's `INFO replication` has the same `slaveN:...,state=` lines.

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::Config;
use support::checker::{Hold, instant_ns, mono_ns, overlaps};
use support::locks::{manager, wait_until};
use support::redis_cluster::{get_asking as get, link_created, wait_replication};
use support::{Fault, FaultProxy, RedisCluster, RedisServer};

/// Waits (30 s at most) until node `i`'s `INFO replication` contains `part`.
#[track_caller]
fn wait_replication_has(c: &RedisCluster, i: usize, part: &str) {
    wait_until(
        Duration::from_secs(30),
        &format!("node {i}: {part:?}"),
        || {
            support::redis_cluster::bulk_text(&c.command(i, &["INFO", "replication"]))
                .contains(part)
        },
    );
}

// ---------------------------------------------------------------------------------------------------------
// A replica the map does not show yet takes over: its deposed master's grant is not counted.
// ---------------------------------------------------------------------------------------------------------

/// Member 0 is a cluster of two shards of a master and a replica each: M is the lock's master, R its replica,
/// M2 the other master; members 1 and 2 are plain servers (2 behind a proxy for `b`). R moves to M2's shard
/// (`CLUSTER REPLICATE`; M keeps its backlog, so its id stays the same when a replica comes back). `b` is
/// built then: its map shows M without replicas, and its one round reads none online on M. R moves back to
/// M's shard and syncs; `b` sends nothing meanwhile. R's replication link then drops and stays down (a link
/// down is what a replica that takes over lacks the latest writes through; here it also makes M's `INFO`
/// show no replica whatever order M reads things in when it wakes). M stalls, R takes over, `c` waits out
/// R's quarantine, `b` asks (member 2 refusing it) and M wakes: `n` = 0 (`b`'s map and last reading), no
/// `WAIT`, `INFO` shows no replica online, the same id: the grant counts. `b` holds with M and member 1, M
/// drops the grant in its full sync from R, `c` takes the lock with R and member 2.
#[test]
fn a_replica_moved_in_since_the_map_that_takes_over_gives_no_second_holder() {
    let ttl = Duration::from_secs(5);
    let p1 = RedisServer::start();
    let p2 = RedisServer::start();
    let proxy2 = FaultProxy::start(p2.addr());
    let mut cl = RedisCluster::builder(2)
        .replicas(1)
        .node_timeout(Duration::from_millis(1_000))
        .start();
    let started = Instant::now();
    let r = "{b}moved";
    let slot = String::from_utf8_lossy(&cl.command(0, &["CLUSTER", "KEYSLOT", r]))
        .trim()
        .trim_start_matches(':')
        .parse::<u16>()
        .expect("the slot");
    let shard = cl.shard_of(slot);
    let (m, rep) = (cl.master_index(shard), cl.replica_indexes(shard)[0]);
    let m2 = cl.master_index(1 - shard);
    let (m_id, m2_id) = (cl.node_id(m).to_owned(), cl.node_id(m2).to_owned());
    let member = format!(
        "redis+cluster://127.0.0.1:{},127.0.0.1:{}",
        cl.node(m).port(),
        cl.node(rep).port()
    );
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(1_500))
        .with_restart_window(ttl);
    // R leaves M's shard; every node sees it.
    cl.command_ok(rep, &["CLUSTER", "REPLICATE", &m2_id]);
    wait_replication(&cl, rep, "master_link_status:up");
    wait_until(Duration::from_secs(20), "R under M2 in M's view", || {
        support::redis_cluster::bulk_text(&cl.command(m, &["CLUSTER", "NODES"]))
            .lines()
            .any(|l| l.starts_with(cl.node_id(rep)) && l.contains(&m2_id))
    });
    wait_replication(&cl, m, "connected_slaves:0");
    let id_before = support::redis_cluster::bulk_text(&cl.command(m, &["INFO", "replication"]))
        .lines()
        .find(|l| l.starts_with("master_replid:"))
        .map(str::to_owned);
    let b = manager([member.clone(), p1.url(), proxy2.url()], config.clone());
    let _ = b
        .request("{b}warm")
        .ttl(ttl)
        .once()
        .acquire()
        .map(|l| b.unlock(l));
    // R comes back to M's shard and syncs; `b` sends nothing to M meanwhile.
    cl.command_ok(rep, &["CLUSTER", "REPLICATE", &m_id]);
    wait_replication(&cl, rep, "master_link_status:up");
    wait_replication_has(&cl, m, "state=online");
    let id_after = support::redis_cluster::bulk_text(&cl.command(m, &["INFO", "replication"]))
        .lines()
        .find(|l| l.starts_with("master_replid:"))
        .map(str::to_owned);
    assert_eq!(id_before, id_after, "M kept its id");
    // R's replication link drops and stays down (a wrong `masterauth`: M has no password): R is still M's
    // replica for the cluster, with every write until then, but M shows no replica (the order in which M,
    // waking up, reads R's closed link and `b`'s commands no longer matters).
    cl.command_ok(rep, &["CONFIG", "SET", "masterauth", "wrong"]);
    let _ = cl.command(m, &["CLIENT", "KILL", "TYPE", "replica"]);
    wait_replication(&cl, m, "connected_slaves:0");
    wait_replication(&cl, rep, "master_link_status:down");
    deposed_grant(
        &mut cl,
        (m, rep),
        member,
        &b,
        (&p1, &p2, &proxy2),
        config,
        ttl,
        r,
        started,
    );
}

/// The rest of the scenario above (as in `master_id.rs`' deposed master), once R is M's replica and `b`'s map
/// and reading show no replica for M:
/// M stalls, R takes over, `c` waits out R's quarantine, `b` asks for `r` and M wakes. Returns the holds (none
/// if `b`'s grant was not counted).
#[allow(clippy::too_many_arguments)]
fn deposed_grant(
    cl: &mut RedisCluster,
    (m, rep): (usize, usize),
    member: String,
    b: &muxlock::LockManager,
    (p1, p2, proxy2): (&RedisServer, &RedisServer, &FaultProxy),
    config: Config,
    ttl: Duration,
    r: &str,
    started: Instant,
) {
    let cl = &mut *cl;
    // Every node has been up a window (the guard's uptime rule) before anything counts.
    let old_enough = ttl + Duration::from_millis(2_500);
    if let Some(left) = old_enough.checked_sub(started.elapsed()) {
        thread::sleep(left);
    }
    // Every other node drops its silent link to M and dials again (half a node timeout without data): from
    // then on what they say waits in M's accept queue, read after what waits on `b`'s connection.
    let others: Vec<usize> = (0..cl.len()).filter(|&i| i != m).collect();
    let before: Vec<u64> = others
        .iter()
        .map(|&i| link_created(cl, i, m).expect("a link to M"))
        .collect();
    cl.node_mut(m).pause();
    wait_until(
        Duration::from_secs(10),
        "every node's new link to M",
        || {
            others
                .iter()
                .zip(&before)
                .all(|(&i, &t)| link_created(cl, i, m).is_some_and(|now| now > t))
        },
    );
    cl.command_ok(rep, &["CLUSTER", "FAILOVER", "TAKEOVER"]);
    wait_replication(cl, rep, "role:master");
    let c = manager([member, p1.url(), p2.url()], config);
    let _ = c
        .request("warm-c")
        .ttl(ttl)
        .once()
        .acquire()
        .map(|l| c.unlock(l));
    let c_built = Instant::now();
    thread::sleep(ttl + Duration::from_millis(1_500));
    assert!(c_built.elapsed() > ttl);
    proxy2.set(Fault::Refuse);
    let holder = thread::scope(|s| {
        let taking = s.spawn(|| b.request(r).ttl(ttl).once().acquire());
        thread::sleep(Duration::from_millis(300));
        cl.node_mut(m).resume();
        taking.join().expect("b's thread")
    });
    proxy2.set(Fault::None);
    let lock = match holder {
        Ok(lock) => lock,
        Err(e) if e.to_string().contains("replication check") => return,
        Err(e) => panic!("b did not get the lock, the fault missed: {e}"),
    };
    let mut holds = vec![Hold {
        resource: r.into(),
        holder: "b".into(),
        start: mono_ns(),
        end: instant_ns(lock.valid_until()),
    }];
    let mut tries = 0;
    while Instant::now() < lock.valid_until() && tries < 50 {
        tries += 1;
        if let Ok(l) = c.request(r).ttl(ttl).once().acquire() {
            let (start, valid) = (mono_ns(), instant_ns(l.valid_until()));
            let _ = c.unlock(l);
            holds.push(Hold {
                resource: r.into(),
                holder: "c".into(),
                start,
                end: mono_ns().min(valid),
            });
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    wait_replication(cl, m, "role:slave");
    wait_replication(cl, m, "master_link_status:up");
    assert_eq!(get(cl, m, r), None, "M dropped b's grant in its sync");
    let found = overlaps(&holds);
    assert!(found.is_empty(), "two holders: {found:?}");
}

// ---------------------------------------------------------------------------------------------------------
// Releases queued behind `WAIT`s for a stalled replica reach the master.
// ---------------------------------------------------------------------------------------------------------

/// Member 0 is a cluster of one master M and its replica R (a long node timeout: R stays in the map); the
/// manager has only that member. `holder` takes a lock while R is well. R stalls (SIGSTOP: its replica link
/// stays up, so M shows it online and its `WAIT`s wait it out). `threads` threads ask for locks of their own
/// at once: every one of their writes to M was sent before the first check came back short, so each carries
/// `WAIT 1 t` (`t` half a round), and M serves them one after the other. `holder` then lets its lock go: its
/// release waits in M's socket behind them all. Returns the release's outcome, how long it took, and whether
/// the key is left on M.
fn release_behind_waits(
    threads: usize,
    round: Duration,
    hung: Duration,
) -> (muxlock::Result<usize>, Duration, bool) {
    // The guard's window is the longest lease: both short, so the nodes count soon after they start.
    let ttl = Duration::from_secs(4);
    let window = ttl;
    let mut cl = RedisCluster::builder(1)
        .replicas(1)
        .node_timeout(Duration::from_secs(60))
        .start();
    let started = Instant::now();
    let (m, rep) = (cl.master_index(0), cl.replica_indexes(0)[0]);
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(round)
        .with_hung_timeout(hung)
        .with_restart_window(window);
    let mgr = manager([cl.seed_url()], config);
    let old_enough = window + Duration::from_millis(500);
    if let Some(left) = old_enough.checked_sub(started.elapsed()) {
        thread::sleep(left);
    }
    let held = "held";
    let lock = mgr
        .request(held)
        .ttl(ttl)
        .once()
        .acquire()
        .expect("the holder's lock, R well");
    cl.node_mut(rep).pause();
    let (released, took, left) = thread::scope(|s| {
        let takers: Vec<_> = (0..threads)
            .map(|i| {
                let mgr = &mgr;
                s.spawn(move || {
                    let _ = mgr
                        .request(format!("other-{i}"))
                        .ttl(ttl)
                        .once()
                        .acquire()
                        .map(|l| mgr.unlock(l));
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(50));
        let at = Instant::now();
        let released = mgr.unlock(lock);
        let took = at.elapsed();
        let left = get(&cl, m, held).is_some();
        for t in takers {
            t.join().expect("a taker");
        }
        (released, took, left)
    });
    cl.node_mut(rep).resume();
    (released, took, left)
}

/// Six threads' writes, each with `WAIT 1 200ms`, before a release whose round is 400 ms: the release waits
/// behind them all (about 1.2 s, seen), but a release round is patient (the node keeps answering): not lost.
#[test]
fn a_release_behind_many_writes_waiting_for_a_stalled_replica_is_not_lost() {
    let round = Duration::from_millis(400);
    let (released, took, left) = release_behind_waits(6, round, Duration::from_secs(5));
    assert!(
        released.is_ok() && !left,
        "the release ({took:?}, round {round:?}): {released:?}; its key left on M: {left}"
    );
}

/// One write with `WAIT 1 1.5s` (a round of 3 s) where a node silent for 1 s is hung: the connection is not
/// dropped as hung under the release behind it (seen: the release took about 1.5 s, `Ok`).
#[test]
fn a_wait_longer_than_the_hung_timeout_does_not_drop_the_release_behind_it() {
    let round = Duration::from_secs(3);
    let (released, took, left) = release_behind_waits(1, round, Duration::from_secs(1));
    assert!(
        released.is_ok() && !left,
        "the release ({took:?}, round {round:?}): {released:?}; its key left on M: {left}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// A known limit: a replica the cluster marked failed is still waited for, until it is back.
// ---------------------------------------------------------------------------------------------------------

/// The `health` of every node in node `i`'s `CLUSTER SHARDS` reply (RESP2), as the server spells it.
fn healths(c: &RedisCluster, i: usize) -> Vec<String> {
    let raw = String::from_utf8_lossy(&c.command(i, &["CLUSTER", "SHARDS"])).into_owned();
    let lines: Vec<&str> = raw.split("\r\n").collect();
    (0..lines.len().saturating_sub(2))
        .filter(|&i| lines[i] == "health")
        .map(|i| lines[i + 2].to_owned())
        .collect()
}

/// Acquires `r` on `mgr` every 200 ms for `span` (at most 100 tries): the first grant's time, or the last error.
fn first_grant(
    mgr: &muxlock::LockManager,
    r: &str,
    ttl: Duration,
    span: Duration,
) -> Result<Duration, String> {
    let started = Instant::now();
    let mut last = String::from("no try");
    let mut tries = 0;
    while started.elapsed() < span && tries < 100 {
        tries += 1;
        match mgr.request(r).ttl(ttl).once().acquire() {
            Ok(l) => {
                let _ = mgr.unlock(l);
                return Ok(started.elapsed());
            }
            Err(e) => last = e.to_string(),
        }
        thread::sleep(Duration::from_millis(200));
    }
    Err(format!("{tries} tries, the last: {last}"))
}

/// Two shards of a master and a replica each; the manager has that one member. The replica of the lock's shard
/// dies, and the cluster marks it failed (`CLUSTER SHARDS`: `health` `fail`). It is still waited for, by the
/// map (`replicas_of` counts it) and by the master's own list: the shard votes no on every write while it is
/// failed, the safe side (not waiting for it would let a replica that comes back without the grants, and takes
/// over, stand for one that acknowledged). The README says so, with the operator's ways out: bring the replica
/// back, or `CLUSTER FORGET` it. Back (restarted with its `nodes.conf`), the shard grants again within seconds.
#[test]
fn a_replica_the_cluster_marked_failed_is_waited_for_until_it_is_back() {
    let ttl = Duration::from_secs(3);
    let mut cl = RedisCluster::builder(2)
        .replicas(1)
        .node_timeout(Duration::from_millis(1_000))
        .start();
    let started = Instant::now();
    let r = "{f}lock";
    let slot = String::from_utf8_lossy(&cl.command(0, &["CLUSTER", "KEYSLOT", r]))
        .trim()
        .trim_start_matches(':')
        .parse::<u16>()
        .expect("the slot");
    let shard = cl.shard_of(slot);
    let (m, rep) = (cl.master_index(shard), cl.replica_indexes(shard)[0]);
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(300))
        .with_restart_window(ttl);
    let mgr = manager([cl.seed_url()], config);
    let old_enough = ttl + Duration::from_millis(500);
    if let Some(left) = old_enough.checked_sub(started.elapsed()) {
        thread::sleep(left);
    }
    let l = mgr
        .request(r)
        .ttl(ttl)
        .once()
        .acquire()
        .expect("a lock, R well");
    let _ = mgr.unlock(l);
    cl.node_mut(rep).kill();
    let rep_id = cl.node_id(rep).to_owned();
    wait_until(Duration::from_secs(20), "R marked failed", || {
        support::redis_cluster::bulk_text(&cl.command(m, &["CLUSTER", "NODES"]))
            .lines()
            .any(|l| l.starts_with(&rep_id) && l.contains(",fail "))
    });
    // What the server calls a failed node (Redis 7.0.15: `fail`).
    let spelt = healths(&cl, m);
    assert!(
        spelt.iter().any(|h| h == "fail"),
        "CLUSTER SHARDS: {spelt:?}"
    );
    // Each failed check reads the map again; a short one skips `WAIT` for 1 s: 4 s covers both, twice over.
    let while_failed = first_grant(&mgr, r, ttl, Duration::from_secs(4));
    assert!(
        while_failed
            .as_ref()
            .is_err_and(|e| e.contains("replicas acknowledged")),
        "the shard of a replica marked failed granted: {while_failed:?}"
    );
    cl.node_mut(rep).restart();
    wait_replication(&cl, rep, "master_link_status:up");
    let back = first_grant(&mgr, r, ttl, Duration::from_secs(10));
    assert!(
        back.is_ok(),
        "the shard never granted in 10 s after its replica came back: {back:?}"
    );
}
