//! The mutual-exclusion checker: workers compete for a few resources, every hold is recorded as an interval on one
//! monotonic clock, and a protected resource on a separate server counts concurrent writers.
//!
//! A hold is `[lock() returned, min(valid_until, unlock() called)]`. Two holds of the same resource that overlap
//! are a violation of Redlock's safety property; so is a writer that finds another writer inside the protected
//! section. Workers behave as a careful client should: they check [`Lock::is_valid`] before writing and leave the
//! protected section before the lease ends, so a violation means the *lock* failed, not the worker.
//!
//! A worker that overran its lease anyway (a pause, a thread the hypervisor froze) is counted apart, as is a
//! writer that found only overrunners inside ([`Stats::entered_with_overrunner`]): that is the process-pause hazard
//! no lease can prevent, not a failure of the lock. The scenarios fail on an overrun unless the [`FreezeMonitor`]
//! measured this process frozen, or the worker's own thread waited for a CPU ([`run_queue_wait`]), within that
//! worker's own interval; a freeze elsewhere in the run excuses nothing (`tests/mutex.rs` asserts it).
//!
//! Controls use careless workers, [`heedless_worker`] and [`heedless_guard_worker`], which act whatever their
//! lease has left and take themselves for the holder until they release: where holders outlive their leases,
//! the checker must see them.
//!
//! Reusable by benches and the CLI's bench: `#[path = "../tests/support/mod.rs"] mod support;`.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use muxlock::net::NodeError;
use muxlock::redlock::{Error, Lock, LockManager, Outcome, Report, Request};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use super::wire::{cmd, roundtrip};

/// Nanoseconds on `CLOCK_MONOTONIC`: one clock for every process on the machine.
pub fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

/// `instant` on the [`mono_ns`] clock (`Instant` is `CLOCK_MONOTONIC` on Linux, but opaque).
pub fn instant_ns(instant: Instant) -> u64 {
    let (now_ns, now) = (mono_ns(), Instant::now());
    match instant.checked_duration_since(now) {
        Some(ahead) => now_ns + ahead.as_nanos() as u64,
        None => now_ns.saturating_sub(now.duration_since(instant).as_nanos() as u64),
    }
}

/// One hold of one resource by one holder, in [`mono_ns`] nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub resource: String,
    pub holder: String,
    pub start: u64,
    pub end: u64,
}

impl Hold {
    /// `HOLD resource holder start end`: how a child process reports a hold on its stdout.
    pub fn to_line(&self) -> String {
        format!(
            "HOLD {} {} {} {}",
            self.resource, self.holder, self.start, self.end
        )
    }

    /// Parses [`Hold::to_line`]'s output; `None` for any other line.
    pub fn from_line(line: &str) -> Option<Hold> {
        let mut parts = line.strip_prefix("HOLD ")?.split(' ');
        let (resource, holder) = (parts.next()?.to_owned(), parts.next()?.to_owned());
        let (start, end) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
        Some(Hold {
            resource,
            holder,
            start,
            end,
        })
    }
}

/// Holds recorded by any number of threads.
#[derive(Clone, Debug, Default)]
pub struct Recorder(Arc<Mutex<Vec<Hold>>>);

impl Recorder {
    pub fn record(&self, hold: Hold) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(hold);
    }

    pub fn holds(&self) -> Vec<Hold> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Every pair of holds of the same resource whose intervals overlap.
pub fn overlaps(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut by_resource: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in holds {
        by_resource.entry(&h.resource).or_default().push(h);
    }
    let mut found = Vec::new();
    for list in by_resource.values_mut() {
        list.sort_by_key(|h| h.start);
        // Sorted by start: a hold overlaps an earlier one iff it starts before the latest end seen so far.
        let mut latest: Option<&Hold> = None;
        for &h in list.iter() {
            if let Some(prev) = latest {
                if h.start < prev.end {
                    found.push((prev.clone(), h.clone()));
                }
            }
            if latest.is_none_or(|p| h.end > p.end) {
                latest = Some(h);
            }
        }
    }
    found
}

