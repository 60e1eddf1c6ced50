//! Lock throughput: acquire+release cycles per second on 5 local `redis-server`s with 1, 4, 16 and 64 concurrent
//! callers, for muxlock and two peers, on the same nodes in the same run. Ratios between clients of one run are the
//! result; absolute rates on this shared 2-core machine are not. The engine is `benches/throughput/mod.rs`, which
//! `scripts/bench-report` runs with every client.
//!
//! The clients, each built once and kept for the whole run:
//!
//! - `muxlock/shared`: one [`LockManager`] in an `Arc`, shared by all callers, one OS thread per caller.
//! - `muxlock/per-thread`: one [`LockManager`] per caller thread (64 are built; a case uses the first N).
//! - `rslock`: one `rslock::LockManager` (0.10) shared by N tasks on a multi-thread tokio runtime with the default
//!   worker count (one per core).
//! - `redis-rs/quorum`: [`RedisQuorum`] (`benches/peers/quorum.rs`), Redlock by hand on one redis-rs multiplexed
//!   connection per node, shared by N tasks on its own multi-thread tokio runtime.
//!
//! All make one attempt per call: muxlock with `.with_restart_guard(false).with_retry_count(0)` (these servers
//! have just started, and the restart guard would not count them for a whole TTL), rslock with
//! `set_retry(1, 1 ms)`. The TTL is 30 s.
//!
//! Each caller locks its own resources, `tp:<client>:<threads>.<rep>:<k>:<i>` for caller `k`, `i` counting up, so
//! no caller ever contends with another, and no name comes back within a run: a lock a failed call left behind
//! cannot turn into later failures.
//!
//! A case is one client with N callers: 0.3 s of warm-up, then 3 s measured. A cycle counts when its release
//! returns inside the measured window; its latency (acquire + release) goes into the caller's HDR histogram, and
//! the histograms are merged. A call that fails (an acquire that fails or times out, a release that does not reach
//! a majority) is counted over the whole case, warm-up included, with the first message of each kind. CPU time is
//! read from `/proc` at the window's start and end: this process (every thread, the tokio workers included) and the
//! 5 servers, hence the CPU per cycle.
//!
//! The cases take turns: each repetition runs every (thread count, client) pair once, the first client rotating, so
//! that noise from other processes hits the clients alike. The table gives the median cycles/s over repetitions
//! with the min–max, and the ratios the goals name (`benchmarks/results/2026-11-22-throughput-shared-manager.md`),
//! with their range over the repetitions.
//!
//! Bounded time: each tokio call runs under a 2 s `tokio::time::timeout` (a failed call); each case has a hard
//! deadline 6 s after its window, after which a caller that has not reported is counted as blocked (an OS thread
//! is left behind, a task is aborted).
//!
//! `cargo bench --bench throughput` runs it all: `MUXLOCK_TP_SECS` (default 3), `MUXLOCK_TP_REPS` (default 3),
//! `MUXLOCK_TP_THREADS` (default `1,4,16,64`) and `MUXLOCK_TP_CLIENTS` (names as in the table; default the four
//! above, and `redlock` and `redis-rs/single` may be named too) change it. `cargo test --benches` (no `--bench`
//! flag) runs 0.2 s per case, one repetition, 1 and 4 callers, with a 2 s round timeout for muxlock, and fails if a
//! muxlock call failed or a caller blocked.
//!
//! Method and results: `benchmarks/results/2026-11-22-throughput-shared-manager.md`.

#![allow(missing_docs)] // the bench's own items need no docs

#[path = "../tests/support/mod.rs"]
mod support;

mod peers;

#[path = "throughput/mod.rs"]
mod throughput;

use std::env;
use std::time::Instant;

use support::Cluster;
use throughput::report::{Row, loadavg, print_goals, print_table};
use throughput::{Clients, Settings, TTL, run_all};

fn main() {
    let args: Vec<String> = env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    if flag("--list") {
        return;
    }
    // Criterion's rule, as in benches/lock.rs: without `--bench` (`cargo test --benches`) or with `--test`, test.
    let quick = !flag("--bench") || flag("--test");
    let s = Settings::from_env(quick);
    let cluster = Cluster::start(5);
    let pids: Vec<u32> = cluster.nodes().iter().map(|n| n.pid()).collect();
    let mut clients = Clients::build(&cluster.urls(), &s);
    clients.warm_up();
    let workers = clients.quorum_rt.metrics().num_workers();
    println!(
        "throughput: 5 nodes, TTL {} s, threads {:?}, {} repetitions of {:.1} s (+{:.2} s warm-up) per case; \
         muxlock round timeout {:?}; tokio runtimes of {workers} workers",
        TTL.as_secs(),
        s.threads,
        s.reps,
        s.secs.as_secs_f64(),
        s.warmup.as_secs_f64(),
        clients.shared.config().round_timeout(),
    );
    println!("load before: {}", loadavg());
    let started = Instant::now();
    let rows = run_all(&clients, &s, &pids);
    println!(
        "load after: {} ({:.1} s)\n",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    print_table(&rows, &s);
    print_goals(&rows, &s);
    if quick {
        let bad: Vec<&Row> = rows
            .iter()
            .filter(|r| r.client.is_muxlock() && r.went_wrong())
            .collect();
        assert!(
            bad.is_empty(),
            "muxlock calls failed or blocked in test mode: see above"
        );
    }
    // Clients first, servers last.
    clients.shut_down();
    drop(cluster);
}
