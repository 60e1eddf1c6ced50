//! Guards and waiting, against real redis-server nodes: a guard keeps its lock alive for as long as it is held,
//! says it is lost as soon as it is (and before the lease ends when nothing confirms it), releases when dropped;
//! a waiter is woken by the release, not by a poll, gives up at its bound with the right error, and survives a
//! node restart.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, Error, Lost, Outcome};
use support::checker::{instant_ns, mono_ns};
use support::locks::{manager, one_attempt, wait_until};
use support::process::{process_state, signal, wait_for_state};
use support::wire::cmd;
use support::{Cluster, RedisServer};

const ROUND: Duration = Duration::from_millis(50);

fn config() -> Config {
    one_attempt(ROUND)
}

/// How long a waiter would take to notice a release by polling: the waiters' retry pause, set long so that a
/// wake-up (a round trip or two) and a poll are seconds apart, and the bounds below hold on a loaded machine.
const POLL: Duration = Duration::from_secs(2);

/// A bound that a wake-up meets and a poll (or a renewal) does not, with room for a busy 2-vCPU machine's stalls.
const AT_ONCE: Duration = Duration::from_millis(500);

/// For managers whose speed is not what a test checks (holders that only lock and unlock, rivals): rounds of
/// 1 s, so that a first call that also connects, on a machine busy with the other tests, is answered rather than
/// timed out.
fn steady() -> Config {
    one_attempt(Duration::from_secs(1))
}