/// Every instant some resource had more than `k` holders at once (a semaphore of `k` permits), as the holds
/// running then: per resource, the first such set after each hold that starts one.
pub fn over_capacity(holds: &[Hold], k: usize) -> Vec<Vec<Hold>> {
    let mut by_resource: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for h in holds.iter().filter(|h| h.start < h.end) {
        by_resource.entry(&h.resource).or_default().push(h);
    }
    let mut found = Vec::new();
    for list in by_resource.values_mut() {
        list.sort_by_key(|h| h.start);
        // The most holders at once is reached at some hold's start: count the holds running then (half-open).
        for (i, h) in list.iter().enumerate() {
            let running: Vec<Hold> = list[..=i]
                .iter()
                .filter(|o| o.end > h.start)
                .map(|&o| o.clone())
                .collect();
            let mut holders: Vec<&str> = running.iter().map(|o| &o.holder[..]).collect();
            holders.sort_unstable();
            holders.dedup();
            if holders.len() > k {
                found.push(running);
            }
        }
    }
    found
}

/// Every pair of a writer's hold and another hold of the same resource that overlap: another writer's, or a
/// reader's. The violations of a read-write lock (readers beside readers are fine).
pub fn beside_a_writer(writers: &[Hold], readers: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut found = overlaps(writers);
    for w in writers.iter().filter(|w| w.start < w.end) {
        let beside = readers.iter().filter(|r| {
            r.resource == w.resource && r.start < r.end && r.start < w.end && w.start < r.end
        });
        found.extend(beside.map(|r| (w.clone(), r.clone())));
    }
    found
}

/// The most holders any resource had at once.
pub fn most_at_once(holds: &[Hold]) -> usize {
    let mut k = 0;
    while !over_capacity(holds, k).is_empty() {
        k += 1;
    }
    k
}

/// Counts of what happened, shared by workers.
#[derive(Debug, Default)]
pub struct Stats {
    pub acquired: AtomicU64,
    pub held: AtomicU64,
    pub quorum: AtomicU64,
    pub other: AtomicU64,
    pub release_failed: AtomicU64,
    /// Locks that had expired before the worker could use them (a paused holder): not written with.
    pub expired_unused: AtomicU64,
    /// A writer found another writer inside the protected section whose lease had not ended: a violation.
    pub concurrent_writers: AtomicU64,
    /// A writer found inside only writers whose lease had ended (they overran it): not a violation of the lock.
    pub entered_with_overrunner: AtomicU64,
    /// The protected section ended after the lease: the worker was too slow (not a lock failure).
    pub overran: AtomicU64,
    /// In rounds that found no quorum, what the nodes that did not grant did: timed out, failed at the
    /// connection (refused, closed, reset, protocol), restarted too recently (restart guard), anything else.
    pub nodes_timed_out: AtomicU64,
    pub nodes_disconnected: AtomicU64,
    pub nodes_quarantined: AtomicU64,
    pub nodes_other: AtomicU64,
    /// The longest a thread of this process was kept from running while the scenario ran, in microseconds (see
    /// [`FreezeMonitor`]).
    pub worst_freeze_us: AtomicU64,
    /// Every freeze of at least [`FREEZE_RECORDED`] that the [`FreezeMonitor`] measured, as `[start, end]` on the
    /// [`mono_ns`] clock (at most [`MAX_RECORDED`] of them).
    pub freezes: Mutex<Vec<(u64, u64)>>,
    /// Each overrun counted in `overran`, as the interval `[validity checked, section left]` on the [`mono_ns`]
    /// clock in which the worker lost more time than its margin allowed, with how long the worker's thread waited
    /// to run meanwhile ([`run_queue_wait`]: runnable, the CPUs busy with others) (at most [`MAX_RECORDED`]).
    pub overruns: Mutex<Vec<(u64, u64, Duration)>>,
}

