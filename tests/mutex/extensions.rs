//! Extensions that fail after they ran: an extension to a shorter lease sets the key's new expiry on every node
//! that runs it, whether or not its reply is counted. The holder must then count its lease no longer than those
//! nodes keep the key, or a second client gets the lock while the first still counts it held. Each kind's
//! extension (the compare-and-pexpire of a plain or fenced key, a set's script, an owned hold's script) is run
//! against real servers, a majority of them paused while the extension is under way, its verdict awaited or its
//! future dropped before one (an async caller that gave up: the requests went out all the same). (An owned
//! hold's script keeps the longer of the key's expiry and the new TTL, so its nodes never shorten it; the
//! holder's cut is checked all the same.) An extension may also run after a later one: sent into a partition on
//! a connection then dropped as hung, it reaches the node when the partition heals, after the next extension
//! went on a new connection ([`LateBytes`] holds the old connection's bytes).

use std::time::{Duration, Instant};

use muxlock::redlock::{Config, LockManager};

use super::support::{Cluster, locks};

/// The lease taken, and the shorter one the failed extension asks for.
const TTL: Duration = Duration::from_secs(10);
const SHORTER: Duration = Duration::from_millis(1_500);

fn config() -> Config {
    Config::default()
        .with_restart_guard(false)
        .with_retry_count(0)
        .with_round_timeout(Duration::from_millis(100))
}

/// How each kind is acquired: one resource, a set, a fenced lock, an owned hold.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    Set,
    Fenced,
    Owned,
}

fn acquire(locks: &LockManager, kind: Kind, name: &str) -> Result<muxlock::Lock, muxlock::Error> {
    let set = [format!("{name}:a"), format!("{name}:b")];
    match kind {
        Kind::Plain => locks.request(name).ttl(TTL).once().acquire(),
        Kind::Set => locks.request_all(&set).ttl(TTL).once().acquire(),
        Kind::Fenced => locks.request(name).fenced().ttl(TTL).once().acquire(),
        Kind::Owned => {
            let owner = locks.owner()?;
            locks.request(name).owned(&owner).ttl(TTL).once().acquire()
        }
    }
}

/// Waits until every node holds `held`'s first key (an acquisition is decided by the first two replies).
fn on_every_node(cluster: &Cluster, held: &muxlock::Lock) {
    let key = String::from_utf8_lossy(&held.resources()[0]).into_owned();
    for node in cluster.nodes() {
        locks::wait_until(Duration::from_secs(2), "A's key on every node", || {
            node.raw(&crate::support::cmd(&["EXISTS", &key])) == b":1\r\n"
        });
    }
}

