//! The throughput engine, shared by `benches/throughput.rs` (its method is documented there) and
//! `scripts/bench-report` (`benches/report.rs`): the clients ([`Client`], [`Clients`]), the [`Settings`], one case
//! ([`run_case`]: N callers for a window) and the repetitions in alternation ([`run_all`]). Two clients only the
//! report runs by default: `redlock` (the crate, one client per caller thread) and `redis-rs/single` (no Redlock:
//! one redis-rs connection per caller thread to node 0).
//!
//! - [`caller`]: one caller's loop per client, and what it records.
//! - [`report`]: CPU from `/proc`, the rows and the tables.

// Each bench root uses only part of the engine.
#![allow(dead_code)]

pub mod caller;
pub mod report;

use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use std::{env, thread};

use caller::{Names, Tally, Window, locker_caller, muxlock_caller, quorum_caller, rslock_caller};
use muxlock::{Config, LockManager};
use report::{Cpu, Row};
use tokio::runtime::Runtime;

use crate::peers::quorum::RedisQuorum;
use crate::peers::{Locker, RedisSingle, RedlockRs};

/// The lease of every lock.
pub const TTL: Duration = Duration::from_secs(30);
/// The bound on one tokio call (acquire or release).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long after its window a case waits for its callers: two timed-out calls and some.
pub const GRACE: Duration = Duration::from_secs(6);

// ---------------------------------------------------------------- clients and settings

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Client {
    Shared,
    PerThread,
    Rslock,
    Quorum,
    /// The `redlock` crate, one client per caller thread (it opens a connection per node per command).
    Redlock,
    /// No Redlock: one redis-rs sync connection per caller thread to node 0.
    Single,
    /// muxlock's async API: tasks on a 2-worker multi-thread tokio runtime of its own, sharing the
    /// manager of `muxlock/shared`.
    Async,
    /// [`RedisQuorum`] deciding each round only once every node answered (the async bench's harness,
    /// `benches/async.rs`).
    QuorumAll,
    /// No compare at all (the floor for native compare-and-delete): muxlock's own fanout, shared like
    /// `muxlock/shared`, sends `SET NX PX` then a plain `DEL` to every node, each decided by a majority. What a
    /// cycle would cost the servers if the release needed no compare.
    Floor,
    /// `muxlock/shared` with folded releases on (`Config::with_fold_releases(true)`; off by default):
    /// releases asked for while another is in flight go out together, one script call per fold on a script node.
    /// Named only with `MUXLOCK_TP_CLIENTS`, to weigh the fold in one run.
    Folded,
    /// `muxlock/shared` without the clock check (`Config::with_clock_check(false)`; on by default): each
    /// command alone, not between two `TIME`s. Named only with `MUXLOCK_TP_CLIENTS`, to weigh the check.
    Unchecked,
}

/// The clients `benches/throughput.rs` runs by default.
pub const CLIENTS: [Client; 4] = [
    Client::Shared,
    Client::PerThread,
    Client::Rslock,
    Client::Quorum,
];

/// Every client, as `scripts/bench-report` runs them (and the floor, named only with `MUXLOCK_TP_CLIENTS`).
pub const ALL_CLIENTS: [Client; 11] = [
    Client::Shared,
    Client::PerThread,
    Client::Rslock,
    Client::Quorum,
    Client::Redlock,
    Client::Single,
    Client::Floor,
    Client::Async,
    Client::QuorumAll,
    Client::Folded,
    Client::Unchecked,
];

impl Client {
    pub fn name(self) -> &'static str {
        match self {
            Client::Shared => "muxlock/shared",
            Client::PerThread => "muxlock/per-thread",
            Client::Rslock => "rslock",
            Client::Quorum => "redis-rs/quorum",
            Client::Redlock => "redlock",
            Client::Single => "redis-rs/single",
            Client::Floor => "floor/set+del",
            Client::Async => "muxlock/async",
            Client::QuorumAll => "redis-rs/quorum-all",
            Client::Folded => "muxlock/folded",
            Client::Unchecked => "muxlock/unchecked",
        }
    }

    /// The client's part of a resource name.
    fn tag(self) -> &'static str {
        match self {
            Client::Shared => "mux-shared",
            Client::PerThread => "mux-thread",
            Client::Rslock => "rslock",
            Client::Quorum => "quorum",
            Client::Redlock => "redlock",
            Client::Single => "single",
            Client::Floor => "floor",
            Client::Async => "mux-async",
            Client::QuorumAll => "quorum-all",
            Client::Folded => "mux-folded",
            Client::Unchecked => "mux-unchecked",
        }
    }

    pub fn is_muxlock(self) -> bool {
        matches!(
            self,
            Client::Shared | Client::PerThread | Client::Async | Client::Folded | Client::Unchecked
        )
    }
}

