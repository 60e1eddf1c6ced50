//! Tests of [`FaultProxy`] (`tests/support/proxy.rs`) in front of a real `redis-server`: each
//! fault does what its docs say, switches on and off at runtime, and the proxy cleans up.

use crate::support;

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use support::locks::wait_until;
use support::proxy::Stats;
use support::wire::{self, PING, show};
use support::{Fault, FaultProxy, RedisServer, cmd};

const PONG: &[u8] = b"+PONG\r\n";
/// Bound on any single wait in these tests.
const LONG: Duration = Duration::from_secs(5);
/// Slack allowed over an injected delay: two cores, tests in parallel, scheduling noise.
const MARGIN: Duration = Duration::from_millis(150);

fn assert_send_sync<T: Send + Sync>() {}

/// A raw connection to the proxy with 5 s timeouts and `TCP_NODELAY`.
#[track_caller]
fn connect(proxy: &FaultProxy) -> TcpStream {
    let stream = TcpStream::connect_timeout(&proxy.addr(), LONG).expect("connect to the proxy");
    stream.set_read_timeout(Some(LONG)).unwrap();
    stream.set_write_timeout(Some(LONG)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Sends `request` and asserts the exact reply, within 5 s.
#[track_caller]
fn assert_roundtrip(stream: &mut TcpStream, request: &[u8], expected: &[u8]) {
    let reply = wire::roundtrip(stream, request, 1, Instant::now() + LONG)
        .unwrap_or_else(|e| panic!("{} through the proxy: {e}", show(request)));
    assert_eq!(
        reply,
        expected,
        "got {}, want {}",
        show(&reply),
        show(expected)
    );
}

/// Times one `PING` round trip.
#[track_caller]
fn ping_time(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    assert_roundtrip(stream, PING, PONG);
    started.elapsed()
}

/// Asserts that nothing arrives on `stream` for `quiet`.
#[track_caller]
fn assert_silent(stream: &mut TcpStream, quiet: Duration) {
    stream.set_read_timeout(Some(quiet)).unwrap();
    let mut buf = [0u8; 64];
    let started = Instant::now();
    match stream.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("expected silence, got {other:?}: {}", show(&buf)),
    }
    // A timeout may fire a little early, never much.
    assert!(
        started.elapsed() >= quiet.mul_f32(0.9),
        "{:?}",
        started.elapsed()
    );
    stream.set_read_timeout(Some(LONG)).unwrap();
}

/// Reads until an error or EOF within 5 s; returns the bytes and how it ended.
#[track_caller]
fn read_to_failure(stream: &mut TcpStream) -> (Vec<u8>, Option<ErrorKind>) {
    let deadline = Instant::now() + LONG;
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        assert!(Instant::now() < deadline, "no failure; read {}", show(&got));
        match stream.read(&mut buf) {
            Ok(0) => return (got, None),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return (got, Some(e.kind())),
        }
    }
}

/// This process' threads whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    let tasks = fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(|task| fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with(prefix))
        .count()
}

#[test]
fn transparent_ping_set_get_and_counters() {
    assert_send_sync::<FaultProxy>();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    assert_eq!(proxy.addr().port(), proxy.port());
    assert_ne!(proxy.port(), server.port());
    assert_eq!(proxy.upstream(), server.addr());
    assert_eq!(proxy.fault(), Fault::None);

    let mut stream = connect(&proxy);
    let (set, get) = (cmd(&["SET", "k", "v"]), cmd(&["GET", "k"]));
    assert_roundtrip(&mut stream, PING, PONG);
    assert_roundtrip(&mut stream, &set, b"+OK\r\n");
    assert_roundtrip(&mut stream, &get, b"$1\r\nv\r\n");
    // The proxy talks to the real server: the write is there without it.
    assert_eq!(server.raw(&get), b"$1\r\nv\r\n");

    // Counters are bumped after each write, so the client may see bytes a moment earlier.
    let expected = Stats {
        to_server: (PING.len() + set.len() + get.len()) as u64,
        to_client: (PONG.len() + 5 + 7) as u64,
        accepted: 1,
        refused: 0,
        resets: 0,
    };
    wait_until(LONG, "counters", || proxy.stats() == expected);

    // Closing the client closes the upstream connection too (the server counts clients).
    drop(stream);
    wait_until(LONG, "upstream connection closed", || {
        let info = server.raw(&cmd(&["INFO", "clients"]));
        String::from_utf8_lossy(&info).contains("connected_clients:1\r\n")
    });
}