/// The waiters' config: [`steady`] rounds, and a poll that would come only after [`POLL`].
fn waiter_config() -> Config {
    steady()
        .with_retry_delay(POLL)
        .with_retry_jitter(Duration::ZERO)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Runs `command` on every node in `nodes` and returns the raw replies.
fn on_nodes(cluster: &Cluster, nodes: &[usize], command: &[&str]) -> Vec<Vec<u8>> {
    nodes
        .iter()
        .map(|&i| cluster.node(i).raw(&cmd(command)))
        .collect()
}

/// Waits until every node has a client with tracking on: the watchdog's tracker connections are armed.
fn wait_for_tracking(cluster: &Cluster) {
    wait_until(Duration::from_secs(5), "tracker connections", || {
        (0..cluster.len()).all(|i| {
            let list = cluster.node(i).raw(&cmd(&["CLIENT", "LIST"]));
            String::from_utf8_lossy(&list).lines().any(|l| {
                l.split(' ')
                    .any(|f| f.starts_with("flags=") && f.contains('t'))
            })
        })
    });
}

#[test]
fn a_guard_keeps_its_lock_past_five_ttls_and_releases_it() {
    let cluster = Cluster::start(3);
    // Rounds of 100 ms and a TTL of 1 s: a renewal has 600 ms to land before the guard's deadline, so a stalled
    // machine does not lose the guard; the rival's 1 s rounds only make its probes sure to be answered.
    let locks = manager(cluster.urls(), one_attempt(ms(100)));
    let rival = manager(cluster.urls(), steady());
    let ttl = Duration::from_secs(1);
    let guard = locks.request("kept").ttl(ttl).hold().expect("hold");
    let first_deadline = guard.deadline();
    let start = Instant::now();
    while start.elapsed() < ttl * 5 {
        assert!(
            !guard.is_lost(),
            "lost after {:?}: {:?}",
            start.elapsed(),
            guard.lost()
        );
        assert!(
            rival
                .request("kept")
                .ttl(ttl)
                .once()
                .acquire()
                .expect_err("once")
                .is_held()
        );
        thread::sleep(ms(40));
    }
    // Renewed at a third of the TTL: about 15 times in 5 TTLs; the deadline moved with them.
    assert!(guard.renewals() >= 8, "{} renewals", guard.renewals());
    assert!(guard.deadline() > first_deadline + ttl * 3);
    assert!(guard.deadline() > Instant::now());
    assert!(guard.deadline() < Instant::now() + ttl);
    let stats = locks.stats().guards;
    assert_eq!(stats.held, 1);
    assert_eq!(stats.renewals, guard.renewals());
    assert!(stats.renewal_rounds >= stats.renewals, "{stats:?}"); // one guard: one per round
    let watch = guard.watch();
    // The release returns once a majority confirmed: 2 or 3 nodes by then.
    let released = guard.release().expect("release");
    assert!(released >= 2, "{released}");
    assert_eq!(watch.lost(), Some(Lost::Released));
    let lock = rival.request("kept").ttl(ttl).once().acquire();
    assert!(lock.is_ok(), "released on every node: {lock:?}");
    let stats = locks.stats();
    assert_eq!((stats.guards.held, stats.guards.lost), (0, 0));
    assert!(
        stats.to_string().contains("guards held 0, renewals"),
        "{stats}"
    );
}

#[test]
fn dropping_a_guard_releases_and_with_lock_releases_after_the_work() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), config());
    // The rival's probes must be answered, not timed out by a stalled machine: 1 s rounds.
    let rival = manager(cluster.urls(), steady());
    let guard = locks
        .request("dropped")
        .ttl(Duration::from_secs(30))
        .hold()
        .expect("hold");
    assert!(
        rival
            .request("dropped")
            .ttl(ms(500))
            .once()
            .acquire()
            .expect_err("try")
            .is_held()
    );
    let t0 = Instant::now();
    drop(guard);
    assert!(t0.elapsed() < ROUND * 2, "drop took {:?}", t0.elapsed());
    let lock = rival
        .request("dropped")
        .ttl(ms(500))
        .once()
        .acquire()
        .expect("free after the drop");
    rival.unlock(lock).expect("unlock");

    let seen = locks
        .request("closure")
        .ttl(Duration::from_secs(30))
        .run(|guard| {
            assert!(!guard.is_lost());
            assert!(
                rival
                    .request("closure")
                    .ttl(ms(500))
                    .once()
                    .acquire()
                    .expect_err("try")
                    .is_held()
            );
            guard.value().to_owned()
        })
        .expect("run");
    assert_eq!(seen.len(), 40);
    assert!(
        rival
            .request("closure")
            .ttl(ms(500))
            .once()
            .acquire()
            .is_ok()
    );
    // A held resource: run fails without running the work.
    let held = rival
        .request("busy")
        .ttl(Duration::from_secs(30))
        .hold()
        .expect("hold");
    let mut ran = false;
    let err = locks
        .request("busy")
        .ttl(Duration::from_secs(30))
        .run(|_| ran = true)
        .unwrap_err();
    assert!(err.is_held(), "{err}");
    assert!(!ran);
    drop(held);
    // A TTL too short to renew in time is refused, naming the setting.
    let err = locks.request("short").ttl(ms(100)).hold().unwrap_err();
    assert!(
        err.is_config() && err.to_string().contains("round_timeout"),
        "{err}"
    );
}

#[test]
fn a_guard_is_lost_within_one_renewal_interval_when_a_majority_is_killed() {
    let mut cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), config());
    let ttl = Duration::from_secs(6); // renewals 2 s apart: far from the deadline, even on a stalled machine
    let guard = locks.request("killed").ttl(ttl).hold().expect("hold");
    thread::sleep(ms(100));
    let lease_end = guard.deadline();
    let t0 = Instant::now();
    cluster.kill(0);
    cluster.kill(1);
    assert!(guard.wait_lost(ttl * 2), "not lost: {:?}", guard.lost());
    let took = t0.elapsed();
    // The next renewal (at most a third of the TTL away) finds the majority down.
    assert!(took <= ttl / 3 + AT_ONCE, "lost after {took:?}");
    assert!(Instant::now() < lease_end, "told before the lease ended");
    match guard.lost() {
        Some(Lost::Down(report)) => {
            let down = report.nodes()[..2]
                .iter()
                .filter(|(_, o)| matches!(o, Outcome::Failed(_)))
                .count();
            assert_eq!((down, report.granted()), (2, 0), "{report}");
        }
        other => panic!("{other:?}"),
    }
    // Released as best it can: too few nodes answer for a majority.
    assert!(guard.release().unwrap_err().is_quorum());
}

