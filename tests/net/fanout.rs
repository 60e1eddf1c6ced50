//! The network layer against real redis-server processes: fan-out, failures, set-up, concurrency.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use muxlock::net::{CommandId, Fanout, NodeAddr, NodeError, Options};
use muxlock::resp::{Value, encode_command};
use support::proxy::{Fault, FaultProxy};
use support::{Cluster, RedisServer};

fn request(args: &[&[u8]]) -> BytesMut {
    let mut buf = BytesMut::new();
    encode_command(args, &mut buf);
    buf
}

fn addrs(urls: &[String]) -> Vec<NodeAddr> {
    urls.iter().map(|u| u.parse().expect("url")).collect()
}

/// Runs one round of `args` on every node and returns each node's outcome, by node index.
#[track_caller]
fn round_all(fanout: &Fanout, args: &[&[u8]], timeout: Duration) -> Vec<Result<Value, NodeError>> {
    let mut out: Vec<Option<Result<Value, NodeError>>> = vec![None; fanout.len()];
    let mut round = fanout.round(Instant::now() + timeout);
    round.send_all(&request(args), 1);
    while let Some((CommandId { node, .. }, reply)) = round.next() {
        assert!(out[node].is_none(), "two outcomes for node {node}");
        out[node] = Some(reply);
    }
    out.into_iter()
        .map(|o| o.expect("every node has an outcome"))
        .collect()
}

fn ok(s: &str) -> Result<Value, NodeError> {
    Ok(Value::SimpleString(s.to_owned().into()))
}

#[test]
fn a_round_reaches_every_node_and_replies_match_requests() {
    let cluster = Cluster::start(3);
    let fanout = Fanout::new(addrs(&cluster.urls()), Options::default()).unwrap();
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2)),
        vec![ok("PONG"), ok("PONG"), ok("PONG")]
    );
    // A batch of commands in one write: each reply comes under its command's id.
    let mut round = fanout.round(Instant::now() + Duration::from_secs(2));
    let mut batch = request(&[b"SET", b"k", b"v1"]);
    batch.extend_from_slice(&request(&[b"GET", b"k"]));
    batch.extend_from_slice(&request(&[b"INCR", b"k"]));
    round.send_all(&batch, 3);
    let mut per_node = vec![vec![None; 3]; 3];
    while let Some((CommandId { node, seq }, reply)) = round.next() {
        per_node[node][seq as usize] = Some(reply.unwrap());
    }
    for replies in per_node {
        let replies: Vec<Value> = replies.into_iter().map(Option::unwrap).collect();
        assert_eq!(replies[0], Value::SimpleString("OK".into()));
        assert_eq!(replies[1], Value::BulkString("v1".into()));
        assert!(
            matches!(&replies[2], Value::Error(e) if e.starts_with(b"ERR value is not an integer"))
        );
    }
}

#[test]
fn a_killed_node_fails_at_once_and_comes_back_after_restart() {
    let mut cluster = Cluster::start(3);
    let fanout = Fanout::new(addrs(&cluster.urls()), Options::default()).unwrap();
    assert!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2))
            .iter()
            .all(Result::is_ok)
    );
    cluster.kill(1);
    // The dead node's outcome comes long before the deadline: the round does not wait for it.
    let started = Instant::now();
    let out = round_all(&fanout, &[b"PING"], Duration::from_secs(5));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(out[0], ok("PONG"));
    assert_eq!(out[2], ok("PONG"));
    assert!(
        matches!(
            out[1],
            Err(NodeError::Closed | NodeError::Refused | NodeError::Io(..))
        ),
        "{:?}",
        out[1]
    );
    // While it is down (and in backoff), it fails at once with the reason.
    let out = round_all(&fanout, &[b"PING"], Duration::from_secs(5));
    assert!(
        matches!(
            out[1],
            Err(NodeError::Refused | NodeError::Closed | NodeError::Io(..))
        ),
        "{:?}",
        out[1]
    );
    cluster.restart(1);
    // Used again without anyone doing anything; bounded wait for the backoff to pass.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let out = round_all(&fanout, &[b"PING"], Duration::from_secs(1));
        if out[1] == ok("PONG") {
            break;
        }
        assert!(
            Instant::now() < until,
            "node 1 never came back: {:?}",
            out[1]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_hung_node_times_out_at_the_deadline_and_does_not_delay_the_others() {
    let mut cluster = Cluster::start(3);
    let fanout = Fanout::new(addrs(&cluster.urls()), Options::default()).unwrap();
    assert!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2))
            .iter()
            .all(Result::is_ok)
    );
    cluster.pause(2);
    let deadline = Duration::from_millis(300);
    let started = Instant::now();
    let mut round = fanout.round(started + deadline);
    round.send_all(&request(&[b"PING"]), 1);
    // The two live nodes answer well before the deadline.
    let mut answered = Vec::new();
    while answered.len() < 2 {
        let (CommandId { node, .. }, reply) = round.next().expect("an outcome");
        assert_eq!(reply, ok("PONG"));
        answered.push(node);
    }
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "live nodes took {:?}",
        started.elapsed()
    );
    answered.sort_unstable();
    assert_eq!(answered, [0, 1]);
    // The hung one is a timeout at the deadline, not later.
    let (CommandId { node, .. }, reply) = round.next().expect("the hung node's outcome");
    let waited = started.elapsed();
    assert_eq!((node, reply), (2, Err(NodeError::Timeout)));
    assert!(
        waited >= deadline && waited < deadline + Duration::from_millis(150),
        "{waited:?}"
    );
    assert!(round.next().is_none());
    drop(round);
    cluster.resume(2);
    // After SIGCONT the late reply is read and dropped; the next round matches replies correctly.
    let out = round_all(&fanout, &[b"ECHO", b"again"], Duration::from_secs(2));
    assert!(
        out.iter()
            .all(|r| *r == Ok(Value::BulkString("again".into()))),
        "{out:?}"
    );
}