/// B tries until it gets the lock (the keys expire once the resumed nodes ran A's shorter extension); A's
/// lease must be over by then.
fn assert_over_when_b_holds(b: &LockManager, kind: Kind, name: &str, held: &muxlock::Lock) {
    let until = Instant::now() + TTL;
    let second = loop {
        if let Ok(lock) = acquire(b, kind, name) {
            break lock;
        }
        assert!(
            Instant::now() < until,
            "{kind:?}: B never got the lock, though the extension ran on nodes 1 and 2"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !held.is_valid(),
        "{kind:?}: two holders: A counts its lease {:?} more while B holds for {:?}",
        held.validity(),
        second.validity()
    );
}

/// A holds a lock on all three nodes; nodes 1 and 2 are paused while A extends it to [`SHORTER`]: the extension
/// fails (their replies come after the round), and runs there as they resume. Once those keys expire, B gets
/// the lock: A's lease must be over by then.
fn failed_shorter_extension(kind: Kind) {
    let mut cluster = Cluster::start(3);
    let (a, b) = (
        locks::manager(cluster.urls(), config()),
        locks::manager(cluster.urls(), config()),
    );
    let name = format!("ext:{kind:?}");
    let mut held = acquire(&a, kind, &name).expect("A's lock");
    on_every_node(&cluster, &held);
    cluster.pause(1);
    cluster.pause(2);
    let extended = a.extend(&mut held, SHORTER);
    cluster.resume(1);
    cluster.resume(2);
    assert!(
        extended.is_err(),
        "{kind:?}: the extension counted though a majority was paused"
    );
    assert_over_when_b_holds(&b, kind, &name, &held);
}

#[test]
fn a_plain_lock_whose_shorter_extension_failed_ends_its_lease_before_another_holder() {
    failed_shorter_extension(Kind::Plain);
}

#[test]
fn a_set_whose_shorter_extension_failed_ends_its_lease_before_another_holder() {
    failed_shorter_extension(Kind::Set);
}

#[test]
fn a_fenced_lock_whose_shorter_extension_failed_ends_its_lease_before_another_holder() {
    failed_shorter_extension(Kind::Fenced);
}

#[test]
fn an_owned_hold_whose_shorter_extension_failed_ends_its_lease_before_another_holder() {
    failed_shorter_extension(Kind::Owned);
}

/// As [`failed_shorter_extension`], but A gives up on the extension instead of waiting for its verdict: its
/// `extend_async` future is dropped (a timeout around it) while nodes 1 and 2 are paused. The extension was sent,
/// and runs there as they resume; once those keys expire B gets the lock, and A's lease must be over by then.
fn abandoned_shorter_extension(kind: Kind) {
    let mut cluster = Cluster::start(3);
    let (a, b) = (
        locks::manager(cluster.urls(), config()),
        locks::manager(cluster.urls(), config()),
    );
    let name = format!("abandoned:{kind:?}");
    let mut held = acquire(&a, kind, &name).expect("A's lock");
    on_every_node(&cluster, &held);
    cluster.pause(1);
    cluster.pause(2);
    // Given up well within the round (100 ms): no verdict, the requests already written to every node.
    let abandoned = crate::support::rt::current_thread().block_on(async {
        tokio::time::timeout(
            Duration::from_millis(30),
            a.extend_async(&mut held, SHORTER),
        )
        .await
    });
    cluster.resume(1);
    cluster.resume(2);
    assert!(
        abandoned.is_err(),
        "{kind:?}: the extension ended before it was given up: {abandoned:?}"
    );
    assert_over_when_b_holds(&b, kind, &name, &held);
}

#[test]
fn a_plain_lock_whose_shorter_extension_was_abandoned_ends_its_lease_before_another_holder() {
    abandoned_shorter_extension(Kind::Plain);
}

#[test]
fn a_set_whose_shorter_extension_was_abandoned_ends_its_lease_before_another_holder() {
    abandoned_shorter_extension(Kind::Set);
}

#[test]
fn a_fenced_lock_whose_shorter_extension_was_abandoned_ends_its_lease_before_another_holder() {
    abandoned_shorter_extension(Kind::Fenced);
}

/// A loopback proxy to one server whose connections, from [`hold`](LateBytes::hold) on, forward nothing to the
/// server until [`deliver`](LateBytes::deliver): what TCP does with a request sent into a partition on a
/// connection the client then closed (its kernel retransmits, and the server's accepts the bytes once the path
/// heals). Connections accepted after `hold` pass at once: the client's new connection while the old one's
/// bytes are still on their way. Dropped, it accepts no more; its connections' threads end as their sockets close.
struct LateBytes {
    addr: std::net::SocketAddr,
    /// Connections numbered below this are held.
    held_below: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Held connections the client closed: their upstream socket and the bytes that never went.
    stash: std::sync::Arc<std::sync::Mutex<Vec<Undelivered>>>,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// A held connection the client closed: its upstream socket, and the bytes that never went.
type Undelivered = (std::net::TcpStream, Vec<u8>);

impl Drop for LateBytes {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accepting thread, which then sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

impl LateBytes {
    fn start(upstream: std::net::SocketAddr) -> LateBytes {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering::SeqCst;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let proxy = LateBytes {
            addr: listener.local_addr().expect("addr"),
            held_below: Default::default(),
            stash: Default::default(),
            accepted: Default::default(),
            stop: Default::default(),
        };
        let (held_below, stash, accepted, stop) = (
            proxy.held_below.clone(),
            proxy.stash.clone(),
            proxy.accepted.clone(),
            proxy.stop.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(mut client) = client else { return };
                if stop.load(SeqCst) {
                    return;
                }
                let id = accepted.fetch_add(1, SeqCst);
                let Ok(mut server) = std::net::TcpStream::connect(upstream) else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut down_from, mut down_to) = (
                    server.try_clone().expect("clone"),
                    client.try_clone().expect("clone"),
                );
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut down_from, &mut down_to);
                });
                let (held_below, stash) = (held_below.clone(), stash.clone());
                std::thread::spawn(move || {
                    let _ = client.set_read_timeout(Some(Duration::from_millis(5)));
                    let mut kept = Vec::new();
                    let mut buf = [0u8; 16 * 1024];
                    loop {
                        let read = client.read(&mut buf);
                        let held = id < held_below.load(SeqCst);
                        let closed = match read {
                            Ok(0) => true,
                            Ok(n) if held => {
                                kept.extend_from_slice(&buf[..n]);
                                false
                            }
                            Ok(n) => server.write_all(&buf[..n]).is_err(),
                            Err(e) => !matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ),
                        };
                        if closed {
                            if held {
                                let mut stash = stash.lock().unwrap_or_else(|e| e.into_inner());
                                stash.push((server, kept));
                            }
                            return;
                        }
                    }
                });
            }
        });
        proxy
    }

    fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// From now on the connections open now forward nothing to the server.
    fn hold(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        self.held_below.store(self.accepted.load(SeqCst), SeqCst);
    }

    /// Writes to the server what the held connections the client closed since sent, and closes them. Returns how
    /// many there were.
    fn deliver(&self) -> usize {
        use std::io::Write;
        let stash = std::mem::take(&mut *self.stash.lock().unwrap_or_else(|e| e.into_inner()));
        let n = stash.len();
        for (mut server, bytes) in stash {
            let _ = server.write_all(&bytes);
            // Read what the server answers before closing, so that it ran it all.
            let _ = server.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = std::io::Read::read(&mut server, &mut [0u8; 4096]);
        }
        n
    }
}

