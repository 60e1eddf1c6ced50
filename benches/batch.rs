//! Batches: locks acquired and released per second from one thread with `try_lock_batch` + `unlock_batch`, on
//! 5 local nodes, batches of `MUXLOCK_BATCH` (default 100) resources.
//!
//! It runs `MUXLOCK_BATCH_SECS` seconds (default 5) of back-to-back batches (acquire 100, release the 100) and
//! prints locks/s (one lock = one acquisition and its release), the round trips per second, and the CPU each side
//! used meanwhile: this process (user + system) and each redis-server (from `/proc/<pid>/stat`), as a share of one
//! core. On a machine where the servers' CPU adds up to the cores there are, the nodes are the limit.
//!
//! `cargo bench --bench batch` runs it; `cargo test --benches` runs a short smoke run. Results:
//! `benchmarks/results/2026-11-22-batches.md`.

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
    // Phases of 1 s (0.1 s in the smoke run) alternate between the batch calls and the same work done one lock at
    // a time (`once().acquire()` + `unlock` per resource), so that the machine's noise hits both alike.
    let phase = if quick { 0.1 } else { 1.0 };
    let phases = (secs / phase).ceil().max(1.0) as usize;
    let mut totals = [(0usize, 0.0f64, 0.0f64); 2]; // (locks, wall, client cpu) for batch, single
    let mut server_cpu = 0.0;
    let mut missed = 0usize;
    for _ in 0..phases {
        for (mode, total) in totals.iter_mut().enumerate() {
            let server0: Vec<f64> = pids.iter().map(|p| cpu_seconds(p)).collect();
            let (self0, t0) = (cpu_seconds("self"), Instant::now());
            let mut locked = 0usize;
            while t0.elapsed().as_secs_f64() < phase {
                if mode == 0 {
                    let got: Vec<_> = locks
                        .try_lock_batch(&names, ttl)
                        .into_iter()
                        .filter_map(|r| r.ok().flatten())
                        .collect();
                    missed += batch - got.len();
                    locked += got.len();
                    missed += locks
                        .unlock_batch(got)
                        .iter()
                        .filter(|r| r.is_err())
                        .count();
                } else {
                    for name in &names {
                        match locks.request(name).ttl(ttl).once().acquire() {
                            Ok(lock) => {
                                locked += 1;
                                missed += usize::from(locks.unlock(lock).is_err());
                            }
                            _ => missed += 1,
                        }
                    }
                }
            }
            let wall = t0.elapsed().as_secs_f64();
            total.0 += locked;
            total.1 += wall;
            total.2 += cpu_seconds("self") - self0;
            if mode == 0 {
                server_cpu += pids
                    .iter()
                    .zip(&server0)
                    .map(|(p, c0)| cpu_seconds(p) - c0)
                    .sum::<f64>();
            }
        }
    }
    let rate = |(locked, wall, _): (usize, f64, f64)| locked as f64 / wall;
    println!(
        "batch {batch}, 5 nodes, one thread: {:.0} locks/s acquired+released with try_lock_batch + unlock_batch, \
         {:.0} locks/s with once().acquire() + unlock one at a time (x{:.1}); {missed} not acquired or not released",
        rate(totals[0]),
        rate(totals[1]),
        rate(totals[0]) / rate(totals[1]),
    );
    println!(
        "cpu during the batch phases (share of one core): client {:.2}, 5 servers together {:.2}, cores {}",
        totals[0].2 / totals[0].1,
        server_cpu / totals[0].1,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("{}", locks.stats());
}
