//! Cluster members: what a Redlock member made of K Redis Cluster masters costs the servers per lock,
//! and what it costs a lone caller, beside plain members, in one run.
//!
//! The deployments, all started at once and kept for the whole run (`tests/support`: `--save "" --appendonly
//! no`, no replicas, on loopback):
//!
//! - `plain`: 3 plain `redis-server`s, one per member (the reference);
//! - `3×K`: 3 members, each a Redis Cluster of K masters (`redis-server --cluster-enabled yes`, slots split
//!   evenly), for each K of `MUXLOCK_CS_MASTERS` (default `1,2,3`).
//!
//! Each deployment has its own [`LockManager`] (one attempt per call, no restart guard: these servers have just
//! started; TTL 30 s), warmed up before anything is measured.
//!
//! Two parts, in this order:
//!
//! 1. **Server CPU per lock** (`throughput`): T OS threads (default 64) share the deployment's manager, each
//!    acquiring and releasing its own resources (`cs:<deployment>:<rep>:<thread>:<i>`, counting up, so keys spread
//!    over every slot and no name comes back). 0.3 s of warm-up, then a window of `MUXLOCK_CS_SECS` (default 2) in
//!    which cycles are counted and CPU is read from `/proc` at both ends: this process, and each server of the
//!    deployment. The deployments take turns, `MUXLOCK_CS_REPS` (default 3) repetitions, the first rotating. The
//!    table gives cycles/s (median, min–max), the servers' CPU per cycle in µs (all servers of the deployment, and
//!    the busiest master), the client's, and the ratios the goal names: servers' CPU per cycle at 3×K ÷ at 3×1
//!    ("flat" means within 10 %), and at 3×1 ÷ plain (what cluster mode itself costs a server). On this 2-vCPU
//!    machine every deployment is bounded by the same two cores, so cycles/s cannot grow with K here; how fast K
//!    masters per member would go on cores of their own is projected from the busiest master's CPU per cycle
//!    (`benchmarks/results/2026-11-28-cluster-members.md`).
//!    Before the first repetition, each deployment's servers are measured idle for `MUXLOCK_CS_SECS`: what cluster
//!    upkeep (cron, the cluster bus) costs with no lock at all, as % of one core.
//! 2. **Lone-caller latency** (`latency`): one thread, one call at a time, acquire and release timed apart in HDR
//!    histograms; the deployments take turns in batches of 100 calls, `MUXLOCK_CS_CALLS` (default 10,000) calls
//!    per deployment. It prints p50/p90/p99 and the ratios cluster ÷ plain of the p50s (goal: within 10 %).
//!
//! `MUXLOCK_CS_RATE=N` paces the callers to N cycles/s together, the same offered load for every deployment,
//! below saturation: what a lock costs the servers when each master is not batching more requests per wake-up
//! than another (at saturation, the fewer masters the more requests each reads per wake-up, and the cheaper each
//! is). The table also gives the servers' CPU per cycle net of their idle upkeep.
//!
//! `MUXLOCK_CS_PERF=1` adds the instructions the servers retire per cycle, user and kernel (`perf stat`, which
//! must be installed and allowed): unlike time, a count that does not depend on how busy the machine is or on
//! how many processes share its two vCPUs. It slows every context switch of the servers, so such a run's times
//! are not comparable with another's.
//!
//! `MUXLOCK_CS_GUARD=1` turns the restart guard on (muxlock's default; off in the other runs, as in most
//! benches), and with it the replication check of cluster members' votes (`INFO replication` after each
//! write of an acquisition); the run first waits out the servers' first window (the 30 s TTL).
//!
//! `MUXLOCK_CS_REPLICAS=R` gives every master of the cluster members R replicas (with `MUXLOCK_CS_GUARD=1`, a
//! routed grant then waits for their acknowledgement: the replication check's `WAIT`).
//!
//! `MUXLOCK_CS_PIN=1` gives the latency part's names one hash tag: each cluster member then serves every call
//! from one master (the same routing in the client, no rotation over the servers).
//!
//! `cargo bench --bench cluster_scale` runs both; `MUXLOCK_CS_PART=throughput` or `=latency` runs one,
//! `MUXLOCK_CS_THREADS` sets T, `MUXLOCK_CS_SCALE=1` gives a deployment of K masters per member K × T threads
//! (each master then sees as many callers as the one master of `3×1`: the load that would call for K masters). `cargo test --benches` (no `--bench` flag) runs K = 1 and 3, 4 threads, one
//! repetition of 0.2 s, 50 calls, with 2 s round timeouts, and fails if a call failed.

