//! `muxlock cluster up|down|status` with real redis-server processes: the nodes are recorded, found by the other
//! commands, persist every write, and `cluster down` leaves no process behind.

use crate::support;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use support::{Muxlock, TempDir, processes_under, wait_gone};

/// A test's own state directory, with a `cluster down` on drop so that a failing test does not leave nodes
/// running either.
struct State(TempDir);

impl State {
    fn new() -> State {
        support::become_subreaper();
        State(TempDir::new())
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn muxlock(&self, args: &[&str]) -> Muxlock {
        Muxlock::new(self.path(), args)
    }
}

impl Drop for State {
    fn drop(&mut self) {
        let _ = Muxlock::new(self.path(), ["cluster", "down"]).run();
        let _ = wait_for_no_process(self.path(), Duration::from_secs(15));
    }
}

/// Waits until no running process mentions `dir` on its command line; returns those left.
fn wait_for_no_process(dir: &Path, limit: Duration) -> Vec<u32> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = processes_under(dir);
        for &pid in &left {
            support::reap(pid);
        }
        if left.is_empty() || std::time::Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn refused(port: u16) -> bool {
    TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err()
}

#[test]
fn cluster_up_down_leaves_no_process_behind() {
    let state = State::new();
    let up = state.muxlock(&["cluster", "up", "-n", "3", "--json"]).run();
    let doc = up.expect(0).json();
    let nodes = doc["nodes"].as_array().expect("nodes").clone();
    assert_eq!(nodes.len(), 3, "{doc}");
    assert_eq!(doc["appendfsync"], "always");
    let pids: Vec<u32> = nodes
        .iter()
        .map(|n| n["pid"].as_u64().unwrap() as u32)
        .collect();
    let ports: Vec<u16> = nodes
        .iter()
        .map(|n| n["port"].as_u64().unwrap() as u16)
        .collect();
    let urls: Vec<String> = nodes
        .iter()
        .map(|n| n["url"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(urls[0], format!("redis://127.0.0.1:{}", ports[0]));
    // Exactly these processes run under the state directory, each a daemon of its own session.
    let mut running = processes_under(state.path());
    running.sort_unstable();
    let mut recorded = pids.clone();
    recorded.sort_unstable();
    assert_eq!(running, recorded);
    assert!(state.path().join("cluster.json").is_file());

    // Without --json: the URLs, one per line.
    let status = state.muxlock(&["cluster", "status", "--json"]).run();
    let doc = status.expect(0).json();
    for (i, node) in doc["nodes"].as_array().unwrap().iter().enumerate() {
        assert_eq!(node["state"], "up", "{doc}");
        assert_eq!(node["role"], "master");
        assert_eq!(node["appendfsync"], "always");
        assert_eq!(node["pid"].as_u64(), Some(u64::from(pids[i])));
    }
    let table = state.muxlock(&["cluster", "status"]).run();
    table.expect(0);
    assert_eq!(table.stdout.lines().count(), 4, "{table:#?}");

    // A second cluster is refused while this one runs.
    let again = state.muxlock(&["cluster", "up", "-n", "3"]).run();
    again.expect(73).one_line_error();
    assert!(
        again.stderr.contains("already running") && again.stderr.contains("cluster down"),
        "{again:#?}"
    );
    assert_eq!(processes_under(state.path()).len(), 3);

    // The other commands find the cluster without --nodes, and with the restart guard on (the default) a lock is
    // granted at once although every node has just started: they persist every write, so they are trusted.
    let acquired = state
        .muxlock(&["acquire", "job", "--ttl", "10s", "-n"])
        .env("MUXLOCK_ROUND_TIMEOUT", "500ms")
        .run();
    let value = acquired.expect(0).stdout.trim().to_owned();
    let seen = state
        .muxlock(&["status", "job", "--json"])
        .env("MUXLOCK_ROUND_TIMEOUT", "500ms")
        .run();
    let seen = seen.expect(0).json();
    assert_eq!(seen["holder"], value.as_str());
    assert_eq!(seen["nodes"][0]["node"], urls[0].as_str());

    let down = state.muxlock(&["cluster", "down"]).run();
    down.expect(0);
    assert!(down.stdout.starts_with("stopped 3 of 3 nodes"), "{down:#?}");
    wait_gone(&pids, Duration::from_secs(10));
    assert!(processes_under(state.path()).is_empty());
    for port in ports {
        assert!(refused(port), "port {port} still answers");
    }
    assert!(!state.path().join("cluster.json").exists());
    assert!(
        !state.path().join("cluster").exists(),
        "the nodes' data is removed"
    );

    // Nothing left: status says so, down is a no-op, and the lock commands say what to do.
    state
        .muxlock(&["cluster", "status"])
        .run()
        .expect(69)
        .one_line_error();
    let again = state.muxlock(&["cluster", "down", "--json"]).run();
    assert_eq!(
        again.expect(0).json()["stopped"].as_array().map(Vec::len),
        Some(0)
    );
    let none = state.muxlock(&["status", "job"]).run();
    none.expect(78);
    assert!(none.stderr.contains("muxlock cluster up"), "{none:#?}");
}

#[test]
fn nodes_persist_every_write_and_a_dead_cluster_is_reported() {
    let state = State::new();
    let up = state.muxlock(&["cluster", "up", "-n", "1", "--json"]).run();
    let doc = up.expect(0).json();
    let pid = doc["nodes"][0]["pid"].as_u64().unwrap() as u32;
    let dir = doc["nodes"][0]["dir"].as_str().unwrap().to_owned();
    assert!(dir.starts_with(&*state.path().to_string_lossy()), "{dir}");
    // The append-only file exists: every write is logged (and fsynced) before the node answers.
    assert!(Path::new(&dir).join("appendonlydir").is_dir(), "{dir}");

    // A node killed behind the CLI's back: status reports it, commands say the cluster is not running.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_gone(&[pid], Duration::from_secs(10));
    let status = state.muxlock(&["cluster", "status", "--json"]).run();
    status.expect(69);
    assert_eq!(status.json()["nodes"][0]["state"], "down");
    let acquire = state.muxlock(&["acquire", "job", "--ttl", "1s"]).run();
    acquire.expect(69).one_line_error();
    assert!(
        acquire.stderr.contains("not running") && acquire.stderr.contains("cluster down"),
        "{acquire:#?}"
    );
    // A record of dead nodes does not block a new cluster: it is replaced, with a note.
    let up = state.muxlock(&["cluster", "up", "-c", "1"]).run();
    up.expect(0);
    assert!(up.stderr.contains("no longer running"), "{up:#?}");
    assert_eq!(up.stdout.lines().count(), 1, "{up:#?}");
}

#[test]
fn a_taken_base_port_fails_cleanly() {
    let state = State::new();
    let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    // Two nodes from the taken port: the first cannot bind, the second (port + 1) may start and must be
    // stopped again.
    let up = state
        .muxlock(&["cluster", "up", "-n", "2", "--base-port", &port.to_string()])
        .run();
    up.expect(73).one_line_error();
    assert!(
        up.stderr.contains(&format!("port {port} is in use")),
        "{up:#?}"
    );
    assert!(wait_for_no_process(state.path(), Duration::from_secs(15)).is_empty());
    assert!(!state.path().join("cluster.json").exists());
}

#[test]
fn without_redis_server_cluster_up_says_how_to_get_it() {
    let state = State::new();
    let run = state
        .muxlock(&[
            "cluster",
            "up",
            "--redis-server",
            "/nonexistent/redis-server",
        ])
        .run();
    run.expect(69).one_line_error();
    assert!(run.stderr.contains("not an executable file"), "{run:#?}");
    let run = state
        .muxlock(&["cluster", "up"])
        .env("PATH", "/nonexistent")
        .env("REDIS_SERVER", "")
        .run();
    // The usual places (/usr/bin) may still have it; if not, the message says how to install it.
    if run.code() != 0 {
        run.expect(69);
        assert!(
            run.stderr.contains("apt-get install -y redis-server"),
            "{run:#?}"
        );
    }
    state.muxlock(&["cluster", "down"]).run().expect(0);
    // A redis-server built without TLS (as `redis-server --tls-port` answers then): said as such, nothing left.
    let fake = state.path().join("redis-server-without-tls");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho '*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***' >&2\n\
         echo \">>> 'tls-port \\\"1\\\"'\" >&2\necho 'Bad directive or wrong number of arguments' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, PermissionsExt::from_mode(0o755)).unwrap();
    let fake = fake.to_str().unwrap();
    let tls = state
        .muxlock(&["cluster", "up", "--tls", "-c", "2", "--redis-server", fake])
        .run();
    tls.expect(69).one_line_error();
    assert!(
        tls.stderr.contains("built without TLS support") && tls.stderr.contains("BUILD_TLS=yes"),
        "{tls:#?}"
    );
    assert!(!state.path().join("cluster.json").exists());
    assert!(!state.path().join("cluster").exists());
}

/// Sends `line` to a TCP port and returns what comes back within a second (nothing, for a TLS-only port that sees
/// no handshake).
fn plain_reply(port: u16, line: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return Vec::new();
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let _ = stream.write_all(line);
    let mut reply = vec![0; 64];
    let n = stream.read(&mut reply).unwrap_or(0);
    reply.truncate(n);
    reply
}

#[test]
fn a_tls_cluster_serves_the_lock_commands_without_flags_and_stops_cleanly() {
    let state = State::new();
    let up = state
        .muxlock(&["cluster", "up", "--tls", "-c", "3", "--json"])
        .run();
    let doc = up.expect(0).json();
    let nodes = doc["nodes"].as_array().expect("nodes").clone();
    assert_eq!(nodes.len(), 3, "{doc}");
    let pids: Vec<u32> = nodes
        .iter()
        .map(|n| n["pid"].as_u64().unwrap() as u32)
        .collect();
    let ports: Vec<u16> = nodes
        .iter()
        .map(|n| n["port"].as_u64().unwrap() as u16)
        .collect();
    for (node, port) in nodes.iter().zip(&ports) {
        assert_eq!(node["url"], format!("rediss://127.0.0.1:{port}"), "{doc}");
        // TLS only: a plain client gets no PONG.
        assert!(
            !plain_reply(*port, b"PING\r\n").starts_with(b"+PONG"),
            "port {port} answers plain TCP"
        );
    }
    let tls_file = |name: &str| doc["tls"][name].as_str().expect(name).to_owned();
    let (ca, cert, key) = (
        tls_file("ca"),
        tls_file("client_cert"),
        tls_file("client_key"),
    );
    for file in [&ca, &cert, &key] {
        assert!(file.starts_with(&*state.path().to_string_lossy()), "{file}");
        assert!(Path::new(file).is_file(), "{file}");
    }
    let mut running = processes_under(state.path());
    running.sort_unstable();
    let mut recorded = pids.clone();
    recorded.sort_unstable();
    assert_eq!(running, recorded);

    // The lock commands use the recorded cluster with its CA and client certificate, no flag needed.
    let acquired = state
        .muxlock(&["acquire", "job", "--ttl", "10s", "-n"])
        .env("MUXLOCK_ROUND_TIMEOUT", "500ms")
        .run();
    let value = acquired.expect(0).stdout.trim().to_owned();
    let seen = state.muxlock(&["status", "job", "--json"]).run();
    let seen = seen.expect(0).json();
    assert_eq!(seen["holder"], value.as_str());
    assert_eq!(seen["nodes"][2]["node"], nodes[2]["url"]);
    state.muxlock(&["release", "job", &value]).run().expect(0);
    let exec = state
        .muxlock(&[
            "exec",
            "job",
            "--",
            "sh",
            "-c",
            "echo \"$MUXLOCK_RESOURCE\"",
        ])
        .run();
    assert_eq!(exec.expect(0).stdout, "job\n");

    // cluster status talks TLS to each node, and says which flags a command given --nodes needs.
    let status = state.muxlock(&["cluster", "status", "--json"]).run();
    let status = status.expect(0).json();
    assert_eq!(status["tls"]["ca"], ca.as_str());
    for (i, node) in status["nodes"].as_array().unwrap().iter().enumerate() {
        assert_eq!(node["state"], "up", "{status}");
        assert_eq!(node["role"], "master");
        assert_eq!(node["appendfsync"], "always");
        assert_eq!(node["pid"].as_u64(), Some(u64::from(pids[i])));
    }
    let table = state.muxlock(&["cluster", "status"]).run();
    table.expect(0);
    let flags = format!("--tls-ca {ca} --tls-cert {cert} --tls-key {key}");
    assert!(table.stderr.contains(&flags), "{table:#?}");
    // With --nodes, the recorded files are not assumed: without them the handshake fails; with the printed
    // flags it works.
    let urls: Vec<&str> = nodes.iter().map(|n| n["url"].as_str().unwrap()).collect();
    let given = |extra: &[&str]| {
        let mut args = vec!["acquire", "other", "--ttl", "10s", "-n", "--nodes"];
        let urls = urls.join(",");
        args.push(&urls);
        args.extend_from_slice(extra);
        state.muxlock(&args).run()
    };
    let no_ca = given(&[]);
    assert_ne!(no_ca.code(), 0, "{no_ca:#?}");
    no_ca.error_with_nodes(3);
    let flag_args: Vec<&str> = flags.split(' ').collect();
    given(&flag_args).expect(0);

    let down = state.muxlock(&["cluster", "down"]).run();
    down.expect(0);
    assert!(down.stdout.starts_with("stopped 3 of 3 nodes"), "{down:#?}");
    wait_gone(&pids, Duration::from_secs(10));
    assert!(processes_under(state.path()).is_empty());
    for port in ports {
        assert!(refused(port), "port {port} still answers");
    }
    assert!(!Path::new(&ca).exists(), "the throwaway CA is removed");
    assert!(!state.path().join("cluster.json").exists());
}

#[test]
fn cluster_up_with_shards_starts_cluster_members() {
    let state = State::new();
    let up = state
        .muxlock(&["cluster", "up", "-c", "3", "--shards", "2", "--json"])
        .run();
    let doc = up.expect(0).json();
    assert_eq!(doc["nodes"].as_array().map(Vec::len), Some(6), "{doc}");
    let members = doc["members"].as_array().expect("members").clone();
    assert_eq!(members.len(), 3, "{doc}");
    for m in &members {
        let url = m.as_str().unwrap();
        assert!(url.starts_with("redis+cluster://127.0.0.1:"), "{url}");
        assert_eq!(url.matches(',').count(), 1, "two masters a member: {url}");
    }
    // The lock commands use the cluster members (the nodes count once up longer than the 2 s lease).
    let acquired = state
        .muxlock(&["acquire", "job", "--ttl", "2s", "--wait", "20s"])
        .env("MUXLOCK_ROUND_TIMEOUT", "500ms")
        .run();
    let value = acquired.expect(0).stdout.trim().to_owned();
    assert!(!value.is_empty());
    let again = state
        .muxlock(&["acquire", "job", "--ttl", "2s", "-n"])
        .env("MUXLOCK_ROUND_TIMEOUT", "500ms")
        .run();
    assert_ne!(again.code(), 0, "held: {again:#?}");
    let down = state.muxlock(&["cluster", "down"]).run();
    down.expect(0);
    assert!(down.stdout.starts_with("stopped 6 of 6 nodes"), "{down:#?}");
    assert!(processes_under(state.path()).is_empty());
}
