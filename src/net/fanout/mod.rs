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
//!   [`tls`](super::transport::tls)); a connection is up only once its handshake is done.
//!
//! # Tasks: rounds awaited as futures
//!
//! A round can also be awaited from any executor ([`Round::poll_next`]): only [`std::task::Waker`] crosses over,
//! no runtime is needed. A task must never block its executor's thread, so it never sleeps in the poll and never
//! keeps the driver from one `poll_next` to the next. Instead:
//!
//! - **A task does not drive** once the fanout has a background driver: its poll takes outcomes, sends (an idle
//!   node's write is done at once by the sender, as for a thread) and keeps the books, nothing else. Before (the
//!   first task's first poll, or if the OS refused the thread), a `poll_next` that finds no outcome and the
//!   driver free takes it for one turn that does not wait (zero timeout), puts it back, and looks again.
//! - **Then it waits as a sleeping thread does**: its waker goes in its slot (with the instant it must be woken at:
//!   its deadline, or after a millisecond for a release holding requests for room) and the future is pending. The
//!   driver's turns file and wake it exactly as they unpark a thread, and they poll no longer than its deadline.
//! - **The background driver** ([`background`](self::background)) is a thread of the fanout's own, started by
//!   the first task that waits or the first release detached from its round (a fanout only ever used by threads
//!   that never overload a node has none) and ended when the fanout is dropped.
//!   It drives whenever tasks wait and no thread drives: it sleeps in the poll until the earliest task's deadline,
//!   and gives the driver back (waking a sleeping thread, if any, to take over) once no task waits: after a
//!   linger of a millisecond, or at once when a thread asks for it (it comes to sleep, and pokes). So a lone
//!   thread drives itself with no hand-off (at most one, right after the last task), and threads and tasks share
//!   one poll.
//!
//! # Invariants
//!
//! - **One lock, and a leaf per TLS connection.** `inner` guards all shared bookkeeping: the connections' FIFOs
//!   and write queues, the rounds' slots, the driver's place. No thread blocks, sleeps or does socket I/O while it
//!   holds it, except the non-blocking `connect` of a re-dial and the checks that complete one (and creating a
//!   TLS session for it, memory only). Host names are resolved when the fanout is built, and again after a failed
//!   connect in a background thread ([`resolve`](super::resolve)). The driver is not a second lock: it is a
//!   value moved in and out of `inner`. A TLS connection's session has a mutex of its own, taken only outside
//!   `inner` and holding nothing else (see [`tls`](super::transport::tls)): the two are never held together, so
//!   there is no lock order.
//! - **Who polls.** Only the thread that took `Inner::driver` (it is `None` while someone drives) polls or reads:
//!   a thread's round (in `next()`), the background driver, a thread in [`Fanout::recv_pushes`], or, for one
//!   zero-timeout turn, a sender that finds a node full or a task in `poll_next` (both give it back before they
//!   return). Whoever puts the driver back (a round that ends, is dropped, or a non-driving round that leaves
//!   `next()` or `poll_next` while it is free) hands it on ([`Inner::successor`]): to a sleeping thread if any,
//!   else to a thread waiting for pushes, else, if tasks wait, to the background driver (unparked). A round only
//!   waits (a thread sleeps, a task registers its waker) while the driver is taken or, for a task, once it has
//!   made sure the background driver runs and unparked it: so no round waits while nobody will poll. (A driver
//!   whose thread is descheduled still stalls everyone's replies until it runs: see
//!   `benchmarks/results/2026-11-22-throughput-shared-manager.md`, "Steal".)
//! - **Who wakes whom.** The driver (whichever thread holds it) wakes a round, thread or task, when it has filed
//!   as many outcomes as the round needs ([`Round::need`]: a 5-node acquisition cannot decide on fewer than 3) or
//!   all of them, and, after each turn, the waiting rounds whose deadline (a task's wake-up instant) had passed
//!   when that turn read the sockets. A round about to wait pokes the poll's waker if the driver's current poll
//!   would outlast the round's deadline, and a thread about to sleep also if the background driver lingers. Waiters are woken, and replaced or dropped wakers dropped, only once the
//!   lock is let go (a waker may run executor code). A round that is dropped takes its waiter out of its slot: a
//!   dropped task's waker is never woken after, unless a turn had already taken it to wake (a spurious wake-up,
//!   harmless). The background driver is unparked by whoever hands it the driver, by a task that registers while
//!   the driver is free, and by the fanout's drop.
//! - **Timeouts come last.** A round reports a request as timed out only once a turn has read the sockets at or
//!   after the round's deadline, so a reply that had arrived by then is counted even if the caller (or the
//!   driver) ran late: under CPU overload, the deadline is not the first thing to fail. Likewise a node is judged
//!   hung, or its connect too slow, only right after a turn has read the sockets. One exception: a thread's round
//!   waited on while another round of the same thread keeps the driver between its `next()` calls (a misuse,
//!   `Inner::kept_by` tells it) would wait for a turn that cannot come, so at its deadline it times out what is
//!   still due without one ([`Round::next`]).
//! - **Backpressure, not disconnects.** A node with `max_in_flight` requests without replies gets no more
//!   requests: each further request is that node's failed vote ([`NodeError::Overloaded`]), and the requests on
//!   the wire are untouched. Releases may use a reserve of another `max_in_flight` and beyond that wait for room
//!   until their deadline; one still waiting when its round ends is detached and sent when room comes, within
//!   `hung_timeout` ([`detached`](super::detached) states its invariants: only releases, which a release round
//!   carries only, are ever detached; one reply consumed per command written, filed under no round). A
//!   connection is dropped only when its node is gone (closed, reset, refused) or hung: requests outstanding and
//!   no byte received for [`Options::hung_timeout`].
//!
//! # Layout
//!
//! - this file: [`Fanout`] itself, what its threads share (`Shared`, and under the lock `Inner`: the
//!   [`machine`](super::machine), sans-IO, and the threads' places), building it, what it tells about its nodes,
//!   [`Pushes`], and running the writer role's jobs;
//! - `driver`: the [`Driver`] (the poll and the read sides) and its turn: poll, read, file, wake;
//! - `round`: [`Round`], one request/reply exchange: sending (with the release reserve), waiting, sleeping;
//! - `poll_next`: a round awaited by a task ([`Round::poll_next`]);
//! - `background`: the background driver thread that drives for tasks (and for detached releases);
//!
//! [`NodeError::Overloaded`]: super::NodeError::Overloaded

