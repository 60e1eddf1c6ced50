//! `muxlock demo`: the README's main job, a live demonstration of mutual exclusion while nodes fail.
//!
//! 1. **Nodes.** The local cluster of `muxlock cluster up` if one is running; else a new 5-node one, started and
//!    recorded the same way (`appendonly yes`, `appendfsync always`), and stopped at the end. With `--nodes` (or
//!    `MUXLOCK_NODES`) those nodes are used, and the node faults are skipped: they are not this machine's to kill.
//! 2. **Workers.** `--threads` threads in this process share one `LockManager`; `--processes` other processes (this
//!    binary again, with a hidden `--worker DIR`) run two threads each. Every worker loops: pick one of
//!    `--resources` resources, [`hold_wait`](muxlock::LockManager::hold_wait) for it (no polling), then the
//!    critical section (a few milliseconds; one in 150 lasts half the lease, so that the guard renews it), then
//!    release.
//! 3. **The protected counter.** Each resource has a counter file that only a holder may touch: the holder creates
//!    an "inside" marker with `O_EXCL` (finding one already there is a violation: two holders at once), reads the
//!    counter and the last holder's name (a different one is a hand-off), works a few milliseconds, checks that its
//!    guard is not lost, writes the counter + 1 (a new file renamed over the old), and removes its marker. At the
//!    end the counters must add up to the critical sections completed in all processes: a lost update is a
//!    violation too.
//! 4. **Faults**, at fixed fractions of the run: node 2 is killed (SIGKILL) at 25 %, restarted on its port and data
//!    directory at 45 % (its append-only file brings its locks back; the restart guard sees a new `run_id`), node 4
//!    is paused (SIGSTOP) at 60 % and resumed at 80 %.
//! 5. **Output.** A live line per second (redrawn in place on a terminal, one line per second otherwise), a line per
//!    event, and a summary: acquisitions, hand-offs, latency percentiles, per-node figures, violations, and what the
//!    restart guard did. `--json` prints the summary as one JSON object on stdout (the live lines go to stderr).
//!
//! 6. **Interrupts.** Ctrl-C (SIGINT) or SIGTERM stops the run early: the threads here stop (a waiting one gives
//!    up at once, one inside a critical section finishes it), the worker processes see the stop file (they also
//!    stop by themselves on the terminal's Ctrl-C, and report), their results are read (each waited for up to 15
//!    s), the summary is printed, and what the demo started is stopped. A second one skips the waiting: worker
//!    processes still running are killed (SIGKILL), unfinished threads are left to end with the process, no
//!    summary; the nodes this demo started are still stopped, then exit 130. That wait is short unless a worker
//!    is stuck (stopped with SIGSTOP, or hung) or a section is long (`--ttl` large): `cli/tests/demo.rs` stops a
//!    worker process to show it.
//!
//! Exit codes: 0 when every check passed; 70 if a violation was seen (a bug: please report it); 69 if no lock was
//! granted at all; 130 after a second interrupt; the usual codes for a cluster that cannot start or nodes that
//! cannot be used.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args as ClapArgs;
use hdrhistogram::Histogram;
use muxlock::{LockManager, Stats};
use rustix::process::Signal;
use serde::{Deserialize, Serialize};

use crate::cmd::cluster::up;
use crate::duration::{self, millis};
use crate::exit::{self, CliError};
use crate::nodes::{Conn, Toggle};
use crate::output;
use crate::procs;
use crate::state::{self, ClusterState};

/// Show the lock at work: workers contend while nodes are killed, restarted and paused.
///
/// Starts a local 5-node cluster unless one is running (or --nodes is given), runs worker threads and another
/// process that contend for a few resources while a protected counter checks mutual exclusion, kills a node and
/// restarts it, pauses one, prints what happens live, and a summary at the end (acquisitions, hand-offs, latency
/// percentiles, per-node figures, violations, what the restart guard did). Stops what it started.
#[derive(ClapArgs)]
#[command(
    after_help = "Example:\n  muxlock demo\n  muxlock demo --short   # about 8 s: the CI run\n\n\
                  Ctrl-C stops early, with a summary, once the workers have stopped; a second Ctrl-C kills them \
                  and exits 130 without one. Either way the nodes this demo started are stopped.\n\n\
                  Exit codes: 0 all checks passed; 70 mutual exclusion was violated (a bug); 69 no lock could be \
                  granted; 73 the cluster could not start; 130 interrupted twice."
)]
pub struct Args {
    /// How long the workers run.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = positive)]
    pub duration: Duration,

    /// A short run (8 s) with the same events, for CI.
    #[arg(long, conflicts_with = "duration")]
    pub short: bool,

    /// Worker threads in this process.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub threads: u32,

    /// Worker processes besides this one (two threads each), to show locks across processes.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=16))]
    pub processes: u32,

    /// Resources the workers contend for.
    #[arg(long, value_name = "K", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub resources: u32,

    /// Each lock's lease (the guard renews it while the work runs).
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = crate::cmd::ttl)]
    pub ttl: Duration,

    /// Print the summary as JSON on stdout (the live lines go to stderr).
    #[arg(long)]
    pub json: bool,

    /// Internal: run as a worker process of another demo, in this directory.
    #[arg(long, hide = true, value_name = "DIR")]
    pub worker: Option<PathBuf>,

    #[command(flatten)]
    pub conn: Conn,
}

