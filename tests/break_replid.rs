//! A hostile review of the replication check of cluster members' votes (commit cad3542,
//! `src/net/cluster/route/replid.rs`): every command a routed round sends to a cluster node is followed by
//! `INFO replication`, and its outcome is handed up only once that reading shows the master id the connection
//! saw before. Attempts at two holders, a vote counted for the wrong command or without a check, a lost
//! release, a panic or a hang.
//!
//! Real clusters (`tests/support/redis_cluster/`) and plain servers throughout. Each finding's test fails on
//! the code it was found in; those not fixed here are `#[ignore]`d with what breaks. The tests of things that
//! held up are named for what they show.
//!
//! Findings:
//!
//! 1. (not fixed) A deposed master that has not learnt it yet grants, and its check says "the same master":
//!    its `master_replid` is the one its connection's set-up read, and it is a master in its own eyes. Its
//!    replica took over while it was stalled (a pause, a partition); it answers the commands that waited in
//!    its socket before it reads the new master's cluster-bus message, then turns replica and drops the grant
//!    in the full sync. The new master counts for a manager that saw it take over a window ago: two holders.
//!    The restart guard quarantines a promoted replica for a window *from when it was seen taking over*, which
//!    covers the grants its master acknowledged before the promotion, not those the deposed master
//!    acknowledged after it; the check's reading is taken before the demotion, so it cannot see it either.
//!    `WAIT 1` after each grant (the deposed master has no replica left) would.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::Config;
use support::checker::{Hold, instant_ns, mono_ns, overlaps};
use support::locks::{manager, wait_until};
use support::wire::show;
use support::{Fault, FaultProxy, RedisCluster, RedisServer};

/// Waits (30 s at most) until node `i`'s `INFO replication` has the line `line`.
#[track_caller]
fn wait_replication(c: &RedisCluster, i: usize, line: &str) {
    let line = format!("{line}\r\n");
    wait_until(
        Duration::from_secs(30),
        &format!("node {i}: {line:?}"),
        || {
            support::redis_cluster::bulk_text(&c.command(i, &["INFO", "replication"]))
                .contains(&line)
        },
    );
}

/// The value `key` holds on node `i` of `c` (`None`: absent), read with `ASKING`.
#[track_caller]
fn get(c: &RedisCluster, i: usize, key: &str) -> Option<Vec<u8>> {
    let mut bytes = support::cmd(&["ASKING"]);
    bytes.extend(support::cmd(&["GET", key]));
    let raw = c.node(i).raw(&bytes);
    let rest = raw
        .strip_prefix(b"+OK\r\n")
        .unwrap_or_else(|| panic!("ASKING: {}", show(&raw)));
    if rest == b"$-1\r\n" || rest.starts_with(b"-ASK") || rest.starts_with(b"-MOVED") {
        return None;
    }
    let body = rest
        .splitn(2, |&b| b == b'\n')
        .nth(1)
        .unwrap_or_else(|| panic!("GET: {}", show(rest)));
    Some(body.strip_suffix(b"\r\n").unwrap_or(body).to_vec())
}

/// The creation time (ms) of node `from`'s outbound cluster-bus link to node `to` (`CLUSTER LINKS`).
#[track_caller]
fn link_created(c: &RedisCluster, from: usize, to: usize) -> Option<u64> {
    let raw = c.command(from, &["CLUSTER", "LINKS"]);
    let text = String::from_utf8_lossy(&raw).into_owned();
    // RESP2: an array of flat maps, each value a bulk string but the times: `$9`, `direction`, `$2`, `to`,
    // `$4`, `node`, `$40`, the id, `$11`, `create-time`, `:<ms>`, ...
    let lines: Vec<&str> = text.split("\r\n").collect();
    let id = c.node_id(to);
    (0..lines.len().saturating_sub(9)).find_map(|i| {
        let fields = (lines[i], lines[i + 2], lines[i + 6], lines[i + 8]);
        (fields == ("direction", "to", id, "create-time"))
            .then(|| lines[i + 9].strip_prefix(':')?.parse().ok())
            .flatten()
    })
}

// ---------------------------------------------------------------------------------------------------------
// Finding 1: a deposed master grants before it learns it was deposed.
// ---------------------------------------------------------------------------------------------------------