/// How long the calling thread has waited, runnable, for a CPU since it started (the kernel's scheduler
/// statistics, `/proc/thread-self/schedstat`); zero where the kernel does not keep them. On a loaded machine a
/// thread may wait there for a long time while the others (the [`FreezeMonitor`]'s among them) run.
pub fn run_queue_wait() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// The ids of this process's threads named `name` (read from `/proc/self/task/*/comm`).
pub fn threads_named(name: &str) -> Vec<u64> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim_end() == name).then(|| e.file_name().to_str()?.parse().ok())?
    })
    .collect()
}

/// The [`run_queue_wait`] so far of each thread of `tids` (zero for one that is gone).
pub fn queued_of(tids: &[u64]) -> Vec<Duration> {
    tids.iter()
        .map(|tid| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
                .map_or(Duration::ZERO, Duration::from_nanos)
        })
        .collect()
}

/// A worker's look at its lease's validity: when (on the [`mono_ns`] clock), and its thread's
/// [`run_queue_wait`] then.
#[derive(Clone, Copy, Debug)]
pub struct Checked {
    pub at: u64,
    waited: Duration,
}

impl Checked {
    /// Now, on the calling thread (the one that then works under the lease).
    pub fn now() -> Checked {
        Checked {
            at: mono_ns(),
            waited: run_queue_wait(),
        }
    }
}

/// The shortest freeze [`FreezeMonitor`] records as an interval: shorter ones are scheduling noise, and no worker's
/// margin is that small.
pub const FREEZE_RECORDED: Duration = Duration::from_millis(5);
/// Bound on the intervals kept in [`Stats::freezes`] and [`Stats::overruns`].
pub const MAX_RECORDED: usize = 100_000;

fn push_bounded<T>(list: &Mutex<Vec<T>>, interval: T) {
    let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
    if list.len() < MAX_RECORDED {
        list.push(interval);
    }
}

impl Stats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The lock of an attempt that got one; a failed attempt counted (held, no quorum with each node's outcome,
    /// or another error) and `None`.
    pub fn tally<T>(&self, got: muxlock::Result<T>) -> Option<T> {
        match got {
            Ok(lock) => Some(lock),
            Err(Error::Held(_)) => {
                Stats::add(&self.held);
                None
            }
            Err(Error::Quorum(report)) => {
                self.no_quorum(&report);
                None
            }
            Err(_) => {
                Stats::add(&self.other);
                None
            }
        }
    }

    /// Counts an attempt that found no quorum, and what each node that did not grant did.
    pub fn no_quorum(&self, report: &Report) {
        Stats::add(&self.quorum);
        for (_, outcome) in report.nodes() {
            match outcome {
                Outcome::Granted | Outcome::Taken | Outcome::NotHeld | Outcome::NotAwaited => {}
                Outcome::Failed(NodeError::Timeout) => Stats::add(&self.nodes_timed_out),
                Outcome::Failed(e) if e.is_connection_failure() => {
                    Stats::add(&self.nodes_disconnected)
                }
                Outcome::Quarantined => Stats::add(&self.nodes_quarantined),
                _ => Stats::add(&self.nodes_other),
            }
        }
    }

    /// Counts an overrun that happened in `[checked, left]` (see [`Stats::overruns`]).
    pub fn overran_in(&self, checked: Checked, left: u64) {
        let waited = run_queue_wait().saturating_sub(checked.waited);
        self.overran((checked.at, left), waited);
    }

    /// Counts an overrun in `[start, end]` during which the worker's thread waited `waited` for a CPU.
    pub fn overran(&self, (start, end): (u64, u64), waited: Duration) {
        Stats::add(&self.overran);
        push_bounded(&self.overruns, (start, end, waited));
    }

    /// How much of `[start, end]` the [`FreezeMonitor`] saw this process frozen (freezes of at least
    /// [`FREEZE_RECORDED`]).
    pub fn frozen_during(&self, start: u64, end: u64) -> Duration {
        let freezes = self.freezes.lock().unwrap_or_else(|e| e.into_inner());
        let ns: u64 = freezes
            .iter()
            .map(|&(s, e)| e.min(end).saturating_sub(s.max(start)))
            .sum();
        Duration::from_nanos(ns)
    }

    /// The overruns that no measured delay explains: in each, the worker lost more than `slack` beyond its work
    /// (its margin's spare time), and unless the freeze monitor saw this process frozen for at least `slack`
    /// within that very interval, or the worker's own thread waited that long for a CPU in it, the time was lost
    /// somewhere neither accounts for: by the lock.
    pub fn unexplained_overruns(&self, slack: Duration) -> Vec<(u64, u64)> {
        let overruns = self
            .overruns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        overruns
            .into_iter()
            .filter(|&(s, e, waited)| self.frozen_during(s, e) < slack && waited < slack)
            .map(|(s, e, _)| (s, e))
            .collect()
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = Stats::get;
        write!(
            f,
            "acquired {}, held by others {}, no quorum {} (nodes timed out {}, disconnected {}, quarantined {}, \
             other {}), other errors {}, release failures {}, expired before use {}, concurrent writers {}, \
             overran {} (entered with an overrunner inside {}), worst freeze {} ms",
            g(&self.acquired),
            g(&self.held),
            g(&self.quorum),
            g(&self.nodes_timed_out),
            g(&self.nodes_disconnected),
            g(&self.nodes_quarantined),
            g(&self.nodes_other),
            g(&self.other),
            g(&self.release_failed),
            g(&self.expired_unused),
            g(&self.concurrent_writers),
            g(&self.overran),
            g(&self.entered_with_overrunner),
            g(&self.worst_freeze_us) / 1000
        )
    }
}

