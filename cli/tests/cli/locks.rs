//! The `muxlock` binary against real redis-server nodes: acquire, release, extend, status and bench, their exit
//! codes and outputs; usage errors; passwords never shown; `exec --help` (exec itself: exec.rs; demo: demo.rs).

use crate::support;

use std::fs;
use std::process::Stdio;
use std::time::Duration;

use support::{Cluster, Muxlock, RedisServer, TempDir, cmd, get, on};

const SECRET: &str = "s3cret-pw-XYZ";

#[test]
fn acquire_and_release_round_trip_through_a_shell() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let bin = support::bin();
    // A script holds the lock by its value across processes: acquire, check, extend, release, and again.
    let script = r#"
        set -u
        v=$("$MX" acquire job --ttl 10s -n) || { echo "acquire failed: $?"; exit 10; }
        [ ${#v} -eq 40 ] || { echo "bad value '$v'"; exit 11; }
        echo "value=$v"
        "$MX" acquire job --ttl 10s -n >/dev/null 2>&1; echo "second=$?"
        "$MX" acquire job --ttl 10s -n -E 42 >/dev/null 2>&1; echo "custom=$?"
        "$MX" status job --json | grep -q "\"holder\":\"$v\"" || exit 12
        "$MX" extend job "$v" --ttl 20s >/dev/null || exit 13
        "$MX" release job "$v" >/dev/null || exit 14
        "$MX" release job "$v" >/dev/null 2>&1; echo "again=$?"
        w=$("$MX" acquire job --ttl 10s -n) || exit 15
        [ "$w" != "$v" ] || exit 16
        echo "next=$w"
    "#;
    let run = Muxlock::program("/bin/sh", state.path(), ["-c", script])
        .env("MX", bin)
        .env("MUXLOCK_NODES", cluster.urls().join(","))
        .env("MUXLOCK_RESTART_GUARD", "off")
        .env("MUXLOCK_ROUND_TIMEOUT", "500ms")
        .run();
    run.expect(0);
    let line = |key: &str| {
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= in {run:#?}"))
            .to_owned()
    };
    assert_eq!(line("second"), "1", "conflict exits 1: {run:#?}");
    assert_eq!(line("custom"), "42", "-E sets the conflict code");
    assert_eq!(line("again"), "75", "releasing twice: not held any more");
    let next = line("next");
    // The second holder's key is on the nodes: nothing of the first is left.
    for node in cluster.nodes() {
        assert_eq!(get(node, "job"), format!("$40\r\n{next}\r\n"));
    }
}

#[test]
fn a_held_lock_gives_the_conflict_code_at_once_and_after_the_wait() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let first = on(&cluster, state.path(), &["acquire", "res", "--ttl", "30s"]).run();
    first.expect(0);
    let value = first.stdout.trim().to_owned();

    let at_once = on(
        &cluster,
        state.path(),
        &["acquire", "res", "--ttl", "30s", "-n"],
    )
    .run();
    at_once.expect(1).error_with_nodes(3);
    assert!(at_once.stdout.is_empty());
    assert!(
        at_once.stderr.contains("held by another holder"),
        "{at_once:#?}"
    );
    // One attempt: no retry pauses (generous bound for a loaded machine).
    assert!(at_once.took < Duration::from_secs(5), "{:?}", at_once.took);

    let waited = on(
        &cluster,
        state.path(),
        &[
            "acquire", "res", "--ttl", "30s", "--wait", "600ms", "-E", "3",
        ],
    )
    .run();
    waited.expect(3);
    assert!(
        waited.took >= Duration::from_millis(300),
        "it waited: {:?}",
        waited.took
    );

    let json = on(
        &cluster,
        state.path(),
        &["acquire", "res", "--ttl", "30s", "-n", "--json"],
    )
    .run();
    json.expect(1);
    let doc = json.json();
    assert_eq!(doc["error"]["kind"], "conflict");
    assert_eq!(doc["error"]["code"], 1);
    assert_eq!(doc["error"]["nodes"].as_array().map(Vec::len), Some(3));

    // Released, the resource is free for the next one.
    on(&cluster, state.path(), &["release", "res", &value])
        .run()
        .expect(0);
    let next = on(
        &cluster,
        state.path(),
        &["acquire", "res", "--ttl", "1s", "-n", "--json"],
    )
    .run();
    next.expect(0);
    let doc = next.json();
    assert_eq!(doc["resource"], "res");
    assert_eq!(doc["ttl_ms"], 1000);
    assert_eq!(doc["value"].as_str().map(str::len), Some(40));
    assert!(
        doc["validity_ms"]
            .as_u64()
            .is_some_and(|v| v > 0 && v <= 1000),
        "{doc}"
    );
    assert!(
        doc["deadline_unix_ms"]
            .as_u64()
            .is_some_and(|v| v > 1_600_000_000_000),
        "{doc}"
    );
}

#[test]
fn status_shows_every_node_and_whether_a_majority_holds_the_lock() {
    let mut cluster = Cluster::start(3);
    let state = TempDir::new();
    let free = on(&cluster, state.path(), &["status", "res"]).run();
    free.expect(0);
    assert!(free.stdout.starts_with("\"res\" is free"), "{free:#?}");

    let value = on(&cluster, state.path(), &["acquire", "res", "--ttl", "30s"]).run();
    let value = value.expect(0).stdout.trim().to_owned();
    cluster.kill(2);
    let table = on(&cluster, state.path(), &["status", "res"]).run();
    table.expect(0);
    assert!(
        table.stdout.starts_with(&format!(
            "\"res\" is held by {}… on 2 of 3 nodes (2 needed)",
            &value[..12]
        )),
        "{table:#?}"
    );
    let rows: Vec<&str> = table.stdout.lines().skip(2).collect();
    assert_eq!(rows.len(), 3, "{table:#?}");
    assert!(
        rows[0].contains("held") && rows[0].contains(&value[..12]),
        "{rows:?}"
    );
    assert!(
        rows[2].contains("error") && rows[2].contains("connection refused"),
        "{rows:?}"
    );

    let doc = on(&cluster, state.path(), &["status", "res", "--json"]).run();
    let doc = doc.expect(0).json();
    assert_eq!(doc["held"], true);
    assert_eq!(doc["holder"], value.as_str());
    assert_eq!(
        (
            doc["holding"].as_u64(),
            doc["answered"].as_u64(),
            doc["quorum"].as_u64()
        ),
        (Some(2), Some(2), Some(2))
    );
    let nodes = doc["nodes"].as_array().expect("nodes");
    assert_eq!(nodes[0]["state"], "held");
    assert_eq!(nodes[0]["value"], value.as_str());
    assert!(
        nodes[0]["ttl_ms"]
            .as_u64()
            .is_some_and(|t| t > 20_000 && t <= 30_000),
        "{doc}"
    );
    assert_eq!(nodes[2]["state"], "error");
    assert_eq!(nodes[2]["node"], cluster.node(2).url().as_str());

    // A key without expiry, written by something else, shows as such.
    cluster.node(0).raw(&cmd(&["SET", "other", "not-a-lock"]));
    let doc = on(&cluster, state.path(), &["status", "other", "--json"])
        .run()
        .json();
    assert_eq!(doc["nodes"][0]["value"], "not-a-lock");
    assert!(doc["nodes"][0]["ttl_ms"].is_null(), "{doc}");
    assert_eq!(doc["held"], false);

    // Too few nodes answer to tell: the table, then 69.
    cluster.kill(1);
    let blind = on(&cluster, state.path(), &["status", "res"]).run();
    blind.expect(69);
    assert!(
        blind.stdout.contains("not held by a majority"),
        "{blind:#?}"
    );
    assert!(
        blind.stderr.contains("only 1 of 3 nodes answered"),
        "{blind:#?}"
    );
}

/// A command is a fresh process: its connections are still being set up when it starts. Two of three nodes
/// answer nothing for 600 ms after it starts (stopped: the kernel still completes their TCP handshakes), longer
/// than the default 200 ms round but within the 1 s connect timeout. `status` waits for the connections, then
/// gives its round to the nodes' answers: all three answer, exit 0 (a round that counted the connecting
/// against its 200 ms would hear from one node and exit 69).
#[test]
fn a_command_waits_for_its_connections_before_its_first_round() {
    let mut cluster = Cluster::start(3);
    let state = TempDir::new();
    cluster.pause(1);
    cluster.pause(2);
    let running = on(&cluster, state.path(), &["status", "res", "--json"])
        .env("MUXLOCK_ROUND_TIMEOUT", "200ms")
        .spawn();
    std::thread::sleep(Duration::from_millis(600));
    cluster.resume(1);
    cluster.resume(2);
    let run = running.finish();
    let doc = run.expect(0).json();
    assert_eq!(doc["answered"], 3, "{run:#?}");
}

#[test]
fn extend_and_release_by_value_and_what_they_say_when_the_lock_is_gone() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let value = on(&cluster, state.path(), &["acquire", "job", "--ttl", "2s"]).run();
    let value = value.expect(0).stdout.trim().to_owned();

    let extended = on(
        &cluster,
        state.path(),
        &["extend", "job", &value, "--ttl", "30s", "--json"],
    )
    .run();
    let doc = extended.expect(0).json();
    assert_eq!(doc["ttl_ms"], 30_000);
    assert!(
        doc["validity_ms"]
            .as_u64()
            .is_some_and(|v| v > 20_000 && v <= 30_000),
        "{doc}"
    );
    let pttl = String::from_utf8_lossy(&cluster.node(1).raw(&cmd(&["PTTL", "job"]))).into_owned();
    assert!(
        pttl.trim_start_matches(':')
            .trim()
            .parse::<u64>()
            .is_ok_and(|ms| ms > 20_000),
        "{pttl}"
    );

    // Someone else's value extends and releases nothing.
    let wrong = "0".repeat(40);
    on(
        &cluster,
        state.path(),
        &["extend", "job", &wrong, "--ttl", "30s"],
    )
    .run()
    .expect(75)
    .error_with_nodes(3);
    on(&cluster, state.path(), &["release", "job", &wrong])
        .run()
        .expect(75)
        .error_with_nodes(3);
    assert_eq!(get(cluster.node(0), "job"), format!("$40\r\n{value}\r\n"));

    let released = on(
        &cluster,
        state.path(),
        &["release", "job", &value, "--json"],
    )
    .run();
    let doc = released.expect(0).json();
    assert_eq!(
        (
            doc["resource"].as_str(),
            doc["nodes"].as_u64(),
            doc["quorum"].as_u64()
        ),
        (Some("job"), Some(3), Some(2))
    );
    assert!(doc["released"].as_u64().is_some_and(|n| n >= 2), "{doc}");
    // Released: an extension cannot bring it back.
    let revived = on(
        &cluster,
        state.path(),
        &["extend", "job", &value, "--ttl", "30s", "--json"],
    )
    .run();
    revived.expect(75);
    assert_eq!(revived.json()["error"]["kind"], "lost");
    for node in cluster.nodes() {
        assert_eq!(get(node, "job"), "$-1\r\n");
    }
}

