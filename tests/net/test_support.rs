//! Tests of the test support itself (`tests/support`), against real `redis-server` processes:
//! if these fail, no other integration test's result means anything.

use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use support::locks::wait_until;
use support::process::{VALKEY_MISSING, make_temp_dir, valkey_or_skip};
use support::skip;
use support::wire::{self, PING, reply_len, show};
use support::{Cluster, RedisServer, cmd};

#[track_caller]
fn assert_reply(server: &RedisServer, command: &[&str], expected: &[u8]) {
    let reply = server.raw(&cmd(command));
    assert_eq!(
        reply,
        expected,
        "{command:?} on {}: got {}, want {}",
        server.url(),
        show(&reply),
        show(expected)
    );
}

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn start_answers_ping() {
    let server = RedisServer::start();
    assert_eq!(server.raw(PING), b"+PONG\r\n");
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(server.addr().port(), server.port());
    assert!(server.addr().ip().is_loopback());
    assert!(process_exists(server.pid()));
    assert!(server.dir().is_dir());
    // Our own process answers, not some other server on the port.
    let info = server.raw(&cmd(&["INFO", "server"]));
    let needle = format!("process_id:{}\r\n", server.pid());
    assert!(
        String::from_utf8_lossy(&info).contains(&needle),
        "{}",
        show(&info)
    );
    // No persistence configured.
    assert_reply(
        &server,
        &["CONFIG", "GET", "save"],
        b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n",
    );
    assert_reply(
        &server,
        &["CONFIG", "GET", "appendonly"],
        b"*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n",
    );
}

#[test]
fn connect_talks_raw_resp() {
    let server = RedisServer::start();
    let mut stream = server.connect();
    stream.write_all(&cmd(&["SET", "k", "v"])).unwrap();
    stream.write_all(&cmd(&["GET", "k"])).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let replies = wire::read_replies(&mut stream, 2, deadline).unwrap();
    assert_eq!(replies, b"+OK\r\n$1\r\nv\r\n");
}

#[test]
fn kill_refuses_connections() {
    let mut server = RedisServer::start();
    let pid = server.pid();
    assert!(server.is_running());
    server.kill();
    assert!(!server.is_running());
    server.kill(); // idempotent
    assert!(
        !process_exists(pid),
        "process {pid} still exists after kill"
    );
    wait_until(
        Duration::from_secs(5),
        "connection refused",
        || matches!(server.try_connect(), Err(e) if e.kind() == ErrorKind::ConnectionRefused),
    );
}

#[test]
fn pause_withholds_replies_until_resume() {
    let mut server = RedisServer::start();
    server.pause();
    assert!(server.is_paused());
    assert_eq!(support::process::process_state(server.pid()), Some('T'));

    // The kernel still completes the handshake; only the answer is missing.
    let mut stream = server.connect();
    stream.write_all(PING).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 64];
    let started = Instant::now();
    match stream.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("paused server answered: {other:?} {}", show(&buf)),
    }
    assert!(started.elapsed() >= Duration::from_millis(150));

    server.resume();
    assert!(!server.is_paused());
    let reply = wire::read_reply(&mut stream, Instant::now() + Duration::from_secs(5)).unwrap();
    assert_eq!(reply, b"+PONG\r\n");
}

#[test]
fn kill_while_paused() {
    let mut server = RedisServer::start();
    let pid = server.pid();
    server.pause();
    server.kill();
    assert!(!server.is_paused());
    assert!(
        !process_exists(pid),
        "paused process {pid} survived SIGKILL"
    );
}

#[test]
fn restart_keeps_port_and_drops_data() {
    let mut server = RedisServer::start();
    let (port, old_pid) = (server.port(), server.pid());
    assert_reply(&server, &["SET", "k", "v"], b"+OK\r\n");
    assert_reply(&server, &["GET", "k"], b"$1\r\nv\r\n");

    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), old_pid);
    assert!(!process_exists(old_pid));
    assert_reply(&server, &["GET", "k"], b"$-1\r\n");

    // From the killed state too.
    server.kill();
    server.restart();
    assert_eq!(server.port(), port);
    assert_eq!(server.raw(PING), b"+PONG\r\n");
    // The log keeps every run.
    assert_eq!(
        server.log().matches("Ready to accept connections").count(),
        3
    );
}

