//! TLS (`rediss://`) against real `redis-server`s started with `--tls-port` and certificates made for the run
//! (tests/support/certs.rs, with subject alternative names): lock and unlock on 3 nodes, a wrong CA, mutual TLS,
//! a node restarted, and the hostile peers that apply to TLS (one that stops mid-handshake, one that answers a
//! handshake with garbage, a plain port). A redis-server built without TLS fails these tests with a message
//! saying so (see `RedisServerBuilder::tls`).

use crate::support;

use std::io::Read;
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::thread;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use muxlock::net::{Fanout, NodeError, Options, Reply};
use muxlock::resp::{Value, encode_command};
use muxlock::{Config, Error, LockManager, Outcome, TlsConfig};
use support::acceptor::{Acceptor, is_retry};
use support::certs::Certs;
use support::locks::{self, wait_until};
use support::proxy::{Fault, FaultProxy};
use support::{Cluster, RedisServer, cmd};

const ROUND: Duration = Duration::from_millis(500);
const TTL: Duration = Duration::from_secs(10);
const DEADLINE: Duration = Duration::from_secs(2);
/// Well before [`DEADLINE`]: not a timeout.
const AT_ONCE: Duration = Duration::from_millis(1000);
/// Scheduling slack past a deadline (two CPUs, tests in parallel).
const MARGIN: Duration = Duration::from_millis(300);

/// Trusts the run's CA and presents its client certificate.
fn trusting(certs: &Certs) -> TlsConfig {
    TlsConfig::new()
        .with_ca_file(certs.path("ca.crt"))
        .with_client_cert(certs.path("client.crt"), certs.path("client.key"))
}

fn manager(urls: &[String], tls: TlsConfig) -> LockManager {
    locks::manager(
        urls.iter().cloned(),
        locks::one_attempt(ROUND).with_tls(tls),
    )
}

fn tls_cluster(certs: &Certs, n: usize, require_client_certs: bool) -> Cluster {
    Cluster::builder(n)
        .server(RedisServer::builder().tls(certs, require_client_certs))
        .start()
}

/// One `args` round to the only node of `fanout`.
#[track_caller]
fn ask(fanout: &Fanout, args: &[&[u8]], deadline: Duration) -> (Reply, Duration) {
    let mut request = BytesMut::new();
    encode_command(args, &mut request);
    let started = Instant::now();
    let mut round = fanout.round(started + deadline);
    round.send_all(&request, 1);
    let (_, reply) = round.next().expect("an outcome");
    (reply, started.elapsed())
}

fn fanout(url: &str, opts: Options) -> Fanout {
    Fanout::new(vec![url.parse().expect("url")], opts).expect("fanout")
}

/// The nodes that failed their vote with a TLS error, with their URLs: a majority (the others were not awaited).
#[track_caller]
fn tls_failures(err: &Error) -> Vec<(String, muxlock::TlsError)> {
    let report = err.report().expect("a report");
    let failed: Vec<(String, muxlock::TlsError)> = report
        .nodes()
        .iter()
        .filter_map(|(addr, outcome)| match outcome {
            Outcome::Failed(NodeError::Tls(e)) => Some((addr.to_string(), e.clone())),
            Outcome::NotAwaited => None,
            other => panic!("{addr}: want a TLS error, got {other}"),
        })
        .collect();
    assert!(failed.len() >= report.quorum() - 1, "{err}");
    failed
}

