//! `scripts/bench-report`: muxlock against the other Rust Redlock clients, every scenario in one run, as users
//! compare them. It starts its own `redis-server`s on free loopback ports, runs the scenarios below with every
//! client, prints the tables, and (unless `--no-write`) keeps them in a new results file,
//! `benchmarks/results/<today>-against-other-clients.md` (`…-against-other-clients-quick.md` for a quick run; a
//! rerun the same day replaces it), listed at the end of `BENCHMARKS.md`; the pictures go where `BENCHMARKS.md`
//! shows them, the others next to the file (`benches/report/output.rs`).
//!
//! Clients (`benches/peers`): muxlock; the `redlock` crate; `rslock`; `redis-rs/single` (no Redlock: `SET NX PX` and
//! the release script on one node over a plain redis-rs connection); `redis-rs/quorum` (Redlock by hand on one
//! redis-rs multiplexed connection per node, an answer at the majority).
//!
//! Scenarios:
//!
//! 1. **Latency**: uncontended acquire+release on 1, 3 and 5 nodes, p50/p90/p99/p99.9, every (client, node
//!    count) case taking turns in batches (so the machine's noise hits them alike); a CDF picture at 5 nodes.
//! 2. **Throughput**: the engine of `benches/throughput.rs` (1, 4, 16, 64 callers on distinct resources, shared
//!    and per-thread muxlock managers), with every client; repetitions in alternation. Then muxlock's batch API
//!    (`try_lock_batch` + `unlock_batch`, 100 names a call) against the same names one call at a time.
//! 3. **Faults**: 5 nodes with node 2 hung (SIGSTOP) and, on another cluster, killed: each client's success rate
//!    and latency. Each client runs in a thread of its own ([`worker::Worker`]): one whose call does not return
//!    within a bound is reported as blocked, and the run goes on. redis-rs/single is pointed at the faulty node.
//! 4. **Injected latency**: 5 nodes behind the fault proxy (`tests/support/proxy.rs`), adding 1, 2, 3, 4 and 5 ms
//!    to a round trip. The floor is one round trip to the third-fastest node: redis-rs/single measures it, pointed
//!    at that node.
//! 5. **Contention**: hand-off (a holder releases, a waiter blocked on the resource gets it: muxlock's `.wait(..)`
//!    against the peers' retry loops) and fairness (8 clients loop on one resource: acquisitions per client).
//! 6. **TLS against plain TCP**: not in this report yet; `cargo bench --bench tls` measures muxlock's TLS on its own.
//!
//! Modes: `cargo bench --bench report` is the full run (under 20 minutes on the 2-vCPU machine), `-- --quick` a
//! short one (under 2 minutes); `cargo test --benches` (no `--bench` flag) checks the results file's writer, runs a
//! tiny pass of each scenario, writes nothing, and fails if a muxlock call failed or blocked.
//! `scripts/bench-report [--quick] [--no-write]` runs the bench mode.

#![allow(missing_docs)] // the bench's own items need no docs

#[path = "../tests/support/mod.rs"]
mod support;

mod peers;

#[path = "throughput/mod.rs"]
mod throughput;

#[path = "report/cases.rs"]
mod cases;
#[path = "report/contention.rs"]
mod contention;
#[path = "report/crossproc.rs"]
mod crossproc;
#[path = "report/output.rs"]
mod output;
#[path = "report/rates.rs"]
mod rates;
#[path = "report/svg.rs"]
mod svg;
#[path = "report/worker.rs"]
mod worker;

use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};
use std::{env, fs, thread};

use muxlock::{Config, LockManager};
use peers::{Locker, Muxlock, QuorumSync, RedisSingle, RedlockRs, Rslock};
use support::{Cluster, Fault, FaultProxy};
use throughput::report::{Cpu, loadavg};
use worker::{CallStats, Done, Job, Worker};

use cases::{Case, Kind, faults, injected, latency};
use contention::{Contention, contention};
use output::{Out, goals, header, lat, load3, p50, q, ratio, thousands, write_files};
use rates::throughput;

/// The lease of every lock.
const TTL: Duration = Duration::from_secs(30);
/// The node that is hung or down in the fault scenario.
const FAULTY: usize = 2;

// ---------------------------------------------------------------- plan

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// `cargo test --benches`: a tiny pass, nothing written.
    Test,
    Quick,
    Full,
}

