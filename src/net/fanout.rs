//! [`Fanout`]: N connections driven by one `mio::Poll`, shared by any number of threads.
//!
//! # How threads share it
//!
//! A caller opens a [`Round`], queues its request for the nodes it wants, then asks for replies with
//! [`Round::next`]. Writing and reading are done by the callers themselves, in two roles:
//!
//! - **Writer** (per connection): the caller that queues bytes on an *idle* connection (nothing on the wire) takes
//!   the role and writes without the lock, from its own thread: a lone caller pays no hand-off. Bytes queued on a
//!   *busy* connection wait for the replies ahead of them: the driver writes them all in one batch at the end of
//!   the turn that reads those replies (see [`state`](super::state), "batches clocked by replies").
//! - **Driver** (one per fanout): a caller that needs a reply while nobody polls takes the poll and its read
//!   buffers (the [`Driver`], owned by whoever drives), polls, reads and decodes every reply that arrived without
//!   the lock, then files each under the round that asked, wakes the rounds it filed enough for, and writes the
//!   batches queued meanwhile. Its round keeps the driver from one `next()` to the next, and gives it back when
//!   the round ends, waking a sleeping round, if any, to take over. Over TLS the driver's reads also write: the
//!   handshake's flights, and whatever else rustls queues while it processes what was read (see
//!   [`tls`](super::tls)); a connection is up only once its handshake is done.
//!
//! # Invariants
//!
//! - **One lock, and a leaf per TLS connection.** `inner` guards all shared bookkeeping: the connections' FIFOs
//!   and write queues, the rounds' slots, the driver's place. No thread blocks, sleeps or does socket I/O while it
//!   holds it, except the non-blocking `connect` of a re-dial and the checks that complete one (and creating a
//!   TLS session for it, memory only). Host names are resolved when the fanout is built, and again after a failed
//!   connect in a background thread ([`resolve`](super::resolve)). The driver is not a second lock: it is a
//!   value moved in and out of `inner`. A TLS connection's session has a mutex of its own, taken only outside
//!   `inner` and holding nothing else (see [`tls`](super::tls)): the two are never held together, so there is
//!   no lock order.
//! - **Who polls.** Only the thread whose round took `Inner::driver` (it is `None` while someone drives) polls or
//!   reads; a sender that finds a node full and the driver free may take it for one zero-timeout turn. Whoever
//!   puts the driver back (a round that ends, is dropped, or a non-driving round that leaves `next()` while it is
//!   free) wakes a sleeping round if any: a round only sleeps while the driver is taken, so no round sleeps while
//!   nobody will poll. (A driver whose thread is descheduled still stalls everyone's replies until it runs: see
//!   BENCHMARKS.md, "Steal".)
//! - **Who wakes whom.** The driver wakes a round when it has filed as many outcomes as the round needs
//!   ([`Round::need`]: a 5-node acquisition cannot decide on fewer than 3) or all of them, and, after each turn,
//!   the sleeping rounds whose deadline had passed when that turn read the sockets. A round about to sleep pokes
//!   the poll's waker if the driver's current poll would outlast the round's deadline.
//! - **Timeouts come last.** A round reports a request as timed out only once a turn has read the sockets at or
//!   after the round's deadline, so a reply that had arrived by then is counted even if the caller (or the
//!   driver) ran late: under CPU overload, the deadline is not the first thing to fail. Likewise a node is judged
//!   hung, or its connect too slow, only right after a turn has read the sockets.
//! - **Backpressure, not disconnects.** A node with `max_in_flight` requests without replies gets no more
//!   requests: each further request is that node's failed vote ([`NodeError::Overloaded`]), and the requests on
//!   the wire are untouched. Releases may use a reserve of another `max_in_flight` and beyond that wait for room
//!   until their deadline. A connection is dropped only when its node is gone (closed, reset, refused) or hung:
//!   requests outstanding and no byte received for [`Options::hung_timeout`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry, Token, Waker};

use super::addr::NodeAddr;
use super::conn::{Conn, WriteJob};
use super::error::NodeError;
use super::inbound::Item;
use super::options::Options;
use super::read::ReadSide;
use super::resolve::Resolved;
use super::slots::{Reply, SlotRef, Slots};
use super::state::{Filing, Priority, Room, Waiter};
use super::stats::{NodeCounts, NodeStats};
use super::tls::Connector;
use super::transport::READ_CHUNK;
use crate::resp::Value;
use crate::sync::lock;
use crate::time::later;

