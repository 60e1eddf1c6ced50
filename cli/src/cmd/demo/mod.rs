//! `muxlock demo`: the README's main job, a live demonstration of mutual exclusion while nodes fail.
//!
//! 1. **Nodes.** The local cluster of `muxlock cluster up` if one is running; else a new 5-node one, started and
//!    recorded the same way (`appendonly yes`, `appendfsync always`), and stopped at the end. With `--nodes` (or
//!    `MUXLOCK_NODES`) those nodes are used, and the node faults are skipped: they are not this machine's to kill.
//! 2. **Workers.** `--threads` threads in this process share one `LockManager`; `--processes` other processes (this
//!    binary again, with a hidden `--worker DIR`) run two threads each. Every worker loops: pick one of
//!    `--resources` resources, wait for it under a guard ([`wait`](muxlock::Request::wait) then
//!    [`hold`](muxlock::Request::hold): no polling), then the critical section (a few milliseconds; one in 150
//!    lasts half the lease, so that the guard renews it), then release.
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
//!    A second that completes less than half the locks of the seconds before says why it may be: how many of
//!    this process' workers are waiting for a lock, and the last fault. The last line is the verdict: `PASS` or
//!    `FAIL`, with the counts. The picture (`--svg`, `muxlock-demo.svg` by default): locks per second over time,
//!    the faults marked.
//!
//! 6. **Interrupts.** Ctrl-C (SIGINT) or SIGTERM stops the run early: the threads here stop (a waiting one gives
//!    up at once, one inside a critical section finishes it), the worker processes see the stop file (they also
//!    stop by themselves on the terminal's Ctrl-C, and report), their results are read (each waited for up to 15
//!    s), the summary is printed, and what the demo started is stopped. A second one skips the waiting: worker
//!    processes still running are killed (SIGKILL), unfinished threads are left to end with the process, no
//!    summary; the nodes this demo started are still stopped, then exit 130. That wait is short unless a worker
//!    is stuck (stopped with SIGSTOP, or hung) or a section is long (`--ttl` large): `cli/tests/nodes/demo.rs` stops a
//!    worker process to show it.
//!
//! Exit codes: 0 when every check passed; 70 if a violation was seen (a bug: please report it); 69 if no lock was
//! granted at all; 130 after a second interrupt; the usual codes for a cluster that cannot start or nodes that
//! cannot be used.
//!
//! # Layout
//!
//! - this file: the arguments, and the run itself: the signals, the first lock, the workers started and
//!   stopped, the faults at their time, the live line each second, the verdict;
//! - `worker`: the worker loop and its check (the protected counter), and the worker processes;
//! - `cluster`: the nodes under the demo (given, running or started here), their faults, and the clean-up;
//! - `screen`: where the live line and the events go;
//! - `plot`: the picture of the run, as SVG text;
//! - `summary`: the figures at the end, as text or JSON.

mod cluster;
mod plot;
mod screen;
mod summary;
mod worker;

use std::fs;
use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;

use crate::duration::{self, millis};
use crate::exit::{self, CliError};
use crate::nodes::Conn;
use crate::output;

use cluster::{Cluster, Fault, fault_plan};
use plot::{Mark, Second};
use screen::{Screen, live_line};
use summary::Event;
use worker::{Shared, Tally, counted, scratch_dir, seed, spawn_worker, work, worker_process};

/// Show the lock at work: workers contend while nodes are killed, restarted and paused.
///
/// Starts a local 5-node cluster unless one is running (or --nodes is given), runs worker threads and another
/// process that contend for a few resources while a protected counter checks mutual exclusion, kills a node and
/// restarts it, pauses one, prints what happens live, and a summary at the end (acquisitions, hand-offs, latency
/// percentiles, per-node figures, violations, what the restart guard did). Stops what it started.
#[derive(ClapArgs)]
#[command(
    after_help = "Example:\n  muxlock demo\n  muxlock demo --short   # about 8 s: the CI run",
    after_long_help = "Example:\n  muxlock demo\n  muxlock demo --short   # about 8 s: the CI run\n\n\
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

    /// Worker processes besides this one, two threads each.
    ///
    /// They show locks across processes.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=16))]
    pub processes: u32,

    /// Resources the workers contend for.
    #[arg(long, value_name = "K", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub resources: u32,

    /// Each lock's lease.
    ///
    /// The guard renews it while the work runs.
    #[arg(long, value_name = "DUR", default_value = "2s", value_parser = crate::cmd::ttl)]
    pub ttl: Duration,

    /// Print the summary as JSON on stdout (the live lines go to stderr).
    #[arg(long)]
    pub json: bool,

    /// Where to write the picture (SVG).
    ///
    /// Locks per second over time, with the kill, restart, pause and resume marked.
    #[arg(long, value_name = "FILE", default_value = "muxlock-demo.svg")]
    pub svg: PathBuf,

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

struct Demo<'a> {
    args: &'a Args,
    duration: Duration,
    screen: Screen,
    events: Vec<Event>,
    /// Locks completed in each second of the run, in all processes.
    seconds: Vec<Second>,
    /// The faults, for the picture.
    marks: Vec<Mark>,
    /// The last line: PASS or FAIL with the counts, once the run has a summary.
    verdict: Option<String>,
}

