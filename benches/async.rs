//! muxlock's async API beside its sync API and the async peers, on the same 5 local `redis-server`s in one run.
//! Ratios between cases of one run are the result; absolute figures on this shared 2-vCPU machine are not.
//!
//! 1. **Lone caller**: acquire + release latency of one caller, sync (an OS thread: `acquire`, `unlock`) against
//!    async (`acquire_async`, `unlock_async`) on a tokio current-thread runtime (`block_on`), as a task on a
//!    2-worker tokio multi-thread runtime, and on smol's `block_on`; and the redis-rs quorum client (tokio
//!    current-thread) as the async peer. The cases take turns in batches of 100 calls; every call is recorded in
//!    an HDR histogram, and each round's p50 is divided by the sync case's p50 of the same round: the table gives
//!    the p50s over all calls and the median of those per-round ratios (goal: async within 10 % of sync).
//! 2. **Many tasks**: acquire+release cycles per second with 64, 1,000 and 10,000 concurrent callers on one
//!    manager, with the throughput engine of `benches/throughput.rs` (`benches/throughput/`): `muxlock/async`
//!    (tasks on a 2-worker tokio runtime), `muxlock/shared` (OS threads, 64 only), `redis-rs/quorum` (Redlock by
//!    hand on one multiplexed connection per node, deciding at the majority), `redis-rs/quorum-all` (the same,
//!    waiting for every node: the simplest correct async client) and `rslock` (its tokio API), each tokio client
//!    on a 2-worker runtime. Goals: `muxlock/async` ≥ 1.5× `redis-rs/quorum-all` at 64 and 1,000 tasks; 10,000 tasks
//!    complete with 0 errors at a rate at least `muxlock/shared`'s at 64 threads.
//!
//! Every muxlock manager uses the library's defaults except `.with_restart_guard(false)` (these servers have just
//! started) and `.with_retry_count(0)` (one attempt per call, as the peers are run).
//!
//! `cargo bench --bench async` runs both parts: `MUXLOCK_ASYNC_CALLS` (calls per lone-caller case, default 5,000),
//! `MUXLOCK_ASYNC_TASKS` (default `64,1000,10000`), `MUXLOCK_ASYNC_CLIENTS` (only these clients of part 2, names
//! as in the table), `MUXLOCK_TP_SECS` (default 3) and `MUXLOCK_TP_REPS` (default 3)
//! change it. `cargo test --benches` runs a few calls and 0.2 s per case with 64 tasks.
//!
//! Results and the command: `benchmarks/results/2026-11-27-async.md`.

#![allow(missing_docs)] // the bench's own items need no docs

#[path = "../tests/support/mod.rs"]
mod support;

mod peers;

#[path = "throughput/mod.rs"]
mod throughput;

use std::env;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use muxlock::{Config, LockManager};
use peers::quorum::RedisQuorum;
use support::Cluster;
use throughput::report::{Row, loadavg, print_ratio, print_table};
use throughput::{Client, Clients, Settings, TTL, run_case};

/// One lone-caller case.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lone {
    Sync,
    CurrentThread,
    MultiThread,
    Smol,
    Quorum,
}

const LONE: [Lone; 5] = [
    Lone::Sync,
    Lone::CurrentThread,
    Lone::MultiThread,
    Lone::Smol,
    Lone::Quorum,
];

impl Lone {
    fn name(self) -> &'static str {
        match self {
            Lone::Sync => "muxlock sync (thread)",
            Lone::CurrentThread => "muxlock async, tokio current-thread",
            Lone::MultiThread => "muxlock async, task on tokio multi-thread (2 workers)",
            Lone::Smol => "muxlock async, smol::block_on",
            Lone::Quorum => "redis-rs/quorum, tokio current-thread",
        }
    }
}

/// Calls per batch: the cases take turns every `BATCH` calls.
const BATCH: usize = 100;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

fn record(h: &mut Histogram<u64>, t0: Instant) {
    let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    h.saturating_record(ns.max(1));
}

/// One batch of `BATCH` sync cycles on fresh names.
fn sync_batch(m: &LockManager, tag: &str, h: &mut Histogram<u64>) {
    for i in 0..BATCH {
        let name = format!("lone:{tag}:{i}");
        let t0 = Instant::now();
        let lock = m
            .request(&name)
            .ttl(TTL)
            .once()
            .acquire()
            .expect("sync acquire");
        m.unlock(lock).expect("sync release");
        record(h, t0);
    }
}