mod background;
mod driver;
mod poll_next;
mod round;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle, Thread, ThreadId};
use std::time::{Duration, Instant};

use mio::{Poll, Token, Waker};

use super::addr::NodeAddr;
use super::conn::{MioLink, NODE_BITS, NODE_MASK, WriteJob};
use super::machine::{Link, Machine};
pub use super::node_set::NodeSet;
use super::options::Options;
use super::resolve::Resolved;
use super::slots::{Successor, Wake};
use super::state::Priority;
use super::stats::{NodeCounts, NodeStats};
use super::transport::Connector;
use crate::resp::Value;
use crate::sync::lock;
use driver::Driver;
pub use round::Round;

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
/// while let Some((id, reply)) = round.next() {
///     println!("node {}, command {}: {reply:?}", id.node, id.seq);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Fanout {
    shared: Arc<Shared>,
    /// The background driver, started by the first task that waits or release detached (`None` inside if it could
    /// not be started).
    background: OnceLock<Option<JoinHandle<()>>>,
}

/// What the callers' threads and the background driver share.
#[derive(Debug)]
struct Shared {
    inner: Mutex<Inner>,
    waker: Waker,
    opts: Options,
    addrs: Vec<NodeAddr>,
    sessions: Vec<Arc<AtomicU64>>,
    stats: Vec<Arc<NodeStats>>,
    /// What `rediss://` nodes' sessions are made with (kept for vacant connections occupied later).
    tls: Option<Connector>,
}