/// Connections to N Redis nodes, multiplexed on one poll, shared by threads (`Send + Sync`).
///
/// # Examples
///
/// ```no_run
/// use std::time::{Duration, Instant};
/// use muxlock::net::{Fanout, Options};
/// use muxlock::resp::encode_command;
///
/// let nodes = vec!["127.0.0.1:7000".parse()?, "127.0.0.1:7001".parse()?, "127.0.0.1:7002".parse()?];
/// let fanout = Fanout::new(nodes, Options::default())?;
/// let mut request = bytes::BytesMut::new();
/// encode_command(&[b"PING"], &mut request);
///
/// let mut round = fanout.round(Instant::now() + Duration::from_millis(50));
/// round.send_all(&request, 1);
/// while let Some((node, reply)) = round.next() {
///     println!("node {node}: {reply:?}");
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Fanout {
    inner: Mutex<Inner>,
    registry: Registry,
    waker: Waker,
    opts: Options,
    addrs: Vec<NodeAddr>,
    sessions: Vec<Arc<AtomicU64>>,
    stats: Vec<Arc<NodeStats>>,
}

struct Inner {
    conns: Vec<Conn>,
    slots: Slots,
    /// The poll and the read side, here while nobody drives.
    driver: Option<Box<Driver>>,
    /// While the driver waits in its poll: until when, at the latest.
    polling_until: Option<Instant>,
    /// When the last completed turn read the sockets.
    last_read: Option<Instant>,
    /// RESP3 pushes read and not yet taken (only with [`Options::with_pushes`]), oldest first, at most
    /// [`MAX_PUSHES`]; whether some were dropped for lack of room since the last take.
    pushes: std::collections::VecDeque<(usize, Value)>,
    pushes_dropped: bool,
    /// The thread waiting in [`Fanout::recv_pushes`] while another drives, if any.
    push_waiter: Option<Thread>,
    /// Set by [`Fanout::interrupt`]: the next `recv_pushes` returns at once.
    interrupted: bool,
}

/// Pushes kept for [`Fanout::recv_pushes`]; more are dropped, and the taker is told.
const MAX_PUSHES: usize = 1 << 16;

/// What [`Fanout::recv_pushes`] returns: the pushes read since the last call, in arrival order, with the node
/// each came from.
#[derive(Debug, Default)]
pub struct Pushes {
    /// `(node, push)` pairs.
    pub pushes: Vec<(usize, Value)>,
    /// Some pushes were dropped because nobody took them in time: the taker must assume anything may have
    /// changed (as after a tracking `flush`).
    pub dropped: bool,
}

impl Inner {
    /// Who should take the poll that was just put back: a sleeping round, else a thread waiting for pushes
    /// (pushes arrive only if someone polls).
    fn successor(&mut self) -> Option<Thread> {
        self.slots.any_sleeper().or_else(|| self.push_waiter.take())
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("nodes", &self.conns.len())
            .field("driving", &self.driver.is_none())
            .finish_non_exhaustive()
    }
}

/// What only the driver touches: the poll and every connection's read side, with reusable scratch space.
#[derive(Debug)]
struct Driver {
    poll: Poll,
    events: Events,
    /// Every socket read lands here first.
    scratch: Box<[u8]>,
    reads: Vec<ReadSide>,
    /// Per turn: connections to read (node, peer closed), events of connections not followed yet, what was read.
    ready: Vec<(usize, bool)>,
    fresh: Vec<(usize, u32, bool)>,
    items: Vec<(usize, u32, Item)>,
    progressed: Vec<(usize, u32)>,
    wake: Vec<Thread>,
    jobs: Vec<WriteJob>,
}

impl std::fmt::Debug for WriteJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteJob")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// Up to 2^16 - 1 nodes; the rest of the token tells a node's successive connections apart.
const NODE_BITS: u32 = 16;
const NODE_MASK: usize = (1 << NODE_BITS) - 1;
/// The poll's waker: a node index no node has.
const WAKER: Token = Token(NODE_MASK);

fn token(node: usize, generation: u32) -> Token {
    Token(((generation as usize) << NODE_BITS) | node)
}

fn unpark_all(threads: &mut Vec<Thread>) {
    for t in threads.drain(..) {
        t.unpark();
    }
}

