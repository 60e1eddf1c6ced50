//! Lock latency: muxlock's acquire and release on 1, 3 and 5 local nodes, next to a raw `SET ... NX PX` round trip
//! on muxlock's own connection and next to the `rslock` and `redlock` crates, on the same nodes in the same run;
//! then the 5-node calls again with one node hung (SIGSTOP) and with one node down (killed), and (in the table) with
//! the clock check off (`muxlock/no-clock-check`: what the check's two `TIME`s per node cost). Ratios between cases
//! of one run are the result; absolute times on this shared 2-core machine are not.
//!
//! The raw cases: `raw/set` and `raw/set+del` are one `SET`, then one `DEL`, on the fanout with one node (the floor
//! of one lock call); `raw/set/5` sends the `SET` to all 5 and returns at the third `OK`, as an acquisition does:
//! the cost of the fan-out alone, without the lock logic.
//!
//! Three clusters of 5 `redis-server`s (from `tests/support`), one per scenario: healthy, node 2 hung, node 2
//! down. Clients on 1 and 3 nodes use the healthy cluster's first nodes. Node 2 is stopped or killed after every
//! client has connected and warmed up, so a hung node is one whose connection was established, as in production.
//!
//! Two measurements, in this order:
//!
//! 1. criterion, one benchmark per case. `iter_custom` times only the part the case names: `acquire` releases
//!    outside the timing, `release` acquires outside it.
//! 2. a per-call table: every call is recorded in an HDR histogram, and the cases take turns in batches (round
//!    robin), so that noise from other processes on the machine hits them alike. It prints p50/p90/p99 per case
//!    and the ratios the goals name (`benchmarks/results/2026-11-21-lock-latency.md`, "Ratios against the
//!    goals").
//!
//! Every call must succeed: a failed call of muxlock's (raw included) panics at the end, after the table, and a
//! peer's failures are printed with the table. Resource names cycle over [`NAMES`] per case, so no call meets a
//! key of a call before it.
//!
//! `cargo bench --bench lock` runs both; `cargo test --benches` (no `--bench` flag: criterion's test mode) runs
//! every criterion case once and a table of 5 calls per case, with 2 s round timeouts so a slow machine cannot
//! fail it. `MUXLOCK_BENCH=criterion` or `=table` runs only one part; `MUXLOCK_BENCH_CALLS=N` sets the calls per
//! case of the table (default 20,000; the `redlock` crate, which opens 10 TCP connections per call, gets a fifth).
//! `MUXLOCK_BENCH_BUSY=1` runs a `nice -n 19` busy loop meanwhile: the busy regime (see [`Spinner`]).
//!
//! Not run: the `redlock` crate with a hung node (it sets no read timeout, so its first call blocks forever). Run
//! only a few times, outside criterion, in bench mode: `rslock` with a hung node (about 0.5 s per command, its
//! response timeout) and the `redlock` crate with a node down (it gives up on the first refused connection).
//!
//! Results and the commands that produced them: `benchmarks/results/2026-11-21-lock-latency.md`.

#![allow(missing_docs)] // criterion's macros and the bench's own items need no docs

#[path = "../tests/support/mod.rs"]
mod support;

mod peers;

use std::env;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use criterion::Criterion;
use hdrhistogram::Histogram;
use muxlock::net::{CommandId, Fanout, NodeAddr, Options};
use muxlock::redlock::Config;
use muxlock::resp::{Value, encode_command};
use peers::{Locker, Muxlock, RedlockRs, Rslock};
use support::Cluster;

/// The lease of every lock, and the `PX` of the raw `SET`.
const TTL: Duration = Duration::from_secs(30);
/// Resource names per case, used in turn.
const NAMES: usize = 1000;
/// The node that is hung or down in the faulty scenarios.
const FAULTY: usize = 2;
/// A 40-byte value, as long as muxlock's and close to the peers' (20 random bytes).
const RAW_VALUE: &[u8] = b"0123456789abcdef0123456789abcdef01234567";

// ---------------------------------------------------------------- the clients

/// The round timeout of muxlock's rounds: test mode must not fail on a slow machine; bench mode keeps the
/// default (50 ms).
fn round_timeout(quick: bool) -> Duration {
    if quick {
        Duration::from_secs(2)
    } else {
        Config::default().round_timeout()
    }
}

/// `SET resource value NX PX 30000`, then `DEL resource`, through muxlock's fanout: on one node, the floor a lock
/// call on that connection cannot beat; on 5 nodes, returning at the third reply as an acquisition does, the cost of
/// the fan-out itself (the same requests and replies as an acquisition, without the lock logic).
struct Raw {
    fanout: Fanout,
    /// Replies to wait for: a majority.
    need: usize,
    request: BytesMut,
    held: Option<Vec<u8>>,
    timeout: Duration,
}