/// How much of everything a mode runs.
struct Plan {
    mode: Mode,
    /// Calls per (client, node count) case in the latency scenario (the `redlock` crate gets a fifth).
    latency_calls: u64,
    batch: u64,
    /// Calls per client per fault scenario, and the scenario's time limit.
    fault_calls: u64,
    fault_limit: Duration,
    /// How long past its batch's budget a call may run before its client counts as blocked.
    grace: Duration,
    injected_calls: u64,
    throughput: throughput::Settings,
    handoff_rounds: u64,
    fair_secs: f64,
    fair_passes: u64,
    /// muxlock's round timeout in the latency, throughput, fault and injected scenarios.
    round_timeout: Duration,
}

impl Plan {
    fn new(mode: Mode) -> Plan {
        let threads = vec![1, 4, 16, 64];
        let settings = |threads: Vec<usize>, warmup_ms, secs: f64, reps| throughput::Settings {
            quick: mode == Mode::Test,
            threads,
            clients: throughput::ALL_CLIENTS.to_vec(),
            warmup: Duration::from_millis(warmup_ms),
            secs: Duration::from_secs_f64(secs),
            reps,
        };
        match mode {
            Mode::Test => Plan {
                mode,
                latency_calls: 20,
                batch: 10,
                fault_calls: 4,
                fault_limit: Duration::from_secs(1),
                grace: Duration::from_millis(1500),
                injected_calls: 5,
                throughput: settings(vec![1, 4], 50, 0.1, 1),
                handoff_rounds: 1,
                fair_secs: 0.3,
                fair_passes: 1,
                round_timeout: Duration::from_secs(2),
            },
            Mode::Quick => Plan {
                mode,
                latency_calls: 1_000,
                batch: 50,
                fault_calls: 200,
                fault_limit: Duration::from_secs(8),
                grace: Duration::from_secs(2),
                injected_calls: 60,
                throughput: settings(threads, 100, 0.4, 1),
                handoff_rounds: 2,
                fair_secs: 1.5,
                fair_passes: 1,
                round_timeout: Config::default().round_timeout(),
            },
            Mode::Full => Plan {
                mode,
                latency_calls: 10_000,
                batch: 100,
                fault_calls: 2_000,
                fault_limit: Duration::from_secs(30),
                grace: Duration::from_secs(5),
                injected_calls: 500,
                throughput: settings(threads, 300, 2.0, 3),
                handoff_rounds: 15,
                fair_secs: 8.0,
                fair_passes: 2,
                round_timeout: Config::default().round_timeout(),
            },
        }
    }
}

// ---------------------------------------------------------------- main