#[test]
fn restart_waits_for_a_busy_port() {
    let mut server = RedisServer::start();
    server.kill();
    // A stranger holds the port for a while: restart retries instead of failing at once.
    let squatter = TcpListener::bind(server.addr()).expect("bind the freed port");
    let holder = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        drop(squatter);
    });
    let started = Instant::now();
    server.restart();
    holder.join().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(server.raw(PING), b"+PONG\r\n");
    assert!(server.log().contains("already in use"));
}

#[test]
fn builder_passes_extra_args() {
    let server = RedisServer::builder()
        .requirepass("pw")
        .enable_debug()
        .start();
    assert_eq!(server.password(), Some("pw"));
    // A plain connection is refused service...
    let mut stream = server.connect();
    let reply = wire::roundtrip(
        &mut stream,
        PING,
        1,
        Instant::now() + Duration::from_secs(5),
    );
    assert!(reply.unwrap().starts_with(b"-NOAUTH"));
    // ...while `raw` authenticates first.
    assert_eq!(server.raw(PING), b"+PONG\r\n");
    let started = Instant::now();
    assert_reply(&server, &["DEBUG", "SLEEP", "0.1"], b"+OK\r\n");
    assert!(started.elapsed() >= Duration::from_millis(100));
}

#[test]
fn builder_arg_requirepass_is_detected() {
    let server = RedisServer::builder()
        .arg("--requirepass")
        .arg("secret")
        .start();
    assert_eq!(server.password(), Some("secret"));
    assert_eq!(server.raw(PING), b"+PONG\r\n");
}

#[test]
#[should_panic(expected = "FATAL CONFIG FILE ERROR")]
fn failed_start_reports_the_log() {
    let _server = RedisServer::builder()
        .arg("--no-such-option")
        .arg("1")
        .start();
}

#[test]
#[should_panic(expected = "started without")]
fn a_server_without_its_preloaded_library_fails_to_start() {
    // The loader skips a library it cannot open (it says so on stderr) and starts the server anyway.
    let dir = make_temp_dir();
    let missing = dir.join("no-such-library.so");
    let _ = std::fs::remove_dir(&dir);
    let _server = RedisServer::builder().preload(missing).start();
}

#[test]
#[should_panic(expected = "redis-server not found")]
fn missing_binary_is_explained() {
    let _server = RedisServer::builder()
        .binary("/nonexistent/redis-server")
        .start();
}

#[test]
fn drop_removes_process_and_dir() {
    let server = RedisServer::start();
    let (pid, dir) = (server.pid(), server.dir().to_path_buf());
    drop(server);
    assert!(!process_exists(pid));
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn cluster_of_three() {
    let cluster = Cluster::start(3);
    assert_eq!(cluster.len(), 3);
    let urls = cluster.urls();
    assert_eq!(urls.len(), 3);
    let mut ports: Vec<u16> = cluster.nodes().iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 3, "nodes share a port: {urls:?}");
    for (i, node) in cluster.nodes().iter().enumerate() {
        assert_eq!(node.url(), urls[i]);
        assert_eq!(node.raw(PING), b"+PONG\r\n", "node {i}");
    }
    // Nodes are independent: a write to one is not seen by another.
    assert_reply(cluster.node(0), &["SET", "k", "v"], b"+OK\r\n");
    assert_reply(cluster.node(1), &["GET", "k"], b"$-1\r\n");
    cluster.flush_all();
    assert_reply(cluster.node(0), &["GET", "k"], b"$-1\r\n");

    let pids: Vec<u32> = cluster.nodes().iter().map(RedisServer::pid).collect();
    let dirs: Vec<_> = cluster
        .nodes()
        .iter()
        .map(|n| n.dir().to_path_buf())
        .collect();
    drop(cluster);
    wait_until(Duration::from_secs(5), "cluster processes gone", || {
        pids.iter().all(|pid| !process_exists(*pid))
    });
    assert!(dirs.iter().all(|d| !d.exists()));
}

