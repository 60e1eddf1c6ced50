//! What the commands say a round did, against real redis-server nodes: an extension applied on young nodes but
//! not counted (exit 3, each node's line, what stands after it); an absent key told from another holder's; the
//! warning and `--json` list of a degraded quorum; young nodes said once, with the time left and what to do;
//! refused logins named when they decided; `--restart-window`.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::{Cluster, Muxlock, RedisServer, Run, TempDir, cmd, get, on};

/// `muxlock ARGS` on `cluster` with the restart guard on (`on` turns it off: these nodes are seconds old).
fn guarded(cluster: &Cluster, state: &Path, args: &[&str]) -> Muxlock {
    on(cluster, state, args).env("MUXLOCK_RESTART_GUARD", "on")
}

/// The key's time to live on `node`, in milliseconds (negative: absent, or no expiry).
fn pttl(node: &RedisServer, key: &str) -> i64 {
    let reply = String::from_utf8_lossy(&node.raw(&cmd(&["PTTL", key]))).into_owned();
    reply
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("PTTL answered {reply:?}"))
}

/// The `state` of each node line of a `--json` error.
#[track_caller]
fn states(run: &Run) -> Vec<String> {
    run.json()["error"]["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("no node lines: {run:#?}"))
        .iter()
        .map(|n| n["state"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn an_extension_applied_on_young_nodes_but_not_counted_exits_3_and_says_what_stands() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    // Taken without the guard; extended with it to a lease these seconds-old nodes have not been up for: every
    // node applies it, the guard counts none of them.
    let value = on(&cluster, state.path(), &["acquire", "job", "--ttl", "30s"]).run();
    let value = value.expect(0).stdout.trim().to_owned();
    let run = guarded(
        &cluster,
        state.path(),
        &["extend", "job", &value, "--ttl", "10m", "--json"],
    )
    .run();
    run.expect(3).error_with_nodes(3);
    let doc = run.json();
    let error = &doc["error"];
    assert_eq!(
        (error["kind"].as_str(), error["cause"].as_str()),
        (Some("unconfirmed"), Some("young")),
        "{run:#?}"
    );
    assert!(
        error["applied"].as_u64().is_some_and(|n| n >= 2),
        "{run:#?}"
    );
    let not_counted = states(&run).iter().filter(|s| *s == "not_counted").count();
    assert!(not_counted >= 2, "{run:#?}");
    // What stands after it is said, and true: the new lease, on every node.
    assert_eq!(error["after"]["holding"], 3, "{run:#?}");
    assert!(
        error["after"]["ttl_ms"]
            .as_u64()
            .is_some_and(|ms| ms > 9 * 60_000),
        "{run:#?}"
    );
    for node in cluster.nodes() {
        assert!(pttl(node, "job") > 9 * 60_000, "{run:#?}");
    }
    let headline = run.stderr.lines().next().unwrap_or_default();
    for says in [
        "not confirmed",
        "applied on",
        "not counted",
        "young nodes",
        "stands on 3 of 3 nodes",
        "release it, or extend it again",
    ] {
        assert!(headline.contains(says), "{says:?} not in {headline:?}");
    }
    // Released, nothing of it stays.
    on(&cluster, state.path(), &["release", "job", &value])
        .run()
        .expect(0);
    for node in cluster.nodes() {
        assert_eq!(get(node, "job"), "$-1\r\n");
    }
    // The code is in the help's list and the README's table.
    let help = Muxlock::new(state.path(), ["--help"]).run();
    assert!(
        help.expect(0).stdout.contains("\n  3        extend:"),
        "{help:#?}"
    );
    assert!(include_str!("../../README.md").contains("\n| 3 | `extend`:"));
}

#[test]
fn release_and_extend_tell_an_absent_key_from_another_holders() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let mine = "0123456789abcdef0123456789abcdef01234567";
    // Node 0 holds another holder's key; nodes 1 and 2 hold none (this lock's lease ran out there).
    cluster
        .node(0)
        .raw(&cmd(&["SET", "job", "someone-else", "PX", "60000"]));
    for args in [
        &["release", "job", mine, "--json"][..],
        &["extend", "job", mine, "--ttl", "30s", "--json"],
    ] {
        let run = on(&cluster, state.path(), args).run();
        run.expect(75).error_with_nodes(3);
        assert_eq!(run.json()["error"]["cause"], "lost", "{run:#?}");
        // Each node that answered is named for what it holds; none but node 0 as another holder's.
        let states = states(&run);
        let answered = states.iter().filter(|s| *s != "not_awaited").count();
        assert!(answered >= 2, "{run:#?}");
        for (i, state) in states.iter().enumerate() {
            let want = if i == 0 { "held" } else { "absent" };
            assert!(
                state == want || state == "not_awaited",
                "node {i}: {state}: {run:#?}"
            );
        }
        let lines: Vec<&str> = run.stderr.lines().collect();
        for (i, line) in lines[1..].iter().enumerate() {
            match states[i].as_str() {
                "held" => assert!(line.contains("another value"), "{line}"),
                "absent" => assert!(
                    line.contains("absent") && !line.contains("another"),
                    "{line}"
                ),
                _ => {}
            }
        }
        assert!(lines[0].contains("absent on"), "{run:#?}");
    }
    // Another holder's key is never touched.
    assert_eq!(get(cluster.node(0), "job"), "$12\r\nsomeone-else\r\n");
    assert!(pttl(cluster.node(0), "job") > 30_000);
}

#[test]
fn a_verb_that_succeeds_with_nodes_failing_warns_in_one_line_and_lists_them_in_json() {
    let mut cluster = Cluster::start(4);
    let state = TempDir::new();
    cluster.kill(3);
    let down = cluster.node(3).url();
    // Five nodes: three up, one down, one whose name does not resolve (`.invalid` never does, RFC 6761).
    let unresolvable = "redis://nohost.invalid:6379";
    let nodes = [cluster.urls(), vec![unresolvable.to_owned()]]
        .concat()
        .join(",");
    let run = |args: &[&str]| {
        Muxlock::new(state.path(), args)
            .env("MUXLOCK_NODES", &nodes)
            .env("MUXLOCK_RESTART_GUARD", "off")
            .env("MUXLOCK_ROUND_TIMEOUT", "500ms")
            .run()
    };
    let check = |run: &Run, what: &str| {
        run.expect(0);
        let lines: Vec<&str> = run.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one warning line: {run:#?}");
        for says in [
            "muxlock: warning: degraded: 2 of 5 nodes failing",
            &format!("{down}: connection refused"),
            &format!("{unresolvable}: cannot resolve host"),
            what,
            "one more failing node and no majority is left",
        ] {
            assert!(lines[0].contains(says), "{says:?}: {run:#?}");
        }
        let doc = run.json();
        let degraded = doc["degraded"].as_array().expect("a degraded list");
        let named: Vec<&str> = degraded
            .iter()
            .map(|d| d["node"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(named, [down.as_str(), unresolvable], "{run:#?}");
        assert!(
            degraded[0]["why"]
                .as_str()
                .is_some_and(|w| w.contains("refused")),
            "{run:#?}"
        );
    };
    let acquired = run(&["acquire", "job", "--ttl", "30s", "--json"]);
    check(&acquired, "acquired by the others");
    let value = acquired.json()["value"].as_str().unwrap().to_owned();
    check(
        &run(&["extend", "job", &value, "--ttl", "30s", "--json"]),
        "extended by the others",
    );
    check(&run(&["status", "job", "--json"]), "read by the others");
    check(
        &run(&["release", "job", &value, "--json"]),
        "released by the others",
    );

    // Every node answering: no warning, an empty list.
    let healthy = Muxlock::new(state.path(), ["acquire", "job", "--ttl", "1s", "--json"])
        .env("MUXLOCK_NODES", cluster.urls()[..3].join(","))
        .env("MUXLOCK_RESTART_GUARD", "off")
        .run();
    healthy.expect(0);
    assert_eq!(healthy.stderr, "", "{healthy:#?}");
    assert_eq!(healthy.json()["degraded"], serde_json::json!([]));
}

#[test]
fn young_nodes_are_said_once_with_the_time_left_and_what_to_do() {
    let cluster = Cluster::start(3);
    let started = Instant::now();
    let state = TempDir::new();
    // A lease the nodes will have been up for within --outage-wait: muxlock says it waits for them, and does.
    let soon = started.elapsed();
    let short = guarded(
        &cluster,
        state.path(),
        &["acquire", "quick", "--ttl", "2s", "--outage-wait", "10s"],
    )
    .run();
    short.expect(0);
    // (The nodes' uptime is read in whole seconds, less one: nodes under a second old are young for the 2 s.)
    if soon < Duration::from_millis(900) {
        let note = short.stderr.lines().next().unwrap_or_default();
        assert!(
            note.contains("young nodes") && note.contains("waiting"),
            "{short:#?}"
        );
    }

    // A lease they have not been up for: said at once, in one headline and a line per node, not retried for
    // --outage-wait.
    let long = guarded(
        &cluster,
        state.path(),
        &[
            "acquire",
            "job",
            "--ttl",
            "5m",
            "--outage-wait",
            "10s",
            "--json",
        ],
    )
    .run();
    long.expect(69).error_with_nodes(3);
    assert!(long.took < Duration::from_secs(5), "{long:#?}");
    let headline = long.stderr.lines().next().unwrap_or_default();
    for says in [
        "young nodes",
        "restart guard counts them in",
        "appendfsync always",
        "muxlock cluster up",
        "retry in",
    ] {
        assert!(headline.contains(says), "{says:?} not in {headline:?}");
    }
    assert!(headline.len() < 400, "{headline}");
    let not_counted = long
        .stderr
        .lines()
        .filter(|l| l.contains("granted, not counted: up"))
        .count();
    assert!(not_counted >= 2, "{long:#?}");
    let doc = long.json();
    assert_eq!(
        (
            doc["error"]["code"].as_u64(),
            doc["error"]["cause"].as_str()
        ),
        (Some(69), Some("young"))
    );
}

#[test]
fn refused_logins_are_the_headline_only_when_they_decided() {
    let state = TempDir::new();
    let locked = RedisServer::builder().requirepass("pw").start();
    let mut others = [RedisServer::start(), RedisServer::start()];
    let nodes = [locked.url(), others[0].url(), others[1].url()].join(",");
    let acquire = || {
        Muxlock::new(
            state.path(),
            ["acquire", "job", "--ttl", "5s", "-n", "--json"],
        )
        .env("MUXLOCK_NODES", &nodes)
        .env("MUXLOCK_RESTART_GUARD", "off")
        .run()
    };
    // Wrong password everywhere: the logins decided.
    let run = Muxlock::new(
        state.path(),
        ["acquire", "job", "--ttl", "5s", "-n", "--json"],
    )
    .env("MUXLOCK_NODES", &nodes)
    .env("MUXLOCK_PASSWORD", "wrong")
    .env("MUXLOCK_RESTART_GUARD", "off")
    .run();
    run.expect(77).error_with_nodes(3);
    assert!(run.stderr.contains("refused the login"), "{run:#?}");
    assert_eq!(run.json()["error"]["cause"], "auth");
    // One node refusing the login, the two others down: the nodes down decided, not the login.
    for node in &mut others {
        node.kill();
    }
    let run = acquire();
    run.expect(69).error_with_nodes(3);
    assert_eq!(run.json()["error"]["cause"], "unreachable", "{run:#?}");
}

#[test]
fn the_restart_window_is_a_setting_and_a_longer_lease_is_said() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    // The window holds these seconds-old nodes back for its length, even for a short lease: by flag, and from
    // the environment.
    for run in [
        guarded(
            &cluster,
            state.path(),
            &[
                "acquire",
                "job",
                "--ttl",
                "100ms",
                "-n",
                "--json",
                "--restart-window",
                "10m",
            ],
        )
        .run(),
        guarded(
            &cluster,
            state.path(),
            &["acquire", "job", "--ttl", "100ms", "-n", "--json"],
        )
        .env("MUXLOCK_RESTART_WINDOW", "10m")
        .run(),
    ] {
        run.expect(69);
        assert_eq!(run.json()["error"]["cause"], "young", "{run:#?}");
        assert!(
            run.stderr
                .lines()
                .next()
                .unwrap_or_default()
                .contains("10m"),
            "{run:#?}"
        );
    }
    // A lease longer than the window: said, with what to set.
    let run = guarded(
        &cluster,
        state.path(),
        &[
            "acquire",
            "job",
            "--ttl",
            "1m",
            "-n",
            "--restart-window",
            "30s",
        ],
    )
    .run();
    let note = run.stderr.lines().next().unwrap_or_default();
    assert!(
        note.contains("longer than --restart-window") && note.contains("at least 1m"),
        "{run:#?}"
    );
    // Without the guard there is no window to speak of.
    let run = on(
        &cluster,
        state.path(),
        &[
            "acquire",
            "other",
            "--ttl",
            "1m",
            "-n",
            "--restart-window",
            "30s",
        ],
    )
    .run();
    run.expect(0);
    assert_eq!(run.stderr, "", "{run:#?}");
}