/// One batch of `BATCH` async cycles on fresh names, in whatever executor polls it.
async fn async_batch(m: &LockManager, tag: &str, h: &mut Histogram<u64>) {
    for i in 0..BATCH {
        let name = format!("lone:{tag}:{i}");
        let t0 = Instant::now();
        let request = m.request(&name).ttl(TTL).once();
        let lock = request.acquire_async().await.expect("async acquire");
        m.unlock_async(lock).await.expect("async release");
        record(h, t0);
    }
}

async fn quorum_batch(q: &mut RedisQuorum, tag: &str, h: &mut Histogram<u64>) {
    for i in 0..BATCH {
        let name = format!("lone:{tag}:{i}");
        let t0 = Instant::now();
        let value = q.acquire(name.as_bytes()).await.expect("redis-rs acquire");
        q.release(name.as_bytes(), &value)
            .await
            .expect("redis-rs release");
        record(h, t0);
    }
}

fn p50_us(h: &Histogram<u64>) -> f64 {
    h.value_at_quantile(0.5) as f64 / 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn lone_caller(urls: &[String], calls: usize) {
    let config = Config::default()
        .with_restart_guard(false)
        .with_retry_count(0);
    let manager = Arc::new(
        LockManager::builder()
            .nodes(urls.iter().cloned())
            .config(config)
            .build()
            .expect("a valid configuration"),
    );
    let ct = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a multi-thread runtime");
    let mut quorum = ct
        .block_on(RedisQuorum::connect(urls, TTL))
        .expect("redis-rs connections");
    let mut all: Vec<Histogram<u64>> = LONE.iter().map(|_| histogram()).collect();
    let mut ratios: Vec<Vec<f64>> = LONE.iter().map(|_| Vec::new()).collect();
    let rounds = calls.div_ceil(BATCH).max(1);
    let started = Instant::now();
    // One warm-up batch per case, not recorded.
    for round in 0..=rounds {
        let mut p50s = [0.0; LONE.len()];
        for j in 0..LONE.len() {
            // The first case rotates with the round.
            let k = (j + round) % LONE.len();
            let case = LONE[k];
            let tag = format!("{k}.{round}");
            let mut h = histogram();
            match case {
                Lone::Sync => sync_batch(&manager, &tag, &mut h),
                Lone::CurrentThread => ct.block_on(async_batch(&manager, &tag, &mut h)),
                Lone::MultiThread => {
                    let m = Arc::clone(&manager);
                    h = mt
                        .block_on(mt.spawn(async move {
                            let mut h = histogram();
                            async_batch(&m, &tag, &mut h).await;
                            h
                        }))
                        .expect("the task");
                }
                Lone::Smol => smol::block_on(async_batch(&manager, &tag, &mut h)),
                Lone::Quorum => ct.block_on(quorum_batch(&mut quorum, &tag, &mut h)),
            }
            if round > 0 {
                p50s[k] = p50_us(&h);
                all[k].add(&h).expect("histograms of the same bounds");
            }
        }
        if round > 0 {
            for k in 0..LONE.len() {
                ratios[k].push(p50s[k] / p50s[0]);
            }
        }
    }
    println!(
        "\n### Lone caller: acquire + release, 5 nodes\n\n{} calls per case in batches of {BATCH}, the cases in \
         turns, {:.0} s; load average now {}.\n",
        rounds * BATCH,
        started.elapsed().as_secs_f64(),
        loadavg()
    );
    println!("| case | p50 | p90 | p99 | ÷ sync (median of per-round p50 ratios) |");
    println!("|---|---:|---:|---:|---:|");
    for (k, case) in LONE.iter().enumerate() {
        let h = &all[k];
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let ratio = median(ratios[k].clone());
        println!(
            "| {} | {:.1} µs | {:.1} µs | {:.1} µs | {ratio:.3} |",
            case.name(),
            us(0.5),
            us(0.9),
            us(0.99)
        );
    }
    drop(quorum);
    mt.shutdown_timeout(Duration::from_secs(1));
    ct.shutdown_timeout(Duration::from_secs(1));
}

/// What a wake across threads costs here: a thread and a task take turns (the thread unparked by the task, the
/// task's waker woken by the thread), as the fanout's driver thread wakes a task whose reply it read; beside two
/// threads taking turns the same way. Returns the p50 of one hand-off (half a turn-and-back), in µs: (thread and
/// tokio current-thread task, thread and thread).
fn handoff_floor(n: usize) -> (f64, f64) {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::task::{Poll, Waker};
    use std::thread::{self, Thread};

    struct Turns {
        turn: AtomicU64,
        waker: Mutex<Option<Waker>>,
        parked: Mutex<Option<Thread>>,
    }
    let wait_thread = |t: &Turns, want: u64| {
        while t.turn.load(Ordering::Acquire) < want {
            thread::park_timeout(Duration::from_millis(10));
        }
    };
    let p50 = |mut v: Vec<u64>| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0) as f64 / 2_000.0
    };

    // A thread and a task.
    let turns = Arc::new(Turns {
        turn: AtomicU64::new(0),
        waker: Mutex::new(None),
        parked: Mutex::new(None),
    });
    let other = Arc::clone(&turns);
    let peer = thread::spawn(move || {
        *other.parked.lock().expect("lock") = Some(thread::current());
        for i in 0..n as u64 {
            wait_thread(&other, 2 * i + 1);
            other.turn.store(2 * i + 2, Ordering::Release);
            if let Some(w) = other.waker.lock().expect("lock").take() {
                w.wake();
            }
        }
    });
    while turns.parked.lock().expect("lock").is_none() {
        thread::yield_now();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let task_side = rt.block_on(async {
        let mut rtts = Vec::with_capacity(n);
        for i in 0..n as u64 {
            let t0 = Instant::now();
            turns.turn.store(2 * i + 1, Ordering::Release);
            if let Some(t) = turns.parked.lock().expect("lock").as_ref() {
                t.unpark();
            }
            std::future::poll_fn(|cx| {
                *turns.waker.lock().expect("lock") = Some(cx.waker().clone());
                match turns.turn.load(Ordering::Acquire) >= 2 * i + 2 {
                    true => Poll::Ready(()),
                    false => Poll::Pending,
                }
            })
            .await;
            rtts.push(t0.elapsed().as_nanos() as u64);
        }
        rtts
    });
    peer.join().expect("the peer thread");

    // Two threads.
    let turns = Arc::new(Turns {
        turn: AtomicU64::new(0),
        waker: Mutex::new(None),
        parked: Mutex::new(None),
    });
    let me = thread::current();
    let other = Arc::clone(&turns);
    let peer = thread::spawn(move || {
        *other.parked.lock().expect("lock") = Some(thread::current());
        for i in 0..n as u64 {
            wait_thread(&other, 2 * i + 1);
            other.turn.store(2 * i + 2, Ordering::Release);
            me.unpark();
        }
    });
    while turns.parked.lock().expect("lock").is_none() {
        thread::yield_now();
    }
    let mut thread_side = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t0 = Instant::now();
        turns.turn.store(2 * i + 1, Ordering::Release);
        if let Some(t) = turns.parked.lock().expect("lock").as_ref() {
            t.unpark();
        }
        wait_thread(&turns, 2 * i + 2);
        thread_side.push(t0.elapsed().as_nanos() as u64);
    }
    peer.join().expect("the peer thread");
    (p50(task_side), p50(thread_side))
}

