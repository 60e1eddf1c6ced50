//! What `benches/throughput.rs` measures besides its callers' tallies (CPU time from `/proc`), and how it reports
//! the cases: the markdown table and the goals' ratios.

use std::fs;
use std::time::Duration;

use super::caller::{Step, Tally};
use super::{Client, GRACE, Settings};
use crate::support::process::cpu_time;

/// The machine's CPU time so far (all fields of `/proc/stat`'s `cpu` line) and the part of it stolen by the
/// hypervisor (field 8): on a VM whose host is busy, vCPUs are taken away for milliseconds at a time, and any
/// thread may freeze that long.
fn machine_ticks() -> (u64, u64) {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    (fields.iter().sum(), fields.get(7).copied().unwrap_or(0))
}

/// CPU used so far by this process and by the servers, and the machine's ticks (all, stolen).
#[derive(Clone, Copy, Default)]
pub struct Cpu {
    pub bench: Duration,
    pub servers: Duration,
    pub ticks: u64,
    pub stolen: u64,
}

impl Cpu {
    pub fn now(servers: &[u32]) -> Cpu {
        let (ticks, stolen) = machine_ticks();
        Cpu {
            bench: cpu_time("self"),
            servers: servers.iter().map(|pid| cpu_time(&pid.to_string())).sum(),
            ticks,
            stolen,
        }
    }

    /// The CPU used from `before` to `self`.
    pub fn since(self, before: Cpu) -> Cpu {
        Cpu {
            bench: self.bench.saturating_sub(before.bench),
            servers: self.servers.saturating_sub(before.servers),
            ticks: self.ticks.saturating_sub(before.ticks),
            stolen: self.stolen.saturating_sub(before.stolen),
        }
    }

    /// The share of the machine's CPU time the hypervisor stole, in percent.
    pub fn steal_percent(&self) -> f64 {
        100.0 * self.stolen as f64 / self.ticks.max(1) as f64
    }
}

/// Every run of one (thread count, client) pair.
pub struct Row {
    pub threads: usize,
    pub client: Client,
    /// Cycles per second of each repetition, in repetition order.
    pub rates: Vec<f64>,
    pub tally: Tally,
    pub blocked: usize,
    cpu: Cpu,
}

impl Row {
    pub fn new(threads: usize, client: Client) -> Row {
        Row {
            threads,
            client,
            rates: Vec::new(),
            tally: Tally::new(),
            blocked: 0,
            cpu: Cpu::default(),
        }
    }

    /// Adds one repetition's run of `secs` seconds: returns its cycles per second.
    pub fn add(&mut self, tally: Tally, blocked: usize, cpu: Cpu, secs: f64) -> f64 {
        let rate = tally.cycles as f64 / secs;
        self.rates.push(rate);
        self.tally.merge(tally);
        self.blocked += blocked;
        self.cpu.bench += cpu.bench;
        self.cpu.servers += cpu.servers;
        self.cpu.ticks += cpu.ticks;
        self.cpu.stolen += cpu.stolen;
        rate
    }

    /// Whether a call failed or a caller blocked.
    pub fn went_wrong(&self) -> bool {
        self.failures() > 0 || self.blocked > 0
    }

    pub fn median(&self) -> f64 {
        median(&self.rates)
    }

