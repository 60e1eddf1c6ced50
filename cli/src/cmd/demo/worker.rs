//! The workers: the loop each runs (hold one resource at a time, then the critical section), the protected
//! counter that checks mutual exclusion, and the worker processes (this binary again, `--worker DIR`).

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use muxlock::LockManager;
use serde::{Deserialize, Serialize};

use super::Args;
use crate::duration::millis;
use crate::exit::{self, CliError};
use crate::nodes::{Conn, Toggle};
use crate::output;

/// How long a worker waits for a lock before it counts the wait as timed out and tries another.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(3);
/// How long a worker process may run past the demo's duration before it stops by itself.
const WORKER_GRACE: Duration = Duration::from_secs(30);

/// One worker's (or one process's) figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct Tally {
    pub(super) acquisitions: u64,
    pub(super) handoffs: u64,
    pub(super) waits_timed_out: u64,
    pub(super) errors: u64,
    pub(super) lost: u64,
    pub(super) violations: u64,
    /// Time to acquire (`.wait(..).hold()`, waiting for the holder included), in microseconds.
    pub(super) latencies_us: Vec<u64>,
    pub(super) last_error: Option<String>,
}

impl Tally {
    pub(super) fn add(&mut self, other: &Tally) {
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
pub(super) struct Shared {
    pub(super) dir: PathBuf,
    pub(super) resources: u32,
    pub(super) ttl: Duration,
    pub(super) stop: AtomicBool,
    pub(super) acquisitions: AtomicU64,
    /// The workers of this process waiting for a lock now.
    pub(super) waiting: AtomicU64,
    pub(super) tally: Mutex<Tally>,
}

/// A worker loop: until `stop`, hold one resource at a time and run the critical section under it.
pub(super) fn work(locks: &LockManager, shared: &Shared, me: &str, seed: u64) {
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
        shared.waiting.fetch_add(1, Ordering::Relaxed);
        let got = locks.request(&key).ttl(shared.ttl).wait(MAX_WAIT).hold();
        shared.waiting.fetch_sub(1, Ordering::Relaxed);
        match got {
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
pub(super) fn counted(dir: &Path, resources: u32) -> u64 {
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
pub(super) fn worker_process(args: &Args, dir: &Path) -> Result<(), CliError> {
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
        waiting: AtomicU64::new(0),
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

pub(super) fn seed(i: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    nanos ^ (u64::from(std::process::id()) << 20) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A fresh directory for the counter files (under the system's temp directory).
pub(super) fn scratch_dir() -> Result<PathBuf, CliError> {
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
pub(super) type Worker = (Child, Arc<AtomicU64>, thread::JoinHandle<Option<Tally>>);

/// Starts a worker process; a thread reads its progress lines and its result.
pub(super) fn spawn_worker(
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
        // The same window as this process': a worker told a shorter one would count a restarted node too early.
        .args(
            conn.restart_window
                .map(|w| ["--restart-window".to_owned(), format!("{}ms", millis(w))])
                .into_iter()
                .flatten(),
        )
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
}
