//! `scripts/bench-report`: muxlock against the other Rust Redlock clients, every scenario in one run, as users
//! compare them. It starts its own `redis-server`s on free loopback ports, runs the scenarios below with every
//! client, prints the tables, and (unless `--no-write`) rewrites the generated part of `BENCHMARKS.md` (between
//! the `bench-report:begin`/`end` markers) and the pictures in `benchmarks/`.
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
//!    and per-thread muxlock managers), with every client; repetitions in alternation. The batch API's case is a
//!    marked slot ([`batch_throughput`]) until `try_lock_batch` exists.
//! 3. **Faults**: 5 nodes with node 2 hung (SIGSTOP) and, on another cluster, killed: each client's success rate
//!    and latency. Each client runs in a thread of its own ([`worker::Worker`]): one whose call does not return
//!    within a bound is reported as blocked, and the run goes on. redis-rs/single is pointed at the faulty node.
//! 4. **Injected latency**: 5 nodes behind the fault proxy (`tests/support/proxy.rs`), adding 1, 2, 3, 4 and 5 ms
//!    to a round trip. The floor is one round trip to the third-fastest node: redis-rs/single measures it, pointed
//!    at that node.
//! 5. **Contention**: hand-off (a holder releases, a waiter blocked on the resource gets it: muxlock's `lock_wait`
//!    against the peers' retry loops) and fairness (8 clients loop on one resource: acquisitions per client).
//! 6. **TLS against plain TCP**: not built yet (muxlock has no TLS on this branch).
//!
//! Modes: `cargo bench --bench report` is the full run (under 20 minutes on the 2-vCPU machine), `-- --quick` a
//! short one (under 2 minutes); `cargo test --benches` (no `--bench` flag) runs a tiny pass of each scenario,
//! writes nothing, and fails if a muxlock call failed or blocked. `scripts/bench-report [--quick] [--no-write]`
//! runs the bench mode.

#![allow(missing_docs)] // the bench's own items need no docs

#[path = "../tests/support/mod.rs"]
mod support;

mod peers;

#[path = "throughput/mod.rs"]
mod throughput;

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

/// The lease of every lock.
const TTL: Duration = Duration::from_secs(30);
/// The node that is hung or down in the fault scenario.
const FAULTY: usize = 2;
/// The markers around the generated part of `BENCHMARKS.md`.
const BEGIN: &str = "<!-- bench-report:begin -->";
const END: &str = "<!-- bench-report:end -->";

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

// ---------------------------------------------------------------- output

/// The report: printed as it grows, kept for `BENCHMARKS.md`.
struct Out {
    md: String,
    pictures: Vec<(String, String)>,
}

impl Out {
    fn line(&mut self, s: impl AsRef<str>) {
        println!("{}", s.as_ref());
        self.md.push_str(s.as_ref());
        self.md.push('\n');
    }

    fn picture(&mut self, file: &str, alt: &str, svg: String) {
        self.line(format!("![{alt}](benchmarks/{file})"));
        self.line("");
        self.pictures.push((file.to_string(), svg));
    }
}

/// A latency in the unit that suits it.
fn lat(ns: u64) -> String {
    let ns = ns as f64;
    if ns < 100_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e6 {
        format!("{:.0} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn q(h: &hdrhistogram::Histogram<u64>, quantile: f64) -> String {
    if h.is_empty() {
        "—".into()
    } else {
        lat(h.value_at_quantile(quantile))
    }
}

fn p50(h: &hdrhistogram::Histogram<u64>) -> Option<f64> {
    (!h.is_empty()).then(|| h.value_at_quantile(0.5) as f64)
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "—".into(),
    }
}

fn thousands(v: f64) -> String {
    let n = v.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

// ---------------------------------------------------------------- clients

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Muxlock,
    Rslock,
    Redlock,
    Quorum,
    Single,
}

const KINDS: [Kind; 5] = [
    Kind::Muxlock,
    Kind::Rslock,
    Kind::Redlock,
    Kind::Quorum,
    Kind::Single,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Muxlock => "muxlock",
            Kind::Rslock => "rslock",
            Kind::Redlock => "redlock",
            Kind::Quorum => "redis-rs/quorum",
            Kind::Single => "redis-rs/single",
        }
    }

    /// The `redlock` crate opens 10 TCP connections per cycle: it gets a fifth of the calls.
    fn share(self) -> u64 {
        if self == Kind::Redlock { 5 } else { 1 }
    }

    /// A client of `urls` (redis-rs/single: of `single`).
    fn build(self, urls: &[String], single: &str, round_timeout: Duration) -> Box<dyn Locker> {
        match self {
            Kind::Muxlock => Box::new(Muxlock::new(urls, TTL, round_timeout)),
            Kind::Rslock => Box::new(Rslock::new(urls, TTL)),
            Kind::Redlock => Box::new(RedlockRs::new(urls, TTL)),
            Kind::Quorum => Box::new(QuorumSync::new(urls, TTL)),
            Kind::Single => Box::new(RedisSingle::new(single, TTL)),
        }
    }
}

/// One client in one setting, with what its calls gave.
struct Case {
    label: String,
    kind: Kind,
    nodes: usize,
    worker: Worker,
    stats: CallStats,
}

