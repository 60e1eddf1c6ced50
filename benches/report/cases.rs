//! The call-by-call scenarios: the clients ([`Kind`]), a client's [`Case`] and the turns the cases take
//! ([`alternate`]); 1. uncontended latency, 3. a node hung or down, 4. injected latency.

use super::*;

// ---------------------------------------------------------------- clients

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Muxlock,
    Rslock,
    Redlock,
    Quorum,
    Single,
}

pub const KINDS: [Kind; 5] = [
    Kind::Muxlock,
    Kind::Rslock,
    Kind::Redlock,
    Kind::Quorum,
    Kind::Single,
];

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Muxlock => "muxlock",
            Kind::Rslock => "rslock",
            Kind::Redlock => "redlock",
            Kind::Quorum => "redis-rs/quorum",
            Kind::Single => "redis-rs/single",
        }
    }

    /// The `redlock` crate opens 10 TCP connections per cycle: it gets a fifth of the calls.
    pub fn share(self) -> u64 {
        if self == Kind::Redlock { 5 } else { 1 }
    }

    /// A client of `urls` (redis-rs/single: of `single`).
    pub fn build(self, urls: &[String], single: &str, round_timeout: Duration) -> Box<dyn Locker> {
        match self {
            Kind::Muxlock => Box::new(Muxlock::new(urls, TTL, round_timeout)),
            Kind::Rslock => Box::new(Rslock::new(urls, TTL)),
            Kind::Redlock => Box::new(RedlockRs::new(urls, TTL)),
            Kind::Quorum => Box::new(QuorumSync::new(urls, TTL)),
            Kind::Single => Box::new(RedisSingle::new(single, TTL)),
        }
    }
}

/// One client in one setting, with what its calls gave.
pub struct Case {
    pub label: String,
    pub kind: Kind,
    pub nodes: usize,
    pub worker: Worker,
    pub stats: CallStats,
}

impl Case {
    pub fn new(label: String, kind: Kind, nodes: usize, locker: Box<dyn Locker>) -> Case {
        Case {
            worker: Worker::start(label.clone(), locker),
            label,
            kind,
            nodes,
            stats: CallStats::new(),
        }
    }

    /// A few cycles to connect and warm up, not recorded.
    pub fn warm_up(&mut self, plan: &Plan) {
        let mut scratch = CallStats::new();
        self.worker
            .cycles(&mut scratch, 5, Duration::from_secs(2), plan.grace);
        assert!(
            scratch.failed == 0 && !scratch.blocked,
            "{}: warm-up failed: {:?}",
            self.label,
            scratch.first_error
        );
    }
}

/// Runs the cases in turn, a batch each (the first case rotating), until each made `calls` calls (divided by its
/// share), blocked, or `limit` passed.
pub fn alternate(
    cases: &mut [Case],
    calls: u64,
    batch: u64,
    budget: Duration,
    plan: &Plan,
    limit: Duration,
) {
    let start = Instant::now();
    let mut round = 0;
    loop {
        let mut pending = false;
        for k in 0..cases.len() {
            let case = &mut cases[(k + round) % cases.len()];
            let target = (calls / case.kind.share()).max(1);
            if case.worker.blocked || case.stats.calls() >= target {
                continue;
            }
            pending = true;
            let n = (batch / case.kind.share())
                .max(1)
                .min(target - case.stats.calls());
            case.worker.cycles(&mut case.stats, n, budget, plan.grace);
        }
        round += 1;
        if !pending || start.elapsed() >= limit {
            return;
        }
    }
}

/// The latency's CDF points `(µs, percent)`.
pub fn cdf_points(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    let mut qs: Vec<f64> = (0..100).map(|i| f64::from(i) / 100.0).collect();
    qs.extend([0.995, 0.999, 0.9995, 1.0]);
    if h.is_empty() {
        return Vec::new();
    }
    qs.iter()
        .map(|&q| (h.value_at_quantile(q) as f64 / 1e3, q * 100.0))
        .collect()
}

// ---------------------------------------------------------------- 1. latency

