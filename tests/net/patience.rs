//! Patient rounds (`Round::patient_until`): past its deadline a round waits for a node that is still answering,
//! never past its hard bound, and not at all for a node that is silent. Real servers behind the fault proxy:
//! `Fault::Trickle` (the server's replies come one byte per millisecond: a node that answers, slowly) and
//! `Fault::BlackHole` (nothing comes: a hung node).
//!
//! Why it exists: under overload a request waits on its node behind the same client's other requests, and would time
//! out although the node answers all along; plain acquisitions and releases are patient rounds, capped at
//! `PATIENT_ROUNDS` round timeouts (and, for an acquisition, its validity).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use muxlock::net::{CommandId, Fanout, NodeAddr, NodeError, Options, Round};
use muxlock::resp::{Value, encode_command};
use support::proxy::{Fault, FaultProxy};
use support::{Cluster, locks};

fn request(args: &[&[u8]]) -> BytesMut {
    let mut buf = BytesMut::new();
    encode_command(args, &mut buf);
    buf
}

/// A fanout over node 0 behind `proxy` and node 1 direct, both connected before any fault.
fn fanout(cluster: &Cluster, proxy: &FaultProxy) -> Fanout {
    let addrs: Vec<NodeAddr> = [proxy.url(), cluster.urls()[1].clone()]
        .iter()
        .map(|u| u.parse().expect("url"))
        .collect();
    let fanout = Fanout::new(addrs, Options::default()).expect("fanout");
    {
        let mut round = fanout.round(Instant::now() + Duration::from_secs(5));
        round.send_all(&request(&[b"PING"]), 1);
        let mut up = 0;
        while let Some((_, reply)) = round.next() {
            assert!(reply.is_ok(), "{reply:?}");
            up += 1;
        }
        assert_eq!(up, 2);
    }
    fanout
}

/// Puts `n` requests on node 0's connection ahead of whatever comes next (their round is dropped at once: the
/// replies still come, and are read and dropped), so that node 0 answers a later request only after them.
fn queue_ahead(fanout: &Fanout, n: usize) {
    let mut ahead = BytesMut::new();
    for _ in 0..n {
        encode_command(&[b"ECHO", b"x"], &mut ahead);
    }
    let mut round = fanout.round(Instant::now() + Duration::from_secs(10));
    round.send(0, &ahead, n);
}

/// Sends `ECHO mine` to both nodes in `round` and collects both outcomes, with the time node 0's took.
fn both(mut round: Round<'_>) -> (Vec<Option<Result<Value, NodeError>>>, Duration) {
    let started = Instant::now();
    round.send_all(&request(&[b"ECHO", b"mine"]), 1);
    let mut out = vec![None, None];
    let mut took = Duration::ZERO;
    while let Some((CommandId { node, .. }, reply)) = round.next() {
        assert!(out[node].is_none(), "two outcomes for node {node}");
        if node == 0 {
            took = started.elapsed();
        }
        out[node] = Some(reply);
    }
    (out, took)
}

fn mine() -> Option<Result<Value, NodeError>> {
    Some(Ok(Value::BulkString("mine".into())))
}

/// A node behind a queue of 40 replies trickling at a byte a millisecond (≈ 280 ms) answers a patient round with
/// a 50 ms deadline, in that round, with its own reply; the same round not made patient counts it timed out.
#[test]
fn a_patient_round_waits_for_a_node_that_is_still_answering() {
    let cluster = Cluster::start(2);
    let proxy = FaultProxy::start(cluster.addrs()[0]);
    let fanout = fanout(&cluster, &proxy);
    proxy.set(Fault::Trickle(Duration::from_millis(1)));

    queue_ahead(&fanout, 40);
    let mut round = fanout.round(Instant::now() + Duration::from_millis(50));
    round.patient_until(Instant::now() + Duration::from_secs(5));
    let (out, took) = both(round);
    assert_eq!(out[1], mine());
    assert_eq!(
        out[0],
        mine(),
        "the node still answering was not waited for"
    );
    assert!(
        took > Duration::from_millis(100),
        "node 0 answered in {took:?}: the queue ahead did not hold it back, the test proves nothing"
    );

    // The control: the same, not patient.
    proxy.set(Fault::None);
    let settled = fanout.round(Instant::now() + Duration::from_secs(5));
    let (out, _) = both(settled);
    assert_eq!(out, vec![mine(), mine()], "back in step");
    proxy.set(Fault::Trickle(Duration::from_millis(1)));
    queue_ahead(&fanout, 40);
    let (out, _) = both(fanout.round(Instant::now() + Duration::from_millis(50)));
    assert_eq!(out[0], Some(Err(NodeError::Timeout)));
}

/// The same from a task: `poll_next` judges a patient round's nodes as `next()` does.
#[test]
fn a_patient_round_awaited_as_a_future_waits_too() {
    let cluster = Cluster::start(2);
    let proxy = FaultProxy::start(cluster.addrs()[0]);
    let fanout = fanout(&cluster, &proxy);
    proxy.set(Fault::Trickle(Duration::from_millis(1)));
    queue_ahead(&fanout, 40);
    let out = smol::block_on(async {
        let mut round = fanout.round(Instant::now() + Duration::from_millis(50));
        round.patient_until(Instant::now() + Duration::from_secs(5));
        round.send_all(&request(&[b"ECHO", b"mine"]), 1);
        let mut out = vec![None, None];
        while let Some((CommandId { node, .. }, reply)) = round.next_async().await {
            out[node] = Some(reply);
        }
        out
    });
    assert_eq!(out, vec![mine(), mine()]);
}