fn positive(s: &str) -> Result<Duration, String> {
    match duration::parse(s)? {
        d if d.is_zero() => Err("the duration must be more than zero".into()),
        d => Ok(d),
    }
}

/// How long a worker waits for a lock before it counts the wait as timed out and tries another.
const MAX_WAIT: Duration = Duration::from_secs(3);
/// How long a worker process may run past the demo's duration before it stops by itself.
const WORKER_GRACE: Duration = Duration::from_secs(30);

/// One worker's (or one process's) figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Tally {
    acquisitions: u64,
    handoffs: u64,
    waits_timed_out: u64,
    errors: u64,
    lost: u64,
    violations: u64,
    /// Time to acquire (`hold_wait`, waiting for the holder included), in microseconds.
    latencies_us: Vec<u64>,
    last_error: Option<String>,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.acquisitions += other.acquisitions;
        self.handoffs += other.handoffs;
        self.waits_timed_out += other.waits_timed_out;
        self.errors += other.errors;
        self.lost += other.lost;
        self.violations += other.violations;
        self.latencies_us.extend_from_slice(&other.latencies_us);
        if other.last_error.is_some() {
            self.last_error.clone_from(&other.last_error);
        }
    }
}

/// What the workers of one process share.
struct Shared {
    dir: PathBuf,
    resources: u32,
    ttl: Duration,
    stop: AtomicBool,
    acquisitions: AtomicU64,
    tally: Mutex<Tally>,
}

/// Runs the demo (or, with `--worker`, one worker process of it).
///
/// # Errors
///
/// See the module docs for the exit codes.
pub fn run(args: &Args) -> Result<(), CliError> {
    if let Some(dir) = &args.worker {
        return worker_process(args, dir);
    }
    Demo::run(args)
}

/// A worker loop: until `stop`, hold one resource at a time and run the critical section under it.
fn work(locks: &LockManager, shared: &Shared, me: &str, seed: u64) {
    let mut rng = seed | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut mine = Tally::default();
    while !shared.stop.load(Ordering::Relaxed) {
        let k = next() % u64::from(shared.resources);
        let key = format!("muxlock-demo:{k}");
        let asked = Instant::now();
        match locks.hold_wait(&key, shared.ttl, MAX_WAIT) {
            Ok(guard) => {
                mine.latencies_us
                    .push(u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX));
                // Mostly short work; now and then longer than a third of the lease, so that the guard renews it.
                let work = if next() % 150 == 0 {
                    shared.ttl / 2 + Duration::from_millis(next() % 200)
                } else {
                    Duration::from_millis(2 + next() % 12)
                };
                match critical_section(&shared.dir, k, me, work, || guard.is_lost()) {
                    Ok(section) => {
                        mine.violations += section.violations;
                        if section.lost {
                            mine.lost += 1;
                        } else {
                            mine.acquisitions += 1;
                            mine.handoffs += u64::from(section.handoff);
                            shared.acquisitions.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        mine.errors += 1;
                        mine.last_error = Some(format!("the counter file: {e}"));
                    }
                }
                drop(guard); // releases; a failed release leaves the key to its lease
            }
            Err(e) if e.is_held() => mine.waits_timed_out += 1,
            Err(e) => {
                mine.errors += 1;
                mine.last_error = Some(e.to_string());
                thread::sleep(Duration::from_millis(100));
            }
        }
        // Flush now and then, so that the live line and a stopped run see the figures.
        if mine.latencies_us.len() >= 4 || shared.stop.load(Ordering::Relaxed) {
            let mut tally = shared
                .tally
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            tally.add(&mine);
            mine = Tally::default();
        }
    }
    let mut tally = shared
        .tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    tally.add(&mine);
}

/// What one critical section saw.
struct Section {
    violations: u64,
    handoff: bool,
    lost: bool,
}

/// The protected counter of resource `k`, touched only under its lock (see the module docs).
fn critical_section(
    dir: &Path,
    k: u64,
    me: &str,
    work: Duration,
    is_lost: impl Fn() -> bool,
) -> io::Result<Section> {
    let inside = dir.join(format!("res-{k}.inside"));
    let counter = dir.join(format!("res-{k}.count"));
    let mut violations = 0;
    let marked = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&inside)
    {
        Ok(mut f) => {
            let _ = f.write_all(me.as_bytes());
            true
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            violations += 1; // another holder is inside right now
            false
        }
        Err(e) => return Err(e),
    };
    let unmark = || {
        if marked {
            let _ = fs::remove_file(&inside);
        }
    };
    let text = match fs::read_to_string(&counter) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            unmark();
            return Err(e);
        }
    };
    let mut fields = text.split_whitespace();
    let count: u64 = fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
    let last = fields.next().unwrap_or("");
    thread::sleep(work);
    // The last step that needs the lock: not if the guard says it can no longer be relied on.
    if is_lost() {
        unmark();
        return Ok(Section {
            violations,
            handoff: false,
            lost: true,
        });
    }
    let tmp = dir.join(format!("res-{k}.{me}.tmp"));
    let written =
        fs::write(&tmp, format!("{} {me}\n", count + 1)).and_then(|()| fs::rename(&tmp, &counter));
    unmark();
    written?;
    Ok(Section {
        violations,
        handoff: !last.is_empty() && last != me,
        lost: false,
    })
}