/// A fault's short name, for the picture and the live line.
fn label(fault: Fault) -> String {
    match fault {
        Fault::Kill(i) => format!("node {} killed", i + 1),
        Fault::Restart(i) => format!("node {} restarted", i + 1),
        Fault::Pause(i) => format!("node {} paused", i + 1),
        Fault::Resume(i) => format!("node {} resumed", i + 1),
    }
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
            seconds: Vec::new(),
            marks: Vec::new(),
            verdict: None,
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
        if let Some(verdict) = demo.verdict.take() {
            demo.screen.write(&format!("{verdict}\n"));
        }
        result
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
            waiting: AtomicU64::new(0),
            tally: Mutex::new(Tally::default()),
        });

        // The first lock, alone, to show how soon a fresh cluster grants.
        let first = Instant::now();
        let first_lock = match locks
            .request("muxlock-demo:first")
            .ttl(args.ttl)
            .wait(Duration::from_secs(15))
            .hold()
        {
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
                    self.marks.push(Mark {
                        at_ms: millis(self.screen.start.elapsed()),
                        label: label(*fault),
                    });
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
                let this_second = total - last_count;
                let mut line = live_line(&shared, total, this_second, cluster);
                line.push_str(&self.slower(this_second, &shared, args.threads));
                last_count = total;
                self.seconds.push(Second {
                    at_ms: millis(self.screen.start.elapsed()),
                    locks: this_second,
                });
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
        let mut summary =
            self.summary(&tally, violations, counters, first_lock, &stats, cluster)?;
        summary.per_second.clone_from(&self.seconds);
        summary.svg = self.write_svg();
        let verdict = self.verdict_line(&tally, violations, missing);
        summary.verdict = if verdict.starts_with("PASS") {
            "pass"
        } else {
            "fail"
        };
        self.print_summary(&summary, &stats, cluster, missing, &tally)?;
        self.verdict = Some(verdict);
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

    /// What the live line adds when this second completed less than half the locks of the seconds before: how
    /// many workers here wait for a lock (for a holder, or for a majority to answer), and the last fault.
    fn slower(&self, this_second: u64, shared: &Shared, threads: u32) -> String {
        let before: Vec<u64> = self.seconds.iter().rev().take(5).map(|s| s.locks).collect();
        if before.len() < 2 {
            return String::new();
        }
        let mean = before.iter().sum::<u64>() as f64 / before.len() as f64;
        if this_second as f64 >= mean / 2.0 {
            return String::new();
        }
        let waiting = shared.waiting.load(Ordering::Relaxed);
        let after = self
            .marks
            .last()
            .map(|m| {
                let ago = self
                    .screen
                    .start
                    .elapsed()
                    .saturating_sub(Duration::from_millis(m.at_ms));
                format!(", {} after {}", duration::human(ago), m.label)
            })
            .unwrap_or_default();
        format!(
            "  (slower: {waiting} of {threads} threads here waiting for a lock{after}; each waits for its holder's \
             release or lease, or for a majority of nodes to answer)"
        )
    }

    /// Writes the picture to `--svg`; the path, or why not (said on the screen).
    fn write_svg(&mut self) -> Option<String> {
        let title = format!(
            "muxlock demo: locks per second, {} threads and {} process(es), {} resource(s)",
            self.args.threads, self.args.processes, self.args.resources
        );
        let text = plot::svg(&title, &self.seconds, &self.marks);
        match fs::write(&self.args.svg, text) {
            Ok(()) => Some(self.args.svg.display().to_string()),
            Err(e) => {
                self.screen.line(&format!(
                    "could not write the picture to {}: {e}",
                    self.args.svg.display()
                ));
                None
            }
        }
    }

    /// PASS when every check passed, else FAIL and why; with the counts either way.
    fn verdict_line(&self, tally: &Tally, violations: u64, missing: usize) -> String {
        let faults: Vec<&str> = self.marks.iter().map(|m| m.label.as_str()).collect();
        let counts = format!(
            "{} locks in {}, {violations} violations, {} waits gave up, {} errors, {} guards lost{}",
            tally.acquisitions,
            duration::human(self.duration),
            tally.waits_timed_out,
            tally.errors,
            tally.lost,
            if faults.is_empty() {
                String::new()
            } else {
                format!(" ({})", faults.join(", "))
            }
        );
        let fail = if missing > 0 {
            Some(format!("{missing} worker process(es) did not report"))
        } else if violations > 0 {
            Some("mutual exclusion was violated".to_owned())
        } else if tally.acquisitions == 0 {
            Some("no lock was granted".to_owned())
        } else {
            None
        };
        match fail {
            None => format!("PASS  {counts}"),
            Some(why) => format!("FAIL  {why}: {counts}"),
        }
    }

    fn event(&mut self, what: &str) {
        self.events.push(Event {
            at_ms: millis(self.screen.start.elapsed()),
            what: what.to_owned(),
        });
        self.screen.line(what);
    }
}