pub struct Settings {
    pub quick: bool,
    pub threads: Vec<usize>,
    /// The clients to run (`MUXLOCK_TP_CLIENTS`, names as in the table; default all).
    pub clients: Vec<Client>,
    pub warmup: Duration,
    pub secs: Duration,
    pub reps: usize,
}

impl Settings {
    pub fn from_env(quick: bool) -> Settings {
        if quick {
            return Settings {
                quick,
                threads: vec![1, 4],
                clients: CLIENTS.to_vec(),
                warmup: Duration::from_millis(50),
                secs: Duration::from_millis(200),
                reps: 1,
            };
        }
        let var = |name: &str| env::var(name).ok().filter(|v| !v.is_empty());
        let secs: f64 =
            var("MUXLOCK_TP_SECS").map_or(3.0, |v| v.parse().expect("MUXLOCK_TP_SECS: seconds"));
        let threads = var("MUXLOCK_TP_THREADS").map_or_else(
            || vec![1, 4, 16, 64],
            |v| {
                v.split(',')
                    .map(|n| {
                        n.trim()
                            .parse()
                            .expect("MUXLOCK_TP_THREADS: counts, e.g. 1,4,16")
                    })
                    .collect()
            },
        );
        let clients = var("MUXLOCK_TP_CLIENTS").map_or_else(
            || CLIENTS.to_vec(),
            |v| {
                v.split(',')
                    .map(|name| {
                        *ALL_CLIENTS
                            .iter()
                            .find(|c| c.name() == name.trim())
                            .unwrap_or_else(|| {
                                panic!("MUXLOCK_TP_CLIENTS: unknown client {name:?}")
                            })
                    })
                    .collect()
            },
        );
        Settings {
            quick,
            threads,
            clients,
            warmup: Duration::from_millis(300),
            secs: Duration::from_secs_f64(secs),
            reps: var("MUXLOCK_TP_REPS")
                .map_or(3, |v| v.parse().expect("MUXLOCK_TP_REPS: a count")),
        }
    }
}

/// Every client, built once (the `redlock` crate's and redis-rs/single's per case, one per caller).
pub struct Clients {
    pub shared: Arc<LockManager>,
    /// `muxlock/folded`'s manager (built only when that client runs).
    folded: Option<Arc<LockManager>>,
    /// `muxlock/unchecked`'s manager, if that client runs.
    unchecked: Option<Arc<LockManager>>,
    per_thread: Vec<Arc<LockManager>>,
    rslock: rslock::LockManager,
    rslock_rt: Runtime,
    quorum: RedisQuorum,
    pub quorum_rt: Runtime,
    /// `muxlock/async`'s runtime: 2 workers, as `benches/async.rs` runs every tokio client.
    async_rt: Runtime,
    urls: Vec<String>,
    floor: Arc<muxlock::net::Fanout>,
}

impl Clients {
    pub fn build(urls: &[String], settings: &Settings) -> Clients {
        // Test mode must not fail on a slow machine (as in benches/lock.rs); bench mode keeps the default.
        let config = Config::default()
            .with_restart_guard(false)
            .with_retry_count(0)
            .with_round_timeout(if settings.quick {
                Duration::from_secs(2)
            } else {
                Config::default().round_timeout()
            });
        let mux_with = |config: Config| {
            let manager = LockManager::builder()
                .nodes(urls.iter().cloned())
                .config(config)
                .build()
                .expect("a valid configuration");
            Arc::new(manager)
        };
        let mux = || mux_with(config.clone());
        let most = settings.threads.iter().copied().max().unwrap_or(1);
        let runtime = || {
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("a multi-thread tokio runtime")
        };
        let mut rslock = rslock::LockManager::new(urls.to_vec());
        rslock.set_retry(1, Duration::from_millis(1));
        let quorum_rt = runtime();
        let quorum = quorum_rt
            .block_on(RedisQuorum::connect(urls, TTL))
            .expect("redis-rs connections");
        Clients {
            shared: mux(),
            folded: settings
                .clients
                .contains(&Client::Folded)
                .then(|| mux_with(config.clone().with_fold_releases(true))),
            unchecked: settings
                .clients
                .contains(&Client::Unchecked)
                .then(|| mux_with(config.clone().with_clock_check(false))),
            per_thread: (0..most).map(|_| mux()).collect(),
            rslock,
            rslock_rt: runtime(),
            quorum,
            quorum_rt,
            async_rt: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a multi-thread tokio runtime"),
            urls: urls.to_vec(),
            floor: Arc::new(
                muxlock::net::Fanout::new(
                    urls.iter()
                        .map(|u| u.parse().expect("a node URL"))
                        .collect(),
                    muxlock::net::Options::default(),
                )
                .expect("a fanout"),
            ),
        }
    }

