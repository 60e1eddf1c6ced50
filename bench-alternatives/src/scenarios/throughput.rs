//! Throughput: 16 threads, each locking and releasing resources of its own (64 names per thread, cycled), so no
//! two threads contend. Clients as each is meant to be used in one process: one muxlock `LockManager` and one
//! ZooKeeper session shared by the threads; a database connection per thread (a session lock belongs to its
//! connection); a Redis connection per thread for the old scheme. A case is one alternative: 0.3 s of warm-up,
//! then the measured window; a cycle counts when its release returns inside the window. The alternatives take
//! turns, the first rotating with the repetition.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::Settings;
use crate::lockers::{BOUND, Call, Factory};
use crate::measure::{Cpu, histogram, median, record, us};

pub const THREADS: usize = 16;
const NAMES_PER_THREAD: usize = 64;

pub struct Row {
    pub name: String,
    pub rates: Vec<f64>,
    pub latency: Histogram<u64>,
    pub failed: u64,
    pub hung: u64,
    pub blocked: usize,
    pub first_error: Option<String>,
    pub cpu: Cpu,
    pub secs: f64,
}

impl Row {
    pub fn median(&self) -> f64 {
        median(&self.rates)
    }
}

struct Tally {
    cycles: u64,
    latency: Histogram<u64>,
    failed: u64,
    hung: u64,
    first_error: Option<String>,
}

fn name(t: usize, k: usize) -> String {
    format!("tp-{t}-{k}")
}

pub fn run(factories: &[&dyn Factory], s: &Settings) -> Vec<Row> {
    let all: Vec<String> = (0..THREADS)
        .flat_map(|t| (0..NAMES_PER_THREAD).map(move |k| name(t, k)))
        .collect();
    for f in factories {
        f.locker(true, Duration::from_secs(30))
            .prepare(&all)
            .unwrap_or_else(|e| panic!("{}: {e}", f.name()));
    }
    let mut rows: Vec<Row> = factories
        .iter()
        .map(|f| Row {
            name: f.name(),
            rates: Vec::new(),
            latency: histogram(),
            failed: 0,
            hung: 0,
            blocked: 0,
            first_error: None,
            cpu: Cpu::default(),
            secs: 0.0,
        })
        .collect();
    for rep in 0..s.tp_reps {
        for k in 0..factories.len() {
            let i = (rep + k) % factories.len();
            let (tally, blocked, cpu) = case(factories[i], s);
            let row = &mut rows[i];
            let rate = tally.cycles as f64 / s.tp_secs.as_secs_f64();
            eprintln!(
                "  throughput rep {rep}: {:<32} {rate:>8.0} cycles/s, steal {:.1} %",
                row.name,
                cpu.steal_percent()
            );
            row.rates.push(rate);
            row.latency.add(&tally.latency).expect("same bounds");
            row.failed += tally.failed;
            row.hung += tally.hung;
            row.blocked += blocked;
            if row.first_error.is_none() {
                row.first_error = tally.first_error;
            }
            row.cpu.add(cpu);
            row.secs += s.tp_secs.as_secs_f64();
        }
    }
    rows
}

fn case(factory: &dyn Factory, s: &Settings) -> (Tally, usize, Cpu) {
    let (tx, rx) = mpsc::channel::<Tally>();
    let start = Instant::now() + Duration::from_millis(300);
    let end = start + s.tp_secs;
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let mut locker = factory.locker(true, Duration::from_secs(30));
        let tx = tx.clone();
        handles.push(thread::spawn(move || {
            let mut tally = Tally {
                cycles: 0,
                latency: histogram(),
                failed: 0,
                hung: 0,
                first_error: None,
            };
            let mut k = 0;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let n = name(t, k % NAMES_PER_THREAD);
                k += 1;
                let fail = |tally: &mut Tally, what: &str, e: String| {
                    tally.failed += 1;
                    tally
                        .first_error
                        .get_or_insert_with(|| format!("{what}: {e}"));
                };
                match locker.try_acquire(&n) {
                    Call::Ok(true) => {}
                    Call::Ok(false) => {
                        fail(
                            &mut tally,
                            "acquire",
                            "held by someone else (no contention here!)".into(),
                        );
                        continue;
                    }
                    Call::Failed(e) => {
                        fail(&mut tally, "acquire", e);
                        continue;
                    }
                    Call::Hung => {
                        tally.hung += 1;
                        continue;
                    }
                }
                match locker.release() {
                    Call::Ok(()) => {
                        let t1 = Instant::now();
                        if t1 >= start && t1 < end {
                            tally.cycles += 1;
                            record(&mut tally.latency, t1 - t0);
                        }
                    }
                    Call::Failed(e) => fail(&mut tally, "release", e),
                    Call::Hung => tally.hung += 1,
                }
            }
            drop(locker);
            let _ = tx.send(tally);
        }));
    }
    drop(tx);
    let servers = factory.servers();
    thread::sleep(start.saturating_duration_since(Instant::now()));
    let before = Cpu::now(&servers);
    thread::sleep(end.saturating_duration_since(Instant::now()));
    let cpu = Cpu::now(&servers).since(before);
    let mut total = Tally {
        cycles: 0,
        latency: histogram(),
        failed: 0,
        hung: 0,
        first_error: None,
    };
    // Every call is bounded, so every thread ends: at most two bounded calls after the window.
    let deadline = end + 3 * BOUND;
    let mut reported = 0;
    while reported < THREADS {
        let Ok(t) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            break;
        };
        total.cycles += t.cycles;
        total.latency.add(&t.latency).expect("same bounds");
        total.failed += t.failed;
        total.hung += t.hung;
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
        reported += 1;
    }
    if reported == THREADS {
        for h in handles {
            let _ = h.join();
        }
    }
    (total, THREADS - reported, cpu)
}

pub fn print(rows: &[Row]) {
    println!("\n### Throughput: {THREADS} threads, distinct resources\n");
    println!(
        "| lock | cycles/s (median) | min–max | failed | hung | p50 µs | p99 µs | CPU µs/cycle (bench + servers) | \
         cores busy (bench + servers) | steal |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let min = r.rates.iter().copied().fold(f64::INFINITY, f64::min);
        let max = r.rates.iter().copied().fold(0.0, f64::max);
        let cycles = (r.median() * r.secs).max(1.0);
        let _ = cycles;
        let total_cycles = r.latency.len().max(1) as f64;
        println!(
            "| {} | {:.0} | {min:.0}–{max:.0} | {} | {} | {:.0} | {:.0} | {:.0} + {:.0} | {:.2} + {:.2} | {:.1} % |",
            r.name,
            r.median(),
            r.failed,
            r.hung,
            us(&r.latency, 0.5),
            us(&r.latency, 0.99),
            r.cpu.bench.as_secs_f64() * 1e6 / total_cycles,
            r.cpu.servers.as_secs_f64() * 1e6 / total_cycles,
            r.cpu.bench.as_secs_f64() / r.secs.max(1e-9),
            r.cpu.servers.as_secs_f64() / r.secs.max(1e-9),
            r.cpu.steal_percent(),
        );
    }
    for r in rows {
        if let Some(e) = &r.first_error {
            println!("- {}: {} failed calls, first: {e}", r.name, r.failed);
        }
        if r.blocked > 0 {
            println!(
                "- {}: {} threads had not returned 6 s after the window",
                r.name, r.blocked
            );
        }
    }
}