impl Fanout {
    /// Connections to `nodes`: each is resolved now (a host name may block on the system resolver) and dialled
    /// at once without waiting, so the first round finds them ready.
    ///
    /// # Errors
    ///
    /// Only if the OS refuses to create the poll, or the input is unusable (`InvalidInput`): 65,535 nodes or more,
    /// TLS files ([`Options::with_tls`]) that cannot be read or hold nothing usable, a `rediss://` host that is not
    /// a valid server name, or TLS nodes in a build without the `tls` feature. An unreachable node is not an
    /// error: it is a failed vote in each round until it comes back.
    pub fn new(nodes: Vec<NodeAddr>, opts: Options) -> std::io::Result<Fanout> {
        if nodes.len() >= NODE_MASK {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "65,535 nodes or more",
            ));
        }
        let tls = Connector::new(&opts.tls, &nodes)?;
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Waker::new(&registry, WAKER)?;
        let now = Instant::now();
        let conns: Vec<Conn> = nodes
            .iter()
            .enumerate()
            .map(|(i, a)| Conn::new(i, a.clone(), Resolved::now(a), tls.as_ref(), &opts, now))
            .collect();
        let sessions = conns
            .iter()
            .map(|c| Arc::clone(&c.state.sessions))
            .collect();
        let stats: Vec<Arc<NodeStats>> = conns.iter().map(|c| Arc::clone(&c.state.stats)).collect();
        let driver = Driver {
            poll,
            events: Events::with_capacity(256.max(nodes.len() + 1)),
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            reads: stats
                .iter()
                .map(|s| ReadSide::new(&opts, Arc::clone(s)))
                .collect(),
            ready: Vec::new(),
            fresh: Vec::new(),
            items: Vec::new(),
            progressed: Vec::new(),
            wake: Vec::new(),
            jobs: Vec::new(),
        };
        let fanout = Fanout {
            inner: Mutex::new(Inner {
                conns,
                slots: Slots::default(),
                driver: Some(Box::new(driver)),
                polling_until: None,
                last_read: None,
                pushes: Default::default(),
                pushes_dropped: false,
                push_waiter: None,
                interrupted: false,
            }),
            registry,
            waker,
            opts,
            addrs: nodes,
            sessions,
            stats,
        };
        {
            let mut inner = lock(&fanout.inner);
            let Inner { conns, slots, .. } = &mut *inner;
            let mut wake = Vec::new();
            for (i, conn) in conns.iter_mut().enumerate() {
                let mut out = Filing {
                    slots,
                    wake: &mut wake,
                };
                // A failure is remembered by the connection and reported by the first round.
                let _ = conn.ensure(
                    &fanout.registry,
                    |g| token(i, g),
                    &fanout.opts,
                    now,
                    &mut out,
                );
            }
        }
        Ok(fanout)
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// The nodes' addresses, in index order.
    pub fn addrs(&self) -> &[NodeAddr] {
        &self.addrs
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// Whether node `node` has an established connection now.
    pub fn is_up(&self, node: usize) -> bool {
        lock(&self.inner)
            .conns
            .get(node)
            .is_some_and(|c| c.state.is_up())
    }

    /// How many connections to `node` have completed their set-up so far; it changes when the node was reconnected.
    /// Cheap: no lock is taken.
    pub fn sessions(&self, node: usize) -> u64 {
        self.sessions
            .get(node)
            .map_or(0, |s| s.load(Ordering::Acquire))
    }

    /// Replies to [`Options::setup`]'s commands on `node`'s current connection, in order, each with the instant
    /// it was read (after the server sent it).
    pub fn setup_replies(&self, node: usize) -> Vec<(Value, Instant)> {
        lock(&self.inner)
            .conns
            .get(node)
            .map(|c| c.state.setup_replies.clone())
            .unwrap_or_default()
    }

    /// What `node`'s connections have done so far: requests, writes, replies, reconnects, round trips. Cheap: no
    /// lock is taken.
    pub fn stats(&self, node: usize) -> NodeCounts {
        self.stats
            .get(node)
            .map_or_else(NodeCounts::default, |s| s.snapshot())
    }

    /// Requests sent to `node` whose replies have not arrived yet (including those nobody waits for any more).
    pub fn in_flight(&self, node: usize) -> usize {
        lock(&self.inner)
            .conns
            .get(node)
            .map_or(0, |c| c.state.in_flight())
    }

    /// Waits until a RESP3 push arrives (only connections made with [`Options::with_pushes`] keep them), until
    /// `deadline`, or until [`interrupt`](Fanout::interrupt) is called, polling the connections meanwhile if
    /// nobody else does; returns what arrived (possibly nothing). Meant for one thread that listens, such as a
    /// watchdog; rounds of other threads go on as usual.
    pub fn recv_pushes(&self, deadline: Instant) -> Pushes {
        let mut inner = lock(&self.inner);
        let mut driver = None;
        loop {
            if !inner.pushes.is_empty() || inner.pushes_dropped || inner.interrupted {
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            if driver.is_none() {
                driver = inner.driver.take();
            }
            match driver.take() {
                Some(mut d) => {
                    inner = self.turn(inner, &mut d, deadline);
                    driver = Some(d);
                }
                None => {
                    inner.push_waiter = Some(thread::current());
                    let poke = inner.polling_until.is_some_and(|until| until > deadline);
                    drop(inner);
                    if poke {
                        let _ = self.waker.wake();
                    }
                    thread::park_timeout(deadline.saturating_duration_since(Instant::now()));
                    inner = lock(&self.inner);
                    inner.push_waiter = None;
                }
            }
        }
        let pushes = Pushes {
            pushes: inner.pushes.drain(..).collect(),
            dropped: std::mem::take(&mut inner.pushes_dropped),
        };
        inner.interrupted = false;
        let successor = match driver.take() {
            Some(d) => {
                inner.driver = Some(d);
                inner.slots.any_sleeper()
            }
            None => None,
        };
        drop(inner);
        if let Some(t) = successor {
            t.unpark();
        }
        pushes
    }

    /// Makes a thread waiting in [`recv_pushes`](Fanout::recv_pushes) (or its next call) return at once, and the
    /// current poll, if any, return early. For a listener that has other work to look at.
    pub fn interrupt(&self) {
        let mut inner = lock(&self.inner);
        inner.interrupted = true;
        let waiter = inner.push_waiter.take();
        drop(inner);
        let _ = self.waker.wake();
        if let Some(t) = waiter {
            t.unpark();
        }
    }

    /// Opens a round whose outcomes are all known by `deadline`: a node that has not answered by then counts as
    /// [`NodeError::Timeout`]. A node that already has [`Options::max_in_flight`] requests without replies is not
    /// sent this round's request: it counts as [`NodeError::Overloaded`] at once.
    pub fn round(&self, deadline: Instant) -> Round<'_> {
        self.open(deadline, Priority::Normal)
    }

    /// Opens a round for requests that must reach every reachable node, such as a lock's release: where a node's
    /// queue is full, they use a reserve of another `max_in_flight` requests, and beyond it wait (until
    /// `deadline`) for replies to make room, rather than being dropped.
    pub fn release_round(&self, deadline: Instant) -> Round<'_> {
        self.open(deadline, Priority::Release)
    }

    fn open(&self, deadline: Instant, priority: Priority) -> Round<'_> {
        let slot = lock(&self.inner).slots.open(self.addrs.len(), deadline);
        Round {
            fanout: self,
            slot,
            deadline,
            priority,
            driver: None,
            held: None,
            need: 1,
        }
    }

    /// Runs write jobs without the lock, then hands each back to its connection, which may give back another
    /// (bytes other callers queued meanwhile). Leaves `jobs` empty.
    fn run_writes(&self, jobs: &mut Vec<WriteJob>) {
        let mut next = Vec::new();
        let mut wake = Vec::new();
        while !jobs.is_empty() {
            for job in jobs.iter_mut() {
                job.run();
            }
            let mut inner = lock(&self.inner);
            let now = Instant::now();
            let Inner { conns, slots, .. } = &mut *inner;
            let mut out = Filing {
                slots,
                wake: &mut wake,
            };
            for job in jobs.drain(..) {
                if let Some(conn) = conns.get_mut(job.node) {
                    next.extend(conn.written(job, &self.opts, now, &mut out));
                }
            }
            drop(inner);
            unpark_all(&mut wake);
            std::mem::swap(jobs, &mut next);
        }
    }

    /// One turn of the driver: polls (until the earliest deadline of a round that waits), reads and decodes what
    /// arrived without the lock, files it, and wakes the rounds concerned. Called with the lock, returns with it.
    fn turn<'g>(
        &'g self,
        mut inner: MutexGuard<'g, Inner>,
        d: &mut Driver,
        deadline: Instant,
    ) -> MutexGuard<'g, Inner> {
        let now = Instant::now();
        let until = inner
            .slots
            .earliest_sleeper()
            .map_or(deadline, |t| t.min(deadline));
        let timeout = match d.reads.iter().any(|r| r.backlog) {
            true => Duration::ZERO,
            false => until.saturating_duration_since(now),
        };
        inner.polling_until = Some(later(now, timeout));
        drop(inner);

        let polled = d.poll(timeout, self.opts.spin);
        let read_at = Instant::now();
        d.sort_events(polled);
        if !d.fresh.is_empty() {
            let mut inner = lock(&self.inner);
            self.follow_new_connections(&mut inner, d, read_at);
        }
        d.read_ready(&self.opts);

        let mut inner = lock(&self.inner);
        inner.polling_until = None;
        self.file_turn(&mut inner, d, read_at, polled);
        if polled {
            inner.last_read = Some(read_at);
            inner.slots.wake_due(read_at, &mut d.wake);
        }
        if d.wake.is_empty() && d.jobs.is_empty() {
            return inner;
        }
        drop(inner);
        unpark_all(&mut d.wake);
        self.run_writes(&mut d.jobs);
        lock(&self.inner)
    }

    /// Events of connections the read side does not follow yet: completes their connect and follows them.
    fn follow_new_connections(&self, inner: &mut Inner, d: &mut Driver, now: Instant) {
        let Inner { conns, slots, .. } = inner;
        let mut out = Filing {
            slots,
            wake: &mut d.wake,
        };
        for &(node, generation, closed) in &d.fresh {
            let Some(conn) = conns
                .get_mut(node)
                .filter(|c| c.state.generation == generation)
            else {
                continue; // an event of a connection since replaced
            };
            conn.on_connect_event(&self.opts, now, &mut out);
            // Connected: read it from now on (a TLS connection's first read sends its ClientHello).
            if conn.state.generation == generation && conn.state.is_open() {
                d.reads[node].attach(generation, conn.transport());
                d.ready.push((node, closed));
            } else {
                d.reads[node].attach(generation, None);
            }
        }
    }

    /// Files what the turn read, drops connections that failed or hung, lets the read side forget connections that
    /// were dropped, and takes the writer role where bytes wait with no writer (a write the socket cut short, a
    /// connection that just came up).
    fn file_turn(&self, inner: &mut Inner, d: &mut Driver, now: Instant, polled: bool) {
        let Inner {
            conns,
            slots,
            pushes: inner_pushes,
            pushes_dropped: inner_dropped,
            push_waiter,
            ..
        } = inner;
        let pushes_before = (inner_pushes.len(), *inner_dropped);
        // Replies are dated when decoded, after the server sent them (a set-up reply such as INFO's uptime needs
        // its date to be late, never early).
        let decoded_at = Instant::now();
        let mut out = Filing {
            slots,
            wake: &mut d.wake,
        };
        for &(node, generation) in &d.progressed {
            if let Some(conn) = conns
                .get_mut(node)
                .filter(|c| c.state.generation == generation)
            {
                conn.state.progress(now);
            }
        }
        for (node, generation, item) in d.items.drain(..) {
            let Some(conn) = conns
                .get_mut(node)
                .filter(|c| c.state.generation == generation)
            else {
                continue; // bytes of a connection since dropped
            };
            let failed = match item {
                Item::Secured => {
                    conn.state.secured(now);
                    None
                }
                Item::Reply(value) => {
                    conn.deliver(value, &self.opts, decoded_at, &mut out);
                    None
                }
                Item::Push(value) => {
                    if self.opts.pushes {
                        if inner_pushes.len() < MAX_PUSHES {
                            inner_pushes.push_back((node, value));
                        } else {
                            *inner_dropped = true;
                        }
                    }
                    None
                }
                Item::Failed(e) => Some(e),
            };
            if let Some(e) = failed {
                conn.fail(e, &self.opts, now, &mut out);
            }
        }
        if (inner_pushes.len(), *inner_dropped) != pushes_before {
            out.wake.extend(push_waiter.take());
        }
        for (conn, read) in conns.iter_mut().zip(&mut d.reads) {
            if polled {
                conn.check(&self.opts, now, &mut out);
            }
            if read.generation != conn.state.generation {
                read.attach(conn.state.generation, None);
            }
            d.jobs.extend(conn.take_write());
        }
    }
}

