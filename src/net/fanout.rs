//! [`Fanout`]: N connections driven by one `mio::Poll`, shared by any number of threads.
//!
//! # How threads share it
//!
//! A caller opens a [`Round`], writes its request to the nodes it wants (one write per node, straight from the
//! caller's thread), then asks for replies with [`Round::next`]. Whoever needs a reply while nobody is polling
//! becomes the *driver*: it polls the sockets, reads and decodes every reply that arrived, whoever it is for, and
//! files each under the round that asked. Callers whose replies arrive while another thread drives are woken with
//! `unpark`. When a driver leaves, it wakes one waiting caller to take over.
//!
//! A lone caller therefore does everything on its own thread: no hand-off, no background thread. Concurrent callers
//! pipeline their requests on the same connections, and one poll serves them all.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use mio::{Events, Poll, Registry, Token};

use super::addr::NodeAddr;
use super::conn::{Conn, READ_CHUNK, Waiter};
use super::error::NodeError;
use super::options::Options;
use crate::resp::Value;
use crate::sync::lock;

/// One node's answer to one request: its reply (which may be an error reply), or why there is none.
pub type Reply = Result<Value, NodeError>;

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
    poll: Mutex<PollState>,
    registry: Registry,
    opts: Options,
    addrs: Vec<NodeAddr>,
    sessions: Vec<Arc<AtomicU64>>,
    /// Some connection has bytes left over from its read budget.
    backlog: AtomicBool,
}

#[derive(Debug)]
struct PollState {
    poll: Poll,
    events: Events,
    /// Every socket read lands here first; only the driver reads.
    scratch: Box<[u8]>,
}

struct Inner {
    conns: Vec<Conn>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Whether some thread is polling (then others wait to be woken).
    driving: bool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("slots", &self.slots.len())
            .field("driving", &self.driving)
            .finish()
    }
}

/// The mailbox of one round.
struct Slot {
    /// Bumped when the round ends, so replies to its requests that arrive later are recognised and dropped.
    generation: u64,
    arrivals: VecDeque<(usize, Reply)>,
    /// Per node: requests whose outcome has not been filed yet.
    pending: Vec<u32>,
    outstanding: usize,
    /// The round's thread while it waits for another thread's poll to file its replies.
    waiter: Option<Thread>,
}

/// Up to 2^16 nodes; the rest of the token tells a node's successive connections apart.
const NODE_BITS: u32 = 16;

fn token(node: usize, generation: u32) -> Token {
    Token(((generation as usize) << NODE_BITS) | node)
}