/// What a writer found when it entered the protected section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Nobody else was inside.
    Alone,
    /// Another writer was inside, and one of the two had overrun its lease: the one inside (its lease had already
    /// ended), or this one (its own lease had ended when it entered: it was paused, a process stopped, between
    /// its check of the lease and its entry). The lock cannot prevent that; not a violation of the lock.
    WithOverrunner,
    /// Another writer was inside whose lease had not ended, and this one's had not either: two holders at once, a
    /// violation.
    WithHolder,
}

/// The protected resource, on a server that is not one of the lock nodes: per resource, the writers inside and
/// the end of each one's lease (on the [`mono_ns`] clock, which every process shares). A writer entering checks
/// atomically (one script) who is inside: another writer whose lease is still running is a violation of mutual
/// exclusion; one whose lease has ended is a writer that overran it, counted apart ([`Entry`]).
#[derive(Debug)]
pub struct Writers {
    stream: TcpStream,
    /// This writer's name in the protected section: unique across threads and processes.
    id: String,
}

/// `KEYS[1]`: the resource's writers (a hash: writer → lease end). `ARGV`: this writer, its lease end, now.
/// Returns 0 (alone), 1 (others inside, and either they or this writer had overrun their lease) or 2 (a writer
/// with a running lease inside, and this one's running too).
const ENTER: &str = "local found = 0 \
    local live = tonumber(ARGV[2]) > tonumber(ARGV[3]) \
    local inside = redis.call('HGETALL', KEYS[1]) \
    for i = 2, #inside, 2 do \
        if live and tonumber(inside[i]) > tonumber(ARGV[3]) then found = 2 elseif found == 0 then found = 1 end \
    end \
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) \
    return found";

/// [`ENTER`] for a section that admits `ARGV[4]` writers at once (a semaphore's): 2 if this writer's lease runs
/// and at least that many others' leases run too, 1 if that many others are inside but some overran, else 0.
const ENTER_AMONG: &str = "local live, others = 0, 0 \
    local mine = tonumber(ARGV[2]) > tonumber(ARGV[3]) \
    local inside = redis.call('HGETALL', KEYS[1]) \
    for i = 2, #inside, 2 do \
        others = others + 1 \
        if tonumber(inside[i]) > tonumber(ARGV[3]) then live = live + 1 end \
    end \
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) \
    local k = tonumber(ARGV[4]) \
    if mine and live >= k then return 2 end \
    if others >= k then return 1 end \
    return 0";

