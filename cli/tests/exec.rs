//! `muxlock exec` against real nodes: the command's exit code, the conflict code, the lock lost while the command
//! runs (its process group terminated before the lease ends), signals forwarded, and two `exec`s on one resource
//! taking turns.

mod support;

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use support::{Cluster, TempDir, cmd, get, on};

/// Polls (every 10 ms, at most `limit`) until `path` exists; the instant it was seen.
#[track_caller]
fn wait_for_file(path: &Path, limit: Duration) -> Instant {
    let deadline = Instant::now() + limit;
    loop {
        if path.exists() {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "{} did not appear within {limit:?}",
            path.display()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Polls (every 10 ms, at most `limit`) until `path` exists; whether it does.
fn wait_until(path: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
    true
}

/// The key is gone from every node.
#[track_caller]
fn assert_released(cluster: &Cluster, key: &str) {
    // The release is confirmed by a majority before muxlock exits; the last node may still be applying it.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let held: Vec<String> = cluster
            .nodes()
            .iter()
            .map(|n| get(n, key))
            .filter(|r| r != "$-1\r\n")
            .collect();
        if held.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key} still held after exec: {held:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_command_runs_under_the_lock_and_its_exit_code_passes_through() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let out = state.path().join("seen");
    let script = format!(
        "printf '%s %s %s' \"$MUXLOCK_RESOURCE\" \"$MUXLOCK_VALUE\" \"$MUXLOCK_DEADLINE_MS\" > {}; exit 7",
        out.display()
    );
    let run = on(
        &cluster,
        state.path(),
        &["exec", "--ttl", "5s", "job", "--", "sh", "-c", &script],
    )
    .run();
    run.expect(7);
    let seen = fs::read_to_string(&out).unwrap();
    let fields: Vec<&str> = seen.split(' ').collect();
    assert_eq!(fields[0], "job");
    assert_eq!(fields[1].len(), 40, "{seen}");
    let deadline: u64 = fields[2].parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        deadline > now.saturating_sub(10_000) && deadline < now + 5_000,
        "{deadline} vs {now}"
    );
    assert_released(&cluster, "job");

    // Arguments go to the program as they are: no shell splits or expands them.
    let run = on(
        &cluster,
        state.path(),
        &["exec", "job", "--", "printf", "%s|", "a b", "$HOME", "*"],
    )
    .run();
    run.expect(0);
    assert_eq!(run.stdout, "a b|$HOME|*|");

    // A command killed by a signal: 128 + the signal.
    on(
        &cluster,
        state.path(),
        &["exec", "job", "--", "sh", "-c", "kill -KILL $$"],
    )
    .run()
    .expect(137);
    // Not found, not runnable: 127, 126, as env(1); the lock is released.
    on(
        &cluster,
        state.path(),
        &["exec", "job", "--", "/no/such/program"],
    )
    .run()
    .expect(127)
    .one_line_error();
    let dir = state.path().to_str().unwrap();
    on(&cluster, state.path(), &["exec", "job", "--", dir])
        .run()
        .expect(126)
        .one_line_error();
    assert_released(&cluster, "job");
    // No command: a usage error.
    on(&cluster, state.path(), &["exec", "job"])
        .run()
        .expect(64);
    on(
        &cluster,
        state.path(),
        &["exec", "job", "--kill-after", "5", "--", "true"],
    )
    .run()
    .expect(64);
}

#[test]
fn nonblock_on_a_held_lock_exits_with_the_conflict_code_at_once() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let holder = on(&cluster, state.path(), &["acquire", "job", "--ttl", "30s"]).run();
    holder.expect(0);
    let ran = state.path().join("ran");
    let touch = format!("touch {}", ran.display());
    let run = on(
        &cluster,
        state.path(),
        &["exec", "-n", "job", "--", "sh", "-c", &touch],
    )
    .run();
    run.expect(1).one_line_error();
    assert!(run.took < Duration::from_secs(3), "{run:#?}");
    on(
        &cluster,
        state.path(),
        &["exec", "-n", "-E", "42", "job", "--", "sh", "-c", &touch],
    )
    .run()
    .expect(42);
    // --wait runs out while it is held: the conflict code too, after about the wait.
    let run = on(
        &cluster,
        state.path(),
        &["exec", "-w", "700ms", "job", "--", "sh", "-c", &touch],
    )
    .run();
    run.expect(1);
    assert!(run.took >= Duration::from_millis(650), "{run:#?}");
    assert!(!ran.exists(), "the command ran without the lock");
}

#[test]
fn two_execs_on_one_resource_take_turns() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let log = state.path().join("log");
    let script = format!(
        "echo \"start $1\" >> {log}; sleep 0.8; echo \"end $1\" >> {log}",
        log = log.display()
    );
    let first = on(
        &cluster,
        state.path(),
        &[
            "exec", "--ttl", "5s", "job", "--", "sh", "-c", &script, "sh", "A",
        ],
    )
    .spawn();
    if !wait_until(&log, Duration::from_secs(10)) {
        panic!("the first exec did not start: {:#?}", first.finish());
    }
    let started = Instant::now();
    let second = on(
        &cluster,
        state.path(),
        &[
            "exec", "--ttl", "5s", "-w", "20s", "job", "--", "sh", "-c", &script, "sh", "B",
        ],
    )
    .run();
    second.expect(0);
    first.finish().expect(0);
    let lines = fs::read_to_string(&log).unwrap();
    assert_eq!(
        lines, "start A\nend A\nstart B\nend B\n",
        "the commands overlapped"
    );
    // The second waited for the first's release (woken by it), not for the first's lease to run out.
    assert!(started.elapsed() < Duration::from_secs(5), "{second:#?}");
}