impl Case {
    fn new(label: String, kind: Kind, nodes: usize, locker: Box<dyn Locker>) -> Case {
        Case {
            worker: Worker::start(label.clone(), locker),
            label,
            kind,
            nodes,
            stats: CallStats::new(),
        }
    }

    /// A few cycles to connect and warm up, not recorded.
    fn warm_up(&mut self, plan: &Plan) {
        let mut scratch = CallStats::new();
        self.worker
            .cycles(&mut scratch, 5, Duration::from_secs(2), plan.grace);
        assert!(
            scratch.failed == 0 && !scratch.blocked,
            "{}: warm-up failed: {:?}",
            self.label,
            scratch.first_error
        );
    }
}

/// Runs the cases in turn, a batch each (the first case rotating), until each made `calls` calls (divided by its
/// share), blocked, or `limit` passed.
fn alternate(
    cases: &mut [Case],
    calls: u64,
    batch: u64,
    budget: Duration,
    plan: &Plan,
    limit: Duration,
) {
    let start = Instant::now();
    let mut round = 0;
    loop {
        let mut pending = false;
        for k in 0..cases.len() {
            let case = &mut cases[(k + round) % cases.len()];
            let target = (calls / case.kind.share()).max(1);
            if case.worker.blocked || case.stats.calls() >= target {
                continue;
            }
            pending = true;
            let n = (batch / case.kind.share())
                .max(1)
                .min(target - case.stats.calls());
            case.worker.cycles(&mut case.stats, n, budget, plan.grace);
        }
        round += 1;
        if !pending || start.elapsed() >= limit {
            return;
        }
    }
}

/// The latency's CDF points `(µs, percent)`.
fn cdf_points(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    let mut qs: Vec<f64> = (0..100).map(|i| f64::from(i) / 100.0).collect();
    qs.extend([0.995, 0.999, 0.9995, 1.0]);
    if h.is_empty() {
        return Vec::new();
    }
    qs.iter()
        .map(|&q| (h.value_at_quantile(q) as f64 / 1e3, q * 100.0))
        .collect()
}

// ---------------------------------------------------------------- 1. latency

