//! TLS against plain TCP: a lone caller's acquire and release latency on the same 5 local `redis-server`s (each
//! listening on a plain and a TLS port, certificates made for the run, client certificates required as Redis'
//! default), and the cost of setting a connection up (connect, handshake, set-up, first reply) on its own.
//!
//! The two managers take turns in rounds (`MUXLOCK_TLS_ROUNDS`, default 20, of `MUXLOCK_TLS_CALLS` calls each,
//! default 1,000; the first side alternates), so that the machine's noise hits both alike. It prints each side's
//! p50/p90/p99 over all calls and the median of the per-round p50 ratios (TLS ÷ TCP): the figure to read. Then
//! `MUXLOCK_TLS_CONNECTS` (default 200) one-node fanouts per side, alternating, each timed from its creation to
//! its first reply. It also gives the CPU time per acquire+release of this process and of the servers while
//! each side ran (`/proc`, 10 ms ticks, summed over all rounds): where TLS's extra time goes.
//!
//! `cargo bench --bench tls` runs it; `cargo test --benches` runs two short rounds. Results:
//! `benchmarks/results/2026-11-22-tls.md`.

#![allow(missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use support::process::cpu_time;

use std::env;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use hdrhistogram::Histogram;
use muxlock::net::{Fanout, Options};
use muxlock::resp::encode_command;
use muxlock::{Config, LockManager, TlsConfig};
use support::certs::Certs;
use support::{Cluster, RedisServer};

