//! The async API's hard cases: each test is a way to break it, against real redis-servers.

use crate::support;

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

use muxlock::Error;
use support::rt::{config, current_thread, two_workers};
use support::{Cluster, cmd, locks};

/// The keys left on the nodes but fencing counters.
fn keys(cluster: &Cluster) -> Vec<String> {
    cluster
        .nodes()
        .iter()
        .flat_map(|n| {
            let reply = String::from_utf8_lossy(&n.raw(&cmd(&["KEYS", "*"]))).into_owned();
            reply
                .split("\r\n")
                .filter(|l| !l.is_empty() && !l.starts_with('*') && !l.starts_with('$'))
                .filter(|k| !k.starts_with("muxlock:fence:"))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits up to `limit` for the nodes to hold no key; returns what is left.
fn settle(cluster: &Cluster, limit: Duration) -> Vec<String> {
    let until = Instant::now() + limit;
    while !keys(cluster).is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    keys(cluster)
}

fn assert_send<T: Send>(t: T) -> T {
    t
}

/// Every async terminal's future is `Send` (so `tokio::spawn` on a multi-thread runtime compiles), including
/// `run_async` with an async closure and an owned request.
#[test]
fn every_async_future_is_send() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    two_workers().block_on(async move {
        let owner = locks.owner().expect("owner");
        let l = locks.clone();
        let o = owner.clone();
        let out = tokio::spawn(async move {
            let lock = assert_send(l.request("s").owned(&o).acquire_async())
                .await
                .expect("owned");
            assert_send(l.unlock_async(lock)).await.expect("unlock");
            let mut lock = assert_send(l.request("s").fenced().once().acquire_async())
                .await
                .expect("fenced");
            assert_send(l.extend_async(&mut lock, Duration::from_secs(5)))
                .await
                .expect("extend");
            l.unlock_async(lock).await.expect("unlock");
            let guard = assert_send(l.request_all(["s1", "s2"]).hold_async())
                .await
                .expect("guard");
            let lost = assert_send(guard.until_lost());
            drop(lost);
            assert_send(guard.release_async()).await.expect("release");
            assert_send(
                l.request("s")
                    .wait(Duration::from_secs(1))
                    .run_async(async |g| g.is_lost()),
            )
            .await
            .expect("ran")
        })
        .await
        .expect("task");
        assert!(!out);
    });
}

/// A task's guard dropped (released later, on the watchdog's thread), then its manager dropped at once — the
/// ordinary end of a program or of a request handler that owns both. The release must not be lost: the key
/// must go now, not at the end of its 30 s lease.
#[test]
fn a_task_guard_dropped_right_before_its_manager_is_still_released() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    current_thread().block_on(async move {
        let guard = locks
            .request("lost-release")
            .ttl(Duration::from_secs(30))
            .hold_async()
            .await
            .expect("guard");
        drop(guard);
        drop(locks);
    });
    let left = settle(&cluster, Duration::from_secs(2));
    assert!(
        left.is_empty(),
        "the dropped guard's release was lost with the manager; keys held to their lease: {left:?}"
    );
}

/// A task's guard that outlives its manager's last handle (the guard keeps the manager's state alive): when it
/// is finally dropped, its release must not be lost.
#[test]
fn a_task_guard_outliving_its_manager_is_released_when_dropped() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let guard = current_thread().block_on(async {
        locks
            .request("orphan")
            .ttl(Duration::from_secs(30))
            .hold_async()
            .await
            .expect("guard")
    });
    drop(locks);
    // Still held and renewed while the guard lives.
    std::thread::sleep(Duration::from_millis(100));
    assert!(!guard.is_lost());
    drop(guard);
    let left = settle(&cluster, Duration::from_secs(2));
    assert!(
        left.is_empty(),
        "the last guard's drop-release was lost (the watchdog stopped first); keys left: {left:?}"
    );
}