struct Inner {
    /// The connections, the rounds' slots, the detached releases: the state machine the threads take turns at.
    m: Machine<MioLink>,
    /// The poll and the read side, here while nobody drives.
    driver: Option<Box<Driver>>,
    /// The thread whose round kept the driver when its `next()` returned (it keeps it until its next call):
    /// another round waited on from that thread meanwhile can get no reply (see `Round::next`).
    kept_by: Option<ThreadId>,
    /// While the driver waits in its poll: until when, at the latest.
    polling_until: Option<Instant>,
    /// RESP3 pushes read and not yet taken (only with [`Options::with_pushes`]), oldest first, at most
    /// [`MAX_PUSHES`]; whether some were dropped for lack of room since the last take.
    pushes: std::collections::VecDeque<(usize, Value)>,
    pushes_dropped: bool,
    /// The thread waiting in [`Fanout::recv_pushes`] while another drives, if any.
    push_waiter: Option<Thread>,
    /// Set by [`Fanout::interrupt`]: the next `recv_pushes` returns at once.
    interrupted: bool,
    /// [`Fanout::set_up_sessions`] when `recv_pushes` last returned (or, before that, when its first call
    /// began): it returns at once when that changes.
    links_seen: Option<Vec<Option<u64>>>,
    /// The background driver's thread, once started.
    background: Option<Thread>,
    /// Set when the fanout is dropped: the background driver ends.
    closing: bool,
    /// The background driver polls while no task waits (it lingers): a thread that wants the driver pokes and
    /// sets `wanted`, and the background driver gives the driver back after that turn.
    lingering: bool,
    wanted: bool,
}

/// How long [`Fanout::redial`] leaves a connection whose node refused its set-up before it dials it again.
const REFUSED_SETUP_PAUSE: Duration = Duration::from_secs(60);

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
    /// Who should take the poll that was just put back: a sleeping round's thread, else a thread waiting for pushes
    /// (pushes arrive only if someone polls), else, if tasks or detached releases wait, the background driver.
    fn successor(&mut self) -> Option<Thread> {
        match self.m.slots.successor() {
            Successor::Thread(t) => Some(t),
            Successor::Tasks => self.push_waiter.take().or_else(|| self.background.clone()),
            Successor::Nobody => self
                .push_waiter
                .take()
                .or_else(|| self.background.clone().filter(|_| self.m.needs_driver())),
        }
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("nodes", &self.m.conns.len())
            .field("driving", &self.driver.is_none())
            .finish_non_exhaustive()
    }
}

/// The poll's waker: a node index no node has.
const WAKER: Token = Token(NODE_MASK);