/// A hung node (nothing comes back) costs a patient round its first deadline, not its hard bound.
#[test]
fn a_patient_round_does_not_wait_for_a_silent_node() {
    let cluster = Cluster::start(2);
    let proxy = FaultProxy::start(cluster.addrs()[0]);
    let fanout = fanout(&cluster, &proxy);
    proxy.set(Fault::BlackHole);
    let started = Instant::now();
    let mut round = fanout.round(Instant::now() + Duration::from_millis(50));
    round.patient_until(Instant::now() + Duration::from_secs(5));
    let (out, _) = both(round);
    let took = started.elapsed();
    assert_eq!(out[0], Some(Err(NodeError::Timeout)));
    assert_eq!(out[1], mine());
    assert!(
        took < Duration::from_millis(1500),
        "a silent node held a patient round {took:?} (its hard bound is 5 s)"
    );
}

/// A node that answers, then goes silent, is waited for while it answers and times out about one patience
/// after its last byte, well before the hard bound.
#[test]
fn a_node_that_falls_silent_times_out_one_patience_later() {
    let cluster = Cluster::start(2);
    let proxy = FaultProxy::start(cluster.addrs()[0]);
    let fanout = fanout(&cluster, &proxy);
    proxy.set(Fault::Trickle(Duration::from_millis(1)));
    queue_ahead(&fanout, 40);
    let silence = {
        let proxy_fault = Duration::from_millis(120);
        let started = Instant::now();
        let mut round = fanout.round(Instant::now() + Duration::from_millis(50));
        round.patient_until(Instant::now() + Duration::from_secs(5));
        round.send_all(&request(&[b"ECHO", b"mine"]), 1);
        thread::scope(|s| {
            s.spawn(|| {
                thread::sleep(proxy_fault);
                proxy.set(Fault::BlackHole);
            });
            let mut out = [None, None];
            while let Some((CommandId { node, .. }, reply)) = round.next() {
                out[node] = Some(reply);
            }
            assert_eq!(out[0], Some(Err(NodeError::Timeout)));
            assert_eq!(out[1], mine());
        });
        started.elapsed()
    };
    assert!(
        silence > Duration::from_millis(120) && silence < Duration::from_millis(2500),
        "timed out after {silence:?}: the node was answering for 120 ms, then silent (patience 50 ms, hard 5 s)"
    );
}

/// Plain acquisitions and releases are patient: 16 threads lock at once on 3 nodes whose replies trickle (a byte
/// a millisecond, 5 ms per `+OK`), so the last replies come some 80 ms after the first, past the 30 ms round
/// timeout. None fails; without patience (the deliberate break: `attempt` not patient) most of them did.
#[test]
fn plain_locks_behind_a_slow_majority_do_not_time_out() {
    let cluster = Cluster::start(3);
    let proxies: Vec<FaultProxy> = cluster
        .addrs()
        .iter()
        .map(|a| FaultProxy::start(*a))
        .collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    // Without the clock check: its two `TIME` replies (about 33 bytes each) would make every acquisition's reply
    // fourteen times as long at a byte a millisecond; what is measured here is patience, not bandwidth.
    let locks = Arc::new(locks::manager(
        urls,
        locks::one_attempt(Duration::from_millis(30)).with_clock_check(false),
    ));
    // Connected (and scripts loaded) before the fault.
    let warm = locks
        .request("warm")
        .ttl(Duration::from_secs(10))
        .acquire()
        .expect("warm");
    locks.unlock(warm).expect("warm release");
    for p in &proxies {
        p.set(Fault::Trickle(Duration::from_millis(1)));
    }
    let failed = Arc::new(AtomicU64::new(0));
    let slowest = Arc::new(AtomicU64::new(0));
    thread::scope(|s| {
        for i in 0..16 {
            let (locks, failed, slowest) = (&locks, &failed, &slowest);
            s.spawn(move || {
                let started = Instant::now();
                match locks
                    .request(format!("slow:{i}"))
                    .ttl(Duration::from_secs(10))
                    .acquire()
                {
                    Ok(lock) => {
                        let took = started.elapsed().as_millis() as u64;
                        slowest.fetch_max(took, Ordering::Relaxed);
                        if let Err(e) = locks.unlock(lock) {
                            eprintln!("release {i}: {e}");
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        eprintln!("acquire {i}: {e}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let slowest = slowest.load(Ordering::Relaxed);
    assert_eq!(failed.load(Ordering::Relaxed), 0, "calls failed");
    assert!(
        slowest > 30,
        "the slowest acquisition took {slowest} ms, within the round timeout: nothing was tested"
    );
    for p in &proxies {
        p.set(Fault::None);
    }
    // Every key was released.
    for node in cluster.nodes() {
        let reply = node.raw(&support::wire::cmd(&["DBSIZE"]));
        assert_eq!(reply, b":0\r\n", "keys left on a node");
    }
}