impl Raw {
    fn new(urls: &[String], quick: bool) -> Raw {
        let addrs: Vec<NodeAddr> = urls
            .iter()
            .map(|u| u.parse().expect("a node URL"))
            .collect();
        Raw {
            need: addrs.len() / 2 + 1,
            fanout: Fanout::new(addrs, Options::default()).expect("an event poll"),
            request: BytesMut::with_capacity(128),
            held: None,
            timeout: if quick {
                Duration::from_secs(2)
            } else {
                Duration::from_millis(50)
            },
        }
    }

    /// Sends the encoded request to every node and waits for `need` replies that `want` accepts.
    fn round_trip(&mut self, want: impl Fn(&Value) -> bool) -> Result<(), String> {
        let mut round = self.fanout.round(Instant::now() + self.timeout);
        round.send_all(&self.request, 1);
        let mut good = 0;
        while let Some((CommandId { node, .. }, reply)) = round.next() {
            match reply {
                Ok(v) if want(&v) => good += 1,
                reply => return Err(format!("node {node}: unexpected reply {reply:?}")),
            }
            if good == self.need {
                return Ok(());
            }
        }
        Err(format!("{good} replies of {} needed", self.need))
    }
}

impl Locker for Raw {
    fn acquire(&mut self, resource: &[u8]) -> Result<(), String> {
        self.request.clear();
        encode_command(
            &[b"SET", resource, RAW_VALUE, b"NX", b"PX", b"30000"],
            &mut self.request,
        );
        self.round_trip(|v| matches!(v, Value::SimpleString(s) if &s[..] == b"OK"))?;
        self.held = Some(resource.to_vec());
        Ok(())
    }

    fn release(&mut self) -> Result<(), String> {
        let resource = self.held.take().ok_or("nothing held")?;
        self.request.clear();
        encode_command(&[b"DEL", &resource], &mut self.request);
        self.round_trip(|v| *v == Value::Integer(1))
    }

    fn acquire_wait(&mut self, _: &[u8], _: Duration) -> Result<(), String> {
        Err("raw: does not wait".into())
    }
}

// ---------------------------------------------------------------- cases

/// One client in one scenario, with its resource names and its failures.
struct Case {
    /// `raw`, `muxlock`, `muxlock/hung`, `rslock/down`, ...
    group: &'static str,
    /// Node count, shown as the benchmark's last path element (`acquire/5`); `None` for the faulty scenarios.
    nodes: Option<usize>,
    client: Box<dyn Locker>,
    names: Vec<Vec<u8>>,
    next: usize,
    /// Whether a failure fails the bench (muxlock's own cases) or is only reported (the peers).
    must_succeed: bool,
    calls: u64,
    failures: u64,
    first_error: Option<String>,
}

impl Case {
    fn new(group: &'static str, nodes: Option<usize>, client: Box<dyn Locker>) -> Case {
        let tag = format!("bench:{group}:{}", nodes.unwrap_or(0));
        Case {
            group,
            nodes,
            client,
            names: (0..NAMES)
                .map(|i| format!("{tag}:{i}").into_bytes())
                .collect(),
            next: 0,
            must_succeed: group.starts_with("muxlock") || group == "raw",
            calls: 0,
            failures: 0,
            first_error: None,
        }
    }

    /// `acquire/5`, `acquire` (faulty scenarios): what the case's benchmark and table rows are called.
    fn label(&self, op: &str) -> String {
        match self.nodes {
            Some(n) => format!("{}/{op}/{n}", self.group),
            None => format!("{}/{op}", self.group),
        }
    }

    fn failed(&mut self, error: String) {
        self.failures += 1;
        self.first_error.get_or_insert(error);
    }

    /// One acquire and, if it succeeded, one release on the next resource name: how long each took.
    fn cycle(&mut self) -> (Duration, Duration) {
        let name = &self.names[self.next];
        self.next = (self.next + 1) % NAMES;
        self.calls += 1;
        let t0 = Instant::now();
        let acquired = self.client.acquire(name);
        let t1 = Instant::now();
        let released = acquired.is_ok().then(|| self.client.release());
        let t2 = Instant::now();
        if let Err(e) | Ok(Some(Err(e))) = acquired.map(|()| released) {
            self.failed(e);
        }
        (t1 - t0, t2 - t1)
    }
}