/// Member 0 is a cluster of one master M and its replica R; members 1 and 2 plain servers (2 behind a proxy
/// for `b`). `b` is built first (its set-up reads M's id) and sends nothing to member 0 for a while. M stalls
/// (SIGSTOP); R, which gets no answer from M, drops its cluster-bus link to M and dials again (the new
/// connection waits in M's accept queue), then takes over (`CLUSTER FAILOVER TAKEOVER`: a new id, its
/// announcement on that new link). `c` is built after the takeover: R's `INFO` shows the promotion, and `c`
/// quarantines it for a window. M is still stalled when the window ends. `b` then asks for the lock (member 2
/// refusing `b`), and M wakes up: it answers `b`'s `SET` and the check after it from its socket before it
/// reads R's announcement (on a connection it has not accepted yet): role master, the id `b`'s set-up read.
/// The check says "the same master", the grant counts, `b` holds with M and member 1. M then reads R's
/// announcement, turns replica and drops `b`'s key in its full sync. `c` takes the lock with R and member 2.
#[test]
#[ignore = "finding 1: a deposed master's grant passes the check (its id unchanged, still a master in its own \
            eyes) and is lost when it learns of the takeover; the new master counts: two holders"]
fn a_deposed_master_that_has_not_learnt_it_yet_gives_no_second_holder() {
    let ttl = Duration::from_secs(5);
    let p1 = RedisServer::start();
    let p2 = RedisServer::start();
    let proxy2 = FaultProxy::start(p2.addr());
    let mut cl = RedisCluster::builder(1)
        .replicas(1)
        .node_timeout(Duration::from_millis(1_000))
        .start();
    let started = Instant::now();
    let (m, rep) = (cl.master_index(0), cl.replica_indexes(0)[0]);
    let member = format!(
        "redis+cluster://127.0.0.1:{},127.0.0.1:{}",
        cl.node(m).port(),
        cl.node(rep).port()
    );
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(1_500))
        .with_restart_window(ttl);
    let b = manager([member.clone(), p1.url(), proxy2.url()], config.clone());
    // `b`'s connections are set up (M's `INFO`: a master never promoted) by one round.
    let _ = b
        .request("warm")
        .ttl(ttl)
        .once()
        .acquire()
        .map(|l| b.unlock(l));
    // Every node has been up a window (the guard's uptime rule) before anything counts.
    let old_enough = ttl + Duration::from_millis(2_500);
    if let Some(left) = old_enough.checked_sub(started.elapsed()) {
        thread::sleep(left);
    }
    let before = link_created(&cl, rep, m).expect("R's link to M");
    cl.node_mut(m).pause();
    // R drops its silent link to M and dials again (half a node timeout without data, the link older than
    // one): its messages from then on wait in M's accept queue.
    wait_until(Duration::from_secs(10), "R's new link to M", || {
        link_created(&cl, rep, m).is_some_and(|t| t > before)
    });
    cl.command_ok(rep, &["CLUSTER", "FAILOVER", "TAKEOVER"]);
    wait_replication(&cl, rep, "role:master");
    let c = manager([member, p1.url(), p2.url()], config);
    // `c`'s connections are set up (R's `INFO` shows its promotion: quarantined for a window from then).
    let _ = c
        .request("warm-c")
        .ttl(ttl)
        .once()
        .acquire()
        .map(|l| c.unlock(l));
    let c_built = Instant::now();
    thread::sleep(ttl + Duration::from_millis(1_500));
    assert!(c_built.elapsed() > ttl);
    let r = "deposed";
    proxy2.set(Fault::Refuse);
    let holder = thread::scope(|s| {
        let taking = s.spawn(|| b.request(r).ttl(ttl).once().acquire());
        // `b`'s SET and its check wait in M's socket; M wakes up.
        thread::sleep(Duration::from_millis(300));
        cl.node_mut(m).resume();
        taking.join().expect("b's thread")
    });
    proxy2.set(Fault::None);
    let lock = match holder {
        Ok(lock) => lock,
        // The hazard did not strike (M read R's announcement first): nothing shown either way.
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
    // M learnt of the takeover and dropped b's grant: the member's only copy of it.
    wait_replication(&cl, m, "role:slave");
    wait_replication(&cl, m, "master_link_status:up");
    assert_eq!(get(&cl, m, r), None, "M dropped b's grant in its sync");
    let found = overlaps(&holds);
    assert!(found.is_empty(), "two holders: {found:?}");
}