#[test]
fn redis_cluster_of_one_master_and_its_replica() {
    use support::redis_cluster::{SLOTS, bulk_text, even_range};
    use support::{Failover, RedisCluster};

    let mut cluster = RedisCluster::builder(1).replicas(1).start();
    assert_eq!((cluster.len(), cluster.shard_count()), (2, 1));
    let (master, replica) = (cluster.master_index(0), cluster.replica_indexes(0)[0]);
    for i in 0..2 {
        let info = bulk_text(&cluster.command(i, &["CLUSTER", "INFO"]));
        assert!(
            info.contains("cluster_state:ok\r\n") && info.contains("cluster_known_nodes:2\r\n"),
            "{info}"
        );
        // Each node's own bus port, not port + 10000.
        let nodes = bulk_text(&cluster.command(i, &["CLUSTER", "NODES"]));
        let myself = nodes
            .lines()
            .find(|l| l.contains("myself"))
            .expect("a myself line");
        assert!(myself.starts_with(cluster.node_id(i)), "{myself}");
        assert!(
            myself.contains(&format!(
                ":{}@{}",
                cluster.node(i).port(),
                cluster.bus_port(i)
            )),
            "{myself}"
        );
    }
    assert_eq!(
        (0..SLOTS)
            .filter(|&s| cluster.owner_of(s) == master)
            .count(),
        usize::from(SLOTS)
    );
    assert_eq!(
        cluster.seed_url(),
        format!("redis+cluster://127.0.0.1:{}", cluster.master(0).port())
    );

    // One master: FORCE could never win a majority with it dead; TAKEOVER needs none.
    assert_eq!(cluster.fail_over(0, Failover::Takeover), replica);
    assert_eq!(cluster.master_index(0), replica);
    assert_eq!(cluster.owner_of(0), replica);
    assert_reply(cluster.master(0), &["SET", "k", "v"], b"+OK\r\n");

    let pids: Vec<u32> = (0..2).map(|i| cluster.node(i).pid()).collect();
    let dirs: Vec<_> = (0..2)
        .map(|i| cluster.node(i).dir().to_path_buf())
        .collect();
    drop(cluster);
    wait_until(Duration::from_secs(5), "cluster processes gone", || {
        pids.iter().all(|pid| !process_exists(*pid))
    });
    assert!(dirs.iter().all(|d| !d.exists()));

    // The split covers every slot once, for any master count.
    for count in 1..=7 {
        let ranges: Vec<(u16, u16)> = (0..count).map(|n| even_range(n, count)).collect();
        assert_eq!(ranges[0].0, 0);
        assert_eq!(ranges[count - 1].1, SLOTS - 1);
        assert!(
            ranges
                .windows(2)
                .all(|w| w[0].1 + 1 == w[1].0 && w[0].0 <= w[0].1)
        );
    }
}

#[test]
fn redis_cluster_reply_helpers() {
    use support::redis_cluster::{bulk_array, bulk_text};

    assert_eq!(bulk_text(b"$5\r\nhello\r\n"), "hello");
    assert_eq!(bulk_text(b"$0\r\n\r\n"), "");
    assert_eq!(bulk_text(b"+OK\r\n"), "");
    assert_eq!(bulk_text(b"$9\r\nshort\r\n"), "short\r\n");
    assert_eq!(
        bulk_array(b"*2\r\n$1\r\na\r\n$3\r\nb c\r\n"),
        Some(vec!["a".to_owned(), "b c".to_owned()])
    );
    assert_eq!(bulk_array(b"*0\r\n"), Some(vec![]));
    assert_eq!(bulk_array(b"*2\r\n$1\r\na\r\n"), None);
    assert_eq!(bulk_array(b"-ERR x\r\n"), None);
}

