//! `muxlock bench`: acquire + release cycles from N threads on one shared manager for a while, then latency
//! percentiles (hdrhistogram), throughput and per-node figures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args as ClapArgs;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use muxlock::LockManager;
use serde::Serialize;

use crate::cmd::ttl;
use crate::duration::{self, millis};
use crate::exit::{self, CliError};
use crate::nodes::Conn;
use crate::output;

/// Measure acquire + release latency and throughput against the nodes.
///
/// THREADS threads share one lock manager (as an application would) and, for --duration, each acquires one of
/// RESOURCES resources (one attempt), releases it at once, and starts again. With fewer resources than threads they
/// contend: a held resource counts as a conflict, not a cycle. Prints p50/p90/p99/p99.9 of the acquisition and of
/// the whole cycle, cycles per second and each node's figures; a live progress bar on a terminal, plain lines
/// otherwise.
#[derive(ClapArgs)]
#[command(
    after_help = "Example:\n  muxlock bench --threads 4 --duration 10s\n  muxlock bench --threads 8 --resources 2 --json"
)]
pub struct Args {
    /// Threads acquiring and releasing.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: u32,

    /// How long to measure (after one warm-up cycle).
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = positive)]
    pub duration: Duration,

    /// How many resources the threads cycle through.
    ///
    /// Default: one per thread (no contention).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub resources: Option<u32>,

    /// The lease of each acquisition.
    ///
    /// Each is released at once, so it matters only if a release is lost.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = ttl)]
    pub ttl: Duration,

    /// Print the results as a JSON object.
    ///
    /// Progress still goes to a terminal's stderr.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub conn: Conn,
}

fn positive(s: &str) -> Result<Duration, String> {
    match duration::parse(s)? {
        d if d.is_zero() => Err("the duration must be more than zero".into()),
        d => Ok(d),
    }
}

/// One thread's figures; the progress display reads them while the thread runs.
struct Tally {
    acquire: Histogram<u64>,
    cycle: Histogram<u64>,
    conflicts: u64,
    errors: u64,
    last_error: Option<String>,
}

impl Tally {
    fn new() -> Result<Tally, CliError> {
        Ok(Tally {
            acquire: histogram()?,
            cycle: histogram()?,
            conflicts: 0,
            errors: 0,
            last_error: None,
        })
    }

    fn add(&mut self, other: &Tally) {
        // Same bounds on both sides: adding cannot fail.
        let _ = self.acquire.add(&other.acquire);
        let _ = self.cycle.add(&other.cycle);
        self.conflicts += other.conflicts;
        self.errors += other.errors;
        if other.last_error.is_some() {
            self.last_error.clone_from(&other.last_error);
        }
    }
}

/// Microseconds from 1 µs to 60 s, 3 significant digits.
fn histogram() -> Result<Histogram<u64>, CliError> {
    Histogram::new_with_bounds(1, 60_000_000, 3)
        .map_err(|e| CliError::new(exit::SOFTWARE, "internal", format!("histogram: {e}")))
}

fn lock(t: &Mutex<Tally>) -> MutexGuard<'_, Tally> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Serialize)]
struct Results {
    threads: u32,
    resources: u32,
    nodes: usize,
    duration_ms: u64,
    ttl_ms: u64,
    cycles: u64,
    conflicts: u64,
    errors: u64,
    cycles_per_s: f64,
    latency_us: Latency,
    per_node: Vec<NodeFigures>,
}

#[derive(Serialize)]
struct Latency {
    acquire: Percentiles,
    cycle: Percentiles,
}

#[derive(Serialize)]
struct Percentiles {
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
    mean: f64,
}

impl Percentiles {
    fn of(h: &Histogram<u64>) -> Percentiles {
        Percentiles {
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            mean: (h.mean() * 10.0).round() / 10.0,
        }
    }
}

#[derive(Serialize)]
struct NodeFigures {
    node: String,
    granted: u64,
    taken: u64,
    failed: u64,
    quarantined: u64,
    timeouts: u64,
    connects: u64,
    rtt_p50_us: Option<u64>,
    rtt_p99_us: Option<u64>,
}

