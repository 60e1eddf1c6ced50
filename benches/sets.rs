//! A set's acquisition by `MSETEX` beside the same by script (`ACQUIRE_MANY`), on 5 local Valkey 9.1 nodes, one
//! lone caller: the client's acquire latency and the servers' own time per acquisition command (`INFO
//! commandstats`' `usec_per_call` of `msetex` and of `evalsha`, over every node). Cases, for sets of 1, 4 and 16
//! keys:
//!
//! - `msetex k`: the default user, whose nodes' probe shows `MSETEX`;
//! - `script k`: a user whose ACL lacks `MSETEX` (refused once per connection in the warm-up, then the script by
//!   hash on every node).
//!
//! The cases take turns in batches of 100 calls, so that noise from other processes hits them alike; every call
//! must succeed. Without Valkey (`$VALKEY_SERVER`, or `scripts/test`'s copy) it says so and measures nothing.
//!
//! `cargo bench -p muxlock-benches --bench sets` (`MUXLOCK_BENCH_CALLS=N` calls per case, default 5,000);
//! `cargo test --benches` runs 5 calls per case.

#![allow(missing_docs)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::env;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use muxlock::{Config, LockManager};
use support::process::find_valkey;
use support::{Cluster, RedisServer, cmd};

const TTL: Duration = Duration::from_secs(30);
const BATCH: usize = 100;

struct Case {
    name: String,
    native: bool,
    keys: Vec<String>,
    acquire: Histogram<u64>,
}

impl Case {
    fn call(&mut self, locks: &LockManager) {
        let t = Instant::now();
        let set = locks
            .request_all(&self.keys)
            .ttl(TTL)
            .once()
            .acquire()
            .unwrap_or_else(|e| panic!("{}: {e}", self.name));
        self.acquire
            .saturating_record((t.elapsed().as_micros() as u64).max(1));
        locks
            .unlock(set)
            .unwrap_or_else(|e| panic!("{}: {e}", self.name));
    }
}

/// `usec_per_call` and `calls` of `command` on `node` (`INFO commandstats`).
fn stat(node: &RedisServer, command: &str) -> (f64, u64) {
    let info = String::from_utf8_lossy(&node.raw(&cmd(&["INFO", "commandstats"]))).into_owned();
    let prefix = format!("cmdstat_{command}:");
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_default();
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("usec_per_call"), field("calls") as u64)
}

fn main() {
    let args: Vec<String> = env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let quick = !flag("--bench") || flag("--test");
    if flag("--list") {
        return;
    }
    let Some(valkey) = find_valkey() else {
        println!(
            "sets: no Valkey server (set VALKEY_SERVER, or run scripts/test once): nothing measured"
        );
        return;
    };
    let calls: usize = match quick {
        true => 5,
        false => env::var("MUXLOCK_BENCH_CALLS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5_000),
    };
    let cluster = Cluster::builder(5)
        .server(RedisServer::builder().binary(valkey))
        .start();
    for node in cluster.nodes() {
        let acl = [
            "ACL", "SETUSER", "script", "on", ">pw", "~*", "+@all", "-msetex",
        ];
        assert_eq!(node.raw(&cmd(&acl)), b"+OK\r\n");
    }
    let config = Config::default()
        .with_retry_count(0)
        .with_restart_guard(false)
        .with_round_timeout(match quick {
            true => Duration::from_secs(2),
            false => Config::default().round_timeout(),
        });
    let manager = |urls: Vec<String>| {
        LockManager::builder()
            .nodes(urls)
            .config(config.clone())
            .build()
            .expect("a manager")
    };
    let native = manager(cluster.urls());
    let scripted = manager(
        cluster
            .nodes()
            .iter()
            .map(|n| format!("redis://script:pw@127.0.0.1:{}", n.port()))
            .collect(),
    );
    let mut cases = Vec::new();
    for k in [1, 4, 16] {
        for (native, way) in [(true, "msetex"), (false, "script")] {
            cases.push(Case {
                name: format!("{way} {k}"),
                native,
                keys: (0..k).map(|i| format!("{{bench:{way}{k}}}:{i}")).collect(),
                acquire: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
            });
        }
    }
    let locks = |case: &Case| match case.native {
        true => &native,
        false => &scripted,
    };
    for case in &mut cases {
        for _ in 0..20.min(calls) {
            case.call(locks(case));
        }
        case.acquire.reset();
    }
    // The servers' time per call from here on: the counters are reset after the warm-up.
    for node in cluster.nodes() {
        assert_eq!(node.raw(&cmd(&["CONFIG", "RESETSTAT"])), b"+OK\r\n");
    }
    let mut server = vec![(0.0, 0u64); cases.len()];
    let mut done = 0;
    while done < calls {
        let n = BATCH.min(calls - done);
        for (i, case) in cases.iter_mut().enumerate() {
            let before: Vec<(f64, u64)> = cluster
                .nodes()
                .iter()
                .map(|node| stat(node, if case.native { "msetex" } else { "evalsha" }))
                .collect();
            for _ in 0..n {
                case.call(locks(case));
            }
            // Server time spent in this batch's acquisitions: the change of usec_per_call × calls.
            for (node, (per, calls)) in cluster.nodes().iter().zip(before) {
                let (per_now, calls_now) =
                    stat(node, if case.native { "msetex" } else { "evalsha" });
                server[i].0 += per_now * calls_now as f64 - per * calls as f64;
                server[i].1 += calls_now - calls;
            }
        }
        done += n;
    }
    println!(
        "{calls} sets per case, 5 Valkey nodes, one lone caller\n{:<12} {:>9} {:>8} {:>8}   {:>22}",
        "case", "acq p50 µs", "p90", "p99", "server µs per command"
    );
    for (c, (usec, n)) in cases.iter().zip(&server) {
        let q = |p| c.acquire.value_at_quantile(p);
        let per = match n {
            0 => 0.0,
            n => usec / *n as f64,
        };
        println!(
            "{:<12} {:>9} {:>8} {:>8}   {:>22.2}",
            c.name,
            q(0.5),
            q(0.9),
            q(0.99),
            per
        );
    }
}
