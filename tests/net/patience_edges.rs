//! Attempts to break patient rounds (`Round::patient_until`): each test is one hazard, on real servers behind the
//! fault proxy (see tests/net/patience.rs for the contract they test).

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use muxlock::net::{CommandId, Fanout, NodeAddr, NodeError, Options};
use muxlock::resp::{Value, encode_command};
use support::proxy::{Fault, FaultProxy};
use support::{Cluster, locks};

fn request(args: &[&[u8]]) -> BytesMut {
    let mut buf = BytesMut::new();
    encode_command(args, &mut buf);
    buf
}

fn echo(n: usize, payload: &[u8]) -> BytesMut {
    let mut buf = BytesMut::new();
    for _ in 0..n {
        encode_command(&[b"ECHO", payload], &mut buf);
    }
    buf
}

fn bulk(s: &str) -> Result<Value, NodeError> {
    Ok(Value::BulkString(s.as_bytes().to_vec().into()))
}

/// A fanout over `urls`, every node connected (a `PING` answered) before any fault.
fn connected(urls: &[String], opts: Options) -> Fanout {
    let addrs: Vec<NodeAddr> = urls.iter().map(|u| u.parse().expect("url")).collect();
    let n = addrs.len();
    let fanout = Fanout::new(addrs, opts).expect("fanout");
    let mut round = fanout.round(Instant::now() + Duration::from_secs(5));
    round.send_all(&request(&[b"PING"]), 1);
    let mut up = 0;
    while let Some((_, reply)) = round.next() {
        assert!(reply.is_ok(), "{reply:?}");
        up += 1;
    }
    assert_eq!(up, n);
    drop(round);
    fanout
}

/// Hazard (two holders: a reply counted for another command): a release round holds its request for room on
/// a full node (`Room::Wait`). If that node's connection is dropped meanwhile (a reset, a restart,
/// `hung_timeout`), its queue empties, and `retry_held` queues the held request on the **dead** connection (it
/// checks room, not the link): a waiter in the FIFO with no bytes on any wire. The next connection's `dialled`
/// keeps the FIFO, so its first reply is handed to that phantom waiter and every later reply on the connection
/// to the request before its own: round A's `ECHO a` is answered with round B's `b`. With `SET NX` instead of
/// `ECHO`, another resource's grant counts as this one's. (Not new with patient rounds: a release holds for room
/// until its first deadline, patient or not; overload, when nodes are full, is when connections get reset.)
#[test]
fn a_held_release_is_never_queued_on_a_dropped_connection() {
    let cluster = Cluster::start(2);
    let px = FaultProxy::start(cluster.addrs()[0]);
    let py = FaultProxy::start(cluster.addrs()[1]);
    // max_in_flight 3: a release may have 6 requests on a node, a 7th is held for room.
    let fanout = connected(
        &[px.url(), py.url()],
        Options::default().with_max_in_flight(3),
    );

    // Node 0 hung with a full queue (6 requests of a round dropped at once: their replies never come).
    px.set(Fault::BlackHole);
    {
        let mut fill = fanout.release_round(Instant::now() + Duration::from_secs(10));
        assert!(fill.send(0, &echo(6, b"x"), 6).contains(0));
    }

    let mut release = fanout.release_round(Instant::now() + Duration::from_millis(600));
    release.patient_until(Instant::now() + Duration::from_secs(3));
    release.send_all(&request(&[b"ECHO", b"mine"]), 1);
    let mut out = [None, None];
    thread::scope(|s| {
        s.spawn(|| {
            // While the release holds its request for room: node 0's connection is reset, and the node comes
            // back at once.
            thread::sleep(Duration::from_millis(50));
            px.set(Fault::Refuse);
            locks::wait_until(
                Duration::from_secs(2),
                "node 0's connection dropped",
                || !fanout.is_up(0),
            );
            px.set(Fault::None);
        });
        while let Some((CommandId { node, .. }, reply)) = release.next() {
            out[node] = Some(reply);
        }
    });
    drop(release);
    assert_eq!(out[1], Some(bulk("mine")), "{out:?}");
    eprintln!("the release's outcomes: {out:?}");

    // Node 0 reconnects (past its backoff); two rounds, one command each.
    thread::sleep(Duration::from_millis(100));
    let mut a = fanout.round(Instant::now() + Duration::from_secs(2));
    assert!(a.send(0, &request(&[b"ECHO", b"a"]), 1).contains(0));
    let mut b = fanout.round(Instant::now() + Duration::from_secs(2));
    assert!(b.send(0, &request(&[b"ECHO", b"b"]), 1).contains(0));
    // (A round that drives keeps the poll until it ends: A is dropped before B waits on this thread.)
    let got_a = a.next();
    drop(a);
    let got_b = b.next();
    assert_eq!(
        got_a,
        Some((CommandId { node: 0, seq: 0 }, bulk("a"))),
        "round A's ECHO a was answered with another command's reply"
    );
    assert_eq!(got_b, Some((CommandId { node: 0, seq: 0 }, bulk("b"))));
}