impl Driver {
    /// Polls for up to `timeout`, busy-polling (without blocking) for up to `spin` first. False if the poll failed
    /// (interrupted): the turn then reads nothing.
    fn poll(&mut self, timeout: Duration, spin: Duration) -> bool {
        let spin = spin.min(timeout);
        if !spin.is_zero() {
            let start = Instant::now();
            loop {
                if self
                    .poll
                    .poll(&mut self.events, Some(Duration::ZERO))
                    .is_err()
                {
                    return false;
                }
                if !self.events.is_empty() {
                    return true;
                }
                if start.elapsed() >= spin {
                    break;
                }
                std::hint::spin_loop();
            }
            let left = timeout.saturating_sub(start.elapsed());
            return self.poll.poll(&mut self.events, Some(left)).is_ok();
        }
        self.poll.poll(&mut self.events, Some(timeout)).is_ok()
    }

    /// Sorts the poll's events into connections to read now and events of connections not followed yet; adds the
    /// connections with bytes left from their read budget.
    fn sort_events(&mut self, polled: bool) {
        self.ready.clear();
        self.fresh.clear();
        for event in self.events.iter().filter(|_| polled) {
            if event.token() == WAKER {
                continue;
            }
            let node = event.token().0 & NODE_MASK;
            let generation = (event.token().0 >> NODE_BITS) as u32;
            let closed = event.is_read_closed() || event.is_error();
            match self.reads.get(node) {
                Some(r) if r.reads(generation) => self.ready.push((node, closed)),
                Some(_) => self.fresh.push((node, generation, closed)),
                None => {}
            }
        }
        for (node, r) in self.reads.iter().enumerate() {
            if r.backlog && !self.ready.iter().any(|&(n, _)| n == node) {
                self.ready.push((node, false));
            }
        }
    }

