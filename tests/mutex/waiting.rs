//! Waiting requests (the nodes' queue, shared across processes) under faults, beside plain retrying callers: the
//! waiting workers of two managers and the plain workers of a third compete for the same resources while nodes
//! restart, pause and lose their connections. The checker must find no overlap; the controls (restarts with no
//! protection; the mixed faults with managers that share no majority) must find one among the waiters' holds.

use std::time::{Duration, Instant};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use super::support::checker::{Hold, Work};
use super::support::faults::Struck;
use super::support::proxy::{Fault, FaultProxy};
use super::support::{Cluster, RedisServer};
use super::{
    FaultRun, assert_safe, config, long_work, minority_bursts, run, scenario_managers, seconds,
    wait_until_usable,
};

/// How long a waiting worker waits at most.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// Whether `holds` has a hold of a waiting worker (managers 0 and 1; manager 2 takes plain locks) overlapping
/// another hold.
fn a_waiter_overlaps(violations: &[(Hold, Hold)]) -> bool {
    let waiting = |h: &Hold| h.holder.starts_with("m0") || h.holder.starts_with("m1");
    violations.iter().any(|(a, b)| waiting(a) || waiting(b))
}

/// Minority restart bursts (two disjoint pairs of 5 in a row, no persistence) with the restart guard: waiting
/// workers and plain ones never overlap. Control: [`waiters_in_minority_restarts_with_no_protection_overlap`].
#[test]
fn waiters_in_minority_restart_bursts_keep_safety_with_the_guard() {
    let r = minority_bursts(
        "wait: minority restart bursts, guard on",
        true,
        Duration::from_millis(50),
        Duration::from_millis(1200),
        (seconds(), Some(MAX_WAIT)),
    );
    assert_safe(&r.stats, &r.violations);
    assert!(r.bursts > 0 && r.exposed > 0, "no hold met a whole burst");
    assert!(
        r.struck.failed > 0 && r.struck.quarantined > 0,
        "the restarts must fail votes and the guard must refuse restarted nodes' grants: {}",
        r.struck
    );
}

/// The control: the same bursts with neither protection; a waiter's hold must be found overlapping (the
/// checker sees the waiting path's grants). Up to 4 runs.
#[test]
fn waiters_in_minority_restarts_with_no_protection_overlap() {
    for attempt in 1..=4 {
        let r = minority_bursts(
            &format!("control: wait, minority restart bursts, no delay, guard off (run {attempt})"),
            false,
            Duration::from_millis(50),
            Duration::from_millis(300),
            (Duration::from_millis(2500), Some(MAX_WAIT)),
        );
        assert!(r.struck.failed > 0, "{}", r.struck);
        if a_waiter_overlaps(&r.violations) {
            return;
        }
    }
    panic!(
        "4 runs of minority restart bursts without protection never gave a waiter an overlapping hold"
    );
}

/// 5 nodes that persist every write, each behind a fault proxy; waiting and plain workers, restart guard on,
/// for `secs`; for the control, managers that share no majority.
/// One node at a time (sometimes two): killed and restarted with its data, or without it; paused (SIGSTOP) and
/// resumed; its connections reset mid-reply, black-holed (late replies) or slowed.
fn mixed_faults(scenario: &str, share_a_majority: bool, secs: Duration) -> FaultRun {
    let mut cluster = Cluster::builder(5)
        .server(RedisServer::builder().persist_every_write())
        .start();
    let protected = RedisServer::start();
    let proxies: Vec<FaultProxy> = cluster.addrs().into_iter().map(FaultProxy::start).collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let locks = scenario_managers(&urls, &config(true), share_a_majority);
    let w = long_work(3, Duration::ZERO);
    for l in &locks {
        wait_until_usable(l, w.ttl);
    }
    let w = Work {
        wait: Some(MAX_WAIT),
        max_work: Duration::from_millis(100),
        ..long_work(3, secs)
    };
    let until = w.until;
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    let mut injected = [0u32; 6];
    let (stats, _, violations) = run(scenario, &locks, 2, &w, &protected, || {
        while Instant::now() < until {
            let victims: Vec<usize> = match rng.next_u32() % 3 {
                0 => vec![rng.next_u32() as usize % 5, rng.next_u32() as usize % 5],
                _ => vec![rng.next_u32() as usize % 5],
            };
            // Every kind in turn, so that a short run has each of them.
            let kind = injected.iter().map(|&n| n as usize).sum::<usize>() % 6;
            injected[kind] += 1;
            let hold = Duration::from_millis(u64::from(100 + rng.next_u32() % 300));
            for &v in &victims {
                match kind {
                    0 => cluster.kill(v),
                    1 => cluster.pause(v),
                    2 => proxies[v].set(Fault::ResetMidReply),
                    3 => proxies[v].set(Fault::BlackHole),
                    4 => proxies[v].set(Fault::Latency(Duration::from_millis(u64::from(
                        20 + rng.next_u32() % 60,
                    )))),
                    _ => cluster.kill(v),
                }
            }
            std::thread::sleep(hold);
            for &v in &victims {
                match kind {
                    0 => {
                        if !cluster.node_mut(v).is_running() {
                            cluster.restart(v);
                        }
                    }
                    1 => {
                        if cluster.node(v).is_paused() {
                            cluster.resume(v);
                        }
                    }
                    5 => {
                        if !cluster.node_mut(v).is_running() {
                            cluster.restart_without_files(v);
                        }
                    }
                    _ => proxies[v].set(Fault::None),
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    println!(
        "injected: kill+restart with data {}, pause {}, reset {}, black hole {}, latency {}, kill+restart without data {}",
        injected[0], injected[1], injected[2], injected[3], injected[4], injected[5]
    );
    assert!(
        injected.iter().all(|&n| n > 0),
        "a kind of fault never ran: {injected:?}"
    );
    let struck = Struck::of(locks.iter().map(|l| &**l));
    println!("  {struck}");
    FaultRun {
        stats,
        violations,
        struck,
    }
}

/// The mixed faults of [`mixed_faults`]: no overlap, the faults struck lock rounds, and waiters held locks
/// handed on to them by the hand-off's pushes (the grant by push ran under the faults). Control:
/// [`waiters_under_mixed_faults_overlap_when_the_managers_share_no_majority`].
#[test]
fn waiters_under_pauses_resets_and_restarts_with_and_without_data() {
    let r = mixed_faults("wait: pauses, resets, restarts", true, seconds());
    assert_safe(&r.stats, &r.violations);
    assert!(
        r.struck.failed > 0 && r.struck.timeouts > 0 && r.struck.drops > 0,
        "the faults did not strike lock rounds: {}",
        r.struck
    );
    assert!(
        r.struck.granted_by_push > 0,
        "no waiter held a lock by the hand-off's pushes: {}",
        r.struck
    );
}

/// The control of [`waiters_under_pauses_resets_and_restarts_with_and_without_data`]: the same faults, managers
/// that share no majority. A waiter's hold must be found overlapping (the checker sees the waiting path's
/// grants under these faults).
#[test]
fn waiters_under_mixed_faults_overlap_when_the_managers_share_no_majority() {
    let r = mixed_faults(
        "control: wait: pauses, resets, restarts, no shared majority",
        false,
        Duration::from_millis(2500),
    );
    assert!(
        r.struck.failed > 0,
        "the faults did not strike lock rounds: {}",
        r.struck
    );
    assert!(
        a_waiter_overlaps(&r.violations),
        "no waiter's hold overlapped another though the managers share no majority"
    );
}
