//! The threaded fanout over loopback sockets, against the scripted peer of `net/test_peer.rs` (no server): its
//! rounds, threads and tasks sharing the poll, wake-ups, pushes, vacancies, held and detached releases, and what
//! it tells about its nodes. (The machine's rules run in the simulator and `machine/tests.rs`; these are the
//! threaded wrapper's.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::Fanout;
use crate::net::test_peer::{Peer, block_on, command, nobody};
use crate::net::{NodeAddr, NodeError, NodeSet, Options};
use crate::resp::Value;

fn bulk(x: &str) -> Value {
    Value::BulkString(Bytes::from(x.to_owned()))
}

fn soon(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

/// Brings every connection of `f` up (each answers a `PING`), so that no later round waits for a connect.
fn all_up(f: &Fanout) {
    let mut round = f.round(soon(5_000));
    round.send_all(&command(&[b"PING"]), 1);
    assert!(outcomes(&mut round).values().all(Result::is_ok));
}

/// Starts a thread whose round waits for node 0's reply `slow` to `SLEEP ms` (deadline 10 s), and returns once
/// that round is in the poll ([`until_another_thread_polls`]); joined, the thread gives that round's outcomes.
/// `ms` stays well below the hung timeout (5 s by default): a node silent that long is dropped as hung.
fn a_thread_drives_for(
    f: &Arc<Fanout>,
    ms: &'static [u8],
) -> thread::JoinHandle<BTreeMap<(usize, u32), Result<Value, NodeError>>> {
    let driver = {
        let f = Arc::clone(f);
        thread::spawn(move || {
            let mut round = f.round(soon(10_000));
            round.send(0, &command(&[b"SLEEP", ms, b"slow"]), 1);
            outcomes(&mut round)
        })
    };
    until_another_thread_polls(f);
    driver
}

/// Waits (at most 5 s) until a round of another thread is in the poll (it took the driver and polls; not the
/// background driver lingering after an earlier round, which hands the poll to the next thread that sleeps): the
/// tests of a round that sleeps while another polls start that round only then, whatever the machine's load.
fn until_another_thread_polls(f: &Fanout) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let inner = crate::sync::lock(&f.shared.inner);
        if inner.driver.is_none() && inner.polling_until.is_some() && !inner.lingering {
            return;
        }
        drop(inner);
        assert!(Instant::now() < deadline, "no other thread took the poll");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Every outcome of `round`, by id.
fn outcomes(round: &mut super::Round<'_>) -> BTreeMap<(usize, u32), Result<Value, NodeError>> {
    let mut all = BTreeMap::new();
    while let Some((id, reply)) = round.next() {
        assert!(
            all.insert((id.node, id.seq), reply).is_none(),
            "two outcomes for {id:?}"
        );
    }
    all
}

#[test]
fn a_round_hands_each_reply_under_the_id_of_its_command() {
    let peers = [Peer::start(), Peer::start()];
    let addrs: Vec<NodeAddr> = peers.iter().map(Peer::addr).collect();
    let f = Fanout::new(addrs.clone(), Options::default()).expect("fanout");
    assert_eq!((f.len(), f.is_empty()), (2, false));
    assert_eq!(f.addrs(), &addrs[..]);
    let mut round = f.round(soon(5_000));
    assert_eq!((round.next_seq(0), round.next_seq(1)), (0, 0));
    let mut two = command(&[b"ECHO", b"a"]);
    two.extend(command(&[b"ECHO", b"b"]));
    let sent = round.send_all(&two, 2);
    assert!(sent.contains(0) && sent.contains(1));
    assert_eq!((round.next_seq(0), round.next_seq(1)), (2, 2));
    round.send(1, &command(&[b"ECHO", b"c"]), 1);
    assert_eq!((round.next_seq(0), round.next_seq(1)), (2, 3));
    let got = outcomes(&mut round);
    let want: BTreeMap<(usize, u32), Result<Value, NodeError>> = [
        ((0, 0), Ok(bulk("a"))),
        ((0, 1), Ok(bulk("b"))),
        ((1, 0), Ok(bulk("a"))),
        ((1, 1), Ok(bulk("b"))),
        ((1, 2), Ok(bulk("c"))),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
    drop(round);
    // What it tells about its nodes once they answered.
    let (s0, s1) = (f.stats(0), f.stats(1));
    assert_eq!((s0.replies, s1.replies), (2, 3), "{s0:?} {s1:?}");
    assert_eq!((s0.connects, s1.connects), (1, 1));
    assert_eq!(s0.timeouts + s1.timeouts, 0);
    assert_eq!(f.stats(9), crate::net::NodeCounts::default());
    for (node, addr) in addrs.iter().enumerate() {
        assert!(f.is_up(node));
        assert_eq!(f.sessions(node), 1);
        assert_eq!(f.next_session(node), 1, "up and set up: this session");
        assert_eq!(f.in_flight(node), 0);
        assert_eq!(f.addr(node), Some(addr.clone()));
    }
    assert_eq!((f.sessions(9), f.addr(9), f.in_flight(9)), (0, None, 0));
    assert!(!f.is_up(9));
}

#[test]
fn set_up_replies_are_kept_for_the_current_connection() {
    let peer = Peer::start();
    let setup = vec![
        Bytes::from(command(&[b"PING"])),
        Bytes::from(command(&[b"ECHO", b"set-up"])),
    ];
    let f = Fanout::new(vec![peer.addr()], Options::default().with_setup(setup)).expect("fanout");
    assert_eq!(f.next_session(0), 1, "not set up yet: the next session");
    let mut round = f.round(soon(5_000));
    round.send(0, &command(&[b"ECHO", b"x"]), 1);
    assert_eq!(
        outcomes(&mut round).into_values().collect::<Vec<_>>(),
        [Ok(bulk("x"))]
    );
    drop(round);
    let replies: Vec<Value> = f.setup_replies(0).into_iter().map(|(v, _)| v).collect();
    assert_eq!(
        replies,
        [
            Value::SimpleString(Bytes::from_static(b"PONG")),
            bulk("set-up")
        ]
    );
    assert!(f.setup_replies(3).is_empty());
    assert_eq!(f.options().setup().len(), 2);
}

#[test]
fn a_node_nobody_listens_on_fails_its_vote_and_the_others_answer() {
    let peer = Peer::start();
    let f = Fanout::new(vec![peer.addr(), nobody()], Options::default()).expect("fanout");
    let mut round = f.round(soon(3_000));
    round.send_all(&command(&[b"ECHO", b"x"]), 1);
    let got = outcomes(&mut round);
    assert_eq!(got.get(&(0, 0)), Some(&Ok(bulk("x"))));
    assert!(matches!(got.get(&(1, 0)), Some(Err(_))), "{got:?}");
    assert!(!f.is_up(1));
}

#[test]
fn a_slow_reply_times_out_at_the_deadline_and_is_never_counted_for_a_later_command() {
    let peer = Peer::start();
    let f = Fanout::new(vec![peer.addr()], Options::default()).expect("fanout");
    let start = Instant::now();
    let mut round = f.round(start + Duration::from_millis(150));
    round.send(0, &command(&[b"SLEEP", b"1500", b"late"]), 1);
    assert_eq!(f.in_flight(0), 1);
    assert_eq!(
        outcomes(&mut round).into_values().collect::<Vec<_>>(),
        [Err(NodeError::Timeout)]
    );
    assert!(start.elapsed() >= Duration::from_millis(150));
    drop(round);
    assert_eq!(f.stats(0).timeouts, 1);
    let mut round = f.round(soon(5_000));
    round.send(0, &command(&[b"ECHO", b"next"]), 1);
    assert_eq!(
        outcomes(&mut round).into_values().collect::<Vec<_>>(),
        [Ok(bulk("next"))]
    );
}

/// While one thread's round drives the poll for a slow reply, another thread's round sleeps: the driver's turn
/// that reads the second one's reply wakes it then, not when the driver's own round ends.
#[test]
fn a_sleeping_round_is_woken_by_the_turn_that_files_its_reply() {
    let (slow, fast) = (Peer::start(), Peer::start());
    let f =
        Arc::new(Fanout::new(vec![slow.addr(), fast.addr()], Options::default()).expect("fanout"));
    all_up(&f);
    let driver = a_thread_drives_for(&f, b"4000");
    let start = Instant::now();
    let mut round = f.round(soon(5_000));
    round.send(1, &command(&[b"ECHO", b"fast"]), 1);
    let got = outcomes(&mut round);
    let took = start.elapsed();
    drop(round);
    assert_eq!(got.into_values().collect::<Vec<_>>(), [Ok(bulk("fast"))]);
    assert!(
        took < Duration::from_millis(2_500),
        "woken only after {took:?}"
    );
    let slow_got = driver.join().expect("the driving thread");
    assert_eq!(
        slow_got.into_values().collect::<Vec<_>>(),
        [Ok(bulk("slow"))]
    );
}

/// Threads sharing one fanout each get their own replies, whichever of them drives.
#[test]
fn threads_sharing_a_fanout_each_get_their_own_replies() {
    let peers = [Peer::start(), Peer::start(), Peer::start()];
    let f = Arc::new(
        Fanout::new(peers.iter().map(Peer::addr).collect(), Options::default()).expect("fanout"),
    );
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let f = Arc::clone(&f);
            thread::spawn(move || {
                for i in 0..40 {
                    let value = format!("{t}-{i}");
                    let mut round = f.round(soon(5_000));
                    round.need(2);
                    round.send_all(&command(&[b"ECHO", value.as_bytes()]), 1);
                    let got = outcomes(&mut round);
                    assert_eq!(got.len(), 3);
                    assert!(got.values().all(|r| r == &Ok(bulk(&value))), "{got:?}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a thread");
    }
    let replies: u64 = (0..3).map(|n| f.stats(n).replies).sum();
    assert_eq!(replies, 6 * 40 * 3);
}

/// A task's round is awaited without blocking: it gets its replies (a background driver polls for it), also while
/// a thread's round drives.
#[test]
fn a_task_awaits_its_rounds_replies_without_blocking() {
    let (slow, fast) = (Peer::start(), Peer::start());
    let f =
        Arc::new(Fanout::new(vec![slow.addr(), fast.addr()], Options::default()).expect("fanout"));
    let start = Instant::now();
    for i in 0..5 {
        let value = format!("task-{i}");
        let mut round = f.round(soon(5_000));
        round.send(1, &command(&[b"ECHO", value.as_bytes()]), 1);
        let got = block_on(round.next_async());
        assert_eq!(
            got.map(|(id, r)| (id.node, id.seq, r)),
            Some((1, 0, Ok(bulk(&value))))
        );
        assert!(block_on(round.next_async()).is_none());
    }
    assert!(
        start.elapsed() < Duration::from_millis(5_000),
        "tasks took {:?}",
        start.elapsed()
    );
    // A thread drives for a slow reply; a task's reply on the other node comes meanwhile.
    let driver = a_thread_drives_for(&f, b"4000");
    let start = Instant::now();
    let mut round = f.round(soon(5_000));
    round.send(1, &command(&[b"ECHO", b"beside"]), 1);
    let got = block_on(round.next_async());
    assert_eq!(got.map(|(_, r)| r), Some(Ok(bulk("beside"))));
    assert!(
        start.elapsed() < Duration::from_millis(1_500),
        "a task waited {:?} behind a thread's round",
        start.elapsed()
    );
    drop(round);
    assert_eq!(
        driver
            .join()
            .expect("thread")
            .into_values()
            .collect::<Vec<_>>(),
        [Ok(bulk("slow"))]
    );
}

/// A task's round times out at its deadline like a thread's.
#[test]
fn a_task_s_round_times_out_at_its_deadline() {
    let peer = Peer::start();
    let f = Fanout::new(vec![peer.addr()], Options::default()).expect("fanout");
    let start = Instant::now();
    let mut round = f.round(start + Duration::from_millis(150));
    round.send(0, &command(&[b"SLEEP", b"2000", b"late"]), 1);
    let got = block_on(round.next_async());
    assert_eq!(got.map(|(_, r)| r), Some(Err(NodeError::Timeout)));
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(1_800),
        "{took:?}"
    );
}

/// Pushes read by any round are kept for `recv_pushes`; `interrupt` ends a wait for them at once.
#[test]
fn pushes_are_kept_for_recv_pushes_and_interrupt_ends_its_wait() {
    let peer = Peer::start();
    let f = Arc::new(
        Fanout::new(vec![peer.addr()], Options::default().with_pushes(true)).expect("fanout"),
    );
    let mut round = f.round(soon(5_000));
    round.send(0, &command(&[b"PUSH", b"hello"]), 1);
    assert_eq!(
        outcomes(&mut round).into_values().collect::<Vec<_>>(),
        [Ok(Value::SimpleString(Bytes::from_static(b"OK")))]
    );
    drop(round);
    let start = Instant::now();
    let pushes = f.recv_pushes(start + Duration::from_secs(8));
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "pushes waiting, returned only after {:?}",
        start.elapsed()
    );
    assert!(!pushes.dropped);
    assert_eq!(pushes.pushes.len(), 1, "{pushes:?}");
    assert_eq!(pushes.pushes[0].0, 0);
    assert_eq!(
        pushes.pushes[0].1,
        Value::Push(vec![bulk("message"), bulk("hello")])
    );
    // Nothing more: it waits to its deadline.
    let start = Instant::now();
    assert!(
        f.recv_pushes(start + Duration::from_millis(100))
            .pushes
            .is_empty()
    );
    assert!(start.elapsed() >= Duration::from_millis(100));
    // A listener waiting long is let go by `interrupt`.
    let listener = {
        let f = Arc::clone(&f);
        thread::spawn(move || {
            let start = Instant::now();
            let pushes = f.recv_pushes(start + Duration::from_secs(20));
            (pushes.pushes.len(), start.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(100));
    f.interrupt();
    let (n, waited) = listener.join().expect("listener");
    assert_eq!(n, 0);
    assert!(
        waited < Duration::from_secs(5),
        "interrupted after {waited:?}"
    );
    // A push read by a round while the listener waits (another thread drives) reaches the listener.
    let listener = {
        let f = Arc::clone(&f);
        thread::spawn(move || {
            let pushes = f.recv_pushes(soon(10_000));
            pushes
                .pushes
                .into_iter()
                .map(|(_, v)| v)
                .collect::<Vec<_>>()
        })
    };
    thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let mut round = f.round(soon(5_000));
    round.send(0, &command(&[b"PUSH", b"again"]), 1);
    assert!(outcomes(&mut round).values().all(Result::is_ok));
    drop(round);
    assert_eq!(
        listener.join().expect("listener"),
        [Value::Push(vec![bulk("message"), bulk("again")])]
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the listener was woken only after {:?}",
        start.elapsed()
    );
}

/// A vacant connection fails every request until it is given an address; then it is dialled and answers. An
/// address is given once; an occupier outliving its fanout does nothing.
#[test]
fn a_vacant_connection_fails_its_votes_until_it_is_occupied() {
    let (first, later) = (Peer::start(), Peer::start());
    let placeholder = nobody();
    let f = Fanout::with_vacancies(
        vec![first.addr(), placeholder.clone()],
        1,
        Options::default(),
    )
    .expect("fanout");
    let mut round = f.round(soon(3_000));
    round.send_all(&command(&[b"ECHO", b"x"]), 1);
    let got = outcomes(&mut round);
    drop(round);
    assert_eq!(got.get(&(0, 0)), Some(&Ok(bulk("x"))));
    assert!(
        matches!(got.get(&(1, 0)), Some(Err(NodeError::Cluster(_)))),
        "{got:?}"
    );
    assert_eq!(f.addr(1), Some(placeholder));
    let occupier = f.occupier();
    assert!(!occupier.occupy(0, later.addr()), "an occupied connection");
    assert!(!f.occupy(7, later.addr()), "out of range");
    assert!(f.occupy(1, later.addr()));
    assert!(!occupier.occupy(1, first.addr()), "occupied already");
    assert!(!f.occupy(1, first.addr()), "occupied already");
    assert_eq!(
        (f.addr(1), occupier.addr(1)),
        (Some(later.addr()), Some(later.addr()))
    );
    let mut round = f.round(soon(5_000));
    round.send(1, &command(&[b"ECHO", b"y"]), 1);
    assert_eq!(
        outcomes(&mut round).into_values().collect::<Vec<_>>(),
        [Ok(bulk("y"))]
    );
    drop(round);
    drop(f);
    assert!(!occupier.occupy(1, first.addr()));
    assert_eq!(occupier.addr(0), None);
}

/// A release round's request that finds its node without room waits for it; one still waiting when its round is
/// dropped is detached, and sent on its own once replies make room.
#[test]
fn a_release_held_for_room_is_sent_after_its_round_is_dropped() {
    let peer = Peer::start();
    let opts = Options::default().with_max_in_flight(1);
    let f = Fanout::new(vec![peer.addr()], opts).expect("fanout");
    let mut round = f.round(soon(5_000));
    round.send(0, &command(&[b"PING"]), 1);
    assert!(outcomes(&mut round).values().all(Result::is_ok));
    drop(round);
    // The node's room, then the release reserve, taken by slow requests.
    let mut busy = f.round(soon(5_000));
    busy.send(0, &command(&[b"SLEEP", b"300", b"a"]), 1);
    let refused = busy.send(0, &command(&[b"ECHO", b"over"]), 1);
    assert_eq!(refused, NodeSet::EMPTY, "an ordinary request past the room");
    let mut release = f.release_round(soon(100));
    assert!(
        release
            .send(0, &command(&[b"SLEEP", b"300", b"b"]), 1)
            .contains(0)
    );
    assert!(
        release
            .send(0, &command(&[b"ECHO", b"held"]), 1)
            .contains(0),
        "held"
    );
    drop(release);
    let got = outcomes(&mut busy);
    assert_eq!(got.get(&(0, 0)), Some(&Ok(bulk("a"))));
    assert_eq!(got.get(&(0, 1)), Some(&Err(NodeError::Overloaded)));
    drop(busy);
    assert!(
        peer.received(&[b"ECHO", b"held"], Duration::from_secs(3)),
        "the detached release never went: {:?}",
        peer.log()
    );
    assert_eq!(f.stats(0).detached, 1, "{:?}", f.stats(0));
}

/// A release round's held request goes once its round's replies make room, while its round still waits.
#[test]
fn a_release_held_for_room_goes_while_its_round_waits() {
    let peer = Peer::start();
    let f =
        Fanout::new(vec![peer.addr()], Options::default().with_max_in_flight(1)).expect("fanout");
    let mut release = f.release_round(soon(5_000));
    release.send(0, &command(&[b"SLEEP", b"100", b"a"]), 1);
    release.send(0, &command(&[b"SLEEP", b"100", b"b"]), 1);
    release.send(0, &command(&[b"ECHO", b"c"]), 1);
    let got = outcomes(&mut release);
    let want: BTreeMap<_, _> = [
        ((0, 0), Ok(bulk("a"))),
        ((0, 1), Ok(bulk("b"))),
        ((0, 2), Ok(bulk("c"))),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
}

#[test]
fn a_fanout_of_too_many_nodes_is_refused() {
    let addr: NodeAddr = "127.0.0.1:1".parse().expect("address");
    let err = Fanout::new(vec![addr; 1 << 16], Options::default()).expect_err("too many");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

/// When the driving round ends, a sleeping round still waiting for its reply is handed the poll: it reads its
/// reply when it comes, not at its deadline.
#[test]
fn a_round_that_ends_hands_the_poll_to_a_sleeping_round() {
    let (a, b) = (Peer::start(), Peer::start());
    let f = Arc::new(Fanout::new(vec![a.addr(), b.addr()], Options::default()).expect("fanout"));
    all_up(&f);
    let driver = {
        let f = Arc::clone(&f);
        thread::spawn(move || {
            let mut round = f.round(soon(5_000));
            round.send(0, &command(&[b"SLEEP", b"300", b"first"]), 1);
            outcomes(&mut round)
        })
    };
    thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let mut round = f.round(soon(8_000));
    round.send(1, &command(&[b"SLEEP", b"800", b"second"]), 1);
    let got = outcomes(&mut round);
    let took = start.elapsed();
    assert_eq!(got.into_values().collect::<Vec<_>>(), [Ok(bulk("second"))]);
    assert!(
        took < Duration::from_millis(3_000),
        "read only after {took:?}"
    );
    assert_eq!(
        driver
            .join()
            .expect("driver")
            .into_values()
            .collect::<Vec<_>>(),
        [Ok(bulk("first"))]
    );
}

/// A connection the node closed fails what was on it; the next request goes on a new connection, in the next
/// session.
#[test]
fn a_connection_closed_by_its_node_is_dialled_again_in_a_new_session() {
    let peer = Peer::start();
    let f = Fanout::new(vec![peer.addr()], Options::default()).expect("fanout");
    let mut round = f.round(soon(5_000));
    round.send(0, &command(&[b"CLOSE"]), 1);
    let got = outcomes(&mut round);
    drop(round);
    assert!(matches!(got.get(&(0, 0)), Some(Err(_))), "{got:?}");
    assert_eq!(f.sessions(0), 1);
    assert!(!f.is_up(0));
    assert_eq!(f.next_session(0), 2, "down: the next session");
    // Past its backoff (10 ms), it is dialled again.
    thread::sleep(Duration::from_millis(100));
    let mut round = f.round(soon(5_000));
    round.send(0, &command(&[b"ECHO", b"again"]), 1);
    assert_eq!(
        outcomes(&mut round).into_values().collect::<Vec<_>>(),
        [Ok(bulk("again"))]
    );
    assert_eq!((f.sessions(0), f.next_session(0)), (2, 2));
    assert_eq!(f.stats(0).connects, 2);
}

/// A connection that drops or completes its set-up shows in `set_up_sessions` (the session it is in, `None` while
/// down), and a `recv_pushes` after it returns at once, with nothing: its listener's pushes may have been lost.
#[test]
fn a_connection_that_drops_or_comes_back_shows_in_its_sessions_and_ends_a_wait_for_pushes() {
    let peers = [Peer::start(), Peer::start()];
    let addrs = peers.iter().map(Peer::addr).collect();
    let f = Fanout::new(addrs, Options::default().with_pushes(true)).expect("fanout");
    all_up(&f);
    assert_eq!(f.set_up_sessions(), [Some(1), Some(1)]);
    // The listener's first call notes the connections as they are; nothing changes: it waits to its deadline.
    let start = Instant::now();
    assert!(
        f.recv_pushes(start + Duration::from_millis(50))
            .pushes
            .is_empty()
    );
    assert!(start.elapsed() >= Duration::from_millis(50));
    let wait_for_pushes = |what: &str| {
        let start = Instant::now();
        let got = f.recv_pushes(start + Duration::from_secs(20));
        assert!(got.pushes.is_empty() && !got.dropped, "{got:?}");
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(5),
            "{what}: returned after {took:?}"
        );
    };
    let mut round = f.round(soon(5_000));
    round.send(1, &command(&[b"CLOSE"]), 1);
    assert!(outcomes(&mut round).values().all(Result::is_err));
    drop(round);
    assert_eq!(f.set_up_sessions(), [Some(1), None], "node 1 down");
    wait_for_pushes("after node 1 dropped");
    // Past its backoff (10 ms), node 1 is dialled again, in its next session.
    thread::sleep(Duration::from_millis(100));
    let mut round = f.round(soon(5_000));
    round.send(1, &command(&[b"ECHO", b"again"]), 1);
    assert!(outcomes(&mut round).values().all(Result::is_ok));
    drop(round);
    assert_eq!(f.set_up_sessions(), [Some(1), Some(2)], "node 1 back");
    wait_for_pushes("after node 1 came back");
}

/// A close that comes right behind the last bytes of a half reply fails the request at once: the poll reports
/// the bytes and the close in one edge-triggered event, and no later event would report the close, so the
/// connection is read to its end then, not left open until the round's deadline.
#[test]
fn a_close_that_comes_with_the_last_bytes_fails_the_request_at_once() {
    let peer = Peer::start();
    let f = Fanout::new(vec![peer.addr()], Options::default()).expect("fanout");
    let started = Instant::now();
    let mut round = f.round(soon(2_000));
    round.send(0, &command(&[b"HALF", b"half a reply"]), 1);
    let got = outcomes(&mut round);
    let took = started.elapsed();
    assert_eq!(
        got.into_values().collect::<Vec<_>>(),
        [Err(NodeError::Closed)],
        "after {took:?}"
    );
    assert!(
        took < Duration::from_millis(1_000),
        "the close was seen after {took:?}"
    );
}

/// A release round that holds a request for room, and sleeps while another thread's round polls, looks again
/// soon: the room another round's reply frees is nobody's event to wake it for, so it finds it by itself, not at
/// the poll's hand-off or its own deadline.
#[test]
fn a_sleeping_release_round_sends_its_held_request_once_another_rounds_reply_makes_room() {
    let (a, b) = (Peer::start(), Peer::start());
    let opts = Options::default().with_max_in_flight(1);
    let f = Arc::new(Fanout::new(vec![a.addr(), b.addr()], opts).expect("fanout"));
    all_up(&f);
    // Another thread polls for 2 s; its request on node 0 takes the node's room for 300 ms.
    let driver = {
        let f = Arc::clone(&f);
        thread::spawn(move || {
            let mut round = f.round(soon(5_000));
            round.send(0, &command(&[b"SLEEP", b"300", b"room"]), 1);
            round.send(1, &command(&[b"SLEEP", b"2000", b"long"]), 1);
            outcomes(&mut round)
        })
    };
    until_another_thread_polls(&f);
    // A release takes the release reserve (answered right behind the first); the next is held for room.
    let mut reserve = f.release_round(soon(5_000));
    assert!(
        reserve
            .send(0, &command(&[b"ECHO", b"reserve"]), 1)
            .contains(0)
    );
    let started = Instant::now();
    let mut release = f.release_round(soon(5_000));
    assert!(
        release
            .send(0, &command(&[b"ECHO", b"held"]), 1)
            .contains(0)
    );
    assert_eq!(
        f.in_flight(0),
        2,
        "the node's room and reserve, the held one not"
    );
    let got = outcomes(&mut release);
    let took = started.elapsed();
    assert_eq!(got.into_values().collect::<Vec<_>>(), [Ok(bulk("held"))]);
    assert!(
        took < Duration::from_millis(1_200),
        "the held release went after {took:?}, with the poll's hand-off"
    );
    assert_eq!(outcomes(&mut reserve).len(), 1);
    let polled = driver.join().expect("the driving thread");
    assert_eq!(polled.get(&(1, 0)), Some(&Ok(bulk("long"))));
}

#[test]
fn a_fanout_tells_its_size_and_shows_it_in_debug() {
    let peer = Peer::start();
    let f = Fanout::new(vec![peer.addr(), nobody()], Options::default()).expect("fanout");
    assert!(!f.is_empty());
    let shown = format!("{f:?}");
    assert!(shown.contains("nodes: 2"), "{shown}");
    let none = Fanout::new(Vec::new(), Options::default()).expect("an empty fanout");
    assert!(none.is_empty());
    assert_eq!(none.len(), 0);
}

/// Without `with_pushes`, pushes are read and dropped: nothing waits for `recv_pushes`.
#[test]
fn pushes_are_dropped_unless_kept() {
    let peer = Peer::start();
    let f = Fanout::new(vec![peer.addr()], Options::default()).expect("fanout");
    let mut round = f.round(soon(5_000));
    round.send(0, &command(&[b"PUSH", b"unwanted"]), 1);
    assert_eq!(
        outcomes(&mut round).into_values().collect::<Vec<_>>(),
        [Ok(Value::SimpleString(Bytes::from_static(b"OK")))]
    );
    drop(round);
    let pushes = f.recv_pushes(soon(100));
    assert!(pushes.pushes.is_empty() && !pushes.dropped, "{pushes:?}");
}

/// A reply larger than what one turn reads from a connection is read whole over several turns, with no new
/// event from the socket in between.
#[test]
fn a_reply_larger_than_a_turns_read_budget_is_read_whole() {
    let peer = Peer::start();
    let f = Fanout::new(vec![peer.addr()], Options::default()).expect("fanout");
    // Large replies first, so that the kernel grows the connection's buffers.
    let warm = "w".repeat(2 << 20);
    for _ in 0..3 {
        let mut round = f.round(soon(5_000));
        round.send(0, &command(&[b"ECHO", warm.as_bytes()]), 1);
        assert!(outcomes(&mut round).values().all(Result::is_ok));
    }
    // Several read budgets' worth, all of it in the socket's buffers before anyone reads.
    let big = "x".repeat(1 << 20);
    let mut round = f.round(soon(4_000));
    round.send(0, &command(&[b"ECHO", big.as_bytes()]), 1);
    thread::sleep(Duration::from_millis(300));
    let got = outcomes(&mut round);
    assert_eq!(got.get(&(0, 0)), Some(&Ok(bulk(&big))));
}

/// A driver that busy-polls first (`with_spin`) gets its replies as one that sleeps at once.
#[test]
fn a_spinning_driver_gets_its_replies() {
    let peer = Peer::start();
    let opts = Options::default().with_spin(Duration::from_micros(200));
    let f = Fanout::new(vec![peer.addr()], opts).expect("fanout");
    for i in 0..5 {
        let value = format!("spin-{i}");
        let mut round = f.round(soon(5_000));
        round.send(0, &command(&[b"ECHO", value.as_bytes()]), 1);
        assert_eq!(
            outcomes(&mut round).into_values().collect::<Vec<_>>(),
            [Ok(bulk(&value))]
        );
    }
    let mut round = f.round(soon(100));
    round.send(0, &command(&[b"SLEEP", b"1000", b"late"]), 1);
    assert_eq!(
        outcomes(&mut round).into_values().collect::<Vec<_>>(),
        [Err(NodeError::Timeout)]
    );
}

/// A round waited on while another round of the same thread keeps the poll (between its `next()` calls) can get
/// no reply: at its deadline it times out what is due, without a turn, rather than waiting forever.
#[test]
fn a_round_waited_on_while_its_thread_keeps_the_poll_times_out_at_its_deadline() {
    let (a, b) = (Peer::start(), Peer::start());
    let f = Fanout::new(vec![a.addr(), b.addr()], Options::default()).expect("fanout");
    let mut keeping = f.round(soon(10_000));
    let mut two = command(&[b"ECHO", b"first"]);
    two.extend(command(&[b"SLEEP", b"3000", b"second"]));
    keeping.send(0, &two, 2);
    let first = keeping.next().map(|(id, r)| (id.seq, r));
    assert_eq!(first, Some((0, Ok(bulk("first")))));
    // `keeping` holds the poll now. Another round of this thread:
    let start = Instant::now();
    let mut other = f.round(start + Duration::from_millis(300));
    other.send(1, &command(&[b"SLEEP", b"2000", b"x"]), 1);
    let got = other.next().map(|(_, r)| r);
    let took = start.elapsed();
    assert_eq!(got, Some(Err(NodeError::Timeout)));
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(1_800),
        "{took:?}"
    );
    assert!(other.next().is_none());
    drop(other);
    let second = keeping.next().map(|(id, r)| (id.seq, r));
    assert_eq!(second, Some((1, Ok(bulk("second")))));
}

/// A round sleeping while another thread polls until a later deadline times out at its own deadline: it wakes
/// the poll to come out by then.
#[test]
fn a_sleeping_round_times_out_at_its_deadline_while_another_polls_longer() {
    let (a, b) = (Peer::start(), Peer::start());
    let f = Arc::new(Fanout::new(vec![a.addr(), b.addr()], Options::default()).expect("fanout"));
    all_up(&f);
    let driver = a_thread_drives_for(&f, b"4000");
    let start = Instant::now();
    let mut round = f.round(start + Duration::from_millis(300));
    round.send(1, &command(&[b"SLEEP", b"5000", b"never"]), 1);
    let got = outcomes(&mut round);
    let took = start.elapsed();
    drop(round);
    assert_eq!(
        got.into_values().collect::<Vec<_>>(),
        [Err(NodeError::Timeout)]
    );
    assert!(
        took < Duration::from_millis(2_500),
        "timed out only after {took:?}"
    );
    assert_eq!(
        driver
            .join()
            .expect("driver")
            .into_values()
            .collect::<Vec<_>>(),
        [Ok(bulk("slow"))]
    );
}

/// A round that needs two outcomes sleeps through the first while another thread polls: its first `next()`
/// returns once both are filed, not at the first.
#[test]
fn a_round_that_needs_two_outcomes_sleeps_through_the_first() {
    let (slow, a, b) = (Peer::start(), Peer::start(), Peer::start());
    let f = Arc::new(
        Fanout::new(vec![slow.addr(), a.addr(), b.addr()], Options::default()).expect("fanout"),
    );
    all_up(&f);
    let driver = a_thread_drives_for(&f, b"3000");
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut round = f.round(soon(5_000));
    round.need(2);
    // The first outcome comes while the round sleeps (not before its first `next()`, which would return it).
    round.send(1, &command(&[b"SLEEP", b"200", b"sooner"]), 1);
    round.send(2, &command(&[b"SLEEP", b"800", b"later"]), 1);
    // Unparks meant for nobody (a wake-up of an earlier round that came after it woke on its own leaves one)
    // must not wake the round before it has what it needs.
    let stray = {
        let (sleeper, stop) = (thread::current(), Arc::clone(&stop));
        thread::spawn(move || {
            for _ in 0..2_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                sleeper.unpark();
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let first = round.next().map(|(id, r)| (id.node, r));
    stop.store(true, Ordering::Relaxed);
    stray.join().expect("stray unparks");
    let took = start.elapsed();
    assert_eq!(first, Some((1, Ok(bulk("sooner")))));
    assert!(
        took >= Duration::from_millis(700),
        "woken for one outcome of two, after {took:?}"
    );
    let second = round.next().map(|(id, r)| (id.node, r));
    assert_eq!(second, Some((2, Ok(bulk("later")))));
    drop(round);
    assert_eq!(
        driver
            .join()
            .expect("driver")
            .into_values()
            .collect::<Vec<_>>(),
        [Ok(bulk("slow"))]
    );
}

/// A node that takes the client's bytes and never replies (a slow reader in front of a hung server) is dropped as
/// hung `hung_timeout` after its last reply, however long it goes on taking a large request: room to write
/// is no sign of life, only bytes read are.
#[test]
fn a_node_that_takes_requests_but_never_replies_is_dropped_as_hung() {
    use crate::net::machine::Link;
    let peer = Peer::start();
    let hung = Duration::from_millis(200);
    let f = Fanout::new(
        vec![peer.addr()],
        Options::default().with_hung_timeout(hung),
    )
    .expect("fanout");
    all_up(&f);
    // A small send buffer: the request below goes out in stretches, each once the peer (reading 800 KB/s) has
    // read some, for about 2.5 s; each stretch starts with the socket's edge that says there is room again.
    {
        let inner = crate::sync::lock(&f.shared.inner);
        let transport = inner.m.conns[0].link.handle().expect("connected");
        socket2::SockRef::from(transport.socket())
            .set_send_buffer_size(32 << 10)
            .expect("SO_SNDBUF");
    }
    let large = vec![b'x'; 2 << 20];
    let mut request = command(&[b"MUTE"]);
    request.extend(command(&[b"ECHO", &large]));
    let start = Instant::now();
    let mut round = f.round(start + Duration::from_secs(10));
    round.send(0, &request, 2);
    let got = outcomes(&mut round);
    let took = start.elapsed();
    assert_eq!(
        got.into_values().collect::<Vec<_>>(),
        [Err(NodeError::Hung(hung)), Err(NodeError::Hung(hung))],
        "after {took:?}"
    );
    assert!(
        took < Duration::from_millis(1_000),
        "dropped as hung only after {took:?}"
    );
}

/// Runs a task's round to node 0's reply to `ECHO x`, which starts the background driver, then waits (at most
/// 5 s) until that driver, with no task waiting any more, has given the driver back after its lingering, and
/// a little more: it parks then, with no timeout, until someone unparks it.
fn until_the_background_driver_parks(f: &Fanout, x: &[u8]) {
    let mut round = f.round(soon(5_000));
    round.send(0, &command(&[b"ECHO", x]), 1);
    let got = block_on(round.next_async()).map(|(_, r)| r);
    assert_eq!(got, Some(Ok(Value::BulkString(Bytes::copy_from_slice(x)))));
    drop(round);
    let deadline = Instant::now() + Duration::from_secs(5);
    while crate::sync::lock(&f.shared.inner).driver.is_none() {
        assert!(
            Instant::now() < deadline,
            "the background driver kept the poll"
        );
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_millis(20));
}

/// A task whose round waits while the driver is free and the background driver parked unparks that driver,
/// which then reads the task's reply: nobody else would (a task never drives while the background driver runs).
#[test]
fn a_task_that_waits_while_the_background_driver_is_parked_wakes_it() {
    let peer = Peer::start();
    let f = Arc::new(Fanout::new(vec![peer.addr()], Options::default()).expect("fanout"));
    until_the_background_driver_parks(&f, b"first");
    let (tx, rx) = std::sync::mpsc::channel();
    let task = {
        let f = Arc::clone(&f);
        thread::spawn(move || {
            let mut round = f.round(soon(5_000));
            round.send(0, &command(&[b"ECHO", b"second"]), 1);
            let got = block_on(round.next_async()).map(|(_, r)| r);
            let _ = tx.send(got);
        })
    };
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(3)),
        Ok(Some(Ok(bulk("second")))),
        "the task's round was driven by nobody"
    );
    task.join().expect("task");
}

/// A release round dropped while its request is held for room, the driver free and the background driver
/// parked, wakes that driver (the free driver's successor, as releases are detached): the detached release goes
/// once a reply makes room, with no round left to drive for it.
#[test]
fn a_release_detached_while_nobody_drives_wakes_the_background_driver() {
    let peer = Peer::start();
    let opts = Options::default().with_max_in_flight(1);
    let f = Fanout::new(vec![peer.addr()], opts).expect("fanout");
    until_the_background_driver_parks(&f, b"up");
    // The node's room, then the release reserve, taken by slow requests; the last request is held.
    let mut busy = f.round(soon(5_000));
    busy.send(0, &command(&[b"SLEEP", b"300", b"a"]), 1);
    let mut release = f.release_round(soon(100));
    release.send(0, &command(&[b"SLEEP", b"300", b"b"]), 1);
    assert!(
        release
            .send(0, &command(&[b"ECHO", b"held"]), 1)
            .contains(0),
        "held"
    );
    drop(release);
    // Nobody calls `busy.next()`: the background driver alone reads the replies that make room.
    assert!(
        peer.received(&[b"ECHO", b"held"], Duration::from_secs(3)),
        "the detached release never went: {:?}",
        peer.log()
    );
    drop(busy);
    assert_eq!(f.stats(0).detached, 1, "{:?}", f.stats(0));
}