/// `run_async` whose work panics: the panic goes to the caller (the task's JoinError), and the guard's key is
/// released (not left to its lease): another request gets it soon.
#[test]
fn run_async_whose_work_panics_releases_the_lock() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    two_workers().block_on(async move {
        let l = locks.clone();
        let joined = tokio::spawn(async move {
            l.request("boom")
                .ttl(Duration::from_secs(30))
                .run_async(async |_g| -> u32 { panic!("work failed") })
                .await
        })
        .await;
        assert!(joined.is_err_and(|e| e.is_panic()));
        let got = locks
            .request("boom")
            .wait(Duration::from_secs(3))
            .acquire_async()
            .await
            .expect("released after the panic, not held to its 30 s lease");
        locks.unlock_async(got).await.expect("unlock");
    });
}

/// `until_lost` on a guard that is then released (or whose guard is dropped in a task): the future resolves,
/// promptly, as `Released` — a task awaiting it is not left hanging until the deadline.
#[test]
fn until_lost_resolves_when_the_guard_is_released_or_dropped() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    current_thread().block_on(async move {
        for drop_it in [false, true] {
            let guard = locks
                .request("watched")
                .ttl(Duration::from_secs(30))
                .hold_async()
                .await
                .expect("guard");
            let watch = guard.watch();
            let futures: Vec<_> = (0..8).map(|_| watch.until_lost()).collect();
            let started = Instant::now();
            match drop_it {
                true => drop(guard),
                false => {
                    guard.release_async().await.expect("released");
                }
            }
            for f in futures {
                let why = tokio::time::timeout(Duration::from_secs(3), f)
                    .await
                    .expect("until_lost resolved after the release, not at the 30 s deadline");
                assert!(matches!(why, muxlock::Lost::Released), "{why}");
            }
            assert!(started.elapsed() < Duration::from_secs(3));
        }
    });
}

/// A sync verb called inside a task (current-thread runtime) while other tasks' rounds are in flight: nothing
/// deadlocks, the other tasks finish, and afterwards the task's futures still do not block (BLOCKING did not
/// leak): a long `.wait()` in one task does not stall the other tasks of the same thread.
#[test]
fn a_sync_call_inside_a_task_neither_deadlocks_nor_leaks_blocking() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let runner = std::thread::spawn(move || {
        current_thread().block_on(async move {
            let mut tasks = Vec::new();
            for i in 0..20 {
                let l = locks.clone();
                tasks.push(tokio::spawn(async move {
                    for _ in 0..10 {
                        let lock = l
                            .request(format!("k{i}"))
                            .acquire_async()
                            .await
                            .expect("task lock");
                        l.unlock_async(lock).await.expect("unlock");
                    }
                }));
            }
            let l = locks.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..20 {
                    // A sync call from inside a task.
                    let lock = l.request("sync").acquire().expect("sync lock");
                    l.unlock(lock).expect("sync unlock");
                    tokio::task::yield_now().await;
                }
            }));
            for t in tasks {
                t.await.expect("task");
            }
            // Afterwards, on the same thread: a holder and a waiter task. The waiter must not block the thread
            // (the holder task's release must get to run).
            let held = locks.request("after").acquire_async().await.expect("held");
            let l = locks.clone();
            let waiter = tokio::spawn(async move {
                l.request("after")
                    .wait(Duration::from_secs(5))
                    .acquire_async()
                    .await
            });
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let t = Instant::now();
            locks.unlock_async(held).await.expect("unlock");
            let got = waiter.await.expect("task").expect("waiter got it");
            assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
            locks.unlock_async(got).await.expect("unlock");
        });
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let until = Instant::now() + Duration::from_secs(30);
    while !done.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        done.load(std::sync::atomic::Ordering::SeqCst),
        "hung: a sync call inside a current-thread runtime"
    );
    runner.join().expect("runner");
}

