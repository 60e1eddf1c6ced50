//! muxlock beside the locks teams weigh against it, on the same machine in the same run (issue #14):
//! PostgreSQL advisory locks, the seed's MariaDB table locks (row insert/delete, `SELECT ... FOR UPDATE`),
//! ZooKeeper's lock recipe (one server, and an ensemble of three), and the seed's old single-Redis
//! `SETNX`+`GETSET` scheme; muxlock on 5 and on 3 local Redis nodes.
//!
//! # Layout
//! - [`servers`]: PostgreSQL, MariaDB, ZooKeeper started from our own temp dirs on free loopback ports; Redis
//!   from `tests/support`.
//! - [`lockers`]: one client per alternative behind [`lockers::Locker`], every call bounded.
//! - [`scenarios`]: uncontended latency, 16-thread throughput, hand-off and fairness with 8 contenders, faults.
//! - [`measure`]: CPU and steal from `/proc`, histograms. [`plot`]: the PNG.
//!
//! Run it with `scripts/bench-alternatives [--quick | --smoke]` (it installs the servers' packages when missing);
//! by hand: `cargo run --release -- [--quick | --smoke] [--skip-missing] [--only latency,throughput,handoff,faults]
//! [--alt NAME,...] [--png PATH]`. The tables go to stdout as Markdown, progress to stderr.
//!
//! - `--quick`: short windows, one repetition (about 2 minutes); the default is the full run (3 repetitions).
//! - `--smoke`: a few calls of each scenario, to see that the bench works (CI); implies `--skip-missing`, and
//!   exits 1 if an alternative measured nothing or muxlock's holds overlapped.
//! - `--skip-missing`: an alternative whose server is not installed (or does not start) is left out with a
//!   message, instead of ending the run.
//! - `--faults pause|kill`: only that fault (default both).
//! - `--alt`: only the alternatives whose names contain one of these words (case-insensitive).
//! - `MUXLOCK_ALT_TRACE=1`: the fault scenario prints the calls under way during each longest gap.

mod lockers;
mod measure;
mod plot;
mod scenarios;
mod servers;

#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use lockers::Factory;
use lockers::maria::{MariaFactory, Mode, create_tables};
use lockers::mux::{MuxFactory, Wait};
use lockers::old::OldFactory;
use lockers::pg::PgFactory;
use lockers::zk::ZkFactory;
use scenarios::faults::{self, Fault};
use scenarios::{handoff, latency, throughput};
use servers::mariadb::MariaDb;
use servers::postgres::Postgres;
use servers::zookeeper::ZooKeeper;
use servers::{Scratch, Target, record_pid};
use support::{Cluster, RedisServer};

