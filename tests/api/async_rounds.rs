//! The fanout's rounds awaited as futures (`Round::poll_next`, what the async API is built on), against
//! real redis-server processes: on tokio (current-thread and multi-thread) and smol, many at once, beside threads
//! that block on the same fanout, with a hung node, and dropped at random points. Every future's polls are timed:
//! none may block its executor's thread.

use crate::support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use muxlock::net::{CommandId, Fanout, NodeAddr, NodeError, Options};
use muxlock::resp::{Value, encode_command};
use support::Cluster;
use support::checker::{queued_of, run_queue_wait, threads_named};

fn request(args: &[&[u8]]) -> BytesMut {
    let mut buf = BytesMut::new();
    encode_command(args, &mut buf);
    buf
}

fn fanout(cluster: &Cluster) -> Arc<Fanout> {
    fanout_with(cluster, Options::default())
}

fn fanout_with(cluster: &Cluster, opts: Options) -> Arc<Fanout> {
    let addrs: Vec<NodeAddr> = cluster
        .urls()
        .iter()
        .map(|u| u.parse().expect("url"))
        .collect();
    Arc::new(Fanout::new(addrs, opts).expect("fanout"))
}

/// What the polls of the futures wrapped by [`Polls::time`] took: the longest in wall time less this thread's
/// wait for a CPU meanwhile (the kernel's run-queue wait: on a loaded 2-vCPU machine a runnable thread may wait
/// milliseconds; what is left is running, or blocking, which a poll must never do), the longest in this
/// thread's CPU time, and how many took over 1 ms of wall time.
#[derive(Clone, Default)]
struct Polls(Arc<PollTimes>);

#[derive(Default)]
struct PollTimes {
    /// Wall time less the run-queue wait of the polling thread or a background driver, the longest.
    wall: AtomicU64,
    cpu: AtomicU64,
    count: AtomicUsize,
    over_1ms: AtomicUsize,
    /// The background drivers' thread ids, and the polls since they were last looked up.
    drivers: std::sync::Mutex<(Vec<u64>, u64)>,
}

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Polls {
    fn time<F: Future>(&self, fut: F) -> Timed<F> {
        Timed {
            fut: Box::pin(fut),
            times: Arc::clone(&self.0),
        }
    }

    fn longest(&self) -> Duration {
        Duration::from_nanos(self.0.wall.load(Ordering::Relaxed))
    }

    fn summary(&self) -> String {
        format!(
            "longest poll {:?} (not counting its own or a background driver's wait for a CPU; CPU {:?}), {} of \
             {} polls over 1 ms",
            self.longest(),
            Duration::from_nanos(self.0.cpu.load(Ordering::Relaxed)),
            self.0.over_1ms.load(Ordering::Relaxed),
            self.0.count.load(Ordering::Relaxed),
        )
    }
}

struct Timed<F> {
    fut: Pin<Box<F>>,
    times: Arc<PollTimes>,
}

impl<F: Future> Future for Timed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // A poll that waits on the fanout's lock waits for its holder, the fanouts' background drivers (threads
        // named `muxlock-fanout`, looked up now and then) when tasks wait: the longest wait for a CPU of the
        // polling thread or of one of them is excused, never more.
        let drivers = {
            let mut d = self.times.drivers.lock().expect("drivers");
            if d.1 % 16 == 0 {
                d.0 = threads_named("muxlock-fanout");
            }
            d.1 += 1;
            d.0.clone()
        };
        let (q, dq) = (run_queue_wait(), queued_of(&drivers));
        let (t, c) = (Instant::now(), thread_cpu());
        let out = self.fut.as_mut().poll(cx);
        let (wall, cpu) = (t.elapsed(), thread_cpu().saturating_sub(c));
        let driver_queued = queued_of(&drivers)
            .into_iter()
            .zip(dq)
            .map(|(after, before)| after.saturating_sub(before))
            .max()
            .unwrap_or_default();
        let queued = run_queue_wait().saturating_sub(q).max(driver_queued);
        self.times
            .wall
            .fetch_max(nanos(wall.saturating_sub(queued)), Ordering::Relaxed);
        self.times.cpu.fetch_max(nanos(cpu), Ordering::Relaxed);
        self.times.count.fetch_add(1, Ordering::Relaxed);
        if wall > Duration::from_millis(1) {
            self.times.over_1ms.fetch_add(1, Ordering::Relaxed);
        }
        out
    }
}

