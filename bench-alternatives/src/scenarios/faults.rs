//! Faults: 4 workers, each with a client of its own, compete for 2 resources while the server (or one node of
//! three) is killed and restarted, or paused and resumed. Each worker behaves as the checker's careful worker
//! (`tests/support/checker.rs`): acquire (waiting as the alternative waits, bounded), and if it still believes
//! it holds the lock (its lease runs, its session is connected) write to the protected resource for 1 ms, then
//! release. Every call is logged with its outcome; every hold is recorded from the acquire's return to the moment
//! the holder stopped believing in it (the release call, or its lease's end), and the checker looks for overlaps.
//!
//! Timeline: `healthy` seconds, then the fault; after `down` seconds the killed server is restarted (and waited
//! for) or the paused one resumed; then `after` seconds more.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::Settings;
use crate::lockers::{Call, Factory};
use crate::measure::Cpu;
use crate::servers::Target;
use crate::support::checker::{
    Entry, FreezeMonitor, Hold, Stats, Writers, instant_ns, mono_ns, overlaps,
};

const WORKERS: usize = 4;
const RESOURCES: usize = 2;
const WORK: Duration = Duration::from_millis(1);
/// The lease of the lease-based locks (muxlock, the old scheme's timestamp).
pub const TTL: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Kill,
    Pause,
}

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Release,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Granted,
    Held,
    Released,
    Failed,
    Hung,
}

struct CallLog {
    kind: Kind,
    worker: usize,
    start: u64,
    end: u64,
    outcome: Outcome,
    resource: usize,
}

#[derive(Default)]
struct WorkerLog {
    calls: Vec<CallLog>,
    holds: Vec<Hold>,
    concurrent: u64,
    overrunner: u64,
    unused: u64,
    first_error: Option<String>,
}

pub struct Row {
    pub name: String,
    pub fault: Fault,
    pub what: String,
    /// When the fault began, and when the server was back (restart returned, or resumed), ns since the start.
    pub fault_at: u64,
    pub back_at: u64,
    pub end_at: u64,
    pub granted: usize,
    pub failed: usize,
    pub hung: usize,
    pub release_failed: usize,
    /// The longest time without any grant, across the fault (ms).
    pub longest_gap_ms: f64,
    /// From the server being back to the first grant after it (ms); `None`: no grant after it.
    pub first_grant_after_back_ms: Option<f64>,
    /// Resources never granted again after the fault began.
    pub stuck: usize,
    pub overlaps: usize,
    pub concurrent_writers: u64,
    pub overrunner: u64,
    pub unused: u64,
    pub first_error: Option<String>,
    pub worst_freeze_ms: u64,
    pub steal: f64,
    /// Grant times (ms relative to the fault), for the picture.
    pub grants_ms: Vec<f64>,
}