#[test]
fn lock_extend_and_unlock_over_tls_on_three_nodes() {
    let certs = Certs::generate();
    let cluster = tls_cluster(&certs, 3, true);
    let locks = manager(&cluster.tls_urls(), trusting(&certs));
    for i in 0..20 {
        let mut lock = locks
            .request(format!("tls:{i}"))
            .ttl(TTL)
            .acquire()
            .unwrap_or_else(|e| panic!("lock {i}: {e}"));
        assert!(lock.is_valid());
        locks.extend(&mut lock, TTL).expect("extend");
        // Held over TLS: another attempt finds it taken.
        assert!(
            locks
                .request(format!("tls:{i}"))
                .ttl(TTL)
                .once()
                .acquire()
                .expect_err("try")
                .is_held()
        );
        // A release returns at the majority's confirmations.
        assert!(locks.unlock(lock).expect("unlock") >= 2);
    }
    // One connection per node, set up once: the session was not renegotiated per call.
    for node in locks.stats().nodes {
        assert_eq!(node.net.connects, 1, "{node:?}");
    }
}

/// A manager dials its nodes when it is built, and nobody polls until the first call: the TLS handshakes can
/// only start then. A manager left idle for longer than the connect timeout must not blame its nodes for it.
#[test]
fn a_manager_left_idle_past_the_connect_timeout_locks_on_its_first_call() {
    let certs = Certs::generate();
    let cluster = tls_cluster(&certs, 3, true);
    let connect = Duration::from_millis(200);
    let config = locks::one_attempt(ROUND)
        .with_connect_timeout(connect)
        .with_tls(trusting(&certs));
    let locks = locks::manager(cluster.tls_urls(), config);
    thread::sleep(connect * 3);
    let lock = locks
        .request("idle")
        .ttl(TTL)
        .acquire()
        .expect("the first call");
    assert!(locks.unlock(lock).expect("unlock") >= 2);
    for node in locks.stats().nodes {
        assert_eq!(node.net.connects, 1, "{node:?}");
    }
}

/// Replies that span many TLS records and many socket reads arrive whole: a 2 MiB value, and 1,000 pipelined
/// commands whose replies come in pieces (a read that drains the socket stops there; the rest raises a new event).
#[test]
fn a_large_reply_and_a_deep_pipeline_arrive_whole_over_tls() {
    let certs = Certs::generate();
    let server = RedisServer::builder().tls(&certs, false).start();
    let value: String = (0..2 << 20)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    assert_eq!(server.raw(&cmd(&["SET", "big", &value])), b"+OK\r\n");
    let opts = Options::default().with_tls(TlsConfig::new().with_ca_file(certs.path("ca.crt")));
    let node = fanout(&server.tls_url(), opts);
    for _ in 0..3 {
        let (reply, _) = ask(&node, &[b"GET", b"big"], Duration::from_secs(10));
        match reply {
            Ok(Value::BulkString(b)) => assert!(b[..] == *value.as_bytes(), "{} bytes", b.len()),
            other => panic!("GET big: {other:?}"),
        }
    }
    let mut request = BytesMut::new();
    for i in 0..1000 {
        encode_command(&[b"ECHO", format!("reply {i}").as_bytes()], &mut request);
    }
    let mut round = node.round(Instant::now() + Duration::from_secs(10));
    round.send_all(&request, 1000);
    let replies: Vec<Value> = std::iter::from_fn(|| round.next())
        .map(|(_, r)| r.expect("a reply"))
        .collect();
    assert_eq!(replies.len(), 1000);
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(
            *r,
            Value::BulkString(format!("reply {i}").into()),
            "reply {i}"
        );
    }
}

#[test]
fn resp3_with_a_password_logs_in_with_hello_over_tls() {
    let certs = Certs::generate();
    let server = RedisServer::builder()
        .tls(&certs, false)
        .requirepass("s3cret")
        .start();
    let url = format!(
        "rediss://:s3cret@127.0.0.1:{}?protocol=resp3",
        server.tls_port()
    );
    let opts = Options::default().with_tls(TlsConfig::new().with_ca_file(certs.path("ca.crt")));
    let node = fanout(&url, opts);
    let (reply, _) = ask(&node, &[b"HELLO"], DEADLINE);
    let map = match reply {
        Ok(Value::Map(map)) => map,
        other => panic!("HELLO over RESP3: {other:?}"),
    };
    assert!(
        map.contains(&(Value::BulkString("proto".into()), Value::Integer(3))),
        "{map:?}"
    );
    // A wrong password is an authentication error, from HELLO 3 AUTH.
    let url = format!(
        "rediss://:wrong@127.0.0.1:{}?protocol=resp3",
        server.tls_port()
    );
    let opts = Options::default().with_tls(TlsConfig::new().with_ca_file(certs.path("ca.crt")));
    let (reply, _) = ask(&fanout(&url, opts), &[b"PING"], DEADLINE);
    assert!(
        matches!(reply, Err(NodeError::Auth(ref m)) if m.starts_with("WRONGPASS")),
        "{reply:?}"
    );
}