fn latency(out: &mut Out, plan: &Plan, urls: &[String]) -> Vec<Case> {
    let mut cases = Vec::new();
    for n in [1, 3, 5] {
        for kind in [Kind::Muxlock, Kind::Rslock, Kind::Redlock, Kind::Quorum] {
            let label = format!("{}/{n}", kind.name());
            cases.push(Case::new(
                label,
                kind,
                n,
                kind.build(&urls[..n], &urls[0], plan.round_timeout),
            ));
        }
    }
    cases.push(Case::new(
        "redis-rs/single/1".into(),
        Kind::Single,
        1,
        Kind::Single.build(&urls[..1], &urls[0], plan.round_timeout),
    ));
    for case in &mut cases {
        case.warm_up(plan);
    }
    let started = Instant::now();
    alternate(
        &mut cases,
        plan.latency_calls,
        plan.batch,
        Duration::from_secs(2),
        plan,
        Duration::from_secs(600),
    );
    out.line(format!(
        "### 1. Uncontended acquire+release latency\n\n{} calls per case ({} for the `redlock` crate), the cases \
         taking turns in batches of {}; {:.0} s. Latency of one acquire followed by one release, on fresh names; \
         \"÷ muxlock\" divides the p50 by muxlock's on the same nodes.\n",
        plan.latency_calls,
        plan.latency_calls / 5,
        plan.batch,
        started.elapsed().as_secs_f64()
    ));
    for n in [1, 3, 5] {
        out.line(format!("**{n} node{}**\n", if n == 1 { "" } else { "s" }));
        out.line(
            "| client | calls | failed | p50 | p90 | p99 | p99.9 | acquire p50 | ÷ muxlock (p50) |",
        );
        out.line("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let ours = cases
            .iter()
            .find(|c| c.nodes == n && c.kind == Kind::Muxlock)
            .and_then(|c| p50(&c.stats.cycle));
        for c in cases.iter().filter(|c| c.nodes == n) {
            let s = &c.stats;
            out.line(format!(
                "| {}{} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.kind.name(),
                if c.stats.blocked { " (BLOCKED)" } else { "" },
                s.calls(),
                s.failed,
                q(&s.cycle, 0.5),
                q(&s.cycle, 0.9),
                q(&s.cycle, 0.99),
                q(&s.cycle, 0.999),
                q(&s.acquire, 0.5),
                ratio(p50(&s.cycle), ours)
            ));
        }
        out.line("");
    }
    failures(out, &cases);
    let mut series: Vec<(String, Vec<(f64, f64)>)> = cases
        .iter()
        .filter(|c| c.nodes == 5)
        .map(|c| (c.kind.name().to_string(), cdf_points(&c.stats.cycle)))
        .collect();
    if let Some(single) = cases.iter().find(|c| c.kind == Kind::Single) {
        series.push((
            "redis-rs/single (1 node)".into(),
            cdf_points(&single.stats.cycle),
        ));
    }
    out.picture(
        "latency-cdf-5.svg",
        "acquire+release latency CDF, 5 nodes",
        svg::cdf(
            "acquire+release latency, 5 local nodes",
            "cumulative share of calls; log scale; the no-Redlock single-node client for reference",
            "acquire+release latency (µs)",
            &series,
        ),
    );
    cases
}

/// Prints each case's first error.
fn failures(out: &mut Out, cases: &[Case]) {
    let mut any = false;
    for c in cases {
        if let Some(e) = &c.stats.first_error {
            out.line(format!(
                "- {}: {} of {} calls failed, first: `{}`",
                c.label,
                c.stats.failed,
                c.stats.calls(),
                e.replace('`', "'")
            ));
            any = true;
        }
    }
    if any {
        out.line("");
    }
}

// ---------------------------------------------------------------- 2. throughput

fn throughput(out: &mut Out, plan: &Plan, cluster: &Cluster) -> Vec<throughput::report::Row> {
    let s = &plan.throughput;
    let pids: Vec<u32> = cluster.nodes().iter().map(|n| n.pid()).collect();
    let mut clients = throughput::Clients::build(&cluster.urls(), s);
    clients.warm_up();
    let started = Instant::now();
    let rows = throughput::run_all(&clients, s, &pids);
    let workers = clients.quorum_rt.metrics().num_workers();
    clients.shut_down();
    out.line(format!(
        "### 2. Throughput\n\nAcquire+release cycles per second on 5 nodes, each caller on its own resources \
         (the engine of `benches/throughput.rs`): {} repetition(s) of {:.1} s per case (+{:.1} s warm-up), cases in \
         alternation; {:.0} s. muxlock and the sync clients run one OS thread per caller (`muxlock/per-thread`: a \
         manager per thread; `redlock`: a client per thread; `redis-rs/single`: a connection per thread to one \
         node); rslock and redis-rs/quorum run N tasks on a multi-thread tokio runtime of {workers} workers. CPU: \
         µs per cycle of this process and of the 5 servers.\n",
        s.reps,
        s.secs.as_secs_f64(),
        s.warmup.as_secs_f64(),
        started.elapsed().as_secs_f64()
    ));
    out.line(
        "| threads | client | cycles/s (median) | min–max | failed | blocked | p50 | p99 | CPU µs/cycle (client + servers) | steal |",
    );
    out.line("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let (min, max) = r.range();
        let (c, sv) = r.cpu_per_cycle();
        out.line(format!(
            "| {} | {} | {} | {}–{} | {} | {} | {} | {} | {:.0} + {:.0} | {:.0} % |",
            r.threads,
            r.client.name(),
            thousands(r.median()),
            thousands(min),
            thousands(max),
            r.failures(),
            r.blocked,
            q(&r.tally.latency, 0.5),
            q(&r.tally.latency, 0.99),
            c,
            sv,
            r.steal()
        ));
    }
    out.line("");
    // muxlock/shared ÷ each other client, per thread count: the ratio of medians from this run.
    let clients: Vec<throughput::Client> = s.clients.clone();
    let mut head = "| threads |".to_string();
    let mut rule = "|---:|".to_string();
    for c in clients.iter().filter(|c| **c != throughput::Client::Shared) {
        let _ = write!(head, " ÷ {} |", c.name());
        rule.push_str("---:|");
    }
    out.line("muxlock/shared's cycles/s divided by each other client's (medians of this run):\n");
    out.line(head);
    out.line(rule);
    for &t in &s.threads {
        let get = |c: throughput::Client| rows.iter().find(|r| r.threads == t && r.client == c);
        let Some(ours) = get(throughput::Client::Shared) else {
            continue;
        };
        let mut line = format!("| {t} |");
        for c in clients.iter().filter(|c| **c != throughput::Client::Shared) {
            let v = get(*c).map_or("—".into(), |r| {
                format!("{:.2}", ours.median() / r.median())
            });
            let _ = write!(line, " {v} |");
        }
        out.line(line);
    }
    out.line("");
    for r in &rows {
        for (i, what) in ["acquire", "release"].iter().enumerate() {
            if let Some(e) = &r.tally.first_error[i] {
                out.line(format!(
                    "- {} × {}: {} failed {what} calls, first: `{}`",
                    r.threads,
                    r.client.name(),
                    r.tally.failures[i],
                    e.replace('`', "'")
                ));
            }
        }
    }
    out.line("");
    out.line(format!("**With the batch API**: {}\n", batch_throughput()));
    let groups: Vec<String> = s
        .threads
        .iter()
        .map(|&t| format!("{t} thread{}", if t == 1 { "" } else { "s" }))
        .collect();
    let series: Vec<(String, Vec<Option<f64>>)> = clients
        .iter()
        .map(|c| {
            let v = s
                .threads
                .iter()
                .map(|&t| {
                    rows.iter()
                        .find(|r| r.threads == t && r.client == *c)
                        .map(throughput::report::Row::median)
                })
                .collect();
            (c.name().to_string(), v)
        })
        .collect();
    out.picture(
        "throughput.svg",
        "throughput by thread count",
        svg::bars(
            "acquire+release cycles per second, 5 local nodes",
            "median over repetitions; callers on distinct resources; 2 vCPUs shared with the 5 servers",
            "cycles per second",
            &groups,
            &series,
            false,
            None,
        ),
    );
    rows
}

/// SLOT for the batch API (issue #11, `LockManager::try_lock_batch` / `unlock_batch`, being built on branch
/// `many`): not on this branch, so the report says so. Once it lands, this runs the throughput of one caller
/// locking M names per `try_lock_batch` call (and releasing them with `unlock_batch`) against M single `lock`
/// calls, in the same run, and returns the line for the report.
fn batch_throughput() -> String {
    "not built yet: `try_lock_batch` (issue #11) is not on this branch; the slot is `batch_throughput` in \
     `benches/report.rs`."
        .into()
}

// ---------------------------------------------------------------- 3. faults

fn faults(out: &mut Out, plan: &Plan) -> Vec<Case> {
    out.line(format!(
        "### 3. One node hung (SIGSTOP) or down (killed)\n\nTwo clusters of 5 nodes: node {FAULTY} of one is \
         stopped with SIGSTOP, node {FAULTY} of the other is killed, after every client connected and warmed up. \
         Up to {} calls per client, the clients taking turns, for at most {:.0} s per cluster. A call that has not \
         returned {:.1} s after its batch's budget marks its client **blocked**: it is asked nothing more and the \
         run goes on. redis-rs/single (no Redlock) is connected to the faulty node itself, to show what one node \
         costs when it is the one that fails. Latencies are of the calls that succeeded.\n",
        plan.fault_calls,
        plan.fault_limit.as_secs_f64(),
        plan.grace.as_secs_f64()
    ));
    out.line("| node 2 | client | calls | succeeded | p50 | p99 | max | state |");
    out.line("|---|---|---:|---:|---:|---:|---:|---|");
    let mut all = Vec::new();
    for fault in ["hung", "down"] {
        let mut cluster = Cluster::start(5);
        let urls = cluster.urls();
        let mut cases: Vec<Case> = KINDS
            .iter()
            .map(|&kind| {
                Case::new(
                    format!("{}/{fault}", kind.name()),
                    kind,
                    5,
                    kind.build(&urls, &urls[FAULTY], plan.round_timeout),
                )
            })
            .collect();
        for case in &mut cases {
            case.warm_up(plan);
        }
        if fault == "hung" {
            cluster.pause(FAULTY);
        } else {
            cluster.kill(FAULTY);
        }
        alternate(
            &mut cases,
            plan.fault_calls,
            20,
            Duration::from_millis(300),
            plan,
            plan.fault_limit,
        );
        for c in &cases {
            let s = &c.stats;
            let state = if s.blocked {
                format!(
                    "**blocked**: a call did not return within {:.1} s",
                    plan.grace.as_secs_f64()
                )
            } else if let Some(e) = &s.first_error {
                format!("failed: `{}`", e.replace('`', "'"))
            } else {
                "ok".into()
            };
            out.line(format!(
                "| {fault} | {} | {} | {:.1} % | {} | {} | {} | {state} |",
                c.kind.name(),
                s.calls(),
                100.0 * s.ok as f64 / s.calls().max(1) as f64,
                q(&s.cycle, 0.5),
                q(&s.cycle, 0.99),
                q(&s.cycle, 1.0),
            ));
        }
        // The servers stop here; a blocked client's call then fails and its thread ends (or the process exit
        // ends it).
        drop(cluster);
        all.extend(cases);
    }
    out.line("");
    all
}

// ---------------------------------------------------------------- 4. injected latency

fn injected(out: &mut Out, plan: &Plan, cluster: &Cluster) -> Vec<Case> {
    // Latency is per direction in the proxy: half of each node's added round trip.
    let proxies: Vec<FaultProxy> = cluster
        .addrs()
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            let p = FaultProxy::start(*addr);
            p.set(Fault::Latency(Duration::from_micros(500 * (i as u64 + 1))));
            p
        })
        .collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let mut cases: Vec<Case> = KINDS
        .iter()
        .map(|&kind| {
            let label = if kind == Kind::Single {
                "redis-rs/single (3 ms node: the floor)".to_string()
            } else {
                kind.name().to_string()
            };
            Case::new(
                label,
                kind,
                5,
                kind.build(&urls, &urls[2], plan.round_timeout),
            )
        })
        .collect();
    for case in &mut cases {
        case.warm_up(plan);
    }
    let started = Instant::now();
    alternate(
        &mut cases,
        plan.injected_calls,
        10,
        Duration::from_millis(500),
        plan,
        Duration::from_secs(300),
    );
    let floor = cases
        .iter()
        .find(|c| c.kind == Kind::Single)
        .and_then(|c| p50(&c.stats.acquire));
    out.line(format!(
        "### 4. Injected latency\n\n5 nodes, each behind the fault proxy, which adds 1, 2, 3, 4 and 5 ms to a round \
         trip (half each way). The floor of an acquisition is one round trip to the third-fastest node: \
         redis-rs/single measures it, connected to that node alone (acquire p50 {}). A client that waits for \
         every node pays the 5 ms node's round trip; one that asks the nodes one after another pays the sum (15 ms \
         per command). {} calls per client ({} for the `redlock` crate), in turns; {:.0} s.\n",
        floor.map_or("—".into(), |f| lat(f as u64)),
        plan.injected_calls,
        plan.injected_calls / 5,
        started.elapsed().as_secs_f64()
    ));
    out.line("| client | calls | failed | acquire p50 | acquire p99 | release p50 | acquire+release p50 | acquire p50 ÷ floor |");
    out.line("|---|---:|---:|---:|---:|---:|---:|---:|");
    for c in &cases {
        let s = &c.stats;
        out.line(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            c.label,
            s.calls(),
            s.failed,
            q(&s.acquire, 0.5),
            q(&s.acquire, 0.99),
            q(&s.release, 0.5),
            q(&s.cycle, 0.5),
            ratio(p50(&s.acquire), floor)
        ));
    }
    out.line("");
    failures(out, &cases);
    let peers: Vec<&Case> = cases.iter().filter(|c| c.kind != Kind::Single).collect();
    let groups: Vec<String> = vec!["acquire p50".into(), "release p50".into()];
    let series: Vec<(String, Vec<Option<f64>>)> = peers
        .iter()
        .map(|c| {
            let ms = |h: &hdrhistogram::Histogram<u64>| p50(h).map(|v| v / 1e6);
            (
                c.kind.name().to_string(),
                vec![ms(&c.stats.acquire), ms(&c.stats.release)],
            )
        })
        .collect();
    out.picture(
        "injected-latency.svg",
        "acquire and release p50 with 1-5 ms injected, against the floor",
        svg::bars(
            "5 nodes adding 1, 2, 3, 4, 5 ms per round trip",
            "p50 per call; dashed: the floor, one round trip to the 3rd-fastest node (measured); log scale",
            "milliseconds",
            &groups,
            &series,
            true,
            floor.map(|f| (f / 1e6, format!("floor {:.2} ms", f / 1e6))),
        ),
    );
    drop(proxies);
    cases
}