/// A thread blocking in `.wait(..).acquire()` and tasks `.wait()`ing on the same resource of one manager, in turns: every
/// one gets the lock, one at a time (mutual exclusion checked by a counter), and nobody hangs.
#[test]
fn threads_and_tasks_waiting_on_one_resource_all_get_it_in_turn() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let holder = locks.request("mixed").acquire().expect("first");
    let mut threads = Vec::new();
    for _ in 0..3 {
        let l = locks.clone();
        let inside = inside.clone();
        threads.push(std::thread::spawn(move || {
            for _ in 0..3 {
                let lock = l
                    .request("mixed")
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .expect("thread got it");
                assert_eq!(
                    inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                    0,
                    "two holders"
                );
                std::thread::sleep(Duration::from_millis(5));
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                l.unlock(lock).expect("unlock");
            }
        }));
    }
    let l = locks.clone();
    let inside2 = inside.clone();
    let tasks = std::thread::spawn(move || {
        two_workers().block_on(async move {
            let mut ts = Vec::new();
            for _ in 0..3 {
                let l = l.clone();
                let inside = inside2.clone();
                ts.push(tokio::spawn(async move {
                    for _ in 0..3 {
                        let lock = l
                            .request("mixed")
                            .ttl(Duration::from_secs(5))
                            .wait(Duration::from_secs(20))
                            .acquire_async()
                            .await
                            .expect("task got it");
                        assert_eq!(
                            inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                            0,
                            "two holders"
                        );
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        l.unlock_async(lock).await.expect("unlock");
                    }
                }));
            }
            for t in ts {
                t.await.expect("task");
            }
        })
    });
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    locks.unlock(holder).expect("unlock");
    for t in threads {
        t.join().expect("thread");
    }
    tasks.join().expect("tasks");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

/// A future polled first on one executor, then moved to another (its waker changes), while it waits in a line
/// behind a holder: woken on the release through the new waker, not at the lease end.
#[test]
fn a_waiting_future_moved_to_another_executor_is_woken_there() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let holder = locks
        .request("moved")
        .ttl(Duration::from_secs(10))
        .acquire()
        .expect("holder");
    let mut fut = Box::pin(
        locks
            .request("moved")
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(20))
            .acquire_async(),
    );
    // Polled for a while on a first executor (it attempts, probes and parks), then abandoned by it.
    current_thread().block_on(async {
        let _ = tokio::time::timeout(
            Duration::from_millis(300),
            std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
                Poll::Ready(r) => panic!("not while held: {r:?}"),
                Poll::Pending => Poll::<()>::Pending,
            }),
        )
        .await;
    });
    let l2 = locks.clone();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        l2.unlock(holder).expect("unlock");
    });
    let t = Instant::now();
    let got = smol::block_on(fut).expect("got it on the second executor");
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "woken late: {:?}",
        t.elapsed()
    );
    releaser.join().expect("releaser");
    locks.unlock(got).expect("unlock");
}

/// A task guard's drop releases on the watchdog's thread, shortly after the drop (documented on
/// `Request::hold_async`): the same resource asked at once with `.once()` in the same process is refused by the
/// dropped guard, and a `.wait` gets it as soon as the late release is done (bounded here by a second). Awaiting
/// `release_async` first, as the documentation says, leaves nothing to refuse: `once_right_after_release_async_is_granted`.
/// (The blocking API's drop releases before it returns.)
#[test]
fn a_task_guards_drop_releases_shortly_after_on_the_watchdog_thread() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    current_thread().block_on(async move {
        let (mut refused, mut latest) = (0, Duration::ZERO);
        for _ in 0..20 {
            let guard = locks
                .request("again")
                .ttl(Duration::from_secs(30))
                .hold_async()
                .await
                .expect("guard");
            drop(guard);
            let dropped = Instant::now();
            match locks.request("again").once().acquire_async().await {
                Ok(lock) => locks.unlock_async(lock).await.map(|_| ()).expect("unlock"),
                Err(Error::Held(_)) => {
                    refused += 1;
                    let got = locks
                        .request("again")
                        .wait(Duration::from_secs(5))
                        .acquire_async()
                        .await
                        .expect("after the late release");
                    latest = latest.max(dropped.elapsed());
                    locks.unlock_async(got).await.expect("unlock");
                }
                Err(e) => panic!("{e}"),
            }
        }
        println!("{refused} of 20 refused by the dropped guard, the latest release {latest:?} after its drop");
        assert!(
            refused > 0,
            "no immediate re-acquisition refused: the drop released before it returned (update the docs)"
        );
        assert!(
            latest < Duration::from_secs(1),
            "a dropped guard's release came {latest:?} after the drop"
        );
    });
}