#[test]
fn cluster_node_controls() {
    let mut cluster = Cluster::builder(3).arg("--maxclients").arg("64").start();
    assert_reply(
        cluster.node(2),
        &["CONFIG", "GET", "maxclients"],
        b"*2\r\n$10\r\nmaxclients\r\n$2\r\n64\r\n",
    );
    cluster.kill(1);
    assert!(cluster.node(1).try_connect().is_err());
    assert_eq!(cluster.node(0).raw(PING), b"+PONG\r\n");
    cluster.restart(1);
    assert_eq!(cluster.node(1).raw(PING), b"+PONG\r\n");

    cluster.pause(2);
    assert!(cluster.node(2).is_paused());
    let timeout = Duration::from_millis(200);
    assert!(cluster.node(2).try_raw(PING, timeout).is_err());
    cluster.resume(2);
    assert_eq!(cluster.node(2).raw(PING), b"+PONG\r\n");
}

#[test]
fn reply_len_finds_whole_replies() {
    let cases: &[(&[u8], usize)] = &[
        (b"+PONG\r\n", 7),
        (b"-ERR no\r\n", 9),
        (b":42\r\n", 5),
        (b"$-1\r\n", 5),
        (b"$0\r\n\r\n", 6),
        (b"$4\r\na\r\nb\r\n", 10), // CRLF inside a bulk string is data
        (b"*-1\r\n", 5),
        (b"*0\r\n", 4),
        (b"*2\r\n$1\r\na\r\n:1\r\n", 15),
        (b"*1\r\n*1\r\n+x\r\n", 12),
        (b"%1\r\n+a\r\n:1\r\n", 12),
        (b"|1\r\n+k\r\n+v\r\n:1\r\n", 16),
        (b"_\r\n", 3),
        (b"=7\r\ntxt:abc\r\n", 13),
    ];
    for &(reply, len) in cases {
        assert_eq!(reply_len(reply), Some(len), "{}", show(reply));
        // Trailing bytes do not change where the reply ends.
        let mut longer = reply.to_vec();
        longer.extend_from_slice(b"+NEXT\r\n");
        assert_eq!(reply_len(&longer), Some(len), "{}", show(reply));
        // Every strict prefix is incomplete.
        for cut in 0..reply.len() {
            assert_eq!(reply_len(&reply[..cut]), None, "{}", show(&reply[..cut]));
        }
    }
}