// ---------------------------------------------------------------- 5. contention

/// A muxlock manager for the contention scenario: 1 s rounds, as `benches/hold.rs` (a descheduled thread on
/// this 2-vCPU host can miss 50 ms; a stuck round would still show, as 1 s).
fn waiting_manager(urls: &[String]) -> LockManager {
    Muxlock::new(urls, TTL, Duration::from_secs(1))
        .manager()
        .clone()
}

/// Builds one client.
type Maker<'a> = Box<dyn Fn() -> Box<dyn Locker> + 'a>;

/// The contenders: a label and how to build one client of that kind. `holder`: the hand-off's holder, whose
/// manager "same manager" clients share.
fn contenders<'a>(urls: &'a [String], holder: &LockManager) -> Vec<(String, Maker<'a>)> {
    let same = holder.clone();
    let urls1 = urls.to_vec();
    let mut v: Vec<(String, Maker<'a>)> = vec![
        (
            "muxlock lock_wait, one manager".into(),
            Box::new(move || Box::new(Muxlock::on(same.clone(), TTL)) as Box<dyn Locker>),
        ),
        (
            "muxlock lock_wait, own manager".into(),
            Box::new(move || {
                Box::new(Muxlock::on(waiting_manager(&urls1), TTL)) as Box<dyn Locker>
            }),
        ),
    ];
    for kind in [Kind::Rslock, Kind::Redlock, Kind::Quorum, Kind::Single] {
        v.push((
            kind.name().to_string(),
            Box::new(move || kind.build(urls, &urls[0], Duration::from_secs(1))),
        ));
    }
    v
}

