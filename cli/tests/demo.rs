//! `muxlock demo --short`: the README's main job runs to the end in CI, with 0 violations, a node killed,
//! restarted and paused, locks from the first second, and nothing left behind.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::{Muxlock, TempDir, processes_under};

/// Waits (bounded) until no process runs under `dir`; those left.
fn left_under(dir: &Path, limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let left = processes_under(dir);
        for &pid in &left {
            support::reap(pid);
        }
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_short_demo_runs_to_the_end_with_no_violation_and_cleans_up() {
    support::become_subreaper();
    let state = TempDir::new();
    let run = Muxlock::new(state.path(), ["demo", "--short"]).run();
    // Whatever happened, no node may outlive the test.
    let left = left_under(state.path(), Duration::from_secs(15));
    if !left.is_empty() {
        let _ = Muxlock::new(state.path(), ["cluster", "down"]).run();
    }
    run.expect(0);
    assert!(
        left.is_empty(),
        "processes left under the state dir: {left:?}"
    );
    assert!(
        !state.path().join("cluster.json").exists(),
        "the record was left"
    );
    let out = &run.stdout;
    for seen in [
        "started a local cluster of 5 redis-server nodes",
        "first lock granted",
        "killed with SIGKILL",
        "restarted",
        "paused with SIGSTOP",
        "resumed with SIGCONT",
        "violations     0 ",
        "restart guard: 1 restart(s) seen; 5 of 5 nodes trusted at once",
        "stopped the cluster this demo started",
    ] {
        assert!(out.contains(seen), "{seen:?} not in the output: {run:#?}");
    }
    // Not a terminal: plain lines, no cursor movement.
    assert!(!out.contains('\x1b'), "{run:#?}");
    // Locks within seconds of the start: the first one within 2 s of the nodes being ready.
    let first = out
        .lines()
        .find(|l| l.contains("first lock granted"))
        .unwrap();
    let at: f64 = first
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches('s')
        .parse()
        .unwrap();
    assert!(at < 3.0, "{first}");
    // Some locks, by this process and the other one (the counters add up to the sections completed).
    let acquisitions: u64 = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("acquisitions"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(acquisitions >= 20, "{run:#?}");
    assert!(run.took < Duration::from_secs(30), "{:?}", run.took);
}