    /// Reads and decodes every ready connection (without the fanout's lock).
    fn read_ready(&mut self, opts: &Options) {
        self.items.clear();
        self.progressed.clear();
        let mut decoded = Vec::new();
        for &(node, closed) in &self.ready {
            let r = &mut self.reads[node];
            let generation = r.generation;
            if r.read(closed, &mut self.scratch, opts, &mut decoded) > 0 {
                self.progressed.push((node, generation));
            }
            self.items
                .extend(decoded.drain(..).map(|item| (node, generation, item)));
        }
    }
}

thread_local! {
    /// A sender's write jobs, reused from round to round.
    static JOBS: std::cell::RefCell<Vec<WriteJob>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What became of a request offered to one node.
enum Offer {
    /// Queued, or held for room.
    Sent,
    /// Not sent: down, failed, or overloaded; the outcome is filed.
    Refused,
    /// The node has no room for an ordinary request right now.
    Full,
}

/// Requests of a release round waiting for room on full nodes, in the order they were sent: each with its own
/// bytes and reply count (a round may hold its first request on one node and a resend on another).
#[derive(Debug, Default)]
struct Held {
    requests: Vec<HeldRequest>,
}

#[derive(Debug)]
struct HeldRequest {
    node: usize,
    request: Vec<u8>,
    replies: usize,
}

impl Held {
    fn holds(&self, node: usize) -> bool {
        self.requests.iter().any(|h| h.node == node)
    }
}

/// One request/reply exchange with some or all nodes, bounded by a deadline. Dropping it abandons the replies still
/// to come: they are read and dropped when they arrive.
#[derive(Debug)]
#[must_use = "a round does nothing until requests are sent and replies collected with next()"]
pub struct Round<'a> {
    fanout: &'a Fanout,
    slot: SlotRef,
    deadline: Instant,
    priority: Priority,
    /// The poll, while this round's thread drives.
    driver: Option<Box<Driver>>,
    held: Option<Box<Held>>,
    /// Outcomes worth being woken for (see [`Round::need`]).
    need: usize,
}