/// Three nodes behind proxies, a manager on them with `round` as its round timeout and one attempt per call,
/// connected and its scripts loaded before any fault.
fn slow_cluster(round: Duration) -> (Cluster, Vec<FaultProxy>, muxlock::LockManager) {
    let cluster = Cluster::start(3);
    let proxies: Vec<FaultProxy> = cluster
        .addrs()
        .iter()
        .map(|a| FaultProxy::start(*a))
        .collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let locks = locks::manager(urls, locks::one_attempt(round));
    let warm = locks
        .request("warm")
        .ttl(Duration::from_secs(10))
        .acquire()
        .expect("warm");
    locks.unlock(warm).expect("warm release");
    (cluster, proxies, locks)
}

/// Hazard (doc): a guard's drop was documented "best effort, bounded by the round timeout" (`Guard`'s doc,
/// its `Drop`, the manager's end, `hold_async`), but the release it makes is a patient round: while a
/// majority's nodes answer slowly (a byte every 80 ms, within the 100 ms round timeout) the dropping thread
/// waits for their replies (≈ 320 ms here), up to 40 round timeouts. Now documented; this checks what the
/// documentation says: a slow majority is waited for (and the key is gone), a hung one costs a round timeout.
#[test]
fn a_guard_drop_waits_for_a_slow_majority_as_documented_not_for_a_hung_one() {
    let round = Duration::from_millis(100);
    let (cluster, proxies, locks) = slow_cluster(round);
    let guard = locks
        .request("g")
        .ttl(Duration::from_secs(10))
        .hold()
        .expect("hold");
    for p in &proxies[..2] {
        p.set(Fault::Trickle(Duration::from_millis(80)));
    }
    let started = Instant::now();
    drop(guard);
    let took = started.elapsed();
    for p in &proxies {
        p.set(Fault::None);
    }
    assert!(
        took > round && took <= round * 40,
        "dropping a guard over a slow majority took {took:?}: documented, it waits for them up to 40 round \
         timeouts ({round:?} each)"
    );
    for node in cluster.nodes() {
        let reply = node.raw(&support::wire::cmd(&["EXISTS", "g"]));
        assert_eq!(reply, b":0\r\n", "the key was left on a node");
    }

    let guard = locks
        .request("h")
        .ttl(Duration::from_secs(10))
        .hold()
        .expect("hold");
    for p in &proxies[..2] {
        p.set(Fault::BlackHole);
    }
    let started = Instant::now();
    drop(guard);
    let took = started.elapsed();
    for p in &proxies {
        p.set(Fault::None);
    }
    assert!(
        took <= round * 3,
        "dropping a guard over a hung majority took {took:?}: documented, a hung node costs a round timeout \
         ({round:?})"
    );
}

/// Hazard (doc): `.wait(d)` is documented to return by `max_wait` "plus at most one round
/// timeout if an attempt is under way at that moment"; the attempt is a patient round now, and lasts while the
/// majority answers slowly.
#[test]
fn a_wait_returns_within_max_wait_plus_one_round_timeout_as_documented() {
    let round = Duration::from_millis(100);
    let (_cluster, proxies, locks) = slow_cluster(round);
    for p in &proxies[..2] {
        p.set(Fault::Trickle(Duration::from_millis(80)));
    }
    let max_wait = Duration::from_millis(10);
    let started = Instant::now();
    let got = locks
        .request("w")
        .ttl(Duration::from_secs(10))
        .wait(max_wait)
        .acquire();
    let took = started.elapsed();
    for p in &proxies {
        p.set(Fault::None);
    }
    if let Ok(lock) = got {
        let _ = locks.unlock(lock);
    }
    assert!(
        took <= max_wait + round * 2,
        "a wait of {max_wait:?} returned after {took:?}; documented: max_wait plus at most one round timeout \
         ({round:?})"
    );
}