/// A slow node is never dropped for being slow: past `max_in_flight` requests without replies, further requests
/// are not sent (each is that node's failed vote at once), the requests already on the wire are kept, and their
/// replies come back when the node does.
#[test]
fn a_node_that_piles_up_requests_gets_no_more_and_keeps_its_connection() {
    let mut cluster = Cluster::start(1);
    let opts = Options::default().with_max_in_flight(8);
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2)),
        vec![ok("PONG")]
    );
    let sessions = fanout.sessions(0);
    cluster.pause(0);
    let mut outcomes = Vec::new();
    for _ in 0..20 {
        let out = round_all(&fanout, &[b"PING"], Duration::from_millis(5));
        assert!(
            fanout.in_flight(0) <= 8,
            "in flight: {}",
            fanout.in_flight(0)
        );
        outcomes.push(out[0].clone());
    }
    // The first 8 timed out (they are on the wire); the other 12 were refused at once.
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Err(NodeError::Overloaded))
            .count(),
        12,
        "{outcomes:?}"
    );
    assert!(outcomes[..8].iter().all(|o| *o == Err(NodeError::Timeout)));
    cluster.resume(0);
    // Once the node has caught up, the next round reads the 8 late replies (and drops them) before its own: the
    // connection was never dropped. (A round that comes before the node has answered them is still refused.)
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match round_all(&fanout, &[b"PING"], Duration::from_secs(2)).remove(0) {
            Err(NodeError::Overloaded) => {
                assert!(Instant::now() < until, "the node never caught up")
            }
            reply => {
                assert_eq!(reply, ok("PONG"));
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(fanout.in_flight(0), 0);
    assert_eq!(
        fanout.sessions(0),
        sessions,
        "the connection was re-established"
    );
}

/// A node with requests outstanding that sends nothing for `hung_timeout` is dropped (its requests fail as
/// hung); one that is only paused for less than that keeps its connection.
#[test]
fn only_a_node_silent_for_the_hung_timeout_is_dropped() {
    let mut cluster = Cluster::start(1);
    let opts = Options::default().with_hung_timeout(Duration::from_millis(400));
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2)),
        vec![ok("PONG")]
    );
    let sessions = fanout.sessions(0);
    // Paused for 150 ms, with a request waiting: slow, not hung.
    cluster.pause(0);
    let resume = {
        let started = Instant::now();
        let out = round_all(&fanout, &[b"PING"], Duration::from_millis(20));
        assert_eq!(out, vec![Err(NodeError::Timeout)]);
        started + Duration::from_millis(150)
    };
    std::thread::sleep(resume.saturating_duration_since(Instant::now()));
    cluster.resume(0);
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2)),
        vec![ok("PONG")]
    );
    assert_eq!(
        fanout.sessions(0),
        sessions,
        "a 150 ms pause dropped the connection"
    );
    // Paused for longer than the hung timeout: the next request after it finds the connection dropped.
    cluster.pause(0);
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_millis(20)),
        vec![Err(NodeError::Timeout)]
    );
    std::thread::sleep(Duration::from_millis(500));
    let out = round_all(&fanout, &[b"PING"], Duration::from_millis(20));
    assert_eq!(out, vec![Err(NodeError::Hung(Duration::from_millis(400)))]);
    cluster.resume(0);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        if round_all(&fanout, &[b"PING"], Duration::from_secs(1)) == vec![ok("PONG")] {
            break;
        }
        assert!(Instant::now() < until, "never reconnected");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(fanout.sessions(0) > sessions);
}