/// The part of a cycle a benchmark times.
#[derive(Clone, Copy)]
enum Part {
    Acquire,
    Release,
    Both,
}

impl Part {
    fn of(self, (acquire, release): (Duration, Duration)) -> Duration {
        match self {
            Part::Acquire => acquire,
            Part::Release => release,
            Part::Both => acquire + release,
        }
    }
}

/// The clusters and every case on them.
struct Bench {
    cases: Vec<Case>,
    // Kept for their `Drop`, which stops the servers; declared last so the clients' connections close first.
    _clusters: Vec<Cluster>,
}

impl Bench {
    fn start(quick: bool) -> Bench {
        let healthy = Cluster::start(5);
        let mut hung = Cluster::start(5);
        let mut down = Cluster::start(5);
        let (h, p, d) = (healthy.urls(), hung.urls(), down.urls());
        let mux = |urls: &[String]| Box::new(Muxlock::new(urls, TTL, round_timeout(quick)));
        let rslock = |urls: &[String]| Box::new(Rslock::new(urls, TTL));
        let redlock = |urls: &[String]| Box::new(RedlockRs::new(urls, TTL));
        let mut cases = vec![
            Case::new("raw", None, Box::new(Raw::new(&h[..1], quick))),
            Case::new("raw", Some(5), Box::new(Raw::new(&h, quick))),
        ];
        for n in [1, 3, 5] {
            cases.push(Case::new("muxlock", Some(n), mux(&h[..n])));
        }
        cases.push(Case::new("muxlock/hung", None, mux(&p)));
        cases.push(Case::new("muxlock/down", None, mux(&d)));
        cases.push(Case::new(
            "muxlock/no-clock-check",
            None,
            Box::new(Muxlock::unclocked(&h, TTL, round_timeout(quick))),
        ));
        for n in [1, 3, 5] {
            cases.push(Case::new("rslock", Some(n), rslock(&h[..n])));
        }
        cases.push(Case::new("rslock/down", None, rslock(&d)));
        for n in [1, 3, 5] {
            cases.push(Case::new("redlock", Some(n), redlock(&h[..n])));
        }
        if !quick {
            cases.push(Case::new("rslock/hung", None, rslock(&p)));
            cases.push(Case::new("redlock/down", None, redlock(&d)));
        }
        // Connect and warm up every client before the faults, then check that all went well.
        for case in &mut cases {
            for _ in 0..20 {
                case.cycle();
            }
            assert_eq!(
                case.failures, 0,
                "{}: warm-up failed: {:?}",
                case.group, case.first_error
            );
            case.calls = 0;
        }
        hung.pause(FAULTY);
        down.kill(FAULTY);
        Bench {
            cases,
            _clusters: vec![healthy, hung, down],
        }
    }

    fn case(&mut self, group: &str, nodes: Option<usize>) -> Option<&mut Case> {
        self.cases
            .iter_mut()
            .find(|c| c.group == group && c.nodes == nodes)
    }
}

// ---------------------------------------------------------------- criterion

/// Times `iters` cycles of `case`, counting only `part`.
fn timed(case: &mut Case, part: Part, iters: u64) -> Duration {
    (0..iters).map(|_| part.of(case.cycle())).sum()
}

fn bench(c: &mut Criterion, case: &mut Case, ops: Ops) {
    let mut group = c.benchmark_group(case.group);
    for &(op, part) in ops {
        let id = match case.nodes {
            Some(n) => format!("{op}/{n}"),
            None => op.to_string(),
        };
        group.bench_function(id, |b| b.iter_custom(|iters| timed(case, part, iters)));
    }
    group.finish();
}

/// What a criterion benchmark of one case times: `(name, part)` pairs.
type Ops = &'static [(&'static str, Part)];

const RAW: Ops = &[("set", Part::Acquire), ("set+del", Part::Both)];
const ACQUIRE: Ops = &[("acquire", Part::Acquire), ("acquire+release", Part::Both)];
const ALL: Ops = &[
    ("acquire", Part::Acquire),
    ("release", Part::Release),
    ("acquire+release", Part::Both),
];
const BOTH: Ops = &[("acquire+release", Part::Both)];