fn main() {
    // A child of the cross-process scenario (scenario 7): it runs one client and reports its grants.
    if let Ok(spec) = env::var(crossproc::CHILD_ENV) {
        crossproc::child(&spec);
        return;
    }
    let args: Vec<String> = env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    if flag("--list") {
        return;
    }
    // `-- --cross-process [SECS]`: scenario 7 alone (8 processes, 1 and 2 resources), tables printed, nothing
    // written: the quick way to compare the hand-off across processes.
    if let Some(i) = args.iter().position(|a| a == "--cross-process") {
        let secs = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(4.0);
        let mut out = Out::new(format!("{}-cross-process", output::today()));
        let only = args.get(i + 2).cloned();
        crossproc::cross_process(&mut out, 8, secs, &[1, 2], only.as_deref());
        println!("{}", out.md);
        return;
    }
    // Criterion's rule, as in the other benches: without `--bench` (`cargo test --benches`) or with `--test`, test.
    let mode = if !flag("--bench") || flag("--test") {
        Mode::Test
    } else if flag("--quick") {
        Mode::Quick
    } else {
        Mode::Full
    };
    if mode == Mode::Test {
        output::check_results_file();
    }
    let plan = Plan::new(mode);
    // The results file is named after the day the run starts.
    let subject = match mode {
        Mode::Quick => "against-other-clients-quick",
        _ => "against-other-clients",
    };
    let mut out = Out::new(format!("{}-{subject}", output::today()));
    let t0 = Instant::now();
    header(&mut out, &plan);
    let cluster = Cluster::start(5);
    let pids: Vec<u32> = cluster.nodes().iter().map(|n| n.pid()).collect();
    let cpu0 = Cpu::now(&pids);
    let lat = latency(&mut out, &plan, &cluster.urls());
    eprintln!("[{:.0} s] latency done", t0.elapsed().as_secs_f64());
    let rows = throughput(&mut out, &plan, &cluster);
    eprintln!("[{:.0} s] throughput done", t0.elapsed().as_secs_f64());
    let fault = faults(&mut out, &plan);
    eprintln!("[{:.0} s] faults done", t0.elapsed().as_secs_f64());
    let inj = injected(&mut out, &plan, &cluster);
    eprintln!(
        "[{:.0} s] injected latency done",
        t0.elapsed().as_secs_f64()
    );
    let cont = contention(&mut out, &plan, &cluster.urls());
    eprintln!("[{:.0} s] contention done", t0.elapsed().as_secs_f64());
    let (xp_procs, xp_secs, xp_resources): (usize, f64, &[usize]) = match mode {
        Mode::Test => (3, 0.5, &[1]),
        Mode::Quick => (8, 2.0, &[1]),
        Mode::Full => (8, 8.0, &[1, 2]),
    };
    let xp = crossproc::cross_process(&mut out, xp_procs, xp_secs, xp_resources, None);
    eprintln!("[{:.0} s] cross-process done", t0.elapsed().as_secs_f64());
    out.line(
        "### 6. TLS against plain TCP\n\nNot in this report yet: muxlock's TLS is measured on its own by \
         `cargo bench --bench tls` (BENCHMARKS.md, the \"TLS\" row); the peers' TLS is not measured.\n",
    );
    goals(&mut out, &plan, &rows, &fault, &cont, t0.elapsed());
    let cpu = Cpu::now(&pids).since(cpu0);
    out.line(format!(
        "*The run took {:.0} s; load average at the end {}; the hypervisor stole {:.0} % of the machine's CPU time \
         meanwhile (`/proc/stat`).*\n",
        t0.elapsed().as_secs_f64(),
        load3(),
        cpu.steal_percent()
    ));
    // Test mode: every muxlock call must have succeeded, none blocked.
    let mut bad = Vec::new();
    for c in lat.iter().chain(&fault).chain(&inj) {
        if c.kind == Kind::Muxlock && (c.stats.failed > 0 || c.stats.blocked) {
            bad.push(format!("{}: {:?}", c.label, c.stats.first_error));
        }
    }
    for r in rows
        .iter()
        .filter(|r| r.client.is_muxlock() && r.went_wrong())
    {
        bad.push(format!("throughput {} × {}", r.threads, r.client.name()));
    }
    for (name, s, _) in cont
        .fairness
        .iter()
        .filter(|(n, ..)| n.starts_with("muxlock"))
    {
        if s.failed > 0 || s.blocked {
            bad.push(format!("fairness {name}: {:?}", s.first_error));
        }
    }
    for r in &xp {
        if r.overlaps > 0 {
            bad.push(format!(
                "cross-process {}: {} overlapping grants",
                r.client, r.overlaps
            ));
        }
        if r.client.starts_with("muxlock wait")
            && (r.quorum_errors > 0 || r.per_process.contains(&0))
        {
            bad.push(format!(
                "cross-process {}: quorum errors or a process never served",
                r.client
            ));
        }
    }
    if cont
        .handoff
        .iter()
        .any(|(n, r)| n.starts_with("muxlock") && !r.is_finite())
    {
        bad.push("hand-off: a muxlock hand-off was not measured".into());
    }
    for b in &bad {
        eprintln!("muxlock went wrong: {b}");
    }
    if mode == Mode::Test {
        assert!(
            bad.is_empty(),
            "muxlock calls failed or blocked in test mode"
        );
        return;
    }
    if !flag("--no-write") {
        let what = match mode {
            Mode::Quick => {
                "`scripts/bench-report --quick`, muxlock against the other Rust Redlock clients"
            }
            _ => "`scripts/bench-report`, muxlock against the other Rust Redlock clients",
        };
        if let Err(e) = write_files(&out, what) {
            eprintln!("bench-report: {e}");
            std::process::exit(1);
        }
    }
    // Blocked clients' threads are left to the process exit.
    drop(cluster);
    std::process::exit(0);
}