#[test]
fn a_guard_is_lost_at_once_when_its_key_is_deleted_or_overwritten_on_a_majority() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), config());
    let ttl = Duration::from_secs(30); // no renewal during the test: only tracking can tell
    for (name, command) in [
        ("deleted", vec!["DEL", "deleted"]),
        ("overwritten", vec!["SET", "overwritten", "someone-else"]),
    ] {
        let guard = locks.request(name).ttl(ttl).hold().expect("hold");
        wait_for_tracking(&cluster);
        thread::sleep(ms(50)); // the watchdog's first check of the key has run
        // On one node only: the majority still holds it.
        on_nodes(&cluster, &[0], &command);
        assert!(
            !guard.wait_lost(ms(300)),
            "{name}: lost on one node: {:?}",
            guard.lost()
        );
        let t0 = Instant::now();
        on_nodes(&cluster, &[1], &command);
        assert!(guard.wait_lost(Duration::from_secs(2)), "{name}: not lost");
        let took = t0.elapsed();
        // A renewal would find it only after ttl / 3 = 10 s.
        assert!(took < AT_ONCE, "{name}: told after {took:?}");
        assert_eq!(guard.renewals(), 0);
        match guard.lost() {
            Some(Lost::Taken(report)) => assert_eq!(report.taken(), 2, "{report}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

const CHILD_ENV: &str = "MUXLOCK_GUARD_CHILD";

/// A holder process stopped by SIGSTOP past its lease: when it runs again its first look at the guard says lost,
/// and no moment at which it believed it held the lock falls inside the next holder's lease.
#[test]
fn a_paused_holder_sees_its_guard_lost_the_moment_it_resumes() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return paused_child(&spec);
    }
    let cluster = Cluster::start(3);
    let ttl = ms(600);
    let exe = std::env::current_exe().expect("test binary");
    // Test names in this binary are `<module>::<test>`; `module_path!()` also names the crate, which they do not.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let mut child = Command::new(exe)
        .args([
            "--exact",
            &format!("{module}::a_paused_holder_sees_its_guard_lost_the_moment_it_resumes"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, cluster.urls().join(","))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    let reader = thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let next = |lines: &mut Vec<String>, what: &str| -> String {
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| {
                    signal(pid, "KILL");
                    panic!("child: no {what}; got {lines:?}")
                });
            lines.push(line.clone());
            if line.contains(what) {
                return line;
            }
        }
    };
    next(&mut lines, "HELD");
    // Let it hold through a few renewals, then stop the whole process (watchdog included).
    thread::sleep(ttl);
    signal(pid, "STOP");
    wait_for_state(pid, |s| s == 'T');
    let stopped = mono_ns();
    let locks = manager(cluster.urls(), config());
    let lock = locks
        .request("paused")
        .ttl(ttl)
        .wait(Duration::from_secs(5))
        .acquire()
        .expect("the stopped holder's lease ends");
    // The new lease began no earlier than this (its validity is counted from before its request).
    let taken_at = instant_ns(lock.valid_until()) - (ttl.as_nanos() as u64);
    thread::sleep(ms(200));
    signal(pid, "CONT");
    let lost = next(&mut lines, "LOST");
    let status = child.wait().expect("wait");
    let _ = reader.join();
    assert!(status.success(), "{status}");
    assert!(process_state(pid).is_none());
    let alive: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.find("ALIVE ").map(|i| &l[i + 6..]))
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    assert!(alive.len() > 10, "{lines:?}");
    let last = alive.iter().max().copied().unwrap_or(0);
    assert!(
        last < stopped + 50_000_000,
        "worked after the stop: {last} vs {stopped}"
    );
    assert!(
        last < taken_at,
        "overlap: the old holder believed it held the lock at {last}, the new one from {taken_at}"
    );
    assert!(lost.contains("before-next-step=true"), "{lost}");
    locks.unlock(lock).expect("unlock");
}