fn criterion_part(bench_: &mut Bench) {
    let mut c = Criterion::default().configure_from_args();
    let plan: [(&str, Option<usize>, Ops); 14] = [
        ("raw", None, RAW),
        ("raw", Some(5), RAW),
        ("muxlock", Some(1), ACQUIRE),
        ("muxlock", Some(3), ACQUIRE),
        ("muxlock", Some(5), ALL),
        ("muxlock/hung", None, ALL),
        ("muxlock/down", None, ALL),
        ("rslock", Some(1), BOTH),
        ("rslock", Some(3), BOTH),
        ("rslock", Some(5), BOTH),
        ("rslock/down", None, BOTH),
        ("redlock", Some(1), BOTH),
        ("redlock", Some(3), BOTH),
        ("redlock", Some(5), BOTH),
    ];
    for (group, nodes, ops) in plan {
        let case = bench_.case(group, nodes).expect("a planned case");
        bench(&mut c, case, ops);
    }
    c.final_summary();
}

// ---------------------------------------------------------------- the per-call table

/// Per-call latencies of one case, in nanoseconds.
struct Stats {
    acquire: Histogram<u64>,
    release: Histogram<u64>,
    both: Histogram<u64>,
}

impl Stats {
    fn new() -> Stats {
        let h = || Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        Stats {
            acquire: h(),
            release: h(),
            both: h(),
        }
    }

    fn record(&mut self, (acquire, release): (Duration, Duration)) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.acquire.saturating_record(ns(acquire));
        self.release.saturating_record(ns(release));
        self.both.saturating_record(ns(acquire + release));
    }
}

/// The cases of the table, in the order they take turns.
const TABLE: &[(&str, Option<usize>)] = &[
    ("raw", None),
    ("raw", Some(5)),
    ("muxlock", Some(1)),
    ("muxlock", Some(3)),
    ("muxlock", Some(5)),
    ("muxlock/hung", None),
    ("muxlock/down", None),
    ("muxlock/no-clock-check", None),
    ("rslock", Some(5)),
    ("rslock/down", None),
    ("redlock", Some(5)),
];

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|e| e.to_string(), |s| s.trim().into())
}