impl Writers {
    #[track_caller]
    pub fn connect(addr: SocketAddr) -> Writers {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let stream = TcpStream::connect(addr).expect("connect to the protected resource");
        stream.set_nodelay(true).expect("nodelay");
        let id = format!(
            "{}.{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        Writers { stream, id }
    }

    fn call(&mut self, args: &[&str]) -> i64 {
        let reply = roundtrip(
            &mut self.stream,
            &cmd(args),
            1,
            Instant::now() + Duration::from_secs(10),
        )
        .expect("protected resource answers");
        let text = String::from_utf8_lossy(&reply);
        text.trim_start_matches(':')
            .trim_end()
            .parse()
            .unwrap_or_else(|_| panic!("not an integer: {text}"))
    }

    /// Enters the protected section of `resource` as the holder of a lease that ends at `lease_end` (a
    /// [`mono_ns`] time): who was inside.
    pub fn enter(&mut self, resource: &str, lease_end: u64) -> Entry {
        let key = format!("writers:{resource}");
        let (end, now) = (lease_end.to_string(), mono_ns().to_string());
        let id = self.id.clone();
        match self.call(&["EVAL", ENTER, "1", &key, &id, &end, &now]) {
            0 => Entry::Alone,
            1 => Entry::WithOverrunner,
            _ => Entry::WithHolder,
        }
    }

    /// As [`Writers::enter`], for a section `k` writers may share (the holders of a semaphore of `k` permits):
    /// [`Entry::WithHolder`] only if `k` others with running leases are inside.
    pub fn enter_among(&mut self, resource: &str, lease_end: u64, k: usize) -> Entry {
        let key = format!("writers:{resource}");
        let (end, now) = (lease_end.to_string(), mono_ns().to_string());
        let (id, k) = (self.id.clone(), k.to_string());
        match self.call(&["EVAL", ENTER_AMONG, "1", &key, &id, &end, &now, &k]) {
            0 => Entry::Alone,
            1 => Entry::WithOverrunner,
            _ => Entry::WithHolder,
        }
    }

    pub fn leave(&mut self, resource: &str) {
        let id = self.id.clone();
        self.call(&["HDEL", &format!("writers:{resource}"), &id]);
    }
}

/// Measures how long this process's threads are kept from running: a thread sleeps 1 ms at a time and records the
/// longest overshoot in [`Stats::worst_freeze_us`], until dropped. On a VM whose host is busy, the hypervisor takes
/// vCPUs away (steal time) and a thread may freeze for tens or hundreds of milliseconds; a worker frozen between
/// its validity check and its write outlives its lease through no fault of the lock, and this tells the two apart.
#[derive(Debug)]
pub struct FreezeMonitor {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FreezeMonitor {
    pub fn start(stats: Arc<Stats>) -> FreezeMonitor {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let (t, t_ns) = (Instant::now(), mono_ns());
                std::thread::sleep(Duration::from_millis(1));
                let over = t.elapsed().saturating_sub(Duration::from_millis(1));
                stats
                    .worst_freeze_us
                    .fetch_max(over.as_micros() as u64, Ordering::Relaxed);
                if over >= FREEZE_RECORDED {
                    // The freeze lay somewhere in the sleep: record the whole sleep, which errs towards
                    // excusing a little more than the freeze itself (by 1 ms).
                    push_bounded(&stats.freezes, (t_ns, mono_ns()));
                }
            }
        });
        FreezeMonitor {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FreezeMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a worker does, and for how long.
#[derive(Clone, Debug)]
pub struct Work {
    pub resources: Vec<String>,
    pub ttl: Duration,
    pub until: Instant,
    /// Time spent inside the protected section, at most.
    pub max_work: Duration,
    /// Before writing, sleep this long with the lock held once every `pause_every` holds (a GC pause).
    pub pause: Option<(u64, Duration)>,
    pub seed: u64,
    /// [`worker`] acquires with `.wait(..)` at most this long (the nodes' queue, shared across processes),
    /// instead of retrying.
    pub wait: Option<Duration>,
}

impl Work {
    /// Acquires as `request` asks, waiting up to [`Work::wait`] if set.
    pub fn acquire(&self, request: Request<'_>) -> muxlock::Result<Lock> {
        match self.wait {
            Some(max_wait) => request.wait(max_wait).acquire(),
            None => request.acquire(),
        }
    }

    /// How much lease a worker wants left before it writes: its longest write, plus 20 ms.
    pub fn margin(&self) -> Duration {
        self.max_work + Duration::from_millis(20)
    }

    /// Before the `holds`-th hold's writes: the pause of [`Work::pause`] if this hold is one it falls on.
    pub fn pause_before(&self, holds: u64) {
        if let Some((every, pause)) = self.pause {
            if holds % every == 0 {
                std::thread::sleep(pause);
            }
        }
    }
}

/// One worker: acquire a random resource, write to the protected resource while the lease is valid, release;
/// until `work.until`. Every hold is recorded.
pub fn worker(
    name: &str,
    locks: &LockManager,
    work: &Work,
    protected: SocketAddr,
    recorder: &Recorder,
    stats: &Stats,
) {
    worker_heeding(name, locks, work, protected, (recorder, stats), true);
}

/// **A control's worker: a careless client.** As [`worker`], but it writes whatever its lease has left (after a
/// [`Work::pause`] too) and takes itself for the holder until it releases: its hold is recorded up to then,
/// not up to the lease's end. Run where holders outlive their leases (pauses), the checker must see it.
pub fn heedless_worker(
    name: &str,
    locks: &LockManager,
    work: &Work,
    protected: SocketAddr,
    recorder: &Recorder,
    stats: &Stats,
) {
    worker_heeding(name, locks, work, protected, (recorder, stats), false);
}

/// [`worker`] (`heed`: the lease's end bounds writes and the hold) or [`heedless_worker`].
fn worker_heeding(
    name: &str,
    locks: &LockManager,
    work: &Work,
    protected: SocketAddr,
    (recorder, stats): (&Recorder, &Stats),
    heed: bool,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(work.seed);
    let mut writers = Writers::connect(protected);
    let mut holds = 0u64;
    while Instant::now() < work.until {
        let resource = &work.resources[(rng.next_u32() as usize) % work.resources.len()];
        let Some(lock) = stats.tally(work.acquire(locks.request(resource).ttl(work.ttl))) else {
            continue;
        };
        let start = mono_ns();
        Stats::add(&stats.acquired);
        holds += 1;
        work.pause_before(holds);
        // A careful client: write only while the lease is valid, leaving a margin for the write itself.
        let margin = work.margin();
        let checked = Checked::now();
        if !heed || lock.validity() > margin {
            match writers.enter(resource, instant_ns(lock.valid_until())) {
                Entry::Alone => {}
                Entry::WithOverrunner => Stats::add(&stats.entered_with_overrunner),
                Entry::WithHolder => Stats::add(&stats.concurrent_writers),
            }
            let work_for = work
                .max_work
                .mul_f64(f64::from(rng.next_u32() % 1000) / 1000.0);
            std::thread::sleep(work_for);
            writers.leave(resource);
            if !lock.is_valid() {
                stats.overran_in(checked, mono_ns());
            }
        } else {
            Stats::add(&stats.expired_unused);
        }
        let end = match heed {
            true => mono_ns().min(instant_ns(lock.valid_until())),
            false => mono_ns(),
        };
        recorder.record(Hold {
            resource: resource.clone(),
            holder: name.to_owned(),
            start,
            end,
        });
        if locks.unlock(lock).is_err() {
            Stats::add(&stats.release_failed);
        }
    }
}

/// A worker that holds its locks under guards: wait for a random resource (`.wait(..).hold()`), work on it in steps of up
/// to `max_work` for up to `steps` steps, looking at the guard before each, release; until `work.until`. A step is
/// written with the lease end the guard promises at that moment ([`Guard::deadline`]); a hold is recorded as
/// `[acquired, min(last step's end, its deadline)]`. The guard's TTL is `work.ttl`; the holds last longer than
/// it, so they live on renewals.
///
/// [`Guard::deadline`]: muxlock::Guard::deadline
pub fn guard_worker(
    name: &str,
    locks: &LockManager,
    (work, steps): (&Work, u32),
    protected: SocketAddr,
    recorder: &Recorder,
    stats: &Stats,
) {
    guard_worker_heeding(
        name,
        locks,
        (work, steps),
        protected,
        (recorder, stats),
        true,
    );
}

/// **A control's worker: a careless guard holder.** As [`guard_worker`], but it takes its steps whether or not the
/// guard is lost and takes itself for the holder until it releases: each hold is recorded up to its last step's
/// end, not up to the guard's deadline. Run where guards are lost (a stopped process), the checker must see it.
pub fn heedless_guard_worker(
    name: &str,
    locks: &LockManager,
    (work, steps): (&Work, u32),
    protected: SocketAddr,
    recorder: &Recorder,
    stats: &Stats,
) {
    guard_worker_heeding(
        name,
        locks,
        (work, steps),
        protected,
        (recorder, stats),
        false,
    );
}

/// [`guard_worker`] (`heed`: a lost guard ends the hold, its deadline bounds it) or [`heedless_guard_worker`].
fn guard_worker_heeding(
    name: &str,
    locks: &LockManager,
    (work, steps): (&Work, u32),
    protected: SocketAddr,
    (recorder, stats): (&Recorder, &Stats),
    heed: bool,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(work.seed);
    let mut writers = Writers::connect(protected);
    while Instant::now() < work.until {
        let resource = &work.resources[(rng.next_u32() as usize) % work.resources.len()];
        let guard = match locks
            .request(resource)
            .ttl(work.ttl)
            .wait(work.ttl * 4)
            .hold()
        {
            Ok(guard) => guard,
            Err(Error::Held(_)) => {
                Stats::add(&stats.held);
                continue;
            }
            Err(Error::Quorum(_)) => {
                Stats::add(&stats.quorum);
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        let start = mono_ns();
        Stats::add(&stats.acquired);
        let mut end = start;
        for _ in 0..=(rng.next_u32() % steps) {
            let checked = Checked::now();
            let deadline = instant_ns(guard.deadline());
            if guard.is_lost() {
                Stats::add(&stats.expired_unused);
                if heed {
                    break;
                }
            }
            match writers.enter(resource, deadline) {
                Entry::Alone => {}
                Entry::WithOverrunner => Stats::add(&stats.entered_with_overrunner),
                Entry::WithHolder => Stats::add(&stats.concurrent_writers),
            }
            let work_for = work
                .max_work
                .mul_f64(f64::from(rng.next_u32() % 1000) / 1000.0);
            std::thread::sleep(work_for);
            writers.leave(resource);
            let left = mono_ns();
            end = if heed { left.min(deadline) } else { left };
            if left >= deadline {
                stats.overran_in(checked, left);
            }
        }
        recorder.record(Hold {
            resource: resource.clone(),
            holder: name.to_owned(),
            start,
            end,
        });
        if guard.release().is_err() {
            Stats::add(&stats.release_failed);
        }
    }
}

/// Prints the scenario's line: what was injected, the counts, the violations.
pub fn report(
    scenario: &str,
    stats: &Stats,
    holds: &[Hold],
    violations: &[(Hold, Hold)],
) -> String {
    let line = format!(
        "{scenario}: {} holds; {stats}; overlapping holds {}",
        holds.len(),
        violations.len()
    );
    println!("{line}");
    let _ = std::io::stdout().flush();
    line
}