#[test]
fn a_lock_lost_to_a_majority_deleting_it_terminates_the_command() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let ready = state.path().join("ready");
    let script = format!(
        "trap 'echo term > {dir}/term; exit 9' TERM; touch {ready}; sleep 30 & wait",
        dir = state.path().display(),
        ready = ready.display()
    );
    let run = on(
        &cluster,
        state.path(),
        &["exec", "--ttl", "3s", "job", "--", "sh", "-c", &script],
    )
    .spawn();
    wait_for_file(&ready, Duration::from_secs(10));
    let deleted = Instant::now();
    for node in &cluster.nodes()[..2] {
        assert_eq!(node.raw(&cmd(&["DEL", "job"])), b":1\r\n");
    }
    let run = run.finish();
    run.expect(75).no_panic();
    assert!(
        state.path().join("term").exists(),
        "the command got no SIGTERM: {run:#?}"
    );
    // Found at the next renewal (every third of the TTL), not at the lease's end.
    assert!(
        deleted.elapsed() < Duration::from_millis(2500),
        "{:?}: {run:#?}",
        deleted.elapsed()
    );
    assert!(run.stderr.contains("lost"), "{run:#?}");
}

#[test]
fn a_lock_lost_to_unresponsive_nodes_terminates_the_command_before_the_lease_ends() {
    let mut cluster = Cluster::start(3);
    let state = TempDir::new();
    let ready = state.path().join("ready");
    let term = state.path().join("term");
    // The command ignores SIGTERM: SIGKILL follows --kill-after later.
    let script = format!(
        "trap 'touch {term}' TERM; touch {ready}; while :; do sleep 0.05; done",
        term = term.display(),
        ready = ready.display()
    );
    let run = on(
        &cluster,
        state.path(),
        &[
            "exec",
            "--ttl",
            "3s",
            "--kill-after",
            "300ms",
            "job",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn();
    wait_for_file(&ready, Duration::from_secs(10));
    // A majority hangs: renewals go unanswered, and the guard's deadline passes. Just before each pause, the
    // node's PTTL says when its key expires at the earliest (read after `before`): no renewal reaches it after.
    let mut expiries = Vec::new();
    for i in [0, 1] {
        let before = Instant::now();
        let pttl =
            String::from_utf8_lossy(&cluster.node(i).raw(&cmd(&["PTTL", "job"]))).into_owned();
        let ms: u64 = pttl
            .trim()
            .trim_start_matches(':')
            .parse()
            .unwrap_or_else(|_| panic!("PTTL: {pttl:?}"));
        cluster.pause(i);
        expiries.push(before + Duration::from_millis(ms));
    }
    let paused = Instant::now();
    let termed = wait_for_file(&term, Duration::from_secs(10));
    let run = run.finish();
    cluster.resume(0);
    cluster.resume(1);
    run.expect(75).no_panic();
    // From the first paused node's expiry on, a majority holding the key includes the other paused node: nothing
    // the holder can count on. SIGTERM must come before it (stricter than the later expiry, after which another
    // holder could take the lock).
    let lease_end = expiries.iter().min().copied().unwrap();
    assert!(
        termed < lease_end,
        "SIGTERM seen {:?} after the pause, the key expired on a paused node {:?} after it: {run:#?}",
        termed.duration_since(paused),
        lease_end.saturating_duration_since(paused)
    );
    assert!(run.stderr.contains("SIGKILL"), "{run:#?}");
}

#[test]
fn signals_to_muxlock_reach_the_command_and_the_lock_is_released() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let ready = state.path().join("ready");
    let script = format!(
        "trap 'echo got-term > {dir}/got; exit 3' TERM; touch {ready}; sleep 30 & wait",
        dir = state.path().display(),
        ready = ready.display()
    );
    let run = on(
        &cluster,
        state.path(),
        &["exec", "job", "--", "sh", "-c", &script],
    )
    .spawn();
    wait_for_file(&ready, Duration::from_secs(10));
    run.signal("TERM");
    let run = run.finish();
    // The command's own answer to the signal is the exit code.
    run.expect(3);
    assert_eq!(
        fs::read_to_string(state.path().join("got")).unwrap(),
        "got-term\n"
    );
    assert_released(&cluster, "job");

    // Ctrl-C: SIGINT forwarded; a command that dies of it gives 128 + 2.
    fs::remove_file(&ready).unwrap();
    let script = format!("touch {}; exec sleep 30", ready.display());
    let run = on(
        &cluster,
        state.path(),
        &["exec", "job", "--", "sh", "-c", &script],
    )
    .spawn();
    wait_for_file(&ready, Duration::from_secs(10));
    run.signal("INT");
    let run = run.finish();
    run.expect(130);
    assert!(run.took < Duration::from_secs(10));
    assert_released(&cluster, "job");
}