pub fn run(
    factory: &dyn Factory,
    target: &mut dyn Target,
    fault: Fault,
    protected: std::net::SocketAddr,
    s: &Settings,
) -> Row {
    let names: Vec<String> = (0..RESOURCES)
        .map(|r| format!("fault-{}-{r}", fault.name()))
        .collect();
    factory
        .locker(false, TTL)
        .prepare(&names)
        .unwrap_or_else(|e| panic!("{}: {e}", factory.name()));
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(Stats::default());
    let monitor = FreezeMonitor::start(Arc::clone(&stats));
    let t0 = mono_ns();
    let servers = factory.servers();
    let cpu_before = Cpu::now(&servers);
    let handles: Vec<_> = (0..WORKERS)
        .map(|w| {
            let mut locker = factory.locker(false, TTL);
            let (stop, names) = (Arc::clone(&stop), names.clone());
            thread::spawn(move || {
                let mut log = WorkerLog::default();
                let mut writers = Writers::connect(protected);
                let mut k = w;
                while !stop.load(Ordering::Relaxed) {
                    let r = k % RESOURCES;
                    k += 1;
                    let called = mono_ns();
                    let acquired = locker.acquire(&names[r]);
                    let now = mono_ns();
                    let outcome = match &acquired {
                        Call::Ok(true) => Outcome::Granted,
                        Call::Ok(false) => Outcome::Held,
                        Call::Failed(e) => {
                            log.first_error.get_or_insert(format!("acquire: {e}"));
                            Outcome::Failed
                        }
                        Call::Hung => Outcome::Hung,
                    };
                    log.calls.push(CallLog {
                        kind: Kind::Acquire,
                        worker: w,
                        start: called,
                        end: now,
                        outcome,
                        resource: r,
                    });
                    match outcome {
                        Outcome::Granted => {}
                        // Do not hammer a server that refuses connections.
                        Outcome::Failed => {
                            thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                        _ => continue,
                    }
                    let start = now;
                    let lease = locker.lease_end();
                    let margin = WORK + Duration::from_millis(20);
                    let mut end_belief = u64::MAX;
                    let valid =
                        locker.still_valid() && lease.is_none_or(|e| Instant::now() + margin < e);
                    if valid {
                        let lease_ns = lease.map_or(u64::MAX / 2, instant_ns);
                        match writers.enter(&names[r], lease_ns) {
                            Entry::Alone => {}
                            Entry::WithOverrunner => log.overrunner += 1,
                            Entry::WithHolder => log.concurrent += 1,
                        }
                        thread::sleep(WORK);
                        writers.leave(&names[r]);
                    } else {
                        log.unused += 1;
                        end_belief = mono_ns();
                    }
                    let release_called = mono_ns();
                    let lease_end = lease.map_or(u64::MAX, instant_ns);
                    log.holds.push(Hold {
                        resource: names[r].clone(),
                        holder: format!("w{w}"),
                        start,
                        end: release_called.min(lease_end).min(end_belief),
                    });
                    let released = locker.release();
                    let outcome = match released {
                        Call::Ok(()) => Outcome::Released,
                        Call::Failed(e) => {
                            log.first_error.get_or_insert(format!("release: {e}"));
                            Outcome::Failed
                        }
                        Call::Hung => Outcome::Hung,
                    };
                    log.calls.push(CallLog {
                        kind: Kind::Release,
                        worker: w,
                        start: release_called,
                        end: mono_ns(),
                        outcome,
                        resource: r,
                    });
                }
                drop(locker);
                log
            })
        })
        .collect();

    thread::sleep(s.fault_healthy);
    let fault_at = mono_ns();
    match fault {
        Fault::Kill => target.kill(),
        Fault::Pause => target.pause(),
    }
    let what = target.what();
    thread::sleep(s.fault_down);
    match fault {
        Fault::Kill => target.restart(),
        Fault::Pause => target.resume(),
    }
    let back_at = mono_ns();
    thread::sleep(s.fault_after);
    stop.store(true, Ordering::Relaxed);
    let logs: Vec<WorkerLog> = handles
        .into_iter()
        .map(|h| h.join().expect("a fault worker"))
        .collect();
    let end_at = mono_ns();
    let cpu = Cpu::now(&servers).since(cpu_before);
    drop(monitor);
    summarize(
        factory.name(),
        fault,
        what,
        (t0, fault_at, back_at, end_at),
        logs,
        &stats,
        cpu,
    )
}

fn summarize(
    name: String,
    fault: Fault,
    what: String,
    (t0, fault_at, back_at, end_at): (u64, u64, u64, u64),
    logs: Vec<WorkerLog>,
    stats: &Stats,
    cpu: Cpu,
) -> Row {
    let calls: Vec<&CallLog> = logs.iter().flat_map(|l| &l.calls).collect();
    let count = |o: Outcome| calls.iter().filter(|c| c.outcome == o).count();
    let mut grants: Vec<u64> = calls
        .iter()
        .filter(|c| c.kind == Kind::Acquire && c.outcome == Outcome::Granted)
        .map(|c| c.end)
        .collect();
    grants.sort_unstable();
    // The longest stretch without a grant that overlaps the time from the fault to the end.
    let before = grants
        .iter()
        .rev()
        .find(|&&g| g <= fault_at)
        .copied()
        .unwrap_or(t0);
    let (mut longest, mut gap) = (0u64, (before, before));
    let mut last = before;
    for &g in grants.iter().filter(|&&g| g > fault_at).chain([&end_at]) {
        if g - last > longest {
            longest = g - last;
            gap = (last, g);
        }
        last = g;
    }
    // MUXLOCK_ALT_TRACE=1: the calls under way during the longest gap, to see who waited for what.
    if std::env::var_os("MUXLOCK_ALT_TRACE").is_some() {
        let rel = |t: u64| (t as f64 - fault_at as f64) / 1e6;
        eprintln!(
            "  {name} {}: longest gap {:.0}..{:.0} ms after the fault",
            fault.name(),
            rel(gap.0),
            rel(gap.1)
        );
        for c in calls.iter().filter(|c| c.start < gap.1 && c.end > gap.0) {
            let kind = if c.kind == Kind::Acquire {
                "acquire"
            } else {
                "release"
            };
            let outcome = match c.outcome {
                Outcome::Granted => "granted",
                Outcome::Held => "held",
                Outcome::Released => "released",
                Outcome::Failed => "failed",
                Outcome::Hung => "hung",
            };
            eprintln!(
                "    w{} {kind} r{} {:.1}..{:.1} ms: {outcome}",
                c.worker,
                c.resource,
                rel(c.start),
                rel(c.end)
            );
        }
    }
    let first_after_back = grants
        .iter()
        .find(|&&g| g >= back_at)
        .map(|&g| (g - back_at) as f64 / 1e6);
    let stuck = (0..RESOURCES)
        .filter(|&r| {
            !calls.iter().any(|c| {
                c.resource == r
                    && c.kind == Kind::Acquire
                    && c.outcome == Outcome::Granted
                    && c.end > back_at
            })
        })
        .count();
    let holds: Vec<Hold> = logs.iter().flat_map(|l| l.holds.iter().cloned()).collect();
    let found = overlaps(&holds);
    for (a, b) in found.iter().take(3) {
        eprintln!("  OVERLAP {name} {}: {a:?} and {b:?}", fault.name());
    }
    let ms = |t: u64| (t as f64 - fault_at as f64) / 1e6;
    Row {
        name,
        fault,
        what,
        fault_at: fault_at - t0,
        back_at: back_at - t0,
        end_at: end_at - t0,
        granted: grants.len(),
        failed: calls
            .iter()
            .filter(|c| c.outcome == Outcome::Failed)
            .count(),
        hung: count(Outcome::Hung),
        release_failed: calls
            .iter()
            .filter(|c| {
                c.kind == Kind::Release && matches!(c.outcome, Outcome::Failed | Outcome::Hung)
            })
            .count(),
        longest_gap_ms: longest as f64 / 1e6,
        first_grant_after_back_ms: first_after_back,
        stuck,
        overlaps: found.len(),
        concurrent_writers: logs.iter().map(|l| l.concurrent).sum(),
        overrunner: logs.iter().map(|l| l.overrunner).sum(),
        unused: logs.iter().map(|l| l.unused).sum(),
        first_error: logs.iter().find_map(|l| l.first_error.clone()),
        worst_freeze_ms: Stats::get(&stats.worst_freeze_us) / 1000,
        steal: cpu.steal_percent(),
        grants_ms: grants.iter().map(|&g| ms(g)).collect(),
    }
}

pub fn print(rows: &[Row], s: &Settings) {
    println!(
        "\n### Faults: 4 workers, 2 resources; the fault at {:.1} s, the server back {:.1} s later (restart or \
         resume), then {:.1} s more\n",
        s.fault_healthy.as_secs_f64(),
        s.fault_down.as_secs_f64(),
        s.fault_after.as_secs_f64()
    );
    println!(
        "| lock | fault | what failed | granted | failed calls | hung calls (> 2 s) | releases failed or hung | \
         longest time without a grant | first grant after the server was back | resources never granted again | \
         overlapping holds | concurrent writers | worst freeze | steal |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let back = r
            .first_grant_after_back_ms
            .map_or("none".into(), |ms| format!("{ms:.0} ms"));
        let back_after = (r.back_at - r.fault_at) as f64 / 1e9;
        println!(
            "| {} | {} | {} (back after {back_after:.1} s) | {} | {} | {} | {} | {:.0} ms | {back} | {} of {RESOURCES} | {} | {} | {} ms | {:.1} % |",
            r.name,
            r.fault.name(),
            r.what,
            r.granted,
            r.failed,
            r.hung,
            r.release_failed,
            r.longest_gap_ms,
            r.stuck,
            r.overlaps,
            r.concurrent_writers,
            r.worst_freeze_ms,
            r.steal,
        );
    }
    for r in rows {
        if let Some(e) = &r.first_error {
            println!("- {} / {}: first error: {e}", r.name, r.fault.name());
        }
        if r.unused > 0 || r.overrunner > 0 {
            println!(
                "- {} / {}: {} locks no longer valid when the holder was about to write (not used); {} writers found \
                 an overrunner inside",
                r.name,
                r.fault.name(),
                r.unused,
                r.overrunner
            );
        }
    }
}