#[test]
fn output_that_cannot_be_written_releases_the_lock() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let full = fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let run = on(&cluster, state.path(), &["acquire", "job", "--ttl", "30s"])
        .stdout(Stdio::from(full))
        .run();
    run.expect(74).one_line_error();
    assert!(run.stderr.contains("released the lock"), "{run:#?}");
    for node in cluster.nodes() {
        assert_eq!(
            get(node, "job"),
            "$-1\r\n",
            "nobody got the value, so nobody holds the lock"
        );
    }
}

#[test]
fn no_quorum_is_69_and_names_each_node() {
    let mut cluster = Cluster::start(3);
    let state = TempDir::new();
    cluster.kill(0);
    cluster.kill(1);
    let run = on(
        &cluster,
        state.path(),
        &["acquire", "job", "--ttl", "10s", "-n"],
    )
    .run();
    run.expect(69).error_with_nodes(3);
    assert!(run.stderr.contains("no quorum"), "{run:#?}");
    for i in 0..2 {
        assert!(
            run.stderr
                .contains(&format!("{}: connection refused", cluster.node(i).url())),
            "{run:#?}"
        );
    }
    let doc = on(
        &cluster,
        state.path(),
        &["acquire", "job", "--ttl", "10s", "-n", "--json"],
    )
    .run()
    .json();
    assert_eq!(doc["error"]["kind"], "quorum");
    assert_eq!(doc["error"]["nodes"][0]["outcome"], "connection refused");
}