/// One round of `ECHO payload` to every node, awaited: each node's outcome by index.
async fn echo_all(
    fanout: &Fanout,
    payload: &[u8],
    timeout: Duration,
) -> Vec<Result<Value, NodeError>> {
    let mut out: Vec<Option<Result<Value, NodeError>>> = vec![None; fanout.len()];
    let mut round = fanout.round(Instant::now() + timeout);
    round.send_all(&request(&[b"ECHO", payload]), 1);
    while let Some((CommandId { node, .. }, reply)) = round.next_async().await {
        assert!(out[node].is_none(), "two outcomes for node {node}");
        out[node] = Some(reply);
    }
    out.into_iter()
        .map(|o| o.expect("every node has an outcome"))
        .collect()
}

/// The same round, blocking this thread.
fn echo_all_sync(
    fanout: &Fanout,
    payload: &[u8],
    timeout: Duration,
) -> Vec<Result<Value, NodeError>> {
    let mut out: Vec<Option<Result<Value, NodeError>>> = vec![None; fanout.len()];
    let mut round = fanout.round(Instant::now() + timeout);
    round.send_all(&request(&[b"ECHO", payload]), 1);
    while let Some((CommandId { node, .. }, reply)) = round.next() {
        out[node] = Some(reply);
    }
    out.into_iter()
        .map(|o| o.expect("every node has an outcome"))
        .collect()
}

#[track_caller]
fn assert_echoed(outcomes: &[Result<Value, NodeError>], payload: &[u8]) {
    for (node, o) in outcomes.iter().enumerate() {
        assert_eq!(
            o,
            &Ok(Value::BulkString(payload.to_vec().into())),
            "node {node}, payload {}",
            String::from_utf8_lossy(payload)
        );
    }
}

/// `tasks` concurrent tasks, each `rounds` echo rounds with payloads of their own, spawned with `spawn`; returns
/// the rounds done per second.
async fn many_tasks<S, H>(
    fanout: &Arc<Fanout>,
    polls: &Polls,
    tasks: usize,
    rounds: usize,
    spawn: S,
) -> f64
where
    S: Fn(Timed<Pin<Box<dyn Future<Output = ()> + Send>>>) -> H,
    H: Future<Output = ()>,
{
    let done = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let fanout = Arc::clone(fanout);
        let done = Arc::clone(&done);
        let task: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
            for r in 0..rounds {
                let payload = format!("task {t} round {r}");
                let out = echo_all(&fanout, payload.as_bytes(), Duration::from_secs(10)).await;
                assert_echoed(&out, payload.as_bytes());
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
        handles.push(spawn(polls.time(task)));
    }
    for h in handles {
        h.await;
    }
    assert_eq!(done.load(Ordering::Relaxed), tasks * rounds);
    (tasks * rounds) as f64 / start.elapsed().as_secs_f64()
}