/// An owned nested acquisition cancelled at many points: the undo removes only its own hold; the outer hold
/// stays (the key and the outer hold's field remain, and extend/unlock of the outer still work).
#[test]
fn a_cancelled_nested_owned_acquisition_keeps_the_outer_hold() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    two_workers().block_on(async move {
        let owner = locks.owner().expect("owner");
        let mut outer = locks
            .request("nest")
            .owned(&owner)
            .ttl(Duration::from_secs(10))
            .acquire_async()
            .await
            .expect("outer");
        for i in 0..200u64 {
            let cut = Duration::from_micros(20 + (i * 7919) % 2000);
            if let Ok(Ok(inner)) = tokio::time::timeout(
                cut,
                locks.request("nest").owned(&owner).once().acquire_async(),
            )
            .await
            {
                locks.unlock_async(inner).await.expect("inner unlock");
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        locks
            .extend_async(&mut outer, Duration::from_secs(10))
            .await
            .expect("the outer hold survived the cancelled nested ones");
        locks.unlock_async(outer).await.expect("outer unlock");
    });
    let left = settle(&cluster, Duration::from_secs(2));
    assert!(left.is_empty(), "{left:?}");
}

/// Polls `fut` once with a waker that does nothing.
fn poll_once<F: Future>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    fut.poll(&mut cx)
}

/// A task's `.wait()` future that heads this process' line and is then not polled (kept in a `select!` loop whose
/// other branch runs, or an executor busy elsewhere, but not dropped) holds up this process' other waiters of the
/// resource, threads included (documented on `Request::wait`): the resource comes free, and a thread's `.wait`
/// on it in the same manager gives up `Held` after its whole wait, the key free on every node. The bound: once
/// the future is dropped, the thread's next wait gets the resource at once.
#[test]
fn an_unpolled_waiting_future_heading_its_line_holds_up_the_process_other_waiters_until_dropped() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let holder = locks
        .request("stall")
        .ttl(Duration::from_secs(10))
        .acquire()
        .expect("holder");
    let mut stalled = Box::pin(
        locks
            .request("stall")
            .wait(Duration::from_secs(60))
            .acquire_async(),
    );
    // Polled until it has attempted, been refused and parked (it heads the line).
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        assert!(poll_once(stalled.as_mut()).is_pending());
        std::thread::sleep(Duration::from_millis(10));
    }
    locks.unlock(holder).expect("unlock");
    assert!(
        settle(&cluster, Duration::from_secs(1)).is_empty(),
        "free on every node"
    );
    let max_wait = Duration::from_secs(1);
    let t = Instant::now();
    let behind = locks
        .request("stall")
        .ttl(Duration::from_secs(5))
        .wait(max_wait)
        .acquire();
    let took = t.elapsed();
    assert!(
        matches!(behind, Err(Error::Held(_))) && took >= max_wait,
        "a waiter behind an unpolled future heading the line, after {took:?}: {behind:?}"
    );
    assert!(keys(&cluster).is_empty(), "the resource stayed free");
    drop(stalled);
    let t = Instant::now();
    let got = locks
        .request("stall")
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(2))
        .acquire()
        .expect("the resource, once the future was dropped");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "granted {:?} after the future was dropped",
        t.elapsed()
    );
    locks.unlock(got).expect("unlock");
}