fn unpark_all(waiters: &mut Vec<Wake>) {
    for w in waiters.drain(..) {
        w.wake();
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
        Fanout::with_vacancies(nodes, 0, opts)
    }

    /// As [`new`](Fanout::new), but the last `vacant` of `nodes` are *vacant* connections: kept for nodes not
    /// known yet (a cluster member's node added later), never dialled, each request for one failed
    /// ([`NodeError::Cluster`](super::NodeError::Cluster)), until [`occupy`](Fanout::occupy) gives it an address.
    /// Their entries in `nodes` are placeholders (what [`addrs`](Fanout::addrs) shows; their TLS setting counts
    /// for the TLS configurations built now). The number of connections never changes: every per-node book of
    /// the fanout and of its users is sized once.
    ///
    /// # Errors
    ///
    /// As [`new`](Fanout::new).
    pub fn with_vacancies(
        nodes: Vec<NodeAddr>,
        vacant: usize,
        opts: Options,
    ) -> std::io::Result<Fanout> {
        if nodes.len() >= NODE_MASK {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "65,535 nodes or more",
            ));
        }
        let tls = Connector::new(&opts.tls, &nodes)?;
        let poll = Poll::new()?;
        let registry = Arc::new(poll.registry().try_clone()?);
        let waker = Waker::new(&registry, WAKER)?;
        let now = Instant::now();
        let first_vacant = nodes.len().saturating_sub(vacant);
        let links: Vec<MioLink> = nodes
            .iter()
            .enumerate()
            .map(|(i, a)| match i >= first_vacant {
                true => MioLink::vacant(i, a.clone(), &registry),
                false => MioLink::new(i, a.clone(), Resolved::now(a), tls.as_ref(), &registry),
            })
            .collect();
        let mut m = Machine::new(links, opts.clone(), now);
        let sessions = m
            .conns
            .iter()
            .map(|c| Arc::clone(&c.state.sessions))
            .collect();
        let stats: Vec<Arc<NodeStats>> =
            m.conns.iter().map(|c| Arc::clone(&c.state.stats)).collect();
        let mut wake = Vec::new();
        m.dial_all(now, &mut wake);
        let driver = Driver::new(poll, nodes.len(), &opts, &stats);
        let fanout = Shared {
            inner: Mutex::new(Inner {
                m,
                driver: Some(Box::new(driver)),
                kept_by: None,
                polling_until: None,
                pushes: Default::default(),
                pushes_dropped: false,
                push_waiter: None,
                interrupted: false,
                links_seen: None,
                background: None,
                closing: false,
                lingering: false,
                wanted: false,
            }),
            waker,
            opts,
            addrs: nodes,
            sessions,
            stats,
            tls,
        };
        Ok(Fanout {
            shared: Arc::new(fanout),
            background: OnceLock::new(),
        })
    }

    /// Gives vacant connection `node` ([`with_vacancies`](Fanout::with_vacancies)) the address `addr`, and dials
    /// it. The name is resolved first, on the caller's thread (it may block on the system resolver). Returns
    /// `false`, changing nothing, if `node` is not a vacant connection (out of range, or occupied already: a
    /// connection's address never changes once it has one, so no reply of one server is ever read as
    /// another's), or if `addr` is a `rediss://` node its TLS session cannot be made for (a host that is no valid
    /// TLS server name, which [`new`](Fanout::new) refuses): it is never dialled in clear.
    pub fn occupy(&self, node: usize, addr: NodeAddr) -> bool {
        self.shared.occupy(node, addr)
    }

    /// A handle that occupies this fanout's vacant connections from another thread without keeping the fanout
    /// alive ([`Occupier::occupy`] does nothing once it is dropped).
    pub fn occupier(&self) -> Occupier {
        Occupier(Arc::downgrade(&self.shared))
    }

    /// The address connection `node` dials now: [`addrs`](Fanout::addrs)' entry, or for a vacant connection
    /// occupied since, the address it was given; `None` out of range.
    pub fn addr(&self, node: usize) -> Option<NodeAddr> {
        lock(&self.shared.inner)
            .m
            .conns
            .get(node)
            .map(|c| c.link.addr().clone())
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.shared.addrs.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.shared.addrs.is_empty()
    }

    /// The nodes' addresses, in index order.
    pub fn addrs(&self) -> &[NodeAddr] {
        &self.shared.addrs
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.shared.opts
    }

    /// Whether node `node` has an established connection now.
    pub fn is_up(&self, node: usize) -> bool {
        lock(&self.shared.inner)
            .m
            .conns
            .get(node)
            .is_some_and(|c| c.state.is_up())
    }

    /// How many connections to `node` have completed their set-up so far; it changes when the node was reconnected.
    /// Cheap: no lock is taken.
    pub fn sessions(&self, node: usize) -> u64 {
        self.shared
            .sessions
            .get(node)
            .map_or(0, |s| s.load(Ordering::Acquire))
    }

    /// The session a request queued on `node` now would be answered in: [`sessions`](Fanout::sessions) if its
    /// connection is up and set up, else the next one (it is down, connecting, or setting up). A guess, not a
    /// promise: the connection may drop before the request goes, and then its answer comes in a later session.
    /// Callers compare it with `sessions` when the answer is read, so a wrong guess costs that answer, nothing
    /// else.
    pub fn next_session(&self, node: usize) -> u64 {
        // Both read under the lock: a set-up completes (and `sessions` moves) only under it.
        let inner = lock(&self.shared.inner);
        let set_up = inner.m.conns.get(node).is_some_and(|c| c.state.is_set_up());
        self.sessions(node) + u64::from(!set_up)
    }

    /// Replies to [`Options::setup`]'s commands on `node`'s current connection, in order, each with the instant
    /// it was read (after the server sent it).
    pub fn setup_replies(&self, node: usize) -> Vec<(Value, Instant)> {
        lock(&self.shared.inner)
            .m
            .conns
            .get(node)
            .map(|c| c.state.setup_replies.clone())
            .unwrap_or_default()
    }

    /// Whether `node` has stopped answering: it has had requests outstanding and no byte read from it for at
    /// least `for_at_least` and four times its usual round trip (the 99th percentile so far) when a turn last
    /// read the sockets (a reply waiting unread in a socket nobody polled does not make a node silent). For an
    /// acquisition whose verdict waits only on such nodes (`Engine::without_silent`).
    pub fn silent(&self, node: usize, for_at_least: Duration) -> bool {
        lock(&self.shared.inner).m.silent(node, for_at_least)
    }

    /// What `node`'s connections have done so far: requests, writes, replies, reconnects, round trips. Cheap: no
    /// lock is taken.
    pub fn stats(&self, node: usize) -> NodeCounts {
        self.shared
            .stats
            .get(node)
            .map_or_else(NodeCounts::default, |s| s.snapshot())
    }

    /// Requests sent to `node` whose replies have not arrived yet (including those nobody waits for any more).
    pub fn in_flight(&self, node: usize) -> usize {
        lock(&self.shared.inner)
            .m
            .conns
            .get(node)
            .map_or(0, |c| c.state.in_flight())
    }

    /// Waits until a RESP3 push arrives (only connections made with [`Options::with_pushes`] keep them), until
    /// `deadline`, until [`interrupt`](Fanout::interrupt) is called, or until a connection has dropped or
    /// completed its set-up since the last call returned, or the first call began (a listener must know its
    /// pushes may have been lost),
    /// polling the connections meanwhile if nobody else does; returns what arrived (possibly nothing). Meant for
    /// one thread that listens, such as a watchdog; rounds of other threads go on as usual.
    pub fn recv_pushes(&self, deadline: Instant) -> Pushes {
        let mut inner = lock(&self.shared.inner);
        if inner.links_seen.is_none() {
            inner.links_seen = Some(self.set_up_in(&inner).collect());
        }
        let mut driver = None;
        loop {
            if !inner.pushes.is_empty() || inner.pushes_dropped || inner.interrupted {
                break;
            }
            let seen = inner.links_seen.as_deref().unwrap_or_default();
            if seen.iter().copied().ne(self.set_up_in(&inner)) {
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
                    inner = self.shared.turn(inner, &mut d, deadline);
                    driver = Some(d);
                }
                None => {
                    inner.push_waiter = Some(thread::current());
                    inner.wanted |= inner.lingering;
                    let poke = inner.lingering
                        || inner.polling_until.is_some_and(|until| until > deadline);
                    drop(inner);
                    if poke {
                        let _ = self.shared.waker.wake();
                    }
                    thread::park_timeout(deadline.saturating_duration_since(Instant::now()));
                    inner = lock(&self.shared.inner);
                    inner.push_waiter = None;
                }
            }
        }
        let pushes = Pushes {
            pushes: inner.pushes.drain(..).collect(),
            dropped: std::mem::take(&mut inner.pushes_dropped),
        };
        inner.interrupted = false;
        inner.links_seen = Some(self.set_up_in(&inner).collect());
        let successor = match driver.take() {
            Some(d) => {
                inner.driver = Some(d);
                inner.successor()
            }
            None => None,
        };
        drop(inner);
        if let Some(t) = successor {
            t.unpark();
        }
        pushes
    }

    /// Per connection, the session it is in if it has completed its set-up now; `None` while it is down,
    /// connecting or setting up. A connection that drops goes from `Some` to `None`, one made anew to the next
    /// session: for a listener that must know when pushes may have been lost.
    pub fn set_up_sessions(&self) -> Vec<Option<u64>> {
        let inner = lock(&self.shared.inner);
        self.set_up_in(&inner).collect()
    }

    /// [`set_up_sessions`](Fanout::set_up_sessions), read under the lock (a set-up completes only under it).
    fn set_up_in<'a>(&'a self, inner: &'a Inner) -> impl Iterator<Item = Option<u64>> + 'a {
        (inner.m.conns.iter().enumerate())
            .map(|(i, c)| c.state.is_set_up().then(|| self.sessions(i)))
    }

    /// Dials every connection that is down and whose backoff has passed, as a request would (a failure is
    /// remembered by the connection, as at build); one whose node refused its set-up
    /// ([`NodeError::Setup`](super::NodeError::Setup): mostly a command the server or the user's ACL does not
    /// allow, refused again on every dial; sometimes a passing state, such as a busy script) only once a minute
    /// has passed since (`REFUSED_SETUP_PAUSE`). For connections that only listen for pushes: nothing else dials
    /// them again after a drop.
    pub fn redial(&self) {
        let mut wake = Vec::new();
        let mut inner = lock(&self.shared.inner);
        let now = Instant::now();
        for node in 0..inner.m.conns.len() {
            let conn = &inner.m.conns[node];
            if conn.link.is_vacant() {
                continue;
            }
            if matches!(conn.state.last_error(), super::NodeError::Setup(_)) {
                // Down since before `now - pause`, give or take its (short) backoff.
                let due = now
                    .checked_sub(REFUSED_SETUP_PAUSE)
                    .is_some_and(|then| matches!(conn.state.needs_dial(then), Ok(true)));
                if !due {
                    continue;
                }
            }
            let _ = inner.m.ensure(node, now, &mut wake);
        }
        drop(inner);
        unpark_all(&mut wake);
        // A driver parked in its poll learns of the new sockets at its next turn.
        let _ = self.shared.waker.wake();
    }

    /// Makes a thread waiting in [`recv_pushes`](Fanout::recv_pushes) (or its next call) return at once, and the
    /// current poll, if any, return early. For a listener that has other work to look at.
    pub fn interrupt(&self) {
        let mut inner = lock(&self.shared.inner);
        inner.interrupted = true;
        let waiter = inner.push_waiter.take();
        drop(inner);
        let _ = self.shared.waker.wake();
        if let Some(t) = waiter {
            t.unpark();
        }
    }

    /// Opens a round whose outcomes are all known by `deadline`: a node that has not answered by then counts as
    /// [`NodeError::Timeout`]. A node that already has [`Options::max_in_flight`] requests without replies is not
    /// sent this round's request: it counts as [`NodeError::Overloaded`] at once.
    ///
    /// [`NodeError::Timeout`]: super::NodeError::Timeout
    /// [`NodeError::Overloaded`]: super::NodeError::Overloaded
    pub fn round(&self, deadline: Instant) -> Round<'_> {
        self.open(deadline, Priority::Normal)
    }

    /// Opens a round for requests that must reach every reachable node, such as a lock's release: where a node's
    /// queue is full, they use a reserve of another `max_in_flight` requests, and beyond it wait (until
    /// `deadline`) for replies to make room, rather than being dropped. A request still waiting for room when the
    /// round ends (it is dropped, or counts the node as [`NodeError::Overloaded`] past its deadline) is not
    /// dropped with it: it is **detached**, and sent on its own once the node has room (within
    /// [`Options::hung_timeout`], else given up), its replies read and dropped.
    ///
    /// # Contract
    ///
    /// Only for requests that are safe to run late, with nobody waiting for them, and on a later connection to
    /// the node: a compare-and-delete of a value only the caller holds (`DELIFEQ`, a release script), which
    /// deletes nothing but that value's own key whenever it runs — so a value no later request writes: lock
    /// values are drawn per attempt, never reused by a retry. (A request offered to a node after one of these was
    /// detached does not overtake it there either: see [`detached`](super::detached), "In order per node".) Never an acquisition (`SET NX`) or an
    /// extension: run late, unawaited, it would make a lock nobody holds. Those go in [`round`](Fanout::round),
    /// where a full node's request is refused at once and never held.
    ///
    /// And only requests that finish their work without a reply being read: the round may end (its caller drops
    /// it once a majority confirmed, or at once for an unawaited clean-up) before a node answers, and nobody
    /// then reads what that node says. A script must go in full (`EVAL`), not by hash: a `NOSCRIPT` answered to
    /// nobody is a release that never ran. muxlock's releases go in full from the start (`redlock/scripts.rs`,
    /// "Releases go in full"); a held request is detached with the bytes it was sent with.
    ///
    /// [`NodeError::Overloaded`]: super::NodeError::Overloaded
    pub fn release_round(&self, deadline: Instant) -> Round<'_> {
        self.open(deadline, Priority::Release)
    }
}