#[test]
fn a_wrong_ca_is_a_certificate_error_naming_the_node() {
    let certs = Certs::generate();
    let cluster = tls_cluster(&certs, 3, false);
    let tls = TlsConfig::new().with_ca_file(certs.path("other-ca.crt"));
    let locks = manager(&cluster.tls_urls(), tls);
    let started = Instant::now();
    let err = locks
        .request("res")
        .ttl(TTL)
        .acquire()
        .expect_err("no node is trusted");
    assert!(
        started.elapsed() < ROUND + MARGIN,
        "took {:?}",
        started.elapsed()
    );
    assert!(err.is_quorum(), "{err}");
    for (url, e) in &tls_failures(&err) {
        assert!(e.is_certificate(), "{e}");
        assert_eq!(e.server(), "127.0.0.1");
        let shown = e.to_string();
        assert!(
            shown.contains("certificate") && shown.contains("UnknownIssuer"),
            "{shown}"
        );
        // The message names the node; the rustls error is the source.
        assert!(
            err.to_string()
                .contains(&format!("{url}: TLS with 127.0.0.1")),
            "{err}"
        );
        let source = std::error::Error::source(e).expect("rustls' error");
        assert!(source.to_string().contains("UnknownIssuer"), "{source}");
    }
    // No CA file at all: the platform's roots do not know the run's CA either.
    let err = manager(&cluster.tls_urls(), TlsConfig::new());
    match err.request("res").ttl(TTL).acquire() {
        Err(e) => assert!(
            tls_failures(&e).iter().all(|(_, t)| t.is_certificate()),
            "{e}"
        ),
        Ok(_) => panic!("a private CA is not among the platform's roots"),
    }
    // `#insecure` (tests only) skips verification: the lock works.
    let insecure: Vec<String> = cluster
        .tls_urls()
        .iter()
        .map(|u| format!("{u}#insecure"))
        .collect();
    let locks = manager(
        &insecure,
        TlsConfig::new().with_ca_file(certs.path("other-ca.crt")),
    );
    let lock = locks.request("res").ttl(TTL).acquire().expect("unverified");
    assert!(locks.unlock(lock).expect("unlock") >= 2);
}

#[test]
fn mutual_tls_needs_the_client_certificate_when_the_server_asks() {
    let certs = Certs::generate();
    let cluster = tls_cluster(&certs, 3, true);
    let without = TlsConfig::new().with_ca_file(certs.path("ca.crt"));
    let err = manager(&cluster.tls_urls(), without)
        .request("res")
        .ttl(TTL)
        .acquire()
        .expect_err("no client certificate");
    for (_, e) in tls_failures(&err) {
        assert!(e.is_certificate(), "{e}");
        assert!(e.to_string().contains("client certificate"), "{e}");
    }
    let locks = manager(&cluster.tls_urls(), trusting(&certs));
    let lock = locks
        .request("res")
        .ttl(TTL)
        .acquire()
        .expect("with the client certificate");
    assert!(locks.unlock(lock).expect("unlock") >= 2);
}

