//! The replication check's replica list (`src/net/cluster/route/replid.rs`, `round.rs` `append_check`/`checked`,
//! `table.rs` `id_of`): every write of a non-release routed round to a cluster node ends with `WAIT n t` (if
//! `n` > 0), `CLUSTER REPLICAS <the map's id for the node>` and `INFO replication` (and `CLUSTER MYID` until the
//! session has the node's id); a grant counts only if that id is the node's own, the replication id is
//! unchanged, and the acknowledgements are at least the map's replicas, those the last check saw, those online
//! now and those the node lists now. Real clusters (`tests/support/redis_cluster/`) and plain servers throughout.
//!
//! - **A known limit, tested as such: a replica the master does not list yet, forced to take over, can give two
//!   holders.** The list is the *master's* view of its shard, and a master learns that a node became its replica
//!   only from that node's own cluster-bus messages. A node made M's replica while M is stalled is in nobody's
//!   list this manager reads: not in its map, not in its last reading, and not in M's `CLUSTER REPLICAS` when M
//!   wakes, because M reads the news (on cluster-bus links dialled again while it slept, still in its accept
//!   queue) only after the commands that waited on the client's connection. Forced to take over (`CLUSTER
//!   FAILOVER TAKEOVER`), it makes M's late grant count, and M drops it in the full sync that makes it the new
//!   master's replica. That needs an operator promoting a replica that never synced, which throws the shard's
//!   writes away like a `FLUSHALL`; an elected replica must have had a recent link to its master unless
//!   `cluster-replica-validity-factor` is 0. The README says so and what not to do. Not tried: an automatic
//!   failover (three masters), a replica with a recent link, one migrated from another shard (Redis' automatic
//!   replica migration, as read in `cluster.c`, skips a master marked failed but not one only timed out), or
//!   `cluster-replica-validity-factor 0`. A check that would close it: read the master's view of its peers in
//!   the same write (`CLUSTER NODES`' `pong-recv`) and count the grant only if it heard from a majority of the
//!   masters within less than a node timeout (a stalled master has only old pongs when it wakes). Not built:
//!   `CLUSTER NODES` per write costs far more than the whole check.
//! - **A node redialled while it loads its data votes again once loaded.** `CLUSTER MYID` is refused while a
//!   node loads (`-LOADING`: its command flags are `stale` only, unlike `INFO`); it is asked in a session's own
//!   writes until one is answered, not at set-up, so a session set up during the load is not left without the
//!   node's id (which would fail every check on it). The control: a quick restart (no load window).
//! - A stale map id for another master: the list is asked by the map's id and trusted only if that id is the
//!   session's `CLUSTER MYID`; both are read on the same connection, so a mismatch (a node at the map's address
//!   replaced by another, a new id after `nodes.conf` was lost) is a failed vote that reads the map again, and
//!   the next map's id matches (read: `is_own_id` after `judge` in `checked`).
//! - `MOVED`/`ASK` resends: `append_check` runs for the target with the target's id; the `Wait`, `Replicas`,
//!   `Check` expectations are pushed in the order the bytes are appended, one `Check` per write (read). A target
//!   the map gave no id is a failed vote that reads the map again.
//! - Valkey 9.1.2 cluster with a replica: the check's three replies read as expected, grants count (skipped
//!   without Valkey).
//! - Panics: none found reading `listed_replicas`, `node_id`, the `acks`/`listed` cells (all `Option`, `get`).

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use muxlock::Config;
use support::checker::{Hold, instant_ns, mono_ns, overlaps};
use support::locks::{manager, wait_until};
use support::process::valkey_or_skip;
use support::redis_cluster::{bulk_text, get_asking as get, link_created, wait_replication};
use support::wire::show;
use support::{Fault, FaultProxy, RedisCluster, RedisServer};

