//! Scenario 5, contention: hand-off (muxlock's `.wait(..)` against the peers' retry loops) and fairness (8
//! clients on one resource).

use super::*;

// ---------------------------------------------------------------- 5. contention

/// A muxlock manager for the contention scenario: 1 s rounds, as `benches/hold.rs` (a descheduled thread on
/// this 2-vCPU host can miss 50 ms; a stuck round would still show, as 1 s).
pub fn waiting_manager(urls: &[String]) -> LockManager {
    Muxlock::new(urls, TTL, Duration::from_secs(1))
        .manager()
        .clone()
}

/// Builds one client.
pub type Maker<'a> = Box<dyn Fn() -> Box<dyn Locker> + 'a>;

/// The contenders: a label and how to build one client of that kind. `holder`: the hand-off's holder, whose
/// manager "same manager" clients share.
pub fn contenders<'a>(urls: &'a [String], holder: &LockManager) -> Vec<(String, Maker<'a>)> {
    let same = holder.clone();
    let urls1 = urls.to_vec();
    let mut v: Vec<(String, Maker<'a>)> = vec![
        (
            "muxlock wait, one manager".into(),
            Box::new(move || Box::new(Muxlock::on(same.clone(), TTL)) as Box<dyn Locker>),
        ),
        (
            "muxlock wait, own manager".into(),
            Box::new(move || {
                Box::new(Muxlock::on(waiting_manager(&urls1), TTL)) as Box<dyn Locker>
            }),
        ),
    ];
    for kind in [Kind::Rslock, Kind::Redlock, Kind::Quorum, Kind::Single] {
        v.push((
            kind.name().to_string(),
            Box::new(move || kind.build(urls, &urls[0], Duration::from_secs(1))),
        ));
    }
    v
}

/// What the contention scenario gave, per client kind: the hand-off p50 ÷ the uncontended acquire, and the
/// fairness run's totals with its least ÷ most served.
pub struct Contention {
    pub handoff: Vec<(String, f64)>,
    pub fairness: Vec<(String, CallStats, f64)>,
}