/// A release future (`unlock_async` of a set) polled once, then dropped (its task was cancelled, or a `select!`
/// timeout fired) when the nodes have lost their script cache (restart, `SCRIPT FLUSH`): its request went out
/// with the first poll and nobody reads the replies. Sent by hash, every node would answer `NOSCRIPT` to nobody
/// and keep the keys to their lease; releases go in full (`redlock/scripts.rs`, "Releases go in full"), so the
/// keys go. The control: the nodes have lost the set's release script when it goes (`SCRIPT EXISTS`).
#[test]
fn a_release_cancelled_after_its_first_poll_runs_on_nodes_that_lost_their_scripts() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let lock = current_thread()
        .block_on(
            locks
                .request_all(["r1", "r2"])
                .ttl(Duration::from_secs(30))
                .acquire_async(),
        )
        .expect("set");
    for n in cluster.nodes() {
        n.raw(&cmd(&["SCRIPT", "FLUSH"]));
        assert_eq!(
            n.raw(&cmd(&[
                "SCRIPT",
                "EXISTS",
                muxlock::redlock::lua::RELEASE_MANY.sha1
            ])),
            b"*1\r\n:0\r\n"
        );
    }
    {
        let mut release = Box::pin(locks.unlock_async(lock));
        let _ = poll_once(release.as_mut());
        // Let the request reach the nodes and their replies come back to nobody.
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = settle(&cluster, Duration::from_secs(2));
    // The control: the same release awaited to its end after a flush leaves nothing.
    let control = current_thread().block_on(async {
        let lock = locks
            .request_all(["c1", "c2"])
            .ttl(Duration::from_secs(30))
            .acquire_async()
            .await
            .expect("set");
        for n in cluster.nodes() {
            n.raw(&cmd(&["SCRIPT", "FLUSH"]));
        }
        locks.unlock_async(lock).await
    });
    assert!(control.is_ok(), "{control:?}");
    assert!(
        keys(&cluster).iter().all(|k| !k.starts_with('c')),
        "control: {:?}",
        keys(&cluster)
    );
    assert!(
        left.is_empty(),
        "a release cancelled after its first send left: {left:?}"
    );
}

/// A waker that counts nothing but its own clones (its `Arc`'s strong count).
struct Counted;
impl std::task::Wake for Counted {
    fn wake(self: std::sync::Arc<Self>) {}
}

/// Waiting futures polled until they park, then dropped (cancelled `select!` branches, timeouts): nothing of
/// theirs stays behind — in particular not their wakers (a tokio `Waker` keeps its task's memory, the size of the
/// whole future, alive). The crate's timer keeps every `Sleep`'s waker until the instant it was set for, even after
/// the `Sleep` is dropped: here up to the `max_wait` of an hour.
#[test]
fn cancelled_waits_leave_no_waker_behind() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let holder = locks
        .request("w")
        .ttl(Duration::from_secs(30))
        .acquire()
        .expect("holder");
    let counted = std::sync::Arc::new(Counted);
    let waker = std::task::Waker::from(counted.clone());
    for _ in 0..50 {
        let mut fut = Box::pin(
            locks
                .request("w")
                .wait(Duration::from_secs(3600))
                .acquire_async(),
        );
        let mut cx = std::task::Context::from_waker(&waker);
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            assert!(fut.as_mut().poll(&mut cx).is_pending());
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(fut);
    }
    std::thread::sleep(Duration::from_millis(200));
    let kept = std::sync::Arc::strong_count(&counted) - 2; // ours and `waker`
    locks.unlock(holder).expect("unlock");
    assert_eq!(kept, 0, "wakers of 50 dropped waiting futures still held");
}

