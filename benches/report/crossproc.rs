//! Scenario 7, contention across processes: P processes (this bench binary, re-executed as children),
//! each with its own client, loop on one or two resources: wait for one (at most [`MAX_WAIT`]), hold it 100 µs,
//! release it, ask again at once. Every grant is timestamped on CLOCK_MONOTONIC (the same clock in every process)
//! and the parent checks them all for overlap. Faults: none; node [`FAULTY`] paused (SIGSTOP) for the middle third
//! of the run; node [`FAULTY`] killed for the middle third (and restarted empty). The clients take turns, case by
//! case, so that the machine's noise hits them alike.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

use super::*;
use support::checker::{Hold, mono_ns, overlaps};

/// The child's environment variable: `kind|urls|resources|start_ns|secs|index`.
pub const CHILD_ENV: &str = "MUXLOCK_REPORT_XP_CHILD";
/// How long a client waits for the lock before it counts the wait as given up.
const MAX_WAIT: Duration = Duration::from_secs(3);
/// The critical section.
const HOLD: Duration = Duration::from_micros(100);
/// The lease of the muxlock clients (the peers use the report's TTL).
const XP_TTL: Duration = Duration::from_secs(2);
/// Every client's round timeout (per-request timeout of the peers) in milliseconds, if not [`ROUND`]: read by
/// the children from their environment, which they inherit.
pub const ROUND_ENV: &str = "MUXLOCK_REPORT_XP_ROUND_MS";
/// The faults to run (`none`, `paused`, `killed`, comma-separated; all if unset).
pub const FAULTS_ENV: &str = "MUXLOCK_REPORT_XP_FAULTS";
/// The round timeout of every client unless [`ROUND_ENV`] says otherwise.
const ROUND: Duration = Duration::from_secs(1);