/// What the contention scenario gave, per client kind: the hand-off p50 ÷ the uncontended acquire, and the
/// fairness run's totals with its least ÷ most served.
struct Contention {
    handoff: Vec<(String, f64)>,
    fairness: Vec<(String, CallStats, f64)>,
}

fn contention(out: &mut Out, plan: &Plan, urls: &[String]) -> Contention {
    let holder = waiting_manager(urls);
    let kinds = contenders(urls, &holder);
    // Hand-off.
    let mut waiters: Vec<(String, Worker, hdrhistogram::Histogram<u64>)> = kinds
        .iter()
        .map(|(name, build)| {
            (
                name.clone(),
                Worker::start(format!("handoff:{name}"), build()),
                hdrhistogram::Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("bounds"),
            )
        })
        .collect();
    // Connect every waiter (rslock and the redlock crate connect on their first call).
    let warm = |w: &mut Worker, name: &str| {
        let got = w.ask(
            Job::Wait {
                resource: format!("warm:{name}").into_bytes(),
                max_wait: Duration::from_secs(2),
            },
            Duration::from_secs(5) + plan.grace,
        );
        assert!(
            matches!(got, Some(Done::Got(Ok(_)))),
            "{name}: warm-up failed"
        );
    };
    for (name, w, _) in &mut waiters {
        warm(w, name);
    }
    let mut yardstick = CallStats::new();
    let mut n = 0u64;
    let started = Instant::now();
    let (batch, peer_batch) = if plan.mode == Mode::Full {
        (20, 2)
    } else {
        (3, 1)
    };
    for round in 0..plan.handoff_rounds {
        for _ in 0..batch {
            n += 1;
            let t0 = Instant::now();
            let lock = holder
                .lock(format!("free:{n}"), TTL)
                .expect("an uncontended lock");
            let t1 = Instant::now();
            holder.unlock(lock).expect("unlock");
            yardstick.record(worker::Call {
                acquire: t1 - t0,
                release: Duration::ZERO,
                error: None,
            });
        }
        for k in 0..waiters.len() {
            let i = (k + round as usize) % waiters.len();
            let (name, w, h) = &mut waiters[i];
            let count = if name.starts_with("muxlock") {
                batch
            } else {
                peer_batch
            };
            for _ in 0..count {
                if w.blocked {
                    break;
                }
                n += 1;
                let resource = format!("handoff:{n}").into_bytes();
                let lock = holder.lock(&resource, TTL).expect("the holder's lock");
                w.post(Job::Wait {
                    resource,
                    max_wait: Duration::from_secs(10),
                });
                // Long enough for the waiter to try, fail, and wait.
                thread::sleep(Duration::from_millis(3));
                holder.unlock(lock).expect("the holder's unlock");
                let released = Instant::now();
                match w.collect(released + Duration::from_secs(10) + plan.grace) {
                    Some(Done::Got(Ok(at))) => {
                        let ns = at.saturating_duration_since(released).as_nanos() as u64;
                        h.saturating_record(ns.max(1));
                    }
                    Some(Done::Got(Err(e))) => println!("hand-off {name}: {e}"),
                    _ => {}
                }
            }
        }
    }
    let base = p50(&yardstick.acquire);
    out.line(format!(
        "### 5. Contention\n\n**Hand-off**: a muxlock holder takes a resource, a waiter starts waiting for it, the \
         holder releases it 3 ms later; the time from the holder's `unlock` returning to the waiter having it. \
         muxlock waits with `lock_wait` (woken by the release in-process on one manager, by client-side tracking \
         on another); rslock with `acquire_no_guard` and its default retry (a random pause up to 200 ms); the \
         `redlock` crate with its retry pause (random, up to 200 ms); the hand-written redis-rs clients with a \
         retry loop pausing at random up to {} ms. {} rounds; {:.0} s. Beside them, the uncontended acquire (p50 \
         {}).\n",
        peers::HAND_RETRY.as_millis(),
        plan.handoff_rounds,
        started.elapsed().as_secs_f64(),
        base.map_or("—".into(), |b| lat(b as u64)),
    ));
    out.line("| waiter | hand-offs | p50 | p90 | p99 | p50 ÷ uncontended acquire |");
    out.line("|---|---:|---:|---:|---:|---:|");
    let mut handoff = Vec::new();
    for (name, w, h) in &waiters {
        let r = ratio(p50(h), base);
        handoff.push((
            name.clone(),
            p50(h).zip(base).map_or(f64::NAN, |(a, b)| a / b),
        ));
        out.line(format!(
            "| {name}{} | {} | {} | {} | {} | {r} |",
            if w.blocked { " (BLOCKED)" } else { "" },
            h.len(),
            q(h, 0.5),
            q(h, 0.9),
            q(h, 0.99)
        ));
    }
    out.line("");
    drop(waiters);
    // Fairness.
    let secs = plan.fair_secs / plan.fair_passes as f64;
    // Per kind: its 8 workers, acquisitions per worker, waits given up, the first error.
    type Group = (String, Vec<Worker>, Vec<u64>, u64, Option<String>);
    let mut groups: Vec<Group> = kinds
        .iter()
        .map(|(name, build)| {
            let workers = (0..8)
                .map(|k| Worker::start(format!("fair:{name}:{k}"), build()))
                .collect();
            (name.clone(), workers, vec![0; 8], 0, None)
        })
        .collect();
    for (name, workers, ..) in &mut groups {
        for (k, w) in workers.iter_mut().enumerate() {
            warm(w, &format!("{name}:{k}"));
        }
    }
    let started = Instant::now();
    for pass in 0..plan.fair_passes {
        for k in 0..groups.len() {
            let i = (k + pass as usize) % groups.len();
            let (_, workers, counts, failed, first) = &mut groups[i];
            let until = Instant::now() + Duration::from_secs_f64(secs);
            for w in workers.iter_mut() {
                w.post(Job::Fair {
                    resource: format!("fair:{i}").into_bytes(),
                    until,
                    hold: Duration::from_millis(1),
                    max_wait: Duration::from_secs(2),
                });
            }
            for (w, count) in workers.iter_mut().zip(counts.iter_mut()) {
                if let Some(Done::Fair {
                    acquired,
                    failed: f,
                    first_error,
                }) = w.collect(until + Duration::from_secs(2) + plan.grace)
                {
                    *count += acquired;
                    *failed += f;
                    if first.is_none() {
                        *first = first_error;
                    }
                }
            }
        }
    }
    out.line(format!(
        "**Fairness**: 8 clients of one kind loop on one resource for {:.1} s (in {} pass(es), the kinds taking \
         turns): wait for it (at most 2 s), hold it 1 ms, release it. \"one manager\": 8 threads sharing one \
         muxlock manager; the others are 8 separate clients, as 8 processes would be. {:.0} s.\n",
        plan.fair_secs,
        plan.fair_passes,
        started.elapsed().as_secs_f64()
    ));
    out.line(
        "| clients | acquisitions per client | per second, all | least ÷ most | waits given up |",
    );
    out.line("|---|---|---:|---:|---:|");
    let mut fair = Vec::new();
    for (name, workers, counts, failed, first) in &groups {
        let (min, max) = (
            counts.iter().copied().min().unwrap_or(0),
            counts.iter().copied().max().unwrap_or(0),
        );
        let blocked = workers.iter().filter(|w| w.blocked).count();
        let list: Vec<String> = counts.iter().map(u64::to_string).collect();
        out.line(format!(
            "| {name}{} | {} | {:.0} | {:.2} | {failed} |",
            if blocked > 0 {
                format!(" ({blocked} BLOCKED)")
            } else {
                String::new()
            },
            list.join(", "),
            counts.iter().sum::<u64>() as f64 / plan.fair_secs,
            min as f64 / max.max(1) as f64
        ));
        let mut s = CallStats::new();
        s.ok = counts.iter().sum();
        s.failed = *failed;
        s.first_error = first.clone();
        s.blocked = blocked > 0;
        fair.push((name.clone(), s, min as f64 / max.max(1) as f64));
    }
    out.line("");
    drop(groups);
    Contention {
        handoff,
        fairness: fair,
    }
}