#[test]
fn usage_errors_exit_64_without_a_panic() {
    let state = TempDir::new();
    let usage = |args: &[&str], says: &str| {
        let run = Muxlock::new(state.path(), args).run();
        run.expect(64);
        assert!(run.stdout.is_empty(), "{run:#?}");
        assert!(
            run.stderr.contains(says),
            "{args:?} should say {says:?}: {run:#?}"
        );
    };
    usage(&[], "Usage: muxlock <COMMAND>");
    usage(&["frobnicate"], "unrecognized subcommand");
    usage(&["acquire", "job"], "--ttl <DUR>");
    usage(&["acquire", "job", "--ttl", "30"], "has no unit: write 30s");
    usage(&["acquire", "job", "--ttl", "5ms"], "too short");
    usage(
        &["acquire", "job", "--ttl", "10s", "-E", "256"],
        "conflict-exit-code",
    );
    usage(&["acquire", "", "--ttl", "10s"], "RESOURCE");
    usage(&["release", "job"], "<VALUE>");
    usage(&["extend", "job", "v"], "--ttl");
    usage(&["status"], "<RESOURCE>");
    usage(&["exec", "job"], "<COMMAND>");
    usage(&["cluster", "up", "-n", "0"], "--count");
    usage(
        &["cluster", "up", "--base-port", "65535", "-n", "3"],
        "leaves no room",
    );
    usage(&["bench", "--threads", "0"], "--threads");
    usage(&["bench", "--duration", "0"], "more than zero");
    usage(&["status", "job", "--round-timeout", "1x"], "unknown unit");
    for help in [
        &["--help"][..],
        &["acquire", "--help"],
        &["cluster", "up", "--help"],
        &["exec", "--help"],
    ] {
        let run = Muxlock::new(state.path(), help).run();
        run.expect(0);
        assert!(run.stdout.contains("Usage: muxlock"), "{run:#?}");
    }
    let version = Muxlock::new(state.path(), ["--version"]).run();
    assert!(
        version.expect(0).stdout.starts_with("muxlock "),
        "{version:#?}"
    );
}