impl Fanout {
    /// Connections to `nodes`; each is dialled at once (without waiting), so the first round finds them ready.
    ///
    /// # Errors
    ///
    /// Only if the OS refuses to create the poll, or there are more than 65,536 nodes. An unreachable node is not
    /// an error: it is a failed vote in each round until it comes back.
    pub fn new(nodes: Vec<NodeAddr>, opts: Options) -> std::io::Result<Fanout> {
        if nodes.len() > 1 << NODE_BITS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "more than 65,536 nodes",
            ));
        }
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let now = Instant::now();
        let conns: Vec<Conn> = nodes
            .iter()
            .map(|a| Conn::new(a.clone(), &opts, now))
            .collect();
        let sessions = conns.iter().map(|c| Arc::clone(&c.sessions)).collect();
        let fanout = Fanout {
            inner: Mutex::new(Inner {
                conns,
                slots: Vec::new(),
                free: Vec::new(),
                driving: false,
            }),
            poll: Mutex::new(PollState {
                poll,
                events: Events::with_capacity(256),
                scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            }),
            registry,
            opts,
            addrs: nodes,
            sessions,
            backlog: AtomicBool::new(false),
        };
        {
            let mut inner = lock(&fanout.inner);
            for (i, conn) in inner.conns.iter_mut().enumerate() {
                // A failure is remembered by the connection and reported by the first round.
                let _ = conn.ensure(&fanout.registry, |g| token(i, g), &fanout.opts, now);
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
        lock(&self.inner).conns.get(node).is_some_and(Conn::is_up)
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
            .map(|c| c.setup_replies.clone())
            .unwrap_or_default()
    }

    /// Requests sent to `node` whose replies have not arrived yet (including those nobody waits for any more).
    pub fn in_flight(&self, node: usize) -> usize {
        lock(&self.inner).conns.get(node).map_or(0, Conn::in_flight)
    }

    /// Opens a round whose outcomes are all known by `deadline`: a node that has not answered by then counts as
    /// [`NodeError::Timeout`].
    pub fn round(&self, deadline: Instant) -> Round<'_> {
        let mut inner = lock(&self.inner);
        let n = self.addrs.len();
        let slot = match inner.free.pop() {
            Some(i) => i,
            None => {
                let slot = Slot {
                    generation: 0,
                    arrivals: VecDeque::new(),
                    pending: vec![0; n],
                    outstanding: 0,
                    waiter: None,
                };
                inner.slots.push(slot);
                inner.slots.len() - 1
            }
        };
        let generation = inner.slots[slot].generation;
        Round {
            fanout: self,
            slot,
            generation,
            deadline,
        }
    }

    /// Polls once, up to `deadline`, and files every reply that arrived. Called with `driving` set by the caller.
    fn drive(&self, deadline: Instant) {
        let mut ps = lock(&self.poll);
        let PollState {
            poll,
            events,
            scratch,
        } = &mut *ps;
        // A connection with bytes left over from its read budget is served without waiting.
        let timeout = match self.backlog.load(Ordering::Relaxed) {
            true => Duration::ZERO,
            false => deadline.saturating_duration_since(Instant::now()),
        };
        // An interrupted or failed poll just returns early; the caller's loop re-checks its deadline.
        let polled = poll.poll(events, Some(timeout)).is_ok();
        let now = Instant::now();
        let mut wake = Vec::new();
        let mut inner = lock(&self.inner);
        let Inner { conns, slots, .. } = &mut *inner;
        for event in events.iter().filter(|_| polled) {
            let node = event.token().0 & ((1 << NODE_BITS) - 1);
            let generation = (event.token().0 >> NODE_BITS) as u32;
            let Some(conn) = conns.get_mut(node).filter(|c| c.generation == generation) else {
                continue; // an event of a connection since replaced
            };
            let closed = event.is_read_closed() || event.is_error();
            let readable = event.is_readable() || closed;
            conn.on_event(readable, closed, scratch, &self.opts, now, &mut |w, r| {
                file(slots, node, w, r, &mut wake)
            });
        }
        // Connections that stopped at their read budget get one more, then wait for the next drive.
        let mut backlog = false;
        for (node, conn) in conns.iter_mut().enumerate().filter(|(_, c)| c.backlog) {
            conn.on_event(true, false, scratch, &self.opts, now, &mut |w, r| {
                file(slots, node, w, r, &mut wake)
            });
            backlog |= conn.backlog;
        }
        self.backlog.store(backlog, Ordering::Relaxed);
        inner.driving = false;
        // Someone still waiting on a poll that is now nobody's: wake one to take over.
        if let Some(t) = inner.slots.iter_mut().find_map(|s| s.waiter.take()) {
            wake.push(t);
        }
        drop(inner);
        drop(ps);
        for t in wake {
            t.unpark();
        }
    }
}

/// Files `reply` under the round that `waiter` names, if that round still waits for it.
fn file(slots: &mut [Slot], node: usize, waiter: Waiter, reply: Reply, wake: &mut Vec<Thread>) {
    let Waiter::Round { slot, generation } = waiter else {
        return;
    };
    let Some(s) = slots.get_mut(slot).filter(|s| s.generation == generation) else {
        return; // the round is over: a late reply, read and dropped
    };
    match s.pending.get_mut(node) {
        Some(p) if *p > 0 => *p -= 1,
        _ => return, // already counted as timed out
    }
    s.outstanding -= 1;
    s.arrivals.push_back((node, reply));
    if let Some(t) = s.waiter.take() {
        wake.push(t);
    }
}