/// The cases of part 2: (callers, clients).
fn cases(tasks: &[usize]) -> Vec<(usize, Vec<Client>)> {
    tasks
        .iter()
        .map(|&n| {
            let mut clients = vec![Client::Async, Client::Quorum, Client::QuorumAll];
            if n <= 1000 {
                clients.push(Client::Rslock);
            }
            if n <= 64 {
                clients.push(Client::Shared);
            }
            // `MUXLOCK_ASYNC_CLIENTS=muxlock/async,...`: only these (names as in the table).
            if let Ok(only) = env::var("MUXLOCK_ASYNC_CLIENTS") {
                clients.retain(|c| only.split(',').any(|name| name.trim() == c.name()));
            }
            (n, clients)
        })
        .collect()
}

fn many_tasks(cluster: &Cluster, s: &Settings, tasks: &[usize]) -> Vec<Row> {
    let pids: Vec<u32> = cluster.nodes().iter().map(|n| n.pid()).collect();
    let mut clients = Clients::build(&cluster.urls(), s);
    clients.warm_up();
    let cases = cases(tasks);
    let mut rows: Vec<Row> = cases
        .iter()
        .flat_map(|(n, cs)| cs.iter().map(move |&c| Row::new(*n, c)))
        .collect();
    for rep in 0..s.reps {
        for (ci, (n, cs)) in cases.iter().enumerate() {
            for j in 0..cs.len() {
                let client = cs[(j + rep + ci) % cs.len()];
                let run = run_case(&clients, client, *n, rep, s, &pids);
                let row = rows
                    .iter_mut()
                    .find(|r| r.threads == *n && r.client == client)
                    .expect("a row per case");
                let failed: u64 = run.tally.failures.iter().sum();
                let blocked = run.blocked;
                let rate = row.add(run.tally, run.blocked, run.cpu, s.secs.as_secs_f64());
                eprintln!(
                    "rep {rep}, {n} × {}: {rate:.0} cycles/s, {failed} failed, {blocked} blocked",
                    client.name()
                );
            }
        }
    }
    clients.shut_down();
    rows
}