/// How long each scenario runs.
pub struct Settings {
    pub latency_samples: usize,
    pub latency_warmup: usize,
    pub tp_secs: Duration,
    pub tp_reps: usize,
    pub handoff_secs: Duration,
    pub handoff_reps: usize,
    pub fault_healthy: Duration,
    pub fault_down: Duration,
    pub fault_after: Duration,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RunMode {
    Full,
    Quick,
    Smoke,
}

impl Settings {
    fn new(mode: RunMode) -> Settings {
        let ms = Duration::from_millis;
        match mode {
            RunMode::Smoke => Settings {
                latency_samples: 100,
                latency_warmup: 10,
                tp_secs: ms(200),
                tp_reps: 1,
                handoff_secs: ms(200),
                handoff_reps: 1,
                fault_healthy: ms(200),
                fault_down: ms(400),
                fault_after: ms(600),
            },
            RunMode::Quick => Settings {
                latency_samples: 300,
                latency_warmup: 50,
                tp_secs: ms(500),
                tp_reps: 1,
                handoff_secs: ms(500),
                handoff_reps: 1,
                fault_healthy: ms(300),
                // Longer than BOUND: a call waiting on a paused server shows as hung.
                fault_down: ms(2500),
                fault_after: ms(1500),
            },
            RunMode::Full => Settings {
                latency_samples: 5000,
                latency_warmup: 300,
                tp_secs: ms(3000),
                tp_reps: 3,
                handoff_secs: ms(3000),
                handoff_reps: 3,
                fault_healthy: ms(1000),
                fault_down: ms(5000),
                fault_after: ms(5000),
            },
        }
    }
}

/// Every server of the run; the databases and ZooKeeper may be missing (`--skip-missing`).
struct Servers {
    pg: Option<Postgres>,
    maria: Option<MariaDb>,
    zk3: Option<ZooKeeper>,
    zk1: Option<ZooKeeper>,
    mux5: Cluster,
    mux3: Cluster,
    old: RedisServer,
    protected: RedisServer,
}

/// The server a start-up thread made; if it did not start, the end of the run with the reason, or with
/// `skip_missing` a message and `None`.
fn started<T>(what: &str, r: thread::Result<Result<T, String>>, skip_missing: bool) -> Option<T> {
    let e = match r {
        Ok(Ok(v)) => return Some(v),
        Ok(Err(e)) => e,
        Err(_) => "starting it panicked".into(),
    };
    if skip_missing {
        eprintln!("bench-alternatives: SKIPPED {what}: {e}");
        None
    } else {
        eprintln!(
            "bench-alternatives: {what} did not start: {e}\n(scripts/bench-alternatives installs the packages as \
             root; --skip-missing runs without it)"
        );
        std::process::exit(1);
    }
}

fn start_servers(scratch: &Scratch, skip_missing: bool) -> Servers {
    let t = Instant::now();
    let (pg_dir, maria_dir, zk3_dir, zk1_dir) = (
        scratch.sub("postgres"),
        scratch.sub("mariadb"),
        scratch.sub("zk3"),
        scratch.sub("zk1"),
    );
    let (pg, maria, zk3, zk1, redis) = thread::scope(|s| {
        let pg = s.spawn(move || Postgres::start(&pg_dir));
        let maria = s.spawn(move || MariaDb::start(&maria_dir));
        let zk3 = s.spawn(move || ZooKeeper::start(&zk3_dir, 3));
        let zk1 = s.spawn(move || ZooKeeper::start(&zk1_dir, 1));
        let redis = s.spawn(|| {
            (
                Cluster::start(5),
                Cluster::start(3),
                RedisServer::start(),
                RedisServer::start(),
            )
        });
        (
            started("PostgreSQL", pg.join(), skip_missing),
            started("MariaDB", maria.join(), skip_missing),
            started("ZooKeeper ensemble", zk3.join(), skip_missing),
            started("ZooKeeper", zk1.join(), skip_missing),
            redis.join().expect("redis-server starts"),
        )
    });
    let (mux5, mux3, old, protected) = redis;
    for pid in mux5
        .nodes()
        .iter()
        .chain(mux3.nodes())
        .chain([&old, &protected])
        .map(RedisServer::pid)
    {
        record_pid("pid", pid);
    }
    eprintln!("servers started in {:.1} s", t.elapsed().as_secs_f64());
    Servers {
        pg,
        maria,
        zk3,
        zk1,
        mux5,
        mux3,
        old,
        protected,
    }
}

fn as_dyn<F: Factory>(f: &Option<F>) -> Option<&dyn Factory> {
    f.as_ref().map(|f| f as &dyn Factory)
}

/// A Redis server (the old scheme's) as a fault target.
struct RedisTarget<'a>(&'a mut RedisServer);

impl Target for RedisTarget<'_> {
    fn what(&self) -> String {
        "the server".into()
    }
    fn kill(&mut self) {
        self.0.kill();
    }
    fn restart(&mut self) {
        self.0.restart();
        record_pid("pid", self.0.pid());
    }
    fn pause(&mut self) {
        self.0.pause();
    }
    fn resume(&mut self) {
        self.0.resume();
    }
}

/// One node of a muxlock cluster as a fault target (restarted empty: no persistence).
struct NodeTarget<'a>(&'a mut Cluster, usize);

impl Target for NodeTarget<'_> {
    fn what(&self) -> String {
        format!("node {} of {}", self.1 + 1, self.0.len())
    }
    fn kill(&mut self) {
        self.0.kill(self.1);
    }
    fn restart(&mut self) {
        self.0.restart(self.1);
        record_pid("pid", self.0.node(self.1).pid());
    }
    fn pause(&mut self) {
        self.0.pause(self.1);
    }
    fn resume(&mut self) {
        self.0.resume(self.1);
    }
}

/// The first line `binary --version` prints, if it runs.
fn version_of(binary: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(binary)
        .args(args)
        .output()
        .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}