/// `ECHO` calls a node has processed so far (`INFO commandstats`). Once a node's `INFO` reply shows a command,
/// the reply to that command has been written too: Redis writes every pending reply before it handles the next
/// request of another connection.
fn echoes(node: &RedisServer) -> u64 {
    let reply = node.raw(&support::cmd(&["INFO", "commandstats"]));
    let text = String::from_utf8_lossy(&reply);
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_echo:calls="))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A caller that runs late (descheduled under CPU load, say) still gets the replies that had arrived by its
/// deadline: a round counts requests as timed out only after the sockets were read past the deadline.
#[test]
fn a_caller_that_runs_late_still_gets_replies_that_arrived_in_time() {
    let cluster = Cluster::start(3);
    let fanout = Fanout::new(addrs(&cluster.urls()), Options::default()).unwrap();
    round_all(&fanout, &[b"PING"], Duration::from_secs(2));
    for i in 0..20 {
        let before: Vec<u64> = cluster.nodes().iter().map(echoes).collect();
        let mut round = fanout.round(Instant::now() + Duration::from_millis(5));
        round.send_all(&request(&[b"ECHO", b"late"]), 1);
        // The caller comes back long after its deadline, once every node has answered (bounded wait).
        let until = Instant::now() + Duration::from_secs(10);
        while cluster
            .nodes()
            .iter()
            .zip(&before)
            .any(|(node, b)| echoes(node) <= *b)
        {
            assert!(
                Instant::now() < until,
                "round {i}: a node never processed the ECHO"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut replies = Vec::new();
        while let Some((_, reply)) = round.next() {
            replies.push(reply);
        }
        assert_eq!(
            replies,
            vec![Ok(Value::BulkString("late".into())); 3],
            "round {i}"
        );
    }
}

/// A release round may use a reserve past `max_in_flight`, and beyond it waits for room (within its deadline)
/// rather than being dropped; an ordinary round is refused at once.
#[test]
fn a_release_waits_for_room_where_an_ordinary_request_is_refused() {
    let mut cluster = Cluster::start(1);
    let opts = Options::default().with_max_in_flight(2);
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2)),
        vec![ok("PONG")]
    );
    cluster.pause(0);
    let ping = request(&[b"PING"]);
    let send = |round: &mut muxlock::net::Round<'_>| round.send_all(&ping, 1);
    // Two ordinary requests fill the queue; a third is refused at once.
    for _ in 0..2 {
        let mut round = fanout.round(Instant::now());
        send(&mut round);
    }
    let mut round = fanout.round(Instant::now() + Duration::from_secs(1));
    send(&mut round);
    assert_eq!(
        round.next(),
        Some((CommandId { node: 0, seq: 0 }, Err(NodeError::Overloaded)))
    );
    drop(round);
    // Two releases use the reserve.
    for _ in 0..2 {
        let mut round = fanout.release_round(Instant::now());
        send(&mut round);
    }
    assert_eq!(fanout.in_flight(0), 4);
    // The next release waits for room; the node comes back 100 ms later and its reply arrives.
    let resumer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        cluster.resume(0);
        cluster
    });
    let started = Instant::now();
    let mut round = fanout.release_round(Instant::now() + Duration::from_secs(2));
    send(&mut round);
    assert_eq!(
        round.next(),
        Some((CommandId { node: 0, seq: 0 }, ok("PONG")))
    );
    assert!(started.elapsed() >= Duration::from_millis(90));
    drop(round);
    let _cluster = resumer.join().expect("resumer");
}

#[test]
fn auth_select_and_resp3_are_pipelined_ahead_of_the_first_command() {
    let server = RedisServer::builder().requirepass("s3cret").start();
    let good: NodeAddr = format!(
        "redis://:s3cret@127.0.0.1:{}/3?protocol=resp3",
        server.port()
    )
    .parse()
    .unwrap();
    let fanout = Fanout::new(vec![good], Options::default()).unwrap();
    let out = round_all(&fanout, &[b"CLIENT", b"INFO"], Duration::from_secs(2));
    let Ok(Value::Verbatim { data, .. } | Value::BulkString(data)) = &out[0] else {
        panic!("{out:?}")
    };
    let info = String::from_utf8_lossy(data);
    assert!(info.contains("db=3") && info.contains("resp=3"), "{info}");
    // RESP3: a missing key is the RESP3 null.
    assert_eq!(
        round_all(&fanout, &[b"GET", b"missing"], Duration::from_secs(2)),
        vec![Ok(Value::Null)]
    );

    let bad: NodeAddr = format!("redis://:wrong@127.0.0.1:{}", server.port())
        .parse()
        .unwrap();
    let fanout = Fanout::new(vec![bad], Options::default()).unwrap();
    let out = round_all(&fanout, &[b"PING"], Duration::from_secs(2));
    assert!(
        matches!(&out[0], Err(NodeError::Auth(m)) if m.starts_with("WRONGPASS")),
        "{out:?}"
    );
    let none: NodeAddr = format!("127.0.0.1:{}", server.port()).parse().unwrap();
    let fanout = Fanout::new(vec![none], Options::default()).unwrap();
    let out = round_all(&fanout, &[b"PING"], Duration::from_secs(2));
    assert!(
        matches!(&out[0], Ok(Value::Error(m)) if m.starts_with(b"NOAUTH")),
        "{out:?}"
    );
}