/// A's extension to a shorter lease goes into a partition on nodes 1 and 2 and fails; A's connections there are
/// dropped as hung, and A extends again, to a long lease, on new connections: granted by all three. Then the
/// partition heals and the first extension's bytes, still on their way on the old connections, reach nodes 1 and
/// 2, which run it after the second: their keys now end the short TTL after that. Once they expire B gets the
/// lock: A's lease (counted from the second extension) must be over by then.
#[test]
fn an_extension_delivered_after_a_later_longer_one_ends_the_lease_before_another_holder() {
    let cluster = Cluster::start(3);
    let proxies: Vec<LateBytes> = cluster.addrs()[1..]
        .iter()
        .map(|&a| LateBytes::start(a))
        .collect();
    let urls = vec![
        cluster.urls()[0].clone(),
        proxies[0].url(),
        proxies[1].url(),
    ];
    let config = config().with_hung_timeout(Duration::from_millis(300));
    let (a, b) = (
        locks::manager(urls.clone(), config.clone()),
        locks::manager(cluster.urls(), config),
    );
    let name = "late:plain";
    let long = Duration::from_secs(30);
    let mut held = a
        .request(name)
        .ttl(long)
        .once()
        .acquire()
        .expect("A's lock");
    // Every node holds A's key (its connections through the proxies are open) before they hold.
    for node in cluster.nodes() {
        locks::wait_until(Duration::from_secs(2), "A's key on every node", || {
            node.raw(&crate::support::cmd(&["EXISTS", name])) == b":1\r\n"
        });
    }
    for p in &proxies {
        p.hold();
    }
    let shorter = Duration::from_secs(3);
    assert!(
        a.extend(&mut held, shorter).is_err(),
        "the extension counted though its bytes never reached nodes 1 and 2"
    );
    // Past the hung timeout, a read's round drops the silent connections (nothing but the read is on them).
    std::thread::sleep(Duration::from_millis(400));
    let _ = a.inspect(name);
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        match a.extend(&mut held, long) {
            Ok(()) => break,
            Err(e) => assert!(
                Instant::now() < until,
                "the long extension never went through on new connections: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The long extension returned at a majority: the late bytes go only once nodes 1 and 2 both ran it, so that
    // they run the shorter one after it (delivered before it on one of them, it would be undone there, and B
    // would wait out A's long lease, which shows nothing).
    for node in &cluster.nodes()[1..] {
        locks::wait_until(
            Duration::from_secs(2),
            "the long extension on nodes 1 and 2",
            || {
                let reply = node.raw(&crate::support::cmd(&["PTTL", name]));
                std::str::from_utf8(&reply)
                    .ok()
                    .and_then(|r| r.trim().strip_prefix(':'))
                    .and_then(|ms| ms.parse::<i64>().ok())
                    .is_some_and(|ms| ms > 10_000)
            },
        );
    }
    let late: usize = proxies.iter().map(LateBytes::deliver).sum();
    assert!(late >= 2, "the old connections were not closed: {late}");
    // The shortened keys end `shorter` after the late bytes ran: B gets the lock well before A's long lease could
    // have ended, or the history did not happen.
    let until = Instant::now() + shorter + Duration::from_secs(5);
    let second = loop {
        if let Ok(lock) = b.request(name).ttl(long).once().acquire() {
            break lock;
        }
        assert!(
            Instant::now() < until,
            "B never got the lock: the late extension did not shorten the keys"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !held.is_valid(),
        "two holders: A counts its lease {:?} more while B holds for {:?}",
        held.validity(),
        second.validity()
    );
}