#[test]
fn latency_delays_each_direction_without_serialising() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut stream = connect(&proxy);
    let direct = ping_time(&mut stream); // also makes sure upstream is dialed
    let delay = Duration::from_millis(50);
    proxy.set(Fault::Latency(delay));
    // One delay per direction: a round trip costs two.
    let rtt = ping_time(&mut stream);
    assert!(rtt >= 2 * delay && rtt < 2 * delay + MARGIN, "{rtt:?}");

    // Ten pipelined commands, 2 ms apart so that each is its own chunk: their replies all come
    // one round trip late, in order. A proxy that delayed chunk after chunk would take 10 × 50 ms.
    let gap = Duration::from_millis(2);
    let started = Instant::now();
    let mut expected = Vec::new();
    for i in 0..10 {
        stream.write_all(&cmd(&["ECHO", &i.to_string()])).unwrap();
        expected.extend_from_slice(format!("$1\r\n{i}\r\n").as_bytes());
        thread::sleep(gap);
    }
    let replies = wire::read_replies(&mut stream, 10, Instant::now() + LONG).unwrap();
    let burst = started.elapsed();
    assert_eq!(replies, expected, "{}", show(&replies));
    assert!(
        burst >= 2 * delay && burst < 2 * delay + 10 * gap + MARGIN,
        "{burst:?}"
    );

    proxy.set(Fault::None);
    let after = ping_time(&mut stream);
    assert!(
        after < delay,
        "{after:?} (without the proxy's delay: {direct:?})"
    );
    eprintln!("latency {delay:?}: ping {rtt:?}, 10 pipelined {burst:?}, none {direct:?}/{after:?}");
}

#[test]
fn black_hole_holds_bytes_until_lifted() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut stream = connect(&proxy);
    assert_roundtrip(&mut stream, PING, PONG);
    let bytes = |stats: Stats| (stats.to_server, stats.to_client);
    let before = (PING.len() as u64, PONG.len() as u64);
    wait_until(LONG, "byte counters", || bytes(proxy.stats()) == before);
    proxy.set(Fault::BlackHole);

    // An open connection and a new one (still accepted) both get nothing.
    stream.write_all(PING).unwrap();
    let mut fresh = connect(&proxy);
    fresh.write_all(&cmd(&["ECHO", "fresh"])).unwrap();
    assert_silent(&mut stream, Duration::from_millis(200));
    assert_silent(&mut fresh, Duration::from_millis(20));
    assert_eq!(bytes(proxy.stats()), before);
    assert_eq!(proxy.stats().accepted, 2);

    // Lifted: the held requests go through and their replies come back, in order.
    proxy.set(Fault::None);
    let deadline = Instant::now() + Duration::from_secs(1);
    assert_eq!(wire::read_reply(&mut stream, deadline).unwrap(), PONG);
    let echo = wire::read_reply(&mut fresh, deadline).unwrap();
    assert_eq!(echo, b"$5\r\nfresh\r\n");
    assert_roundtrip(&mut stream, PING, PONG);
    assert_roundtrip(&mut fresh, PING, PONG);
}

#[test]
fn trickle_delivers_a_reply_byte_by_byte() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let value = "abcdefghijklmnopqrst"; // 20 bytes
    let mut stream = connect(&proxy);
    assert_roundtrip(&mut stream, &cmd(&["SET", "k", value]), b"+OK\r\n");
    let expected = format!("$20\r\n{value}\r\n").into_bytes();

    let pause = Duration::from_millis(1);
    proxy.set(Fault::Trickle(pause));
    let started = Instant::now();
    stream.write_all(&cmd(&["GET", "k"])).unwrap();
    let (mut got, mut reads) = (Vec::new(), 0);
    let mut buf = [0u8; 64];
    while got.len() < expected.len() {
        assert!(started.elapsed() < LONG, "stalled after {}", show(&got));
        let n = stream.read(&mut buf).unwrap();
        assert_ne!(n, 0, "EOF after {}", show(&got));
        got.extend_from_slice(&buf[..n]);
        reads += 1;
    }
    let elapsed = started.elapsed();
    assert_eq!(got, expected, "{}", show(&got));
    // 27 bytes with a pause between each; a descheduled reader may get a few at once.
    let pauses = pause * (expected.len() as u32 - 1);
    assert!(elapsed >= pauses, "{elapsed:?}");
    assert!(reads >= 5, "{reads} reads in {elapsed:?}");
    eprintln!(
        "trickle {pause:?}: {} bytes in {reads} reads, {elapsed:?}",
        got.len()
    );

    proxy.set(Fault::None);
    assert_roundtrip(&mut stream, &cmd(&["GET", "k"]), &expected);
}

#[test]
fn reset_mid_reply_cuts_the_reply_and_resets_once() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let value = "v".repeat(100);
    let expected = format!("$100\r\n{value}\r\n").into_bytes();
    let mut stream = connect(&proxy);
    assert_roundtrip(&mut stream, &cmd(&["SET", "k", &value]), b"+OK\r\n");

    proxy.set(Fault::ResetMidReply);
    stream.write_all(&cmd(&["GET", "k"])).unwrap();
    let (got, end) = read_to_failure(&mut stream);
    assert_eq!(
        end,
        Some(ErrorKind::ConnectionReset),
        "after {}",
        show(&got)
    );
    // The first half of the reply's chunk (one chunk here: 54 of 108 bytes).
    assert!(
        !got.is_empty() && got.len() < expected.len(),
        "{}",
        show(&got)
    );
    assert_eq!(got, expected[..got.len()], "{}", show(&got));
    assert_eq!(proxy.stats().resets, 1);

    // One shot: the fault is gone, and a new connection is transparent.
    assert_eq!(proxy.fault(), Fault::None);
    let mut again = connect(&proxy);
    assert_roundtrip(&mut again, &cmd(&["GET", "k"]), &expected);
    assert_eq!(proxy.stats().resets, 1);
}

