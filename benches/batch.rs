//! Batches: locks acquired and released per second from one thread with `try_lock_batch` + `unlock_batch`, on
//! 5 local nodes, batches of `MUXLOCK_BATCH` (default 100) resources.
//!
//! It runs `MUXLOCK_BATCH_SECS` seconds (default 5) of back-to-back batches (acquire 100, release the 100) and
//! prints locks/s (one lock = one acquisition and its release), the round trips per second, and the CPU each side
//! used meanwhile: this process (user + system) and each redis-server (from `/proc/<pid>/stat`), as a share of one
//! core. On a machine where the servers' CPU adds up to the cores there are, the nodes are the limit.
//!
//! `cargo bench --bench batch` runs it; `cargo test --benches` runs a short smoke run. Results: `BENCHMARKS.md`,
//! "Batches".

#![allow(missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::env;
use std::time::{Duration, Instant};

use muxlock::redlock::{Config, LockManager};
use support::Cluster;

/// User + system CPU seconds of process `pid` ("self" for this one), from `/proc/<pid>/stat` (ticks of 10 ms).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let fields: Vec<f64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    (fields.get(11).copied().unwrap_or(0.0) + fields.get(12).copied().unwrap_or(0.0)) / 100.0
}

fn main() {
    let quick = !env::args().any(|a| a == "--bench");
    let var = |name: &str, default: u64| {
        env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let batch = var("MUXLOCK_BATCH", 100) as usize;
    let secs = if quick {
        0.2
    } else {
        var("MUXLOCK_BATCH_SECS", 5) as f64
    };
    let cluster = Cluster::start(5);
    let locks = LockManager::builder()
        .nodes(cluster.urls())
        .config(
            Config::default()
                .with_restart_guard(false)
                .with_retry_count(0)
                .with_round_timeout(Duration::from_secs(1)),
        )
        .build()
        .expect("a valid configuration");
    let names: Vec<String> = (0..batch).map(|i| format!("bench:batch:{i}")).collect();
    let ttl = Duration::from_secs(10);
    // Warm up: connections made, scripts loaded.
    for _ in 0..20 {
        let got: Vec<_> = locks
            .try_lock_batch(&names, ttl)
            .into_iter()
            .filter_map(|r| r.ok().flatten())
            .collect();
        let _ = locks.unlock_batch(got);
    }
    let pids: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|s| s.pid().to_string())
        .collect();
    let server0: Vec<f64> = pids.iter().map(|p| cpu_seconds(p)).collect();
    let (self0, t0) = (cpu_seconds("self"), Instant::now());
    let (mut locked, mut batches, mut missed) = (0usize, 0usize, 0usize);
    while t0.elapsed().as_secs_f64() < secs {
        let got: Vec<_> = locks
            .try_lock_batch(&names, ttl)
            .into_iter()
            .filter_map(|r| r.ok().flatten())
            .collect();
        missed += batch - got.len();
        locked += got.len();
        for r in locks.unlock_batch(got) {
            if r.is_err() {
                missed += 1;
            }
        }
        batches += 1;
    }
    let wall = t0.elapsed().as_secs_f64();
    let client = (cpu_seconds("self") - self0) / wall;
    let servers: Vec<f64> = pids
        .iter()
        .zip(&server0)
        .map(|(p, c0)| (cpu_seconds(p) - c0) / wall)
        .collect();
    println!(
        "batch {batch}, 5 nodes, one thread: {:.0} locks/s acquired+released ({batches} batches in {wall:.2} s, \
         {:.0} batches/s, {missed} not acquired or not released)",
        locked as f64 / wall,
        batches as f64 / wall
    );
    println!(
        "cpu (share of one core): client {client:.2}, servers {} (sum {:.2}), cores {}",
        servers
            .iter()
            .map(|c| format!("{c:.2}"))
            .collect::<Vec<_>>()
            .join(" "),
        servers.iter().sum::<f64>(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("{}", locks.stats());
}