/// The goals earlier issues set that this run measures, with verdicts: a miss is written as a miss.
fn goals(
    out: &mut Out,
    plan: &Plan,
    rows: &[throughput::report::Row],
    fault: &[Case],
    contention: &Contention,
    elapsed: Duration,
) {
    use throughput::Client as C;
    let mut lines: Vec<(String, String, String, Option<bool>)> = Vec::new();
    let limit = if plan.mode == Mode::Full {
        1200.0
    } else {
        120.0
    };
    lines.push((
        format!("the run's time, {:?} mode, build excluded (#13)", plan.mode),
        format!("{:.0} s", elapsed.as_secs_f64()),
        format!("< {limit:.0} s"),
        Some(elapsed.as_secs_f64() < limit),
    ));
    let median = |t: usize, c: C| {
        rows.iter()
            .find(|r| r.threads == t && r.client == c)
            .map(throughput::report::Row::median)
    };
    for (t, peer, goal) in [
        (16, C::Rslock, 3.0),
        (16, C::Quorum, 2.0),
        (64, C::Quorum, 2.0),
    ] {
        let v = median(t, C::Shared)
            .zip(median(t, peer))
            .map(|(a, b)| a / b);
        lines.push((
            format!("{t} threads: muxlock/shared ÷ {} (#7)", peer.name()),
            v.map_or("—".into(), |v| format!("{v:.2}")),
            format!("≥ {goal}"),
            v.map(|v| v >= goal),
        ));
    }
    let failed: u64 = rows
        .iter()
        .filter(|r| r.client.is_muxlock())
        .map(throughput::report::Row::failures)
        .sum();
    lines.push((
        "muxlock failed calls, throughput on healthy nodes (#7)".into(),
        failed.to_string(),
        "0".into(),
        Some(failed == 0),
    ));
    for c in fault.iter().filter(|c| c.kind == Kind::Muxlock) {
        let s = &c.stats;
        lines.push((
            format!("{}: muxlock calls that succeeded", c.label),
            format!("{} of {}", s.ok, s.calls()),
            "all, none blocked".into(),
            Some(s.failed == 0 && !s.blocked && s.ok > 0),
        ));
    }
    for (name, r) in contention
        .handoff
        .iter()
        .filter(|(n, _)| n.starts_with("muxlock"))
    {
        lines.push((
            format!("hand-off p50 ÷ uncontended acquire, {name} (#9)"),
            format!("{r:.2}"),
            "< 3".into(),
            r.is_finite().then_some(*r < 3.0),
        ));
    }
    for (name, s, r) in contention
        .fairness
        .iter()
        .filter(|(n, ..)| n.starts_with("muxlock"))
    {
        lines.push((
            format!("fairness, least ÷ most served, {name} (#9)"),
            format!("{r:.2}"),
            "≥ 0.5".into(),
            Some(*r >= 0.5 && s.failed == 0 && !s.blocked),
        ));
    }
    out.line(
        "### Goals
",
    );
    out.line(format!(
        "Targets set by earlier issues, measured in this run{}.
",
        if plan.mode == Mode::Quick {
            " (a quick run: too few samples to settle a verdict)"
        } else {
            ""
        }
    ));
    out.line("| what | this run | goal | verdict |");
    out.line("|---|---:|---|---|");
    for (what, value, goal, ok) in lines {
        let verdict = match ok {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "not measured",
        };
        out.line(format!("| {what} | {value} | {goal} | {verdict} |"));
    }
    out.line("");
}