#[test]
fn refuse_resets_open_and_new_connections() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut open = connect(&proxy);
    assert_roundtrip(&mut open, PING, PONG);

    proxy.set(Fault::Refuse);
    let started = Instant::now();
    let (got, end) = read_to_failure(&mut open);
    assert_eq!(
        (got.as_slice(), end),
        (&[][..], Some(ErrorKind::ConnectionReset))
    );
    assert!(started.elapsed() < Duration::from_secs(1));

    // New connections complete the handshake, then fail at once: reset (or EOF), never a reply.
    for _ in 0..3 {
        let started = Instant::now();
        // The port is still bound: the handshake completes.
        let mut fresh = TcpStream::connect_timeout(&proxy.addr(), LONG).unwrap();
        fresh.set_read_timeout(Some(LONG)).unwrap();
        let (got, end) = match fresh.write_all(PING) {
            Ok(()) => read_to_failure(&mut fresh),
            Err(e) => (Vec::new(), Some(e.kind())),
        };
        assert!(got.is_empty(), "{}", show(&got));
        assert!(
            matches!(
                end,
                None | Some(ErrorKind::ConnectionReset | ErrorKind::BrokenPipe)
            ),
            "{end:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
    }
    let stats = proxy.stats();
    assert_eq!((stats.refused, stats.resets), (3, 4), "{stats:?}");

    proxy.set(Fault::None);
    let mut back = connect(&proxy);
    assert_roundtrip(&mut back, PING, PONG);
    assert_eq!(proxy.stats().accepted, 5);
}

#[test]
fn dead_upstream_shows_as_eof_then_reset() {
    let mut server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let mut open = connect(&proxy);
    assert_roundtrip(&mut open, PING, PONG);

    // The server dies: its FIN is passed on, so the open connection reads EOF.
    server.kill();
    assert_eq!(read_to_failure(&mut open), (Vec::new(), None));
    // A new connection: the proxy cannot dial upstream and resets the client. The reset may come before the
    // client's connect has returned (the kernel then reports it there), or after, on the first write or read.
    match TcpStream::connect_timeout(&proxy.addr(), LONG) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        Ok(mut fresh) => {
            fresh.set_read_timeout(Some(LONG)).unwrap();
            let _ = fresh.write_all(PING); // may already fail: the reset can come first
            let (got, end) = read_to_failure(&mut fresh);
            assert_eq!(
                (got.as_slice(), end),
                (&[][..], Some(ErrorKind::ConnectionReset))
            );
        }
    }
    // Not a fault of the proxy's own making.
    assert_eq!(proxy.stats().resets, 0);

    server.restart(); // same port
    assert_roundtrip(&mut connect(&proxy), PING, PONG);
}

#[test]
fn drop_stops_every_thread_promptly() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.addr());
    let prefix = proxy.thread_prefix();
    let value = "x".repeat(10_000);
    let mut streams: Vec<TcpStream> = (0..3).map(|_| connect(&proxy)).collect();
    assert_roundtrip(&mut streams[0], &cmd(&["SET", "k", &value]), b"+OK\r\n");
    for stream in &mut streams[1..] {
        assert_roundtrip(stream, PING, PONG);
    }
    // One connection mid-trickle of a long reply, one with a request held in a black hole.
    proxy.set(Fault::Trickle(Duration::from_millis(1)));
    streams[0].write_all(&cmd(&["GET", "k"])).unwrap();
    let mut first = [0u8; 1];
    streams[0].read_exact(&mut first).unwrap();
    proxy.set(Fault::BlackHole);
    streams[1].write_all(PING).unwrap();
    // An acceptor, and a reader and a writer per direction and connection.
    assert_eq!(threads_named(&prefix), 1 + 3 * 4);

    let started = Instant::now();
    drop(proxy);
    let took = started.elapsed();
    assert!(took < Duration::from_millis(500), "drop took {took:?}");
    eprintln!("drop with 3 connections: {took:?}");
    // Joined threads may linger in /proc for a moment while the kernel reaps them.
    wait_until(LONG, "no threads left behind", || {
        threads_named(&prefix) == 0
    });
    // Every client sees its connection closed.
    for stream in &mut streams {
        let (_, end) = read_to_failure(stream);
        assert!(
            matches!(end, None | Some(ErrorKind::ConnectionReset)),
            "{end:?}"
        );
    }
}