/// Runs the command.
///
/// # Errors
///
/// The warm-up cycle's error (no quorum, say), or [`exit::UNAVAILABLE`] if no cycle completed at all.
pub fn run(args: &Args) -> Result<(), CliError> {
    let locks = Arc::new(args.conn.manager(0)?);
    let resources = args.resources.unwrap_or(args.threads);
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000);
    let names: Arc<Vec<String>> = Arc::new(
        (0..resources)
            .map(|i| format!("muxlock-bench:{}-{run_id}:{i}", std::process::id()))
            .collect(),
    );
    // One cycle first: it connects to every node, and a cluster that cannot grant anything fails here, at once.
    warm_up(&locks, &names[0], args.ttl)?;
    let stop = Arc::new(AtomicBool::new(false));
    let tallies: Vec<Arc<Mutex<Tally>>> = (0..args.threads)
        .map(|_| Tally::new().map(|t| Arc::new(Mutex::new(t))))
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    let workers: Vec<_> = tallies
        .iter()
        .enumerate()
        .map(|(t, tally)| {
            let (locks, names, stop, tally) =
                (locks.clone(), names.clone(), stop.clone(), tally.clone());
            let (threads, ttl) = (args.threads as usize, args.ttl);
            thread::spawn(move || worker(&locks, &names, t, threads, ttl, &stop, &tally))
        })
        .collect();
    progress(args, &tallies, started);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let elapsed = started.elapsed();
    let mut total = Tally::new()?;
    for t in &tallies {
        total.add(&lock(t));
    }
    let cycles = total.cycle.len();
    if cycles == 0 {
        let why = total.last_error.unwrap_or_else(|| {
            format!(
                "every attempt found the resource held ({} conflicts)",
                total.conflicts
            )
        });
        return Err(CliError::new(
            exit::UNAVAILABLE,
            "quorum",
            format!("no cycle completed: {why}"),
        ));
    }
    let results = Results {
        threads: args.threads,
        resources,
        nodes: locks.nodes().len(),
        duration_ms: millis(elapsed),
        ttl_ms: millis(args.ttl),
        cycles,
        conflicts: total.conflicts,
        errors: total.errors,
        cycles_per_s: (cycles as f64 / elapsed.as_secs_f64() * 10.0).round() / 10.0,
        latency_us: Latency {
            acquire: Percentiles::of(&total.acquire),
            cycle: Percentiles::of(&total.cycle),
        },
        per_node: per_node(&locks),
    };
    output::emit(args.json, &results, || {
        report(&results, &locks, total.last_error.as_deref())
    })
}