#[test]
fn many_threads_share_one_fanout_and_each_gets_its_own_replies() {
    let cluster = Cluster::start(3);
    let fanout = Arc::new(Fanout::new(addrs(&cluster.urls()), Options::default()).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let fanout = Arc::clone(&fanout);
            std::thread::spawn(move || {
                for i in 0..300 {
                    let tag = format!("t{t}-{i}");
                    let out =
                        round_all(&fanout, &[b"ECHO", tag.as_bytes()], Duration::from_secs(5));
                    for reply in out {
                        assert_eq!(reply, Ok(Value::BulkString(tag.clone().into())));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
}

/// Client-side tracking on a RESP3 connection: a key read with `GET` is tracked, and when another client changes
/// it the invalidation push comes out of `recv_pushes`. `interrupt` wakes a listener that has nothing to read.
#[test]
fn tracking_invalidations_come_out_of_recv_pushes_and_interrupt_wakes_the_listener() {
    let server = RedisServer::start();
    let addr: NodeAddr = format!("redis://127.0.0.1:{}?protocol=resp3", server.port())
        .parse()
        .unwrap();
    let opts = Options::default()
        .with_pushes(true)
        .with_setup(vec![request(&[b"CLIENT", b"TRACKING", b"ON"]).freeze()]);
    let fanout = Fanout::new(vec![addr], opts).unwrap();
    server.raw(&support::cmd(&["SET", "watched", "one"]));
    assert_eq!(
        round_all(&fanout, &[b"GET", b"watched"], Duration::from_secs(2)),
        vec![Ok(Value::BulkString("one".into()))]
    );
    // Nothing yet: the call returns at its deadline, empty.
    let quiet = fanout.recv_pushes(Instant::now() + Duration::from_millis(50));
    assert!(quiet.pushes.is_empty() && !quiet.dropped);
    server.raw(&support::cmd(&["SET", "watched", "two"]));
    let until = Instant::now() + Duration::from_secs(5);
    let got = fanout.recv_pushes(until);
    assert!(
        Instant::now() < until,
        "no invalidation before the deadline"
    );
    let [(0, Value::Push(items))] = &got.pushes[..] else {
        panic!("{got:?}")
    };
    assert_eq!(items[0], Value::BulkString("invalidate".into()));
    assert_eq!(
        items[1],
        Value::Array(vec![Value::BulkString("watched".into())])
    );
    // A listener with nothing to read is woken by interrupt, long before its deadline.
    let fanout = Arc::new(fanout);
    let listener = {
        let fanout = Arc::clone(&fanout);
        std::thread::spawn(move || {
            let started = Instant::now();
            let got = fanout.recv_pushes(started + Duration::from_secs(30));
            (started.elapsed(), got.pushes.len())
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    fanout.interrupt();
    let (waited, pushes) = listener.join().expect("listener");
    assert_eq!(pushes, 0);
    assert!(
        waited < Duration::from_secs(10),
        "interrupt did not wake it: {waited:?}"
    );
}

/// A listener that found another thread's round polling parks without the poll. When that round ends it must
/// hand the poll to the listener, or pushes that come later stay unread until the listener's deadline.
#[test]
fn a_listener_takes_the_poll_when_a_round_that_had_it_ends() {
    let server = RedisServer::start();
    let addr: NodeAddr = format!("redis://127.0.0.1:{}?protocol=resp3", server.port())
        .parse()
        .unwrap();
    let opts = Options::default()
        .with_pushes(true)
        .with_setup(vec![request(&[b"CLIENT", b"TRACKING", b"ON"]).freeze()]);
    let fanout = Arc::new(Fanout::new(vec![addr], opts).unwrap());
    // The round tracks the key, then blocks 300 ms on the server: it polls all that time.
    let mut pipeline = request(&[b"GET", b"handed"]);
    pipeline.extend_from_slice(&request(&[b"BLPOP", b"nothing", b"0.3"]));
    let mut round = fanout.round(Instant::now() + Duration::from_secs(5));
    round.send_all(&pipeline, 2);
    let listener = {
        let fanout = Arc::clone(&fanout);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100)); // the round is polling by then
            let got = fanout.recv_pushes(Instant::now() + Duration::from_secs(30));
            (Instant::now(), got.pushes.len())
        })
    };
    let replies: Vec<_> = std::iter::from_fn(|| round.next()).collect();
    assert_eq!(replies.len(), 2, "{replies:?}");
    drop(round);
    std::thread::sleep(Duration::from_millis(100));
    server.raw(&support::cmd(&["SET", "handed", "now"]));
    let changed = Instant::now();
    let (woke, pushes) = listener.join().expect("listener");
    assert_eq!(pushes, 1);
    assert!(
        woke.saturating_duration_since(changed) < Duration::from_secs(5),
        "the push waited for the listener's deadline"
    );
}

/// Two commands to one node in one round, the node silent past the deadline, and another
/// thread driving the poll when the node's late replies come in. Both commands are reported timed out and the
/// late replies are dropped: the first command's reply must never come out in the second command's position
/// (a batch would count a node's `OK` for `r0` as its vote for `r1`).
#[test]
fn a_late_reply_is_never_counted_for_the_next_command_of_the_round() {
    let cluster = Cluster::start(2);
    let slow = FaultProxy::start(cluster.addrs()[0]);
    let urls = vec![slow.url(), cluster.urls()[1].clone()];
    let fanout = Arc::new(Fanout::new(addrs(&urls), Options::default()).unwrap());
    // Connect both nodes before the fault.
    assert!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2))
            .iter()
            .all(Result::is_ok)
    );
    slow.set(Fault::BlackHole);
    // Another thread takes the poll and keeps it: a round blocked in BLPOP on node 1 for 3 s.
    let driving = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let driver = {
        let (fanout, driving) = (Arc::clone(&fanout), Arc::clone(&driving));
        std::thread::spawn(move || {
            let mut round = fanout.round(Instant::now() + Duration::from_secs(5));
            round.send(1, &request(&[b"BLPOP", b"muxlock-test-nothing", b"3"]), 1);
            driving.store(true, std::sync::atomic::Ordering::SeqCst);
            round.next()
        })
    };
    let until = Instant::now() + Duration::from_secs(5);
    while !driving.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(Instant::now() < until, "the driving thread never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50)); // it is in its poll now
    let replies_before = fanout.stats(0).replies;
    let mut round = fanout.round(Instant::now() + Duration::from_millis(150));
    let mut both = request(&[b"ECHO", b"reply-to-first"]);
    both.extend_from_slice(&request(&[b"ECHO", b"reply-to-second"]));
    round.send(0, &both, 2);
    assert_eq!(
        round.next(),
        Some((CommandId { node: 0, seq: 0 }, Err(NodeError::Timeout)))
    );
    // The node answers now; the other thread's poll reads both replies (bounded wait).
    slow.set(Fault::None);
    while fanout.stats(0).replies < replies_before + 2 {
        assert!(Instant::now() < until, "the late replies were never read");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        round.next(),
        Some((CommandId { node: 0, seq: 1 }, Err(NodeError::Timeout))),
        "the second command's outcome"
    );
    assert_eq!(round.next(), None);
    drop(round);
    let blpop = driver.join().expect("the driving thread");
    assert_eq!(blpop.map(|(id, _)| id.node), Some(1));
    // The connection stays in step: the next round gets its own reply.
    let out = round_all(&fanout, &[b"ECHO", b"again"], Duration::from_secs(2));
    assert!(
        out.iter()
            .all(|r| *r == Ok(Value::BulkString("again".into()))),
        "{out:?}"
    );
}

/// A release round that holds requests for room on two nodes sends each node its own request (not one set of
/// bytes for the round, which would give the second node the first one's).
#[test]
fn a_held_release_request_is_not_replaced_by_an_earlier_held_one() {
    let mut cluster = Cluster::start(2);
    // max_in_flight 1: a release round may use 2 places per node, then waits for room.
    let opts = Options::default().with_max_in_flight(1);
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    {
        let mut round = fanout.round(Instant::now() + Duration::from_secs(2));
        round.send_all(&request(&[b"PING"]), 1);
        let mut n = 0;
        while let Some((_, r)) = round.next() {
            assert!(r.is_ok(), "{r:?}");
            n += 1;
        }
        assert_eq!(n, 2);
    }
    cluster.pause(0);
    cluster.pause(1);
    // Fill both nodes' release reserve: two PINGs each, no replies while paused.
    for _ in 0..2 {
        let mut round = fanout.release_round(Instant::now());
        round.send_all(&request(&[b"PING"]), 1);
    }
    assert_eq!(fanout.in_flight(0), 2);
    assert_eq!(fanout.in_flight(1), 2);
    let mut round = fanout.release_round(Instant::now() + Duration::from_secs(3));
    round.send(0, &request(&[b"ECHO", b"for-node-0"]), 1);
    round.send(1, &request(&[b"ECHO", b"for-node-1"]), 1);
    let resumer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        cluster.resume(0);
        cluster.resume(1);
        cluster
    });
    let mut out: Vec<Option<Result<Value, NodeError>>> = vec![None, None];
    while let Some((CommandId { node, .. }, reply)) = round.next() {
        out[node] = Some(reply);
    }
    drop(round);
    let _cluster = resumer.join().expect("resumer");
    assert_eq!(out[0], Some(bulk("for-node-0")));
    assert_eq!(
        out[1],
        Some(bulk("for-node-1")),
        "node 1 must get its own request, not the first held one's bytes"
    );
}