/// The sum of the counters in `dir`.
fn counted(dir: &Path, resources: u32) -> u64 {
    (0..u64::from(resources))
        .filter_map(|k| fs::read_to_string(dir.join(format!("res-{k}.count"))).ok())
        .filter_map(|t| t.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// `--worker DIR`: two worker threads until DIR/stop appears (or SIGINT/SIGTERM comes), a `progress N` line per
/// second on stdout, then one `result {json}` line.
///
/// Ctrl-C on a terminal goes to the whole foreground process group, this worker included: it stops as for the stop
/// file and still reports, rather than dying with its figures (the demo would then count it as missing and exit
/// 70 for an interrupt).
fn worker_process(args: &Args, dir: &Path) -> Result<(), CliError> {
    let signalled = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&signalled))
            .map_err(|e| CliError::new(exit::OSERR, "os", format!("cannot catch signals: {e}")))?;
    }
    let locks = args.conn.manager(0)?;
    let shared = Arc::new(Shared {
        dir: dir.to_path_buf(),
        resources: args.resources,
        ttl: args.ttl,
        stop: AtomicBool::new(false),
        acquisitions: AtomicU64::new(0),
        tally: Mutex::new(Tally::default()),
    });
    let me = format!("p{}", std::process::id());
    let handles: Vec<_> = (0..2u64)
        .map(|i| {
            let (locks, shared, me) = (locks.clone(), Arc::clone(&shared), format!("{me}.t{i}"));
            thread::spawn(move || work(&locks, &shared, &me, seed(i + 100)))
        })
        .collect();
    let until = Instant::now() + args.duration + WORKER_GRACE;
    let stop_file = dir.join("stop");
    let mut last_line = Instant::now();
    while !stop_file.exists() && !signalled.load(Ordering::Relaxed) && Instant::now() < until {
        thread::sleep(Duration::from_millis(50));
        if last_line.elapsed() >= Duration::from_secs(1) {
            last_line = Instant::now();
            let n = shared.acquisitions.load(Ordering::Relaxed);
            if output::print(&format!("progress {n}\n")).is_err() {
                break; // the demo is gone
            }
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let tally = shared
        .tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let line = serde_json::to_string(&tally)
        .map_err(|e| CliError::new(exit::SOFTWARE, "internal", format!("worker result: {e}")))?;
    output::print(&format!("result {line}\n"))
        .map_err(|e| CliError::new(exit::IOERR, "io", format!("worker result: {e}")))
}

fn seed(i: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    nanos ^ (u64::from(std::process::id()) << 20) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A node as the demo knows it: enough to kill, restart and pause it.
#[derive(Clone)]
struct Node {
    url: String,
    port: u16,
    pid: u32,
    start_ticks: u64,
    dir: PathBuf,
    state: NodeState,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NodeState {
    Up,
    Killed,
    Paused,
}

impl NodeState {
    fn word(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Killed => "DOWN",
            NodeState::Paused => "PAUSED",
        }
    }
}

/// The cluster under the demo.
struct Cluster {
    urls: Vec<String>,
    /// The nodes this process may kill and pause: empty with `--nodes`.
    nodes: Vec<Node>,
    /// The recorded cluster, when the nodes are the local cluster's (rewritten after a restart).
    record: Option<(PathBuf, ClusterState)>,
    /// This demo started it: it stops it at the end.
    started_here: bool,
    redis_server: PathBuf,
    /// When the nodes were ready.
    ready_at: Instant,
}

#[derive(Clone, Serialize)]
struct Event {
    at_ms: u64,
    what: String,
}

#[derive(Clone, Serialize)]
struct Summary {
    duration_ms: u64,
    threads: u32,
    processes: u32,
    resources: u32,
    ttl_ms: u64,
    cluster: &'static str,
    first_lock_ms: Option<u64>,
    acquisitions: u64,
    handoffs: u64,
    waits_timed_out: u64,
    errors: u64,
    lost: u64,
    violations: u64,
    counters_total: u64,
    latency_us: Percentiles,
    nodes: Vec<NodeSummary>,
    restart_guard: RestartSummary,
    events: Vec<Event>,
}

#[derive(Clone, Serialize)]
struct Percentiles {
    p50: u64,
    p90: u64,
    p99: u64,
    p999: u64,
    max: u64,
}

#[derive(Clone, Serialize)]
struct NodeSummary {
    node: String,
    granted: u64,
    taken: u64,
    failed: u64,
    not_counted: u64,
    timeouts: u64,
    connects: u64,
    restarts: u64,
    persists: bool,
}

#[derive(Clone, Serialize)]
struct RestartSummary {
    restarts_seen: u64,
    trusted_at_once: usize,
    grants_not_counted: u64,
}

/// Where the live lines and events go: stdout, or stderr with `--json`; redrawn in place on a terminal.
struct Screen {
    to_stderr: bool,
    terminal: bool,
    start: Instant,
    live_shown: bool,
}

impl Screen {
    fn write(&mut self, text: &str) {
        let _ = if self.to_stderr {
            io::stderr().lock().write_all(text.as_bytes())
        } else {
            io::stdout()
                .lock()
                .write_all(text.as_bytes())
                .and_then(|()| io::stdout().flush())
        };
    }

    /// A line that stays: an event, a note.
    fn line(&mut self, text: &str) {
        let clear = if self.terminal && self.live_shown {
            "\r\x1b[2K"
        } else {
            ""
        };
        self.live_shown = false;
        let at = self.start.elapsed().as_secs_f64();
        self.write(&format!("{clear}{at:6.1}s  {text}\n"));
    }

    /// The live line: redrawn on a terminal, a new line otherwise.
    fn live(&mut self, text: &str) {
        let at = self.start.elapsed().as_secs_f64();
        if self.terminal {
            self.live_shown = true;
            self.write(&format!("\r\x1b[2K{at:6.1}s  {text}"));
        } else {
            self.write(&format!("{at:6.1}s  {text}\n"));
        }
    }

    fn end_live(&mut self) {
        if self.terminal && self.live_shown {
            self.write("\n");
            self.live_shown = false;
        }
    }
}

struct Demo<'a> {
    args: &'a Args,
    duration: Duration,
    screen: Screen,
    events: Vec<Event>,
}

impl Demo<'_> {
    fn run(args: &Args) -> Result<(), CliError> {
        let start = Instant::now();
        let terminal = if args.json {
            io::stderr().is_terminal()
        } else {
            io::stdout().is_terminal()
        };
        let mut demo = Demo {
            args,
            duration: if args.short {
                Duration::from_secs(8)
            } else {
                args.duration
            },
            screen: Screen {
                to_stderr: args.json,
                terminal,
                start,
                live_shown: false,
            },
            events: Vec::new(),
        };
        // Ctrl-C or SIGTERM: stop early, and clean up all the same. A second one: stop now (the workers are
        // killed rather than waited for, no summary), still stopping the nodes this demo started.
        let interrupted = Arc::new(AtomicBool::new(false));
        let forced = Arc::new(AtomicBool::new(false));
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ])
        .map_err(|e| CliError::new(exit::OSERR, "os", format!("cannot catch signals: {e}")))?;
        {
            let (interrupted, forced) = (Arc::clone(&interrupted), Arc::clone(&forced));
            thread::spawn(move || {
                for _ in signals.forever() {
                    if interrupted.swap(true, Ordering::AcqRel) {
                        forced.store(true, Ordering::Release);
                        output::note(
                            "interrupted again: killing the workers and stopping what this demo started",
                        );
                    }
                }
            });
        }
        let mut cluster = demo.cluster()?;
        let work_dir = scratch_dir()?;
        let result = demo.contend(&mut cluster, &work_dir, &interrupted, &forced);
        demo.screen.end_live();
        // Clean up whatever happened: nodes resumed and restarted, the cluster stopped if it is ours.
        demo.clean_up(&mut cluster);
        let _ = fs::remove_dir_all(&work_dir);
        result
    }

    /// The nodes: given ones, the running local cluster, or a new one.
    fn cluster(&mut self) -> Result<Cluster, CliError> {
        let given = self.args.conn.nodes.iter().any(|n| !n.trim().is_empty());
        if given {
            let urls = self.args.conn.urls()?;
            self.screen.line(&format!(
                "using the {} given nodes; node faults skipped (they are not this machine's local cluster)",
                urls.len()
            ));
            return Ok(Cluster {
                urls,
                nodes: Vec::new(),
                record: None,
                started_here: false,
                redis_server: PathBuf::new(),
                ready_at: Instant::now(),
            });
        }
        let dir = state::dir()?;
        if let Some(existing) = state::load(&dir)? {
            if !existing.is_being_started() && existing.nodes.iter().all(|n| n.is_alive()) {
                self.screen.line(&format!(
                    "using the running local cluster ({} nodes, {}); it is left running",
                    existing.nodes.len(),
                    state::describe(&dir)
                ));
                return Ok(Cluster {
                    urls: existing.nodes.iter().map(|n| n.url.clone()).collect(),
                    nodes: nodes_of(&existing),
                    redis_server: PathBuf::from(&existing.redis_server),
                    record: Some((dir, existing)),
                    started_here: false,
                    ready_at: Instant::now(),
                });
            }
            if existing.nodes.iter().any(|n| n.is_alive()) {
                return Err(CliError::new(
                    exit::UNAVAILABLE,
                    "unavailable",
                    format!(
                        "the local cluster recorded in {} is only partly running: `muxlock cluster down`, then \
                         `muxlock demo` again",
                        state::describe(&dir)
                    ),
                ));
            }
        }
        let asked = Instant::now();
        let started = up::start(&dir, &[None; 5], None, false)?;
        self.screen.line(&format!(
            "started a local cluster of {} redis-server nodes in {} (appendonly yes, appendfsync always: every \
             write on disk before the reply); recorded in {}",
            started.nodes.len(),
            duration::human(asked.elapsed()),
            state::describe(&dir)
        ));
        Ok(Cluster {
            urls: started.nodes.iter().map(|n| n.url.clone()).collect(),
            nodes: nodes_of(&started),
            redis_server: PathBuf::from(&started.redis_server),
            record: Some((dir, started)),
            started_here: true,
            ready_at: Instant::now(),
        })
    }

    /// The workers, the faults and the live lines; then the summary.
    fn contend(
        &mut self,
        cluster: &mut Cluster,
        dir: &Path,
        interrupted: &AtomicBool,
        forced: &AtomicBool,
    ) -> Result<(), CliError> {
        // The local cluster's nodes are given by URL here (and to the worker processes): its TLS files, if any,
        // go with them.
        let conn = Conn {
            nodes: cluster.urls.clone(),
            ..self.args.conn.clone()
        }
        .with_cluster_tls(cluster.record.as_ref().and_then(|(_, r)| r.tls.as_ref()));
        let locks = conn.manager(0)?;
        let args = self.args;
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            resources: args.resources,
            ttl: args.ttl,
            stop: AtomicBool::new(false),
            acquisitions: AtomicU64::new(0),
            tally: Mutex::new(Tally::default()),
        });

        // The first lock, alone, to show how soon a fresh cluster grants.
        let first = Instant::now();
        let first_lock = match locks.hold_wait(
            "muxlock-demo:first",
            args.ttl,
            Duration::from_secs(15),
        ) {
            Ok(guard) => {
                let took = first.elapsed();
                let since_ready = cluster.ready_at.elapsed();
                drop(guard);
                self.screen.line(&format!(
                    "first lock granted in {} ({} after the nodes were ready): nodes that persist every write are \
                     trusted at once by the restart guard",
                    duration::human(took),
                    duration::human(since_ready)
                ));
                Some(since_ready)
            }
            Err(e) => {
                self.screen.line(&format!("no lock yet: {e}"));
                None
            }
        };

        self.screen.line(&format!(
            "{} threads here and {} other process{} contend for {} resource{} (lease {}, renewed by a guard) for \
             {}",
            args.threads,
            args.processes,
            if args.processes == 1 { "" } else { "es" },
            args.resources,
            if args.resources == 1 { "" } else { "s" },
            duration::human(args.ttl),
            duration::human(self.duration)
        ));
        let mut workers: Vec<(Child, Arc<AtomicU64>, thread::JoinHandle<Option<Tally>>)> =
            Vec::new();
        for _ in 0..args.processes {
            workers.push(spawn_worker(args, &conn, dir, self.duration)?);
        }
        let handles: Vec<_> = (0..u64::from(args.threads))
            .map(|i| {
                let (locks, shared) = (locks.clone(), Arc::clone(&shared));
                thread::spawn(move || work(&locks, &shared, &format!("t{i}"), seed(i)))
            })
            .collect();

        let began = Instant::now();
        let plan = fault_plan(self.duration, cluster.nodes.len());
        let mut done = vec![false; plan.len()];
        let mut next_live = began + Duration::from_secs(1);
        let mut last_count = 0;
        while began.elapsed() < self.duration && !interrupted.load(Ordering::Relaxed) {
            let now = Instant::now();
            for (i, (at, fault)) in plan.iter().enumerate() {
                if !done[i] && now >= began + *at {
                    done[i] = true;
                    let what = self.fault(cluster, *fault);
                    self.event(&what);
                }
            }
            if now >= next_live {
                next_live += Duration::from_secs(1);
                let here = shared.acquisitions.load(Ordering::Relaxed);
                let there: u64 = workers
                    .iter()
                    .map(|(_, n, _)| n.load(Ordering::Relaxed))
                    .sum();
                let total = here + there;
                let line = live_line(&shared, total, total - last_count, cluster);
                last_count = total;
                self.screen.live(&line);
            }
            thread::sleep(Duration::from_millis(20));
        }
        if interrupted.load(Ordering::Relaxed) {
            self.event("interrupted: stopping the workers and cleaning up");
        }
        // Stop: the threads here, then the worker processes (they see the stop file).
        shared.stop.store(true, Ordering::Relaxed);
        // Threads waiting for a lock give up now rather than at the end of their wait.
        locks.cancel_waits();
        // A thread inside a long critical section (half the lease) is waited for, unless a second Ctrl-C says
        // not to: then it is left to die with the process.
        for h in handles {
            while !h.is_finished() && !forced.load(Ordering::Acquire) {
                thread::sleep(Duration::from_millis(20));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
        let _ = fs::write(dir.join("stop"), b"");
        let mut tally = shared
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut missing = 0;
        for (mut child, _, reader) in workers {
            let until = Instant::now() + Duration::from_secs(15);
            while matches!(child.try_wait(), Ok(None))
                && Instant::now() < until
                && !forced.load(Ordering::Acquire)
            {
                thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
            match reader.join().ok().flatten() {
                Some(t) => tally.add(&t),
                None => missing += 1,
            }
        }
        self.screen.end_live();
        if forced.load(Ordering::Acquire) {
            return Err(CliError::new(
                130,
                "interrupted",
                "interrupted twice: stopped without a summary",
            ));
        }
        let counters = counted(dir, args.resources);
        // Every completed critical section added one to a counter: fewer means an update was lost to an overlap.
        let lost_updates = tally.acquisitions.saturating_sub(counters)
            + counters.saturating_sub(tally.acquisitions);
        let violations = tally.violations + if missing == 0 { lost_updates } else { 0 };
        let stats = locks.stats();
        let summary = self.summary(&tally, violations, counters, first_lock, &stats, cluster)?;
        self.print_summary(&summary, &stats, cluster, missing, &tally)?;
        if missing > 0 {
            return Err(CliError::new(
                exit::SOFTWARE,
                "internal",
                format!(
                    "{missing} worker process(es) did not report: the counters could not be checked"
                ),
            ));
        }
        if violations > 0 {
            return Err(CliError::new(
                exit::SOFTWARE,
                "violation",
                format!(
                    "mutual exclusion was violated {violations} time(s): a bug in muxlock, please report it"
                ),
            ));
        }
        if tally.acquisitions == 0 {
            return Err(CliError::new(
                exit::UNAVAILABLE,
                "quorum",
                format!(
                    "no lock was granted{}",
                    tally
                        .last_error
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                ),
            ));
        }
        Ok(())
    }

    fn event(&mut self, what: &str) {
        self.events.push(Event {
            at_ms: millis(self.screen.start.elapsed()),
            what: what.to_owned(),
        });
        self.screen.line(what);
    }

    /// Applies one fault; says what happened.
    fn fault(&mut self, cluster: &mut Cluster, fault: Fault) -> String {
        match fault {
            Fault::Kill(i) => {
                let others = cluster.nodes.len() - 1;
                let node = &mut cluster.nodes[i];
                if procs::is_alive(node.pid, node.start_ticks) {
                    let _ = procs::signal(node.pid, Signal::KILL);
                    procs::wait_gone(&[(node.pid, node.start_ticks)], Duration::from_secs(5));
                }
                node.state = NodeState::Killed;
                format!(
                    "node {} ({}) killed with SIGKILL: the other {} are a majority, locks go on",
                    i + 1,
                    node.url,
                    others
                )
            }
            Fault::Restart(i) => match restart(cluster, i) {
                Ok(took) => format!(
                    "node {} restarted in {} on its port and data: its append-only file brought back the locks it \
                     held; the restart guard sees a new run_id",
                    i + 1,
                    duration::human(took)
                ),
                Err(e) => format!("node {} could not be restarted: {e}", i + 1),
            },
            Fault::Pause(i) => {
                let node = &mut cluster.nodes[i];
                let _ = procs::signal(node.pid, Signal::STOP);
                node.state = NodeState::Paused;
                format!(
                    "node {} ({}) paused with SIGSTOP: it accepts connections but answers nothing; rounds decide \
                     without it",
                    i + 1,
                    node.url
                )
            }
            Fault::Resume(i) => {
                let node = &mut cluster.nodes[i];
                let _ = procs::signal(node.pid, Signal::CONT);
                node.state = NodeState::Up;
                format!("node {} resumed with SIGCONT", i + 1)
            }
        }
    }

    fn summary(
        &self,
        tally: &Tally,
        violations: u64,
        counters: u64,
        first_lock: Option<Duration>,
        stats: &Stats,
        cluster: &Cluster,
    ) -> Result<Summary, CliError> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)
            .map_err(|e| CliError::new(exit::SOFTWARE, "internal", format!("histogram: {e}")))?;
        for &us in &tally.latencies_us {
            let _ = h.record(us.max(1));
        }
        let q = |p: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(p)
            }
        };
        Ok(Summary {
            duration_ms: millis(self.duration),
            threads: self.args.threads,
            processes: self.args.processes,
            resources: self.args.resources,
            ttl_ms: millis(self.args.ttl),
            cluster: if cluster.started_here {
                "started"
            } else if cluster.record.is_some() {
                "running"
            } else {
                "given"
            },
            first_lock_ms: first_lock.map(millis),
            acquisitions: tally.acquisitions,
            handoffs: tally.handoffs,
            waits_timed_out: tally.waits_timed_out,
            errors: tally.errors,
            lost: tally.lost,
            violations,
            counters_total: counters,
            latency_us: Percentiles {
                p50: q(0.5),
                p90: q(0.9),
                p99: q(0.99),
                p999: q(0.999),
                max: h.max(),
            },
            nodes: stats
                .nodes
                .iter()
                .map(|n| NodeSummary {
                    node: n.addr.to_string(),
                    granted: n.granted,
                    taken: n.taken,
                    failed: n.failed,
                    not_counted: n.quarantined,
                    timeouts: n.net.timeouts,
                    connects: n.net.connects,
                    restarts: n.restarts,
                    persists: n.persists,
                })
                .collect(),
            restart_guard: RestartSummary {
                restarts_seen: stats.nodes.iter().map(|n| n.restarts).sum(),
                trusted_at_once: stats.nodes.iter().filter(|n| n.persists).count(),
                grants_not_counted: stats.nodes.iter().map(|n| n.quarantined).sum(),
            },
            events: Vec::new(),
        })
    }

    fn print_summary(
        &mut self,
        summary: &Summary,
        stats: &Stats,
        cluster: &Cluster,
        missing: usize,
        tally: &Tally,
    ) -> Result<(), CliError> {
        if self.args.json {
            let doc = Summary {
                events: std::mem::take(&mut self.events),
                ..summary.clone()
            };
            return output::emit(true, &doc, String::new);
        }
        let us = |v: u64| duration::human(Duration::from_micros(v));
        let mut t = String::new();
        t.push_str("\nsummary\n");
        t.push_str(&format!(
            "  acquisitions   {} in {} ({:.0}/s), by {} threads here and {} other process(es)\n",
            summary.acquisitions,
            duration::human(self.duration),
            summary.acquisitions as f64 / self.duration.as_secs_f64().max(0.001),
            summary.threads,
            summary.processes
        ));
        t.push_str(&format!(
            "  hand-offs      {} (the next holder of a resource was another worker)\n",
            summary.handoffs
        ));
        t.push_str(&format!(
            "  time to lock   p50 {}  p90 {}  p99 {}  p99.9 {}  max {} (waiting for the holder included)\n",
            us(summary.latency_us.p50),
            us(summary.latency_us.p90),
            us(summary.latency_us.p99),
            us(summary.latency_us.p999),
            us(summary.latency_us.max)
        ));
        t.push_str(&format!(
            "  waits          {} gave up after {} (the resource stayed busy); {} errors{}\n",
            summary.waits_timed_out,
            duration::human(MAX_WAIT),
            summary.errors,
            tally
                .last_error
                .as_deref()
                .map(|e| format!(" (last: {})", output::one_line(e)))
                .unwrap_or_default()
        ));
        t.push_str(&format!(
            "  guards         {} renewals, {} lost (their work stopped before writing: {} sections)\n",
            stats.guards.renewals, stats.guards.lost, summary.lost
        ));
        t.push_str(&format!(
            "  violations     {} (two holders inside at once, or a counter update lost: the counters add up to {}, \
             the sections completed to {}){}\n",
            summary.violations,
            summary.counters_total,
            summary.acquisitions,
            if missing > 0 {
                " — a worker process did not report"
            } else {
                ""
            }
        ));
        t.push_str("\nnodes (this process' lock manager)\n");
        t.push_str(&format!(
            "  {:<26} {:<7} {:>8} {:>7} {:>7} {:>12} {:>9} {:>9} {:>9}\n",
            "node",
            "now",
            "granted",
            "taken",
            "failed",
            "not counted",
            "timeouts",
            "restarts",
            "persists"
        ));
        for (i, n) in summary.nodes.iter().enumerate() {
            let now = cluster.nodes.get(i).map_or("-", |n| n.state.word());
            t.push_str(&format!(
                "  {:<26} {:<7} {:>8} {:>7} {:>7} {:>12} {:>9} {:>9} {:>9}\n",
                n.node,
                now,
                n.granted,
                n.taken,
                n.failed,
                n.not_counted,
                n.timeouts,
                n.restarts,
                if n.persists { "yes" } else { "no" }
            ));
        }
        let g = &summary.restart_guard;
        t.push_str(&format!(
            "\nrestart guard: {} restart(s) seen; {} of {} nodes trusted at once (they persist every write, so a \
             restart forgets no lock); {} grant(s) not counted.{}\n",
            g.restarts_seen,
            g.trusted_at_once,
            summary.nodes.len(),
            g.grants_not_counted,
            if g.restarts_seen > 0 && g.grants_not_counted == 0 {
                format!(
                    " Without appendfsync always, a restarted node's grants would not count for {} (the longest \
                     lease) after its restart.",
                    duration::human(self.args.ttl)
                )
            } else {
                String::new()
            }
        ));
        self.screen.write(&t);
        Ok(())
    }

    /// Resumes paused nodes and restarts killed ones (a running cluster is left as it was found), or stops the
    /// cluster this demo started.
    fn clean_up(&mut self, cluster: &mut Cluster) {
        for node in &mut cluster.nodes {
            if node.state == NodeState::Paused {
                let _ = procs::signal(node.pid, Signal::CONT);
                node.state = NodeState::Up;
            }
        }
        if cluster.started_here {
            let procs: Vec<(u32, u64)> = cluster
                .nodes
                .iter()
                .filter(|n| n.state != NodeState::Killed)
                .map(|n| (n.pid, n.start_ticks))
                .collect();
            let left = up::stop(&procs);
            if let Some((dir, _)) = &cluster.record {
                if left.is_empty() {
                    let _ = state::remove(dir);
                    self.screen
                        .line("stopped the cluster this demo started and removed its data");
                } else {
                    self.screen.line(&format!(
                        "could not stop {} node(s): `muxlock cluster down` stops them",
                        left.len()
                    ));
                }
            }
            return;
        }
        for i in 0..cluster.nodes.len() {
            if cluster.nodes[i].state == NodeState::Killed {
                match restart(cluster, i) {
                    Ok(_) => self
                        .screen
                        .line(&format!("node {} restarted, as it was found", i + 1)),
                    Err(e) => self
                        .screen
                        .line(&format!("node {} could not be restarted: {e}", i + 1)),
                }
            }
        }
    }
}