fn warm_up(locks: &LockManager, resource: &str, ttl: Duration) -> Result<(), CliError> {
    match locks.request(resource).ttl(ttl).once().acquire() {
        Ok(lock) => {
            locks.unlock(lock)?;
            Ok(())
        }
        Err(e) if e.is_held() => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// One thread's loop: thread `t` of `threads` takes resources `t, t + threads, ...` (modulo their number), so
/// that with one resource per thread nobody contends.
fn worker(
    locks: &LockManager,
    names: &[String],
    t: usize,
    threads: usize,
    ttl: Duration,
    stop: &AtomicBool,
    tally: &Mutex<Tally>,
) {
    let mut k = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let resource = &names[(t + k * threads) % names.len()];
        k = k.wrapping_add(1);
        let start = Instant::now();
        let outcome = locks.request(resource).ttl(ttl).once().acquire();
        let acquired = start.elapsed();
        let failure = match outcome {
            Ok(lock) => match locks.unlock(lock) {
                Ok(_) => {
                    let cycle = start.elapsed();
                    let mut tally = lock_tally(tally);
                    tally.acquire.saturating_record(micros(acquired));
                    tally.cycle.saturating_record(micros(cycle));
                    continue;
                }
                Err(e) => e,
            },
            Err(e) if e.is_held() => {
                lock_tally(tally).conflicts += 1;
                continue;
            }
            Err(e) => e,
        };
        {
            let mut tally = lock_tally(tally);
            tally.errors += 1;
            tally.last_error = Some(failure.to_string());
        }
        // A failing cluster would otherwise be hammered as fast as it fails.
        thread::sleep(Duration::from_millis(10));
    }
}

fn lock_tally(t: &Mutex<Tally>) -> MutexGuard<'_, Tally> {
    lock(t)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// Shows progress until the duration is over: a bar on a terminal (updated 10 times a second), else a plain line
/// on stderr every second (none with `--json`).
fn progress(args: &Args, tallies: &[Arc<Mutex<Tally>>], started: Instant) {
    let terminal = output::stderr_is_terminal();
    let total_ms = millis(args.duration).max(1);
    let bar = terminal.then(|| {
        let bar = ProgressBar::with_draw_target(Some(total_ms), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{spinner} [{bar:30}] {elapsed:>3}/{msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar
    });
    let tick = if terminal {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(1)
    };
    let deadline = started + args.duration;
    let mut next = started + tick;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        thread::sleep(next.min(deadline).saturating_duration_since(now));
        next += tick;
        let now = Instant::now();
        let mut snapshot = match Tally::new() {
            Ok(t) => t,
            Err(_) => continue,
        };
        for t in tallies {
            snapshot.add(&lock(t));
        }
        let elapsed = now.duration_since(started);
        let cycles = snapshot.cycle.len();
        let line = format!(
            "{} cycles, {:.0}/s, p50 {}, p99 {}, {} conflicts, {} errors",
            cycles,
            cycles as f64 / elapsed.as_secs_f64().max(1e-3),
            show_us(snapshot.cycle.value_at_quantile(0.5)),
            show_us(snapshot.cycle.value_at_quantile(0.99)),
            snapshot.conflicts,
            snapshot.errors
        );
        match &bar {
            Some(bar) => {
                bar.set_position(millis(elapsed).min(total_ms));
                bar.set_message(format!("{} {line}", duration::human(args.duration)));
            }
            None if !args.json => output::note(&format!(
                "bench: {} of {}: {line}",
                // In tenths of a second: the ticks come late by a few milliseconds.
                duration::human(Duration::from_millis((millis(elapsed) + 50) / 100 * 100)),
                duration::human(args.duration)
            )),
            None => {}
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

fn show_us(us: u64) -> String {
    duration::human(Duration::from_micros(us))
}

fn per_node(locks: &LockManager) -> Vec<NodeFigures> {
    locks
        .stats()
        .nodes
        .iter()
        .map(|n| NodeFigures {
            node: n.addr.to_string(),
            granted: n.granted,
            taken: n.taken,
            failed: n.failed,
            quarantined: n.quarantined,
            timeouts: n.net.timeouts,
            connects: n.net.connects,
            rtt_p50_us: n.net.rtt_quantile(0.5).map(|d| d.as_micros() as u64),
            rtt_p99_us: n.net.rtt_quantile(0.99).map(|d| d.as_micros() as u64),
        })
        .collect()
}

fn report(r: &Results, locks: &LockManager, last_error: Option<&str>) -> String {
    let mut out = format!(
        "bench: {} threads, {} resources, {} nodes, ttl {}, {}\n",
        r.threads,
        r.resources,
        r.nodes,
        duration::human(Duration::from_millis(r.ttl_ms)),
        duration::human(Duration::from_millis(r.duration_ms))
    );
    out.push_str(&format!(
        "cycles: {} ({:.0}/s), conflicts: {}, errors: {}\n",
        r.cycles, r.cycles_per_s, r.conflicts, r.errors
    ));
    if let Some(e) = last_error {
        out.push_str(&format!("last error: {}\n", output::one_line(e)));
    }
    out.push_str(&format!(
        "{:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
        "latency", "p50", "p90", "p99", "p99.9", "max", "mean"
    ));
    for (name, p) in [
        ("acquire", &r.latency_us.acquire),
        ("cycle", &r.latency_us.cycle),
    ] {
        out.push_str(&format!(
            "{:<9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n",
            name,
            show_us(p.p50),
            show_us(p.p90),
            show_us(p.p99),
            show_us(p.p999),
            show_us(p.max),
            show_us(p.mean.round() as u64)
        ));
    }
    out.push('\n');
    out.push_str(&locks.stats().to_string());
    out
}