/// Fills node 0's release reserve (two requests per `max_in_flight` 1) while it is paused, then sends `request`
/// in a release round that holds it for room, and drops the round at once (as a decided release does).
fn detach_one(cluster: &mut Cluster, fanout: &Fanout, request: &[u8]) {
    assert_eq!(
        round_all(fanout, &[b"PING"], Duration::from_secs(2))[0],
        ok("PONG")
    );
    cluster.pause(0);
    for _ in 0..2 {
        let mut round = fanout.release_round(Instant::now());
        round.send_all(&self::request(&[b"PING"]), 1);
    }
    assert_eq!(fanout.in_flight(0), 2);
    let mut round = fanout.release_round(Instant::now() + Duration::from_secs(2));
    assert!(round.send_all(request, 1).contains(0), "held for room");
    drop(round);
    assert_eq!(fanout.in_flight(0), 2, "held, not queued");
    assert_eq!(fanout.stats(0).detached, 1);
}

/// A release round's request held for room on a full node still reaches it once
/// the node has room, after its round was dropped; its reply is read and dropped, never counted for another
/// request. (An `INCR` stands for the release: what runs, and how often, can be seen.)
#[test]
fn a_request_held_for_room_goes_after_its_round_is_dropped_and_its_reply_is_nobody_s() {
    let mut cluster = Cluster::start(1);
    let opts = Options::default().with_max_in_flight(1);
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    detach_one(&mut cluster, &fanout, &request(&[b"INCR", b"held"]));
    cluster.resume(0);
    // Nobody waits for a reply: the fanout drives for the detached request on its own.
    let until = Instant::now() + Duration::from_secs(5);
    while cluster.node(0).raw(&support::cmd(&["GET", "held"])) != b"$1\r\n1\r\n" {
        assert!(Instant::now() < until, "the held request never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The node ran it before its reply reached the fanout: with room for one request, the next one is refused as
    // overloaded until that reply is read (by the fanout's own driver: nobody else polls).
    while fanout.in_flight(0) > 0 {
        assert!(
            Instant::now() < until,
            "the held request's reply was never read"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The late replies (two PINGs, the INCR) are read and dropped: the next requests get their own replies.
    for word in ["a", "b"] {
        let out = round_all(&fanout, &[b"ECHO", word.as_bytes()], Duration::from_secs(2));
        assert_eq!(out[0], bulk(word));
    }
    assert_eq!(fanout.in_flight(0), 0);
    assert_eq!(
        cluster.node(0).raw(&support::cmd(&["GET", "held"])),
        b"$1\r\n1\r\n",
        "ran once"
    );
    let counts = fanout.stats(0);
    assert_eq!((counts.detached, counts.given_up), (1, 0), "{counts:?}");
}

/// Waits (until `until`) for node 0 to answer a round of its own: the late replies ahead of it read and
/// dropped (a round may first find the node full of them: it looks again), none counted for it.
fn caught_up(fanout: &Fanout, until: Instant) {
    loop {
        match round_all(fanout, &[b"ECHO", b"mine"], Duration::from_secs(2)).remove(0) {
            Err(NodeError::Overloaded) => assert!(Instant::now() < until, "never caught up"),
            reply => {
                assert_eq!(reply, bulk("mine"));
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A release round that waits for room until its deadline counts the node overloaded, and its held request still
/// goes once the node has room.
#[test]
fn a_request_still_held_at_the_deadline_counts_overloaded_and_still_goes() {
    let mut cluster = Cluster::start(1);
    let opts = Options::default().with_max_in_flight(1);
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2))[0],
        ok("PONG")
    );
    cluster.pause(0);
    for _ in 0..2 {
        let mut round = fanout.release_round(Instant::now());
        round.send_all(&request(&[b"PING"]), 1);
    }
    let mut round = fanout.release_round(Instant::now() + Duration::from_millis(100));
    round.send_all(&request(&[b"INCR", b"late"]), 1);
    assert_eq!(
        round.next(),
        Some((CommandId { node: 0, seq: 0 }, Err(NodeError::Overloaded)))
    );
    assert_eq!(round.next(), None);
    assert_eq!(fanout.stats(0).detached, 1, "detached at the deadline");
    drop(round);
    cluster.resume(0);
    let until = Instant::now() + Duration::from_secs(5);
    while cluster.node(0).raw(&support::cmd(&["GET", "late"])) != b"$1\r\n1\r\n" {
        assert!(Instant::now() < until, "the held request never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The late replies are read and dropped (a round may first find the node full of them: it looks again).
    caught_up(&fanout, until);
    assert_eq!(fanout.stats(0).given_up, 0);
}

/// A release round's request refused at the deadline (held for room) stays ahead of the round's later request
/// to the node, held behind it: that one finds the node's detached release ahead of it and, though it would fit
/// alone, is held too (no request overtakes a release detached before it), then refused at the deadline and
/// detached behind it. Each outcome comes under its own command's id, and once the node resumes both requests
/// go, in the order they were sent.
#[test]
fn a_held_request_refused_at_the_deadline_goes_before_the_one_behind_it() {
    let mut cluster = Cluster::start(1);
    // Room for 4 replies in a release round: 3 on the wire, then 2 do not fit; 1 would.
    let opts = Options::default().with_max_in_flight(2);
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2))[0],
        ok("PONG")
    );
    cluster.pause(0);
    let pushes = |n: usize, what: &[u8]| {
        let mut out = BytesMut::new();
        (0..n).for_each(|_| out.extend_from_slice(&request(&[b"RPUSH", b"order", what])));
        out
    };
    let mut round = fanout.release_round(Instant::now() + Duration::from_millis(100));
    assert!(round.send(0, &pushes(3, b"wire"), 3).contains(0));
    assert!(
        round.send(0, &pushes(2, b"first"), 2).contains(0),
        "held for room"
    );
    assert!(
        round.send(0, &pushes(1, b"second"), 1).contains(0),
        "held behind it"
    );
    let mut out: Vec<_> = std::iter::from_fn(|| round.next()).collect();
    out.sort_by_key(|(id, _)| id.seq);
    let out: Vec<_> = out.into_iter().map(|o| o.1).collect();
    let (t, o) = (Err(NodeError::Timeout), Err(NodeError::Overloaded));
    assert_eq!(
        out,
        vec![t.clone(), t.clone(), t, o.clone(), o.clone(), o],
        "3 timed out on the wire, then the 2 and the 1 behind them refused at the deadline"
    );
    drop(round);
    assert_eq!(fanout.stats(0).detached, 3, "both detached, in order");
    cluster.resume(0);
    // The late replies are read and dropped, the detached requests go: the next requests get their own.
    caught_up(&fanout, Instant::now() + Duration::from_secs(5));
    let until = Instant::now() + Duration::from_secs(5);
    let want = [
        "*6\r\n",
        "$4\r\nwire\r\n",
        "$4\r\nwire\r\n",
        "$4\r\nwire\r\n",
        "$5\r\nfirst\r\n",
        "$5\r\nfirst\r\n",
        "$6\r\nsecond\r\n",
    ]
    .concat();
    while cluster
        .node(0)
        .raw(&support::cmd(&["LRANGE", "order", "0", "-1"]))
        != want.as_bytes()
    {
        assert!(
            Instant::now() < until,
            "the detached requests never ran, in order"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(fanout.stats(0).given_up, 0);
}

/// A detached request waits for room at most `hung_timeout`: a node that stays paused longer has its connection
/// dropped (its requests fail as hung) and the request goes on the next connection, or is given up; either way
/// nothing is left waiting, and the next requests get their own replies.
#[test]
fn a_request_held_for_room_is_bounded_by_the_hung_timeout() {
    let mut cluster = Cluster::start(1);
    let opts = Options::default()
        .with_max_in_flight(1)
        .with_hung_timeout(Duration::from_millis(300));
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    detach_one(&mut cluster, &fanout, &request(&[b"INCR", b"held"]));
    std::thread::sleep(Duration::from_millis(800));
    cluster.resume(0);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let out = round_all(&fanout, &[b"ECHO", b"after"], Duration::from_secs(1));
        if out[0] == bulk("after") {
            break;
        }
        assert!(Instant::now() < until, "{:?}", out[0]);
        std::thread::sleep(Duration::from_millis(20));
    }
    let counts = fanout.stats(0);
    assert!(
        counts.drops >= 1,
        "the paused node's connection was dropped as hung: {counts:?}"
    );
    let get = || cluster.node(0).raw(&support::cmd(&["GET", "held"]));
    // Sent on the next connection (once), or given up (never sent).
    match counts.given_up {
        0 => {
            let until = Instant::now() + Duration::from_secs(5);
            while get() != b"$1\r\n1\r\n" {
                assert!(Instant::now() < until, "sent but never ran: {:?}", get());
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        1 => {
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(get(), b"$-1\r\n", "given up, yet it ran");
        }
        n => panic!("{n} given up"),
    }
}

/// A huge backoff (`Options` is not validated) saturates instead of panicking, in the
/// fanout's lock, when a node's connect fails.
#[test]
fn a_huge_backoff_does_not_panic_when_a_node_fails() {
    // A port nobody listens on: the connect is refused.
    let port = support::process::free_port();
    let node: NodeAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let opts = Options::default().with_backoff_min(Duration::MAX);
    let result = std::panic::catch_unwind(move || {
        let fanout = Fanout::new(vec![node], opts).expect("fanout");
        for _ in 0..3 {
            let mut round = fanout.round(Instant::now() + Duration::from_millis(200));
            round.send_all(&request(&[b"PING"]), 1);
            while round.next().is_some() {}
        }
    });
    assert!(result.is_ok(), "the fanout panicked on a refused connect");
}

fn bulk(s: &str) -> Result<Value, NodeError> {
    Ok(Value::BulkString(s.to_owned().into()))
}

/// `Round::send_each` (what the cluster routing layer sends a round with): each node gets its own bytes in one
/// call, each outcome comes under its own command's id, and a node's requests go on the wire in the order of
/// their ids even when the first finds no room (a smaller one behind it waits too, and goes once the first is
/// refused).
#[test]
fn send_each_gives_every_node_its_own_bytes_in_order() {
    let cluster = Cluster::start(2);
    let opts = Options::default().with_max_in_flight(2);
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2)),
        vec![ok("PONG"), ok("PONG")]
    );
    let mut three = request(&[b"ECHO", b"a"]);
    three.extend_from_slice(&request(&[b"ECHO", b"b"]));
    three.extend_from_slice(&request(&[b"ECHO", b"c"]));
    let one = request(&[b"ECHO", b"d"]);
    let other = request(&[b"ECHO", b"x"]);
    let mut round = fanout.round(Instant::now() + Duration::from_secs(2));
    // Three replies do not fit in node 0's two; the one behind them would.
    let queued = round.send_each(&[(0, &three[..], 3), (1, &other[..], 1), (0, &one[..], 1)]);
    assert!(queued.contains(0) && queued.contains(1));
    let mut per_node = vec![Vec::new(); 2];
    while let Some((CommandId { node, seq }, reply)) = round.next() {
        per_node[node].push((seq, reply));
    }
    for replies in &mut per_node {
        replies.sort_by_key(|r| r.0);
    }
    let per_node: Vec<Vec<_>> = per_node
        .into_iter()
        .map(|r| r.into_iter().map(|r| r.1).collect())
        .collect();
    assert_eq!(per_node[1], vec![bulk("x")]);
    assert_eq!(
        per_node[0],
        vec![
            Err(NodeError::Overloaded),
            Err(NodeError::Overloaded),
            Err(NodeError::Overloaded),
            bulk("d")
        ]
    );
}

/// On real sockets, a node's request refused for room between two it accepted: every outcome comes under its own
/// command's id (`d`'s reply under `d`'s, never under the refused request's first command's).
#[test]
fn a_refusal_between_two_queued_requests_is_filed_under_its_own_ids() {
    let cluster = Cluster::start(1);
    let opts = Options::default().with_max_in_flight(2);
    let fanout = Fanout::new(addrs(&cluster.urls()), opts).unwrap();
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2)),
        vec![ok("PONG")]
    );
    let first = request(&[b"ECHO", b"a"]);
    let mut three = request(&[b"ECHO", b"b"]);
    three.extend_from_slice(&request(&[b"ECHO", b"c"]));
    three.extend_from_slice(&request(&[b"ECHO", b"e"]));
    let last = request(&[b"ECHO", b"d"]);
    let mut round = fanout.round(Instant::now() + Duration::from_secs(2));
    // `a` fits; three replies never fit in two; `d` fits behind `a`.
    let queued = round.send_each(&[(0, &first[..], 1), (0, &three[..], 3), (0, &last[..], 1)]);
    assert!(queued.contains(0));
    let mut replies: Vec<_> = std::iter::from_fn(|| round.next()).collect();
    replies.sort_by_key(|(id, _)| id.seq);
    let replies: Vec<_> = replies.into_iter().map(|(_, r)| r).collect();
    let over = Err(NodeError::Overloaded);
    assert_eq!(
        replies,
        vec![bulk("a"), over.clone(), over.clone(), over, bulk("d")]
    );
}

/// A vacant connection (kept for a node not known yet) dials nothing and fails its requests at once; occupied,
/// it reaches its node like any other; it is occupied once only, and a connection that was never vacant cannot
/// be given another address.
#[test]
fn a_vacant_connection_fails_until_occupied_and_is_occupied_once() {
    let cluster = Cluster::start(2);
    let urls = cluster.urls();
    let mut nodes = addrs(&urls[..1]);
    // Two vacancies; their placeholder is node 0's address, never dialled.
    nodes.extend(addrs(&urls[..1]));
    nodes.extend(addrs(&urls[..1]));
    let fanout = Fanout::with_vacancies(nodes, 2, Options::default()).unwrap();
    let out = round_all(&fanout, &[b"PING"], Duration::from_secs(2));
    assert_eq!(out[0], ok("PONG"));
    for vacant in &out[1..] {
        assert!(matches!(vacant, Err(NodeError::Cluster(_))), "{vacant:?}");
    }
    let second: NodeAddr = urls[1].parse().unwrap();
    assert!(fanout.occupy(2, second.clone()));
    assert!(!fanout.occupy(2, second.clone()), "occupied once");
    assert!(!fanout.occupy(0, second.clone()), "never vacant");
    assert!(!fanout.occupy(9, second.clone()), "out of range");
    assert_eq!(fanout.addr(2), Some(second));
    // Node 2 answers as the second server: its own keys, not node 0's.
    let mut round = fanout.round(Instant::now() + Duration::from_secs(2));
    round.send(0, &request(&[b"SET", b"which", b"first"]), 1);
    let _ = std::iter::from_fn(|| round.next()).count();
    drop(round);
    let out = round_all(&fanout, &[b"GET", b"which"], Duration::from_secs(2));
    assert_eq!(out[0], Ok(Value::BulkString("first".into())));
    assert!(matches!(out[1], Err(NodeError::Cluster(_))), "{:?}", out[1]);
    assert_eq!(out[2], Ok(Value::NullBulk));
    // The occupier does nothing once the fanout is gone.
    let occupier = fanout.occupier();
    drop(fanout);
    assert!(!occupier.occupy(1, urls[1].parse().unwrap()));
}

/// Waits up to 5 s for `key` to read `1` on the cluster's node 0: the request that increments it ran there.
fn ran_once(cluster: &Cluster, key: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        if cluster.node(0).raw(&support::cmd(&["GET", key])) == b"$1\r\n1\r\n" {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A release queued on a connection whose connect is still under way goes out once it completes, though its
/// round was dropped at once and nobody calls the fanout again. (An `INCR` stands for the release.)
#[test]
fn a_release_queued_behind_a_connect_goes_out_with_nobody_calling() {
    let cluster = Cluster::start(1);
    let fanout = Fanout::new(addrs(&cluster.urls()), Options::default()).unwrap();
    // The node was dialled as the fanout was made; nobody has driven since, so the connect is not seen done.
    let mut round = fanout.release_round(Instant::now());
    assert!(
        round
            .send_all(&request(&[b"INCR", b"behind-connect"]), 1)
            .contains(0)
    );
    drop(round);
    assert!(
        ran_once(&cluster, "behind-connect"),
        "the release never went out"
    );
}

/// A release queued on a busy connection (a batch on the wire ahead of it, so it waits to go with the next
/// batch) goes out once the replies ahead come, though its round was dropped (a majority of other nodes
/// confirmed) and nobody calls the fanout again.
#[test]
fn a_release_queued_behind_a_batch_goes_out_with_nobody_calling() {
    let mut cluster = Cluster::start(1);
    let fanout = Fanout::new(addrs(&cluster.urls()), Options::default()).unwrap();
    assert_eq!(
        round_all(&fanout, &[b"PING"], Duration::from_secs(2))[0],
        ok("PONG")
    );
    cluster.pause(0);
    // An acquisition goes out at once on the idle connection, and its caller gives up before the reply.
    let mut acquire = fanout.round(Instant::now() + Duration::from_secs(2));
    acquire.send_all(&request(&[b"SET", b"key", b"v", b"NX"]), 1);
    drop(acquire);
    // A release round that waits for replies: its request waits behind the acquisition for the next batch.
    let mut release = fanout.release_round(Instant::now() + Duration::from_secs(2));
    assert!(
        release
            .send_all(&request(&[b"INCR", b"behind-batch"]), 1)
            .contains(0)
    );
    drop(release);
    cluster.resume(0);
    assert!(
        ran_once(&cluster, "behind-batch"),
        "the release never went out"
    );
}
