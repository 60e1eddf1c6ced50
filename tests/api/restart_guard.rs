//! The restart guard. Against nodes whose `INFO server` says exactly what a test needs: scripted fake nodes,
//! because a real Redis reports "up 1 s" a few milliseconds after a restart only when the restart falls just
//! before a wall-clock second ends (tests/mutex.rs times real restarts that way too; these tests need no luck).
//! Against real nodes: which nodes are trusted at once (they persist every write and their persistence marker is
//! older than the window), and extensions on young nodes.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use muxlock::redlock::{Config, Error, LockManager, Outcome};
use support::fake::{self, Action, FakeServer, bulk, well_behaved};
use support::{Cluster, locks};

/// A node that answers the lock commands as a healthy Redis would, and whose `INFO` reports the given uptime and
/// the run id `run-<k>` on its k-th connection when `new_process_per_connection`, else always `run-0`.
fn node(uptime: u64, new_process_per_connection: bool, close_next: Arc<AtomicBool>) -> FakeServer {
    let connections = AtomicUsize::new(0);
    FakeServer::start(move |cmd: &[Bytes]| match fake::name(cmd).as_deref() {
        Some("INFO") => {
            let k = connections.fetch_add(1, SeqCst);
            let run = if new_process_per_connection { k } else { 0 };
            let text = format!(
                "# Server\r\nredis_version:7.0.15\r\nrun_id:{run:040}\r\nuptime_in_seconds:{uptime}\r\n"
            );
            Action::reply(bulk(text.as_bytes()))
        }
        Some("SET") if close_next.swap(false, SeqCst) => Action::Close,
        _ => fake::setup_reply(cmd).unwrap_or_else(|| well_behaved(cmd)),
    })
}

fn manager(urls: Vec<String>, window: Duration) -> LockManager {
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(500))
        .with_restart_window(window);
    assert!(config.restart_guard(), "on by default");
    locks::manager(urls, config)
}

/// Real nodes started with `appendonly yes`, `appendfsync always`, `no-appendfsync-on-rewrite no`.
fn persistent(n: usize) -> support::Cluster {
    support::Cluster::builder(n)
        .server(support::RedisServer::builder().persist_every_write())
        .start()
}