/// As [`a_release_cancelled_after_its_first_poll_runs_on_nodes_that_lost_their_scripts`], for each kind and for
/// `Guard::release_async`: releases cancelled after their first poll, on nodes that lost their scripts (checked:
/// `SCRIPT EXISTS` of the kind's release script is 0 on every node), leave no key.
#[test]
fn releases_of_every_kind_cancelled_after_their_first_poll_run_on_nodes_that_lost_their_scripts() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let owner = locks.owner().expect("owner");
    use muxlock::redlock::{lua, scripts::RELEASE_SHA1};
    let flush = |sha: &str| {
        for n in cluster.nodes() {
            n.raw(&cmd(&["SCRIPT", "FLUSH"]));
            assert_eq!(n.raw(&cmd(&["SCRIPT", "EXISTS", sha])), b"*1\r\n:0\r\n");
        }
    };
    let mut left_by = Vec::new();
    for kind in ["plain", "fenced", "owned", "guard-plain", "guard-set"] {
        let rt = current_thread();
        let ttl = Duration::from_secs(30);
        match kind {
            "plain" | "fenced" | "owned" => {
                let req = locks.request(kind).ttl(ttl);
                let req = match kind {
                    "fenced" => req.fenced(),
                    "owned" => req.owned(&owner),
                    _ => req,
                };
                let lock = rt.block_on(req.acquire_async()).expect("lock");
                flush(match kind {
                    "fenced" => lua::RELEASE_FENCED.sha1,
                    "owned" => lua::RELEASE_REENTRANT.sha1,
                    _ => RELEASE_SHA1,
                });
                let mut release = Box::pin(locks.unlock_async(lock));
                let _ = poll_once(release.as_mut());
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => {
                let guard = match kind {
                    "guard-plain" => rt.block_on(locks.request(kind).ttl(ttl).hold_async()),
                    _ => rt.block_on(locks.request_all(["gs1", "gs2"]).ttl(ttl).hold_async()),
                }
                .expect("guard");
                flush(match kind {
                    "guard-plain" => RELEASE_SHA1,
                    _ => lua::RELEASE_MANY.sha1,
                });
                let mut release = Box::pin(guard.release_async());
                let _ = poll_once(release.as_mut());
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let left = settle(&cluster, Duration::from_secs(1));
        if !left.is_empty() {
            left_by.push((kind, left));
            for n in cluster.nodes() {
                n.raw(&cmd(&["FLUSHALL"]));
            }
        }
    }
    assert!(
        left_by.is_empty(),
        "keys left by cancelled releases: {left_by:?}"
    );
}

/// One node hung (SIGSTOP) while tasks wait on a resource whose holder then releases (the watchdog thread waits
/// for pushes on the tracker, the tasks probe on it): each task gets the lock in turn, promptly, without a hang.
#[test]
fn tasks_wait_past_a_hung_node() {
    let mut cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    // Warm the tracker: one wait that is refused, then given up.
    let holder = locks
        .request("hung")
        .ttl(Duration::from_secs(10))
        .acquire()
        .expect("holder");
    let _ = locks
        .request("hung")
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_millis(100))
        .acquire();
    cluster.pause(2);
    let l = locks.clone();
    let runner = std::thread::spawn(move || {
        two_workers().block_on(async move {
            let mut ts = Vec::new();
            for _ in 0..4 {
                let l = l.clone();
                ts.push(tokio::spawn(async move {
                    let t = Instant::now();
                    let lock = l
                        .request("hung")
                        .ttl(Duration::from_secs(2))
                        .wait(Duration::from_secs(15))
                        .acquire_async()
                        .await
                        .expect("got it");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = l.unlock_async(lock).await;
                    t.elapsed()
                }));
            }
            let mut waited = Vec::new();
            for t in ts {
                waited.push(t.await.expect("task"));
            }
            waited
        })
    });
    std::thread::sleep(Duration::from_millis(500));
    let released = Instant::now();
    let _ = locks.unlock(holder);
    let waited = runner.join().expect("runner");
    let all = released.elapsed();
    cluster.resume(2);
    assert!(
        all < Duration::from_secs(5),
        "4 tasks took {all:?} after the release: {waited:?}"
    );
}

/// A burst of task guards dropped at once (a batch of requests cancelled, a server shutting its handlers down):
/// their releases run one blocking round after another on the watchdog's thread, the thread that also renews
/// every other guard. With 5 ms to each node (10 ms a round trip), 300 drops cost about 3 s of releases, during
/// which a surviving guard with a 2 s lease gets no renewal: it is lost though every node is up and answering.
#[test]
fn a_burst_of_dropped_task_guards_starves_the_renewals_of_the_others() {
    use support::proxy::{Fault, FaultProxy};
    let cluster = Cluster::start(3);
    let proxies: Vec<FaultProxy> = cluster.addrs().into_iter().map(FaultProxy::start).collect();
    let locks = locks::manager(proxies.iter().map(FaultProxy::url), config());
    for p in &proxies {
        p.set(Fault::Latency(Duration::from_millis(5)));
    }
    let rt = two_workers();
    let (survivor, guards) = rt.block_on(async {
        let survivor = locks
            .request("survivor")
            .ttl(Duration::from_secs(2))
            .hold_async()
            .await
            .expect("survivor");
        let mut ts = Vec::new();
        for i in 0..300 {
            let l = locks.clone();
            ts.push(tokio::spawn(async move {
                l.request(format!("burst{i}"))
                    .ttl(Duration::from_secs(30))
                    .hold_async()
                    .await
                    .expect("guard")
            }));
        }
        let mut guards = Vec::new();
        for t in ts {
            guards.push(t.await.expect("task"));
        }
        (survivor, guards)
    });
    // Renewed a few times first: all is well.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !survivor.is_lost(),
        "lost before the burst: {:?}",
        survivor.lost()
    );
    drop(guards);
    let watch = survivor.watch();
    let t = Instant::now();
    let mut lost = None;
    while t.elapsed() < Duration::from_secs(4) && lost.is_none() {
        lost = watch.lost();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        lost.is_none(),
        "the survivor was lost {:?} after 300 task guards were dropped ({:?}); every node was up",
        t.elapsed(),
        lost
    );
}