/// One request/reply exchange with some or all nodes, bounded by a deadline. Dropping it abandons the replies still
/// to come: they are read and dropped when they arrive.
#[derive(Debug)]
#[must_use = "a round does nothing until requests are sent and replies collected with next()"]
pub struct Round<'a> {
    fanout: &'a Fanout,
    slot: usize,
    generation: u64,
    deadline: Instant,
}

impl Round<'_> {
    /// The instant by which every outcome of this round is known.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Sends `request` (encoded commands expecting `replies` replies in all) to every node: one write per node.
    pub fn send_all(&mut self, request: &[u8], replies: usize) {
        let mut inner = lock(&self.fanout.inner);
        let now = Instant::now();
        for node in 0..inner.conns.len() {
            self.send_locked(&mut inner, node, request, replies, now);
        }
    }

    /// Sends `request` (encoded commands expecting `replies` replies in all) to node `node` only.
    pub fn send(&mut self, node: usize, request: &[u8], replies: usize) {
        let mut inner = lock(&self.fanout.inner);
        if node < inner.conns.len() {
            self.send_locked(&mut inner, node, request, replies, Instant::now());
        }
    }

    fn send_locked(
        &self,
        inner: &mut Inner,
        node: usize,
        request: &[u8],
        replies: usize,
        now: Instant,
    ) {
        let opts = &self.fanout.opts;
        let Inner { conns, slots, .. } = inner;
        let conn = &mut conns[node];
        let mine = &mut slots[self.slot];
        mine.pending[node] += replies as u32;
        mine.outstanding += replies;
        let mut wake = Vec::new();
        let mut sink = |w, r| file(slots, node, w, r, &mut wake);
        let me = Waiter::Round {
            slot: self.slot,
            generation: self.generation,
        };
        if let Err(e) = conn.ensure(&self.fanout.registry, |g| token(node, g), opts, now) {
            (0..replies).for_each(|_| sink(me, Err(e.clone())));
        } else if conn.in_flight() + replies > opts.max_in_flight {
            conn.fail(NodeError::Overloaded, opts, now, &mut sink);
            (0..replies).for_each(|_| sink(me, Err(NodeError::Overloaded)));
        } else {
            conn.queue(request, me, replies);
            if let Err(e) = conn.flush() {
                conn.fail(e, opts, now, &mut sink);
            }
        }
        // A failed connection fails the requests of other rounds too: wake those that wait.
        for t in wake {
            t.unpark();
        }
    }

    /// The next outcome: `(node, reply)` as replies arrive, in arrival order (a node's replies in request order).
    /// At the deadline, each request still unanswered comes back as [`NodeError::Timeout`]. `None` once every
    /// request of the round has its outcome.
    ///
    /// Blocks at most until the deadline.
    #[allow(clippy::should_implement_trait)] // blocking, with a deadline: not an Iterator
    pub fn next(&mut self) -> Option<(usize, Reply)> {
        let mut inner = lock(&self.fanout.inner);
        loop {
            let driving = inner.driving;
            let slot = &mut inner.slots[self.slot];
            if let Some(arrival) = slot.arrivals.pop_front() {
                return Some(arrival);
            }
            if slot.outstanding == 0 {
                return None;
            }
            let now = Instant::now();
            if now >= self.deadline {
                let node = slot.pending.iter().position(|&p| p > 0)?;
                slot.pending[node] -= 1;
                slot.outstanding -= 1;
                return Some((node, Err(NodeError::Timeout)));
            }
            if driving {
                slot.waiter = Some(thread::current());
                drop(inner);
                thread::park_timeout(self.deadline - now);
                inner = lock(&self.fanout.inner);
                inner.slots[self.slot].waiter = None;
            } else {
                inner.driving = true;
                drop(inner);
                self.fanout.drive(self.deadline);
                inner = lock(&self.fanout.inner);
            }
        }
    }
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        let mut inner = lock(&self.fanout.inner);
        let slot = &mut inner.slots[self.slot];
        slot.generation += 1;
        slot.arrivals.clear();
        slot.pending.iter_mut().for_each(|p| *p = 0);
        slot.outstanding = 0;
        slot.waiter = None;
        inner.free.push(self.slot);
    }
}