/// The child of [`a_paused_holder_sees_its_guard_lost_the_moment_it_resumes`]: holds the lock and works in small
/// steps; before each step it notes the time, then looks at the guard.
fn paused_child(urls: &str) {
    let locks = manager(urls.split(','), config());
    let guard = locks.request("paused").ttl(ms(600)).hold().expect("hold");
    println!("HELD");
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let before = mono_ns();
        if guard.is_lost() {
            // The first look after the pause: the time since the last step shows whether it came at once.
            println!("LOST {:?} before-next-step=true", guard.lost());
            return;
        }
        // Not lost at a moment after `before`: the lock was still good at `before`.
        println!("ALIVE {before}");
        thread::sleep(ms(3));
    }
    println!("LOST never");
}

#[test]
fn a_waiter_is_woken_by_the_release_not_by_a_poll() {
    let cluster = Cluster::start(3);
    let holder = manager(cluster.urls(), waiter_config());
    let waiter = manager(cluster.urls(), waiter_config());
    for (case, same_manager) in [("other manager", false), ("same manager", true)] {
        let waiting = if same_manager {
            holder.clone()
        } else {
            waiter.clone()
        };
        let lock = holder
            .request("handoff")
            .ttl(Duration::from_secs(30))
            .acquire()
            .expect("lock");
        let (tx, rx) = mpsc::channel();
        let t = thread::spawn(move || {
            let got = waiting
                .request("handoff")
                .ttl(Duration::from_secs(5))
                .wait(Duration::from_secs(10))
                .acquire();
            tx.send(Instant::now()).expect("send");
            got.map(|lock| waiting.unlock(lock))
        });
        // The waiter has tried, found the lock held and gone to sleep.
        thread::sleep(ms(300));
        assert!(rx.try_recv().is_err(), "{case}: returned while held");
        holder.unlock(lock).expect("unlock");
        let released = Instant::now();
        let woke = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
        let took = woke.saturating_duration_since(released);
        assert!(t.join().expect("join").is_ok());
        // A poll would take the retry delay (`POLL`); a wake-up takes a round trip or two.
        assert!(took < AT_ONCE, "{case}: hand-off took {took:?}");
    }
    let g = waiter.stats().guards;
    assert_eq!((g.waits, g.wakeups, g.waits_given_up), (1, 1, 0), "{g:?}");
}

#[test]
fn a_waiter_wakes_when_the_holder_s_lease_expires() {
    let cluster = Cluster::start(3);
    let holder = manager(cluster.urls(), steady());
    let waiter = manager(cluster.urls(), waiter_config());
    let ttl = ms(500);
    let lock = holder.request("expiring").ttl(ttl).acquire().expect("lock");
    let t0 = Instant::now();
    let got = waiter
        .request("expiring")
        .ttl(ttl)
        .wait(Duration::from_secs(5))
        .acquire()
        .expect("wait");
    let took = t0.elapsed();
    assert!(!lock.is_valid());
    // At the end of the lease (an expiry invalidation, or the timer set from the nodes' PTTL), not a poll later.
    assert!(took < ttl + AT_ONCE, "took {took:?}");
    waiter.unlock(got).expect("unlock");
}

#[test]
fn a_waiter_gives_up_at_max_wait_with_the_right_error() {
    let mut cluster = Cluster::start(3);
    let holder = manager(cluster.urls(), steady());
    let waiter = manager(cluster.urls(), config());
    let _lock = holder
        .request("busy")
        .ttl(Duration::from_secs(20))
        .acquire()
        .expect("lock");
    let t0 = Instant::now();
    let err = waiter
        .request("busy")
        .ttl(Duration::from_secs(5))
        .wait(ms(300))
        .acquire()
        .unwrap_err();
    let took = t0.elapsed();
    assert!(
        took >= ms(300) && took < ms(300) + ROUND * 3,
        "gave up after {took:?}"
    );
    let Error::Held(report) = &err else {
        panic!("{err}");
    };
    let left = report.holder_ttl().expect("the holder's TTL is known");
    assert!(
        left > Duration::from_secs(18) && left <= Duration::from_secs(20),
        "{left:?}"
    );
    assert!(err.to_string().contains("lease runs"), "{err}");
    // A zero wait is one attempt.
    let t0 = Instant::now();
    assert!(
        waiter
            .request("busy")
            .ttl(Duration::from_secs(5))
            .wait(Duration::ZERO)
            .acquire()
            .unwrap_err()
            .is_held()
    );
    assert!(t0.elapsed() < ROUND * 2);
    // Nodes down: a quorum error, not "held".
    cluster.kill(1);
    cluster.kill(2);
    let err = waiter
        .request("free")
        .ttl(Duration::from_secs(5))
        .wait(ms(300))
        .acquire()
        .unwrap_err();
    assert!(err.is_quorum(), "{err}");
}