#[test]
fn a_node_restarted_over_tls_is_reconnected() {
    let certs = Certs::generate();
    let mut cluster = tls_cluster(&certs, 3, true);
    let locks = manager(&cluster.tls_urls(), trusting(&certs));
    let lock = locks.request("before").ttl(TTL).acquire().expect("all up");
    locks.unlock(lock).expect("released");
    cluster.restart(1);
    // Until the client notices, node 1 fails its vote; the other two still lock.
    let lock = locks
        .request("during")
        .ttl(TTL)
        .acquire()
        .expect("two of three");
    locks.unlock(lock).expect("released");
    let granted = locks.stats().nodes[1].granted;
    let mut i = 0;
    wait_until(Duration::from_secs(10), "node 1 back over TLS", || {
        i += 1;
        let lock = locks
            .request(format!("after{i}"))
            .ttl(TTL)
            .acquire()
            .expect("a majority");
        locks.unlock(lock).expect("released");
        locks.stats().nodes[1].granted > granted
    });
    assert!(locks.stats().nodes[1].net.connects >= 2);
}

/// Waits until every node of `cluster` has a client with tracking on: the watchdog's tracker connections, which
/// reach `rediss://` nodes over TLS like the manager's own, are up and armed.
#[track_caller]
fn wait_for_tracking(cluster: &Cluster) {
    wait_until(
        Duration::from_secs(5),
        "tracker connections over TLS",
        || {
            cluster.nodes().iter().all(|node| {
                let list = node.raw(&cmd(&["CLIENT", "LIST"]));
                String::from_utf8_lossy(&list).lines().any(|l| {
                    l.split(' ')
                        .any(|f| f.starts_with("flags=") && f.contains('t'))
                })
            })
        },
    );
}

/// Guards and waiting on `rediss://` nodes, the watchdog's tracker connections included (they take the manager's
/// TLS settings): a guard is renewed past its TTL, is lost at once when its key is deleted on a majority (only
/// tracking can tell that before its next renewal), and a waiter of another manager is woken by the release,
/// not by its retry timer.
#[test]
fn guards_and_waiters_work_over_tls_tracker_included() {
    let certs = Certs::generate();
    let cluster = tls_cluster(&certs, 3, true);
    let urls = cluster.tls_urls();
    // A short round, so that a short lease can be renewed (a guard's TTL must leave room for a renewal round);
    // retries, because the first call also makes the TLS handshakes, which a busy machine can stretch past it.
    let holder = locks::manager(
        urls.iter().cloned(),
        locks::one_attempt(Duration::from_millis(150))
            .with_retry_count(5)
            .with_tls(trusting(&certs)),
    );
    // A waiter that polled would wake after its retry delay: make that long, so a wake-up by tracking shows.
    let slow_poll = locks::one_attempt(ROUND)
        .with_retry_delay(Duration::from_secs(3))
        .with_retry_jitter(Duration::ZERO)
        .with_tls(trusting(&certs));
    let waiter = locks::manager(urls.iter().cloned(), slow_poll);

    // Renewed by the watchdog, over TLS, past its TTL (a renewal is due at a third of it).
    let ttl = Duration::from_millis(1200);
    let renewed = holder.request("tls:renewed").ttl(ttl).hold().expect("hold");
    wait_until(Duration::from_secs(10), "four renewals", || {
        renewed.renewals() >= 4
    });
    assert!(!renewed.is_lost(), "{:?}", renewed.lost());
    renewed.release().expect("release");

    // Lost at once when its key is deleted on a majority: the tracker's invalidations, over TLS.
    let guard = holder.request("tls:deleted").ttl(TTL).hold().expect("hold");
    wait_for_tracking(&cluster);
    thread::sleep(Duration::from_millis(100)); // the watchdog's first check of the key has run
    for node in &cluster.nodes()[..2] {
        node.raw(&cmd(&["DEL", "tls:deleted"]));
    }
    let deleted = Instant::now();
    assert!(guard.wait_lost(Duration::from_secs(2)), "not lost");
    let took = deleted.elapsed();
    assert!(took < Duration::from_millis(500), "told after {took:?}");
    assert_eq!(guard.renewals(), 0);

    // A waiter of another manager is woken by the release (its tracker saw the key go), not by a poll.
    let guard = holder.request("tls:waited").ttl(TTL).hold().expect("hold");
    let (tx, rx) = std::sync::mpsc::channel();
    let t = thread::spawn(move || {
        let got = waiter
            .request("tls:waited")
            .ttl(TTL)
            .wait(Duration::from_secs(10))
            .acquire();
        tx.send(Instant::now()).expect("send");
        got.map(|lock| waiter.unlock(lock))
    });
    // It has tried, found the lock held, and sleeps. (Its watchdog also wakes it once, up to a second after its
    // tracker connected, to look again: by now that has passed, and only the release or its timer can wake it.)
    thread::sleep(Duration::from_millis(1500));
    assert!(rx.try_recv().is_err(), "returned while held");
    guard.release().expect("release");
    let released = Instant::now();
    let woke = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter returns");
    let took = woke.saturating_duration_since(released);
    assert!(t.join().expect("join").expect("locked").is_ok(), "unlocked");
    // A poll would take the 3 s retry delay; a tracking wake-up takes a few round trips.
    assert!(took < Duration::from_millis(500), "hand-off took {took:?}");
}