/// The round timeout this run's clients use.
pub fn round() -> Duration {
    env::var(ROUND_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(ROUND, Duration::from_millis)
}

/// The clients of this scenario.
const CLIENTS: [&str; 5] = [
    "muxlock wait",
    "muxlock retry",
    "rslock",
    "redlock",
    "redis-rs/quorum",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum XpFault {
    None,
    Paused,
    Killed,
}

impl XpFault {
    fn name(self) -> &'static str {
        match self {
            XpFault::None => "no fault",
            XpFault::Paused => "node paused",
            XpFault::Killed => "node killed",
        }
    }
}

/// One grant, as a child reports it.
#[derive(Clone, Debug)]
struct Grant {
    process: usize,
    resource: usize,
    asked: u64,
    start: u64,
    end: u64,
}

/// What one (client, resources, fault) case gave.
#[derive(Debug)]
pub struct XpRow {
    pub client: &'static str,
    pub resources: usize,
    pub fault: XpFault,
    pub secs: f64,
    grants: Vec<Grant>,
    pub per_process: Vec<u64>,
    pub quorum_errors: u64,
    pub gave_up: u64,
    pub other_errors: u64,
    pub overlaps: usize,
    /// The run's start (mono ns), for the picture.
    t0: u64,
    /// The servers' commands in the case, summed over the nodes (`INFO commandstats`; a script's own calls
    /// counted too): per command, its calls. Empty with a fault (a restarted node's counts start again).
    commands: BTreeMap<String, u64>,
    /// The CPU time of the clients (every child) and of the servers in the case.
    cpu: (Duration, Duration),
}

impl XpRow {
    pub fn rate(&self) -> f64 {
        self.grants.len() as f64 / self.secs
    }

    /// Grants per second in the run's middle third (the fault's window; the same third without a fault).
    pub fn middle_rate(&self) -> f64 {
        let third = self.secs / 3.0;
        let (from, to) = (third * 1e9, 2.0 * third * 1e9);
        let n = self
            .grants
            .iter()
            .filter(|g| {
                let at = g.start.saturating_sub(self.t0) as f64;
                at >= from && at < to
            })
            .count();
        n as f64 / third
    }

    pub fn fairness(&self) -> f64 {
        let min = self.per_process.iter().copied().min().unwrap_or(0);
        let max = self.per_process.iter().copied().max().unwrap_or(0);
        min as f64 / max.max(1) as f64
    }

    /// Per resource, its grants in order.
    fn by_resource(&self) -> BTreeMap<usize, Vec<&Grant>> {
        let mut m: BTreeMap<usize, Vec<&Grant>> = BTreeMap::new();
        for g in &self.grants {
            m.entry(g.resource).or_default().push(g);
        }
        for v in m.values_mut() {
            v.sort_by_key(|g| g.start);
        }
        m
    }

    /// Hand-offs (the next grant of a resource went to a process that asked before the release): the share that
    /// went back to the releaser, and the hand-off times (release to next grant, ns).
    fn handoffs(&self) -> (f64, Vec<u64>) {
        let (mut back, mut n, mut times) = (0u64, 0u64, Vec::new());
        for list in self.by_resource().values() {
            for w in list.windows(2) {
                n += 1;
                back += u64::from(w[0].process == w[1].process);
                times.push(w[1].start.saturating_sub(w[0].end));
            }
        }
        (back as f64 / n.max(1) as f64, times)
    }

    pub fn back_to_releaser(&self) -> f64 {
        self.handoffs().0
    }

    /// The clients' and the servers' CPU per grant, in µs.
    fn cpu_per_grant(&self) -> (f64, f64) {
        let grants = self.grants.len().max(1) as f64;
        let us = |d: Duration| d.as_secs_f64() * 1e6 / grants;
        (us(self.cpu.0), us(self.cpu.1))
    }

    /// Per grant, the servers' calls of every command summed over the nodes, the most called first:
    /// `(calls, [(command, calls)])`.
    fn commands_per_grant(&self) -> Option<(f64, Vec<(String, f64)>)> {
        let grants = self.grants.len().max(1) as f64;
        if self.commands.is_empty() {
            return None;
        }
        let calls: u64 = self.commands.values().sum();
        let mut each: Vec<(String, f64)> = self
            .commands
            .iter()
            .map(|(name, c)| (name.clone(), *c as f64 / grants))
            .collect();
        each.sort_by(|a, b| b.1.total_cmp(&a.1));
        Some((calls as f64 / grants, each))
    }

    fn waits(&self) -> Vec<u64> {
        let mut w: Vec<u64> = self
            .grants
            .iter()
            .map(|g| g.start.saturating_sub(g.asked))
            .collect();
        w.sort_unstable();
        w
    }

    /// The longest wait ÷ the median wait.
    pub fn longest_over_median(&self) -> f64 {
        let w = self.waits();
        let med = quantile(&w, 0.5).max(1);
        w.last().copied().unwrap_or(0) as f64 / med as f64
    }

    /// The longest time a resource went without a holder.
    fn longest_stall(&self) -> u64 {
        self.by_resource()
            .values()
            .flat_map(|l| l.windows(2).map(|w| w[1].start.saturating_sub(w[0].end)))
            .max()
            .unwrap_or(0)
    }
}

fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(ns: u64) -> String {
    let ms = ns as f64 / 1e6;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

/// One acquisition of a child's client: the release to call, or (is a quorum error, the message).
type Client = Box<dyn FnMut(&[u8]) -> Result<Box<dyn FnOnce()>, (bool, String)>>;

/// The child: builds its client, waits for the start, loops until the end, prints its grants and errors.
pub fn child(spec: &str) {
    let parts: Vec<&str> = spec.split('|').collect();
    let kind = parts[0];
    let urls: Vec<String> = parts[1].split(',').map(str::to_owned).collect();
    let resources: usize = parts[2].parse().expect("resources");
    let start: u64 = parts[3].parse().expect("start");
    let secs: f64 = parts[4].parse().expect("secs");
    let index: usize = parts[5].parse().expect("index");
    let names: Vec<Vec<u8>> = (0..resources)
        .map(|r| format!("xp:{}:{r}", parts[3]).into_bytes())
        .collect();
    let round = round();
    // (acquire, release): errors as (is a quorum error, message).
    let mut client: Client = match kind {
        "muxlock wait" | "muxlock retry" => {
            let mut config = Config::default()
                .with_restart_guard(false)
                .with_round_timeout(round);
            if kind == "muxlock wait" {
                config = config.with_retry_count(0);
            }
            let m = LockManager::builder()
                .nodes(urls.iter().cloned())
                .config(config)
                .build()
                .expect("a manager");
            let waiting = kind == "muxlock wait";
            Box::new(move |r: &[u8]| {
                let until = Instant::now() + MAX_WAIT;
                let got = if waiting {
                    m.request(r).ttl(XP_TTL).wait(MAX_WAIT).acquire()
                } else {
                    // A retrying request (its own 10 retries, 200 ± 100 ms apart), again until the wait is up.
                    loop {
                        match m.request(r).ttl(XP_TTL).acquire() {
                            Err(muxlock::Error::Held(_)) if Instant::now() < until => continue,
                            other => break other,
                        }
                    }
                };
                match got {
                    Ok(lock) => {
                        let m = m.clone();
                        Ok(Box::new(move || {
                            let _ = m.unlock(lock);
                        }) as Box<dyn FnOnce()>)
                    }
                    Err(e) if e.is_held() => Err((false, "held".into())),
                    Err(e) => Err((e.is_quorum(), e.to_string())),
                }
            })
        }
        peer => {
            let k = match peer {
                "rslock" => Kind::Rslock,
                "redlock" => Kind::Redlock,
                _ => Kind::Quorum,
            };
            let locker = std::rc::Rc::new(std::cell::RefCell::new(k.build(&urls, &urls[0], round)));
            Box::new(
                move |r: &[u8]| match locker.borrow_mut().acquire_wait(r, MAX_WAIT) {
                    Ok(()) => {
                        let l = locker.clone();
                        Ok(Box::new(move || {
                            let _ = l.borrow_mut().release();
                        }) as Box<dyn FnOnce()>)
                    }
                    Err(e) => Err((false, e)),
                },
            )
        }
    };
    // Connected before the clock starts.
    if let Ok(release) = client(format!("xp:warm:{}:{index}", parts[3]).as_bytes()) {
        release();
    }
    while mono_ns() < start {
        thread::sleep(Duration::from_micros(200));
    }
    let end = start + (secs * 1e9) as u64;
    let mut rng = index as u64 * 7919 + 1;
    let mut lines = Vec::new();
    while mono_ns() < end {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = (rng >> 33) as usize % resources;
        let asked = mono_ns();
        match client(&names[r]) {
            Ok(release) => {
                let s = mono_ns();
                let spin = Instant::now();
                while spin.elapsed() < HOLD {
                    std::hint::spin_loop();
                }
                let e = mono_ns();
                release();
                lines.push(format!("G {r} {asked} {s} {e}"));
            }
            Err((true, _)) => lines.push("Q".into()),
            Err((false, msg)) if msg.contains("held") || msg.contains("timed out waiting") => {
                lines.push("H".into())
            }
            Err((false, msg)) => lines.push(format!("E {}", msg.replace('\n', " "))),
        }
    }
    println!("{}", lines.join("\n"));
}

/// Runs one case: `processes` children of `client` on `resources` resources for `secs`, with `fault`.
fn case(
    cluster: &mut Cluster,
    client: &'static str,
    processes: usize,
    resources: usize,
    fault: XpFault,
    secs: f64,
) -> XpRow {
    let exe = env::current_exe().expect("the bench binary");
    for node in cluster.nodes() {
        node.raw(&support::cmd(&["CONFIG", "RESETSTAT"]));
    }
    let pids: Vec<u32> = cluster.nodes().iter().map(|n| n.pid()).collect();
    let cpu_before = (
        support::process::waited_children_cpu_time(),
        Cpu::now(&pids).servers,
    );
    // Time for the children to start and connect.
    let t0 = mono_ns() + 1_500_000_000;
    let urls = cluster.urls().join(",");
    let mut children: Vec<_> = (0..processes)
        .map(|i| {
            std::process::Command::new(&exe)
                .env(
                    CHILD_ENV,
                    format!("{client}|{urls}|{resources}|{t0}|{secs}|{i}"),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("a child")
        })
        .collect();
    let at = |frac: f64| t0 + (secs * frac * 1e9) as u64;
    let sleep_until = |ns: u64| {
        let now = mono_ns();
        if ns > now {
            thread::sleep(Duration::from_nanos(ns - now));
        }
    };
    if fault != XpFault::None {
        sleep_until(at(1.0 / 3.0));
        match fault {
            XpFault::Paused => cluster.pause(FAULTY),
            _ => cluster.kill(FAULTY),
        }
        sleep_until(at(2.0 / 3.0));
        match fault {
            XpFault::Paused => cluster.resume(FAULTY),
            _ => cluster.restart(FAULTY),
        }
    }
    let mut row = XpRow {
        client,
        resources,
        fault,
        secs,
        grants: Vec::new(),
        per_process: vec![0; processes],
        quorum_errors: 0,
        gave_up: 0,
        other_errors: 0,
        overlaps: 0,
        t0,
        commands: BTreeMap::new(),
        cpu: (Duration::ZERO, Duration::ZERO),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(secs) + Duration::from_secs(20);
    for (i, child) in children.iter_mut().enumerate() {
        let out = child.stdout.take().expect("stdout");
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let f: Vec<&str> = line.split(' ').collect();
            match f[0] {
                "G" if f.len() == 5 => {
                    let n: Vec<u64> = f[1..].iter().filter_map(|x| x.parse().ok()).collect();
                    if n.len() == 4 {
                        row.grants.push(Grant {
                            process: i,
                            resource: n[0] as usize,
                            asked: n[1],
                            start: n[2],
                            end: n[3],
                        });
                        row.per_process[i] += 1;
                    }
                }
                "Q" => row.quorum_errors += 1,
                "H" => row.gave_up += 1,
                "E" => row.other_errors += 1,
                _ => {}
            }
        }
    }
    for mut child in children {
        // Every child is stopped by its own PID: a child that outlives its time is killed.
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
    let holds: Vec<Hold> = row
        .grants
        .iter()
        .map(|g| Hold {
            resource: g.resource.to_string(),
            holder: g.process.to_string(),
            start: g.start,
            end: g.end,
        })
        .collect();
    row.overlaps = overlaps(&holds).len();
    if fault == XpFault::None {
        row.commands = command_stats(cluster);
        row.cpu = (
            support::process::waited_children_cpu_time().saturating_sub(cpu_before.0),
            Cpu::now(&pids).servers.saturating_sub(cpu_before.1),
        );
    }
    row
}

/// Every command's calls on the nodes of `cluster` since their last `CONFIG RESETSTAT`, summed (`INFO
/// commandstats`; `INFO` and `CONFIG` themselves left out).
fn command_stats(cluster: &Cluster) -> BTreeMap<String, u64> {
    let mut sum: BTreeMap<String, u64> = BTreeMap::new();
    for node in cluster.nodes() {
        let info = String::from_utf8_lossy(&node.raw(&support::cmd(&["INFO", "commandstats"])))
            .into_owned();
        for line in info.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            if name == "info" || name.starts_with("config") {
                continue;
            }
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            *sum.entry(name.to_owned()).or_default() += field("calls");
        }
    }
    sum
}

/// Runs every case, the clients taking turns, and writes the table and the picture.
/// `only`: the clients whose names start with it (all if `None`).
pub fn cross_process(
    out: &mut Out,
    processes: usize,
    secs: f64,
    resource_counts: &[usize],
    only: Option<&str>,
) -> Vec<XpRow> {
    let mut cluster = Cluster::start(5);
    let started = Instant::now();
    let mut rows = Vec::new();
    // `MUXLOCK_REPORT_XP_FAULTS=none` (or `paused`, `killed`, comma-separated): only those cases.
    let faults: Vec<XpFault> = [XpFault::None, XpFault::Paused, XpFault::Killed]
        .into_iter()
        .filter(|f| {
            let key = match f {
                XpFault::None => "none",
                XpFault::Paused => "paused",
                XpFault::Killed => "killed",
            };
            env::var(FAULTS_ENV).map_or(true, |only| only.split(',').any(|o| o.trim() == key))
        })
        .collect();
    for fault in faults {
        for &resources in resource_counts {
            for client in CLIENTS
                .into_iter()
                .filter(|c| only.is_none_or(|o| c.starts_with(o)))
            {
                let row = case(&mut cluster, client, processes, resources, fault, secs);
                eprintln!(
                    "[xp] {client}, {resources} resource(s), {}: {:.0}/s, fairness {:.2}, back {:.0} %",
                    fault.name(),
                    row.rate(),
                    row.fairness(),
                    100.0 * row.back_to_releaser()
                );
                if let Some((calls, each)) = row.commands_per_grant() {
                    let top: Vec<String> = each
                        .iter()
                        .take(24)
                        .map(|(name, n)| format!("{name} {n:.1}"))
                        .collect();
                    let (clients, servers) = row.cpu_per_grant();
                    eprintln!(
                        "[xp]   per grant: CPU {clients:.0} µs of the clients, {servers:.0} of the servers; {calls:.1} calls: {}",
                        top.join(", ")
                    );
                }
                rows.push(row);
            }
        }
    }
    out.line(format!(
        "### 7. Contention across processes\n\n{processes} processes (this bench binary re-executed), each with its \
         own client, loop on {} resource(s) of 5 nodes for {secs:.0} s per case: wait for a resource picked at \
         random (at most {} s), hold it {} µs, release it, ask again at once; every client's round (per-request) timeout {} ms \
         (`{ROUND_ENV}`). Faults: node {FAULTY} paused \
         (SIGSTOP), or killed and restarted empty, for the middle third of the run. muxlock `.wait(..)` waits in \
         the nodes' queue (`src/redlock/wait/handoff.rs`); muxlock's retrying request retries with its defaults (10 tries, \
         200 ± 100 ms apart) until the wait is up; rslock and the `redlock` crate with their retries; \
         redis-rs/quorum pauses up to {} ms between tries. Every grant is timestamped on CLOCK_MONOTONIC and \
         checked for overlap. Fairness: fewest ÷ most grants per process; back to the releaser: the share of a \
         resource's consecutive grants that went to the same process; stall: the longest time a resource had no \
         holder. {:.0} s.\n",
        resource_counts
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(" or "),
        MAX_WAIT.as_secs(),
        HOLD.as_micros(),
        round().as_millis(),
        peers::HAND_RETRY.as_millis(),
        started.elapsed().as_secs_f64()
    ));
    out.line(
        "| fault | resources | client | grants/s | in the middle third | time to lock p50 / p99 / max | hand-off p50 | fairness | back to the releaser | longest ÷ median wait | longest stall | quorum errors | waits given up | other errors | overlaps |",
    );
    out.line("|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let w = r.waits();
        let (back, mut h) = r.handoffs();
        h.sort_unstable();
        out.line(format!(
            "| {} | {} | {} | {} | {} | {} / {} / {} | {} | {:.2} | {:.0} % | {:.0} | {} | {} | {} | {} | {} |",
            r.fault.name(),
            r.resources,
            r.client,
            thousands(r.rate()),
            thousands(r.middle_rate()),
            ms(quantile(&w, 0.5)),
            ms(quantile(&w, 0.99)),
            ms(w.last().copied().unwrap_or(0)),
            ms(quantile(&h, 0.5)),
            r.fairness(),
            100.0 * back,
            r.longest_over_median(),
            ms(r.longest_stall()),
            r.quorum_errors,
            r.gave_up,
            r.other_errors,
            r.overlaps
        ));
    }
    out.line("");
    out.line(
        "Per grant without a fault: the CPU time of the clients (all processes) and of the 5 servers, and the \
         servers' commands (`INFO commandstats`, reset before each case; a script's own calls count too), of which \
         the scripts sent by hash (`evalsha`: acquisitions) and in full (`eval`: releases, clean-ups, leaves).\n",
    );
    out.line(
        "| resources | client | clients' CPU µs | servers' CPU µs | calls | `evalsha` / `eval` | most calls |",
    );
    out.line("|---:|---|---:|---:|---:|---:|---|");
    for r in &rows {
        if let Some((calls, each)) = r.commands_per_grant() {
            let (clients, servers) = r.cpu_per_grant();
            let top: Vec<String> = each
                .iter()
                .take(5)
                .map(|(name, n)| format!("`{name}` {n:.1}"))
                .collect();
            let per = |command: &str| {
                each.iter()
                    .find(|(name, _)| name == command)
                    .map_or(0.0, |(_, n)| *n)
            };
            out.line(format!(
                "| {} | {} | {clients:.0} | {servers:.0} | {calls:.1} | {:.1} / {:.1} | {} |",
                r.resources,
                r.client,
                per("evalsha"),
                per("eval"),
                top.join(", ")
            ));
        }
    }
    out.line("");
    // The picture: grants per 100 ms over time, one resource, node paused.
    let pick: Vec<&XpRow> = rows
        .iter()
        .filter(|r| r.resources == resource_counts[0] && r.fault == XpFault::Paused)
        .collect();
    if !pick.is_empty() {
        out.picture(
            "cross-process.svg",
            "grants per 100 ms over time, node paused for the middle third",
            timeline(&pick, secs),
        );
    }
    drop(cluster);
    rows
}

/// Grants per 100 ms over time, one line per client, the fault window shaded.
fn timeline(rows: &[&XpRow], secs: f64) -> String {
    use std::fmt::Write as _;
    let (w, h, ml, mt, mr, mb) = (860.0, 420.0, 70.0, 40.0, 190.0, 50.0);
    let bins = (secs * 10.0).ceil() as usize;
    let series: Vec<Vec<u64>> = rows
        .iter()
        .map(|r| {
            let mut b = vec![0u64; bins];
            for g in &r.grants {
                let i = (g.start.saturating_sub(r.t0) / 100_000_000) as usize;
                if i < bins {
                    b[i] += 1;
                }
            }
            b
        })
        .collect();
    let ymax = series.iter().flatten().copied().max().unwrap_or(1).max(1) as f64;
    let x = |i: f64| ml + (w - ml - mr) * i / bins as f64;
    let y = |v: f64| h - mb - (h - mt - mb) * v / ymax;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r##"<rect x="{:.1}" y="{mt}" width="{:.1}" height="{:.1}" fill="#f3d9d9"/>"##,
        x(bins as f64 / 3.0),
        x(2.0 * bins as f64 / 3.0) - x(bins as f64 / 3.0),
        h - mt - mb
    );
    let _ = writeln!(
        s,
        r#"<text x="{ml}" y="24" font-size="14">Grants per 100 ms, {} processes, one resource; shaded: node {FAULTY} of 5 paused</text>"#,
        rows[0].per_process.len()
    );
    let _ = writeln!(
        s,
        r#"<line x1="{ml}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/><line x1="{ml}" y1="{mt}" x2="{ml}" y2="{:.1}" stroke="black"/>"#,
        h - mb,
        w - mr,
        h - mb,
        h - mb
    );
    for t in 0..=(secs as usize) {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{t} s</text>"#,
            x(t as f64 * 10.0),
            h - mb + 18.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{ymax:.0}</text><text x="{:.1}" y="{:.1}" text-anchor="end">0</text>"#,
        ml - 6.0,
        mt + 4.0,
        ml - 6.0,
        h - mb + 4.0
    );
    for (k, (r, b)) in rows.iter().zip(&series).enumerate() {
        let pts: Vec<String> = b
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x(i as f64 + 0.5), y(*v as f64)))
            .collect();
        let c = super::svg::colour(r.client);
        let dash = if r.client == "muxlock retry" {
            r#" stroke-dasharray="5,3""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.6"{dash} points="{}"/>"#,
            pts.join(" ")
        );
        let ly = mt + 16.0 * k as f64 + 8.0;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
            w - mr + 10.0,
            w - mr + 30.0,
            w - mr + 36.0,
            ly + 4.0,
            r.client
        );
    }
    s.push_str("</svg>\n");
    s
}
