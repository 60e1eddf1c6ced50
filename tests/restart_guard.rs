//! The restart guard against nodes whose `INFO server` says exactly what a test needs: scripted fake nodes, because
//! a real Redis reports "up 1 s" a few milliseconds after a restart only when the restart falls just before a
//! wall-clock second ends (tests/mutex.rs times real restarts that way too; these tests need no luck).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use muxlock::redlock::{Config, Error, LockManager, Outcome};
use support::fake::{self, Action, FakeServer, bulk, well_behaved};
use support::locks;

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
        let attempt = locks.try_lock("r", ttl);
        let elapsed = built.elapsed();
        match attempt {
            Ok(Some(lock)) => {
                assert!(
                    elapsed >= window,
                    "granted {elapsed:?} after connecting to nodes up \"1 s\": the window is {window:?}"
                );
                locks.unlock(lock).expect("release");
                break elapsed;
            }
            Ok(None) => panic!("the fake nodes never hold a key for others"),
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
    let lock = locks.try_lock("r", ttl).expect("up 11 days: trusted");
    locks.unlock(lock.expect("free")).expect("release");
    // The node drops its connection (as a killed server would); its next connection reports another run id.
    close_next.store(true, SeqCst);
    let e = locks
        .try_lock("r", ttl)
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
        match locks.try_lock("r", ttl) {
            Ok(lock) => {
                let elapsed = reconnecting.elapsed();
                assert!(elapsed >= window, "a new run id trusted after {elapsed:?}");
                locks.unlock(lock.expect("free")).expect("release");
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

/// Real nodes that persist every write (`appendonly yes`, `appendfsync always`) are trusted at once: a fresh
/// deployment grants locks from its first second. A restart of one comes back with the lock it granted (read from
/// its append-only file), which is why the guard may trust it, and it stays trusted: its predecessor persisted too.
#[test]
fn nodes_that_persist_every_write_are_trusted_at_once_and_keep_their_locks_across_a_restart() {
    let mut cluster = support::Cluster::builder(3)
        .arg("--appendonly")
        .arg("yes")
        .arg("--appendfsync")
        .arg("always")
        .start();
    let ttl = Duration::from_secs(10);
    let locks = manager(cluster.urls(), Duration::ZERO);
    let lock = locks
        .try_lock("r", ttl)
        .expect("trusted at once")
        .expect("free");
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
    let e = locks.try_lock("r", ttl).expect_err("not trusted yet");
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
        match locks.try_lock("r", ttl) {
            Ok(Some(lock)) => {
                locks.unlock(lock).expect("release");
                break;
            }
            Ok(None) => panic!("nobody else holds it"),
            Err(e) => assert!(Instant::now() < until, "never trusted: {e}"),
        }
        thread::sleep(Duration::from_millis(100));
    }
}