/// A loopback TCP server that runs `serve` on each connection's socket (blocking, short timeouts).
fn raw_server(
    serve: impl Fn(std::net::TcpStream, &AtomicBool) + Send + Sync + 'static,
) -> Acceptor {
    let stop = Arc::new(AtomicBool::new(false));
    let serve = Arc::new(serve);
    let flag = Arc::clone(&stop);
    Acceptor::start("raw server", "raw-", "conn", stop, move |client| {
        let (serve, flag) = (Arc::clone(&serve), Arc::clone(&flag));
        Some(move || {
            let _ = client.set_read_timeout(Some(Duration::from_millis(5)));
            serve(client, &flag);
        })
    })
}

/// Reads and drops what the client sends until it hangs up or the server stops.
fn drain(mut client: &std::net::TcpStream, stop: &AtomicBool) {
    let mut sink = [0u8; 4096];
    while !stop.load(SeqCst) {
        match client.read(&mut sink) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_retry(&e) => {}
            Err(_) => return,
        }
    }
}

#[test]
fn a_peer_that_stops_mid_handshake_fails_at_the_connect_timeout() {
    // It accepts, reads the ClientHello, and never answers.
    let silent = raw_server(|client, stop| drain(&client, stop));
    let url = format!("rediss://127.0.0.1:{}#insecure", silent.addr().port());
    let connect = Duration::from_millis(300);
    let node = fanout(&url, Options::default().with_connect_timeout(connect));
    let deadline = Duration::from_millis(600);
    let (reply, took) = ask(&node, &[b"PING"], deadline);
    // Judged when the round's turn reads the sockets at its deadline: past the connect timeout by then.
    assert_eq!(reply, Err(NodeError::ConnectTimeout));
    assert!(took >= connect && took < deadline + MARGIN, "took {took:?}");
    assert!(!node.is_up(0));
    // A real server paused mid-handshake: the same.
    let certs = Certs::generate();
    let mut server = RedisServer::builder().tls(&certs, false).start();
    server.pause();
    let opts = Options::default()
        .with_connect_timeout(connect)
        .with_tls(TlsConfig::new().with_ca_file(certs.path("ca.crt")));
    let node = fanout(&server.tls_url(), opts);
    let (reply, _) = ask(&node, &[b"PING"], deadline);
    assert_eq!(reply, Err(NodeError::ConnectTimeout));
    server.resume();
    wait_until(Duration::from_secs(5), "the node after SIGCONT", || {
        ask(&node, &[b"PING"], DEADLINE).0 == Ok(Value::SimpleString("PONG".into()))
    });
}

