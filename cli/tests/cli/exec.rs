//! `muxlock exec` against real nodes: the command's exit code, the conflict code, the lock lost while the command
//! runs (its process group terminated before the lease ends), signals forwarded, and two `exec`s on one resource
//! taking turns.

use crate::support;

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use support::heartbeat::{Strays, beat, heartbeats, ms_after, pttl, wall_ns};
use support::{Cluster, Muxlock, Running, TempDir, cmd, get, on};

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
    // No command, or a lease without its unit: a usage error.
    on(&cluster, state.path(), &["exec", "job"])
        .run()
        .expect(64);
    on(
        &cluster,
        state.path(),
        &["exec", "--ttl", "5", "job", "true"],
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
    run.expect(1).error_with_nodes(3);
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

// ---- The command never outlives the lease ----

/// `muxlock exec --ttl TTL job` of a command that writes heartbeats (and ignores SIGTERM with `ignore_term`), set
/// up further by `tweak`, started, and beating: the running muxlock, the heartbeat file, and the guard that kills
/// whatever the command left when the test ends.
fn beating_exec(
    cluster: &Cluster,
    dir: &Path,
    ttl: &str,
    ignore_term: bool,
    tweak: impl FnOnce(Muxlock) -> Muxlock,
) -> (Running, PathBuf, Strays) {
    let (hb, pid) = (dir.join("hb"), dir.join("pid"));
    let strays = Strays(vec![pid.clone()]);
    let trap = if ignore_term { "trap '' TERM; " } else { "" };
    let script = format!("{trap}echo $$ > {}; {}", pid.display(), beat(&hb, 50, 500));
    let run = tweak(on(
        cluster,
        dir,
        &["exec", "--ttl", ttl, "job", "--", "sh", "-c", &script],
    ))
    .spawn();
    wait_beating(&hb);
    (run, hb, strays)
}

/// Waits (bounded) until the command wrote at least one heartbeat.
#[track_caller]
fn wait_beating(hb: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while heartbeats(hb).is_empty() {
        assert!(Instant::now() < deadline, "no heartbeat within 10 s");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_before_another_client_gets_the_lock() {
    // SIGKILL must come before the lease ends, not --kill-after (5 s by default) after SIGTERM whatever the lease
    // has left: that would put the last heartbeat seconds after the other client's grant.
    let mut cluster = Cluster::start(3);
    let state = TempDir::new();
    let (run, hb, _strays) = beating_exec(&cluster, state.path(), "3s", true, |m| m);
    // A majority hangs until just after its keys expire: no renewal reaches it.
    let mut expiries = Vec::new();
    for i in [0, 1] {
        let before = wall_ns();
        let ms = pttl(cluster.node(i), "job");
        cluster.pause(i);
        expiries.push(before + u128::from(ms) * 1_000_000);
    }
    let last_expiry = expiries.iter().copied().max().unwrap();
    while wall_ns() < last_expiry + 100_000_000 {
        thread::sleep(Duration::from_millis(10));
    }
    cluster.resume(0);
    cluster.resume(1);
    let asked = wall_ns();
    on(
        &cluster,
        state.path(),
        &["acquire", "job", "--ttl", "10s", "-w", "15s"],
    )
    .run()
    .expect(0);
    let run = run.finish();
    run.expect(75);
    thread::sleep(Duration::from_millis(300));
    let last = *heartbeats(&hb).last().unwrap();
    assert!(
        last < asked,
        "the command beat {} ms after the other client asked for the lock: {run:#?}",
        ms_after(last, asked)
    );
}

#[test]
fn the_rest_of_the_group_dies_when_the_leader_exits_after_a_loss() {
    // The leader's exit must not end muxlock's watch of the group before SIGKILL: a TERM-ignoring member of the
    // group would run on with no lock.
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let dir = state.path();
    let (hb, member) = (dir.join("hb"), dir.join("member.pid"));
    let _strays = Strays(vec![member.clone(), dir.join("leader.pid")]);
    let member_script = format!(
        "trap '' TERM; echo $$ > {}; {}",
        member.display(),
        beat(&hb, 50, 500)
    );
    let script = format!(
        "trap 'exit 9' TERM; echo $$ > {dir}/leader.pid; sh -c \"$1\" & while [ ! -s {hb} ]; do sleep 0.01; done; \
         touch {dir}/ready; wait",
        dir = dir.display(),
        hb = hb.display()
    );
    let run = on(
        &cluster,
        dir,
        &[
            "exec",
            "--ttl",
            "3s",
            "job",
            "--",
            "sh",
            "-c",
            &script,
            "sh",
            &member_script,
        ],
    )
    .spawn();
    wait_for_file(&dir.join("ready"), Duration::from_secs(10));
    for node in &cluster.nodes()[..2] {
        assert_eq!(node.raw(&cmd(&["DEL", "job"])), b":1\r\n");
    }
    let run = run.finish();
    let exited = wall_ns();
    run.expect(75);
    thread::sleep(Duration::from_millis(600));
    let last = *heartbeats(&hb).last().unwrap();
    assert!(
        last < exited,
        "a member of the command's group beat {} ms after muxlock exited: {run:#?}",
        ms_after(last, exited)
    );
}

/// The earliest moment (ns since the epoch) at which a node lets `key` expire.
#[track_caller]
fn earliest_expiry(cluster: &Cluster, key: &str) -> u128 {
    cluster
        .nodes()
        .iter()
        .map(|n| {
            let before = wall_ns();
            before + u128::from(pttl(n, key)) * 1_000_000
        })
        .min()
        .unwrap()
}

#[test]
fn the_command_dies_with_a_killed_muxlock() {
    // The command's life is tied to muxlock's (its reaper sees muxlock go): it must not run on after the lease.
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let (run, hb, _strays) = beating_exec(&cluster, state.path(), "3s", false, |m| m);
    run.signal("KILL");
    let killed = wall_ns();
    let lease_end = earliest_expiry(&cluster, "job");
    let _ = run.finish();
    while wall_ns() < lease_end + 300_000_000 {
        thread::sleep(Duration::from_millis(20));
    }
    let last = *heartbeats(&hb).last().unwrap();
    assert!(
        last < lease_end,
        "the command beat {} ms after the lease ended (muxlock was killed {} ms before the lease end)",
        ms_after(last, lease_end),
        ms_after(lease_end, killed)
    );
    // In fact at once: the reaper saw muxlock go.
    assert!(
        last < killed + 1_000_000_000,
        "the command beat {} ms after muxlock was killed",
        ms_after(last, killed)
    );
}

#[test]
fn the_command_dies_at_the_lease_end_when_muxlock_is_stopped() {
    // SIGSTOP cannot be caught: a stopped muxlock cannot renew, and its reaper kills the command at the lease end
    // (else the command would run on).
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let (run, hb, _strays) = beating_exec(&cluster, state.path(), "3s", false, |m| m);
    run.signal("STOP");
    // A renewal already on the wire may still land: read the expiries a moment later.
    thread::sleep(Duration::from_millis(100));
    let lease_end = earliest_expiry(&cluster, "job");
    while wall_ns() < lease_end + 300_000_000 {
        thread::sleep(Duration::from_millis(20));
    }
    let last = *heartbeats(&hb).last().unwrap();
    run.signal("CONT");
    let run = run.finish();
    assert!(
        last < lease_end,
        "the command beat {} ms after the lease ended while muxlock was stopped: {run:#?}",
        ms_after(last, lease_end)
    );
    // Woken, muxlock finds the lock lost.
    run.expect(75);
}

#[test]
fn ctrl_z_does_not_stop_a_holder() {
    // SIGTSTP is caught: a stopped muxlock would send no renewals, and the lock would expire and go to another
    // client while the command ran.
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let (run, hb, _strays) = beating_exec(
        &cluster,
        state.path(),
        "3s",
        false,
        Muxlock::own_process_group,
    );
    run.signal("TSTP");
    thread::sleep(Duration::from_millis(300));
    let muxlock_state = support::process::process_state(run.pid());
    // Well past the lease: the lock must still be held, by renewals.
    thread::sleep(Duration::from_secs(4));
    let other = on(
        &cluster,
        state.path(),
        &["acquire", "-n", "job", "--ttl", "5s"],
    )
    .run();
    let beating = heartbeats(&hb).last().copied().unwrap() > wall_ns() - 500_000_000;
    run.signal("CONT");
    run.signal("TERM");
    let run = run.finish();
    assert_ne!(muxlock_state, Some('T'), "muxlock stopped: {run:#?}");
    assert!(
        !(other.code() == 0 && beating),
        "another client got the lock while the command ran: {other:#?} {run:#?}"
    );
    other.expect(1);
    run.expect(143);
    assert!(run.stderr.contains("SIGTSTP"), "{run:#?}");
    assert_released(&cluster, "job");
}

#[test]
fn an_interrupt_while_waiting_gives_up_and_leaves_no_key() {
    // The signal handlers are in place before the acquisition: SIGINT while waiting gives up cleanly instead of
    // killing muxlock.
    let mut cluster = Cluster::start(3);
    let state = TempDir::new();
    let ran = state.path().join("ran");
    let touch = format!("touch {}", ran.display());
    let holder = on(&cluster, state.path(), &["acquire", "job", "--ttl", "30s"]).run();
    holder.expect(0);
    let value = holder.stdout.trim().to_owned();
    for (delay, signal) in [(300, "INT"), (700, "TERM"), (1200, "INT")] {
        let run = on(
            &cluster,
            state.path(),
            &["exec", "-w", "20s", "job", "--", "sh", "-c", &touch],
        )
        .spawn();
        thread::sleep(Duration::from_millis(delay));
        run.signal(signal);
        let run = run.finish();
        let code = if signal == "INT" { 130 } else { 143 };
        run.expect(code);
        assert!(run.took < Duration::from_millis(delay + 3000), "{run:#?}");
        assert!(run.stderr.contains("interrupted"), "{run:#?}");
    }
    assert!(!ran.exists(), "the command ran without the lock");
    on(&cluster, state.path(), &["release", "job", &value])
        .run()
        .expect(0);
    assert_released(&cluster, "job");

    // Interrupted with a round under way (a paused node makes each round last the round timeout): whatever the
    // round took is released. The paused node is left out of the check (its queued commands run on resume).
    cluster.pause(2);
    let run = on(
        &cluster,
        state.path(),
        &["exec", "-w", "20s", "job", "--", "sh", "-c", &touch],
    )
    .spawn();
    thread::sleep(Duration::from_millis(250));
    run.signal("INT");
    let run = run.finish();
    cluster.resume(2);
    assert!([130, 0].contains(&run.code()), "{run:#?}");
    for node in &cluster.nodes()[..2] {
        let deadline = Instant::now() + Duration::from_secs(2);
        while get(node, "job") != "$-1\r\n" {
            assert!(
                Instant::now() < deadline,
                "a key was left after the interrupt: {run:#?}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn an_outage_is_said_at_once_and_ends_in_69_within_seconds() {
    // With every node refusing connections, `exec` says so at once instead of waiting all of --wait (30 s) in
    // silence.
    let mut cluster = Cluster::start(3);
    let state = TempDir::new();
    let urls = cluster.urls();
    for i in 0..3 {
        cluster.kill(i);
    }
    for args in [
        &["exec", "job", "--", "true"][..],
        &["acquire", "job", "--ttl", "5s"][..],
    ] {
        let run = on(&cluster, state.path(), args).run();
        run.expect(69);
        assert!(run.took < Duration::from_secs(10), "{run:#?}");
        // The first line says the outage and the wait, a line under it per node names it and why; then the
        // final error.
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert!(lines.len() >= 5, "{run:#?}");
        assert!(lines[0].contains("outage-wait"), "{run:#?}");
        for (url, line) in urls.iter().zip(&lines[1..4]) {
            assert!(
                line.starts_with(&format!("muxlock:   {url}: ")),
                "{url} not named: {run:#?}"
            );
        }
        assert!(lines[1].contains("refused"), "{run:#?}");
        assert!(
            lines
                .last()
                .is_some_and(|l| l.starts_with("muxlock: no quorum")),
            "{run:#?}"
        );
    }
    // -n: one attempt: the headline and a line per node.
    on(&cluster, state.path(), &["exec", "-n", "job", "--", "true"])
        .run()
        .expect(69)
        .error_with_nodes(3);
}

#[test]
fn a_fenced_exec_hands_the_command_a_growing_token() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let out = state.path().join("tokens");
    let script = format!("echo \"$MUXLOCK_FENCE_TOKEN\" >> {}", out.display());
    for _ in 0..3 {
        on(
            &cluster,
            state.path(),
            &["exec", "--fenced", "job", "--", "sh", "-c", &script],
        )
        .run()
        .expect(0);
    }
    let tokens: Vec<u64> = fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(tokens.len(), 3);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_released(&cluster, "job");
    // Without --fenced, no token.
    let run = on(
        &cluster,
        state.path(),
        &[
            "exec",
            "job",
            "--",
            "sh",
            "-c",
            "echo \"[$MUXLOCK_FENCE_TOKEN]\"",
        ],
    )
    .run();
    run.expect(0);
    assert_eq!(run.stdout, "[]\n");
    // A fenced exec waits for a holder as a plain one does.
    let holder = on(&cluster, state.path(), &["acquire", "job", "--ttl", "1s"]).run();
    holder.expect(0);
    let run = on(
        &cluster,
        state.path(),
        &[
            "exec", "--fenced", "-w", "10s", "job", "--", "sh", "-c", &script,
        ],
    )
    .run();
    run.expect(0);
    assert!(run.took >= Duration::from_millis(500), "{run:#?}");
}

/// A key gone or overwritten on a majority is certain loss (another client may hold the lock already: keys evicted
/// under `maxmemory`, deleted by hand): a command that ignores SIGTERM is killed 100 ms later at the most, not
/// `--kill-after` (5 s by default) or the lease's end. Before, it ran on for up to the lease's end.
#[test]
fn a_command_whose_key_was_taken_is_killed_at_once_whatever_kill_after_says() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let (run, hb, _strays) = beating_exec(&cluster, state.path(), "6s", true, |m| m);
    // Another value on a majority, as another holder would have after the keys were evicted.
    let taken = wall_ns();
    for node in &cluster.nodes()[..2] {
        assert_eq!(
            node.raw(&cmd(&["SET", "job", "someone-else", "PX", "60000"])),
            b"+OK\r\n"
        );
    }
    let run = run.finish();
    run.expect(75).no_panic();
    thread::sleep(Duration::from_millis(200));
    let last = *heartbeats(&hb).last().unwrap();
    // Seen at once by tracking, or at the next renewal (a third of the TTL, 2 s): then 100 ms of grace.
    assert!(
        ms_after(last, taken) < 2_600,
        "the command beat {} ms after its key was taken: {run:#?}",
        ms_after(last, taken)
    );
}