#![allow(missing_docs)] // the bench's own items need no docs

#[path = "../tests/support/mod.rs"]
mod support;

use std::env;
use std::fs;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use muxlock::LockManager;
use muxlock::redlock::Config;
use support::process::cpu_time;
use support::{Cluster, RedisCluster};

/// The lease of every lock.
const TTL: Duration = Duration::from_secs(30);
/// Members per deployment.
const MEMBERS: usize = 3;
/// Warm-up before each measured window.
const WARMUP: Duration = Duration::from_millis(300);
/// Calls per turn of the latency part.
const BATCH: usize = 100;

struct Settings {
    quick: bool,
    masters: Vec<usize>,
    threads: usize,
    /// `MUXLOCK_CS_SCALE=1`: a deployment of K masters per member gets K × T callers (the load that would need
    /// K masters), so each master sees as many callers as one master of `3×1` does.
    scale: bool,
    /// `MUXLOCK_CS_RATE=N`: the callers together start at most N cycles a second, evenly paced (an offered load
    /// below saturation, the same for every deployment); 0: as fast as they can.
    rate: f64,
    /// `MUXLOCK_CS_PERF=1`: count the servers' instructions with `perf stat` (which slows every context switch
    /// of the processes it watches: times of such a run are not comparable with others).
    perf: bool,
    /// `MUXLOCK_CS_PIN=1`: the latency part's names share one hash tag (`{pin}`), so every call of a cluster
    /// member goes to the same master: the client's routing unchanged, the servers' rotation gone.
    pin: &'static str,
    /// `MUXLOCK_CS_GUARD=1`: the restart guard on (muxlock's default; off otherwise, as in most benches), and
    /// with it the replication check of cluster members' votes; the run first waits out the servers' first
    /// window (the TTL).
    guard: bool,
    secs: Duration,
    reps: usize,
    calls: usize,
    throughput: bool,
    latency: bool,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match env::var(name) {
        Err(_) => default,
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: not a valid value")),
    }
}

impl Settings {
    fn from_env(quick: bool) -> Settings {
        let masters: Vec<usize> = env::var("MUXLOCK_CS_MASTERS")
            .unwrap_or_else(|_| if quick { "1,3" } else { "1,2,3" }.into())
            .split(',')
            .map(|k| match k.trim().parse() {
                Ok(k) if (1..=8).contains(&k) => k,
                _ => panic!("MUXLOCK_CS_MASTERS: {k:?} is not a count of masters from 1 to 8"),
            })
            .collect();
        let part = env::var("MUXLOCK_CS_PART").unwrap_or_default();
        assert!(
            ["", "throughput", "latency"].contains(&part.as_str()),
            "MUXLOCK_CS_PART={part:?}: throughput or latency"
        );
        Settings {
            quick,
            masters,
            threads: env_or("MUXLOCK_CS_THREADS", if quick { 4 } else { 64 }),
            scale: env_or("MUXLOCK_CS_SCALE", 0u8) == 1,
            rate: env_or("MUXLOCK_CS_RATE", 0.0),
            perf: env_or("MUXLOCK_CS_PERF", 0u8) == 1,
            pin: match env_or("MUXLOCK_CS_PIN", 0u8) {
                1 => "{pin}",
                _ => "",
            },
            guard: env_or("MUXLOCK_CS_GUARD", 0u8) == 1,
            secs: Duration::from_secs_f64(env_or("MUXLOCK_CS_SECS", if quick { 0.2 } else { 2.0 })),
            reps: env_or("MUXLOCK_CS_REPS", if quick { 1 } else { 3 }),
            calls: env_or("MUXLOCK_CS_CALLS", if quick { 50 } else { 10_000 }),
            throughput: part != "latency",
            latency: part != "throughput",
        }
    }