pub fn contention(out: &mut Out, plan: &Plan, urls: &[String]) -> Contention {
    let holder = waiting_manager(urls);
    let kinds = contenders(urls, &holder);
    // Hand-off.
    let mut waiters: Vec<(String, Worker, hdrhistogram::Histogram<u64>)> = kinds
        .iter()
        .map(|(name, build)| {
            (
                name.clone(),
                Worker::start(format!("handoff:{name}"), build()),
                hdrhistogram::Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("bounds"),
            )
        })
        .collect();
    // Connect every waiter (rslock and the redlock crate connect on their first call).
    let warm = |w: &mut Worker, name: &str| {
        let got = w.ask(
            Job::Wait {
                resource: format!("warm:{name}").into_bytes(),
                max_wait: Duration::from_secs(2),
            },
            Duration::from_secs(5) + plan.grace,
        );
        assert!(
            matches!(got, Some(Done::Got(Ok(_)))),
            "{name}: warm-up failed"
        );
    };
    for (name, w, _) in &mut waiters {
        warm(w, name);
    }
    let mut yardstick = CallStats::new();
    let mut n = 0u64;
    let started = Instant::now();
    let (batch, peer_batch) = if plan.mode == Mode::Full {
        (20, 2)
    } else {
        (3, 1)
    };
    for round in 0..plan.handoff_rounds {
        for _ in 0..batch {
            n += 1;
            let t0 = Instant::now();
            let lock = holder
                .request(format!("free:{n}"))
                .ttl(TTL)
                .acquire()
                .expect("an uncontended lock");
            let t1 = Instant::now();
            holder.unlock(lock).expect("unlock");
            yardstick.record(worker::Call {
                acquire: t1 - t0,
                release: Duration::ZERO,
                error: None,
            });
        }
        for k in 0..waiters.len() {
            let i = (k + round as usize) % waiters.len();
            let (name, w, h) = &mut waiters[i];
            let count = if name.starts_with("muxlock") {
                batch
            } else {
                peer_batch
            };
            for _ in 0..count {
                if w.blocked {
                    break;
                }
                n += 1;
                let resource = format!("handoff:{n}").into_bytes();
                let lock = holder
                    .request(&resource)
                    .ttl(TTL)
                    .acquire()
                    .expect("the holder's lock");
                w.post(Job::Wait {
                    resource,
                    max_wait: Duration::from_secs(10),
                });
                // Long enough for the waiter to try, fail, and wait.
                thread::sleep(Duration::from_millis(3));
                holder.unlock(lock).expect("the holder's unlock");
                let released = Instant::now();
                match w.collect(released + Duration::from_secs(10) + plan.grace) {
                    Some(Done::Got(Ok(at))) => {
                        let ns = at.saturating_duration_since(released).as_nanos() as u64;
                        h.saturating_record(ns.max(1));
                    }
                    Some(Done::Got(Err(e))) => println!("hand-off {name}: {e}"),
                    _ => {}
                }
            }
        }
    }
    let base = p50(&yardstick.acquire);
    out.line(format!(
        "### 5. Contention\n\n**Hand-off**: a muxlock holder takes a resource, a waiter starts waiting for it, the \
         holder releases it 3 ms later; the time from the holder's `unlock` returning to the waiter having it. \
         muxlock waits with `.wait(..)` (woken by the release in-process on one manager, by client-side tracking \
         on another); rslock with `acquire_no_guard` and its default retry (a random pause up to 200 ms); the \
         `redlock` crate with its retry pause (random, up to 200 ms); the hand-written redis-rs clients with a \
         retry loop pausing at random up to {} ms. {} rounds; {:.0} s. Beside them, the uncontended acquire (p50 \
         {}).\n",
        peers::HAND_RETRY.as_millis(),
        plan.handoff_rounds,
        started.elapsed().as_secs_f64(),
        base.map_or("—".into(), |b| lat(b as u64)),
    ));
    out.line("| waiter | hand-offs | p50 | p90 | p99 | p50 ÷ uncontended acquire |");
    out.line("|---|---:|---:|---:|---:|---:|");
    let mut handoff = Vec::new();
    for (name, w, h) in &waiters {
        let r = ratio(p50(h), base);
        handoff.push((
            name.clone(),
            p50(h).zip(base).map_or(f64::NAN, |(a, b)| a / b),
        ));
        out.line(format!(
            "| {name}{} | {} | {} | {} | {} | {r} |",
            if w.blocked { " (BLOCKED)" } else { "" },
            h.len(),
            q(h, 0.5),
            q(h, 0.9),
            q(h, 0.99)
        ));
    }
    out.line("");
    drop(waiters);
    // Fairness.
    let secs = plan.fair_secs / plan.fair_passes as f64;
    // Per kind: its 8 workers, acquisitions per worker, waits given up, the first error.
    type Group = (String, Vec<Worker>, Vec<u64>, u64, Option<String>);
    let mut groups: Vec<Group> = kinds
        .iter()
        .map(|(name, build)| {
            let workers = (0..8)
                .map(|k| Worker::start(format!("fair:{name}:{k}"), build()))
                .collect();
            (name.clone(), workers, vec![0; 8], 0, None)
        })
        .collect();
    for (name, workers, ..) in &mut groups {
        for (k, w) in workers.iter_mut().enumerate() {
            warm(w, &format!("{name}:{k}"));
        }
    }
    let started = Instant::now();
    for pass in 0..plan.fair_passes {
        for k in 0..groups.len() {
            let i = (k + pass as usize) % groups.len();
            let (_, workers, counts, failed, first) = &mut groups[i];
            let until = Instant::now() + Duration::from_secs_f64(secs);
            for w in workers.iter_mut() {
                w.post(Job::Fair {
                    resource: format!("fair:{i}").into_bytes(),
                    until,
                    hold: Duration::from_millis(1),
                    max_wait: Duration::from_secs(2),
                });
            }
            for (w, count) in workers.iter_mut().zip(counts.iter_mut()) {
                if let Some(Done::Fair {
                    acquired,
                    failed: f,
                    first_error,
                }) = w.collect(until + Duration::from_secs(2) + plan.grace)
                {
                    *count += acquired;
                    *failed += f;
                    if first.is_none() {
                        *first = first_error;
                    }
                }
            }
        }
    }
    out.line(format!(
        "**Fairness**: 8 clients of one kind loop on one resource for {:.1} s (in {} pass(es), the kinds taking \
         turns): wait for it (at most 2 s), hold it 1 ms, release it. \"one manager\": 8 threads sharing one \
         muxlock manager; the others are 8 separate clients, as 8 processes would be. {:.0} s.\n",
        plan.fair_secs,
        plan.fair_passes,
        started.elapsed().as_secs_f64()
    ));
    out.line(
        "| clients | acquisitions per client | per second, all | least ÷ most | waits given up |",
    );
    out.line("|---|---|---:|---:|---:|");
    let mut fair = Vec::new();
    for (name, workers, counts, failed, first) in &groups {
        let (min, max) = (
            counts.iter().copied().min().unwrap_or(0),
            counts.iter().copied().max().unwrap_or(0),
        );
        let blocked = workers.iter().filter(|w| w.blocked).count();
        let list: Vec<String> = counts.iter().map(u64::to_string).collect();
        out.line(format!(
            "| {name}{} | {} | {:.0} | {:.2} | {failed} |",
            if blocked > 0 {
                format!(" ({blocked} BLOCKED)")
            } else {
                String::new()
            },
            list.join(", "),
            counts.iter().sum::<u64>() as f64 / plan.fair_secs,
            min as f64 / max.max(1) as f64
        ));
        let mut s = CallStats::new();
        s.ok = counts.iter().sum();
        s.failed = *failed;
        s.first_error = first.clone();
        s.blocked = blocked > 0;
        fair.push((name.clone(), s, min as f64 / max.max(1) as f64));
    }
    out.line("");
    drop(groups);
    Contention {
        handoff,
        fairness: fair,
    }
}