fn table_part(bench_: &mut Bench, calls: u64) {
    const BATCH: u64 = 100;
    let mut stats: Vec<Stats> = TABLE.iter().map(|_| Stats::new()).collect();
    // The `redlock` crate costs ~10 TCP connections per call: a fifth of the calls keeps TIME_WAIT sockets few.
    let share = |group: &str| if group == "redlock" { 5 } else { 1 };
    let rounds = calls.div_ceil(BATCH).max(1);
    println!("\nper-call table: {calls} calls per case, in batches of {BATCH}, round robin");
    println!("load before: {}", loadavg());
    let started = Instant::now();
    for round in 0..rounds {
        // Start each round at another case, so that no case always follows the same one.
        for k in 0..TABLE.len() {
            let i = (k + round as usize) % TABLE.len();
            let (group, nodes) = TABLE[i];
            let case = bench_.case(group, nodes).expect("a table case");
            let batch = (BATCH / share(group)).min(calls).max(1);
            for _ in 0..batch {
                let cycle = case.cycle();
                stats[i].record(cycle);
            }
        }
    }
    println!(
        "load after: {} ({:.1} s)\n",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
    println!("| case | calls | failed | p50 µs | p90 µs | p99 µs | max µs |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut p50 = std::collections::HashMap::new();
    for (&(group, nodes), s) in TABLE.iter().zip(&stats) {
        let case = bench_.case(group, nodes).expect("a table case");
        let rows: [(&str, &Histogram<u64>); 3] = if group == "raw" {
            [
                ("set", &s.acquire),
                ("del", &s.release),
                ("set+del", &s.both),
            ]
        } else {
            [
                ("acquire", &s.acquire),
                ("release", &s.release),
                ("acquire+release", &s.both),
            ]
        };
        for (op, h) in rows {
            let label = case.label(op);
            println!(
                "| {label} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                h.len(),
                case.failures,
                us(h.value_at_quantile(0.5)),
                us(h.value_at_quantile(0.9)),
                us(h.value_at_quantile(0.99)),
                us(h.max()),
            );
            p50.insert(label, h.value_at_quantile(0.5) as f64);
        }
    }
    let ratio = |a: &str, b: &str| p50[a] / p50[b];
    println!("\n| ratio of p50s | value | goal |");
    println!("|---|---:|---|");
    let goals: &[(&str, &str, &str)] = &[
        ("muxlock/acquire/5", "raw/set", "≤ 2.0"),
        ("muxlock/acquire+release/5", "raw/set+del", "≤ 2.5"),
        ("muxlock/hung/acquire", "muxlock/acquire/5", "≤ 1.5"),
        ("muxlock/hung/release", "muxlock/release/5", "≤ 1.5"),
        ("muxlock/down/acquire", "muxlock/acquire/5", "≤ 1.5"),
        ("muxlock/down/release", "muxlock/release/5", "≤ 1.5"),
        // The clock check's two `TIME`s per node ride in the acquisition's own write: no round trip of their own.
        (
            "muxlock/acquire/5",
            "muxlock/no-clock-check/acquire",
            "≤ 1.05",
        ),
        ("raw/set/5", "raw/set", ""),
        ("muxlock/acquire/5", "raw/set/5", ""),
        ("muxlock/acquire+release/5", "raw/set+del/5", ""),
        ("muxlock/acquire/1", "raw/set", ""),
        ("muxlock/acquire/3", "raw/set", ""),
        ("rslock/acquire+release/5", "muxlock/acquire+release/5", ""),
        (
            "rslock/down/acquire+release",
            "muxlock/down/acquire+release",
            "",
        ),
        ("redlock/acquire+release/5", "muxlock/acquire+release/5", ""),
    ];
    for (a, b, goal) in goals {
        println!("| {a} / {b} | {:.2} | {goal} |", ratio(a, b));
    }
}

// ---------------------------------------------------------------- peers with a hung or down node

/// A few timed calls, outside criterion: the peers' behaviour with a node hung or down, which is too slow or too
/// broken for a benchmark.
fn fault_probes(bench_: &mut Bench) {
    println!();
    for (group, calls) in [("rslock/hung", 3), ("redlock/down", 5)] {
        let Some(case) = bench_.case(group, None) else {
            continue;
        };
        let before = case.failures;
        let times: Vec<String> = (0..calls)
            .map(|_| {
                let (a, r) = case.cycle();
                format!(
                    "{:.0}+{:.0} ms",
                    a.as_secs_f64() * 1e3,
                    r.as_secs_f64() * 1e3
                )
            })
            .collect();
        println!(
            "{group}: {calls} acquire+release calls, {} failed ({}); acquire+release each: {}",
            case.failures - before,
            case.first_error.as_deref().unwrap_or("no error"),
            times.join(", ")
        );
    }
    println!(
        "redlock/hung: not run: the redlock crate sets no read timeout, so its first call blocks forever"
    );
}

// ---------------------------------------------------------------- the busy regime

/// A `nice -n 19` busy loop, for `MUXLOCK_BENCH_BUSY=1`: it keeps one vCPU from ever halting, and gives way to any
/// other runnable process at once.
///
/// On this VM (`haltpoll.guest_halt_poll_ns=0`), a vCPU with nothing to run halts at once, and waking it again costs
/// tens of microseconds: on an idle machine, a one-node round trip is then *slower* than a 5-node fan-out (whose
/// servers keep both vCPUs busy), and ratios to it say little. With one vCPU kept busy, wake-ups are cheap and the
/// CPU cost of each call decides, as on a loaded machine.
struct Spinner(std::process::Child);

impl Spinner {
    fn start() -> Spinner {
        let child = std::process::Command::new("nice")
            .args(["-n", "19", "sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("nice and sh");
        println!("busy regime: a nice 19 busy loop runs (pid {})", child.id());
        Spinner(child)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        // `nice` execs `sh`, so this is the loop's own PID.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------- main

fn main() {
    let args: Vec<String> = env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    // Criterion's own rule: without `--bench` (`cargo test --benches`) or with `--test`, it only tests.
    let quick = !flag("--bench") || flag("--test");
    let only = env::var("MUXLOCK_BENCH").unwrap_or_default();
    let calls = if quick {
        5
    } else {
        env::var("MUXLOCK_BENCH_CALLS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20_000)
    };
    let mut bench_ = Bench::start(quick);
    let _spinner =
        (!quick && env::var("MUXLOCK_BENCH_BUSY").is_ok_and(|v| v == "1")).then(Spinner::start);
    if only != "table" {
        criterion_part(&mut bench_);
    }
    if only != "criterion" && !flag("--list") {
        table_part(&mut bench_, calls);
        if !quick {
            fault_probes(&mut bench_);
        }
    }
    let failed: Vec<String> = bench_
        .cases
        .iter()
        .filter(|c| c.failures > 0)
        .map(|c| {
            format!(
                "{}{}: {} of {} calls failed, first: {}",
                c.group,
                c.nodes.map(|n| format!("/{n}")).unwrap_or_default(),
                c.failures,
                c.calls,
                c.first_error.as_deref().unwrap_or("?")
            )
        })
        .collect();
    for line in &failed {
        println!("FAILED {line}");
    }
    let ours = bench_
        .cases
        .iter()
        .any(|c| c.must_succeed && c.failures > 0);
    assert!(
        !ours,
        "muxlock calls failed: the numbers above are not valid"
    );
}
