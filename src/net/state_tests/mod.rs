//! Unit tests of one node's protocol state and decoding: byte buffers in, outcomes out, on a virtual clock (no
//! socket, no sleep). What the connection does with bytes a real Redis never sends (garbage, absurd sizes,
//! replies that never end, refused logins) is checked here; `tests/net/hostile_servers.rs` keeps what needs a socket and
//! time (a hung peer, a close, a trickle, the lock manager above).
//!
//! This file holds the harness (a node on a virtual clock) and the tests of a well-behaved peer; `hostile`, the
//! tests of bytes no real Redis sends.

mod hostile;

use crate::net::slots::Wake;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::*;
use crate::net::inbound::{Inbound, Item};
use crate::net::slots::{Reply, SlotRef, Slots};
use crate::resp::{ErrorKind, Limits, Value, encode_command};

/// One node's state and decoder, a round's slot, and the clock's origin: `at(ms)` is the virtual time.
struct Node {
    state: NodeState,
    inbound: Inbound,
    slots: Slots,
    slot: SlotRef,
    wake: Vec<Wake>,
    opts: Options,
    addr: NodeAddr,
    t0: Instant,
    pushes: Vec<Value>,
}

fn cmd(args: &[&str]) -> Vec<u8> {
    let mut b = BytesMut::new();
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    encode_command(&args, &mut b);
    b.to_vec()
}

/// What a node restarted with its data answers, while it loads, to a command that needs the data.
const LOADING: &[u8] = b"-LOADING Redis is loading the dataset in memory\r\n";

impl Node {
    /// A node at `redis://h:1` whose set-up is one `SCRIPT LOAD` (a step a loading node refuses).
    fn with_script_load() -> Node {
        let load = Bytes::from(cmd(&["SCRIPT", "LOAD", "return 1"]));
        Node::new("redis://h:1", Options::default().with_setup(vec![load]))
    }

    fn new(url: &str, opts: Options) -> Node {
        let t0 = Instant::now();
        let mut slots = Slots::default();
        let slot = slots.open(1, t0 + Duration::from_secs(3600));
        Node {
            state: NodeState::new(0, &opts, t0),
            inbound: Inbound::new(&opts),
            slots,
            slot,
            wake: Vec::new(),
            opts,
            addr: url.parse().expect("url"),
            t0,
            pushes: Vec::new(),
        }
    }