impl Shared {
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
            for job in jobs.drain(..) {
                let (write, outcome) = job.finish();
                next.extend(
                    inner
                        .m
                        .written(write, outcome, now, &mut wake)
                        .map(WriteJob::new),
                );
            }
            drop(inner);
            unpark_all(&mut wake);
            std::mem::swap(jobs, &mut next);
        }
    }
}

/// Occupies a [`Fanout`]'s vacant connections from another thread (a cluster member's map refresh) without
/// keeping the fanout alive: see [`Fanout::occupier`].
#[derive(Clone, Debug)]
pub struct Occupier(std::sync::Weak<Shared>);

impl Occupier {
    /// [`Fanout::occupy`]; `false` if the fanout is gone.
    pub fn occupy(&self, node: usize, addr: NodeAddr) -> bool {
        self.0.upgrade().is_some_and(|s| s.occupy(node, addr))
    }

    /// [`Fanout::addr`]; `None` if the fanout is gone.
    pub fn addr(&self, node: usize) -> Option<NodeAddr> {
        let shared = self.0.upgrade()?;
        lock(&shared.inner)
            .m
            .conns
            .get(node)
            .map(|c| c.link.addr().clone())
    }
}

impl Shared {
    fn occupy(&self, node: usize, addr: NodeAddr) -> bool {
        let target = self.tls.as_ref().and_then(|c| c.target(&addr));
        if addr.tls() && target.is_none() {
            // Not a valid TLS server name (refused at build, see `Fanout::new`), or no TLS settings: a `rediss://`
            // node is never dialled in clear.
            return false;
        }
        let resolved = Resolved::now(&addr);
        let now = Instant::now();
        let mut inner = lock(&self.inner);
        let Some(conn) = inner.m.conns.get_mut(node) else {
            return false;
        };
        if !conn.link.occupy(addr, resolved, target) {
            return false;
        }
        let mut wake = Vec::new();
        // A failure is remembered by the connection and reported by the first round, as at build.
        let _ = inner.m.ensure(node, now, &mut wake);
        drop(inner);
        unpark_all(&mut wake);
        true
    }
}
