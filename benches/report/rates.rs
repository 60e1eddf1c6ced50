//! Scenario 2, throughput: the engine of `benches/throughput.rs` with every client, and the batch API's slot.

use super::*;

// ---------------------------------------------------------------- 2. throughput

pub fn throughput(out: &mut Out, plan: &Plan, cluster: &Cluster) -> Vec<throughput::report::Row> {
    let s = &plan.throughput;
    let pids: Vec<u32> = cluster.nodes().iter().map(|n| n.pid()).collect();
    let mut clients = throughput::Clients::build(&cluster.urls(), s);
    clients.warm_up();
    let started = Instant::now();
    let rows = throughput::run_all(&clients, s, &pids);
    let workers = clients.quorum_rt.metrics().num_workers();
    clients.shut_down();
    out.line(format!(
        "### 2. Throughput\n\nAcquire+release cycles per second on 5 nodes, each caller on its own resources \
         (the engine of `benches/throughput.rs`): {} repetition(s) of {:.1} s per case (+{:.1} s warm-up), cases in \
         alternation; {:.0} s. muxlock and the sync clients run one OS thread per caller (`muxlock/per-thread`: a \
         manager per thread; `redlock`: a client per thread; `redis-rs/single`: a connection per thread to one \
         node); rslock and redis-rs/quorum run N tasks on a multi-thread tokio runtime of {workers} workers. CPU: \
         µs per cycle of this process and of the 5 servers.\n",
        s.reps,
        s.secs.as_secs_f64(),
        s.warmup.as_secs_f64(),
        started.elapsed().as_secs_f64()
    ));
    out.line(
        "| threads | client | cycles/s (median) | min–max | failed | blocked | p50 | p99 | CPU µs/cycle (client + servers) | steal |",
    );
    out.line("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let (min, max) = r.range();
        let (c, sv) = r.cpu_per_cycle();
        out.line(format!(
            "| {} | {} | {} | {}–{} | {} | {} | {} | {} | {:.0} + {:.0} | {:.0} % |",
            r.threads,
            r.client.name(),
            thousands(r.median()),
            thousands(min),
            thousands(max),
            r.failures(),
            r.blocked,
            q(&r.tally.latency, 0.5),
            q(&r.tally.latency, 0.99),
            c,
            sv,
            r.steal()
        ));
    }
    out.line("");
    // muxlock/shared ÷ each other client, per thread count: the ratio of medians from this run.
    let clients: Vec<throughput::Client> = s.clients.clone();
    let mut head = "| threads |".to_string();
    let mut rule = "|---:|".to_string();
    for c in clients.iter().filter(|c| **c != throughput::Client::Shared) {
        let _ = write!(head, " ÷ {} |", c.name());
        rule.push_str("---:|");
    }
    out.line("muxlock/shared's cycles/s divided by each other client's (medians of this run):\n");
    out.line(head);
    out.line(rule);
    for &t in &s.threads {
        let get = |c: throughput::Client| rows.iter().find(|r| r.threads == t && r.client == c);
        let Some(ours) = get(throughput::Client::Shared) else {
            continue;
        };
        let mut line = format!("| {t} |");
        for c in clients.iter().filter(|c| **c != throughput::Client::Shared) {
            let v = get(*c).map_or("—".into(), |r| {
                format!("{:.2}", ours.median() / r.median())
            });
            let _ = write!(line, " {v} |");
        }
        out.line(line);
    }
    out.line("");
    for r in &rows {
        for (i, what) in ["acquire", "release"].iter().enumerate() {
            if let Some(e) = &r.tally.first_error[i] {
                out.line(format!(
                    "- {} × {}: {} failed {what} calls, first: `{}`",
                    r.threads,
                    r.client.name(),
                    r.tally.failures[i],
                    e.replace('`', "'")
                ));
            }
        }
    }
    out.line("");
    out.line(format!("**With the batch API**: {}\n", batch_throughput()));
    let groups: Vec<String> = s
        .threads
        .iter()
        .map(|&t| format!("{t} thread{}", if t == 1 { "" } else { "s" }))
        .collect();
    let series: Vec<(String, Vec<Option<f64>>)> = clients
        .iter()
        .map(|c| {
            let v = s
                .threads
                .iter()
                .map(|&t| {
                    rows.iter()
                        .find(|r| r.threads == t && r.client == *c)
                        .map(throughput::report::Row::median)
                })
                .collect();
            (c.name().to_string(), v)
        })
        .collect();
    out.picture(
        "throughput.svg",
        "throughput by thread count",
        svg::bars(
            "acquire+release cycles per second, 5 local nodes",
            "median over repetitions; callers on distinct resources; 2 vCPUs shared with the 5 servers",
            "cycles per second",
            &groups,
            &series,
            false,
            None,
        ),
    );
    rows
}

/// SLOT for the batch API (issue #11, `LockManager::try_lock_batch` / `unlock_batch`, being built on branch
/// `many`): not on this branch, so the report says so. Once it lands, this runs the throughput of one caller
/// locking M names per `try_lock_batch` call (and releasing them with `unlock_batch`) against M single `lock`
/// calls, in the same run, and returns the line for the report.
pub fn batch_throughput() -> String {
    "not built yet: `try_lock_batch` (issue #11) is not on this branch; the slot is `batch_throughput` in \
     `benches/report/rates.rs`."
        .into()
}
