//! The summary at the end: acquisitions, hand-offs, latency percentiles, per-node figures, violations and what
//! the restart guard did, as text or as one JSON object (`--json`, with the events).

use std::time::Duration;

use hdrhistogram::Histogram;
use muxlock::Stats;
use serde::Serialize;

use super::Demo;
use super::cluster::Cluster;
use super::plot::Second;
use super::worker::{MAX_WAIT, Tally};
use crate::duration::{self, millis};
use crate::exit::{self, CliError};
use crate::output;

#[derive(Clone, Serialize)]
pub(super) struct Event {
    pub(super) at_ms: u64,
    pub(super) what: String,
}

#[derive(Clone, Serialize)]
pub(super) struct Summary {
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
    /// Locks completed in each second, in all processes.
    pub(super) per_second: Vec<Second>,
    /// Where the picture was written, if it was.
    pub(super) svg: Option<String>,
    /// `pass` when every check passed, else `fail`.
    pub(super) verdict: &'static str,
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

impl Demo<'_> {
    pub(super) fn summary(
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
            per_second: Vec::new(),
            svg: None,
            verdict: "fail",
        })
    }

    pub(super) fn print_summary(
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
        if let Some(path) = &summary.svg {
            t.push_str(&format!(
                "picture: {path} (locks per second over time, the faults marked)\n"
            ));
        }
        self.screen.write(&t);
        Ok(())
    }
}