#[test]
fn rounds_are_futures_on_tokio_current_thread() {
    let cluster = Cluster::start(3);
    let fanout = fanout(&cluster);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let polls = Polls::default();
    // A lone task, one round at a time, beside a lone thread (which drives itself): median round times.
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let lone_async = rt.block_on(polls.time(async {
        let mut took = Vec::new();
        for i in 0..500 {
            let payload = format!("lone {i}");
            let t = Instant::now();
            let out = echo_all(&fanout, payload.as_bytes(), Duration::from_secs(5)).await;
            took.push(t.elapsed());
            assert_echoed(&out, payload.as_bytes());
        }
        took
    }));
    let lone_sync: Vec<Duration> = (0..500)
        .map(|i| {
            let payload = format!("lone sync {i}");
            let t = Instant::now();
            let out = echo_all_sync(&fanout, payload.as_bytes(), Duration::from_secs(5));
            let took = t.elapsed();
            assert_echoed(&out, payload.as_bytes());
            took
        })
        .collect();
    eprintln!(
        "lone caller, 3 nodes: median round {:?} as a task, {:?} as a thread",
        median(lone_async),
        median(lone_sync)
    );
    // 1,000 at once on one thread.
    let per_s = rt.block_on(many_tasks(&fanout, &polls, 1000, 3, |t| {
        let h = tokio::task::spawn(t);
        async move { h.await.expect("task") }
    }));
    eprintln!(
        "tokio current-thread: 1,000 tasks x 3 rounds, {per_s:.0} rounds/s; {}",
        polls.summary()
    );
}

#[test]
fn rounds_are_futures_on_tokio_multi_thread() {
    let cluster = Cluster::start(5);
    // 2,000 requests in flight per node: beyond the default 1,024, a node's vote would be refused (backpressure).
    let fanout = fanout_with(&cluster, Options::default().with_max_in_flight(4096));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let polls = Polls::default();
    let per_s = rt.block_on(many_tasks(&fanout, &polls, 2000, 5, |t| {
        let h = tokio::task::spawn(t);
        async move { h.await.expect("task") }
    }));
    eprintln!(
        "tokio 2 workers: 2,000 tasks x 5 rounds on 5 nodes, {per_s:.0} rounds/s; {}",
        polls.summary()
    );
    // Nothing left on the wire: every reply was read and filed.
    for node in 0..fanout.len() {
        assert_eq!(fanout.in_flight(node), 0, "node {node}");
    }
    // 10,000 at once (the async API's figure), one round each, with room for them all on every node.
    let fanout = fanout_with(&cluster, Options::default().with_max_in_flight(16384));
    let polls = Polls::default();
    let per_s = rt.block_on(many_tasks(&fanout, &polls, 10_000, 1, |t| {
        let h = tokio::task::spawn(t);
        async move { h.await.expect("task") }
    }));
    eprintln!(
        "tokio 2 workers: 10,000 tasks x 1 round on 5 nodes, {per_s:.0} rounds/s; {}",
        polls.summary()
    );
}

#[test]
fn rounds_are_futures_on_smol() {
    let cluster = Cluster::start(3);
    let fanout = fanout(&cluster);
    let polls = Polls::default();
    let ex = smol::Executor::new();
    let per_s = smol::block_on(ex.run(many_tasks(&fanout, &polls, 1000, 3, |t| ex.spawn(t))));
    eprintln!(
        "smol: 1,000 tasks x 3 rounds, {per_s:.0} rounds/s; {}",
        polls.summary()
    );
}

#[test]
fn threads_and_tasks_share_one_fanout() {
    let cluster = Cluster::start(3);
    let fanout = fanout(&cluster);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let polls = Polls::default();
    std::thread::scope(|s| {
        for t in 0..4 {
            let fanout = &fanout;
            s.spawn(move || {
                for r in 0..300 {
                    let payload = format!("thread {t} round {r}");
                    assert_echoed(
                        &echo_all_sync(fanout, payload.as_bytes(), Duration::from_secs(10)),
                        payload.as_bytes(),
                    );
                }
            });
        }
        rt.block_on(many_tasks(&fanout, &polls, 500, 4, |t| {
            let h = tokio::task::spawn(t);
            async move { h.await.expect("task") }
        }));
    });
    // With no task left, a lone thread drives again by itself (the background driver gave the poll back).
    let start = Instant::now();
    for i in 0..200 {
        let payload = format!("after {i}");
        assert_echoed(
            &echo_all_sync(&fanout, payload.as_bytes(), Duration::from_secs(5)),
            payload.as_bytes(),
        );
    }
    eprintln!(
        "threads and tasks: {}; then 200 lone sync rounds in {:?}",
        polls.summary(),
        start.elapsed()
    );
    // And tasks again after the threads.
    rt.block_on(async {
        assert_echoed(
            &echo_all(&fanout, b"again", Duration::from_secs(5)).await,
            b"again",
        );
    });
}