#[test]
fn without_nodes_every_command_says_what_to_do() {
    let state = TempDir::new();
    for args in [
        &["acquire", "job", "--ttl", "1s"][..],
        &["status", "job"],
        &["release", "job", "v"],
        &["bench"],
    ] {
        let run = Muxlock::new(state.path(), args).run();
        run.expect(78).one_line_error();
        assert!(
            run.stderr.contains("--nodes") && run.stderr.contains("muxlock cluster up"),
            "{run:#?}"
        );
    }
    let run = Muxlock::new(
        state.path(),
        ["status", "job", "--nodes", "redis://h:99999"],
    )
    .run();
    run.expect(78).one_line_error();
    assert!(
        run.stderr.contains("node 1 of --nodes") && run.stderr.contains("port"),
        "{run:#?}"
    );
}

#[test]
fn passwords_are_never_shown() {
    let server = RedisServer::builder().requirepass(SECRET).start();
    let other = RedisServer::builder().requirepass(SECRET).start();
    let state = TempDir::new();
    let port = server.port();
    let plain = format!("127.0.0.1:{port},127.0.0.1:{}", other.port());
    let with_pw = format!(
        "redis://:{SECRET}@127.0.0.1:{port},redis://:{SECRET}@127.0.0.1:{}",
        other.port()
    );
    let runs = [
        // The password from the environment, for URLs without one: it works...
        Muxlock::new(state.path(), ["acquire", "job", "--ttl", "10s", "-n"])
            .env("MUXLOCK_NODES", &plain)
            .env("MUXLOCK_PASSWORD", SECRET)
            .env("MUXLOCK_RESTART_GUARD", "off")
            .run()
            .expect(0)
            .clone(),
        // ... and a wrong one is an authentication error (77), named, without the password.
        Muxlock::new(
            state.path(),
            ["acquire", "job2", "--ttl", "10s", "-n", "--json"],
        )
        .env("MUXLOCK_NODES", &plain)
        .env("MUXLOCK_PASSWORD", format!("{SECRET}-wrong"))
        .run()
        .expect(77)
        .clone(),
        // The password in the URLs: status shows the nodes as redis://:***@...
        Muxlock::new(state.path(), ["status", "job"])
            .env("MUXLOCK_NODES", &with_pw)
            .run()
            .expect(0)
            .clone(),
        Muxlock::new(
            state.path(),
            ["status", "job", "--json", "--nodes", &with_pw],
        )
        .run()
        .expect(0)
        .clone(),
        // Nodes down, passwords in the URLs: the error names the nodes without them.
        Muxlock::new(
            state.path(),
            ["acquire", "job", "--ttl", "1s", "-n", "--json"],
        )
        .env(
            "MUXLOCK_NODES",
            format!("redis://:{SECRET}@127.0.0.1:1,redis://u:{SECRET}@127.0.0.1:2"),
        )
        .run()
        .expect(69)
        .clone(),
        // An invalid URL with a password; a URL where a duration should be; --help with both variables set.
        Muxlock::new(
            state.path(),
            [
                "status",
                "job",
                "--nodes",
                &format!("redis://:{SECRET}@h:99999"),
            ],
        )
        .run()
        .expect(78)
        .clone(),
        Muxlock::new(
            state.path(),
            ["acquire", "job", "--ttl", &format!("redis://:{SECRET}@h:1")],
        )
        .run()
        .expect(64)
        .clone(),
        Muxlock::new(state.path(), ["acquire", "--help"])
            .env("MUXLOCK_NODES", &with_pw)
            .env("MUXLOCK_PASSWORD", SECRET)
            .run()
            .expect(0)
            .clone(),
    ];
    for run in &runs {
        assert!(
            !run.stdout.contains(SECRET) && !run.stderr.contains(SECRET),
            "password shown: {run:#?}"
        );
    }
    assert!(
        runs[1].stderr.contains("authentication failed"),
        "{:#?}",
        runs[1]
    );
    assert_eq!(runs[1].json()["error"]["kind"], "auth");
    assert!(
        runs[2]
            .stdout
            .contains(&format!("redis://:***@127.0.0.1:{port}")),
        "{:#?}",
        runs[2]
    );
    assert!(runs[2].stdout.contains("is held by"), "{:#?}", runs[2]);
    assert!(
        runs[4]
            .stderr
            .contains("redis://:***@127.0.0.1:1: connection refused"),
        "{:#?}",
        runs[4]
    );
    assert!(runs[7].stdout.contains("MUXLOCK_NODES"), "{:#?}", runs[7]);
}