/// Threads and tasks of one manager line up for one resource in the order they came (task, thread, task,
/// thread): first come, first served across both kinds of waiter.
#[test]
fn threads_and_tasks_are_served_in_arrival_order() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let holder = locks
        .request("fifo")
        .ttl(Duration::from_secs(10))
        .acquire()
        .expect("holder");
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let rt = std::sync::Arc::new(two_workers());
    let mut joins: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for i in 0..4 {
        let l = locks.clone();
        let order = order.clone();
        if i % 2 == 0 {
            let h = rt.spawn(async move {
                let lock = l
                    .request("fifo")
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(20))
                    .acquire_async()
                    .await
                    .expect("task");
                order.lock().unwrap().push(i);
                tokio::time::sleep(Duration::from_millis(20)).await;
                l.unlock_async(lock).await.expect("unlock");
            });
            let rt = rt.clone();
            joins.push(Box::new(move || rt.block_on(h).expect("task")));
        } else {
            let h = std::thread::spawn(move || {
                let lock = l
                    .request("fifo")
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .expect("thread");
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(20));
                l.unlock(lock).expect("unlock");
            });
            joins.push(Box::new(move || h.join().expect("thread")));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    locks.unlock(holder).expect("unlock");
    for j in joins {
        j();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
}

/// A task guard dropped right after it was acquired, on a fresh manager (its watchdog thread just started and is
/// still making its tracker connections): the release must come within a moment, not at the guard's first
/// renewal (a third of its 30 s lease). Repeated on fresh managers to catch the window.
#[test]
fn a_task_guard_dropped_as_the_watchdog_starts_is_released_promptly() {
    let cluster = Cluster::start(3);
    let rt = current_thread();
    let mut slow = Vec::new();
    for i in 0..12u64 {
        let locks = locks::manager(cluster.urls(), config());
        let resource = format!("early{i}");
        rt.block_on(async {
            let guard = locks
                .request(&resource)
                .ttl(Duration::from_secs(30))
                .hold_async()
                .await
                .expect("guard");
            // Dropped a little later each time: somewhere in the watchdog's first turn.
            std::thread::sleep(Duration::from_micros(250 * i));
            drop(guard);
        });
        let t = Instant::now();
        let left = settle(&cluster, Duration::from_secs(12));
        if t.elapsed() > Duration::from_secs(1) {
            slow.push((i, t.elapsed(), left));
        }
        drop(locks);
    }
    assert!(slow.is_empty(), "dropped guards released late: {slow:?}");
}