fn nodes_of(cluster: &ClusterState) -> Vec<Node> {
    cluster
        .nodes
        .iter()
        .map(|n| Node {
            url: n.url.clone(),
            port: n.port,
            pid: n.pid,
            start_ticks: n.start_ticks,
            dir: n.dir.clone(),
            state: NodeState::Up,
        })
        .collect()
}

/// Starts node `i` again on its port and data directory, and updates the record.
fn restart(cluster: &mut Cluster, i: usize) -> Result<Duration, String> {
    let started = Instant::now();
    let node = &cluster.nodes[i];
    let tls = cluster.record.as_ref().and_then(|(_, r)| r.tls.as_ref());
    let record = up::start_node(&cluster.redis_server, &node.dir, Some(node.port), tls)?;
    let node = &mut cluster.nodes[i];
    node.pid = record.pid;
    node.start_ticks = record.start_ticks;
    node.state = NodeState::Up;
    if let Some((dir, state)) = &mut cluster.record {
        if let Some(slot) = state.nodes.get_mut(i) {
            *slot = record;
        }
        let _ = state::save(dir, state);
    }
    Ok(started.elapsed())
}

#[derive(Clone, Copy)]
enum Fault {
    Kill(usize),
    Restart(usize),
    Pause(usize),
    Resume(usize),
}