#[test]
fn waiters_of_one_process_take_turns_in_arrival_order() {
    let cluster = Cluster::start(3);
    let locks = manager(cluster.urls(), config());
    let first = locks
        .request("turns")
        .ttl(Duration::from_secs(30))
        .acquire()
        .expect("lock");
    let (tx, rx) = mpsc::channel();
    let mut threads = Vec::new();
    for i in 0..4 {
        let (waiter, tx) = (locks.clone(), tx.clone());
        threads.push(thread::spawn(move || {
            let lock = waiter
                .request("turns")
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(10))
                .acquire()
                .expect("wait");
            tx.send(i).expect("send");
            thread::sleep(ms(20));
            waiter.unlock(lock).expect("unlock");
        }));
        // Each is in line (it took its place, and waits) before the next arrives.
        wait_until(Duration::from_secs(5), "the waiter in line", || {
            locks.stats().guards.waits > i as u64
        });
    }
    locks.unlock(first).expect("unlock");
    let order: Vec<i32> = (0..4)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("turn"))
        .collect();
    for t in threads {
        t.join().expect("join");
    }
    assert_eq!(order, vec![0, 1, 2, 3]);
}

#[test]
fn a_waiter_survives_a_node_restart_while_it_waits() {
    let mut cluster = Cluster::start(3);
    let holder = manager(cluster.urls(), steady());
    let waiter = manager(cluster.urls(), waiter_config());
    let lock = holder
        .request("restarted")
        .ttl(Duration::from_secs(30))
        .acquire()
        .expect("lock");
    let (tx, rx) = mpsc::channel();
    let t = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let got = waiter
                .request("restarted")
                .ttl(Duration::from_secs(5))
                .wait(Duration::from_secs(10))
                .acquire();
            tx.send(Instant::now()).expect("send");
            got
        })
    };
    thread::sleep(ms(300));
    cluster.restart(0);
    thread::sleep(ms(300));
    assert!(rx.try_recv().is_err(), "returned while held on two nodes");
    holder.unlock(lock).expect("unlock");
    let released = Instant::now();
    let woke = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
    let got = t.join().expect("join").expect("acquired");
    let took = woke.saturating_duration_since(released);
    assert!(took < AT_ONCE, "woken after {took:?}");
    waiter.unlock(got).expect("unlock");
}

/// Servers that cannot speak RESP3 (here `HELLO` is renamed away): no tracking, so waiters wake on their timer
/// at the holder's expiry and on this process' releases; nothing fails.
#[test]
fn waiting_works_without_resp3_on_timers() {
    let cluster = Cluster::builder(3)
        .server(RedisServer::builder().args(["--rename-command", "HELLO", ""]))
        .start();
    let holder = manager(cluster.urls(), steady());
    let waiter = manager(cluster.urls(), waiter_config());
    let ttl = ms(400);
    let lock = holder.request("resp2").ttl(ttl).acquire().expect("lock");
    let t0 = Instant::now();
    let got = waiter
        .request("resp2")
        .ttl(ttl)
        .wait(Duration::from_secs(5))
        .acquire()
        .expect("wait");
    let took = t0.elapsed();
    assert!(!lock.is_valid());
    // The timer set from the holder's PTTL, before the poll (`POLL`) would come.
    assert!(took < ttl + AT_ONCE, "took {took:?}");
    // A guard renews on RESP2 as well.
    waiter.unlock(got).expect("unlock");
    let guards = manager(cluster.urls(), config()); // a 400 ms guard needs short rounds
    let guard = guards.request("resp2").ttl(ttl).hold().expect("hold");
    thread::sleep(ttl * 2);
    assert!(
        !guard.is_lost() && guard.renewals() >= 3,
        "{:?}",
        guard.lost()
    );
}