// ---------------------------------------------------------------- the run's facts

fn command_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "?".into())
}

/// `name version` of the peers, from `Cargo.lock`.
fn versions() -> String {
    let lock =
        fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap_or_default();
    // Every version of `name` in the lock file (the peers bring older redis-rs versions of their own).
    let version = |name: &str| {
        let needle = format!("name = \"{name}\"\nversion = \"");
        let all: Vec<&str> = lock
            .match_indices(&needle)
            .filter_map(|(i, _)| lock[i + needle.len()..].split('"').next())
            .collect();
        if all.is_empty() {
            "?".to_string()
        } else {
            all.join(" and ")
        }
    };
    format!(
        "muxlock {} (this tree), redlock {}, rslock {}, redis-rs {} (the hand-written clients use 1.x; rslock and redlock bring their own), tokio {}",
        env!("CARGO_PKG_VERSION"),
        version("redlock"),
        version("rslock"),
        version("redis"),
        version("tokio")
    )
}

/// The three load averages.
fn load3() -> String {
    loadavg()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "?".into())
}

fn header(out: &mut Out, plan: &Plan) {
    let redis = env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let rev = command_line(
        "git",
        &[
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
        ],
    );
    let command = env::var("MUXLOCK_REPORT_COMMAND").unwrap_or_else(|_| {
        format!(
            "cargo bench --bench report{}",
            if plan.mode == Mode::Quick {
                " -- --quick"
            } else {
                ""
            }
        )
    });
    out.line(BEGIN);
    out.line("");
    out.line("## Against other clients (`scripts/bench-report`)\n");
    out.line("*Generated by `scripts/bench-report`: everything between the `bench-report` markers is rewritten by \
              each run; the analysis below the end marker is written by hand.*\n");
    if plan.mode == Mode::Quick {
        out.line("**QUICK RUN (`--quick`): short, few samples, noisy. Indicative only; the full run is the one to \
                  quote.**\n");
    }
    out.line(format!(
        "- **Run**: {} UTC, `{command}`, source `{rev}`.",
        command_line("date", &["-u", "+%Y-%m-%d %H:%M"])
    ));
    out.line(format!(
        "- **Machine**: {} vCPUs, {}, Linux {}; load average at the start {}. The 5-node servers, the clients and \
         (often) other people's builds share these vCPUs: compare ratios within this run, not absolute times \
         across runs.",
        thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        command_line("uname", &["-r"]),
        load3()
    ));
    out.line(format!(
        "- **Versions**: {}; {}; {}.",
        versions(),
        command_line(&redis, &["--version"]),
        command_line("rustc", &["--version"])
    ));
    out.line(
        "- **Clients**: `muxlock` (`LockManager`, one attempt per call, restart guard off: the nodes have just \
         started); `rslock` (one attempt per call, a current-thread runtime with `block_on` per call, or N tasks on \
         a multi-thread runtime for throughput); `redlock` (the crate, one attempt per call); `redis-rs/quorum` \
         (Redlock by hand on one redis-rs multiplexed connection per node, an answer at the majority: \
         `benches/peers/quorum.rs`); `redis-rs/single` (no Redlock: `SET NX PX` and the release script on one node, \
         redis-rs sync connection). TTL 30 s; every node a local `redis-server` started by the bench on a free \
         port.\n",
    );
}