/// When each fault happens: node 2 killed at 25 % and restarted at 45 %, node 4 paused at 60 % and resumed at
/// 80 %. None with fewer than 3 nodes (one down would leave no majority to show).
fn fault_plan(d: Duration, nodes: usize) -> Vec<(Duration, Fault)> {
    if nodes < 3 {
        return Vec::new();
    }
    let (killed, paused) = (1, (nodes - 2).max(2).min(nodes - 1));
    vec![
        (d.mul_f64(0.25), Fault::Kill(killed)),
        (d.mul_f64(0.45), Fault::Restart(killed)),
        (d.mul_f64(0.60), Fault::Pause(paused)),
        (d.mul_f64(0.80), Fault::Resume(paused)),
    ]
}

fn live_line(shared: &Shared, total: u64, last_second: u64, cluster: &Cluster) -> String {
    let tally = shared
        .tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut sorted = tally.latencies_us.clone();
    let (violations, errors) = (tally.violations, tally.errors);
    drop(tally);
    sorted.sort_unstable();
    let pct = |p: f64| {
        sorted
            .get(((sorted.len() as f64 - 1.0) * p).round().max(0.0) as usize)
            .copied()
            .unwrap_or(0)
    };
    let nodes = if cluster.nodes.is_empty() {
        String::new()
    } else {
        let words: Vec<&str> = cluster.nodes.iter().map(|n| n.state.word()).collect();
        format!("  nodes [{}]", words.join(" "))
    };
    let shown = |p: f64| {
        if sorted.is_empty() {
            "-".to_owned()
        } else {
            duration::human(Duration::from_micros(pct(p)))
        }
    };
    format!(
        "locks {total} ({last_second}/s)  time to lock p50 {} p99 {}{nodes}  errors {errors}  violations {violations}",
        shown(0.5),
        shown(0.99),
    )
}