pub fn latency(out: &mut Out, plan: &Plan, urls: &[String]) -> Vec<Case> {
    let mut cases = Vec::new();
    for n in [1, 3, 5] {
        for kind in [Kind::Muxlock, Kind::Rslock, Kind::Redlock, Kind::Quorum] {
            let label = format!("{}/{n}", kind.name());
            cases.push(Case::new(
                label,
                kind,
                n,
                kind.build(&urls[..n], &urls[0], plan.round_timeout),
            ));
        }
    }
    cases.push(Case::new(
        "redis-rs/single/1".into(),
        Kind::Single,
        1,
        Kind::Single.build(&urls[..1], &urls[0], plan.round_timeout),
    ));
    for case in &mut cases {
        case.warm_up(plan);
    }
    let started = Instant::now();
    alternate(
        &mut cases,
        plan.latency_calls,
        plan.batch,
        Duration::from_secs(2),
        plan,
        Duration::from_secs(600),
    );
    out.line(format!(
        "### 1. Uncontended acquire+release latency\n\n{} calls per case ({} for the `redlock` crate), the cases \
         taking turns in batches of {}; {:.0} s. Latency of one acquire followed by one release, on fresh names; \
         \"÷ muxlock\" divides the p50 by muxlock's on the same nodes.\n",
        plan.latency_calls,
        plan.latency_calls / 5,
        plan.batch,
        started.elapsed().as_secs_f64()
    ));
    for n in [1, 3, 5] {
        out.line(format!("**{n} node{}**\n", if n == 1 { "" } else { "s" }));
        out.line(
            "| client | calls | failed | p50 | p90 | p99 | p99.9 | acquire p50 | ÷ muxlock (p50) |",
        );
        out.line("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        let ours = cases
            .iter()
            .find(|c| c.nodes == n && c.kind == Kind::Muxlock)
            .and_then(|c| p50(&c.stats.cycle));
        for c in cases.iter().filter(|c| c.nodes == n) {
            let s = &c.stats;
            out.line(format!(
                "| {}{} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.kind.name(),
                if c.stats.blocked { " (BLOCKED)" } else { "" },
                s.calls(),
                s.failed,
                q(&s.cycle, 0.5),
                q(&s.cycle, 0.9),
                q(&s.cycle, 0.99),
                q(&s.cycle, 0.999),
                q(&s.acquire, 0.5),
                ratio(p50(&s.cycle), ours)
            ));
        }
        out.line("");
    }
    failures(out, &cases);
    let mut series: Vec<(String, Vec<(f64, f64)>)> = cases
        .iter()
        .filter(|c| c.nodes == 5)
        .map(|c| (c.kind.name().to_string(), cdf_points(&c.stats.cycle)))
        .collect();
    if let Some(single) = cases.iter().find(|c| c.kind == Kind::Single) {
        series.push((
            "redis-rs/single (1 node)".into(),
            cdf_points(&single.stats.cycle),
        ));
    }
    out.picture(
        "latency-cdf-5.svg",
        "acquire+release latency CDF, 5 nodes",
        svg::cdf(
            "acquire+release latency, 5 local nodes",
            "cumulative share of calls; log scale; the no-Redlock single-node client for reference",
            "acquire+release latency (µs)",
            &series,
        ),
    );
    cases
}

/// Prints each case's first error.
pub fn failures(out: &mut Out, cases: &[Case]) {
    let mut any = false;
    for c in cases {
        if let Some(e) = &c.stats.first_error {
            out.line(format!(
                "- {}: {} of {} calls failed, first: `{}`",
                c.label,
                c.stats.failed,
                c.stats.calls(),
                e.replace('`', "'")
            ));
            any = true;
        }
    }
    if any {
        out.line("");
    }
}

// ---------------------------------------------------------------- 3. faults

pub fn faults(out: &mut Out, plan: &Plan) -> Vec<Case> {
    out.line(format!(
        "### 3. One node hung (SIGSTOP) or down (killed)\n\nTwo clusters of 5 nodes: node {FAULTY} of one is \
         stopped with SIGSTOP, node {FAULTY} of the other is killed, after every client connected and warmed up. \
         Up to {} calls per client, the clients taking turns, for at most {:.0} s per cluster. A call that has not \
         returned {:.1} s after its batch's budget marks its client **blocked**: it is asked nothing more and the \
         run goes on. redis-rs/single (no Redlock) is connected to the faulty node itself, to show what one node \
         costs when it is the one that fails. Latencies are of the calls that succeeded.\n",
        plan.fault_calls,
        plan.fault_limit.as_secs_f64(),
        plan.grace.as_secs_f64()
    ));
    out.line("| node 2 | client | calls | succeeded | p50 | p99 | max | state |");
    out.line("|---|---|---:|---:|---:|---:|---:|---|");
    let mut all = Vec::new();
    for fault in ["hung", "down"] {
        let mut cluster = Cluster::start(5);
        let urls = cluster.urls();
        let mut cases: Vec<Case> = KINDS
            .iter()
            .map(|&kind| {
                Case::new(
                    format!("{}/{fault}", kind.name()),
                    kind,
                    5,
                    kind.build(&urls, &urls[FAULTY], plan.round_timeout),
                )
            })
            .collect();
        for case in &mut cases {
            case.warm_up(plan);
        }
        if fault == "hung" {
            cluster.pause(FAULTY);
        } else {
            cluster.kill(FAULTY);
        }
        alternate(
            &mut cases,
            plan.fault_calls,
            20,
            Duration::from_millis(300),
            plan,
            plan.fault_limit,
        );
        for c in &cases {
            let s = &c.stats;
            let state = if s.blocked {
                format!(
                    "**blocked**: a call did not return within {:.1} s",
                    plan.grace.as_secs_f64()
                )
            } else if let Some(e) = &s.first_error {
                format!("failed: `{}`", e.replace('`', "'"))
            } else {
                "ok".into()
            };
            out.line(format!(
                "| {fault} | {} | {} | {:.1} % | {} | {} | {} | {state} |",
                c.kind.name(),
                s.calls(),
                100.0 * s.ok as f64 / s.calls().max(1) as f64,
                q(&s.cycle, 0.5),
                q(&s.cycle, 0.99),
                q(&s.cycle, 1.0),
            ));
        }
        // The servers stop here; a blocked client's call then fails and its thread ends (or the process exit
        // ends it).
        drop(cluster);
        all.extend(cases);
    }
    out.line("");
    all
}

// ---------------------------------------------------------------- 4. injected latency

pub fn injected(out: &mut Out, plan: &Plan, cluster: &Cluster) -> Vec<Case> {
    // Latency is per direction in the proxy: half of each node's added round trip.
    let proxies: Vec<FaultProxy> = cluster
        .addrs()
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            let p = FaultProxy::start(*addr);
            p.set(Fault::Latency(Duration::from_micros(500 * (i as u64 + 1))));
            p
        })
        .collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let mut cases: Vec<Case> = KINDS
        .iter()
        .map(|&kind| {
            let label = if kind == Kind::Single {
                "redis-rs/single (3 ms node: the floor)".to_string()
            } else {
                kind.name().to_string()
            };
            Case::new(
                label,
                kind,
                5,
                kind.build(&urls, &urls[2], plan.round_timeout),
            )
        })
        .collect();
    for case in &mut cases {
        case.warm_up(plan);
    }
    let started = Instant::now();
    alternate(
        &mut cases,
        plan.injected_calls,
        10,
        Duration::from_millis(500),
        plan,
        Duration::from_secs(300),
    );
    let floor = cases
        .iter()
        .find(|c| c.kind == Kind::Single)
        .and_then(|c| p50(&c.stats.acquire));
    out.line(format!(
        "### 4. Injected latency\n\n5 nodes, each behind the fault proxy, which adds 1, 2, 3, 4 and 5 ms to a round \
         trip (half each way). The floor of an acquisition is one round trip to the third-fastest node: \
         redis-rs/single measures it, connected to that node alone (acquire p50 {}). A client that waits for \
         every node pays the 5 ms node's round trip; one that asks the nodes one after another pays the sum (15 ms \
         per command). {} calls per client ({} for the `redlock` crate), in turns; {:.0} s.\n",
        floor.map_or("—".into(), |f| lat(f as u64)),
        plan.injected_calls,
        plan.injected_calls / 5,
        started.elapsed().as_secs_f64()
    ));
    out.line("| client | calls | failed | acquire p50 | acquire p99 | release p50 | acquire+release p50 | acquire p50 ÷ floor |");
    out.line("|---|---:|---:|---:|---:|---:|---:|---:|");
    for c in &cases {
        let s = &c.stats;
        out.line(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            c.label,
            s.calls(),
            s.failed,
            q(&s.acquire, 0.5),
            q(&s.acquire, 0.99),
            q(&s.release, 0.5),
            q(&s.cycle, 0.5),
            ratio(p50(&s.acquire), floor)
        ));
    }
    out.line("");
    failures(out, &cases);
    let peers: Vec<&Case> = cases.iter().filter(|c| c.kind != Kind::Single).collect();
    let groups: Vec<String> = vec!["acquire p50".into(), "release p50".into()];
    let series: Vec<(String, Vec<Option<f64>>)> = peers
        .iter()
        .map(|c| {
            let ms = |h: &hdrhistogram::Histogram<u64>| p50(h).map(|v| v / 1e6);
            (
                c.kind.name().to_string(),
                vec![ms(&c.stats.acquire), ms(&c.stats.release)],
            )
        })
        .collect();
    out.picture(
        "injected-latency.svg",
        "acquire and release p50 with 1-5 ms injected, against the floor",
        svg::bars(
            "5 nodes adding 1, 2, 3, 4, 5 ms per round trip",
            "p50 per call; dashed: the floor, one round trip to the 3rd-fastest node (measured); log scale",
            "milliseconds",
            &groups,
            &series,
            true,
            floor.map(|f| (f / 1e6, format!("floor {:.2} ms", f / 1e6))),
        ),
    );
    drop(proxies);
    cases
}