/// The slot of `key`, as node 0 of `cl` computes it.
#[track_caller]
fn slot_of(cl: &RedisCluster, key: &str) -> u16 {
    String::from_utf8_lossy(&cl.command(0, &["CLUSTER", "KEYSLOT", key]))
        .trim()
        .trim_start_matches(':')
        .parse::<u16>()
        .expect("the slot")
}

/// Node `i`'s `master_replid`.
#[track_caller]
fn replid(cl: &RedisCluster, i: usize) -> String {
    bulk_text(&cl.command(i, &["INFO", "replication"]))
        .lines()
        .find_map(|l| l.strip_prefix("master_replid:"))
        .expect("master_replid")
        .trim()
        .to_owned()
}

// ---------------------------------------------------------------------------------------------------------
// A known limit: a replica forced to take over before it synced, while its master stalls.
// ---------------------------------------------------------------------------------------------------------

/// Member 0 is a cluster of two masters (M, the lock's, and M2) and an empty third node R (a master with no
/// slot, as a node added for a scale-out or to become a replica is, that once had a replica of its own: it has
/// a replication backlog); members 1 and 2 are plain servers (2 behind a proxy for `b`). `b` is built and reads M once: its map shows no replica for M, its reading none.
/// M stalls; every other node drops its silent cluster-bus link to M and dials again (the new links wait in
/// M's accept queue). The operator action: R is made M's replica (`CLUSTER REPLICATE`: M cannot hear it) and
/// forced to take over (`CLUSTER FAILOVER TAKEOVER`) before it ever synced. `c` is built and waits out R's
/// quarantine; `b` asks for the lock (member 2 refusing it) and M wakes: it answers `b`'s write (the grant, an
/// empty `CLUSTER REPLICAS`: R is a slotless master in its eyes; no replica online; its old id) before it
/// reads the news from the new links. The grant counts; M drops it in its full sync from R; `c` takes the lock
/// with R and member 2 while `b`'s still reports valid: two holders. The README's guarantee names this
/// operator action; if a check ever closes it, this test fails and the README changes with it.
#[test]
fn a_replica_forced_to_take_over_before_it_synced_can_grant_a_second_holder() {
    let ttl = Duration::from_secs(5);
    let p1 = RedisServer::start();
    let p2 = RedisServer::start();
    let proxy2 = FaultProxy::start(p2.addr());
    // Replicas start a full sync at once (`repl-diskless-sync-delay 0`): M, R's replica once awake, acknowledges
    // nothing until its sync is done, and with the default 5 s delay that outlasts `b`'s lease, so `c`'s votes on
    // R fail its replication check until `b`'s grant ends and nothing would be shown.
    let mut cl = RedisCluster::builder(2)
        .node_timeout(Duration::from_millis(1_000))
        .server(RedisServer::builder().args(["--repl-diskless-sync-delay", "0"]))
        .start();
    let new_shard = cl.add_master();
    let started = Instant::now();
    let r = "{b}stalled";
    let shard = cl.shard_of(slot_of(&cl, r));
    let (m, m2, rep) = (
        cl.master_index(shard),
        cl.master_index(1 - shard),
        cl.master_index(new_shard),
    );
    // R gets its replication backlog now, from a replica of its own that goes at once: a master without one takes
    // a new replication id when its first replica attaches. Otherwise M's full sync from R, which begins as soon
    // as M wakes and reads of the takeover, gives R a new id; `c`'s check on R then says "changed" whenever it is
    // judged after that sync began (under load, its first try) and quarantines R through `b`'s whole lease. R
    // keeps the backlog through `CLUSTER REPLICATE` and the takeover; its id then changes only at the takeover,
    // before `c` reads it. (R still never synced from M.)
    let before = replid(&cl, rep);
    let warm = RedisServer::builder()
        .args([
            "--replicaof".to_owned(),
            "127.0.0.1".to_owned(),
            cl.node(rep).port().to_string(),
        ])
        .start();
    wait_until(Duration::from_secs(10), "R's backlog (a new id)", || {
        replid(&cl, rep) != before
    });
    drop(warm);
    let m_id = cl.node_id(m).to_owned();
    let member = format!(
        "redis+cluster://127.0.0.1:{},127.0.0.1:{}",
        cl.node(m).port(),
        cl.node(m2).port()
    );
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(1_500))
        .with_restart_window(ttl);
    // Every node has been up a window (the guard's uptime rule) before `b` reads it. Waited for before `b` is
    // built, not after: a round decided without a slow node leaves that node's set-up replies unread until the
    // next round, and the guard dates an uptime at its decoding, so a reading taken while the node was young
    // and decoded later keeps it uncounted for a window after that.
    let old_enough = ttl + Duration::from_millis(2_500);
    if let Some(left) = old_enough.checked_sub(started.elapsed()) {
        thread::sleep(left);
    }
    let b = manager([member.clone(), p1.url(), proxy2.url()], config.clone());
    let _ = b
        .request("{b}warm")
        .ttl(ttl)
        .once()
        .acquire()
        .map(|l| b.unlock(l));
    let others: Vec<usize> = (0..cl.len()).filter(|&i| i != m).collect();
    let before: Vec<u64> = others
        .iter()
        .map(|&i| link_created(&cl, i, m).expect("a link to M"))
        .collect();
    cl.node_mut(m).pause();
    wait_until(
        Duration::from_secs(10),
        "every node's new link to M",
        || {
            others
                .iter()
                .zip(&before)
                .all(|(&i, &t)| link_created(&cl, i, m).is_some_and(|now| now > t))
        },
    );
    // R becomes M's replica while M sleeps: what it tells M waits in M's accept queue.
    cl.command_ok(rep, &["CLUSTER", "REPLICATE", &m_id]);
    wait_replication(&cl, rep, "role:slave");
    wait_until(Duration::from_secs(10), "M2 sees R under M", || {
        bulk_text(&cl.command(m2, &["CLUSTER", "NODES"]))
            .lines()
            .any(|l| l.starts_with(cl.node_id(rep)) && l.contains(&m_id))
    });
    cl.command_ok(rep, &["CLUSTER", "FAILOVER", "TAKEOVER"]);
    wait_replication(&cl, rep, "role:master");
    // `c` reads its first map from M2 (M sleeps): it must show R serving M's slots already. A map read before
    // M2 heard of the takeover shows R as M's replica; `c`'s first try on `r` is then sent on to R (`MOVED`),
    // which `c`'s guard quarantines as a promotion from that instant, through `b`'s whole lease.
    wait_until(Duration::from_secs(10), "M2 sees R serve M's slots", || {
        bulk_text(&cl.command(m2, &["CLUSTER", "NODES"]))
            .lines()
            .any(|l| {
                let fields: Vec<&str> = l.split(' ').collect();
                fields[0] == cl.node_id(rep)
                    && fields
                        .get(2)
                        .is_some_and(|f| f.split(',').any(|f| f == "master"))
                    && fields.len() > 8
            })
    });
    let c = manager([member, p1.url(), p2.url()], config);
    let _ = c
        .request("warm-c")
        .ttl(ttl)
        .once()
        .acquire()
        .map(|l| c.unlock(l));
    // An inspection waits for every node: R's set-up replies (its promotion, which `c`'s guard quarantines for a
    // window) are read now, not at `c`'s first try, which would date them then and keep R uncounted through
    // `b`'s whole lease.
    let _ = c.inspect("warm-c");
    thread::sleep(ttl + Duration::from_millis(1_500));
    // What b's restart guard knows of each member right before it asks (named if b's grant is not counted).
    let standing_before = b.stats().nodes;
    proxy2.set(Fault::Refuse);
    let holder = thread::scope(|s| {
        let taking = s.spawn(|| b.request(r).ttl(ttl).once().acquire());
        thread::sleep(Duration::from_millis(300));
        cl.node_mut(m).resume();
        taking.join().expect("b's thread")
    });
    proxy2.set(Fault::None);
    // M answers `b`'s write before it reads of R (seen in 5 runs of 6): nothing in that write's check names R.
    // Otherwise M has read of R first and sends `b` on to R (`MOVED`): a promotion seen, R quarantined, no lock
    // for `b` and nothing shown. A refusal for any other reason (a check on M that caught the stall) is the
    // limit changing: this test fails then.
    let lock = match holder {
        Ok(lock) => lock,
        Err(muxlock::Error::Quorum(report))
            if report.nodes()[0].1 == muxlock::Outcome::Quarantined =>
        {
            eprintln!("M read of R before it answered b: nothing shown this run ({report:?})");
            return;
        }
        Err(e) => panic!(
            "b's grant on the deposed master was not counted: {e}\nb's members before it asked: \
             {standing_before:#?}\nafter: {:#?}",
            b.stats().nodes
        ),
    };
    let mut holds = vec![Hold {
        resource: r.into(),
        holder: "b".into(),
        start: mono_ns(),
        end: instant_ns(lock.valid_until()),
    }];
    let mut tries = 0;
    let mut last = None;
    while Instant::now() < lock.valid_until() && tries < 50 {
        tries += 1;
        let got = c.request(r).ttl(ttl).once().acquire();
        if let Ok(l) = got {
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
        last = got.err();
        thread::sleep(Duration::from_millis(100));
    }
    wait_replication(&cl, m, "role:slave");
    wait_replication(&cl, m, "master_link_status:up");
    assert_eq!(get(&cl, m, r), None, "M dropped b's grant in its sync");
    let found = overlaps(&holds);
    assert_eq!(
        found.len(),
        1,
        "c took the lock while b's grant reported valid ({tries} tries, c's last refusal: {last:?}): {holds:?}"
    );
}

