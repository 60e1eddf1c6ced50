//! Uncontended latency: one client per alternative, one attempt to lock a free resource, then its release, over
//! and over; names cycle over 1,000 per alternative. The alternatives take turns in batches of 100 cycles, so
//! that the machine's noise (steal, other jobs) falls on all of them alike.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::Settings;
use crate::lockers::{Call, Factory, Locker};
use crate::measure::{Cpu, histogram, record, us};

pub struct Row {
    pub name: String,
    pub acquire: Histogram<u64>,
    pub release: Histogram<u64>,
    pub cycle: Histogram<u64>,
    pub failed: u64,
    pub hung: u64,
    pub first_error: Option<String>,
    pub cpu: Cpu,
}

const NAMES: usize = 1000;
const BATCH: usize = 100;

fn names() -> Vec<String> {
    (0..NAMES).map(|i| format!("lat-{i}")).collect()
}

pub fn run(factories: &[&dyn Factory], s: &Settings) -> Vec<Row> {
    let names = names();
    let ttl = Duration::from_secs(30);
    let mut lockers: Vec<Box<dyn Locker>> = factories.iter().map(|f| f.locker(true, ttl)).collect();
    let mut rows: Vec<Row> = factories
        .iter()
        .map(|f| Row {
            name: f.name(),
            acquire: histogram(),
            release: histogram(),
            cycle: histogram(),
            failed: 0,
            hung: 0,
            first_error: None,
            cpu: Cpu::default(),
        })
        .collect();
    for (locker, row) in lockers.iter_mut().zip(&rows) {
        locker
            .prepare(&names)
            .unwrap_or_else(|e| panic!("{}: {e}", row.name));
    }
    let mut next = vec![0usize; factories.len()];
    // Warm-up: connections, prepared statements, the JIT of the JVM servers. Not recorded.
    for (i, locker) in lockers.iter_mut().enumerate() {
        for _ in 0..s.latency_warmup {
            let name = &names[next[i] % NAMES];
            next[i] += 1;
            if locker.try_acquire(name) == Call::Ok(true) {
                let _ = locker.release();
            }
        }
    }
    let batches = s.latency_samples.div_ceil(BATCH);
    for b in 0..batches {
        for k in 0..factories.len() {
            // The first alternative of each batch rotates.
            let i = (b + k) % factories.len();
            let servers = factories[i].servers();
            let before = Cpu::now(&servers);
            let (locker, row) = (&mut lockers[i], &mut rows[i]);
            for _ in 0..BATCH {
                let name = &names[next[i] % NAMES];
                next[i] += 1;
                let t0 = Instant::now();
                match locker.try_acquire(name) {
                    Call::Ok(true) => {}
                    other => {
                        tally_failure(row, other, "acquire");
                        continue;
                    }
                }
                let t1 = Instant::now();
                let released = locker.release();
                let t2 = Instant::now();
                if released.is_ok() {
                    record(&mut row.acquire, t1 - t0);
                    record(&mut row.release, t2 - t1);
                    record(&mut row.cycle, t2 - t0);
                } else {
                    tally_failure(row, released.map_held(), "release");
                }
            }
            row.cpu.add(Cpu::now(&servers).since(before));
        }
    }
    rows
}

fn tally_failure(row: &mut Row, call: Call<bool>, what: &str) {
    match call {
        Call::Hung => row.hung += 1,
        Call::Failed(e) => {
            row.failed += 1;
            row.first_error
                .get_or_insert_with(|| format!("{what}: {e}"));
        }
        Call::Ok(_) => {
            row.failed += 1;
            row.first_error
                .get_or_insert_with(|| format!("{what}: held by someone else (uncontended!)"));
        }
    }
}

trait MapHeld {
    fn map_held(self) -> Call<bool>;
}

impl MapHeld for Call<()> {
    fn map_held(self) -> Call<bool> {
        match self {
            Call::Ok(()) => Call::Ok(true),
            Call::Failed(e) => Call::Failed(e),
            Call::Hung => Call::Hung,
        }
    }
}

pub fn print(rows: &[Row]) {
    println!("\n### Uncontended acquire + release\n");
    println!(
        "| lock | cycle p50 µs | p90 | p99 | p99.9 | acquire p50 µs | release p50 µs | cycles | failed | hung | \
         CPU µs/cycle (bench + servers) | steal |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let n = r.cycle.len().max(1) as f64;
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {:.0} + {:.0} | {:.1} % |",
            r.name,
            us(&r.cycle, 0.5),
            us(&r.cycle, 0.9),
            us(&r.cycle, 0.99),
            us(&r.cycle, 0.999),
            us(&r.acquire, 0.5),
            us(&r.release, 0.5),
            r.cycle.len(),
            r.failed,
            r.hung,
            r.cpu.bench.as_secs_f64() * 1e6 / n,
            r.cpu.servers.as_secs_f64() * 1e6 / n,
            r.cpu.steal_percent(),
        );
    }
    for r in rows {
        if let Some(e) = &r.first_error {
            println!("- {}: first failure: {e}", r.name);
        }
    }
}