/// Hazard: `hold()` checks that a guard's TTL leaves a renewal room before the guard's deadline
/// (`check_guard_ttl`), assuming the acquisition took at most a round timeout. A patient acquisition may take
/// up to the lease's validity: here the majority's `+OK` comes 880 ms into a 1 s lease (the nodes trickling an
/// earlier 2 KB reply all along, then catching up), and `hold()` returns `Ok` with a guard that is **already
/// lost** (its deadline is the lease's end minus a 200 ms margin). `run(work)` would then run `work` without the
/// lock (its value is dropped afterwards, but what it did is done).
#[test]
fn hold_never_returns_a_guard_that_is_already_lost() {
    let round = Duration::from_millis(100);
    let (cluster, proxies, locks) = slow_cluster(round);
    let big = "v".repeat(2000);
    for node in &cluster.nodes()[..2] {
        assert_eq!(
            node.raw(&support::wire::cmd(&["SET", "big", &big])),
            b"+OK\r\n"
        );
    }
    for p in &proxies[..2] {
        p.set(Fault::Trickle(Duration::from_millis(1)));
    }
    // 2 KB trickling on nodes 0 and 1 (~2 s): this round times out, its replies keep coming.
    let _ = locks.inspect("big");
    let started = Instant::now();
    let guard = thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(880).saturating_sub(started.elapsed()));
            for p in &proxies {
                p.set(Fault::None);
            }
        });
        locks.request("born").ttl(Duration::from_secs(1)).hold()
    });
    let took = started.elapsed();
    match guard {
        Err(e) => eprintln!("hold failed after {took:?}: {e}"),
        Ok(guard) => {
            let lost = guard.is_lost();
            let deadline_left = guard.deadline().saturating_duration_since(Instant::now());
            drop(guard);
            assert!(
                !lost,
                "hold() returned after {took:?} a guard already lost (deadline left {deadline_left:?})"
            );
        }
    }
}

/// Hazard (a release lost under overload, the case patience is for): a release round holds its request for
/// room on a node whose queue is full (beyond the release reserve); at its **first** deadline `retry_held` counts
/// the held request as `Overloaded`, before `time_out_due` can see that the node is still answering. So a
/// patient release waits for a slow node whose queue has room, but not for one whose queue is full: exactly the
/// deepest overload. Here node 0 answers all along (a byte a millisecond), frees room after ~110 ms, and the
/// release (first deadline 50 ms, hard bound 3 s) must get its reply.
#[test]
fn a_patient_release_waits_for_room_on_a_node_that_is_still_answering() {
    let cluster = Cluster::start(2);
    let px = FaultProxy::start(cluster.addrs()[0]);
    let fanout = connected(
        &[px.url(), cluster.urls()[1].clone()],
        Options::default().with_max_in_flight(3),
    );
    px.set(Fault::Trickle(Duration::from_millis(1)));
    {
        // Node 0's queue full for a release (6 of 6), each reply ~107 bytes: the first frees room after ~110 ms.
        let mut fill = fanout.release_round(Instant::now() + Duration::from_secs(10));
        assert!(fill.send(0, &echo(6, &[b'x'; 100]), 6).contains(0));
    }
    let mut release = fanout.release_round(Instant::now() + Duration::from_millis(50));
    release.patient_until(Instant::now() + Duration::from_secs(3));
    release.send_all(&request(&[b"ECHO", b"mine"]), 1);
    let mut out = [None, None];
    while let Some((CommandId { node, .. }, reply)) = release.next() {
        out[node] = Some(reply);
    }
    drop(release);
    px.set(Fault::None);
    assert_eq!(out[1], Some(bulk("mine")));
    assert_eq!(
        out[0],
        Some(bulk("mine")),
        "the release held for room on a node still answering was not waited for"
    );
}

/// A node that never stops sending bytes (a reply that never ends, trickled: bytes a real server never
/// sends) keeps a patient round waiting, but never past its hard bound, from a thread or from a task.
#[test]
fn an_endless_reply_keeps_a_patient_round_no_later_than_its_hard_bound() {
    let fake = support::FakeServer::start(|cmd| match support::fake::name(cmd).as_deref() {
        Some("PING") => support::Action::reply("+PONG\r\n"),
        _ => {
            let mut endless = b"+".to_vec();
            endless.extend(std::iter::repeat_n(b'x', 4000));
            support::Action::Trickle(endless, Duration::from_millis(5))
        }
    });
    let server = support::server::RedisServer::start();
    let fanout = connected(&[fake.url(), server.url()], Options::default());
    for task in [false, true] {
        let started = Instant::now();
        // A first deadline long enough for the fake's first trickled byte on a loaded machine (a node silent
        // for a whole round's length is not waited for, by design).
        let mut round = fanout.round(started + Duration::from_millis(200));
        round.patient_until(started + Duration::from_millis(1000));
        round.send_all(&request(&[b"ECHO", b"mine"]), 1);
        let out = match task {
            false => {
                let mut out = vec![None, None];
                while let Some((CommandId { node, .. }, reply)) = round.next() {
                    out[node] = Some(reply);
                }
                out
            }
            true => smol::block_on(async {
                let mut out = vec![None, None];
                while let Some((CommandId { node, .. }, reply)) = round.next_async().await {
                    out[node] = Some(reply);
                }
                out
            }),
        };
        let took = started.elapsed();
        assert_eq!(out, vec![Some(Err(NodeError::Timeout)), Some(bulk("mine"))]);
        assert!(
            took >= Duration::from_millis(950) && took < Duration::from_millis(1600),
            "task {task}: the round ended after {took:?} (deadline 200 ms, hard bound 1000 ms)"
        );
    }
}

