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
    batch_throughput(out, plan, &cluster.urls());
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

/// Names per `try_lock_batch` call.
const BATCH: usize = 100;

/// The batch API: callers on one shared muxlock manager locking [`BATCH`] fresh names per
/// `try_lock_batch` call and releasing them with one `unlock_batch`, against the same callers locking the same
/// number of names one `acquire`/`unlock` at a time; the two take turns, repetitions as the throughput table's. Only
/// muxlock has a batch call: the peers' way to lock many names is one call per name (the table above).
pub fn batch_throughput(out: &mut Out, plan: &Plan, urls: &[String]) {
    let s = &plan.throughput;
    let manager = Muxlock::new(urls, TTL, plan.round_timeout)
        .manager()
        .clone();
    let threads = [1, 4];
    // Per (threads, batched): locks per second of each repetition, and failures.
    let mut rates: Vec<((usize, bool), Vec<f64>, u64)> = Vec::new();
    for &t in &threads {
        for batched in [true, false] {
            rates.push(((t, batched), Vec::new(), 0));
        }
    }
    let started = Instant::now();
    for rep in 0..s.reps {
        for &t in &threads {
            for k in 0..2 {
                let batched = (k + rep) % 2 == 0;
                let (locks, failed, secs) = batch_case(&manager, t, batched, s.secs, rep);
                let row = rates
                    .iter_mut()
                    .find(|r| r.0 == (t, batched))
                    .expect("a row");
                row.1.push(locks as f64 / secs);
                row.2 += failed;
            }
        }
    }
    out.line(format!(
        "**With the batch API** (muxlock's `try_lock_batch` + `unlock_batch`, {BATCH} fresh names a call, callers \
         sharing one manager), against the same callers taking the same names one `acquire`/`unlock` at a time, in \
         turns, {} repetition(s) of {:.1} s; {:.0} s. A lock is one acquisition and its release.\n",
        s.reps,
        s.secs.as_secs_f64(),
        started.elapsed().as_secs_f64()
    ));
    out.line("| threads | API | locks/s (median) | failed | batched ÷ one at a time |");
    out.line("|---:|---|---:|---:|---:|");
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    for &t in &threads {
        let get = |b: bool| rates.iter().find(|r| r.0 == (t, b)).expect("a row");
        let (one, many) = (get(false), get(true));
        out.line(format!(
            "| {t} | one at a time | {} | {} | |",
            thousands(median(&one.1)),
            one.2
        ));
        out.line(format!(
            "| {t} | batches of {BATCH} | {} | {} | {:.2} |",
            thousands(median(&many.1)),
            many.2,
            median(&many.1) / median(&one.1)
        ));
    }
    out.line("");
}

/// `threads` callers for `secs`: locks that were acquired and released, failed ones, and the seconds taken.
fn batch_case(
    manager: &LockManager,
    threads: usize,
    batched: bool,
    secs: Duration,
    rep: usize,
) -> (u64, u64, f64) {
    let start = Instant::now();
    let end = start + secs;
    let quorum = manager.quorum();
    let results: Vec<(u64, u64)> = thread::scope(|scope| {
        let callers: Vec<_> = (0..threads)
            .map(|k| {
                scope.spawn(move || {
                    let (mut done, mut failed, mut n) = (0u64, 0u64, 0u64);
                    while Instant::now() < end {
                        let names: Vec<String> = (0..BATCH)
                            .map(|i| format!("report:batch:{batched}:{threads}.{rep}:{k}:{n}:{i}"))
                            .collect();
                        n += 1;
                        if batched {
                            let locks: Vec<_> = manager
                                .try_lock_batch(&names, TTL)
                                .into_iter()
                                .filter_map(|r| r.ok().flatten())
                                .collect();
                            failed += (BATCH - locks.len()) as u64;
                            for released in manager.unlock_batch(locks) {
                                match released {
                                    Ok(n) if n >= quorum => done += 1,
                                    _ => failed += 1,
                                }
                            }
                        } else {
                            for name in &names {
                                match manager
                                    .request(name)
                                    .ttl(TTL)
                                    .acquire()
                                    .map(|l| manager.unlock(l))
                                {
                                    Ok(Ok(n)) if n >= quorum => done += 1,
                                    _ => failed += 1,
                                }
                            }
                        }
                    }
                    (done, failed)
                })
            })
            .collect();
        callers
            .into_iter()
            .map(|c| c.join().expect("a batch caller"))
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let done = results.iter().map(|r| r.0).sum();
    let failed = results.iter().map(|r| r.1).sum();
    (done, failed, secs)
}
