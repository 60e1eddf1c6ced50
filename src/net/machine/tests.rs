//! The machine's connection rules alone, over links that only record what they were asked: the client dials
//! at build, a failed dial or a refused connect keeps the node down for its backoff, and bytes read put off the
//! hung check. (Everything else runs in the simulator, `tests/sim/`, on the same machine.)

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{Link, Machine};
use crate::net::addr::NodeAddr;
use crate::net::error::NodeError;
use crate::net::inbound::Item;
use crate::net::options::Options;

/// A link that records its dials, closes and failed connects; it fails every dial if `refuse`.
#[derive(Debug)]
struct Recorder {
    addr: NodeAddr,
    vacant: bool,
    refuse: bool,
    open: Option<u32>,
    dials: Vec<u32>,
    closes: usize,
    connects_failed: usize,
}

impl Recorder {
    fn new(vacant: bool, refuse: bool) -> Recorder {
        Recorder {
            addr: "127.0.0.1:6379".parse().expect("address"),
            vacant,
            refuse,
            open: None,
            dials: Vec::new(),
            closes: 0,
            connects_failed: 0,
        }
    }
}

impl Link for Recorder {
    type Handle = u32;

    fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    fn is_vacant(&self) -> bool {
        self.vacant
    }

    fn dial(&mut self, generation: u32) -> Result<(), NodeError> {
        self.dials.push(generation);
        if self.refuse {
            return Err(NodeError::Refused);
        }
        self.open = Some(generation);
        Ok(())
    }

    fn close(&mut self) {
        self.closes += 1;
        self.open = None;
    }

    fn connect_failed(&mut self) {
        self.connects_failed += 1;
    }

    fn handle(&self) -> Option<u32> {
        self.open
    }
}

fn machine(links: Vec<Recorder>, now: Instant) -> Machine<Recorder> {
    // One set-up command, so that a new connection has a reply to wait for (the hung check needs one).
    let opts = Options::default()
        .with_backoff_min(Duration::from_millis(10))
        .with_hung_timeout(Duration::from_millis(100))
        .with_setup(vec![Bytes::from_static(b"*1\r\n$4\r\nPING\r\n")]);
    Machine::new(links, opts, now)
}

#[test]
fn building_dials_every_node_but_the_vacant_ones() {
    let now = Instant::now();
    let links = vec![
        Recorder::new(false, false),
        Recorder::new(true, false),
        Recorder::new(false, false),
    ];
    let mut m = machine(links, now);
    m.dial_all(now, &mut Vec::new());
    let dials: Vec<usize> = m.conns.iter().map(|c| c.link.dials.len()).collect();
    assert_eq!(dials, [1, 0, 1]);
    assert!(m.conns[0].state.is_connecting() && m.conns[2].state.is_connecting());
}

#[test]
fn a_dial_that_fails_at_once_keeps_the_node_down_for_its_backoff() {
    let now = Instant::now();
    let mut m = machine(vec![Recorder::new(false, true)], now);
    let mut wake = Vec::new();
    assert_eq!(m.ensure(0, now, &mut wake), Err(NodeError::Refused));
    assert_eq!(m.conns[0].link.connects_failed, 1);
    // Within the backoff: the node's vote is the refusal, without a dial.
    let soon = now + Duration::from_millis(5);
    assert_eq!(m.ensure(0, soon, &mut wake), Err(NodeError::Refused));
    assert_eq!(m.conns[0].link.dials.len(), 1);
    // Past it: dialled again.
    let later = now + Duration::from_millis(11);
    assert_eq!(m.ensure(0, later, &mut wake), Err(NodeError::Refused));
    assert_eq!(m.conns[0].link.dials.len(), 2);
}