#[test]
fn garbage_instead_of_a_handshake_is_a_tls_error_at_once() {
    let http = raw_server(|mut client, stop| {
        let mut hello = [0u8; 512];
        let _ = client.read(&mut hello);
        let _ = std::io::Write::write_all(&mut client, b"HTTP/1.1 400 Bad Request\r\n\r\n");
        let _ = client.shutdown(Shutdown::Write);
        drain(&client, stop);
    });
    let url = format!("rediss://127.0.0.1:{}#insecure", http.addr().port());
    let (reply, took) = ask(&fanout(&url, Options::default()), &[b"PING"], DEADLINE);
    match &reply {
        Err(NodeError::Tls(e)) => {
            assert!(!e.is_certificate(), "{e}");
            assert!(e.to_string().contains("does not speak TLS"), "{e}");
        }
        other => panic!("want a TLS error, got {other:?}"),
    }
    assert!(took < AT_ONCE, "took {took:?}");
    // A plain Redis port behind a rediss:// URL: Redis reads the ClientHello as the start of an inline command
    // and waits for its end, so the handshake never completes: the connect timeout ends it.
    let plain = RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}#insecure", plain.port());
    let opts = Options::default().with_connect_timeout(Duration::from_millis(300));
    let (reply, _) = ask(&fanout(&url, opts), &[b"PING"], Duration::from_millis(600));
    assert!(
        matches!(
            reply,
            Err(NodeError::Tls(_) | NodeError::Closed | NodeError::ConnectTimeout)
        ),
        "{reply:?}"
    );
    // And the other way round: redis:// to a TLS port gets no RESP back; the handshake's absence is a close or
    // a timeout, never a reply.
    let certs = Certs::generate();
    let server = RedisServer::builder().tls(&certs, false).start();
    let url = format!("redis://127.0.0.1:{}", server.tls_port());
    let (reply, _) = ask(
        &fanout(&url, Options::default()),
        &[b"PING"],
        Duration::from_millis(500),
    );
    assert!(reply.is_err(), "{reply:?}");
}

#[test]
fn tls_files_that_cannot_be_used_are_configuration_errors() {
    let certs = Certs::generate();
    let node = ["rediss://127.0.0.1:6399"];
    let cases = [
        (
            TlsConfig::new().with_ca_file(certs.path("missing.crt")),
            "CA file",
        ),
        (
            TlsConfig::new().with_ca_file(certs.path("server.key")),
            "no CERTIFICATE",
        ),
        (
            TlsConfig::new().with_client_cert(certs.path("client.crt"), certs.path("ca.crt")),
            "client key",
        ),
    ];
    for (tls, want) in cases {
        let err = LockManager::builder()
            .nodes(node)
            .config(Config::default().with_tls(tls))
            .build()
            .expect_err(want);
        assert!(err.is_config() && err.to_string().contains(want), "{err}");
    }
    // Plain nodes ignore the TLS settings, even unusable ones.
    LockManager::builder()
        .node("redis://127.0.0.1:6399")
        .config(Config::default().with_tls(TlsConfig::new().with_ca_file("/nonexistent")))
        .build()
        .expect("no TLS node");
}

#[test]
fn passwords_never_show_in_debug_display_or_errors() {
    let certs = Certs::generate();
    let server = RedisServer::builder()
        .tls(&certs, false)
        .requirepass("s3cret")
        .start();
    let url = format!("rediss://locker:topsecret@127.0.0.1:{}", server.tls_port());
    let locks = manager(
        std::slice::from_ref(&url),
        TlsConfig::new().with_ca_file(certs.path("ca.crt")),
    );
    let err = locks
        .request("res")
        .ttl(TTL)
        .acquire()
        .expect_err("wrong user");
    assert!(err.is_auth(), "{err}");
    assert!(
        err.to_string().contains("rediss://locker:***@127.0.0.1"),
        "{err}"
    );
    let shown = format!(
        "{err} {err:?} {locks:?} {:?} {} {:?}",
        locks.config(),
        locks.stats(),
        locks.nodes()
    );
    assert!(!shown.contains("topsecret"), "{shown}");
    let addr: muxlock::NodeAddr = url.parse().expect("url");
    assert!(!format!("{addr} {addr:?}").contains("topsecret"));
}