/// An async acquisition dropped in the middle of its patient round (past its first deadline, waiting
/// for a slow majority) leaves no key behind: its undo releases on every node once they answer.
#[test]
fn an_acquisition_dropped_while_patient_leaves_no_key() {
    let round = Duration::from_millis(100);
    let (cluster, proxies, locks) = slow_cluster(round);
    for p in &proxies[..2] {
        p.set(Fault::Trickle(Duration::from_millis(60)));
    }
    let started = Instant::now();
    let got = smol::block_on(smol::future::or(
        async {
            Some(
                locks
                    .request("c")
                    .ttl(Duration::from_secs(10))
                    .once()
                    .acquire_async()
                    .await,
            )
        },
        async {
            smol::Timer::after(Duration::from_millis(180)).await;
            None
        },
    ));
    assert!(
        got.is_none(),
        "the acquisition was decided in {:?}: nothing was tested",
        started.elapsed()
    );
    for p in &proxies {
        p.set(Fault::None);
    }
    for node in cluster.nodes() {
        locks::wait_until(Duration::from_secs(3), "no key left behind", || {
            node.raw(&support::wire::cmd(&["EXISTS", "c"])) == b":0\r\n"
        });
    }
}

/// A round that drove keeps the driver between its `next()` calls; a second round waited on by the same thread
/// meanwhile can read nothing (only the first round's next call would poll, and this thread is busy waiting). It
/// sleeps to its deadline, then reports its request as `Timeout` (`Round::next`'s contract): it never hangs. The
/// first round then still gets its reply, the second's late reply is dropped, and the next round gets its own.
#[test]
fn a_round_waited_on_while_another_round_of_the_thread_keeps_the_driver_times_out_at_its_deadline()
{
    let server = support::server::RedisServer::start();
    let fanout = std::sync::Arc::new(connected(&[server.url()], Options::default()));
    let (tx, rx) = std::sync::mpsc::channel();
    let f = std::sync::Arc::clone(&fanout);
    let deadline = Duration::from_millis(300);
    // Left behind if it hangs (a test thread; the process ends with the tests): the bound below fails first.
    thread::spawn(move || {
        let started = Instant::now();
        let mut a = f.round(started + Duration::from_secs(2));
        a.send(0, &request(&[b"ECHO", b"a"]), 1);
        let mut b = f.round(started + deadline);
        b.send(0, &request(&[b"ECHO", b"b"]), 1);
        let got_a = a.next(); // drives, and keeps the driver: `a` has not ended
        let got_b = b.next();
        let b_took = started.elapsed();
        let b_ended = b.next();
        drop(b);
        let a_ended = a.next();
        drop(a);
        let mut c = f.round(Instant::now() + Duration::from_secs(2));
        c.send(0, &request(&[b"ECHO", b"c"]), 1);
        let got_c = c.next();
        let _ = tx.send((got_a, got_b, b_took, b_ended, a_ended, got_c));
    });
    let (got_a, got_b, b_took, b_ended, a_ended, got_c) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("round B, deadline 300 ms, had not ended after 10 s");
    assert_eq!(got_a, Some((CommandId { node: 0, seq: 0 }, bulk("a"))));
    assert_eq!(
        got_b,
        Some((CommandId { node: 0, seq: 0 }, Err(NodeError::Timeout)))
    );
    assert!(
        b_took >= deadline && b_took < deadline + Duration::from_secs(2),
        "round B ended after {b_took:?} (deadline {deadline:?})"
    );
    assert_eq!((b_ended, a_ended), (None, None));
    assert_eq!(
        got_c,
        Some((CommandId { node: 0, seq: 0 }, bulk("c"))),
        "B's late reply went to nobody"
    );
}
