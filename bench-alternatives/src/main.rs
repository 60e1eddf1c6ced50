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
//! Run it with `scripts/bench-alternatives [--quick]` (it installs the servers' packages when missing); by hand:
//! `cargo run --release -- [--quick] [--only latency,throughput,handoff,faults] [--png PATH]`.

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
use lockers::mux::MuxFactory;
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
    pub quick: bool,
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

impl Settings {
    fn new(quick: bool) -> Settings {
        let ms = Duration::from_millis;
        if quick {
            Settings {
                quick,
                latency_samples: 300,
                latency_warmup: 50,
                tp_secs: ms(500),
                tp_reps: 1,
                handoff_secs: ms(500),
                handoff_reps: 1,
                fault_healthy: ms(300),
                fault_down: ms(1000),
                fault_after: ms(1200),
            }
        } else {
            Settings {
                quick,
                latency_samples: 5000,
                latency_warmup: 300,
                tp_secs: ms(3000),
                tp_reps: 3,
                handoff_secs: ms(3000),
                handoff_reps: 3,
                fault_healthy: ms(1000),
                fault_down: ms(3000),
                fault_after: ms(4000),
            }
        }
    }
}

/// Every server of the run.
struct Servers {
    pg: Postgres,
    maria: MariaDb,
    zk3: ZooKeeper,
    zk1: ZooKeeper,
    mux5: Cluster,
    mux3: Cluster,
    old: RedisServer,
    protected: RedisServer,
}

/// The server a start-up thread made, or the end of the run with the reason.
fn started<T>(what: &str, r: thread::Result<Result<T, String>>) -> T {
    match r {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            eprintln!("bench-alternatives: {what} did not start: {e}");
            std::process::exit(1);
        }
        Err(_) => {
            eprintln!("bench-alternatives: starting {what} panicked");
            std::process::exit(1);
        }
    }
}

fn start_servers(scratch: &Scratch) -> Servers {
    let t = Instant::now();
    let (pg_dir, maria_dir, zk3_dir, zk1_dir) =
        (scratch.sub("postgres"), scratch.sub("mariadb"), scratch.sub("zk3"), scratch.sub("zk1"));
    let (pg, maria, zk3, zk1, redis) = thread::scope(|s| {
        let pg = s.spawn(move || Postgres::start(&pg_dir));
        let maria = s.spawn(move || MariaDb::start(&maria_dir));
        let zk3 = s.spawn(move || ZooKeeper::start(&zk3_dir, 3));
        let zk1 = s.spawn(move || ZooKeeper::start(&zk1_dir, 1));
        let redis = s.spawn(|| (Cluster::start(5), Cluster::start(3), RedisServer::start(), RedisServer::start()));
        (
            started("PostgreSQL", pg.join()),
            started("MariaDB", maria.join()),
            started("ZooKeeper ensemble", zk3.join()),
            started("ZooKeeper", zk1.join()),
            redis.join().expect("redis-server starts"),
        )
    });
    let (mux5, mux3, old, protected) = redis;
    for pid in mux5.nodes().iter().chain(mux3.nodes()).chain([&old, &protected]).map(RedisServer::pid) {
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let only: Vec<String> = value("--only").map_or_else(
        || ["latency", "throughput", "handoff", "faults"].map(String::from).to_vec(),
        |v| v.split(',').map(String::from).collect(),
    );
    let png = value("--png").map(PathBuf::from);
    let s = Settings::new(quick);
    let started = Instant::now();

    let scratch = Scratch::new();
    let mut sv = start_servers(&scratch);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let handle = rt.handle().clone();
    create_tables(&handle, &sv.maria.url()).unwrap_or_else(|e| panic!("MariaDB tables: {e}"));

    let mux5 = MuxFactory::new(sv.mux5.urls(), sv.mux5.nodes().iter().map(RedisServer::pid).collect());
    let mux3 = MuxFactory::new(sv.mux3.urls(), sv.mux3.nodes().iter().map(RedisServer::pid).collect());
    let pg = PgFactory {
        rt: handle.clone(),
        conninfo: sv.pg.conninfo(),
        pgid: sv.pg.pgid().unwrap_or(0),
    };
    let maria_group = sv.maria.pgid().unwrap_or(0);
    let row = MariaFactory {
        rt: handle.clone(),
        url: sv.maria.url(),
        pgid: maria_group,
        mode: Mode::Row,
    };
    let for_update = MariaFactory {
        rt: handle.clone(),
        url: sv.maria.url(),
        pgid: maria_group,
        mode: Mode::ForUpdate,
    };
    let zk3 = ZkFactory::new(handle.clone(), sv.zk3.connect_string(), sv.zk3.len(), sv.zk3.pgids());
    let zk1 = ZkFactory::new(handle.clone(), sv.zk1.connect_string(), sv.zk1.len(), sv.zk1.pgids());
    let old = OldFactory {
        addr: sv.old.addr(),
        pid: sv.old.pid(),
    };
    let all: Vec<&dyn Factory> = vec![&mux5, &mux3, &pg, &row, &for_update, &zk3, &zk1, &old];

    println!(
        "# muxlock and the alternatives ({} run, {}); load average at start: {}",
        if quick { "quick" } else { "full" },
        std::env::consts::ARCH,
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
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
        let rows = handoff::run(&all, &s);
        handoff::print(&rows);
        report.handoff = rows;
    }
    if only.iter().any(|o| o == "faults") {
        let protected = sv.protected.addr();
        let mut rows = Vec::new();
        for fault in [Fault::Pause, Fault::Kill] {
            let mut run = |f: &dyn Factory, t: &mut dyn Target| {
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
            run(&mux3, &mut NodeTarget(&mut sv.mux3, 0));
            run(&pg, &mut sv.pg);
            run(&row, &mut sv.maria);
            run(&for_update, &mut sv.maria);
            run(&zk3, &mut sv.zk3);
            run(&zk1, &mut sv.zk1);
            run(&old, &mut RedisTarget(&mut sv.old));
        }
        faults::print(&rows, &s);
        report.faults = rows;
    }
    if let Some(path) = png {
        match plot::draw(&report, &path) {
            Ok(()) => println!("\npicture: {}", path.display()),
            Err(e) => eprintln!("bench-alternatives: the picture was not drawn: {e}"),
        }
    }
    println!("\nrun time: {:.0} s", started.elapsed().as_secs_f64());
    drop(rt);
}
