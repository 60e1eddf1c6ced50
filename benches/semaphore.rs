//! A semaphore permit's and a read-write lock's cost beside a plain lock: acquire and release, timed apart, on 5
//! local nodes, one manager, one lone caller. Cases:
//!
//! - `plain`: `request(name).acquire()`, then `unlock`;
//! - `permits(k)` for k = 1, 4, 16, 64 ([`MAX_PERMITS`]): every permit free, so each node's offer takes its lowest
//!   free permit (permit 0) and nothing is given back (the nodes agree);
//! - `permits(4), 3 held`: another manager holds three of the four permits, so the offer takes the last one on
//!   each node and nothing is given back: the usual case of a busy semaphore with room;
//! - `read()`: a reader of a free read-write lock (each node's offer looks at the writer and intent keys, then
//!   takes its lowest free reader slot of 64, as `permits(64)` does);
//! - `read(), 3 readers`: three other readers hold slots, the usual case of a read-mostly lock;
//! - `write()`: a writer of a free read-write lock (its script looks at the 64 reader slots).
//!
//! The cases take turns in batches of 100 calls (round robin), so that noise from other processes hits them alike;
//! every call is recorded in an HDR histogram; the table prints p50/p90/p99 per case and each p50's ratio to the
//! plain lock's. Every call must succeed (the run panics otherwise).
//!
//! `cargo bench -p muxlock-benches --bench semaphore` (`MUXLOCK_BENCH_CALLS=N` calls per case, default 5,000);
//! `cargo test --benches` runs 5 calls per case.

#![allow(missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::env;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use muxlock::{Config, LockManager, MAX_PERMITS};
use support::Cluster;

/// The lease of every lock.
const TTL: Duration = Duration::from_secs(30);
/// Calls per case in one turn of the round robin.
const BATCH: usize = 100;

/// One case: what it acquires, and what it measured.
struct Case {
    name: String,
    /// What it asks for.
    ask: Ask,
    resource: String,
    acquire: Histogram<u64>,
    release: Histogram<u64>,
}

/// What a case asks for.
#[derive(Clone, Copy)]
enum Ask {
    Plain,
    Permits(u32),
    Read,
    Write,
}

impl Case {
    fn new(name: &str, ask: Ask, resource: &str) -> Case {
        let h = || Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
        Case {
            name: name.to_owned(),
            ask,
            resource: resource.to_owned(),
            acquire: h(),
            release: h(),
        }
    }

    /// One acquisition and its release, each timed (µs).
    fn call(&mut self, locks: &LockManager) {
        let request = locks.request(&self.resource).ttl(TTL).once();
        let request = match self.ask {
            Ask::Plain => request,
            Ask::Permits(k) => request.permits(k),
            Ask::Read => request.read(),
            Ask::Write => request.write(),
        };
        let t = Instant::now();
        let lock = request
            .acquire()
            .unwrap_or_else(|e| panic!("{}: {e}", self.name));
        let acquired = t.elapsed();
        let t = Instant::now();
        locks
            .unlock(lock)
            .unwrap_or_else(|e| panic!("{}: {e}", self.name));
        let released = t.elapsed();
        let us = |d: Duration| (d.as_micros() as u64).max(1);
        self.acquire.saturating_record(us(acquired));
        self.release.saturating_record(us(released));
    }
}

fn main() {
    let args: Vec<String> = env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let quick = !flag("--bench") || flag("--test");
    if flag("--list") {
        return;
    }
    let calls: usize = match quick {
        true => 5,
        false => env::var("MUXLOCK_BENCH_CALLS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5_000),
    };
    let cluster = Cluster::start(5);
    let config = Config::default()
        .with_retry_count(0)
        .with_restart_guard(false)
        .with_round_timeout(match quick {
            true => Duration::from_secs(2),
            false => Config::default().round_timeout(),
        });
    let manager = || {
        LockManager::builder()
            .nodes(cluster.urls())
            .config(config.clone())
            .build()
            .expect("a manager")
    };
    let (locks, other) = (manager(), manager());
    let mut cases = vec![Case::new("plain", Ask::Plain, "bench:plain")];
    for k in [1, 4, 16, MAX_PERMITS] {
        cases.push(Case::new(
            &format!("permits({k})"),
            Ask::Permits(k),
            &format!("bench:sem{k}"),
        ));
    }
    cases.push(Case::new(
        "permits(4), 3 held",
        Ask::Permits(4),
        "bench:busy",
    ));
    cases.push(Case::new("read()", Ask::Read, "bench:rw"));
    cases.push(Case::new("read(), 3 readers", Ask::Read, "bench:rw-busy"));
    cases.push(Case::new("write()", Ask::Write, "bench:rw-w"));
    // Three of the busy semaphore's four permits held by another manager for the whole run.
    let held: Vec<_> = (0..3)
        .map(|_| {
            other
                .request("bench:busy")
                .ttl(Duration::from_secs(3600))
                .permits(4)
                .acquire()
                .expect("a permit")
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            other
                .request("bench:rw-busy")
                .ttl(Duration::from_secs(3600))
                .read()
                .acquire()
                .expect("a reader")
        })
        .collect();
    // Warm-up: connections, scripts loaded.
    for case in &mut cases {
        for _ in 0..20.min(calls) {
            case.call(&locks);
        }
        case.acquire.reset();
        case.release.reset();
    }
    let mut done = 0;
    while done < calls {
        let n = BATCH.min(calls - done);
        for case in &mut cases {
            for _ in 0..n {
                case.call(&locks);
            }
        }
        done += n;
    }
    for lock in held.into_iter().chain(readers) {
        other.unlock(lock).expect("released");
    }
    let base = (
        cases[0].acquire.value_at_quantile(0.5) as f64,
        cases[0].release.value_at_quantile(0.5) as f64,
    );
    println!(
        "{calls} calls per case, 5 nodes, one lone caller (µs)\n{:<22} {:>8} {:>8} {:>8} {:>7}   {:>8} {:>8} {:>8} {:>7}",
        "case", "acq p50", "p90", "p99", "×plain", "rel p50", "p90", "p99", "×plain"
    );
    for c in &cases {
        let q = |h: &Histogram<u64>, p| h.value_at_quantile(p);
        println!(
            "{:<22} {:>8} {:>8} {:>8} {:>7.2}   {:>8} {:>8} {:>8} {:>7.2}",
            c.name,
            q(&c.acquire, 0.5),
            q(&c.acquire, 0.9),
            q(&c.acquire, 0.99),
            q(&c.acquire, 0.5) as f64 / base.0,
            q(&c.release, 0.5),
            q(&c.release, 0.9),
            q(&c.release, 0.99),
            q(&c.release, 0.5) as f64 / base.1,
        );
    }
}