impl<'a> Round<'a> {
    /// The instant by which every outcome of this round is known.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Sends `request` (encoded commands expecting `replies` replies in all) to every node: one write per node,
    /// shared with other callers' requests to the same node. Returns the nodes it was queued for.
    pub fn send_all(&mut self, request: &[u8], replies: usize) -> NodeSet {
        self.send_where(|_| true, request, replies)
    }

    /// Sends `request` (encoded commands expecting `replies` replies in all) to node `node` only.
    pub fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet {
        self.send_where(|n| n == node, request, replies)
    }

    /// Sends `request` to the nodes in `nodes`. Each node's outcome comes from [`next`](Round::next): a reply, or
    /// at once the reason it was not sent (down, [`NodeError::Overloaded`]). Returns the nodes the request was
    /// queued for (or, in a release round, held for room).
    pub fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        self.send_where(|n| nodes.contains(n), request, replies)
    }

    fn send_where(
        &mut self,
        include: impl Fn(usize) -> bool,
        request: &[u8],
        replies: usize,
    ) -> NodeSet {
        let f = self.fanout;
        let mut jobs = JOBS.with(|j| std::mem::take(&mut *j.borrow_mut()));
        let mut wake = Vec::new();
        let mut sent = NodeSet::EMPTY;
        let mut full = Vec::new();
        let mut inner = lock(&f.inner);
        let now = Instant::now();
        for node in 0..f.addrs.len() {
            if !include(node) {
                continue;
            }
            match self.offer(
                &mut inner, node, request, replies, now, &mut jobs, &mut wake,
            ) {
                Offer::Sent => sent.insert(node),
                Offer::Full => full.push(node),
                Offer::Refused => {}
            }
        }
        if !full.is_empty() {
            // A full node may have answered already, its replies unread because nobody polls: read them first.
            if let Some(mut d) = inner.driver.take() {
                inner = f.turn(inner, &mut d, now);
                inner.driver = Some(d);
                wake.extend(inner.successor());
            }
            for node in full {
                match self.offer(
                    &mut inner, node, request, replies, now, &mut jobs, &mut wake,
                ) {
                    Offer::Sent => sent.insert(node),
                    Offer::Refused => {}
                    Offer::Full => {
                        f.stats[node].refused(replies);
                        inner.slots.expect(self.slot, node, replies);
                        let r = Err(NodeError::Overloaded);
                        wake.extend(inner.slots.refuse(self.slot, node, replies, r));
                    }
                }
            }
        }
        drop(inner);
        unpark_all(&mut wake);
        f.run_writes(&mut jobs);
        JOBS.with(|j| *j.borrow_mut() = jobs);
        sent
    }

    /// Offers the request to one node: queues it, holds it for room (a release), or files why it was not sent.
    /// A node without room for an ordinary request is reported `Full` and left to the caller.
    #[allow(clippy::too_many_arguments)]
    fn offer(
        &mut self,
        inner: &mut Inner,
        node: usize,
        request: &[u8],
        replies: usize,
        now: Instant,
        jobs: &mut Vec<WriteJob>,
        wake: &mut Vec<Thread>,
    ) -> Offer {
        let f = self.fanout;
        let Inner { conns, slots, .. } = inner;
        let Some(conn) = conns.get_mut(node) else {
            return Offer::Refused;
        };
        slots.expect(self.slot, node, replies);
        let mut out = Filing { slots, wake };
        let refused = match conn.ensure(&f.registry, |g| token(node, g), &f.opts, now, &mut out) {
            Err(e) => e,
            // Behind a request of this round still held for room on the node: held too, so that the node's
            // requests go on the wire in the order they were sent (see `slots`).
            Ok(()) if self.held.as_ref().is_some_and(|h| h.holds(node)) => {
                self.hold(node, request, replies);
                return Offer::Sent;
            }
            Ok(()) => match conn.state.room(replies, self.priority, &f.opts) {
                Room::Yes => {
                    // Written now on an idle node, or by a caller that will not wait for replies (nobody might
                    // poll); else flushed with the next batch when the node's replies come (see `state`).
                    let idle = !conn.state.busy();
                    conn.state
                        .queue(request, Waiter::Round(self.slot), replies, now);
                    if idle || self.deadline <= now {
                        jobs.extend(conn.take_write());
                    }
                    return Offer::Sent;
                }
                Room::No => {
                    // Counted again when the caller offers once more, or files the refusal.
                    out.slots.unexpect(self.slot, node, replies);
                    return Offer::Full;
                }
                Room::Wait => {
                    self.hold(node, request, replies);
                    return Offer::Sent;
                }
            },
        };
        // Behind any request of this round still on the node's wire (see `slots`: a node's outcomes keep their order).
        out.wake
            .extend(out.slots.refuse(self.slot, node, replies, Err(refused)));
        Offer::Refused
    }

    /// Holds `request` for room on `node` (a release round), behind the round's other held requests.
    fn hold(&mut self, node: usize, request: &[u8], replies: usize) {
        self.held
            .get_or_insert_with(Box::default)
            .requests
            .push(HeldRequest {
                node,
                request: request.to_vec(),
                replies,
            });
    }

    /// Sets how many outcomes are worth waiting for before this round's thread is woken, while another thread
    /// polls (default 1): a caller that cannot decide on fewer (a majority of votes, say) then sleeps through
    /// the first replies instead of waking for each. [`next`](Round::next) still returns outcomes one at a time,
    /// and whatever is there when it is called.
    pub fn need(&mut self, outcomes: usize) {
        self.need = outcomes.max(1);
    }

    /// The next outcome: `(node, reply)` as replies arrive, in arrival order (a node's replies in request order).
    /// After the deadline, each request still unanswered comes back as [`NodeError::Timeout`], once the replies
    /// that had arrived by the deadline have been read. `None` once every request of the round has its outcome.
    ///
    /// Blocks at most until shortly after the deadline. A round that polls for everyone keeps doing so between
    /// calls, until it ends: do little between them.
    #[allow(clippy::should_implement_trait)] // blocking, with a deadline: not an Iterator
    pub fn next(&mut self) -> Option<(usize, Reply)> {
        let f = self.fanout;
        let mut inner = lock(&f.inner);
        let outcome = loop {
            if self.held.is_some() {
                inner = self.retry_held(inner);
            }
            if let Some(arrival) = inner.slots.take(self.slot) {
                break Some(arrival);
            }
            if inner.slots.settled(self.slot) {
                break None;
            }
            if inner.last_read.is_some_and(|t| t >= self.deadline) {
                // All of a node's requests at once: a late reply must never be counted for a later command.
                if let Some((node, n)) = inner.slots.time_out_node(self.slot) {
                    (0..n).for_each(|_| f.stats[node].timeout());
                    continue;
                }
            }
            if self.driver.is_none() {
                self.driver = inner.driver.take();
            }
            match self.driver.take() {
                Some(mut d) => {
                    inner = f.turn(inner, &mut d, self.deadline);
                    self.driver = Some(d);
                }
                None => inner = self.sleep(inner),
            }
        };
        // A round that drives keeps the poll while it goes on: giving it up between two outcomes would cost a
        // hand-off each time. It gives it up when it ends (here, or when dropped). A round that does not drive
        // hands a free poll on to a sleeper, if any (it may have been woken to take it).
        if outcome.is_none() || self.driver.is_none() {
            let successor = self.leave(&mut inner);
            drop(inner);
            if let Some(t) = successor {
                t.unpark();
            }
        }
        outcome
    }

    /// Waits for another thread's poll to file an outcome, to hand this round the poll, or for the deadline.
    fn sleep(&self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        let now = Instant::now();
        inner.slots.need(self.slot, self.need);
        inner.slots.sleep(self.slot, thread::current());
        // The driver must come out of its poll by this round's deadline.
        let poke = inner
            .polling_until
            .is_some_and(|until| until > self.deadline);
        drop(inner);
        if poke {
            let _ = self.fanout.waker.wake();
        }
        // Past the deadline, the turn that reads the sockets wakes us; a round waiting for room looks again soon.
        let wait = match now < self.deadline && self.held.is_none() {
            true => self.deadline - now,
            false => Duration::from_millis(1),
        };
        thread::park_timeout(wait);
        let mut inner = lock(&self.fanout.inner);
        inner.slots.awake(self.slot);
        inner
    }

    /// Queues held requests on nodes that now have room; past the deadline, counts the rest as overloaded.
    fn retry_held(&mut self, mut inner: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        let Some(mut held) = self.held.take() else {
            return inner;
        };
        let f = self.fanout;
        let now = Instant::now();
        let mut jobs = Vec::new();
        let mut wake = Vec::new();
        let Inner { conns, slots, .. } = &mut *inner;
        // Nodes with a request still held in this pass: their later requests wait behind it.
        let mut blocked: Vec<usize> = Vec::new();
        held.requests.retain(|h| {
            let Some(conn) = conns.get_mut(h.node) else {
                return false;
            };
            if blocked.contains(&h.node) {
                return true;
            }
            let room = conn.state.room(h.replies, Priority::Release, &f.opts);
            if room == Room::Yes {
                conn.state
                    .queue(&h.request, Waiter::Round(self.slot), h.replies, now);
                jobs.extend(conn.take_write());
                return false;
            }
            if now >= self.deadline {
                f.stats[h.node].refused(h.replies);
                let r = Err(NodeError::Overloaded);
                wake.extend(slots.refuse(self.slot, h.node, h.replies, r));
                return false;
            }
            blocked.push(h.node);
            true
        });
        if !held.requests.is_empty() {
            self.held = Some(held);
        }
        if jobs.is_empty() && wake.is_empty() {
            return inner;
        }
        drop(inner);
        unpark_all(&mut wake);
        f.run_writes(&mut jobs);
        lock(&f.inner)
    }

    /// Puts the poll back if this round had it, and returns a sleeping round to wake if nobody drives now.
    fn leave(&mut self, inner: &mut Inner) -> Option<Thread> {
        if let Some(d) = self.driver.take() {
            inner.driver = Some(d);
        }
        match inner.driver.is_some() {
            true => inner.successor(),
            false => None,
        }
    }
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        let mut inner = lock(&self.fanout.inner);
        inner.slots.close(self.slot);
        let successor = self.leave(&mut inner);
        drop(inner);
        if let Some(t) = successor {
            t.unpark();
        }
    }
}

/// A set of node indexes, for saying which nodes a request goes to or reached. Nodes from 64 on are always
/// members: the set exists to skip work, never to skip a node that might need a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSet(u64);

impl NodeSet {
    /// Every node.
    pub const ALL: NodeSet = NodeSet(u64::MAX);
    /// No node (below 64).
    pub const EMPTY: NodeSet = NodeSet(0);

    /// Adds `node`.
    pub fn insert(&mut self, node: usize) {
        if node < 64 {
            self.0 |= 1 << node;
        }
    }

    /// Whether `node` is a member.
    pub fn contains(&self, node: usize) -> bool {
        node >= 64 || self.0 & (1 << node) != 0
    }
}