/// Waits (bounded) until `inspect` has read every node's set-up replies, and returns the stats then.
#[track_caller]
fn stats_once_read(locks: &LockManager) -> muxlock::redlock::Stats {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        // A node's reply to the read comes after its set-up's on the same connection: once every node answered,
        // each one's standing (persistent, or counted from when) is known. (Not "until a node is persistent or
        // counted later": a node older than a zero window counts at once, and its `counted_in` stays `None`.)
        let answered = locks.inspect("r").expect("inspect").answered();
        let stats = locks.stats();
        if answered == stats.nodes.len() {
            return stats;
        }
        assert!(Instant::now() < until, "{answered} answered: {stats:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

fn quarantined(err: &Error) -> usize {
    err.report().map_or(0, |r| {
        r.nodes()
            .iter()
            .filter(|(_, o)| *o == Outcome::Quarantined)
            .count()
    })
}

/// Redis computes `uptime_in_seconds` from two whole-second wall-clock times: "1" can mean 5 ms. A node that
/// says so is a node that may have just restarted, and must wait the whole window. The guard once took the reading
/// as a full second and trusted such nodes a second early: with a 1.5 s window, from about 0.5 s on.
#[test]
fn a_node_that_reports_one_second_of_uptime_waits_the_whole_window() {
    let never = Arc::new(AtomicBool::new(false));
    let nodes: Vec<FakeServer> = (0..3).map(|_| node(1, false, Arc::clone(&never))).collect();
    let window = Duration::from_millis(1500);
    let ttl = Duration::from_millis(1000);
    // Taken before the manager connects: each INFO is read later, so `elapsed()` overstates the time since.
    let built = Instant::now();
    let locks = manager(nodes.iter().map(FakeServer::url).collect(), window);
    let mut refused = 0;
    let until = built + Duration::from_secs(5);
    let granted_after = loop {
        let attempt = locks.request("r").ttl(ttl).once().acquire();
        let elapsed = built.elapsed();
        match attempt {
            Ok(lock) => {
                assert!(
                    elapsed >= window,
                    "granted {elapsed:?} after connecting to nodes up \"1 s\": the window is {window:?}"
                );
                locks.unlock(lock).expect("release");
                break elapsed;
            }
            Err(e) if e.is_held() => panic!("the fake nodes never hold a key for others"),
            Err(e) => {
                assert!(quarantined(&e) >= 2, "{e}");
                refused += 1;
            }
        }
        assert!(Instant::now() < until, "never trusted");
        thread::sleep(Duration::from_millis(25));
    };
    assert!(
        refused >= 10,
        "too few attempts inside the window to have checked it: {refused}"
    );
    // Once the window has passed, the nodes count at once (within a few polls).
    assert!(
        granted_after < window + Duration::from_millis(500),
        "trusted only after {granted_after:?}"
    );
}

/// A node that reports a long uptime is trusted at once; a node whose `run_id` changes between two connections is
/// another process (a restart, a failover), and its votes wait the whole window again, whatever its uptime.
#[test]
fn a_changed_run_id_waits_the_window_whatever_the_uptime() {
    let close_next = Arc::new(AtomicBool::new(false));
    let node = node(1_000_000, true, Arc::clone(&close_next));
    let window = Duration::from_millis(800);
    let ttl = Duration::from_millis(500);
    let locks = manager(vec![node.url()], window);
    let lock = locks
        .request("r")
        .ttl(ttl)
        .once()
        .acquire()
        .expect("up 11 days: trusted");
    locks.unlock(lock).expect("release");
    // The node drops its connection (as a killed server would); its next connection reports another run id.
    close_next.store(true, SeqCst);
    let e = locks
        .request("r")
        .ttl(ttl)
        .once()
        .acquire()
        .expect_err("closed instead of answering");
    assert!(
        matches!(
            e.report().map(|r| &r.nodes()[0].1),
            Some(Outcome::Failed(_))
        ),
        "{e}"
    );
    let reconnecting = Instant::now();
    let until = reconnecting + Duration::from_secs(5);
    let mut refused = 0;
    loop {
        match locks.request("r").ttl(ttl).once().acquire() {
            Ok(lock) => {
                let elapsed = reconnecting.elapsed();
                assert!(elapsed >= window, "a new run id trusted after {elapsed:?}");
                locks.unlock(lock).expect("release");
                break;
            }
            // Until the reconnect, the node may still be backing off; after it, its grant is not counted.
            Err(e) => refused += quarantined(&e),
        }
        assert!(Instant::now() < until, "never trusted again");
        thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(node.connections(), 2);
    assert!(
        refused >= 10,
        "too few quarantined attempts to have checked the window: {refused}"
    );
}

/// Real nodes that persist every write (`appendonly yes`, `appendfsync always`) and whose persistence marker was
/// provisioned (written long ago) are trusted at once: a fresh deployment grants locks from its first second. A
/// restart of one comes back with the lock it granted (read from its append-only file) and with the marker, which
/// is why the guard may trust it, and it stays trusted: its predecessor persisted too.
#[test]
fn nodes_that_persist_every_write_are_trusted_at_once_and_keep_their_locks_across_a_restart() {
    let mut cluster = persistent(3);
    locks::provision_marker(&cluster);
    let ttl = Duration::from_secs(10);
    let locks = manager(cluster.urls(), Duration::ZERO);
    let lock = locks.request("r").ttl(ttl).once().acquire().expect("free");
    // Every node is read as persistent once its connection's set-up replies are read (the lock may have been
    // decided before: replies are read during rounds, and `inspect` waits for every node's).
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        locks.inspect("r").expect("inspect");
        let stats = locks.stats();
        if stats
            .nodes
            .iter()
            .all(|n| n.persists && n.counted_in.is_none())
        {
            break;
        }
        assert!(Instant::now() < until, "{stats:?}");
        thread::sleep(Duration::from_millis(20));
    }
    // Node 0 restarts (SIGKILL: no shutdown save) on the same data directory: the key is still there.
    cluster.restart(0);
    let value = format!("$40\r\n{}\r\n", lock.value());
    assert_eq!(
        String::from_utf8_lossy(&cluster.node(0).raw(&support::cmd(&["GET", "r"]))),
        value,
        "the restarted node forgot the lock"
    );
    // It is trusted at once on its new connection: an extension counts its vote at once.
    let mut lock = lock;
    for _ in 0..50 {
        if locks.extend(&mut lock, ttl).is_ok() && locks.stats().nodes[0].restarts == 1 {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let stats = locks.stats();
    assert_eq!(stats.nodes[0].restarts, 1, "{stats:?}");
    assert!(stats.nodes[0].persists, "{stats:?}");
    assert_eq!(stats.nodes[0].quarantined, 0, "{stats:?}");
    locks.unlock(lock).expect("release");
}

/// Nodes that do not persist every write (`appendfsync everysec`), and nodes that refuse `CONFIG` (renamed), wait
/// the window; the error says which nodes, for how long, and how to avoid it. A refused `CONFIG` is not a failure
/// of the connection: the node answers, and its grant is merely not counted yet.
#[test]
fn other_nodes_wait_the_window_and_the_error_says_why_in_words() {
    let everysec = support::Cluster::builder(2)
        .arg("--appendonly")
        .arg("yes")
        .arg("--appendfsync")
        .arg("everysec")
        .start();
    let renamed = support::Cluster::builder(1)
        .arg("--appendonly")
        .arg("yes")
        .arg("--appendfsync")
        .arg("always")
        .arg("--rename-command")
        .arg("CONFIG")
        .arg("")
        .start();
    let mut urls = everysec.urls();
    urls.extend(renamed.urls());
    let ttl = Duration::from_secs(2);
    let locks = manager(urls, Duration::ZERO);
    let e = locks
        .request("r")
        .ttl(ttl)
        .once()
        .acquire()
        .expect_err("not trusted yet");
    assert!(e.is_quorum(), "{e}");
    let report = e.report().unwrap();
    // Two uncounted grants decide the round (2 of 3 needed): the third may not have been awaited.
    assert!(quarantined(&e) >= 2, "{e}");
    let wait = report.restart_wait().expect("the wait is known");
    assert!(
        wait > Duration::from_secs(1) && wait <= ttl + Duration::from_millis(100),
        "{wait:?}"
    );
    let text = e.to_string();
    for words in [
        "not counted yet",
        "counted in",
        "appendfsync always",
        "up 0.",
    ] {
        assert!(text.contains(words), "{words:?} not in: {text}");
    }
    assert!(locks.stats().nodes.iter().all(|n| !n.persists));
    // After the window, the same nodes grant.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match locks.request("r").ttl(ttl).once().acquire() {
            Ok(lock) => {
                locks.unlock(lock).expect("release");
                break;
            }
            Err(e) if e.is_held() => panic!("nobody else holds it"),
            Err(e) => assert!(Instant::now() < until, "never trusted: {e}"),
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Settings are no proof that the *files* survive. Persistent nodes lose their files (an ephemeral
/// disk, a pod rescheduled without its volume) while a lock is held: they come back empty, with the same
/// settings. Neither the holder's manager nor a fresh one (which never saw the old processes) may count them at
/// once: their new marker is younger than the window. Trusting them at once would give the fresh client the lock
/// with 29.9 s of the first lease left.
#[test]
fn persistent_nodes_that_lost_their_files_are_not_trusted_at_once_by_anyone() {
    let mut cluster = persistent(3);
    locks::provision_marker(&cluster);
    let ttl = Duration::from_secs(30);
    let holder = manager(cluster.urls(), Duration::ZERO);
    let lock = holder.request("r").ttl(ttl).once().acquire().expect("free");
    assert!(stats_once_read(&holder).nodes.iter().all(|n| n.persists));
    for i in 0..2 {
        cluster.restart_without_files(i);
    }
    assert_eq!(
        cluster.node(0).raw(&support::cmd(&["GET", "r"])),
        b"$-1\r\n",
        "the files are gone, and the lock with them"
    );
    // A fresh client: one attempt, on new connections to every node.
    let fresh = manager(cluster.urls(), ttl);
    let attempt = fresh.request("r").ttl(ttl).once().acquire();
    assert!(
        lock.is_valid(),
        "the first lease must still run for the check to mean anything"
    );
    match attempt {
        Ok(_) => panic!(
            "a fresh client got the lock from nodes that lost their files, with {:?} of the first lease left",
            lock.validity()
        ),
        // A quarantined grant and node 2's "held" decide the round (the third may not have been awaited): the
        // first holder is in the way, so it may be reported as held (the queue's verdict) or as no quorum.
        Err(e) if e.is_held() => {}
        Err(e) => assert!(quarantined(&e) >= 1, "{e}"),
    }
    let stats = stats_once_read(&fresh);
    assert!(
        stats.nodes[..2].iter().map(|n| n.quarantined).sum::<u64>() >= 1,
        "a restarted node's grant must have been refused: {stats:?}"
    );
    for (i, n) in stats.nodes.iter().enumerate() {
        // The restarted nodes wrote a new marker: counted only once it (or the process) is a window old.
        let young = i < 2;
        assert_eq!(n.persists, !young, "node {i}: {stats:?}");
        if young {
            let wait = n.counted_in.expect("not counted yet");
            assert!(wait > ttl - Duration::from_secs(5), "node {i}: {wait:?}");
        }
    }
    // The holder's own manager, which saw the old processes (persisting every write), once it has reconnected.
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        // Held (node 2 and a quarantined grant decide), or no quorum (its old connections to the killed nodes
        // fail first, and it reconnects after its backoff): never granted.
        assert!(
            holder.request("r").ttl(ttl).once().acquire().is_err(),
            "the holder's manager granted the lock a second time"
        );
        let stats = holder.stats();
        if stats.nodes.iter().map(|n| n.restarts).sum::<u64>() == 2 {
            assert!(stats.nodes[..2].iter().all(|n| !n.persists), "{stats:?}");
            break;
        }
        assert!(Instant::now() < until, "never reconnected: {stats:?}");
        thread::sleep(Duration::from_millis(20));
    }
    // A brand-new node is the same as one that lost its files: unprovisioned nodes wait the window too.
    let new = persistent(3);
    let e = manager(new.urls(), Duration::ZERO)
        .request("r")
        .ttl(Duration::from_secs(2))
        .once()
        .acquire()
        .expect_err("brand-new nodes without a provisioned marker wait the window");
    assert!(quarantined(&e) >= 2, "{e}");
}

/// `no-appendfsync-on-rewrite yes` skips the `fsync` while a `BGSAVE` or AOF rewrite runs: a write acknowledged
/// then may be lost by a crash. Such nodes are not trusted at once: `appendonly` and `appendfsync` alone do not
/// make a node safe to trust.
#[test]
fn nodes_that_skip_the_fsync_during_rewrites_are_not_trusted_at_once() {
    let cluster = support::Cluster::builder(3)
        .server(
            support::RedisServer::builder()
                .persist_every_write()
                .arg("--no-appendfsync-on-rewrite")
                .arg("yes"),
        )
        .start();
    locks::provision_marker(&cluster);
    let locks = manager(cluster.urls(), Duration::ZERO);
    match locks
        .request("r")
        .ttl(Duration::from_secs(5))
        .once()
        .acquire()
    {
        Ok(_) => panic!("trusted at once, though the fsync may be skipped"),
        Err(e) if e.is_held() => panic!("nobody holds it"),
        Err(e) => assert!(quarantined(&e) >= 2, "{e}"),
    }
    let stats = stats_once_read(&locks);
    assert!(stats.nodes.iter().all(|n| !n.persists), "{stats:?}");
}

/// A user whose ACL forbids the marker key gets the window rule, never trust: the marker script is refused, and
/// the refusal is its reply.
#[test]
fn nodes_whose_marker_is_refused_wait_the_window() {
    let cluster = persistent(3);
    locks::provision_marker(&cluster);
    for node in cluster.nodes() {
        let reply = node.raw(&support::cmd(&[
            "ACL", "SETUSER", "locker", "on", ">pw", "~r", "+@all",
        ]));
        assert_eq!(reply, b"+OK\r\n", "{}", support::wire::show(&reply));
    }
    let urls: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| format!("redis://locker:pw@127.0.0.1:{}", n.port()))
        .collect();
    let locks = manager(urls, Duration::ZERO);
    match locks
        .request("r")
        .ttl(Duration::from_secs(5))
        .once()
        .acquire()
    {
        Ok(_) => panic!("trusted at once without reading the marker"),
        Err(e) if e.is_held() => panic!("nobody holds it"),
        Err(e) => assert!(quarantined(&e) >= 2, "{e}"),
    }
    assert!(stats_once_read(&locks).nodes.iter().all(|n| !n.persists));
}

/// An extension's "yes" says our value is on the node now, which a node that lost its data can say only if our
/// own `SET` reached it after its restart: it needs no restart guard. Before, `extend --ttl 60s` on nodes up a few
/// seconds was refused as "no quorum" (their grants were "not counted"). The window for later acquisitions still
/// grows with the extended lease.
#[test]
fn an_extension_counts_on_nodes_up_since_the_acquisition_and_grows_the_window() {
    let cluster = support::Cluster::start(3);
    let short = Duration::from_millis(500);
    let locks = manager(cluster.urls(), Duration::ZERO);
    // The nodes must be older than the first, short lease (about a second after they started).
    let until = Instant::now() + Duration::from_secs(10);
    let mut lock = loop {
        match locks.request("r").ttl(short).once().acquire() {
            Ok(lock) => break lock,
            Err(e) if e.is_held() => panic!("nobody holds it"),
            Err(e) => assert!(Instant::now() < until, "never trusted: {e}"),
        }
        thread::sleep(Duration::from_millis(20));
    };
    let long = Duration::from_secs(60);
    locks
        .extend(&mut lock, long)
        .expect("our own key answers yes, however young the node");
    assert!(lock.validity() > Duration::from_secs(55));
    // By value, the acquisition's time is unknown: a node younger than the window might have been restored from
    // a snapshot that holds this value after a rival's key was lost, so only the window rule applies.
    let value = lock.value().to_owned();
    let e = locks
        .extend_value("r", &value, long)
        .expect_err("by value, young nodes do not count");
    assert!(quarantined(&e) >= 2, "{e}");
    // The nodes are younger than the longest lease now in use: a new acquisition's grants are not counted.
    let e = locks
        .request("other")
        .ttl(short)
        .once()
        .acquire()
        .expect_err("the window grew to the extended lease");
    assert!(quarantined(&e) >= 2, "{e}");
    let wait = e.report().and_then(|r| r.restart_wait()).expect("a wait");
    assert!(wait > Duration::from_secs(50), "{wait:?}");
    locks.unlock(lock).expect("release");
}

/// Nodes restored from an older snapshot hold the previous holder's key and lost the
/// current holder's. An extension by the previous holder's value must not count them (by value, the window rule
/// applies: they just restarted).
#[test]
fn an_extension_is_not_confirmed_by_nodes_restored_from_an_older_snapshot() {
    let mut cluster = Cluster::start(3);
    let ttl = Duration::from_secs(30);
    let plain = locks::one_attempt(Duration::from_millis(500));
    let a = locks::manager(cluster.urls(), plain.clone());
    let b = locks::manager(cluster.urls(), plain);
    // A holds r; nodes 0 and 1 take a snapshot (an RDB `save` point) with A's key in it.
    let lock_a = a.request("r").ttl(ttl).acquire().expect("A acquires");
    let value_a = lock_a.value().to_owned();
    for i in 0..2 {
        assert_eq!(cluster.node(i).raw(&support::cmd(&["SAVE"])), b"+OK\r\n");
    }
    // A is done and releases; B acquires r on every node.
    assert!(a.unlock(lock_a).expect("A releases") >= 2);
    let lock_b = b.request("r").ttl(ttl).acquire().expect("B acquires");
    // Nodes 0 and 1 crash and come back from their last snapshot: A's key (still 29 s to live), not B's.
    cluster.restart(0);
    cluster.restart(1);
    // A client with the restart guard on (it sees both nodes as just restarted, not trusted at once).
    let guarded = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(500))
        .with_restart_window(ttl);
    assert!(guarded.restart_guard());
    let c = locks::manager(cluster.urls(), guarded);
    // The guard is on and distrusts the restarted nodes for acquisitions (control).
    let e = c
        .request("other")
        .ttl(ttl)
        .once()
        .acquire()
        .expect_err("nodes 0 and 1 are quarantined");
    let quarantined = e.report().map_or(0, |r| {
        r.nodes()
            .iter()
            .filter(|(_, o)| *o == muxlock::redlock::Outcome::Quarantined)
            .count()
    });
    assert_eq!(quarantined, 2, "{e}");
    let extended = c.extend_value("r", &value_a, ttl);
    let both = extended.is_ok() && lock_b.is_valid();
    if both {
        eprintln!(
            "VIOLATION: B holds r (valid {:?} more) and extend_value by A's value succeeded ({:?})",
            lock_b.validity(),
            extended
        );
    }
    assert!(
        !both,
        "two holders: B's lock is valid and A's stale value was extended on two restarted nodes"
    );
}

/// The same history with the previous holder's own `Lock` (as a guard's renewal would): nodes that restarted
/// after the acquisition do not count, even though the extension's lease is shorter than their uptime is not.
#[test]
fn an_extension_of_a_lock_is_not_confirmed_by_nodes_restarted_since_its_acquisition() {
    let mut cluster = Cluster::start(3);
    let ttl = Duration::from_secs(4);
    // The guard is on, with a window of the lease: wait until the fresh nodes are older than it.
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(500))
        .with_restart_window(ttl);
    let a = locks::manager(cluster.urls(), config.clone());
    let b = locks::manager(
        cluster.urls(),
        locks::one_attempt(Duration::from_millis(500)),
    );
    let until = Instant::now() + Duration::from_secs(15);
    let mut lock_a = loop {
        match a.request("r").ttl(ttl).once().acquire() {
            Ok(lock) => break lock,
            Err(e) if e.is_held() => panic!("nobody holds it"),
            Err(e) => assert!(Instant::now() < until, "never trusted: {e}"),
        }
        thread::sleep(Duration::from_millis(50));
    };
    let value_a = lock_a.value().to_owned();
    for i in 0..2 {
        assert_eq!(cluster.node(i).raw(&support::cmd(&["SAVE"])), b"+OK\r\n");
    }
    // A's keys go (released by value: A keeps its `Lock`), B takes r everywhere, nodes 0 and 1 come back from
    // the snapshot that has A's key.
    assert!(a.unlock_value("r", &value_a).expect("released") >= 2);
    let lock_b = b.request("r").ttl(ttl).acquire().expect("B acquires");
    cluster.restart(0);
    cluster.restart(1);
    // A's connections to the restarted nodes were closed: the first rounds find that out and re-dial (bounded).
    let until = Instant::now() + Duration::from_secs(2);
    let e = loop {
        let e = a
            .extend(&mut lock_a, ttl)
            .expect_err("nodes restarted since A's acquisition do not count");
        if quarantined(&e) >= 2 || Instant::now() >= until {
            break e;
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert!(lock_b.is_valid(), "the history took too long");
    // Neither restarted node counts. Once one is quarantined and node 2 answers with B's key, no majority is left
    // and the round may decide without the other (under load it did, every try for 2 s): each restarted node is
    // then quarantined or not awaited, never a counted grant.
    let granted = e.report().map_or(0, |r| {
        r.nodes()[..2]
            .iter()
            .filter(|(_, o)| *o == Outcome::Granted)
            .count()
    });
    assert!(quarantined(&e) >= 1 && granted == 0, "{e}");
}

/// A waiting request's refused attempt reads on past its verdict for the outcomes still owed
/// (`engine/scripted.rs`, `Reading::OnAfterRefusal`). A young node's grant read then counts no more than one read
/// before the verdict, and the report says so alike: [`Outcome::Quarantined`], among the grants not counted, never
/// [`Outcome::Granted`]. Nodes 0 and 1 hold the key for someone else and answer 100 ms after a request (50 ms each
/// way, through a proxy); node 2, young (just started, not persisting every write), the key free there, answers
/// 120 ms after: the verdict (two refusals) comes at about 100 ms, the round reads on until about 150 ms (a tenth
/// of its 500 ms), and reads node 2's grant at 120 ms. Reported as a grant, it would make the error say "1 of 3
/// nodes granted" and leave the node out of [`not_counted`](muxlock::redlock::Report::not_counted).
#[test]
fn a_young_node_s_grant_read_past_a_waiter_s_verdict_is_reported_as_not_counted() {
    use support::proxy::{Fault, FaultProxy};
    use support::wire::cmd;
    let cluster = Cluster::start(3);
    let proxies: Vec<FaultProxy> = cluster.addrs().into_iter().map(FaultProxy::start).collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let config = Config::default().with_round_timeout(Duration::from_millis(500));
    assert!(config.restart_guard(), "on by default");
    let locks = locks::manager(urls, config);
    // Connected, every node's set-up replies read, before the latency.
    let stats = stats_once_read(&locks);
    assert!(stats.nodes.iter().all(|n| !n.persists), "{stats:?}");
    for node in &cluster.nodes()[..2] {
        let reply = node.raw(&cmd(&["SET", "late", "someone-else", "PX", "10000"]));
        assert_eq!(reply, b"+OK\r\n");
    }
    for (i, p) in proxies.iter().enumerate() {
        let one_way = if i < 2 { 50 } else { 60 };
        p.set(Fault::Latency(Duration::from_millis(one_way)));
    }
    let e = locks
        .request("late")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_millis(300))
        .acquire()
        .expect_err("held elsewhere on two nodes of three");
    assert!(e.is_held(), "{e}");
    let report = e.report().expect("a report");
    let young = &report.nodes()[2].1;
    assert_eq!(
        *young,
        Outcome::Quarantined,
        "node 2's late grant, read past the verdict, reported as counted or not read: {e}"
    );
    assert_eq!(report.granted(), 0, "{e}");
    let quarantined = (report.nodes().iter())
        .filter(|(_, o)| *o == Outcome::Quarantined)
        .count();
    assert_eq!(report.not_counted().count(), quarantined, "{e}");
}