/// `run_async` whose work panics at once, on fresh managers: how long until the key goes (the guard's drop-release
/// on the watchdog's thread). Seen: 10 s (the first renewal, a third of the lease) in 2 runs of 6.
#[test]
fn a_panicking_run_async_is_released_promptly() {
    let mut slow = Vec::new();
    for i in 0..6 {
        let cluster = Cluster::start(3);
        let locks = locks::manager(cluster.urls(), config());
        two_workers().block_on(async {
            let l = locks.clone();
            let joined = tokio::spawn(async move {
                l.request("boom")
                    .ttl(Duration::from_secs(30))
                    .run_async(async |_g| -> u32 { panic!("work failed") })
                    .await
            })
            .await;
            assert!(joined.is_err());
        });
        let t = Instant::now();
        let left = settle(&cluster, Duration::from_secs(12));
        if t.elapsed() > Duration::from_secs(1) {
            slow.push((i, t.elapsed(), left));
        }
    }
    assert!(slow.is_empty(), "released late: {slow:?}");
}

/// `until_lost` across renewals that move the deadline (several futures on one guard, polled by tasks): none
/// resolves while the guard is renewed; then a majority of nodes hangs and every future resolves by the
/// deadline (no renewal can confirm), not later.
#[test]
fn until_lost_follows_renewals_then_reports_a_hung_majority_by_the_deadline() {
    let mut cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let rt = two_workers();
    let guard = rt
        .block_on(
            locks
                .request("moving")
                .ttl(Duration::from_millis(1500))
                .hold_async(),
        )
        .expect("guard");
    let handles: Vec<_> = (0..4).map(|_| rt.spawn(guard.until_lost())).collect();
    std::thread::sleep(Duration::from_secs(3));
    assert!(guard.renewals() >= 3, "renewed: {}", guard.renewals());
    assert!(
        handles.iter().all(|h| !h.is_finished()),
        "resolved while renewed"
    );
    let before = guard.deadline();
    cluster.pause(1);
    cluster.pause(2);
    let t = Instant::now();
    for h in handles {
        let why = rt.block_on(h).expect("task");
        assert!(!matches!(why, muxlock::Lost::Released), "{why}");
    }
    // A renewal already answered by the nodes as they were paused may still move the deadline once (it was
    // confirmed); the futures must resolve by the last confirmed deadline, not later.
    let deadline = guard.deadline();
    assert!(
        deadline <= before + Duration::from_millis(1500),
        "the deadline moved by {:?} with a majority hung",
        deadline - before
    );
    let late = Instant::now().saturating_duration_since(deadline);
    cluster.resume(1);
    cluster.resume(2);
    assert!(
        late < Duration::from_millis(300),
        "told {late:?} after the deadline (waited {:?})",
        t.elapsed()
    );
    drop(guard);
}

/// The documented remedy of `a_task_guards_drop_releases_shortly_after_on_the_watchdog_thread`: a task guard
/// released with `release_async` before the same resource is asked again is never in the way (20 of 20 granted
/// at once).
#[test]
fn once_right_after_release_async_is_granted() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    current_thread().block_on(async move {
        for i in 0..20 {
            let guard = locks
                .request("again")
                .ttl(Duration::from_secs(30))
                .hold_async()
                .await
                .expect("guard");
            guard.release_async().await.expect("released");
            let lock = locks
                .request("again")
                .once()
                .acquire_async()
                .await
                .unwrap_or_else(|e| panic!("round {i}: {e}"));
            locks.unlock_async(lock).await.expect("unlock");
        }
    });
}

/// The documented remedy of
/// `an_unpolled_waiting_future_heading_its_line_holds_up_the_process_other_waiters_until_dropped`: once the unpolled waiting future is dropped, its place in the line goes with it, and a
/// blocking waiter gets the free resource at once.
#[test]
fn dropping_an_unpolled_waiting_future_frees_its_line() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let holder = locks
        .request("stall")
        .ttl(Duration::from_secs(10))
        .acquire()
        .expect("holder");
    let mut stalled = Box::pin(
        locks
            .request("stall")
            .wait(Duration::from_secs(60))
            .acquire_async(),
    );
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        assert!(poll_once(stalled.as_mut()).is_pending());
        std::thread::sleep(Duration::from_millis(10));
    }
    locks.unlock(holder).expect("unlock");
    drop(stalled);
    let started = Instant::now();
    let got = locks
        .request("stall")
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(2))
        .acquire()
        .expect("the free resource, once the stalled waiter is gone");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    locks.unlock(got).expect("unlock");
}