fn var(name: &str, default: usize) -> usize {
    env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// Per side: acquire, release, and the two together, in nanoseconds.
struct Side {
    name: &'static str,
    locks: LockManager,
    acquire: Histogram<u64>,
    release: Histogram<u64>,
    cycle: Histogram<u64>,
    failed: u64,
    /// CPU time spent while this side ran: this process's, and the servers' (all of them).
    client_cpu: Duration,
    server_cpu: Duration,
    cycles: u64,
}

impl Side {
    /// `calls` acquire+release cycles; returns this round's acquire and cycle p50 (ns).
    fn run(&mut self, round: usize, calls: usize) -> (u64, u64) {
        let (mut acquire, mut cycle) = (histogram(), histogram());
        for i in 0..calls {
            let t0 = Instant::now();
            let Ok(lock) = self
                .locks
                .request(format!("tls-bench:{}:{round}:{i}", self.name))
                .ttl(Duration::from_secs(30))
                .once()
                .acquire()
            else {
                self.failed += 1;
                continue;
            };
            let t1 = Instant::now();
            if self.locks.unlock(lock).is_err() {
                self.failed += 1;
                continue;
            }
            let t2 = Instant::now();
            let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
            for (h, v) in [
                (&mut self.acquire, ns(t1 - t0)),
                (&mut acquire, ns(t1 - t0)),
                (&mut self.release, ns(t2 - t1)),
                (&mut self.cycle, ns(t2 - t0)),
                (&mut cycle, ns(t2 - t0)),
            ] {
                let _ = h.record(v);
            }
        }
        (acquire.value_at_quantile(0.5), cycle.value_at_quantile(0.5))
    }
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn main() {
    let quick = !env::args().any(|a| a == "--bench");
    let (rounds, calls, connects) = match quick {
        true => (2, 20, 4),
        false => (
            var("MUXLOCK_TLS_ROUNDS", 20),
            var("MUXLOCK_TLS_CALLS", 1000),
            var("MUXLOCK_TLS_CONNECTS", 200),
        ),
    };
    let certs = Certs::generate();
    let cluster = Cluster::builder(5)
        .server(RedisServer::builder().tls(&certs, true))
        .start();
    let tls = TlsConfig::new()
        .with_ca_file(certs.path("ca.crt"))
        .with_client_cert(certs.path("client.crt"), certs.path("client.key"));
    // One attempt per call (a failure is counted, not timed), the default 50 ms round (2 s in test mode, where
    // the suite runs in parallel), no restart guard (these nodes have just started).
    let round_timeout = if quick { 2000 } else { 50 };
    let config = Config::default()
        .with_retry_count(0)
        .with_restart_guard(false)
        .with_round_timeout(Duration::from_millis(round_timeout))
        .with_tls(tls.clone());
    let build = |urls: Vec<String>| {
        LockManager::builder()
            .nodes(urls)
            .config(config.clone())
            .build()
            .expect("valid configuration")
    };
    let mut sides = [
        ("tcp", build(cluster.urls())),
        ("tls", build(cluster.tls_urls())),
    ]
    .map(|(name, locks)| Side {
        name,
        locks,
        acquire: histogram(),
        release: histogram(),
        cycle: histogram(),
        failed: 0,
        client_cpu: Duration::ZERO,
        server_cpu: Duration::ZERO,
        cycles: 0,
    });
    let pids: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| n.pid().to_string())
        .collect();
    let servers_cpu = || pids.iter().map(|p| cpu_time(p)).sum::<Duration>();
    // Warm up: connections made, set-up done, caches warm.
    for side in &mut sides {
        let until = Instant::now() + Duration::from_secs(15);
        let mut warm = 0;
        while warm < 200 {
            if let Ok(lock) = side
                .locks
                .request(format!("warm:{}:{warm}", side.name))
                .ttl(Duration::from_secs(30))
                .once()
                .acquire()
            {
                let _ = side.locks.unlock(lock);
                warm += 1;
            }
            assert!(
                Instant::now() < until,
                "{}: the nodes never became usable",
                side.name
            );
        }
    }
    let (mut acquire_ratio, mut cycle_ratio) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut p50 = [(0, 0); 2];
        for i in order {
            let (client0, servers0) = (cpu_time("self"), servers_cpu());
            p50[i] = sides[i].run(round, calls);
            sides[i].client_cpu += cpu_time("self").saturating_sub(client0);
            sides[i].server_cpu += servers_cpu().saturating_sub(servers0);
            sides[i].cycles += calls as u64;
        }
        acquire_ratio.push(p50[1].0 as f64 / p50[0].0.max(1) as f64);
        cycle_ratio.push(p50[1].1 as f64 / p50[0].1.max(1) as f64);
    }
    println!(
        "acquire + release, lone caller, 5 nodes, {rounds} rounds x {calls} calls per side (µs):"
    );
    for side in &sides {
        println!(
            "  {}: acquire p50 {:.1} p90 {:.1} p99 {:.1}; release p50 {:.1} p90 {:.1} p99 {:.1}; \
             cycle p50 {:.1} p90 {:.1} p99 {:.1}; failed {}",
            side.name,
            us(&side.acquire, 0.5),
            us(&side.acquire, 0.9),
            us(&side.acquire, 0.99),
            us(&side.release, 0.5),
            us(&side.release, 0.9),
            us(&side.release, 0.99),
            us(&side.cycle, 0.5),
            us(&side.cycle, 0.9),
            us(&side.cycle, 0.99),
            side.failed
        );
    }
    println!(
        "  median per-round p50 ratio tls/tcp: acquire {:.3}, acquire+release {:.3}",
        median(&acquire_ratio),
        median(&cycle_ratio)
    );
    // Where the time goes: CPU per acquire+release in this process (muxlock, rustls) and in the 5 servers
    // together (Redis, OpenSSL for TLS), while each side ran.
    for side in &sides {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / side.cycles.max(1) as f64;
        println!(
            "  {}: CPU per acquire+release: client {:.1} µs, servers {:.1} µs",
            side.name,
            per(side.client_cpu),
            per(side.server_cpu)
        );
    }
    if !quick {
        assert!(
            sides
                .iter()
                .all(|s| s.failed * 100 <= (rounds * calls) as u64),
            "too many failed calls"
        );
    }

    // Set-up on its own: a fresh one-node fanout (its own TLS client configuration, so no session to resume)
    // until its first reply, alternating plain and TLS.
    let node = cluster.node(0);
    let mut ping = BytesMut::new();
    encode_command(&[b"PING"], &mut ping);
    let mut first = [histogram(), histogram()];
    let mut built = [histogram(), histogram()];
    let mut failed = 0;
    for i in 0..connects * 2 {
        let side = i % 2;
        let url = if side == 0 {
            node.url()
        } else {
            node.tls_url()
        };
        let t0 = Instant::now();
        let fanout = Fanout::new(
            vec![url.parse().expect("url")],
            Options::default().with_tls(tls.clone()),
        )
        .expect("fanout");
        let t1 = Instant::now();
        let mut round = fanout.round(t0 + Duration::from_secs(2));
        round.send_all(&ping, 1);
        match round.next() {
            Some((_, Ok(_))) => {
                let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
                let _ = first[side].record(ns(t0.elapsed()));
                let _ = built[side].record(ns(t1 - t0));
            }
            _ => failed += 1,
        }
    }
    println!(
        "connection set-up, one node, {connects} per side, from Fanout::new to the first reply (µs):"
    );
    for (side, name) in ["tcp", "tls"].iter().enumerate() {
        println!(
            "  {name}: p50 {:.1} p90 {:.1} p99 {:.1} (of which Fanout::new, with the CA and key files read: p50 {:.1})",
            us(&first[side], 0.5),
            us(&first[side], 0.9),
            us(&first[side], 0.99),
            us(&built[side], 0.5)
        );
    }
    println!(
        "  the TLS handshake adds p50 {:.1} µs; failed {failed}",
        us(&first[1], 0.5) - us(&first[0], 0.5)
    );
}