/// The header of the report: date, command, machine, versions.
fn header(mode: RunMode, args: &[String], sv: &Servers) {
    let date = version_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_default();
    let vcpus = thread::available_parallelism().map_or(0, usize::from);
    println!(
        "**{} run**, {date}: `scripts/bench-alternatives{}`\n",
        match mode {
            RunMode::Full => "Full",
            RunMode::Quick => "Quick",
            RunMode::Smoke => "Smoke",
        },
        // The command as the script takes it: without the picture's path, which the script chooses.
        args.iter()
            .skip(1)
            .scan(false, |after_png, a| {
                let skip = *after_png || a == "--png";
                *after_png = a == "--png";
                Some((skip, a))
            })
            .filter(|(skip, _)| !skip)
            .fold(String::new(), |s, (_, a)| s + " " + a)
    );
    println!(
        "Machine: {vcpus} vCPUs ({cpu}), shared with other jobs (load average at start: {}). All servers and the \
         bench on this one machine, over loopback: figures are for comparing the alternatives with each other in \
         this run, not absolute.\n",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut versions = vec![
        format!(
            "muxlock at {}",
            std::env::var("MUXLOCK_ALT_REV").unwrap_or_else(|_| "(revision not given)".into())
        ),
        support::process::find_binary()
            .and_then(|b| version_of(&b.display().to_string(), &["--version"]))
            .map_or("redis-server ?".into(), |v| {
                v.split(" sha=").next().unwrap_or(&v).to_owned()
            }),
    ];
    if let Some(pg) = &sv.pg {
        versions.push(pg.version());
    }
    if let Some(m) = &sv.maria {
        versions.push(m.version());
    }
    if let Some(zk) = sv.zk1.as_ref().or(sv.zk3.as_ref()) {
        versions.push(zk.version());
    }
    versions.push(version_of("java", &["-version"]).unwrap_or_default());
    println!("Versions: {}.\n", versions.join("; "));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let mode = if has("--smoke") {
        RunMode::Smoke
    } else if has("--quick") {
        RunMode::Quick
    } else {
        RunMode::Full
    };
    let skip_missing = mode == RunMode::Smoke || has("--skip-missing");
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let only: Vec<String> = value("--only").map_or_else(
        || {
            ["latency", "throughput", "handoff", "faults"]
                .map(String::from)
                .to_vec()
        },
        |v| v.split(',').map(String::from).collect(),
    );
    let png = value("--png").map(PathBuf::from);
    let fault_kinds: Vec<Fault> = match value("--faults").as_deref() {
        Some("pause") => vec![Fault::Pause],
        Some("kill") => vec![Fault::Kill],
        _ => vec![Fault::Pause, Fault::Kill],
    };
    let s = Settings::new(mode);
    let started = Instant::now();

    let scratch = Scratch::new();
    let mut sv = start_servers(&scratch, skip_missing);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let handle = rt.handle().clone();
    if let Some(m) = &sv.maria {
        create_tables(&handle, &m.url()).unwrap_or_else(|e| panic!("MariaDB tables: {e}"));
    }

    let pids = |c: &Cluster| c.nodes().iter().map(RedisServer::pid).collect::<Vec<_>>();
    let mux5 = MuxFactory::new(sv.mux5.urls(), pids(&sv.mux5), Wait::LockWait, false);
    let mux3 = MuxFactory::new(sv.mux3.urls(), pids(&sv.mux3), Wait::LockWait, false);
    // Hand-off only: the classic retry loop, and the waiting request's in-process queue.
    let mux5_retry = MuxFactory::new(sv.mux5.urls(), pids(&sv.mux5), Wait::Retry, false);
    let mux5_one = MuxFactory::new(sv.mux5.urls(), pids(&sv.mux5), Wait::LockWait, true);
    let pg = sv.pg.as_ref().map(|pg| PgFactory {
        rt: handle.clone(),
        conninfo: pg.conninfo(),
        pgid: pg.pgid().unwrap_or(0),
    });
    let maria = |mode| {
        sv.maria.as_ref().map(|m| MariaFactory {
            rt: handle.clone(),
            url: m.url(),
            pgid: m.pgid().unwrap_or(0),
            mode,
        })
    };
    let (row, for_update) = (maria(Mode::Row), maria(Mode::ForUpdate));
    let zk = |z: &Option<ZooKeeper>| {
        z.as_ref()
            .map(|z| ZkFactory::new(handle.clone(), z.connect_string(), z.len(), z.pgids()))
    };
    let (zk3, zk1) = (zk(&sv.zk3), zk(&sv.zk1));
    let old = OldFactory {
        addr: sv.old.addr(),
        pid: sv.old.pid(),
    };
    // --alt a,b: only the alternatives whose names contain one of these (case-insensitive).
    let pick: Option<Vec<String>> =
        value("--alt").map(|v| v.split(',').map(str::to_lowercase).collect());
    let picked = |f: &dyn Factory| {
        pick.as_ref()
            .is_none_or(|p| p.iter().any(|p| f.name().to_lowercase().contains(p)))
    };
    let all: Vec<&dyn Factory> = [
        Some(&mux5 as &dyn Factory),
        Some(&mux3),
        as_dyn(&pg),
        as_dyn(&row),
        as_dyn(&for_update),
        as_dyn(&zk3),
        as_dyn(&zk1),
        Some(&old),
    ]
    .into_iter()
    .flatten()
    .filter(|f| picked(*f))
    .collect();

    header(mode, &args, &sv);
    let mut report = plot::Report::default();
    if only.iter().any(|o| o == "latency") {
        let rows = latency::run(&all, &s);
        latency::print(&rows);
        report.latency = rows;
    }
    if only.iter().any(|o| o == "throughput") {
        let rows = throughput::run(&all, &s);
        throughput::print(&rows);
        report.throughput = rows;
    }
    if only.iter().any(|o| o == "handoff") {
        let mut contenders = all.clone();
        let extra = [&mux5_retry as &dyn Factory, &mux5_one];
        let at = contenders
            .iter()
            .position(|f| !f.name().starts_with("muxlock"))
            .unwrap_or(contenders.len());
        contenders.splice(at..at, extra.into_iter().filter(|f| picked(*f)));
        let rows = handoff::run(&contenders, &s);
        handoff::print(&rows);
        report.handoff = rows;
    }
    if only.iter().any(|o| o == "faults") {
        let protected = sv.protected.addr();
        let mut rows = Vec::new();
        for &fault in &fault_kinds {
            let mut run = |f: Option<&dyn Factory>, t: Option<&mut dyn Target>| {
                let (Some(f), Some(t)) = (f, t) else {
                    return;
                };
                if !picked(f) {
                    return;
                }
                let row = faults::run(f, t, fault, protected, &s);
                eprintln!(
                    "  fault {}: {:<32} granted {}, failed {}, hung {}, overlaps {}",
                    fault.name(),
                    row.name,
                    row.granted,
                    row.failed,
                    row.hung,
                    row.overlaps
                );
                rows.push(row);
            };
            run(Some(&mux5), Some(&mut NodeTarget(&mut sv.mux5, 0)));
            run(Some(&mux3), Some(&mut NodeTarget(&mut sv.mux3, 0)));
            run(as_dyn(&pg), sv.pg.as_mut().map(|t| t as &mut dyn Target));
            run(
                as_dyn(&row),
                sv.maria.as_mut().map(|t| t as &mut dyn Target),
            );
            run(
                as_dyn(&for_update),
                sv.maria.as_mut().map(|t| t as &mut dyn Target),
            );
            run(as_dyn(&zk3), sv.zk3.as_mut().map(|t| t as &mut dyn Target));
            run(as_dyn(&zk1), sv.zk1.as_mut().map(|t| t as &mut dyn Target));
            run(Some(&old), Some(&mut RedisTarget(&mut sv.old)));
        }
        faults::print(&rows, &s);
        report.faults = rows;
    }
    if let Some(path) = png {
        match plot::draw(&report, &path) {
            Ok(()) => eprintln!("picture: {}", path.display()),
            Err(e) => eprintln!("bench-alternatives: the picture was not drawn: {e}"),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!("\nRun time: {secs:.0} s (servers started by the bench included).");
    eprintln!("run time: {secs:.0} s");
    drop(rt);
    if mode == RunMode::Smoke {
        smoke_verdict(&report);
    }
}

/// `--smoke`: exit 1 if an alternative measured nothing in a scenario, or if muxlock's holds overlapped.
fn smoke_verdict(report: &plot::Report) {
    let mut wrong = Vec::new();
    for r in &report.latency {
        if r.cycle.is_empty() {
            wrong.push(format!(
                "latency: {} completed no cycle ({:?})",
                r.name, r.first_error
            ));
        }
    }
    for r in &report.throughput {
        if r.latency.is_empty() {
            wrong.push(format!(
                "throughput: {} completed no cycle ({:?})",
                r.name, r.first_error
            ));
        }
    }
    for r in &report.handoff {
        if r.per_contender.iter().sum::<u64>() == 0 {
            wrong.push(format!(
                "hand-off: {} handed nothing off ({:?})",
                r.name, r.first_error
            ));
        }
        if r.name.starts_with("muxlock") && r.overlaps > 0 {
            wrong.push(format!(
                "hand-off: {}: {} overlapping holds",
                r.name, r.overlaps
            ));
        }
    }
    for r in &report.faults {
        if r.granted == 0 {
            wrong.push(format!(
                "faults: {} / {}: no lock granted",
                r.name,
                r.fault.name()
            ));
        }
        if r.name.starts_with("muxlock") && (r.overlaps > 0 || r.concurrent_writers > 0) {
            wrong.push(format!(
                "faults: {} / {}: holds overlapped",
                r.name,
                r.fault.name()
            ));
        }
    }
    if wrong.is_empty() {
        eprintln!("bench-alternatives --smoke: ok");
    } else {
        for w in &wrong {
            eprintln!("bench-alternatives --smoke: FAILED: {w}");
        }
        std::process::exit(1);
    }
}