    /// Connects every client (they connect on first use) and checks that a cycle works.
    pub fn warm_up(&mut self) {
        // A name per manager: one manager's release need not have reached every node before the next one locks.
        // A few tries: on a VM whose vCPUs are stolen, one 50 ms round can fail for a frozen thread.
        let once = |m: &LockManager, i: usize| {
            let mut last = None;
            for k in 0..5 {
                let name = format!("tp:warm-up:{i}:{k}");
                match m
                    .request(&name)
                    .ttl(TTL)
                    .acquire()
                    .and_then(|lock| m.unlock(lock))
                {
                    Ok(_) => return,
                    Err(e) => last = Some(e),
                }
            }
            panic!("muxlock warm-up failed 5 times, last: {last:?}");
        };
        once(&self.shared, 0);
        if let Some(m) = &self.folded {
            once(m, 1_000);
        }
        for (i, m) in self.per_thread.iter().enumerate() {
            once(m, i + 1);
        }
        let rslock = &self.rslock;
        self.rslock_rt.block_on(async {
            let lock = rslock
                .lock(&b"tp:warm-up"[..], TTL)
                .await
                .expect("rslock warm-up");
            rslock.unlock(&lock).await;
        });
        let quorum = &mut self.quorum;
        self.quorum_rt.block_on(async {
            let value = quorum
                .acquire(b"tp:warm-up")
                .await
                .expect("redis-rs warm-up");
            quorum
                .release(b"tp:warm-up", &value)
                .await
                .expect("redis-rs warm-up");
        });
    }
}

// ---------------------------------------------------------------- one case

/// What one run of a case gave.
pub struct Run {
    pub tally: Tally,
    pub blocked: usize,
    pub cpu: Cpu,
}

fn sleep_until(t: Instant) {
    thread::sleep(t.saturating_duration_since(Instant::now()));
}

pub fn run_case(
    clients: &Clients,
    client: Client,
    threads: usize,
    rep: usize,
    s: &Settings,
    pids: &[u32],
) -> Run {
    let (tx, rx) = mpsc::channel::<Tally>();
    let start = Instant::now() + s.warmup;
    let window = Window {
        start,
        end: start + s.secs,
    };
    let case = format!("{threads}.{rep}");
    let mut tasks = Vec::new();
    for k in 0..threads {
        let names = Names::new(client, &case, k);
        let tx = tx.clone();
        match client {
            Client::Shared | Client::PerThread | Client::Folded | Client::Unchecked => {
                let manager = match (client, &clients.folded, &clients.unchecked) {
                    (Client::Shared, _, _) => Arc::clone(&clients.shared),
                    (Client::Folded, Some(m), _) | (Client::Unchecked, _, Some(m)) => Arc::clone(m),
                    _ => Arc::clone(&clients.per_thread[k]),
                };
                // Never joined: a thread that blocks past the deadline is left behind, and counted.
                let _ = thread::Builder::new()
                    .name(format!("tp-{k}"))
                    .spawn(move || {
                        let _ = tx.send(muxlock_caller(&manager, names, window));
                    })
                    .expect("a caller thread");
            }
            Client::Rslock => {
                let manager = clients.rslock.clone();
                tasks.push(clients.rslock_rt.spawn(async move {
                    let _ = tx.send(rslock_caller(manager, names, window).await);
                }));
            }
            Client::Quorum | Client::QuorumAll => {
                let handle = match client {
                    Client::Quorum => clients.quorum.handle(),
                    _ => clients.quorum.handle().waiting_for_all(),
                };
                tasks.push(clients.quorum_rt.spawn(async move {
                    let _ = tx.send(quorum_caller(handle, names, window).await);
                }));
            }
            Client::Async => {
                let manager = Arc::clone(&clients.shared);
                tasks.push(clients.async_rt.spawn(async move {
                    let _ = tx.send(caller::async_caller(manager, names, window).await);
                }));
            }
            Client::Floor => {
                let fanout = Arc::clone(&clients.floor);
                let _ = thread::Builder::new()
                    .name(format!("tp-{k}"))
                    .spawn(move || {
                        let _ = tx.send(caller::floor_caller(&fanout, names, window));
                    })
                    .expect("a caller thread");
            }
            Client::Redlock | Client::Single => {
                let mut locker: Box<dyn Locker> = if client == Client::Redlock {
                    Box::new(RedlockRs::new(&clients.urls, TTL))
                } else {
                    Box::new(RedisSingle::new(&clients.urls[0], TTL))
                };
                let _ = thread::Builder::new()
                    .name(format!("tp-{k}"))
                    .spawn(move || {
                        let _ = tx.send(locker_caller(locker.as_mut(), names, window));
                    })
                    .expect("a caller thread");
            }
        }
    }
    drop(tx);
    sleep_until(window.start);
    let before = Cpu::now(pids);
    // The manager this client runs on, if it is one of muxlock's shared managers: its counters are reported.
    let manager = match client {
        Client::Shared => Some(Arc::clone(&clients.shared)),
        Client::Folded => clients.folded.clone(),
        Client::Unchecked => clients.unchecked.clone(),
        _ => None,
    };
    let net_before = manager.as_ref().map(|m| m.stats());
    let folds_before = manager.as_ref().map(|m| m.stats().releases);
    sleep_until(window.end);
    let after = Cpu::now(pids);
    // How the shared manager's requests travelled in the window: per node, how many requests a write carried.
    let net = net_before.map(|before| {
        let now = manager.as_ref().expect("counted above").stats();
        now.nodes
            .iter()
            .zip(&before.nodes)
            .map(|(n, b)| n.net.since(&b.net))
            .collect::<Vec<_>>()
    });
    let deadline = window.end + GRACE;
    let mut tally = Tally::new();
    let mut reported = 0;
    while reported < threads {
        // Disconnected (a caller panicked) or past the deadline: the others are counted as blocked.
        let Ok(t) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            break;
        };
        tally.merge(t);
        reported += 1;
    }
    for task in tasks {
        task.abort(); // a no-op for tasks that returned
    }
    if let Some(before) = folds_before {
        let now = manager.as_ref().expect("counted above").stats().releases;
        let (rounds, folded) = (
            now.folded_rounds - before.folded_rounds,
            now.folded - before.folded,
        );
        eprintln!(
            "  {threads} × {}: {folded} of {} releases folded, {:.1} per folded round",
            client.name(),
            tally.cycles,
            folded as f64 / rounds.max(1) as f64
        );
    }
    if let Some(net) = net {
        let per_write: Vec<String> = net
            .iter()
            .map(|d| format!("{:.1}", d.requests as f64 / d.writes.max(1) as f64))
            .collect();
        let cycles = tally.cycles.max(1) as f64;
        let writes: u64 = net.iter().map(|d| d.writes).sum();
        let reads: u64 = net.iter().map(|d| d.reads).sum();
        eprintln!(
            "  {threads} × {}: requests per write, per node: {}; system calls per cycle, all nodes: \
             {:.2} writes, {:.2} reads",
            client.name(),
            per_write.join(" "),
            writes as f64 / cycles,
            reads as f64 / cycles
        );
    }
    Run {
        tally,
        blocked: threads - reported,
        cpu: after.since(before),
    }
}