#[test]
fn exec_is_documented_in_its_help() {
    let state = TempDir::new();
    let help = Muxlock::new(state.path(), ["exec", "--help"]).run();
    for documented in [
        "--kill-after",
        "--conflict-exit-code",
        "--nonblock",
        "--wait",
        "MUXLOCK_DEADLINE_MS",
    ] {
        assert!(help.stdout.contains(documented), "{documented}: {help:#?}");
    }
}

#[test]
fn bench_measures_and_reports() {
    let cluster = Cluster::start(3);
    let state = TempDir::new();
    let run = on(
        &cluster,
        state.path(),
        &["bench", "--threads", "2", "--duration", "1s", "--json"],
    )
    .run();
    let doc = run.expect(0).json();
    assert_eq!(
        (
            doc["threads"].as_u64(),
            doc["resources"].as_u64(),
            doc["nodes"].as_u64()
        ),
        (Some(2), Some(2), Some(3))
    );
    assert!(doc["cycles"].as_u64().is_some_and(|c| c > 0), "{doc}");
    assert_eq!(
        doc["conflicts"], 0,
        "one resource per thread: no contention"
    );
    for which in ["acquire", "cycle"] {
        let p = &doc["latency_us"][which];
        let (p50, p99, max) = (
            p["p50"].as_u64().unwrap(),
            p["p99"].as_u64().unwrap(),
            p["max"].as_u64().unwrap(),
        );
        assert!(0 < p50 && p50 <= p99 && p99 <= max, "{which}: {p}");
    }
    assert_eq!(doc["per_node"].as_array().map(Vec::len), Some(3));
    assert!(
        doc["per_node"][0]["granted"]
            .as_u64()
            .is_some_and(|g| g > 0),
        "{doc}"
    );

    // Contention: more threads than resources; the text report; plain progress lines on a non-terminal.
    let run = on(
        &cluster,
        state.path(),
        &[
            "bench",
            "--threads",
            "3",
            "--resources",
            "1",
            "--duration",
            "1500ms",
        ],
    )
    .run();
    run.expect(0);
    assert!(
        run.stdout.contains("p99.9") && run.stdout.contains("cycles: "),
        "{run:#?}"
    );
    // A plain progress line about once a second (its time reads 1s, or 1.1s on a stalled machine).
    assert!(
        run.stderr
            .lines()
            .any(|l| l.starts_with("muxlock: bench: 1") && l.contains("s of 1.5s: ")),
        "{run:#?}"
    );

    // Nothing to measure against: the warm-up fails at once, with the reason.
    let down = Muxlock::new(
        state.path(),
        ["bench", "--nodes", "127.0.0.1:1", "--duration", "1s"],
    )
    .run();
    down.expect(69).error_with_nodes(1);
    assert!(down.stderr.contains("connection refused"), "{down:#?}");
}