// ---------------------------------------------------------------------------------------------------------
// A connection set up while the node loads gets its `CLUSTER MYID` once the node is loaded.
// ---------------------------------------------------------------------------------------------------------

/// Acquires `key` on `mgr` until one is granted or `limit` passes (tries 200 ms apart); the last error if none.
fn grants_within(
    mgr: &muxlock::LockManager,
    key: &str,
    ttl: Duration,
    limit: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut last = String::from("no try");
    let mut tries = 0;
    while Instant::now() < deadline && tries < 200 {
        tries += 1;
        match mgr.request(key).ttl(ttl).once().acquire() {
            Ok(l) => {
                let _ = mgr.unlock(l);
                return Ok(());
            }
            Err(e) => last = e.to_string(),
        }
        thread::sleep(Duration::from_millis(200));
    }
    Err(format!("{tries} tries, the last: {last}"))
}

/// Member 0, the manager's only member, is a cluster of one master M holding 6,000 keys. The manager grants;
/// M is restarted with its data (SAVE, kill, start: same id, same slots) and the manager keeps asking, so its
/// connection is set up again as soon as M listens. Once M is loaded and its restart window is over, the
/// manager must grant again; a manager built then must too (the control). Returns the old manager's outcome.
/// `load_delay_us`: `key-load-delay` (with events processed every KiB, M answers `-LOADING` for a few
/// seconds: `INFO` is answered, `CLUSTER MYID` is not), or none.
fn grants_after_a_restart(load_delay_us: Option<u32>) -> Result<(), String> {
    let ttl = Duration::from_secs(2);
    let mut server = RedisServer::builder().enable_debug();
    if let Some(us) = load_delay_us {
        server = server.args([
            "--key-load-delay".to_owned(),
            us.to_string(),
            "--loading-process-events-interval-bytes".to_owned(),
            "1024".to_owned(),
        ]);
    }
    let mut cl = RedisCluster::builder(1).server(server).start();
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(300))
        .with_restart_window(ttl);
    let key = "loaded";
    let populate = cl.command(0, &["DEBUG", "POPULATE", "6000"]);
    assert_eq!(populate, b"+OK\r\n", "{}", show(&populate));
    let mgr = manager([cl.seed_url()], config.clone());
    thread::sleep(ttl + Duration::from_millis(500));
    grants_within(&mgr, key, ttl, Duration::from_secs(5)).expect("a grant before the restart");
    assert_eq!(cl.command(0, &["SAVE"]), b"+OK\r\n");
    let restarted = AtomicBool::new(false);
    let tries = thread::scope(|s| {
        let asking = s.spawn(|| {
            // The manager keeps asking while M restarts: it dials M again as soon as M listens.
            let mut tries = 0;
            while !restarted.load(Ordering::Acquire) && tries < 2_000 {
                tries += 1;
                let _ = mgr.request(key).ttl(ttl).once().acquire();
                thread::sleep(Duration::from_millis(10));
            }
            tries
        });
        // `restart` returns once M answers `PING` (loaded).
        cl.node_mut(0).restart();
        restarted.store(true, Ordering::Release);
        asking.join().expect("the asking thread")
    });
    assert!(tries > 0, "the manager asked while M restarted");
    wait_until(Duration::from_secs(30), "M loaded", || {
        bulk_text(&cl.command(0, &["INFO", "persistence"])).contains("loading:0\r\n")
    });
    let size = String::from_utf8_lossy(&cl.command(0, &["DBSIZE"])).into_owned();
    let size: u64 = size.trim().trim_start_matches(':').parse().expect("DBSIZE");
    assert!(size >= 6_000, "M restarted with its data: {size} keys");
    thread::sleep(ttl + Duration::from_millis(500));
    // The control: a manager whose connection was set up after the load grants.
    let fresh = manager([cl.seed_url()], config);
    thread::sleep(ttl + Duration::from_millis(500));
    grants_within(&fresh, "fresh", ttl, Duration::from_secs(5))
        .expect("a manager built after the load grants");
    grants_within(&mgr, key, ttl, Duration::from_secs(6))
}

