//! `muxlock demo --short`: the README's main job runs to the end in CI, with 0 violations, a node killed,
//! restarted and paused, locks from the first second, and nothing left behind; and a second Ctrl-C cuts a slow
//! shutdown short (exit 130) with every node it started stopped.

use crate::support;

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
    let svg = state.path().join("demo.svg");
    let svg_arg = svg.to_str().unwrap().to_owned();
    let run = Muxlock::new(state.path(), ["demo", "--short", "--svg", &svg_arg]).run();
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
    // The verdict is the last line, with the counts.
    let verdict = out.lines().last().unwrap_or("");
    assert!(
        verdict.starts_with("PASS  ") && verdict.contains(" 0 violations"),
        "{verdict}"
    );
    assert!(
        verdict.contains(&format!("{acquisitions} locks in 8s")),
        "{verdict}"
    );
    // The picture: locks per second, a point per second, the four faults marked.
    assert!(out.contains(&format!("picture: {svg_arg}")), "{run:#?}");
    let picture = std::fs::read_to_string(&svg).expect("the picture was written");
    assert!(picture.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(picture.trim_end().ends_with("</svg>"));
    assert_eq!(picture.matches("class=\"mark\"").count(), 4, "{picture}");
    for label in [
        "node 2 killed",
        "node 2 restarted",
        "node 4 paused",
        "node 4 resumed",
    ] {
        assert!(picture.contains(label), "{label} not marked");
    }
    let points = picture
        .split("points=\"")
        .nth(1)
        .and_then(|p| p.split('"').next())
        .unwrap_or("");
    assert!(points.split(' ').count() >= 6, "{points}");
}

/// The worker processes of demo `pid` (its children started with `--worker`).
fn worker_processes(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let parent = std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                });
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            parent == Some(pid) && cmdline.split(|&b| b == 0).any(|arg| arg == b"--worker")
        })
        .collect()
}

fn signal_group(group: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(group as i32).unwrap();
    rustix::process::kill_process_group(pid, signal).unwrap();
}

fn is_running(pid: u32) -> bool {
    support::reap(pid);
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')?
                .1
                .split_whitespace()
                .next()
                .map(str::to_owned)
        })
        .is_some_and(|state| state != "Z" && state != "X")
}

/// A second Ctrl-C cuts short a slow shutdown. The first one's shutdown is made slow the way a real one is: a
/// worker process that does not stop (here stopped with SIGSTOP, as a hung worker would be), which the demo waits
/// up to 15 s for. The interrupts go to the demo's whole process group, as a terminal's Ctrl-C does; the stopped
/// worker does not see them (a stopped process' signals wait for SIGCONT).
#[test]
fn a_second_ctrl_c_forces_the_exit_and_still_stops_the_nodes() {
    use rustix::process::Signal;
    support::become_subreaper();
    let state = TempDir::new();
    let demo = Muxlock::new(
        state.path(),
        [
            "demo",
            "--duration",
            "50s",
            "--threads",
            "2",
            "--processes",
            "1",
        ],
    )
    .own_process_group()
    .spawn();
    let pid = demo.pid();

    // Wait for the worker process (it is started once the cluster runs and the first lock was granted).
    let deadline = Instant::now() + Duration::from_secs(20);
    let worker = loop {
        if let Some(&w) = worker_processes(pid).first() {
            break w;
        }
        assert!(Instant::now() < deadline, "no worker process appeared");
        std::thread::sleep(Duration::from_millis(50));
    };
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state.path().join("cluster.json")).unwrap())
            .unwrap();
    let nodes: Vec<u32> = record["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["pid"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(nodes.len(), 5, "{record}");
    std::thread::sleep(Duration::from_millis(500));

    rustix::process::kill_process(
        rustix::process::Pid::from_raw(worker as i32).unwrap(),
        Signal::STOP,
    )
    .unwrap();
    signal_group(pid, Signal::INT);
    // The control: the first Ctrl-C alone does not end the demo for now (it waits for the stuck worker).
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        is_running(pid),
        "the demo ended after one Ctrl-C: nothing to force"
    );
    assert!(nodes.iter().all(|&n| is_running(n)));

    let second = Instant::now();
    signal_group(pid, Signal::INT);
    let run = demo.finish();
    let took = second.elapsed();
    let left = left_under(state.path(), Duration::from_secs(5));
    if !left.is_empty() {
        let _ = Muxlock::new(state.path(), ["cluster", "down"]).run();
    }
    run.expect(130);
    assert!(
        took < Duration::from_secs(5),
        "{took:?} after the second Ctrl-C: {run:#?}"
    );
    assert!(run.stderr.contains("interrupted again"), "{run:#?}");
    assert!(run.stderr.contains("interrupted twice"), "{run:#?}");
    assert!(!run.stdout.contains("\nsummary"), "{run:#?}");
    assert!(
        run.stdout.contains("stopped the cluster this demo started"),
        "{run:#?}"
    );
    // Everything it started is gone: the five nodes, by PID, and the stuck worker.
    assert!(
        left.is_empty(),
        "processes left under the state dir: {left:?}"
    );
    support::wait_gone(&nodes, Duration::from_secs(2));
    support::wait_gone(&[worker], Duration::from_secs(2));
    assert!(
        !state.path().join("cluster.json").exists(),
        "the record was left"
    );
}