    pub fn failures(&self) -> u64 {
        self.tally.failures.iter().sum()
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn min_max(values: &[f64]) -> (f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

impl Row {
    /// `(min, max)` cycles per second over the repetitions.
    pub fn range(&self) -> (f64, f64) {
        min_max(&self.rates)
    }

    /// Client and server CPU µs per cycle.
    pub fn cpu_per_cycle(&self) -> (f64, f64) {
        let cycles = self.tally.cycles.max(1) as f64;
        (
            self.cpu.bench.as_secs_f64() * 1e6 / cycles,
            self.cpu.servers.as_secs_f64() * 1e6 / cycles,
        )
    }

    /// The share of the machine's CPU time stolen during the measured windows, in percent.
    pub fn steal(&self) -> f64 {
        self.cpu.steal_percent()
    }
}

pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg").map_or_else(|e| e.to_string(), |s| s.trim().into())
}

pub fn print_table(rows: &[Row], s: &Settings) {
    let measured = s.secs.as_secs_f64() * s.reps as f64;
    println!(concat!(
        "| threads | client | cycles/s (median) | min–max | failed | blocked | p50 µs | p99 µs ",
        "| bench CPU | servers CPU | CPU µs/cycle (bench + servers) | steal |"
    ));
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let (min, max) = min_max(&row.rates);
        let h = &row.tally.latency;
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        let cycles = row.tally.cycles.max(1) as f64;
        let per_cycle = |d: Duration| d.as_secs_f64() * 1e6 / cycles;
        println!(
            "| {} | {} | {:.0} | {min:.0}–{max:.0} | {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} + {:.0} | {:.0} % |",
            row.threads,
            row.client.name(),
            row.median(),
            row.failures(),
            row.blocked,
            us(0.5),
            us(0.99),
            row.cpu.bench.as_secs_f64() / measured,
            row.cpu.servers.as_secs_f64() / measured,
            per_cycle(row.cpu.bench),
            per_cycle(row.cpu.servers),
            row.cpu.steal_percent(),
        );
    }
    println!(
        "\nbench CPU, servers CPU: cores busy on average during the measured windows (2 vCPUs in all). steal: the \
         share of the machine's CPU time the hypervisor took away meanwhile (/proc/stat)."
    );
    for row in rows {
        for (step, what) in [(Step::Acquire, "acquire"), (Step::Release, "release")] {
            let i = step as usize;
            if let Some(e) = &row.tally.first_error[i] {
                println!(
                    "FAILED {} × {}: {} failed {what} calls, first: {e}",
                    row.threads,
                    row.client.name(),
                    row.tally.failures[i]
                );
            }
        }
        if row.blocked > 0 {
            println!(
                "BLOCKED {} × {}: {} callers had not returned {} s after their window",
                row.threads,
                row.client.name(),
                row.blocked,
                GRACE.as_secs()
            );
        }
    }
}

pub fn print_goals(rows: &[Row], s: &Settings) {
    let row = |threads: usize, client: Client| {
        rows.iter()
            .find(|r| r.threads == threads && r.client == client)
    };
    println!("\n| what | value (ratio of medians) | range over repetitions | goal | verdict |");
    println!("|---|---:|---:|---|---|");
    let ratios = [
        (16, Client::Rslock, 3.0),
        (16, Client::Quorum, 2.0),
        (64, Client::Quorum, 2.0),
    ];
    for (threads, peer, goal) in ratios {
        let label = format!("{threads} threads: muxlock/shared ÷ {}", peer.name());
        let (Some(ours), Some(theirs)) = (row(threads, Client::Shared), row(threads, peer)) else {
            println!("| {label} | not run | | ≥ {goal} | |");
            continue;
        };
        print_ratio(&label, ours, theirs, goal);
    }
    for client in [Client::Shared, Client::PerThread] {
        let counts: Vec<String> = s
            .threads
            .iter()
            .filter_map(|&t| row(t, client).map(|r| format!("{t}: {}", r.failures())))
            .collect();
        let all: u64 = rows
            .iter()
            .filter(|r| r.client == client)
            .map(Row::failures)
            .sum();
        let verdict = if all == 0 { "met" } else { "missed" };
        println!(
            "| failed {} calls per thread count | {} | | 0 | {verdict} |",
            client.name(),
            counts.join(", ")
        );
    }
}

/// One row of a goals table: `ours` ÷ `theirs` (ratio of medians, and its range over the repetitions) against
/// `goal`.
pub fn print_ratio(label: &str, ours: &Row, theirs: &Row, goal: f64) {
    let value = ours.median() / theirs.median();
    let per_rep: Vec<f64> = ours
        .rates
        .iter()
        .zip(&theirs.rates)
        .map(|(a, b)| a / b)
        .collect();
    let (min, max) = min_max(&per_rep);
    let verdict = if value >= goal { "met" } else { "missed" };
    println!("| {label} | {value:.2} | {min:.2}–{max:.2} | ≥ {goal} | {verdict} |");
}