/// A paused node (SIGSTOP) answers nothing: each task's round reports it timed out at its deadline, after a
/// turn read the sockets, while the executor's one thread keeps running other tasks (a ticker that must not
/// miss its beat) and no poll of a round blocks.
#[test]
fn a_hung_node_times_out_at_the_deadline_without_blocking_the_executor() {
    let mut cluster = Cluster::start(3);
    let fanout = fanout(&cluster);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    // Connections up first.
    rt.block_on(async {
        assert_echoed(
            &echo_all(&fanout, b"up", Duration::from_secs(5)).await,
            b"up",
        );
    });
    cluster.pause(1);
    let polls = Polls::default();
    let deadline = Duration::from_millis(300);
    let (rounds, longest_gap) = rt.block_on(async {
        let ticking = Arc::new(AtomicUsize::new(1));
        let ticker = {
            let ticking = Arc::clone(&ticking);
            tokio::task::spawn(async move {
                // Each beat's gap less the executor thread's wait for a CPU meanwhile (the kernel's run-queue
                // wait, as for the polls): on a loaded 2-vCPU machine the runnable thread may wait 100 ms and
                // more for the CPUs (seen in CI: a 143 ms gap while no poll took over 0.2 ms); what is left is
                // the thread running, sleeping past its timer, or blocked, which nothing may do.
                let mut last = (Instant::now(), run_queue_wait());
                let mut longest = Duration::ZERO;
                while ticking.load(Ordering::Relaxed) == 1 {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let queued = run_queue_wait().saturating_sub(last.1);
                    longest = longest.max(last.0.elapsed().saturating_sub(queued));
                    last = (Instant::now(), run_queue_wait());
                }
                longest
            })
        };
        let mut handles = Vec::new();
        for t in 0..50 {
            let fanout = Arc::clone(&fanout);
            handles.push(tokio::task::spawn(polls.time(async move {
                let start = Instant::now();
                let payload = format!("hung {t}");
                let out = echo_all(&fanout, payload.as_bytes(), deadline).await;
                (start.elapsed(), out, payload)
            })));
        }
        let mut rounds = Vec::new();
        for h in handles {
            rounds.push(h.await.expect("task"));
        }
        ticking.store(0, Ordering::Relaxed);
        (rounds, ticker.await.expect("ticker"))
    });
    for (took, out, payload) in &rounds {
        assert_eq!(out[1], Err(NodeError::Timeout), "{payload}");
        assert_eq!(
            out[0],
            Ok(Value::BulkString(payload.clone().into_bytes().into()))
        );
        assert_eq!(
            out[2],
            Ok(Value::BulkString(payload.clone().into_bytes().into()))
        );
        assert!(*took >= deadline, "timed out early: {took:?}");
        assert!(
            *took < deadline + Duration::from_millis(500),
            "timed out late: {took:?}"
        );
    }
    let slowest = rounds.iter().map(|r| r.0).max().unwrap_or_default();
    eprintln!(
        "hung node: 50 rounds timed out in at most {slowest:?} (deadline {deadline:?}); {}; \
         longest gap of a 2 ms ticker on the same thread {longest_gap:?} (less its wait for a CPU)",
        polls.summary()
    );
    assert!(
        polls.longest() < Duration::from_millis(5),
        "a poll blocked the executor: {:?}",
        polls.longest()
    );
    assert!(
        longest_gap < Duration::from_millis(100),
        "the executor's thread was blocked: {longest_gap:?}"
    );
    cluster.resume(1);
    // The node's late replies are read and dropped; new rounds get their own.
    rt.block_on(async {
        assert_echoed(
            &echo_all(&fanout, b"back", Duration::from_secs(5)).await,
            b"back",
        );
    });
}