/// The servers close idle client connections (`timeout 1`) over TLS, where a closing server sends its
/// `close_notify` alert before the end of the stream (redis-server does): a lock is taken, the manager is left
/// idle until every node has closed its connection, then the lock is released. Every node is up and answers;
/// the release must reach each of them (a majority confirming, the key gone everywhere soon after), not be
/// written into connections the nodes had already closed and be lost there, the keys left until their lease ends.
#[test]
fn a_release_on_tls_connections_the_servers_closed_as_idle_still_deletes_the_keys() {
    let certs = Certs::generate();
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| {
            RedisServer::builder()
                .tls(&certs, true)
                .arg("--timeout")
                .arg("1")
                .start()
        })
        .collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::tls_url).collect();
    let locks = manager(&urls, trusting(&certs));
    let lock = locks
        .request("tls-idle:a")
        .ttl(Duration::from_secs(30))
        .once()
        .acquire()
        .expect("granted by the three nodes");
    // Each node closed the manager's connection: the only client left is the one asking (on the plain port).
    wait_until(
        Duration::from_secs(10),
        "the nodes closed the idle connections",
        || {
            servers.iter().all(|s| {
                String::from_utf8_lossy(&s.raw(&cmd(&["INFO", "clients"])))
                    .contains("connected_clients:1\r\n")
            })
        },
    );
    let released = locks.unlock(lock);
    assert!(
        matches!(released, Ok(n) if n >= 2),
        "the release of a lock held on three live nodes: {released:?}"
    );
    let holding = || -> Vec<usize> {
        (0..3)
            .filter(|&i| servers[i].raw(&cmd(&["EXISTS", "tls-idle:a"])) == b":1\r\n")
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while !holding().is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let left = holding();
    assert!(
        left.is_empty(),
        "released ({released:?}), yet the key is left on nodes {left:?}: {:?}",
        locks.stats().nodes
    );
}

/// A release round dropped at once (an unawaited clean-up) while its node's TLS handshake is still under way: the
/// request must go out when the handshake completes, with nobody waiting for it. A proxy slows the handshake
/// (200 ms each way), so the round and its caller are gone long before the server's flight arrives; only a driver
/// kept turning for the queued request reads that flight, sends the Finished message and then the release. (The
/// same happens when a lock's release ends at a majority while one node is still re-connecting.)
#[test]
fn a_release_queued_during_a_slow_tls_handshake_goes_out_when_the_handshake_completes() {
    let certs = Certs::generate();
    let server = RedisServer::builder().tls(&certs, false).start();
    assert_eq!(server.raw(&cmd(&["SET", "tls-slow:a", "held"])), b"+OK\r\n");
    let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], server.tls_port())));
    proxy.set(Fault::Latency(Duration::from_millis(200)));
    let opts = Options::default()
        .with_connect_timeout(Duration::from_secs(5))
        .with_tls(TlsConfig::new().with_ca_file(certs.path("ca.crt")));
    let node = fanout(&format!("rediss://127.0.0.1:{}", proxy.port()), opts);
    let mut request = BytesMut::new();
    encode_command(&[b"DEL", b"tls-slow:a"], &mut request);
    let mut round = node.release_round(Instant::now() + Duration::from_secs(10));
    round.send_all(&request, 1);
    drop(round);
    wait_until(
        Duration::from_secs(5),
        "the release reached the node",
        || server.raw(&cmd(&["EXISTS", "tls-slow:a"])) == b":0\r\n",
    );
    let stats = node.stats(0);
    assert_eq!((stats.connects, stats.drops), (1, 0), "{stats:?}");
}