// ---------------------------------------------------------------- writing BENCHMARKS.md

fn write_files(out: &Out) -> Result<(), String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let path = format!("{root}/BENCHMARKS.md");
    let text = fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let (Some(a), Some(b)) = (text.find(BEGIN), text.find(END)) else {
        return Err(format!(
            "{path} has no `{BEGIN}` … `{END}` markers: add them where the generated part goes"
        ));
    };
    if b < a {
        return Err(format!(
            "{path}: the end marker comes before the begin marker"
        ));
    }
    let new = format!("{}{}{}", &text[..a], out.md, &text[b..]);
    fs::write(&path, new).map_err(|e| format!("{path}: {e}"))?;
    let dir = format!("{root}/benchmarks");
    fs::create_dir_all(&dir).map_err(|e| format!("{dir}: {e}"))?;
    for (file, svg) in &out.pictures {
        fs::write(format!("{dir}/{file}"), svg).map_err(|e| format!("{dir}/{file}: {e}"))?;
    }
    println!(
        "\nwrote {path} (between the markers) and {} picture(s) in {dir}",
        out.pictures.len()
    );
    Ok(())
}

// ---------------------------------------------------------------- main

fn main() {
    let args: Vec<String> = env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    if flag("--list") {
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
    let plan = Plan::new(mode);
    let mut out = Out {
        md: String::new(),
        pictures: Vec::new(),
    };
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
    out.line("### 6. TLS against plain TCP\n\nNot built yet: muxlock has no TLS on this branch.\n");
    goals(&mut out, &plan, &rows, &fault, &cont, t0.elapsed());
    let cpu = Cpu::now(&pids).since(cpu0);
    out.line(format!(
        "*The run took {:.0} s; load average at the end {}; the hypervisor stole {:.0} % of the machine's CPU time \
         meanwhile (`/proc/stat`).*\n",
        t0.elapsed().as_secs_f64(),
        load3(),
        cpu.steal_percent()
    ));
    out.line(END);
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
        if let Err(e) = write_files(&out) {
            eprintln!("bench-report: {e}");
            std::process::exit(1);
        }
    }
    // Blocked clients' threads are left to the process exit.
    drop(cluster);
    std::process::exit(0);
}