/// A fresh directory for the counter files (under the system's temp directory).
fn scratch_dir() -> Result<PathBuf, CliError> {
    let dir = std::env::temp_dir().join(format!(
        "muxlock-demo-{}-{}",
        std::process::id(),
        seed(7) % 1_000_000
    ));
    fs::create_dir_all(&dir).map_err(|e| {
        CliError::new(
            exit::CANTCREAT,
            "io",
            format!("cannot create {}: {e}", dir.display()),
        )
    })?;
    Ok(dir)
}

/// A worker process: the child, its progress (locks so far), and the thread reading its result.
type Worker = (Child, Arc<AtomicU64>, thread::JoinHandle<Option<Tally>>);

/// Starts a worker process; a thread reads its progress lines and its result.
fn spawn_worker(
    args: &Args,
    conn: &Conn,
    dir: &Path,
    duration: Duration,
) -> Result<Worker, CliError> {
    let exe = std::env::current_exe().map_err(|e| {
        CliError::new(
            exit::OSERR,
            "os",
            format!("cannot find this program to start a worker: {e}"),
        )
    })?;
    let mut child = Command::new(exe)
        .arg("demo")
        .arg("--worker")
        .arg(dir)
        .arg("--resources")
        .arg(args.resources.to_string())
        .arg("--ttl")
        .arg(format!("{}ms", millis(args.ttl)))
        .arg("--duration")
        .arg(format!("{}ms", millis(duration).max(1)))
        .arg("--round-timeout")
        .arg(format!("{}ms", millis(conn.round_timeout).max(1)))
        .arg("--restart-guard")
        .arg(if conn.restart_guard == Toggle::On {
            "on"
        } else {
            "off"
        })
        // The nodes (passwords included) go through the environment, not the command line that `ps` shows.
        .env("MUXLOCK_NODES", conn.nodes.join(","))
        .envs(
            [
                ("MUXLOCK_TLS_CA", &conn.tls_ca),
                ("MUXLOCK_TLS_CERT", &conn.tls_cert),
                ("MUXLOCK_TLS_KEY", &conn.tls_key),
            ]
            .into_iter()
            .filter_map(|(name, path)| path.as_ref().map(|p| (name, p))),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| {
            CliError::new(
                exit::OSERR,
                "os",
                format!("cannot start a worker process: {e}"),
            )
        })?;
    let progress = Arc::new(AtomicU64::new(0));
    let stdout = child.stdout.take();
    let seen = Arc::clone(&progress);
    let reader = thread::spawn(move || {
        let stdout = stdout?;
        let mut result = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("progress ") {
                if let Ok(n) = n.trim().parse() {
                    seen.store(n, Ordering::Relaxed);
                }
            } else if let Some(json) = line.strip_prefix("result ") {
                result = serde_json::from_str::<Tally>(json).ok();
            }
        }
        result
    });
    Ok((child, progress, reader))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_sees_overlaps_and_hand_offs() {
        let dir = scratch_dir().unwrap();
        let s = critical_section(&dir, 0, "a", Duration::ZERO, || false).unwrap();
        assert_eq!((s.violations, s.handoff, s.lost), (0, false, false));
        let s = critical_section(&dir, 0, "b", Duration::ZERO, || false).unwrap();
        assert_eq!((s.violations, s.handoff), (0, true));
        // Someone inside already: a violation.
        fs::write(dir.join("res-0.inside"), "x").unwrap();
        let s = critical_section(&dir, 0, "b", Duration::ZERO, || false).unwrap();
        assert_eq!(s.violations, 1);
        fs::remove_file(dir.join("res-0.inside")).unwrap();
        // A lost guard: no write.
        let s = critical_section(&dir, 0, "c", Duration::ZERO, || true).unwrap();
        assert!(s.lost);
        assert_eq!(counted(&dir, 1), 3);
        assert!(!dir.join("res-0.inside").exists());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn faults_need_a_majority_left() {
        assert!(fault_plan(Duration::from_secs(8), 2).is_empty());
        let plan = fault_plan(Duration::from_secs(8), 5);
        assert!(matches!(plan[0].1, Fault::Kill(1)));
        assert!(matches!(plan[2].1, Fault::Pause(3)));
        let plan = fault_plan(Duration::from_secs(8), 3);
        assert!(matches!(plan[2].1, Fault::Pause(2)));
    }
}
