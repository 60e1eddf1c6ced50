//! Hand-off and fairness: 8 contenders, each with a client of its own (as 8 processes would have), want one
//! resource. Each loops: wait for the lock (the alternative's own way of waiting, see `lockers`), hold it for
//! 1 ms, release it, and ask again at once. The hand-off latency is the time from one holder's release
//! returning to the next holder's acquire returning; fairness is how the acquisitions spread over the
//! contenders. The holds also go through the mutual-exclusion checker.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::Settings;
use crate::lockers::{BOUND, Call, Factory};
use crate::measure::{Cpu, histogram, median, us};
use crate::support::checker::{Hold, mono_ns, overlaps};

pub const CONTENDERS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);

pub struct Row {
    pub name: String,
    pub handoff: Histogram<u64>,
    /// Acquisitions in the windows, per contender (summed over repetitions).
    pub per_contender: Vec<u64>,
    /// Hand-offs in which the releaser got the lock again.
    pub to_self: u64,
    pub rates: Vec<f64>,
    pub gave_up: u64,
    pub failed: u64,
    pub hung: u64,
    pub first_error: Option<String>,
    pub overlaps: usize,
    pub cpu: Cpu,
}

/// One hold: who, when its acquire returned, when its release was called and when it returned (mono ns).
#[derive(Clone, Copy)]
struct Turn {
    who: usize,
    acquired: u64,
    release_called: u64,
    released: u64,
}

#[derive(Default)]
struct Tally {
    turns: Vec<Turn>,
    gave_up: u64,
    failed: u64,
    hung: u64,
    first_error: Option<String>,
}

pub fn run(factories: &[&dyn Factory], s: &Settings) -> Vec<Row> {
    let names = vec!["handoff".to_owned()];
    for f in factories {
        f.locker(false, Duration::from_secs(30))
            .prepare(&names)
            .unwrap_or_else(|e| panic!("{}: {e}", f.name()));
    }
    let mut rows: Vec<Row> = factories
        .iter()
        .map(|f| Row {
            name: f.name(),
            handoff: histogram(),
            per_contender: vec![0; CONTENDERS],
            to_self: 0,
            rates: Vec::new(),
            gave_up: 0,
            failed: 0,
            hung: 0,
            first_error: None,
            overlaps: 0,
            cpu: Cpu::default(),
        })
        .collect();
    for rep in 0..s.handoff_reps {
        for k in 0..factories.len() {
            let i = (rep + k) % factories.len();
            let (tally, cpu, window) = case(factories[i], s);
            let row = &mut rows[i];
            absorb(row, tally, window, s);
            eprintln!(
                "  hand-off rep {rep}: {:<32} {:>6.0} acquisitions/s, steal {:.1} %",
                row.name,
                row.rates.last().copied().unwrap_or(0.0),
                cpu.steal_percent()
            );
            row.cpu.add(cpu);
        }
    }
    rows
}

fn absorb(row: &mut Row, tally: Tally, (start, end): (u64, u64), s: &Settings) {
    let mut turns = tally.turns;
    turns.sort_by_key(|t| t.acquired);
    let holds: Vec<Hold> = turns
        .iter()
        .map(|t| Hold {
            resource: "handoff".into(),
            holder: t.who.to_string(),
            start: t.acquired,
            end: t.release_called,
        })
        .collect();
    row.overlaps += overlaps(&holds).len();
    let mut count = 0;
    for w in turns.windows(2) {
        let (prev, next) = (w[0], w[1]);
        if next.acquired < start || next.acquired >= end {
            continue;
        }
        count += 1;
        row.per_contender[next.who] += 1;
        if next.who == prev.who {
            row.to_self += 1;
        }
        // A waiter's grant can arrive before the releaser's own reply: a hand-off of zero.
        row.handoff
            .saturating_record(next.acquired.saturating_sub(prev.released).max(1));
    }
    row.rates.push(count as f64 / s.handoff_secs.as_secs_f64());
    row.gave_up += tally.gave_up;
    row.failed += tally.failed;
    row.hung += tally.hung;
    if row.first_error.is_none() {
        row.first_error = tally.first_error;
    }
}

fn case(factory: &dyn Factory, s: &Settings) -> (Tally, Cpu, (u64, u64)) {
    let (tx, rx) = mpsc::channel::<Tally>();
    let warm = Duration::from_millis(300);
    let start = Instant::now() + warm;
    let end = start + s.handoff_secs;
    let window = (
        mono_ns() + warm.as_nanos() as u64,
        mono_ns() + (warm + s.handoff_secs).as_nanos() as u64,
    );
    for who in 0..CONTENDERS {
        let mut locker = factory.locker(false, Duration::from_secs(30));
        let tx = tx.clone();
        thread::spawn(move || {
            let mut tally = Tally::default();
            while Instant::now() < end {
                match locker.acquire("handoff") {
                    Call::Ok(true) => {
                        let acquired = mono_ns();
                        thread::sleep(HOLD);
                        let release_called = mono_ns();
                        let released = locker.release();
                        let done = mono_ns();
                        match released {
                            Call::Ok(()) => tally.turns.push(Turn {
                                who,
                                acquired,
                                release_called,
                                released: done,
                            }),
                            Call::Failed(e) => {
                                tally.failed += 1;
                                tally.first_error.get_or_insert(format!("release: {e}"));
                            }
                            Call::Hung => tally.hung += 1,
                        }
                    }
                    Call::Ok(false) => tally.gave_up += 1,
                    Call::Failed(e) => {
                        tally.failed += 1;
                        tally.first_error.get_or_insert(format!("acquire: {e}"));
                        thread::sleep(Duration::from_millis(10));
                    }
                    Call::Hung => tally.hung += 1,
                }
            }
            drop(locker);
            let _ = tx.send(tally);
        });
    }
    drop(tx);
    let servers = factory.servers();
    thread::sleep(start.saturating_duration_since(Instant::now()));
    let before = Cpu::now(&servers);
    thread::sleep(end.saturating_duration_since(Instant::now()));
    let cpu = Cpu::now(&servers).since(before);
    let mut total = Tally::default();
    let deadline = end + 3 * BOUND;
    for _ in 0..CONTENDERS {
        let Ok(t) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            total
                .first_error
                .get_or_insert("a contender did not return".into());
            break;
        };
        total.turns.extend(t.turns);
        total.gave_up += t.gave_up;
        total.failed += t.failed;
        total.hung += t.hung;
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
    }
    (total, cpu, window)
}

pub fn print(rows: &[Row]) {
    println!("\n### Hand-off: {CONTENDERS} contenders, one resource, 1 ms holds\n");
    println!(
        "| lock | acquisitions/s (median) | hand-off p50 µs | p90 | p99 | per contender min–max | to the releaser \
         again | gave up (2 s) | failed | hung | overlaps | steal |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let n: u64 = r.per_contender.iter().sum();
        let min = r.per_contender.iter().min().copied().unwrap_or(0);
        let max = r.per_contender.iter().max().copied().unwrap_or(0);
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {min}–{max} | {:.0} % | {} | {} | {} | {} | {:.1} % |",
            r.name,
            median(&r.rates),
            us(&r.handoff, 0.5),
            us(&r.handoff, 0.9),
            us(&r.handoff, 0.99),
            100.0 * r.to_self as f64 / n.max(1) as f64,
            r.gave_up,
            r.failed,
            r.hung,
            r.overlaps,
            r.cpu.steal_percent(),
        );
    }
    for r in rows {
        if let Some(e) = &r.first_error {
            println!("- {}: first failure: {e}", r.name);
        }
    }
}