    /// Test mode must not fail on a slow machine; bench mode keeps the default round timeout (50 ms).
    fn threads(&self, d: &Deployment) -> usize {
        if self.scale {
            self.threads * d.per_member.max(1)
        } else {
            self.threads
        }
    }

    fn config(&self) -> Config {
        let round = if self.quick {
            Duration::from_secs(2)
        } else {
            Config::default().round_timeout()
        };
        support::locks::one_attempt(round).with_restart_guard(self.guard)
    }
}

// ---------------------------------------------------------------- the deployments

struct Deployment {
    name: String,
    /// Masters per member (0: plain members).
    per_member: usize,
    /// Whether the manager routes to the members as clusters (see [`Deployment::start`]).
    routed: bool,
    manager: Arc<LockManager>,
    /// Every server's PID, member by member.
    pids: Vec<u32>,
    /// Kept until the end: dropping them stops the servers.
    _plain: Option<Cluster>,
    _members: Vec<RedisCluster>,
}

impl Deployment {
    /// `routed`: the members are given as clusters (`redis+cluster://`); not routed (K = 1 only), each member's
    /// one master is given as a plain node (`redis://`: it owns every slot, so it serves every key).
    fn start(per_member: usize, routed: bool, config: &Config) -> Deployment {
        let started = Instant::now();
        let (plain, members, urls, pids) = if per_member == 0 {
            let c = Cluster::start(MEMBERS);
            let pids = c.nodes().iter().map(|n| n.pid()).collect();
            let urls = c.urls();
            (Some(c), Vec::new(), urls, pids)
        } else {
            // `MUXLOCK_CS_REPLICAS=R`: R replicas per master (with the restart guard on, a routed grant then
            // waits for their acknowledgement: `WAIT`).
            let replicas = env_or("MUXLOCK_CS_REPLICAS", 0usize);
            let members: Vec<RedisCluster> = thread::scope(|s| {
                let handles: Vec<_> = (0..MEMBERS)
                    .map(|_| {
                        s.spawn(move || {
                            RedisCluster::builder(per_member).replicas(replicas).start()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a cluster member"))
                    .collect()
            });
            let urls = match routed {
                true => members.iter().map(RedisCluster::seed_url).collect(),
                false => members.iter().map(|c| c.master(0).url()).collect(),
            };
            let pids = members
                .iter()
                .flat_map(|c| (0..c.len()).map(|i| c.node(i).pid()).collect::<Vec<_>>())
                .collect();
            (None, members, urls, pids)
        };
        let manager = Arc::new(support::locks::manager(urls, config.clone()));
        let name = match (per_member, routed) {
            (0, _) => "plain".to_owned(),
            (k, true) => format!("{MEMBERS}×{k}"),
            (k, false) => format!("{MEMBERS}×{k} as plain"),
        };
        let d = Deployment {
            name,
            per_member,
            routed,
            manager,
            pids,
            _plain: plain,
            _members: members,
        };
        if config.restart_guard() {
            // Servers younger than the window (the longest lease, TTL; uptime is read in whole seconds) do
            // not count yet: wait it out.
            if let Some(left) = (TTL + Duration::from_secs(3)).checked_sub(started.elapsed()) {
                thread::sleep(left);
            }
        }
        // Connections set up, maps read, scripts loaded.
        for i in 0..200 {
            let lock = d
                .manager
                .request(format!("cs:{}:warm:{i}", d.name))
                .ttl(TTL)
                .once()
                .acquire()
                .unwrap_or_else(|e| panic!("{}: warm-up: {e}", d.name));
            d.manager
                .unlock(lock)
                .unwrap_or_else(|e| panic!("{}: warm-up release: {e}", d.name));
        }
        d
    }

    /// Every server of the deployment.
    fn servers(&self) -> Vec<&support::server::RedisServer> {
        let plain = self._plain.iter().flat_map(|c| c.nodes());
        let members = self
            ._members
            .iter()
            .flat_map(|c| (0..c.len()).map(move |i| c.node(i)));
        plain.chain(members).collect()
    }

    /// The servers' command execution time so far (`INFO commandstats`: the `usec` of every command but `INFO`).
    fn exec_time(&self) -> Duration {
        let mut usec = 0u64;
        for server in self.servers() {
            let reply = server.raw(&support::cmd(&["INFO", "commandstats"]));
            for line in String::from_utf8_lossy(&reply).lines() {
                if line.starts_with("cmdstat_info:") {
                    continue;
                }
                usec += line
                    .split(',')
                    .find_map(|f| f.strip_prefix("usec="))
                    .and_then(|u| u.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        Duration::from_micros(usec)
    }

    fn server_cpu(&self) -> Vec<Duration> {
        self.pids.iter().map(|p| cpu_time(&p.to_string())).collect()
    }
}

// ---------------------------------------------------------------- part 1: server CPU per lock

/// One window of one deployment.
struct Sample {
    cycles: u64,
    secs: f64,
    client: Duration,
    /// The servers' command execution time (`INFO commandstats`).
    exec: Duration,
    /// This process's system calls and context switches in the window (`perf stat`; `None` without perf).
    client_events: Option<[u64; 2]>,
    /// Instructions the servers retired in the window, user and kernel (`perf stat`; `None` without perf).
    instructions: Option<[u64; 2]>,
    /// Per server, in the order of [`Deployment::pids`].
    servers: Vec<Duration>,
}

/// Every window of one deployment, and its failed calls.
struct Row {
    samples: Vec<Sample>,
    failures: u64,
    first_error: Option<String>,
    /// The servers' CPU with no lock, as a share of one core.
    idle: f64,
}

fn run_case(d: &Deployment, s: &Settings, rep: usize) -> (Sample, u64, Option<String>) {
    let start = Instant::now() + WARMUP;
    let end = start + s.secs;
    let quorum = d.manager.quorum();
    thread::scope(|scope| {
        let threads = s.threads(d);
        // Paced: caller k starts a cycle every `threads / rate` seconds, the callers' starts staggered.
        let every = (s.rate > 0.0).then(|| Duration::from_secs_f64(threads as f64 / s.rate));
        let callers: Vec<_> = (0..threads)
            .map(|k| {
                let manager = &d.manager;
                let name = &d.name;
                scope.spawn(move || {
                    let (mut cycles, mut failures, mut first_error) = (0u64, 0u64, None);
                    let mut next =
                        every.map(|e| Instant::now() + e.mul_f64(k as f64 / threads as f64));
                    for i in 0u64.. {
                        if let (Some(at), Some(e)) = (next.as_mut(), every) {
                            thread::sleep(at.saturating_duration_since(Instant::now()));
                            // Behind schedule: no burst to catch up.
                            *at = (*at + e).max(Instant::now());
                        }
                        let t0 = Instant::now();
                        if t0 >= end {
                            break;
                        }
                        let outcome = manager
                            .request(format!("cs:{name}:{rep}:{k}:{i}"))
                            .ttl(TTL)
                            .once()
                            .acquire()
                            .and_then(|lock| manager.unlock(lock));
                        match outcome {
                            Ok(n) if n >= quorum => {
                                let t1 = Instant::now();
                                if t1 >= start && t1 < end {
                                    cycles += 1;
                                }
                            }
                            Ok(n) => {
                                failures += 1;
                                first_error.get_or_insert(format!("released on {n} members only"));
                            }
                            Err(e) => {
                                failures += 1;
                                first_error.get_or_insert(e.to_string());
                            }
                        }
                    }
                    (cycles, failures, first_error)
                })
            })
            .collect();
        thread::sleep(start.saturating_duration_since(Instant::now()));
        let perf = s
            .perf
            .then(|| {
                perf_stat(
                    &d.pids,
                    SERVER_EVENTS,
                    end.saturating_duration_since(Instant::now()),
                )
            })
            .flatten();
        let own = s
            .perf
            .then(|| {
                let secs = end.saturating_duration_since(Instant::now());
                perf_stat(&[std::process::id()], CLIENT_EVENTS, secs)
            })
            .flatten();
        let (client0, servers0, exec0) = (cpu_time("self"), d.server_cpu(), d.exec_time());
        let t0 = Instant::now();
        thread::sleep(end.saturating_duration_since(Instant::now()));
        let (client1, servers1, exec1) = (cpu_time("self"), d.server_cpu(), d.exec_time());
        let secs = t0.elapsed().as_secs_f64();
        let (mut cycles, mut failures, mut first_error) = (0, 0, None);
        for c in callers {
            let (n, f, e) = c.join().expect("a caller");
            cycles += n;
            failures += f;
            if first_error.is_none() {
                first_error = e;
            }
        }
        let servers = servers1
            .iter()
            .zip(&servers0)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        (
            Sample {
                cycles,
                secs,
                client: client1.saturating_sub(client0),
                exec: exec1.saturating_sub(exec0),
                client_events: own.and_then(|c| perf_result(c, CLIENT_EVENTS)),
                instructions: perf.and_then(|c| perf_result(c, SERVER_EVENTS)),
                servers,
            },
            failures,
            first_error,
        )
    })
}

/// What `perf stat` counts for the servers: the instructions they retire, user and kernel apart.
const SERVER_EVENTS: [&str; 2] = ["instructions:u", "instructions:k"];
/// What it counts for this process (the client): system calls and context switches.
const CLIENT_EVENTS: [&str; 2] = ["raw_syscalls:sys_enter", "context-switches"];

/// `perf stat` counting `events` in `pids` for `secs` (`None`: no perf here).
fn perf_stat(pids: &[u32], events: [&str; 2], secs: Duration) -> Option<std::process::Child> {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    std::process::Command::new("perf")
        .args(["stat", "-x", ",", "-e"])
        .arg(events.join(","))
        .arg("-p")
        .arg(pids.join(","))
        .args(["--", "sleep"])
        .arg(format!("{:.3}", secs.as_secs_f64()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()
}

/// The two counts of [`perf_stat`]'s CSV (`value,unit,event,...`), once it is done.
fn perf_result(child: std::process::Child, events: [&str; 2]) -> Option<[u64; 2]> {
    let out = child.wait_with_output().ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    let count = |event: &str| {
        text.lines()
            .find(|l| l.split(',').nth(2).is_some_and(|e| e.starts_with(event)))
            .and_then(|l| l.split(',').next()?.parse::<u64>().ok())
    };
    Some([count(events[0])?, count(events[1])?])
}

fn idle_share(d: &Deployment, secs: Duration) -> f64 {
    let before: Duration = d.server_cpu().iter().sum();
    thread::sleep(secs);
    let after: Duration = d.server_cpu().iter().sum();
    after.saturating_sub(before).as_secs_f64() / secs.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn us_per_cycle(cpu: Duration, cycles: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / cycles.max(1) as f64
}

impl Row {
    fn rate(&self) -> (f64, f64, f64) {
        let rates: Vec<f64> = self
            .samples
            .iter()
            .map(|s| s.cycles as f64 / s.secs)
            .collect();
        let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let max = rates.iter().copied().fold(0.0, f64::max);
        (median(rates), min, max)
    }

    fn cycles(&self) -> u64 {
        self.samples.iter().map(|s| s.cycles).sum()
    }

    /// All servers' CPU per cycle over every window, µs.
    fn servers(&self) -> f64 {
        let cpu = self.samples.iter().flat_map(|s| &s.servers).sum();
        us_per_cycle(cpu, self.cycles())
    }

    /// The busiest server's CPU per cycle over every window, µs.
    fn busiest(&self) -> f64 {
        let n = self.samples.first().map_or(0, |s| s.servers.len());
        (0..n)
            .map(|i| {
                us_per_cycle(
                    self.samples.iter().map(|s| s.servers[i]).sum(),
                    self.cycles(),
                )
            })
            .fold(0.0, f64::max)
    }

    /// [`Row::servers`] less what the servers burn idle (cluster upkeep) over the same windows.
    fn net_of_idle(&self) -> f64 {
        let secs: f64 = self.samples.iter().map(|s| s.secs).sum();
        let cpu: Duration = self.samples.iter().flat_map(|s| &s.servers).sum();
        let net = (cpu.as_secs_f64() - self.idle * secs).max(0.0);
        net * 1e6 / self.cycles().max(1) as f64
    }

    /// The servers' instructions per cycle, thousands, user and kernel (`None` without perf).
    fn instructions(&self) -> Option<[f64; 2]> {
        let mut sum = [0u64; 2];
        for s in &self.samples {
            let [u, k] = s.instructions?;
            sum[0] += u;
            sum[1] += k;
        }
        let per = |n: u64| n as f64 / 1e3 / self.cycles().max(1) as f64;
        Some([per(sum[0]), per(sum[1])])
    }

    /// The client's system calls and context switches per cycle (`None` without perf).
    fn client_events(&self) -> Option<[f64; 2]> {
        let mut sum = [0u64; 2];
        for s in &self.samples {
            let [a, b] = s.client_events?;
            sum[0] += a;
            sum[1] += b;
        }
        let per = |n: u64| n as f64 / self.cycles().max(1) as f64;
        Some([per(sum[0]), per(sum[1])])
    }

    /// The servers' command execution time per cycle, µs.
    fn exec(&self) -> f64 {
        us_per_cycle(self.samples.iter().map(|s| s.exec).sum(), self.cycles())
    }

    fn client(&self) -> f64 {
        us_per_cycle(self.samples.iter().map(|s| s.client).sum(), self.cycles())
    }

    /// Server CPU per cycle, µs, in each window (for the ratios' ranges).
    fn servers_each(&self) -> Vec<f64> {
        self.samples
            .iter()
            .map(|s| us_per_cycle(s.servers.iter().sum(), s.cycles))
            .collect()
    }
}

fn throughput(ds: &[Deployment], s: &Settings) {
    let mut rows: Vec<Row> = ds
        .iter()
        .map(|d| Row {
            samples: Vec::new(),
            failures: 0,
            first_error: None,
            idle: idle_share(d, s.secs),
        })
        .collect();
    for rep in 0..s.reps {
        for turn in 0..ds.len() {
            let i = (rep + turn) % ds.len();
            let (sample, failures, error) = run_case(&ds[i], s, rep);
            rows[i].samples.push(sample);
            rows[i].failures += failures;
            if rows[i].first_error.is_none() {
                rows[i].first_error = error;
            }
        }
    }
    println!(
        "\n### Server CPU per lock: {} threads on one manager{}{}, {} × {:.1} s per deployment, load after {}\n",
        s.threads,
        if s.scale {
            " per master of a member"
        } else {
            ""
        },
        if s.rate > 0.0 {
            format!(", paced to {:.0} cycles/s", s.rate)
        } else {
            String::new()
        },
        s.reps,
        s.secs.as_secs_f64(),
        loadavg()
    );
    println!(
        "| deployment | servers | threads | cycles/s (min–max) | servers µs/cycle | servers µs/cycle net of idle | \
         of which executing commands | servers' k-instructions/cycle, user + kernel | busiest server µs/cycle | client µs/cycle | client syscalls + context switches/cycle | servers idle, % of a core | failed calls |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (d, r) in ds.iter().zip(&rows) {
        let (rate, min, max) = r.rate();
        println!(
            "| {} | {} | {} | {rate:.0} ({min:.0}–{max:.0}) | {:.1} | {:.1} | {:.1} | {} | {:.1} | {:.1} | {} | {:.1} | {} |",
            d.name,
            d.pids.len(),
            s.threads(d),
            r.servers(),
            r.net_of_idle(),
            r.exec(),
            r.instructions()
                .map_or("–".into(), |[u, k]| format!("{u:.0} + {k:.0}")),
            r.busiest(),
            r.client(),
            r.client_events()
                .map_or("–".into(), |[a, b]| format!("{a:.1} + {b:.1}")),
            100.0 * r.idle,
            r.failures
        );
    }
    for (d, r) in ds.iter().zip(&rows) {
        if let Some(e) = &r.first_error {
            println!("{}: first failure: {e}", d.name);
        }
    }
    let by_k = |k: usize| {
        ds.iter()
            .position(|d| d.per_member == k && (d.routed || k == 0))
            .map(|i| &rows[i])
    };
    if let Some(one) = by_k(1) {
        for d in ds.iter().filter(|d| d.per_member > 1) {
            let row = by_k(d.per_member).expect("its row");
            ratio(
                &format!("servers µs/cycle {} ÷ {MEMBERS}×1 (flat: ≤ 1.10)", d.name),
                row,
                one,
            );
            println!(
                "command execution µs/cycle {} ÷ {MEMBERS}×1: {:.2}",
                d.name,
                row.exec() / one.exec()
            );
            if let (Some(a), Some(b)) = (row.instructions(), one.instructions()) {
                println!(
                    "servers' instructions/cycle {} ÷ {MEMBERS}×1: {:.2} (user {:.2}, kernel {:.2})",
                    d.name,
                    (a[0] + a[1]) / (b[0] + b[1]),
                    a[0] / b[0],
                    a[1] / b[1]
                );
            }
        }
        if let Some(plain) = by_k(0) {
            ratio(
                &format!("servers µs/cycle {MEMBERS}×1 ÷ plain (cluster mode's own cost)"),
                one,
                plain,
            );
        }
        if let Some(i) = ds.iter().position(|d| d.per_member == 1 && !d.routed) {
            println!(
                "client µs/cycle {MEMBERS}×1 ÷ {MEMBERS}×1 as plain (routing's cost in the client): {:.2}",
                one.client() / rows[i].client()
            );
        }
        // On cores of their own, a member's rate is bounded by its busiest master.
        for (d, r) in ds.iter().zip(&rows).filter(|(d, _)| d.routed) {
            println!(
                "projection: {} on dedicated cores: busiest master {:.1} µs/cycle → {:.0} locks/s per member \
                 (the client aside)",
                d.name,
                r.busiest(),
                1e6 / r.busiest().max(f64::MIN_POSITIVE)
            );
        }
    }
    if s.quick {
        let failed: u64 = rows.iter().map(|r| r.failures).sum();
        assert_eq!(failed, 0, "calls failed in test mode: see above");
    }
}

/// `ours ÷ theirs` over every window, with the range of the per-window ratios (windows paired by repetition).
fn ratio(label: &str, ours: &Row, theirs: &Row) {
    let each: Vec<f64> = ours
        .servers_each()
        .iter()
        .zip(theirs.servers_each())
        .map(|(a, b)| a / b)
        .collect();
    let min = each.iter().copied().fold(f64::INFINITY, f64::min);
    let max = each.iter().copied().fold(0.0, f64::max);
    println!(
        "{label}: {:.2} ({min:.2}–{max:.2})",
        ours.servers() / theirs.servers()
    );
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg").map_or_else(|e| e.to_string(), |s| s.trim().into())
}

// ---------------------------------------------------------------- part 2: lone-caller latency

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("valid bounds")
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

fn latency(ds: &[Deployment], s: &Settings) {
    let mut hists: Vec<[Histogram<u64>; 2]> =
        ds.iter().map(|_| [histogram(), histogram()]).collect();
    let mut failures = 0u64;
    let turns = s.calls.div_ceil(BATCH);
    for turn in 0..turns {
        for step in 0..ds.len() {
            let i = (turn + step) % ds.len();
            let d = &ds[i];
            for c in 0..BATCH.min(s.calls - turn * BATCH) {
                let name = format!("{}cs:lat:{}:{turn}:{c}", s.pin, d.name);
                let t0 = Instant::now();
                let lock = d.manager.request(name).ttl(TTL).once().acquire();
                let t1 = Instant::now();
                match lock {
                    Err(e) => {
                        failures += 1;
                        eprintln!("{}: acquire: {e}", d.name);
                    }
                    Ok(lock) => {
                        hists[i][0].saturating_record(nanos(t1 - t0));
                        let released = d.manager.unlock(lock);
                        hists[i][1].saturating_record(nanos(t1.elapsed()));
                        if !matches!(released, Ok(n) if n >= d.manager.quorum()) {
                            failures += 1;
                            eprintln!("{}: release: {released:?}", d.name);
                        }
                    }
                }
            }
        }
    }
    println!(
        "\n### Lone caller: {} calls per deployment in turns of {BATCH}, load after {}\n",
        s.calls,
        loadavg()
    );
    println!("| deployment | acquire p50 / p90 / p99 µs | release p50 / p90 / p99 µs |");
    println!("|---|---:|---:|");
    let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1e3;
    for (d, h) in ds.iter().zip(&hists) {
        println!(
            "| {} | {:.1} / {:.1} / {:.1} | {:.1} / {:.1} / {:.1} |",
            d.name,
            us(&h[0], 0.5),
            us(&h[0], 0.9),
            us(&h[0], 0.99),
            us(&h[1], 0.5),
            us(&h[1], 0.9),
            us(&h[1], 0.99)
        );
    }
    if let Some(plain) = ds.iter().position(|d| d.per_member == 0) {
        for (i, d) in ds.iter().enumerate().filter(|(_, d)| d.per_member > 0) {
            println!(
                "p50 {} ÷ plain (goal ≤ 1.10): acquire {:.3}, release {:.3}",
                d.name,
                us(&hists[i][0], 0.5) / us(&hists[plain][0], 0.5),
                us(&hists[i][1], 0.5) / us(&hists[plain][1], 0.5)
            );
        }
    }
    if s.quick {
        assert_eq!(failures, 0, "calls failed in test mode: see above");
    }
}

fn main() {
    let args: Vec<String> = env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    if flag("--list") {
        return;
    }
    // Criterion's rule, as in benches/lock.rs: without `--bench` (`cargo test --benches`) or with `--test`, test.
    let quick = !flag("--bench") || flag("--test");
    let s = Settings::from_env(quick);
    let config = s.config();
    let started = Instant::now();
    // Plain members; with K = 1, the same cluster servers given as plain nodes (what cluster mode costs the
    // servers, without routing in the client); then the cluster members.
    let unrouted = s.masters.contains(&1).then_some((1, false));
    let kinds: Vec<(usize, bool)> = std::iter::once((0, false))
        .chain(unrouted)
        .chain(s.masters.iter().map(|&k| (k, true)))
        .collect();
    let ds: Vec<Deployment> = thread::scope(|scope| {
        let handles: Vec<_> = kinds
            .iter()
            .map(|&(k, routed)| {
                let config = &config;
                scope.spawn(move || Deployment::start(k, routed, config))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a deployment"))
            .collect()
    });
    println!(
        "cluster_scale: deployments {:?} ({} s to start), round timeout {:?}, restart guard {}, load {}",
        ds.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        started.elapsed().as_secs(),
        config.round_timeout(),
        if s.guard { "on" } else { "off" },
        loadavg()
    );

    if s.throughput {
        throughput(&ds, &s);
    }
    if s.latency {
        latency(&ds, &s);
    }
    // Managers first (in `Deployment`'s field order), servers last.
    drop(ds);
}