#[test]
fn a_refused_connect_drops_its_connection_at_once_and_waits_for_its_backoff() {
    let now = Instant::now();
    let mut m = machine(vec![Recorder::new(false, false)], now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let generation = m.conns[0].state.generation;
    assert_eq!(m.conns[0].state.in_flight(), 1, "the set-up waits");
    // A refusal of a connection dropped before is not this one's.
    m.connect_failed(
        0,
        generation.wrapping_sub(1),
        NodeError::Refused,
        now,
        &mut wake,
    );
    assert!(m.conns[0].state.is_connecting());
    assert_eq!(m.conns[0].link.connects_failed, 0);
    let at = now + Duration::from_millis(1);
    m.connect_failed(0, generation, NodeError::Refused, at, &mut wake);
    let c = &m.conns[0];
    assert!(!c.state.is_connecting() && c.state.in_flight() == 0);
    assert_eq!((c.link.closes, c.link.connects_failed), (1, 1));
    assert_eq!(c.state.needs_dial(at), Err(NodeError::Refused));
    let past = at + Duration::from_millis(10);
    assert_eq!(m.ensure(0, past, &mut wake), Ok(()));
    assert_eq!(m.conns[0].link.dials.len(), 2);
}

#[test]
fn bytes_read_put_off_the_hung_check() {
    let now = Instant::now();
    let mut m = machine(vec![Recorder::new(false, false)], now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let generation = m.conns[0].state.generation;
    m.connected(0, generation, false, now);
    assert!(m.conns[0].state.is_up() && m.conns[0].state.in_flight() == 1);
    // Part of a reply at 90 ms: alive. At 150 ms it is not silent for 100 ms yet.
    m.progress(0, generation, now + Duration::from_millis(90));
    m.after_read(now + Duration::from_millis(150), true, &mut wake);
    assert_eq!(
        m.conns[0].state.generation, generation,
        "dropped while bytes came"
    );
    // Bytes of a connection since dropped are no sign of life for this one.
    m.progress(
        0,
        generation.wrapping_add(1),
        now + Duration::from_millis(180),
    );
    m.after_read(now + Duration::from_millis(190), true, &mut wake);
    assert_ne!(
        m.conns[0].state.generation, generation,
        "a silent connection kept"
    );
    // A connection that was up and hung is no failed connect: its name needs no resolving again.
    assert_eq!(m.conns[0].link.connects_failed, 0);
}

/// A node is silent once it has had requests outstanding and nothing read from it for the time asked and four times
/// its usual round trip: judged at the last read, not by the clock (a reply may wait unread in a socket nobody
/// polled), never before any read, never with nothing outstanding.
#[test]
fn a_node_is_silent_with_requests_unanswered_for_long_judged_at_the_last_read() {
    let now = Instant::now();
    let ms = |n: u64| now + Duration::from_millis(n);
    let opts = Options::default()
        .with_hung_timeout(Duration::from_secs(5))
        .with_setup(vec![Bytes::from_static(b"*1\r\n$4\r\nPING\r\n")]);
    let mut m = Machine::new(vec![Recorder::new(false, false)], opts, now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let generation = m.conns[0].state.generation;
    m.connected(0, generation, false, now);
    let quarter = Duration::from_millis(20);
    assert!(!m.silent(0, quarter), "judged before any read");
    m.after_read(ms(10), true, &mut wake);
    assert!(!m.silent(0, quarter), "silent 10 ms at the last read");
    m.after_read(ms(30), true, &mut wake);
    assert!(m.silent(0, quarter), "the set-up unanswered for 30 ms");
    m.progress(0, generation, ms(40));
    m.after_read(ms(50), true, &mut wake);
    assert!(
        !m.silent(0, quarter),
        "bytes read 10 ms before the last read"
    );
    m.after_read(ms(61), true, &mut wake);
    assert!(m.silent(0, quarter), "nothing for 21 ms");
    // Its replies, 100 ms after the set-up was queued: the node's usual round trip is now about 100 ms.
    while m.conns[0].state.in_flight() > 0 {
        let ok = crate::resp::Value::SimpleString(Bytes::from_static(b"OK"));
        m.read((0, generation), Item::Reply(ok), ms(100), &mut wake);
    }
    m.after_read(ms(200), true, &mut wake);
    assert!(
        !m.silent(0, quarter),
        "nothing outstanding: idle, not silent"
    );
    m.conns[0].state.queue(
        b"*1\r\n$4\r\nPING\r\n",
        crate::net::state::Waiter::Detached,
        1,
        ms(200),
    );
    m.after_read(ms(300), true, &mut wake);
    assert!(
        !m.silent(0, quarter),
        "silent 100 ms, within four times its usual round trip"
    );
    m.after_read(ms(700), true, &mut wake);
    assert!(m.silent(0, quarter), "silent 500 ms");
}

#[test]
fn a_detached_release_is_placed_once_its_node_is_set_up_or_given_up_at_its_bound() {
    let now = Instant::now();
    let links = vec![Recorder::new(false, false), Recorder::new(false, false)];
    let mut m = machine(links, now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let release = b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n".to_vec();
    m.detach((0, release.clone(), 1), now);
    m.detach((1, release, 1), now);
    // Node 0 answers its set-up; node 1 never connects.
    let generation = m.conns[0].state.generation;
    m.connected(0, generation, false, now);
    let pong = crate::resp::Value::SimpleString(Bytes::from_static(b"PONG"));
    m.read((0, generation), Item::Reply(pong), now, &mut wake);
    assert!(m.conns[0].state.is_set_up());
    m.after_read(now, true, &mut wake);
    assert!(
        m.conns[0].state.holds_detached(),
        "not placed on a node set up with room"
    );
    assert_eq!(m.conns[0].state.in_flight(), 1);
    // Node 1's waits no longer than its bound (`hung_timeout`), then is given up and counted.
    let past = now + Duration::from_millis(101);
    m.after_read(past, true, &mut wake);
    assert_eq!(m.detached.len(), 0);
    assert_eq!(m.conns[1].state.stats.snapshot().given_up, 1);
}

#[test]
fn a_connect_that_times_out_asks_the_link_to_resolve_the_name_again() {
    let now = Instant::now();
    let mut m = machine(vec![Recorder::new(false, false)], now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let timeout = m.opts.connect_timeout;
    m.after_read(now + timeout, true, &mut wake);
    assert!(!m.conns[0].state.is_connecting());
    assert_eq!(m.conns[0].state.last_error(), &NodeError::ConnectTimeout);
    assert_eq!(m.conns[0].link.connects_failed, 1);
}

#[test]
fn a_failed_write_drops_its_own_connection_not_the_next_one() {
    let now = Instant::now();
    let mut m = machine(vec![Recorder::new(false, false)], now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let first = m.conns[0].state.generation;
    m.connected(0, first, false, now);
    let write = m.take_write(0).expect("the set-up's bytes");
    // The connection is reset while its write is under way, and a new one is dialled and connected.
    m.read((0, first), Item::Failed(NodeError::Closed), now, &mut wake);
    assert_eq!(m.conns[0].link.closes, 1);
    let later = now + Duration::from_millis(20);
    assert_eq!(m.ensure(0, later, &mut wake), Ok(()));
    let second = m.conns[0].state.generation;
    m.connected(0, second, false, later);
    // The old write fails late: the new connection stays.
    m.written(write, (Err(NodeError::Closed), 1), later, &mut wake);
    assert_eq!(m.conns[0].state.generation, second);
    assert_eq!(
        (m.conns[0].link.closes, m.conns[0].link.open),
        (1, Some(second))
    );
    // The new connection's own write fails: it is dropped, its link closed.
    let write = m.take_write(0).expect("the set-up's bytes");
    m.written(write, (Err(NodeError::Closed), 1), later, &mut wake);
    assert_ne!(m.conns[0].state.generation, second);
    assert_eq!((m.conns[0].link.closes, m.conns[0].link.open), (2, None));
}

#[test]
fn a_driver_is_needed_exactly_while_bytes_or_detached_releases_wait() {
    let now = Instant::now();
    let mut m = machine(vec![Recorder::new(false, false)], now);
    let mut wake = Vec::new();
    assert!(!m.needs_driver(), "nothing waits");
    m.dial_all(now, &mut wake);
    assert!(m.needs_driver(), "the set-up waits behind the connect");
    let generation = m.conns[0].state.generation;
    m.connected(0, generation, false, now);
    let write = m.take_write(0).expect("the set-up's bytes");
    assert!(m.written(write, (Ok(true), 1), now, &mut wake).is_none());
    assert!(
        !m.needs_driver(),
        "the set-up is on the wire: its reply wakes a reader"
    );
    m.detach((0, b"*1\r\n$4\r\nPING\r\n".to_vec(), 1), now);
    assert!(m.needs_driver(), "a detached release waits");
}

/// Bytes handed to a transport are out of the machine's sight: nothing may be handed over while a TLS transport
/// would keep it waiting for a driver's turn. Queued during a handshake, the set-up stays queued (and a driver
/// needed) until the handshake completes; a write that met a full socket after TLS encrypted all of it (nothing
/// left here, the records waiting in rustls) keeps a driver needed, and is taken again, until one ends with the
/// socket taking all.
#[test]
fn a_driver_is_needed_while_a_tls_handshake_or_a_full_socket_keeps_bytes_from_the_wire() {
    let now = Instant::now();
    let mut m = machine(vec![Recorder::new(false, false)], now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let generation = m.conns[0].state.generation;
    m.connected(0, generation, true, now);
    assert!(
        m.take_write(0).is_none(),
        "nothing is handed to TLS before its handshake completes"
    );
    assert!(m.needs_driver(), "the set-up waits behind the handshake");
    m.read((0, generation), Item::Secured, now, &mut wake);
    let mut write = m.take_write(0).expect("the set-up, once secured");
    assert_eq!(&write.bytes[..], b"*1\r\n$4\r\nPING\r\n");
    // TLS encrypted all of it, and the socket took none of the records.
    write.bytes.clear();
    assert!(m.written(write, (Ok(false), 0), now, &mut wake).is_none());
    assert!(m.needs_driver(), "the records wait in TLS for the socket");
    assert!(!m.conns[0].state.is_idle());
    let write = m.take_write(0).expect("the stalled write, resumed");
    assert!(write.bytes.is_empty());
    assert!(m.written(write, (Ok(true), 1), now, &mut wake).is_none());
    assert!(!m.needs_driver(), "on the wire: its reply wakes a reader");
    assert!(m.take_write(0).is_none());
}

/// Past its first deadline, a patient round waits for a node that showed a sign of life within its patience (the
/// round's first length), up to its hard limit, while a silent node times out at once; the waited-for node's
/// reply is then filed as its outcome.
#[test]
fn a_patient_round_waits_past_its_deadline_for_a_node_still_answering() {
    use super::RoundState;
    use crate::net::state::Priority;
    let ms = Duration::from_millis;
    let now = Instant::now();
    let opts = Options::default().with_hung_timeout(Duration::from_secs(5));
    let links = vec![Recorder::new(false, false), Recorder::new(false, false)];
    let mut m = Machine::new(links, opts, now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let generations: Vec<u32> = m.conns.iter().map(|c| c.state.generation).collect();
    for (node, &g) in generations.iter().enumerate() {
        m.connected(node, g, false, now);
    }
    let mut round = RoundState::open(&mut m, now + ms(10), Priority::Normal);
    round.patient_until(now + ms(100), now);
    let ping = b"*1\r\n$4\r\nPING\r\n";
    let (mut writes, mut full) = (Vec::new(), Vec::new());
    let requests = [(0, &ping[..], 1), (1, &ping[..], 1)];
    let sent = round.offer_each(
        &mut m,
        requests.into_iter(),
        now,
        (&mut writes, &mut wake),
        &mut full,
    );
    assert!(sent.contains(0) && sent.contains(1) && full.is_empty());
    for w in writes.drain(..) {
        m.written(w, (Ok(true), 1), now, &mut wake);
    }
    // Node 0 sends part of its reply at 8 ms; node 1 nothing. A turn reads the sockets at the deadline.
    m.progress(0, generations[0], now + ms(8));
    m.after_read(now + ms(10), true, &mut wake);
    while round.time_out_due(&mut m) {}
    let first = m.slots.take(round.slot).map(|(id, r)| (id.node, r));
    assert_eq!(first, Some((1, Err(NodeError::Timeout))), "the silent node");
    assert_eq!(
        m.slots.take(round.slot),
        None,
        "node 0 timed out though it answers"
    );
    assert_eq!(
        round.deadline,
        now + ms(18),
        "waited for one patience past its sign of life"
    );
    // The rest of its reply comes at 15 ms: its outcome.
    let pong = crate::resp::Value::SimpleString(Bytes::from_static(b"PONG"));
    m.read(
        (0, generations[0]),
        Item::Reply(pong.clone()),
        now + ms(15),
        &mut wake,
    );
    let second = m.slots.take(round.slot).map(|(id, r)| (id.node, r));
    assert_eq!(second, Some((0, Ok(pong))));
    assert!(m.slots.settled(round.slot));
}

/// A round cut short times its owed outcomes out at the cut, not at its deadline, patient or not; an outcome filed
/// before the cut is kept, and a later cut never moves the deadline back out.
#[test]
fn a_round_cut_short_times_out_what_it_still_owes_at_the_cut() {
    use super::RoundState;
    use crate::net::state::Priority;
    let ms = Duration::from_millis;
    let now = Instant::now();
    let links = vec![Recorder::new(false, false), Recorder::new(false, false)];
    let mut m = Machine::new(links, Options::default(), now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let generations: Vec<u32> = m.conns.iter().map(|c| c.state.generation).collect();
    for (node, &g) in generations.iter().enumerate() {
        m.connected(node, g, false, now);
    }
    let mut round = RoundState::open(&mut m, now + ms(100), Priority::Normal);
    round.patient_until(now + ms(400), now);
    let ping = b"*1\r\n$4\r\nPING\r\n";
    let (mut writes, mut full) = (Vec::new(), Vec::new());
    let requests = [(0, &ping[..], 1), (1, &ping[..], 1)];
    round.offer_each(
        &mut m,
        requests.into_iter(),
        now,
        (&mut writes, &mut wake),
        &mut full,
    );
    for w in writes.drain(..) {
        m.written(w, (Ok(true), 1), now, &mut wake);
    }
    let pong = crate::resp::Value::SimpleString(Bytes::from_static(b"PONG"));
    m.read(
        (0, generations[0]),
        Item::Reply(pong.clone()),
        now + ms(2),
        &mut wake,
    );
    round.cut_short(&mut m, now + ms(5));
    round.cut_short(&mut m, now + ms(50));
    assert_eq!((round.deadline, round.hard), (now + ms(5), now + ms(5)));
    // Node 1 still answers (bytes at 4 ms), but the cut round is not patient.
    m.progress(1, generations[1], now + ms(4));
    m.after_read(now + ms(5), true, &mut wake);
    while round.time_out_due(&mut m) {}
    let mut outcomes: Vec<_> = std::iter::from_fn(|| m.slots.take(round.slot))
        .map(|(id, r)| (id.node, r))
        .collect();
    outcomes.sort_by_key(|o| o.0);
    assert_eq!(
        outcomes,
        vec![(0, Ok(pong)), (1, Err(NodeError::Timeout))],
        "node 0's reply kept, node 1 timed out at the cut"
    );
    assert!(m.slots.settled(round.slot));
}

/// A patient round whose nodes all went silent is an ordinary round at its deadline: it waits no further.
#[test]
fn a_patient_round_whose_nodes_are_silent_times_out_at_its_deadline() {
    use super::RoundState;
    use crate::net::state::Priority;
    let ms = Duration::from_millis;
    let now = Instant::now();
    let mut m = Machine::new(vec![Recorder::new(false, false)], Options::default(), now);
    let mut wake = Vec::new();
    m.dial_all(now, &mut wake);
    let g = m.conns[0].state.generation;
    m.connected(0, g, false, now);
    let mut round = RoundState::open(&mut m, now + ms(10), Priority::Normal);
    round.patient_until(now + ms(100), now);
    let ping = b"*1\r\n$4\r\nPING\r\n";
    let (mut writes, mut full) = (Vec::new(), Vec::new());
    round.offer_each(
        &mut m,
        [(0, &ping[..], 1)].into_iter(),
        now,
        (&mut writes, &mut wake),
        &mut full,
    );
    m.after_read(now + ms(10), true, &mut wake);
    while round.time_out_due(&mut m) {}
    let first = m.slots.take(round.slot).map(|(id, r)| (id.node, r));
    assert_eq!(first, Some((0, Err(NodeError::Timeout))));
    assert_eq!(round.deadline, now + ms(10));
}

#[test]
fn a_peer_close_behind_replies_nobody_read_redials_at_once_unless_it_came_within_the_backoff() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine(vec![Recorder::new(false, false)], t0);
    let mut wake = Vec::new();
    let set_up = |m: &mut Machine<Recorder>, at: Instant, wake: &mut Vec<_>| {
        m.ensure(0, at, wake).expect("dialled");
        let generation = m.conns[0].state.generation;
        m.connected(0, generation, false, at);
        let write = m.take_write(0).expect("the set-up's bytes");
        assert!(m.written(write, (Ok(true), 1), at, wake).is_none());
        generation
    };
    // Reset 5 ms after its set-up went out, unanswered: within the backoff (10 ms), the node waits it out.
    let first = set_up(&mut m, t0, &mut wake);
    let reset = NodeError::from_io(std::io::ErrorKind::ConnectionReset.into());
    m.read((0, first), Item::Failed(reset.clone()), ms(5), &mut wake);
    assert!(
        m.conns[0].state.needs_dial(ms(5)).is_err(),
        "a reset at once is the node's failure"
    );
    // Up again past it, its reply never read (nobody polled), and reset 200 ms later (a restart): dialled at
    // once, for the next request (a release) to go out.
    let second = set_up(&mut m, ms(20), &mut wake);
    m.read((0, second), Item::Failed(reset.clone()), ms(220), &mut wake);
    assert_eq!(m.conns[0].state.needs_dial(ms(220)), Ok(true));
    // The same with a reply read in the turn that reads the reset, a request still outstanding behind it (the
    // reply waited in the socket too): the bytes of that turn are no sign of life just before the close.
    let third = set_up(&mut m, ms(220), &mut wake);
    let detached = crate::net::state::Waiter::Detached;
    m.conns[0]
        .state
        .queue(b"*1\r\n$4\r\nPING\r\n", detached, 1, ms(220));
    let write = m.take_write(0).expect("the request's bytes");
    assert!(
        m.written(write, (Ok(true), 1), ms(220), &mut wake)
            .is_none()
    );
    m.progress(0, third, ms(420));
    let pong = crate::resp::Value::SimpleString(Bytes::from_static(b"PONG"));
    m.read((0, third), Item::Reply(pong), ms(420), &mut wake);
    m.read((0, third), Item::Failed(reset.clone()), ms(420), &mut wake);
    assert_eq!(m.conns[0].state.needs_dial(ms(420)), Ok(true));
    // But a reply read a turn before (a sign of life) and a reset 5 ms after is the node's failure.
    let fourth = set_up(&mut m, ms(420), &mut wake);
    m.progress(0, fourth, ms(430));
    let pong = crate::resp::Value::SimpleString(Bytes::from_static(b"PONG"));
    m.read((0, fourth), Item::Reply(pong), ms(430), &mut wake);
    m.conns[0]
        .state
        .queue(b"*1\r\n$4\r\nPING\r\n", detached, 1, ms(430));
    let write = m.take_write(0).expect("the request's bytes");
    assert!(
        m.written(write, (Ok(true), 1), ms(430), &mut wake)
            .is_none()
    );
    m.read((0, fourth), Item::Failed(reset), ms(435), &mut wake);
    assert!(m.conns[0].state.needs_dial(ms(435)).is_err());
}

#[test]
fn a_detached_release_waits_past_its_bound_while_its_node_answers_as_loading() {
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine(vec![Recorder::new(false, false)], t0);
    let mut wake = Vec::new();
    m.detach((0, b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n".to_vec(), 1), t0);
    let loading = || crate::resp::Value::Error(Bytes::from_static(b"LOADING loading the dataset"));
    // Dialled by the driver (`hung_timeout` 100 ms: the release's own bound), refused as loading at 0, 60 and
    // 120 ms; set up at 180 ms.
    for at in [0, 60, 120, 180] {
        m.after_read(ms(at), true, &mut wake);
        assert_eq!(
            m.detached.len(),
            1,
            "given up at {at} ms while the node loads"
        );
        let generation = m.conns[0].state.generation;
        m.connected(0, generation, false, ms(at));
        let write = m.take_write(0).expect("the set-up's bytes");
        assert!(m.written(write, (Ok(true), 1), ms(at), &mut wake).is_none());
        let reply = match at {
            180 => crate::resp::Value::SimpleString(Bytes::from_static(b"PONG")),
            _ => loading(),
        };
        m.read((0, generation), Item::Reply(reply), ms(at), &mut wake);
    }
    m.after_read(ms(180), true, &mut wake);
    assert!(m.conns[0].state.holds_detached(), "placed once set up");
    assert_eq!(m.conns[0].state.stats.snapshot().given_up, 0);
    // A node that stops answering gives it no more time: detached again, it is given up 100 ms after the last
    // `-LOADING` (120 ms) or its own detachment, whichever is later.
    m.detach((0, b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n".to_vec(), 1), ms(180));
    m.read(
        (0, m.conns[0].state.generation),
        Item::Failed(NodeError::Closed),
        ms(181),
        &mut wake,
    );
    m.after_read(ms(279), true, &mut wake);
    assert_eq!(m.detached.len(), 1);
    m.after_read(ms(281), false, &mut wake);
    assert_eq!(m.detached.len(), 0);
    assert_eq!(m.conns[0].state.stats.snapshot().given_up, 1);
}