fn print_goals(rows: &[Row]) {
    let row = |n: usize, c: Client| rows.iter().find(|r| r.threads == n && r.client == c);
    println!("\n| what | value (ratio of medians) | range over repetitions | goal | verdict |");
    println!("|---|---:|---:|---|---|");
    let ratio = |label: String, ours: &Row, theirs: &Row, goal: f64| {
        print_ratio(&label, ours, theirs, goal)
    };
    for n in [64, 1000] {
        for (peer, goal) in [
            (Client::QuorumAll, 1.5),
            (Client::Quorum, 1.5),
            (Client::Rslock, 1.0),
        ] {
            if let (Some(a), Some(b)) = (row(n, Client::Async), row(n, peer)) {
                ratio(
                    format!("{n} tasks: muxlock/async ÷ {}", peer.name()),
                    a,
                    b,
                    goal,
                );
            }
        }
    }
    if let (Some(a), Some(b)) = (row(10_000, Client::Async), row(64, Client::Shared)) {
        ratio(
            "10,000 tasks muxlock/async ÷ 64 threads muxlock/shared".into(),
            a,
            b,
            1.0,
        );
        let verdict = if a.went_wrong() { "missed" } else { "met" };
        println!(
            "| 10,000 tasks: failed calls, blocked callers | {}, {} | | 0 | {verdict} |",
            a.failures(),
            a.blocked
        );
    }
}

fn main() {
    let args: Vec<String> = env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    if flag("--list") {
        return;
    }
    let quick = !flag("--bench") || flag("--test");
    let var = |name: &str| env::var(name).ok().filter(|v| !v.is_empty());
    let calls: usize = match quick {
        true => 2 * BATCH,
        false => var("MUXLOCK_ASYNC_CALLS")
            .map_or(5000, |v| v.parse().expect("MUXLOCK_ASYNC_CALLS: a count")),
    };
    let tasks: Vec<usize> = match quick {
        true => vec![64],
        false => var("MUXLOCK_ASYNC_TASKS").map_or_else(
            || vec![64, 1000, 10_000],
            |v| {
                v.split(',')
                    .map(|n| n.trim().parse().expect("MUXLOCK_ASYNC_TASKS: counts"))
                    .collect()
            },
        ),
    };
    let s = Settings::from_env(quick);
    let cluster = Cluster::start(5);
    println!(
        "## Async (`cargo bench --bench async`)\n\n- Run: source `{}`; load average at the start {}.",
        option_env!("MUXLOCK_SOURCE").unwrap_or("this tree"),
        loadavg()
    );
    lone_caller(&cluster.urls(), calls);
    let (task, thread) = handoff_floor(calls.max(1000));
    println!(
        "\nOne wake across threads (half of a turn-and-back, p50): a thread waking a tokio current-thread task \
         {task:.1} µs; a thread waking a thread {thread:.1} µs. A lone async round pays one such wake more than a \
         blocking one (the driver thread reads the reply, then wakes the task), so an acquire + release pays two.\n"
    );
    let rows = many_tasks(&cluster, &s, &tasks);
    println!(
        "\n### Many tasks on one manager, 5 nodes\n\n{} repetition(s) of {:.1} s per case (+{:.1} s warm-up), \
         cases in alternation; tokio clients on 2-worker runtimes.\n",
        s.reps,
        s.secs.as_secs_f64(),
        s.warmup.as_secs_f64()
    );
    print_table(&rows, &s);
    print_goals(&rows);
    if rows.iter().any(|r| r.client.is_muxlock() && r.went_wrong()) {
        panic!("a muxlock call failed or a caller blocked (see the table)");
    }
}
