//! CPU time from `/proc` (this process, an alternative's servers) and the hypervisor's steal, read as
//! `benches/throughput/report.rs` reads them; and the histogram every latency goes into.

use std::fs;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::lockers::Pids;
use crate::servers::descendants;

/// A histogram of nanoseconds, 1 ns to 60 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

pub fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1));
}

/// `q` of `h`, in microseconds.
pub fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn ticks_to(d: u64) -> Duration {
    Duration::from_secs_f64(d as f64 / rustix::param::clock_ticks_per_second() as f64)
}

/// utime + stime (fields 14, 15) and, with `children`, cutime + cstime (16, 17): a PostgreSQL postmaster reaps
/// the backends of closed connections, and their CPU time lands there.
fn cpu_ticks(pid: &str, children: bool) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| {
        fields
            .get(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(14) + field(15) + if children { field(16) + field(17) } else { 0 }
}

/// The machine's CPU ticks so far (the `cpu` line of `/proc/stat`) and the stolen part (its 8th field).
fn machine_ticks() -> (u64, u64) {
    let stat = fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    (fields.iter().sum(), fields.get(7).copied().unwrap_or(0))
}

/// CPU used so far by this process and by some servers, and the machine's ticks (all, stolen).
#[derive(Clone, Copy, Default, Debug)]
pub struct Cpu {
    pub bench: Duration,
    pub servers: Duration,
    pub ticks: u64,
    pub stolen: u64,
}

impl Cpu {
    pub fn now(servers: &Pids) -> Cpu {
        let (ticks, stolen) = machine_ticks();
        let mut server_ticks: u64 = servers
            .pids
            .iter()
            .map(|p| cpu_ticks(&p.to_string(), false))
            .sum();
        for &root in &servers.trees {
            // The root's own time and its reaped children's (a postmaster's closed backends), and each live
            // descendant's own.
            for pid in descendants(root) {
                server_ticks += cpu_ticks(&pid.to_string(), pid == root);
            }
        }
        Cpu {
            bench: ticks_to(cpu_ticks("self", false)),
            servers: ticks_to(server_ticks),
            ticks,
            stolen,
        }
    }

    pub fn since(self, before: Cpu) -> Cpu {
        Cpu {
            bench: self.bench.saturating_sub(before.bench),
            servers: self.servers.saturating_sub(before.servers),
            ticks: self.ticks.saturating_sub(before.ticks),
            stolen: self.stolen.saturating_sub(before.stolen),
        }
    }

    pub fn add(&mut self, other: Cpu) {
        self.bench += other.bench;
        self.servers += other.servers;
        self.ticks += other.ticks;
        self.stolen += other.stolen;
    }

    /// The share of the machine's CPU time the hypervisor stole, in percent.
    pub fn steal_percent(&self) -> f64 {
        100.0 * self.stolen as f64 / self.ticks.max(1) as f64
    }
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
