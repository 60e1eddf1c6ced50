//! Busy polling (`Config::spin`): acquire latency and client CPU with it off and on, on 1 and 5 local nodes.
//!
//! Two managers on the same nodes, one with `spin` zero and one with `MUXLOCK_SPIN_US` (default 50 µs), take turns
//! in bursts of 0.7 s (`MUXLOCK_SPIN_ROUNDS` rounds, default 20), so that the machine's noise hits both alike. For
//! each it prints the median over bursts of the acquire p50, the median of the per-burst ratio (on ÷ off), and the
//! process's CPU time per acquire+release (user + system, from `/proc/self/stat`).
//!
//! `cargo bench --bench spin` runs it; `cargo test --benches` runs two short rounds. Results:
//! `benchmarks/results/2026-11-22-throughput-shared-manager.md`, "Busy polling".

#![allow(missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::env;
use std::time::{Duration, Instant};

use muxlock::redlock::{Config, LockManager};
use support::Cluster;

/// This process's user + system CPU time so far, in seconds (`/proc/self/stat`, clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rfind(')').map_or("", |i| &stat[i + 2..]);
    let fields: Vec<f64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    (fields.get(11).copied().unwrap_or(0.0) + fields.get(12).copied().unwrap_or(0.0)) / 100.0
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let quick = !env::args().any(|a| a == "--bench");
    let var = |name: &str, default: u64| {
        env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let spin = Duration::from_micros(var("MUXLOCK_SPIN_US", 50));
    let rounds = if quick {
        2
    } else {
        var("MUXLOCK_SPIN_ROUNDS", 20) as usize
    };
    let burst = if quick {
        Duration::from_millis(50)
    } else {
        Duration::from_millis(700)
    };
    let cluster = Cluster::start(5);
    let urls = cluster.urls();
    println!("spin {spin:?} against none, {rounds} rounds of {burst:?} bursts per manager");
    for n in [1usize, 5] {
        let manager = |spin| {
            let config = Config::default()
                .with_restart_guard(false)
                .with_retry_count(0)
                .with_round_timeout(Duration::from_secs(1))
                .with_spin(spin);
            LockManager::builder()
                .nodes(urls[..n].to_vec())
                .config(config)
                .build()
                .expect("a valid configuration")
        };
        let managers = [manager(Duration::ZERO), manager(spin)];
        let (mut p50, mut cpu, mut calls) = ([Vec::new(), Vec::new()], [0.0; 2], [0usize; 2]);
        for k in 0..rounds {
            for (j, m) in managers.iter().enumerate() {
                let mut latency = Vec::new();
                let (c0, t0) = (cpu_seconds(), Instant::now());
                while t0.elapsed() < burst {
                    let name = format!("spin:{n}:{j}:{k}:{}", latency.len());
                    let t = Instant::now();
                    let lock = m
                        .request(&name)
                        .ttl(Duration::from_secs(30))
                        .acquire()
                        .expect("lock");
                    latency.push(t.elapsed().as_secs_f64() * 1e6);
                    m.unlock(lock).expect("unlock");
                }
                cpu[j] += cpu_seconds() - c0;
                calls[j] += latency.len();
                p50[j].push(median(&latency));
            }
        }
        let ratios: Vec<f64> = p50[1]
            .iter()
            .zip(&p50[0])
            .map(|(on, off)| on / off)
            .collect();
        println!(
            "{n} node(s): acquire p50 off {:.1} µs, on {:.1} µs, median per-burst on/off {:.3}; client CPU per \
             lock+unlock off {:.1} µs, on {:.1} µs",
            median(&p50[0]),
            median(&p50[1]),
            median(&ratios),
            cpu[0] * 1e6 / calls[0].max(1) as f64,
            cpu[1] * 1e6 / calls[1].max(1) as f64,
        );
    }
}