// ---------------------------------------------------------------- main

/// Runs every (thread count, client) pair of `s` `s.reps` times, in alternation: the first client rotates with the
/// repetition and the thread count, so that none always follows the same one. `pids`: the servers' processes.
pub fn run_all(clients: &Clients, s: &Settings, pids: &[u32]) -> Vec<Row> {
    let mut rows: Vec<Row> = (s.threads.iter())
        .flat_map(|&threads| {
            s.clients
                .iter()
                .map(move |&client| Row::new(threads, client))
        })
        .collect();
    for rep in 0..s.reps {
        for (ti, &threads) in s.threads.iter().enumerate() {
            for j in 0..s.clients.len() {
                let client = s.clients[(j + rep + ti) % s.clients.len()];
                let run = run_case(clients, client, threads, rep, s, pids);
                let row = rows
                    .iter_mut()
                    .find(|r| r.threads == threads && r.client == client)
                    .expect("a row per case");
                let failed: u64 = run.tally.failures.iter().sum();
                let steal = run.cpu.steal_percent();
                let rate = row.add(run.tally, run.blocked, run.cpu, s.secs.as_secs_f64());
                eprintln!(
                    "rep {rep}, {threads} × {}: {rate:.0} cycles/s, {failed} failed, steal {steal:.0} %",
                    client.name()
                );
            }
        }
    }
    rows
}

impl Clients {
    /// Stops the clients: the tokio runtimes get 1 s (a blocked task was aborted; one that does not stop in time
    /// is left to the process exit, as are blocked threads).
    pub fn shut_down(self) {
        let Clients {
            shared,
            folded,
            unchecked,
            per_thread,
            rslock,
            rslock_rt,
            quorum,
            quorum_rt,
            async_rt,
            urls: _,
            floor,
        } = self;
        drop((shared, folded, unchecked, per_thread, rslock, quorum, floor));
        async_rt.shutdown_timeout(Duration::from_secs(1));
        rslock_rt.shutdown_timeout(Duration::from_secs(1));
        quorum_rt.shutdown_timeout(Duration::from_secs(1));
    }
}