    /// A plain node with the default options.
    fn plain() -> Node {
        Node::new("redis://127.0.0.1:6379", Options::default())
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    /// Dials at `ms` (the set-up is queued).
    fn dial(&mut self, ms: u64) {
        assert_eq!(self.state.needs_dial(self.at(ms)), Ok(true));
        self.state.dialled(&self.addr, &self.opts, self.at(ms));
    }

    /// Dials and connects (plain TCP) at `ms`, writes the set-up and returns its bytes.
    fn up(&mut self, ms: u64) -> Vec<u8> {
        self.dial(ms);
        self.state.connected(false, &self.opts, self.at(ms));
        assert!(self.state.is_up());
        self.write(ms)
    }

    /// Takes the writer role and writes everything (the socket takes all); returns the bytes written.
    fn write(&mut self, ms: u64) -> Vec<u8> {
        let mut wire = Vec::new();
        let mut job = self.state.take_write();
        while let Some((generation, bytes)) = job {
            wire.extend_from_slice(&bytes);
            let mut out = Filing {
                slots: &mut self.slots,
                wake: &mut self.wake,
            };
            job = self.state.written(
                generation,
                BytesMut::new(),
                Ok(true),
                &self.opts,
                self.t0 + Duration::from_millis(ms),
                &mut out,
            );
        }
        wire
    }

    /// Queues a request of the round at `ms`.
    fn ask(&mut self, args: &[&str], ms: u64) {
        let first = self.slots.expect(self.slot, 0, 1);
        self.slots.queued(self.slot, 0, first, 1);
        let now = self.at(ms);
        self.state
            .queue(&cmd(args), Waiter::Round(self.slot, first), 1, now);
    }

    /// The node sends `bytes`, read and filed at `ms`.
    fn feed(&mut self, bytes: &[u8], ms: u64) {
        self.inbound.buffer().extend_from_slice(bytes);
        let mut items = Vec::new();
        if let Err(e) = self.inbound.decode(&self.opts, &mut items) {
            items.push(Item::Failed(e));
        }
        self.file(items, ms);
    }

    /// Files what a read produced, as the driver does.
    fn file(&mut self, items: Vec<Item>, ms: u64) {
        let now = self.at(ms);
        let mut out = Filing {
            slots: &mut self.slots,
            wake: &mut self.wake,
        };
        for item in items {
            let failed = match item {
                Item::Secured => {
                    self.state.secured(now);
                    None
                }
                Item::Reply(v) => self.state.deliver(v, &self.opts, now, &mut out).err(),
                Item::Push(v) => {
                    self.pushes.push(v);
                    None
                }
                Item::Failed(e) => Some(e),
            };
            if let Some(e) = failed {
                self.state.fail(e, &self.opts, now, &mut out);
                self.inbound.reset();
                return;
            }
        }
    }

    /// The peer closed the connection at `ms`.
    fn close(&mut self, ms: u64) {
        self.file(vec![Item::Failed(NodeError::Closed)], ms);
    }

    fn check(&mut self, ms: u64) -> bool {
        let now = self.at(ms);
        let mut out = Filing {
            slots: &mut self.slots,
            wake: &mut self.wake,
        };
        self.state.check(&self.opts, now, &mut out)
    }

    /// The next outcome of the round, if any was filed.
    fn outcome(&mut self) -> Option<Reply> {
        self.slots.take(self.slot).map(|(id, r)| {
            assert_eq!(id.node, 0);
            r
        })
    }
}

#[test]
fn the_set_up_is_pipelined_and_the_login_rides_in_hello_with_resp3() {
    let script = Bytes::from(cmd(&["SCRIPT", "LOAD", "return 1"]));
    let opts = Options::default().with_setup(vec![script.clone()]);
    let cases: &[(&str, Vec<Vec<u8>>)] = &[
        ("redis://h:1", vec![]),
        ("redis://:pw@h:1", vec![cmd(&["AUTH", "pw"])]),
        (
            "redis://u:pw@h:1/2",
            vec![cmd(&["AUTH", "u", "pw"]), cmd(&["SELECT", "2"])],
        ),
        ("redis://h:1?protocol=resp3", vec![cmd(&["HELLO", "3"])]),
        (
            "rediss://:pw@h:1?protocol=resp3",
            vec![cmd(&["HELLO", "3", "AUTH", "default", "pw"])],
        ),
        (
            "redis://u:pw@h:1/0?protocol=resp3",
            vec![
                cmd(&["HELLO", "3", "AUTH", "u", "pw"]),
                cmd(&["SELECT", "0"]),
            ],
        ),
    ];
    for (url, want) in cases {
        for extra in [false, true] {
            let opts = match extra {
                true => opts.clone(),
                false => Options::default(),
            };
            let mut node = Node::new(url, opts);
            let mut want = want.concat();
            if extra {
                want.extend_from_slice(&script);
            }
            assert_eq!(node.up(0), want, "{url}");
        }
    }
}

#[test]
fn refused_logins_are_auth_errors_with_the_servers_message() {
    const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
    const NOAUTH: &str = "NOAUTH HELLO must be called with the client already authenticated";
    let cases = [
        ("redis://:wrong@h:1", WRONGPASS),
        ("redis://u:wrong@h:1", WRONGPASS),
        ("redis://u:wrong@h:1?protocol=resp3", WRONGPASS),
        ("redis://h:1?protocol=resp3", NOAUTH),
    ];
    for (url, message) in cases {
        let mut node = Node::new(url, Options::default());
        node.up(0);
        node.ask(&["PING"], 0);
        node.write(0);
        node.feed(format!("-{message}\r\n").as_bytes(), 1);
        assert_eq!(
            node.outcome(),
            Some(Err(NodeError::Auth(message.into()))),
            "{url}"
        );
        assert!(!node.state.is_up(), "{url}: the connection is dropped");
    }
    // No password: NOAUTH to a set-up command is a login problem too, naming no command.
    let opts = Options::default().with_setup(vec![Bytes::from(cmd(&["INFO", "server"]))]);
    let mut node = Node::new("redis://h:1", opts);
    node.up(0);
    node.ask(&["PING"], 0);
    node.feed(b"-NOAUTH Authentication required.\r\n", 1);
    assert_eq!(
        node.outcome(),
        Some(Err(NodeError::Auth(
            "NOAUTH Authentication required.".into()
        )))
    );
}

#[test]
fn an_error_reply_is_a_reply_except_to_the_connection_set_up() {
    let mut node = Node::plain();
    node.up(0);
    for _ in 0..2 {
        node.ask(&["PING"], 0);
        node.write(0);
        node.feed(b"-ERR fake failure\r\n", 1);
        assert_eq!(
            node.outcome(),
            Some(Ok(Value::Error("ERR fake failure".into())))
        );
        assert!(
            node.state.is_up(),
            "an error reply does not drop the connection"
        );
    }
    let mut node = Node::with_script_load();
    node.up(0);
    node.ask(&["PING"], 0);
    node.feed(b"-ERR fake failure\r\n", 1);
    let want = NodeError::Setup("SCRIPT LOAD: ERR fake failure".into());
    assert_eq!(node.outcome(), Some(Err(want)));
    let mut node = Node::new("redis://h:1/3", Options::default());
    node.up(0);
    node.ask(&["PING"], 0);
    node.feed(b"-ERR DB index is out of range\r\n", 1);
    let want = NodeError::Setup("SELECT: ERR DB index is out of range".into());
    assert_eq!(node.outcome(), Some(Err(want)));
}

#[test]
fn a_reply_in_pieces_arrives_whole_and_replies_match_requests_in_order() {
    let mut node = Node::plain();
    node.up(0);
    node.ask(&["ECHO", "hello"], 0);
    node.ask(&["PING"], 0);
    node.write(0);
    let replies = b"$5\r\nhello\r\n+PONG\r\n";
    for (i, byte) in replies.iter().enumerate() {
        node.feed(std::slice::from_ref(byte), 1 + i as u64);
        if i < 10 {
            assert_eq!(node.outcome(), None, "after byte {i}");
        }
    }
    assert_eq!(node.outcome(), Some(Ok(Value::BulkString("hello".into()))));
    assert_eq!(node.outcome(), Some(Ok(Value::SimpleString("PONG".into()))));
    // A reply nobody asked for drops the connection.
    node.feed(b"+OK\r\n", 30);
    assert!(!node.state.is_up());
}

/// The connection's queue names the id each reply is for. Books that disagree with it (here: two requests of one
/// round queued in the reverse of their ids' order, as a fanout that let a later request overtake an earlier one
/// would) make the first reply a disorder: the connection is dropped and every request on it fails, rather than
/// the reply being counted for a command it may not answer.
#[test]
fn a_reply_for_a_request_behind_an_older_one_of_its_round_drops_the_connection() {
    let mut node = Node::plain();
    node.up(0);
    let first = node.slots.expect(node.slot, 0, 2);
    node.slots.queued(node.slot, 0, first, 2);
    let now = node.at(0);
    node.state.queue(
        &cmd(&["ECHO", "b"]),
        Waiter::Round(node.slot, first + 1),
        1,
        now,
    );
    node.state.queue(
        &cmd(&["ECHO", "a"]),
        Waiter::Round(node.slot, first),
        1,
        now,
    );
    node.write(0);
    node.feed(b"$1\r\nb\r\n", 1);
    assert!(!node.state.is_up(), "dropped");
    let outcomes: Vec<_> = std::iter::from_fn(|| node.outcome()).collect();
    assert_eq!(
        outcomes,
        vec![Err(NodeError::OutOfOrder), Err(NodeError::OutOfOrder)],
        "no reply handed out; both requests failed with the connection"
    );
}

#[test]
fn pushes_between_replies_are_kept_apart() {
    const PUSH: &[u8] = b">2\r\n$7\r\nmessage\r\n$5\r\nhello\r\n";
    let mut node = Node::new("redis://h:1?protocol=resp3", Options::default());
    node.up(0);
    node.feed(b"%1\r\n$5\r\nproto\r\n:3\r\n", 1); // HELLO 3
    for word in ["one", "two"] {
        node.ask(&["ECHO", word], 1);
    }
    node.write(1);
    let mut bytes = PUSH.to_vec();
    bytes.extend_from_slice(b"$3\r\none\r\n");
    bytes.extend_from_slice(PUSH);
    bytes.extend_from_slice(b"$3\r\ntwo\r\n");
    bytes.extend_from_slice(PUSH);
    node.feed(&bytes, 2);
    assert_eq!(node.outcome(), Some(Ok(Value::BulkString("one".into()))));
    assert_eq!(node.outcome(), Some(Ok(Value::BulkString("two".into()))));
    assert_eq!(node.pushes.len(), 3);
    assert!(node.state.is_up(), "pushes do not drop the connection");
}

#[test]
fn a_close_fails_every_request_in_flight_and_half_a_reply_is_dropped() {
    let mut node = Node::plain();
    node.up(0);
    node.ask(&["PING"], 0);
    node.ask(&["PING"], 0);
    node.write(0);
    node.feed(b"+PONG\r\n$10\r\nhel", 1);
    node.close(2);
    assert_eq!(node.outcome(), Some(Ok(Value::SimpleString("PONG".into()))));
    assert_eq!(node.outcome(), Some(Err(NodeError::Closed)));
    assert_eq!(node.outcome(), None);
    // The next connection starts clean.
    node.up(20);
    node.ask(&["PING"], 20);
    node.write(20);
    node.feed(b"+PONG\r\n", 21);
    assert_eq!(node.outcome(), Some(Ok(Value::SimpleString("PONG".into()))));
}

#[test]
fn the_tls_handshake_counts_against_the_connect_timeout() {
    let mut node = Node::new("rediss://h:1", Options::default());
    node.dial(0);
    node.ask(&["PING"], 0);
    assert!(
        node.state.take_write().is_none(),
        "nothing is written before TCP connects"
    );
    let opts = node.opts.clone();
    node.state.connected(true, &opts, node.at(400));
    assert!(!node.state.is_up() && node.state.is_open());
    // Bytes stay queued meanwhile (TLS would hold them out of sight until its handshake completes).
    assert!(node.write(400).is_empty());
    assert!(node.state.holds_unwritten());
    // Connected at 400 ms: the dial's deadline (1 s) is before 400 ms + the connect timeout.
    assert!(!node.check(1399));
    assert!(node.check(1400), "the handshake had the connect timeout");
    assert_eq!(node.outcome(), Some(Err(NodeError::ConnectTimeout)));
    // A handshake that completes in time brings the node up.
    node.up(1410); // the backoff (10 ms) has passed
    let mut node = Node::new("rediss://h:1", Options::default());
    node.dial(0);
    node.state.connected(true, &opts, node.at(10));
    node.file(vec![Item::Secured], 20);
    assert!(node.state.is_up());
    assert_eq!(node.state.sessions.load(Ordering::Acquire), 1);
    assert!(!node.check(5000), "an idle connection is never hung");
}

/// A request queued while the TLS handshake is under way is written once it completes, not handed to TLS before.
#[test]
fn a_request_queued_during_the_tls_handshake_is_written_when_it_completes() {
    let mut node = Node::new("rediss://h:1", Options::default());
    node.dial(0);
    let opts = node.opts.clone();
    node.state.connected(true, &opts, node.at(1));
    node.ask(&["PING"], 2);
    assert!(node.write(2).is_empty(), "held while handshaking");
    assert!(node.state.holds_unwritten() && !node.state.busy());
    node.file(vec![Item::Secured], 3);
    assert_eq!(node.write(3), cmd(&["PING"]));
    assert!(!node.state.holds_unwritten() && node.state.busy());
    node.feed(b"+PONG\r\n", 4);
    assert_eq!(node.outcome(), Some(Ok(Value::SimpleString("PONG".into()))));
}

/// Nobody polled between the dial and the next round (a manager built and left idle): the client sees the TCP
/// connect complete long past the dial's deadline, and its first flight goes out only then. The node gets the
/// connect timeout from that moment, not a timeout for time it never had.
#[test]
fn a_handshake_started_late_by_the_client_still_gets_the_connect_timeout() {
    let mut node = Node::new("rediss://h:1", Options::default());
    node.dial(0);
    let opts = node.opts.clone();
    node.state.connected(true, &opts, node.at(5000));
    assert!(
        !node.check(5000),
        "judged in the turn that started the handshake"
    );
    assert!(!node.check(5999));
    node.file(vec![Item::Secured], 5020);
    assert!(node.state.is_up());
    // And a node that does not answer the late handshake is dropped a connect timeout later.
    let mut node = Node::new("rediss://h:1", Options::default());
    node.dial(0);
    node.ask(&["PING"], 0);
    node.state.connected(true, &opts, node.at(5000));
    assert!(!node.check(5999));
    assert!(node.check(6000));
    assert_eq!(node.outcome(), Some(Err(NodeError::ConnectTimeout)));
}

#[test]
fn a_silent_node_with_requests_is_hung_after_the_hung_timeout_and_a_slow_one_is_not() {
    let mut node = Node::plain();
    node.up(0);
    node.ask(&["PING"], 1000);
    node.ask(&["PING"], 1000);
    node.write(1000);
    assert!(!node.check(5999));
    // Half a reply is a sign of life.
    node.state.progress(node.at(5000));
    node.feed(b"+PO", 5000);
    assert!(!node.check(9999));
    assert!(node.check(10_000));
    assert_eq!(
        node.outcome(),
        Some(Err(NodeError::Hung(Duration::from_secs(5))))
    );
    assert_eq!(
        node.outcome(),
        Some(Err(NodeError::Hung(Duration::from_secs(5))))
    );
}

#[test]
fn the_backoff_doubles_up_to_its_cap_and_starts_over_once_the_node_answers() {
    let opts = Options::default()
        .with_backoff_min(Duration::from_millis(10))
        .with_backoff_max(Duration::from_millis(35));
    let mut node = Node::new("redis://h:1", opts);
    let mut t = 0;
    for want in [10, 20, 35, 35] {
        node.dial(t);
        node.close(t);
        assert_eq!(
            node.state.needs_dial(node.at(t + want - 1)),
            Err(NodeError::Closed)
        );
        t += want;
    }
    node.up(t);
    node.ask(&["PING"], t);
    node.write(t);
    node.feed(b"+PONG\r\n", t);
    node.close(t);
    assert_eq!(node.state.needs_dial(node.at(t + 10)), Ok(true));
}

#[test]
fn a_busy_node_batches_what_comes_while_its_replies_are_awaited() {
    let mut node = Node::plain();
    node.up(0);
    node.ask(&["GET", "a"], 0);
    let first = node
        .state
        .take_write()
        .expect("an idle node is written at once");
    node.ask(&["GET", "b"], 0);
    node.ask(&["GET", "c"], 0);
    assert!(node.state.busy());
    // The first write ends while its reply is awaited: the others wait for it.
    let mut out = Filing {
        slots: &mut node.slots,
        wake: &mut node.wake,
    };
    let next = node.state.written(
        first.0,
        BytesMut::new(),
        Ok(true),
        &node.opts,
        node.t0,
        &mut out,
    );
    assert!(next.is_none());
    node.feed(b"$-1\r\n", 1);
    // The driver flushes both in one write at the end of the turn that read the reply.
    assert_eq!(
        node.write(1),
        [cmd(&["GET", "b"]), cmd(&["GET", "c"])].concat()
    );
    // A write cut short puts the rest back in front of what was queued since.
    node.feed(b"$-1\r\n$-1\r\n", 2);
    node.ask(&["GET", "d"], 2);
    let (generation, _) = node.state.take_write().expect("idle");
    node.ask(&["GET", "e"], 2);
    let mut out = Filing {
        slots: &mut node.slots,
        wake: &mut node.wake,
    };
    let rest = BytesMut::from(&b"tail"[..]);
    assert!(
        node.state
            .written(generation, rest, Ok(false), &node.opts, node.t0, &mut out)
            .is_none()
    );
    let mut want = b"tail".to_vec();
    want.extend_from_slice(&cmd(&["GET", "e"]));
    assert_eq!(node.write(3), want);
}

#[test]
fn a_full_node_refuses_ordinary_requests_and_lets_releases_use_a_reserve() {
    let mut node = Node::new("redis://h:1", Options::default().with_max_in_flight(2));
    node.up(0);
    node.ask(&["PING"], 0);
    node.ask(&["PING"], 0);
    assert_eq!(node.state.room(1, Priority::Normal, &node.opts), Room::No);
    assert_eq!(node.state.room(2, Priority::Release, &node.opts), Room::Yes);
    assert_eq!(
        node.state.room(3, Priority::Release, &node.opts),
        Room::Wait
    );
}

/// A release queued after its round ended ([`Waiter::Detached`]) takes its places in the FIFO: its replies are
/// read and dropped, each round request still gets its own, and a connection that fails drops it unfiled.
#[test]
fn a_detached_request_s_replies_are_read_and_counted_for_nobody() {
    let mut node = Node::plain();
    node.up(0);
    node.ask(&["ECHO", "before"], 0);
    let now = node.at(0);
    let detached = [cmd(&["DELIFEQ", "k", "v"]), cmd(&["DELIFEQ", "l", "v"])].concat();
    node.state.queue(&detached, Waiter::Detached, 2, now);
    node.ask(&["ECHO", "after"], 0);
    assert_eq!(node.state.in_flight(), 4);
    node.write(0);
    node.feed(b"$6\r\nbefore\r\n:1\r\n:0\r\n$5\r\nafter\r\n", 1);
    assert_eq!(node.outcome(), Some(Ok(Value::BulkString("before".into()))));
    assert_eq!(node.outcome(), Some(Ok(Value::BulkString("after".into()))));
    assert_eq!(node.outcome(), None);
    assert_eq!(node.state.in_flight(), 0);
    assert!(node.state.is_up());
    // Dropped with its connection: the round's request fails, the detached one is filed nowhere.
    node.state.queue(&detached, Waiter::Detached, 2, now);
    node.ask(&["PING"], 2);
    node.close(3);
    assert_eq!(node.outcome(), Some(Err(NodeError::Closed)));
    assert_eq!(node.outcome(), None);
}

/// A connection holds its detached requests (someone must drive for them) until their replies are read or it is
/// dropped; dropped before it ever opened, they were never sent, and are counted as given up; dropped after,
/// they may have run, and are not.
#[test]
fn detached_requests_are_held_until_read_and_given_up_when_their_connection_never_opened() {
    let mut node = Node::plain();
    let release = cmd(&["DELIFEQ", "k", "v"]);
    // Queued while the connect is under way; it times out.
    node.dial(0);
    node.state.queue(&release, Waiter::Detached, 1, node.at(0));
    assert!(node.state.holds_detached());
    let timeout = node.opts.connect_timeout.as_millis() as u64;
    assert!(node.check(timeout));
    assert!(!node.state.holds_detached());
    assert_eq!(node.state.stats.snapshot().given_up, 1);
    // On a connection that opened: held until the reply is read, and not counted as given up.
    node.up(timeout + 10_000);
    let t = timeout + 10_000;
    node.state
        .queue(&release, Waiter::Detached, 1, node.at(t + 1));
    node.ask(&["PING"], t + 1);
    node.write(t + 1);
    assert!(node.state.holds_detached());
    node.feed(b":1\r\n", t + 2);
    assert!(!node.state.holds_detached());
    node.state
        .queue(&release, Waiter::Detached, 1, node.at(t + 3));
    node.close(t + 4);
    assert!(!node.state.holds_detached());
    assert_eq!(node.state.stats.snapshot().given_up, 1);
}

/// A detached release queued behind the set-up of a node that is still loading: the set-up is refused, the
/// connection dropped, and the release (refused unrun, or not known to have run) is counted as given up.
#[test]
fn detached_requests_behind_a_set_up_refused_as_loading_are_given_up() {
    let mut node = Node::with_script_load();
    node.up(0);
    node.state.queue(
        &cmd(&["DELIFEQ", "k", "v"]),
        Waiter::Detached,
        1,
        node.at(0),
    );
    node.feed(LOADING, 1);
    assert!(!node.state.is_up());
    assert!(!node.state.holds_detached());
    assert_eq!(node.state.stats.snapshot().given_up, 1);
}

/// A server closes a connection that is set up and idle (`timeout`, a restart): no failure of the node's, so it
/// may be dialled again at once, its backoff unchanged; one closed with a request in flight backs off.
#[test]
fn a_connection_closed_while_idle_is_dialled_again_at_once_and_one_closed_busy_backs_off() {
    let mut node = Node::plain();
    let min = node.opts.backoff_min.as_millis() as u64;
    node.up(0);
    assert!(node.state.is_idle(), "no set-up step: idle once up");
    node.close(5);
    assert_eq!(
        node.state.needs_dial(node.at(5)),
        Ok(true),
        "dialled again at once"
    );
    node.up(5);
    node.ask(&["PING"], 6);
    node.write(6);
    assert!(!node.state.is_idle());
    node.close(7);
    assert_eq!(node.outcome(), Some(Err(NodeError::Closed)));
    assert!(
        node.state.needs_dial(node.at(7 + min - 1)).is_err(),
        "closed with a request in flight: it backs off"
    );
    assert_eq!(node.state.needs_dial(node.at(7 + min)), Ok(true));
}

/// A node that restarted with its data answers `HELLO` while it loads and refuses the rest with `-LOADING`: a
/// set-up step refused so drops the connection as [`NodeError::Loading`] (never up, every request behind it
/// failed with it), and its backoff keeps growing, though the node answered.
#[test]
fn a_set_up_refused_while_the_node_loads_drops_the_connection_and_backs_off() {
    let mut node = Node::with_script_load();
    let min = node.opts.backoff_min.as_millis() as u64;
    node.up(0);
    node.ask(&["SET", "k", "v", "NX"], 0);
    node.feed(LOADING, 1);
    assert_eq!(node.outcome(), Some(Err(NodeError::Loading)));
    assert!(!node.state.is_up());
    assert_eq!(
        node.state.needs_dial(node.at(1 + min - 1)),
        Err(NodeError::Loading)
    );
    assert_eq!(node.state.needs_dial(node.at(1 + min)), Ok(true));
    // Dialled again, still loading: refused again, and the wait doubles.
    node.up(1 + min);
    node.feed(LOADING, 2 + min);
    assert!(!node.state.is_up());
    assert!(node.state.needs_dial(node.at(2 + 2 * min)).is_err());
    assert_eq!(node.state.needs_dial(node.at(2 + 3 * min)), Ok(true));
    // Loaded: the set-up goes through and the connection serves.
    node.up(2 + 3 * min);
    node.ask(&["PING"], 2 + 3 * min);
    node.feed(
        b"$40\r\ne0e1f9fabfc9d4800c877a703b823ac0578ff8db\r\n+PONG\r\n",
        3 + 3 * min,
    );
    assert_eq!(node.outcome(), Some(Ok(Value::SimpleString("PONG".into()))));
    assert!(node.state.is_set_up());
}