#[test]
fn cmd_encodes_bulk_arrays() {
    assert_eq!(cmd(&["PING"]), PING);
    assert_eq!(cmd(&["GET", "k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    assert_eq!(
        cmd(&["SET", "k", ""]),
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
    );
}

// ---------------------------------------------------------------------------------------------------------
// Loud skips: support::skip's lines, and scripts/skips' summary of them.
// ---------------------------------------------------------------------------------------------------------

/// Runs Valkey when there is one; without it, records its skip. The test below runs it with no Valkey.
#[test]
fn a_test_that_needs_valkey_runs_it_or_records_its_skip() {
    let Some(bin) = valkey_or_skip() else { return };
    let server = RedisServer::builder().binary(bin).start();
    let info = String::from_utf8_lossy(&server.raw(&cmd(&["INFO", "server"]))).into_owned();
    assert!(info.contains("server_name:valkey"), "{info}");
}

/// The test above, run in a child process of this binary with `$VALKEY_SERVER` naming no file, passes and
/// leaves exactly one skip line naming it in `$MUXLOCK_SKIP_LOG`.
#[test]
fn a_test_without_valkey_appends_one_skip_line_naming_it() {
    let dir = make_temp_dir();
    let log = dir.join("skips");
    // Test names in this binary are `<module>::<test>`; `module_path!()` also names the crate, which they do not.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let out = std::process::Command::new(std::env::current_exe().expect("current_exe"))
        .args([
            "--exact",
            &format!("{module}::a_test_that_needs_valkey_runs_it_or_records_its_skip"),
            "--nocapture",
        ])
        .env("VALKEY_SERVER", dir.join("no-valkey-server"))
        .env(skip::LOG_VAR, &log)
        .output()
        .expect("run this test binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let written = std::fs::read_to_string(&log).unwrap_or_default();
    let want = skip::line(
        skip::Kind::Valkey,
        &format!(
            "{}::a_test_that_needs_valkey_runs_it_or_records_its_skip",
            module_path!()
        ),
        VALKEY_MISSING,
    );
    assert_eq!(written, want);
    assert!(
        stderr.contains(&want),
        "the line is on stderr too: {stderr}"
    );
    std::fs::remove_dir_all(&dir).expect("remove the temp dir");
}

/// Lines appended by many threads at once arrive whole, one per skip.
#[test]
fn skip_lines_appended_by_parallel_threads_arrive_whole() {
    let dir = make_temp_dir();
    let log = dir.join("skips");
    let why = "x".repeat(300);
    thread::scope(|s| {
        for t in 0..8 {
            let (log, why) = (&log, &why);
            s.spawn(move || {
                for i in 0..50 {
                    let line = skip::line(skip::Kind::Cluster, &format!("t{t}::{i}"), why);
                    skip::append(log, &line).expect("append");
                }
            });
        }
    });
    let written = std::fs::read_to_string(&log).expect("read the log");
    let mut lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 400);
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines.len(), 400, "lines lost or merged");
    for line in lines {
        let rest = line
            .strip_prefix("MUXLOCK-SKIP kind=cluster test=t")
            .expect(line);
        assert!(rest.ends_with(&format!(" reason={why}")), "{line}");
    }
    std::fs::remove_dir_all(&dir).expect("remove the temp dir");
}

/// `scripts/skips` over `lines` with `CI` set to `ci` (or unset): its exit code and stdout.
fn skips_summary(lines: &[String], ci: Option<&str>) -> (Option<i32>, String) {
    let dir = make_temp_dir();
    let log = dir.join("skips");
    std::fs::write(&log, lines.concat()).expect("write the log");
    let mut summary = std::process::Command::new("bash");
    summary
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/skips"))
        .arg(&log)
        .env_remove("CI");
    if let Some(ci) = ci {
        summary.env("CI", ci);
    }
    let out = summary.output().expect("run scripts/skips");
    std::fs::remove_dir_all(&dir).expect("remove the temp dir");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The summary counts each skipped test once and names it; under `CI=true` a Valkey or a cluster skip fails it,
/// another kind does not, and without `CI` nothing does.
#[test]
fn the_skip_summary_names_each_test_and_fails_ci_on_valkey_or_cluster() {
    use skip::Kind::{Cluster, Faketime, Valkey};
    let valkey = skip::line(Valkey, "native::a", "no valkey-server");
    let cluster = skip::line(Cluster, "clusters::b", "no cluster mode");
    let faketime = skip::line(Faketime, "clock::c", "no C compiler");
    let all = [
        valkey.clone(),
        valkey.clone(),
        cluster.clone(),
        faketime.clone(),
    ];

    let (code, out) = skips_summary(&all, None);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("3 tests skipped"), "{out}");
    for name in ["native::a", "clusters::b", "clock::c"] {
        assert_eq!(out.matches(name).count(), 1, "{name}: {out}");
    }
    assert!(
        out.contains("no valkey-server"),
        "the reason is shown: {out}"
    );

    for gating in [&valkey, &cluster] {
        let (code, out) = skips_summary(&[gating.clone(), faketime.clone()], Some("true"));
        assert_eq!(code, Some(1), "CI must fail: {out}");
    }
    assert_eq!(skips_summary(&[faketime], Some("true")).0, Some(0));
    assert_eq!(skips_summary(&all, Some("false")).0, Some(0));
    assert_eq!(
        skips_summary(&[], Some("true")),
        (Some(0), "0 tests skipped\n".into())
    );
}