/// While a thread drives (its own round waits 2 s for a paused node), tasks' rounds with a shorter deadline are
/// served by its turns: its poll ends by their deadline, they time out then, not when the thread's round does.
#[test]
fn a_thread_that_drives_keeps_the_tasks_deadlines() {
    let mut cluster = Cluster::start(3);
    let fanout = fanout(&cluster);
    assert_echoed(
        &echo_all_sync(&fanout, b"up", Duration::from_secs(5)),
        b"up",
    );
    cluster.pause(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let deadline = Duration::from_millis(200);
    std::thread::scope(|s| {
        let driving = s.spawn(|| echo_all_sync(&fanout, b"long", Duration::from_secs(2)));
        // Let the thread take the driver first.
        std::thread::sleep(Duration::from_millis(50));
        let took: Vec<Duration> = rt.block_on(async {
            let mut handles = Vec::new();
            for t in 0..20 {
                let fanout = Arc::clone(&fanout);
                handles.push(tokio::task::spawn(async move {
                    let start = Instant::now();
                    let out = echo_all(&fanout, format!("short {t}").as_bytes(), deadline).await;
                    assert_eq!(out[2], Err(NodeError::Timeout));
                    start.elapsed()
                }));
            }
            let mut took = Vec::new();
            for h in handles {
                took.push(h.await.expect("task"));
            }
            took
        });
        for t in &took {
            assert!(
                *t >= deadline && *t < deadline + Duration::from_millis(500),
                "{t:?}"
            );
        }
        let out = driving.join().expect("thread");
        assert_eq!(out[2], Err(NodeError::Timeout));
        eprintln!(
            "tasks beside a driving thread: timed out after at most {:?} (deadline {deadline:?})",
            took.iter().max()
        );
    });
    cluster.resume(2);
}

/// The background driver ends with its fanout: dropping a fanout that served tasks returns at once, whether the
/// driver was lingering in its poll or parked.
#[test]
fn a_fanout_that_served_tasks_drops_promptly() {
    let cluster = Cluster::start(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for wait in [Duration::ZERO, Duration::from_millis(20)] {
        let fanout = fanout(&cluster);
        rt.block_on(async {
            assert_echoed(
                &echo_all(&fanout, b"drop", Duration::from_secs(5)).await,
                b"drop",
            );
        });
        std::thread::sleep(wait);
        let t = Instant::now();
        drop(fanout);
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
    }
}

/// A small deterministic stream of pseudo-random numbers (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Polls `fut` `polls` times with a waker that does nothing, then drops it wherever it stands.
fn poll_then_drop<F: Future>(fut: F, polls: u64) -> bool {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..polls {
        if fut.as_mut().poll(&mut cx).is_ready() {
            return true;
        }
    }
    false
}

#[test]
fn dropping_round_futures_at_random_points_never_wedges_the_fanout() {
    let cluster = Cluster::start(3);
    // Room for the abandoned rounds' requests still on the wire beside 1,000 live tasks (backpressure would
    // refuse votes, which is not what this test is about).
    let fanout = fanout_with(&cluster, Options::default().with_max_in_flight(8192));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // On this thread: rounds polled a random number of times (0: dropped right after sending), some after
    // taking an outcome or two, then dropped.
    for i in 0..2000u64 {
        let polls = rng.below(6);
        let keep = rng.below(3) as usize;
        let payload = format!("dropped {i}");
        let fanout = &fanout;
        poll_then_drop(
            async move {
                let mut round = fanout.round(Instant::now() + Duration::from_secs(5));
                round.send_all(&request(&[b"ECHO", payload.as_bytes()]), 1);
                for _ in 0..keep {
                    round.next_async().await;
                }
                std::future::pending::<()>().await;
            },
            polls,
        );
    }
    // On tokio: tasks aborted at random points while others run.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    let polls = Polls::default();
    rt.block_on(async {
        let mut handles = Vec::new();
        for t in 0..1000u64 {
            let fanout = Arc::clone(&fanout);
            let h = tokio::task::spawn(polls.time(async move {
                for r in 0..3 {
                    let payload = format!("aborted {t} {r}");
                    assert_echoed(
                        &echo_all(&fanout, payload.as_bytes(), Duration::from_secs(5)).await,
                        payload.as_bytes(),
                    );
                }
            }));
            handles.push((h, rng.below(4) == 0, rng.below(3000)));
        }
        for (h, abort, after_us) in &handles {
            if *abort {
                tokio::time::sleep(Duration::from_micros(*after_us / 100)).await;
                h.abort();
            }
        }
        for (h, _, _) in handles {
            match h.await {
                Ok(()) => {}
                Err(e) => assert!(e.is_cancelled(), "a task failed: {e}"),
            }
        }
    });
    // Later rounds, async and sync, still complete with their own replies, and nothing stays on the wire.
    rt.block_on(async {
        for i in 0..100 {
            let payload = format!("later {i}");
            assert_echoed(
                &echo_all(&fanout, payload.as_bytes(), Duration::from_secs(5)).await,
                payload.as_bytes(),
            );
        }
    });
    for i in 0..100 {
        let payload = format!("later sync {i}");
        assert_echoed(
            &echo_all_sync(&fanout, payload.as_bytes(), Duration::from_secs(5)),
            payload.as_bytes(),
        );
    }
    for node in 0..fanout.len() {
        assert_eq!(fanout.in_flight(node), 0, "node {node}");
    }
    eprintln!("dropped futures: {}", polls.summary());
}

/// The engine's verbs through the real seam polled as futures: an acquisition, a refused one, a release, and a
/// retrying one that pauses on the async clock (never blocking the executor).
#[cfg(feature = "sim")]
#[test]
fn the_engine_verbs_run_as_futures_on_the_real_seam() {
    use muxlock::Config;
    use muxlock::redlock::sim::{Engine, SystemClock, options};

    let cluster = Cluster::start(3);
    // Fresh servers: the restart guard would not count their votes yet (its window is the longest lease).
    let config = Config::default().with_restart_guard(false);
    let addrs: Vec<NodeAddr> = cluster
        .urls()
        .iter()
        .map(|u| u.parse().expect("url"))
        .collect();
    let fanout = Fanout::new(addrs, options(&config, 3)).expect("fanout");
    // The real seam and clock: polled by an executor (not under the blocking API's `block`), their rounds and
    // pauses are futures that never block.
    let engine = Engine::new(fanout, SystemClock, config, [7; 32]).expect("engine");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let polls = Polls::default();
    rt.block_on(polls.time(async {
        let ttl = Duration::from_secs(10);
        let lock = engine
            .try_lock(b"async-res", ttl)
            .await
            .expect("no error")
            .expect("free");
        assert!(
            engine
                .try_lock(b"async-res", ttl)
                .await
                .expect("no error")
                .is_none(),
            "held"
        );
        // Retries with pauses on the timer thread, then gives up: the lock is held.
        let start = Instant::now();
        assert!(engine.lock(b"async-res", ttl).await.is_err());
        let retrying = start.elapsed();
        assert!(engine.unlock(lock).await.expect("released") >= 2);
        let again = engine.lock(b"async-res", ttl).await.expect("free again");
        assert!(engine.unlock(again).await.expect("released") >= 2);
        eprintln!("engine over the async seam: the retrying lock gave up after {retrying:?}");
    }));
    eprintln!("engine over the async seam: {}", polls.summary());
    assert!(
        polls.longest() < Duration::from_millis(5),
        "{:?}",
        polls.longest()
    );
}