/// M loads for a few seconds after its restart; the manager's connection is set up meanwhile.
#[test]
fn a_node_redialled_while_loading_votes_again_once_loaded() {
    let again = grants_after_a_restart(Some(300));
    assert!(
        again.is_ok(),
        "the manager redialled during the load never granted again: {again:?}"
    );
}

/// The same restart, loaded at once: the new session's set-up reads `CLUSTER MYID`, and the node votes again
/// (what the test above checks is the load, not the restart).
#[test]
fn a_node_redialled_after_a_quick_restart_votes_again() {
    let again = grants_after_a_restart(None);
    assert!(again.is_ok(), "no grant after a quick restart: {again:?}");
}

// ---------------------------------------------------------------------------------------------------------
// Valkey 9.1's replies to the check.
// ---------------------------------------------------------------------------------------------------------

/// A Valkey 9.1 cluster of one master and a replica: the check (`WAIT 1`, `CLUSTER REPLICAS <id>`, `INFO
/// replication`) proves the grant, which counts.
#[test]
fn a_valkey_cluster_with_a_replica_grants() {
    let Some(valkey) = valkey_or_skip() else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let cl = RedisCluster::builder(1)
        .replicas(1)
        .server(RedisServer::builder().binary(valkey))
        .start();
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(500))
        .with_restart_window(ttl);
    let mgr = manager([cl.seed_url()], config);
    thread::sleep(ttl + Duration::from_millis(500));
    grants_within(&mgr, "valkey", ttl, Duration::from_secs(5)).expect("a grant on Valkey 9.1");
    let listed = cl.command(0, &["CLUSTER", "REPLICAS", cl.node_id(0)]);
    assert!(listed.starts_with(b"*1\r\n"), "{}", show(&listed));
}
