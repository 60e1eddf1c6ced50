//! [`NodeState`]: the protocol state of one node's connection, with no socket (sans-IO, in the style of
//! quinn-proto): the phase of the link and its deadlines, the set-up pipeline, the FIFO of waiters, the bytes
//! waiting to be written and who writes them (the writer role), the backoff and the hung detection. Every method
//! takes `now` as an argument and touches nothing but memory, so the unit tests below drive it with byte buffers
//! and a virtual clock.
//!
//! The socket side lives in [`conn`](super::conn) (dialling, completing a connect) and
//! [`transport`](super::transport) (moving bytes over plain TCP or TLS); the bytes read are turned into replies by
//! [`Inbound`](super::inbound::Inbound), also pure.
//!
//! Redis answers the requests of one connection in order, so the FIFO names, for each reply to come, who waits for
//! it: a set-up step, a round's command by its id ([`Waiter::Round`]: the round's slot and the reply's
//! [`CommandId`]), or nobody (a release queued after its round ended, [`Waiter::Detached`]). A reply is filed
//! under the id at the FIFO's head, never under a place counted by the round. A request whose caller stopped
//! waiting keeps its place in the FIFO; its reply is read and dropped. A reply whose id the round's books show
//! behind an older one still on a wire fails the connection ([`NodeError::OutOfOrder`], see `slots`).
//!
//! # Who writes, and when: batches clocked by replies
//!
//! At most one thread writes to a connection at a time, the one that took the writer role (`writing`) and with
//! it every byte queued so far. A caller that queues a request on an idle connection (nothing on the wire) takes
//! the role and writes at once, from its own thread: a lone caller pays no hand-off and no delay. A caller that
//! queues on a *busy* connection (requests on the wire, their replies still to come) leaves its bytes queued: the
//! driver is awake when those replies arrive, and at the end of that turn it writes everything queued for the
//! node in one write. Under load each node so gets one batch at a time, and a batch holds every request that
//! came while the previous one was out: one write here and one read on the server for many requests, where
//! writing each at once would cost a system call on both sides per request (on loopback, a write also runs the
//! server's receive path). A request waits at most for the replies of the batch ahead of it, which the server
//! had to answer first anyway. A write that fills the socket puts the rest back in front of the queue and leaves
//! the role; the driver resumes it when the socket drains. Bytes queued behind a connect, a TLS handshake or a
//! set-up wait for the driver too. The rounds that queued them may all end first (a majority answered, a task was
//! cancelled): a driver then keeps turning until they are written (`Machine::needs_driver`), since a release
//! among them must reach its node whoever still waits. Over TLS a batch is handed to rustls in one piece, so
//! its requests share TLS records (one record carries up to 16 KiB of them).
//!
//! **Handed to the transport means on the wire, or in a writer's hands.** Bytes a transport took are out of
//! the state's sight, and `needs_driver` no longer counts them; so a transport must never keep them waiting
//! for a turn of the driver. Two places would, over TLS, and the state keeps the bytes (or the fact) instead:
//! a handshake under way (rustls would hold the plaintext until the server's last flight is read and its
//! Finished sent: bytes are handed over only once the link is up), and a write that met a full socket after
//! rustls had encrypted the batch (the records wait in rustls with nothing left here: the write is
//! `stalled`, and taken again, empty if need be, until a write ends with the socket
//! taking all).
//!
//! # A node that is loading
//!
//! A server that restarted with its data accepts connections while it loads the data set, answers the set-up's
//! `HELLO`, `AUTH`, `SELECT` and `INFO`, and refuses everything that needs the data (`SCRIPT LOAD`, `EVAL`,
//! `SET`) with `-LOADING`. A set-up step refused so fails the connection with [`NodeError::Loading`], whose
//! backoff keeps growing (a reply does not reset it here): the node is dialled again, and counted as down, until
//! a set-up goes through. The requests queued behind that set-up fail with it (refused unrun, or run after the
//! load ended without being counted: a failed vote either way); detached releases among them are counted as
//! given up, and the driver places detached releases only once a set-up went through, keeping them while the
//! node loads (see [`detached`](super::detached), "Bounded"). Callers whose set-up has a step that needs the data (the Redlock set-up's
//! `SCRIPT LOAD`s) so never see a loading node as up; a set-up of `HELLO` alone would.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::addr::NodeAddr;
use super::error::NodeError;
use super::options::Options;
use super::slots::{CommandId, Reply, SlotRef, Slots, Wake};
use super::stats::NodeStats;
use crate::resp::{Decimal, Value, encode_command};
use crate::time::later;

/// Who waits for the reply at one position of the FIFO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A step of the connection set-up.
    Setup(Step),
    /// A request of a round: the round, and the id of its first reply (the request's replies take the ids that
    /// follow it, one per command).
    Round(SlotRef, u32),
    /// A release whose round ended while it was held for room, queued since (see
    /// [`detached`](super::detached)): its replies are read and dropped, filed under no round.
    Detached,
}

/// The set-up steps pipelined ahead of the first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Auth,
    Select,
    Hello,
    /// The n-th of the caller-supplied set-up commands.
    Extra(usize),
}

/// How a request may use a node's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Priority {
    /// Refused (the node's vote fails, nothing is sent) when the node already has `max_in_flight` requests
    /// without replies.
    Normal,
    /// Must reach every reachable node (a release): it may use a reserve of another `max_in_flight` requests, and
    /// beyond that it waits for room.
    Release,
}

/// Whether a node can take a request now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Room {
    Yes,
    /// Refused: the node's vote fails with [`NodeError::Overloaded`].
    No,
    /// Wait until replies make room (or the round's deadline passes).
    Wait,
}

/// Outcomes to file, and the waiters (threads, tasks) their filing wakes: what a connection reports to the rounds.
pub(crate) struct Filing<'a> {
    pub(crate) slots: &'a mut Slots,
    pub(crate) wake: &'a mut Vec<Wake>,
}

impl Filing<'_> {
    /// Files the outcome of one reply of the wire under the round and id its waiter names. `Err`: the round's
    /// books disagree with the wire (see [`Slots::file`]): the request fails with [`NodeError::OutOfOrder`]
    /// instead, and the connection must be dropped.
    pub(crate) fn file(
        &mut self,
        node: usize,
        waiter: Waiter,
        reply: Reply,
    ) -> Result<(), NodeError> {
        if let Waiter::Round(r, seq) = waiter {
            match self.slots.file(r, CommandId { node, seq }, reply) {
                Ok(wake) => self.wake.extend(wake),
                Err(_) => {
                    let failed = Err(NodeError::OutOfOrder);
                    self.wake.extend(self.slots.refuse(r, node, seq, 1, failed));
                    return Err(NodeError::OutOfOrder);
                }
            }
        }
        Ok(())
    }
}

/// Where the link of a node stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// Not connected; the next dial is allowed at `retry_at`.
    Down {
        retry_at: Instant,
    },
    /// The TCP connect is under way.
    Connecting {
        deadline: Instant,
    },
    /// TCP is up and the TLS handshake under way, still within the connect timeout. Bytes queued meanwhile stay
    /// here, unwritten (a driver is kept turning for them), until the handshake completes: handed to rustls now,
    /// they would wait there for the driver to read the server's last flight, out of the state's sight.
    Handshake {
        deadline: Instant,
    },
    Up,
}

/// One node's protocol state.
pub(crate) struct NodeState {
    node: usize,
    link: Link,
    /// Names the current connection: it changes when one is dialled and when one fails, so that poll events,
    /// bytes read and writes of an earlier connection are told apart and ignored.
    pub(crate) generation: u32,
    /// Who waits for each reply, and when the request was queued (for the round-trip statistics).
    fifo: VecDeque<(Waiter, Instant)>,
    /// How many of the FIFO's waiters are [`Waiter::Detached`]: while any is, the fanout keeps a driver polling
    /// (see [`holds_detached`](NodeState::holds_detached)).
    detached: usize,
    /// Bytes queued and not yet taken by a writer.
    wbuf: BytesMut,
    /// How many of the FIFO's requests are still in `wbuf`, not handed to a writer: the others are on the wire
    /// (or being written).
    unwritten: usize,
    /// A thread holds the writer role (it took bytes from `wbuf` and writes them without the lock).
    writing: bool,
    /// The last write met a full socket: the transport may still hold bytes of it (TLS keeps the records it
    /// encrypted and could not send) though `wbuf` may be empty. Until a write ends with the socket taking all,
    /// the node counts as holding unwritten bytes and the role is taken again (with nothing more, if need be).
    stalled: bool,
    backoff: Duration,
    /// Why the node is down, reported as the vote of every request made while it stays down.
    last_error: NodeError,
    /// The last sign of life while requests were outstanding: bytes read, or the first request on an idle
    /// connection. A node with requests and no sign of life for `hung_timeout` is hung.
    last_progress: Instant,
    /// When the node last refused a set-up step as loading its data set (`-LOADING`): alive, and serving once the
    /// load ends. Detached releases wait for it (see "Bounded" in [`detached`](super::detached)).
    loading_at: Option<Instant>,
    /// The last bytes read came after the connection had had everything written and no sign of life for at least
    /// a backoff ([`awaits_unread`](Self::awaits_unread)), and nothing was queued since: replies that waited
    /// unread (nobody polled), read in the same turn as the peer's close behind them, do not make that close
    /// look like a failure right after a sign of life (see [`fail`](Self::fail)).
    read_after_quiet: bool,
    /// Replies to the caller-supplied set-up commands on the current connection, each with the instant it was
    /// decoded: later than the moment the server produced it, which is what a reading like `INFO`'s uptime
    /// needs to be a safe bound.
    pub(crate) setup_replies: Vec<(Value, Instant)>,
    /// How many connections to this node completed their set-up (0: never reached). Shared with the fanout, so
    /// that callers can read it without taking the fanout's lock.
    pub(crate) sessions: Arc<AtomicU64>,
    pub(crate) stats: Arc<NodeStats>,
}

impl NodeState {
    pub(crate) fn new(node: usize, opts: &Options, now: Instant) -> NodeState {
        NodeState {
            node,
            link: Link::Down { retry_at: now },
            generation: 0,
            fifo: VecDeque::new(),
            detached: 0,
            wbuf: BytesMut::new(),
            unwritten: 0,
            writing: false,
            stalled: false,
            backoff: opts.backoff_min,
            last_error: NodeError::Refused,
            last_progress: now,
            loading_at: None,
            read_after_quiet: false,
            setup_replies: Vec::new(),
            sessions: Arc::new(AtomicU64::new(0)),
            stats: Arc::default(),
        }
    }

    /// Whether set-up replies are still awaited (set-up steps are always at the front of the FIFO).
    fn setting_up(&self) -> bool {
        matches!(self.fifo.front(), Some((Waiter::Setup(_), _)))
    }

    /// The last sign of life while requests were outstanding (see the field): what a patient round
    /// (`Round::patient_until`) judges a node by past its deadline.
    pub(crate) fn last_progress(&self) -> Instant {
        self.last_progress
    }

    /// `bound` past the last time the node refused a set-up as loading its data set, if it ever did: until when it
    /// keeps its detached releases (see "Bounded" in [`detached`](super::detached)).
    pub(crate) fn loading_until(&self, bound: Duration) -> Option<Instant> {
        self.loading_at.map(|at| later(at, bound))
    }

    /// Why the node's last connection was dropped (or its dial failed): the vote of every request while it is
    /// down.
    pub(crate) fn last_error(&self) -> &NodeError {
        &self.last_error
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.fifo.len()
    }

    /// Whether releases detached from their rounds are queued here with their replies still to come: nobody
    /// waits for them, so the fanout must keep polling until they are read (or the connection is dropped):
    /// a connect or TLS handshake under way, a write cut short by a full socket, a node that stopped answering
    /// (then dropped as hung) all need a turn of the driver (see `machine/detach.rs`).
    pub(crate) fn holds_detached(&self) -> bool {
        self.detached > 0
    }

    /// Whether bytes wait here to be written: queued behind a connect, a set-up or a batch on the wire, or the
    /// rest of a write the socket cut short. Only a writer takes them, and once the rounds that queued them have
    /// ended, only a driver's turn does (see `Machine::needs_driver`).
    pub(crate) fn holds_unwritten(&self) -> bool {
        !self.wbuf.is_empty() || self.stalled
    }

    /// Whether the connection is set up and idle: up, nothing in flight, nothing to write, no writer.
    pub(crate) fn is_idle(&self) -> bool {
        self.is_up() && self.fifo.is_empty() && !self.holds_unwritten() && !self.writing
    }

    /// Whether the connection is up with replies due, everything written, and no sign of life (`last_progress`:
    /// its connect, bytes read, the first request on an idle connection) for at least `idle` before `now`: replies
    /// of rounds that ended may wait unread in the socket (nobody polls), with the server's close of the
    /// connection behind them.
    pub(crate) fn awaits_unread(&self, now: Instant, idle: Duration) -> bool {
        self.is_up()
            && !self.fifo.is_empty()
            && !self.holds_unwritten()
            && !self.writing
            && now.saturating_duration_since(self.last_progress) >= idle
    }

    /// Whether the node has stopped answering: it has had requests outstanding with nothing read from it for at
    /// least `for_at_least`, and four times its usual round trip (the 99th percentile of its replies so far),
    /// when the sockets were last read (`read_at`): a node paused, hung or cut off, not one whose reply waits
    /// unread in a socket nobody polled, nor a far node answering in its own time.
    pub(crate) fn silent(&self, for_at_least: Duration, read_at: Instant) -> bool {
        if self.fifo.is_empty() {
            return false;
        }
        let quiet = read_at.saturating_duration_since(self.last_progress);
        quiet >= for_at_least
            && self
                .stats
                .rtt_quantile(0.99)
                .is_none_or(|usual| quiet >= usual.saturating_mul(4))
    }

    /// Whether the connection has been idle (see [`is_idle`](Self::is_idle)) for at least `idle` at `now`.
    pub(crate) fn idle_for(&self, now: Instant, idle: Duration) -> bool {
        self.is_idle() && now.saturating_duration_since(self.last_progress) >= idle
    }

    pub(crate) fn is_up(&self) -> bool {
        matches!(self.link, Link::Up)
    }

    /// Whether the connection is up and its set-up answered: a request queued now is answered in the session
    /// [`sessions`](NodeState::sessions) counts last (else in the next one).
    pub(crate) fn is_set_up(&self) -> bool {
        self.is_up() && !self.setting_up()
    }

    /// Whether requests are on the wire without replies yet: then a reply is coming, and the driver will flush
    /// what is queued when it reads it.
    pub(crate) fn busy(&self) -> bool {
        self.fifo.len() > self.unwritten
    }

    /// Whether the TCP connect is under way (its completion is checked on the socket's events).
    pub(crate) fn is_connecting(&self) -> bool {
        matches!(self.link, Link::Connecting { .. })
    }

    /// Whether the connect completed and the connection is not dropped: its bytes are read (a TLS handshake's
    /// included).
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.link, Link::Up | Link::Handshake { .. })
    }

    /// Whether the node can take requests now (`Ok(false)`), must be dialled first (`Ok(true)`), or is down and
    /// in its backoff (`Err`: its last error, the vote of every request meanwhile).
    pub(crate) fn needs_dial(&self, now: Instant) -> Result<bool, NodeError> {
        match self.link {
            Link::Down { retry_at } if now < retry_at => Err(self.last_error.clone()),
            Link::Down { .. } => Ok(true),
            _ => Ok(false),
        }
    }

    /// The generation the next connection gets (its poll token names it before it exists).
    pub(crate) fn next_generation(&self) -> u32 {
        self.generation.wrapping_add(1)
    }

    /// A connection was dialled at `now` (its socket is created and registered): the connect timeout starts, and
    /// the set-up is queued ahead of anything queued meanwhile.
    pub(crate) fn dialled(&mut self, addr: &NodeAddr, opts: &Options, now: Instant) {
        self.generation = self.next_generation();
        self.link = Link::Connecting {
            deadline: later(now, opts.connect_timeout),
        };
        self.wbuf.clear();
        self.unwritten = 0;
        self.writing = false;
        self.setup_replies.clear();
        self.read_after_quiet = false;
        self.last_progress = now;
        self.queue_setup(addr, opts, now);
        self.unwritten = self.fifo.len();
    }

    /// Pipelines the set-up ahead of any request: the login, `SELECT`, the protocol switch, then the caller's
    /// commands. With RESP3 and a password the login rides in `HELLO 3 AUTH user password` (Redis 6+); with RESP2
    /// it is `AUTH`, which every Redis knows.
    fn queue_setup(&mut self, addr: &NodeAddr, opts: &Options, now: Instant) {
        match (addr.password(), addr.resp3()) {
            (Some(password), true) => {
                // HELLO's AUTH always names a user: the one of `AUTH password` alone is `default`.
                let user = addr.username().unwrap_or("default");
                encode_command(
                    &[
                        b"HELLO",
                        b"3",
                        b"AUTH",
                        user.as_bytes(),
                        password.as_bytes(),
                    ],
                    &mut self.wbuf,
                );
                self.fifo.push_back((Waiter::Setup(Step::Hello), now));
            }
            (Some(password), false) => {
                match addr.username() {
                    Some(user) => encode_command(
                        &[b"AUTH", user.as_bytes(), password.as_bytes()],
                        &mut self.wbuf,
                    ),
                    None => encode_command(&[b"AUTH", password.as_bytes()], &mut self.wbuf),
                }
                self.fifo.push_back((Waiter::Setup(Step::Auth), now));
            }
            (None, true) => {
                encode_command(&[b"HELLO", b"3"], &mut self.wbuf);
                self.fifo.push_back((Waiter::Setup(Step::Hello), now));
            }
            (None, false) => {}
        }
        if let Some(db) = addr.db() {
            encode_command(
                &[b"SELECT", Decimal::new(i64::from(db)).as_bytes()],
                &mut self.wbuf,
            );
            self.fifo.push_back((Waiter::Setup(Step::Select), now));
        }
        for (i, command) in opts.setup.iter().enumerate() {
            self.wbuf.extend_from_slice(command);
            self.fifo.push_back((Waiter::Setup(Step::Extra(i)), now));
        }
        self.stats.requests(self.fifo.len());
    }

    /// The TCP connect completed, as the driver saw at `now`. A plain connection is up; a TLS one starts its
    /// handshake (its first flight goes out now), which counts against the connect timeout: it must end by the
    /// dial's deadline, or within `connect_timeout` of `now` if that is later.
    ///
    /// Why the second bound: a handshake needs the client, where a TCP connect completes in the kernel alone. A
    /// fanout built and left idle, or a round that ended before a re-dial completed, has nobody polling: the
    /// client sees the connect complete only with the next round, perhaps long past the dial's deadline, and the
    /// node has not even had the first flight yet. It must not be blamed for that time. The cost: a node whose
    /// TCP connect and handshake are both slow has up to twice `connect_timeout` in all.
    pub(crate) fn connected(&mut self, tls: bool, opts: &Options, now: Instant) {
        let Link::Connecting { deadline } = self.link else {
            return;
        };
        self.last_progress = now;
        match tls {
            true => {
                self.link = Link::Handshake {
                    deadline: deadline.max(later(now, opts.connect_timeout)),
                }
            }
            false => self.up(),
        }
    }

    /// The TLS handshake completed at `now`.
    pub(crate) fn secured(&mut self, now: Instant) {
        if let Link::Handshake { .. } = self.link {
            self.last_progress = now;
            self.up();
        }
    }

    fn up(&mut self) {
        self.link = Link::Up;
        if !self.setting_up() {
            self.sessions.fetch_add(1, Ordering::Release);
        }
    }

    /// Drops the connection if its connect (with its TLS handshake) took too long, or if it has had requests and
    /// no sign of life for `hung_timeout`: a node that is slow but answers is never dropped. Called by the driver
    /// right after a turn read the sockets at `now`: a client that was not running (a descheduled process, a
    /// stolen vCPU) must not blame a node for bytes that wait unread in its own socket. Returns whether it
    /// dropped the connection.
    pub(crate) fn check(&mut self, opts: &Options, now: Instant, out: &mut Filing<'_>) -> bool {
        match self.link {
            Link::Connecting { deadline } | Link::Handshake { deadline } if now >= deadline => {
                self.fail(NodeError::ConnectTimeout, opts, now, out);
                true
            }
            Link::Up
                if !self.fifo.is_empty()
                    && now.saturating_duration_since(self.last_progress) >= opts.hung_timeout =>
            {
                self.fail(NodeError::Hung(opts.hung_timeout), opts, now, out);
                true
            }
            _ => false,
        }
    }

    /// Whether the node can take a request expecting `replies` replies now.
    pub(crate) fn room(&self, replies: usize, priority: Priority, opts: &Options) -> Room {
        let limit = match priority {
            Priority::Normal => opts.max_in_flight,
            Priority::Release => opts.max_in_flight.saturating_mul(2),
        };
        match (self.fifo.len().saturating_add(replies) <= limit, priority) {
            (true, _) => Room::Yes,
            (false, Priority::Normal) => Room::No,
            (false, Priority::Release) => Room::Wait,
        }
    }

    /// Queues one request's bytes (which may hold several commands, one waiter each).
    pub(crate) fn queue(&mut self, bytes: &[u8], waiter: Waiter, replies: usize, now: Instant) {
        if self.fifo.is_empty() {
            self.last_progress = now;
        }
        self.read_after_quiet = false;
        self.wbuf.extend_from_slice(bytes);
        self.unwritten += replies;
        self.stats.requests(replies);
        if waiter == Waiter::Detached {
            self.detached += replies;
        }
        for i in 0..replies {
            let w = match waiter {
                // One id per command: the request's replies take the ids from its first on.
                Waiter::Round(r, first) => {
                    Waiter::Round(r, first.wrapping_add(u32::try_from(i).unwrap_or(u32::MAX)))
                }
                w => w,
            };
            self.fifo.push_back((w, now));
        }
    }

    /// Takes the writer role and every queued byte, if the connection is up (a TLS one with its handshake
    /// done), there are bytes (or a stalled write to resume), and nobody holds the role. Returns them with the
    /// generation of the connection they are for.
    pub(crate) fn take_write(&mut self) -> Option<(u32, BytesMut)> {
        if self.writing || !self.holds_unwritten() || !self.is_up() {
            return None;
        }
        self.writing = true;
        self.stalled = false;
        self.unwritten = 0;
        Some((self.generation, self.wbuf.split()))
    }

    /// Ends a write of connection `generation` that took the role with `take_write`: `outcome` is `Ok(true)` if
    /// `rest` is empty (all was handed over), `Ok(false)` if the socket filled up first and `rest` is what was
    /// left. Bytes other threads queued meanwhile wait for the replies to what was just written, and the driver
    /// flushes them when it reads those (see the module docs); but if those replies have all been read already
    /// (the driver could not flush then: the role was taken), nothing is coming to clock them out, and the writer
    /// sends them now: hence the next write, if any.
    pub(crate) fn written(
        &mut self,
        generation: u32,
        rest: BytesMut,
        outcome: Result<bool, NodeError>,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) -> Option<(u32, BytesMut)> {
        if generation != self.generation {
            return None; // the connection was replaced meanwhile, and the role with it
        }
        self.writing = false;
        match outcome {
            Ok(true) => {
                drop(rest); // so that the queue's next append can reuse the allocation
                match self.busy() {
                    true => None,
                    false => self.take_write(),
                }
            }
            Ok(false) => {
                // The socket is full: the rest goes back in front of what was queued since, and the transport
                // may hold more (see `stalled`). The driver resumes the write when the socket drains.
                self.stalled = true;
                let mut rest = rest;
                rest.unsplit(std::mem::take(&mut self.wbuf));
                self.wbuf = rest;
                None
            }
            Err(e) => {
                self.fail(e, opts, now, out);
                None
            }
        }
    }

    /// Bytes were read from the current connection at `now`: a sign of life. Called before the turn files what
    /// they hold; if the connection had been quiet for a backoff before them, they may have waited unread (see
    /// `read_after_quiet`).
    pub(crate) fn progress(&mut self, now: Instant) {
        self.read_after_quiet = self.awaits_unread(now, self.backoff);
        self.last_progress = now;
    }

    /// Files one decoded reply, read at `now`, under the request it answers. `Err`: the connection must be
    /// dropped (a reply nobody asked for, a refused set-up step).
    pub(crate) fn deliver(
        &mut self,
        value: Value,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) -> Result<(), NodeError> {
        let (waiter, queued) = self.fifo.pop_front().ok_or(NodeError::Unexpected)?;
        self.stats.reply(now.saturating_duration_since(queued));
        if let Waiter::Setup(_) = waiter {
            // Not a node that serves yet: its backoff goes on growing while it loads.
            if let Value::Error(msg) | Value::BulkError(msg) = value.without_attributes() {
                if msg.starts_with(b"LOADING") {
                    self.loading_at = Some(now);
                    return Err(NodeError::Loading);
                }
            }
        }
        // A node that answers is alive: the next outage starts its backoff from the beginning.
        self.backoff = opts.backoff_min;
        match waiter {
            Waiter::Round(..) => out.file(self.node, waiter, Ok(value))?,
            // Read, and dropped: nobody waits for it.
            Waiter::Detached => self.detached = self.detached.saturating_sub(1),
            Waiter::Setup(step) => {
                let reply = value.without_attributes();
                if let Value::Error(msg) | Value::BulkError(msg) = reply {
                    let msg = String::from_utf8_lossy(msg).into_owned();
                    // Without (or with a wrong) password, any set-up command is refused with NOAUTH.
                    if msg.starts_with("NOAUTH") || msg.starts_with("WRONGPASS") {
                        return Err(NodeError::Auth(msg));
                    }
                    // An optional command's refusal (`CONFIG` renamed or not allowed) is its reply.
                    let optional =
                        matches!(step, Step::Extra(i) if opts.optional_setup.contains(&i));
                    if optional {
                        self.setup_replies.push((value, now));
                        if !self.setting_up() && self.is_up() {
                            self.sessions.fetch_add(1, Ordering::Release);
                        }
                        return Ok(());
                    }
                    return Err(match step {
                        Step::Auth => NodeError::Auth(msg),
                        Step::Select => NodeError::Setup(format!("SELECT: {msg}")),
                        Step::Hello => NodeError::Setup(format!("HELLO 3: {msg}")),
                        Step::Extra(i) => {
                            let name = opts
                                .setup
                                .get(i)
                                .map_or_else(String::new, |c| command_name(c));
                            NodeError::Setup(format!("{name}: {msg}"))
                        }
                    });
                }
                if let Step::Extra(_) = step {
                    self.setup_replies.push((value, now));
                }
                if !self.setting_up() && self.is_up() {
                    self.sessions.fetch_add(1, Ordering::Release);
                }
            }
        }
        Ok(())
    }

    /// Drops the connection: every request in flight fails with `error`, and the node stays down until its backoff
    /// (doubling up to the cap) has passed. The caller closes the socket.
    ///
    /// # When a node counts as failed, and who retries what
    ///
    /// - **Failed** (down for its backoff, which doubles): a dial that fails (refused, connect timeout), a set-up
    ///   refused (`-LOADING`, a wrong password), a connection hung (`hung_timeout` without a sign of life), a
    ///   protocol error, and a close or reset by the peer that came less than a backoff after the connection's last
    ///   sign of life (`last_progress`: its dial, its connect, bytes read, the first request on an idle
    ///   connection) while it had requests outstanding: a node that fails what it is sent.
    /// - **Not failed** (may be dialled again at once, its backoff unchanged): a close or reset by the peer of a
    ///   connection that was idle (set up, nothing in flight, nothing to write), or that had everything written and
    ///   no sign of life for at least a backoff ([`awaits_unread`](Self::awaits_unread)) before the turn that read
    ///   the close: replies read in that same turn had waited unread too (`read_after_quiet`).
    ///   Servers close idle clients (`timeout`), and a restart closes every connection; when the rounds that sent
    ///   the last requests were decided without this node, nobody polled, and its replies (or its close) wait
    ///   unread until the next round reads them. That close says when it was read, not when it happened: judged
    ///   as the node's failure, it would refuse the next round's requests for the backoff, a release among them
    ///   (a lost release for that node: the key stays for its lease).
    /// - Either way a node is dialled at most once per backoff unless a connection in between was set up and idle
    ///   (a connection's last sign of life is no earlier than its dial): a node that resets every connection it
    ///   accepts is not dialled in a loop.
    /// - **Nobody resends** a request lost with its connection (it may have run): its round counts the node's
    ///   vote as `error`. The next round's request dials again (`Machine::ensure`), as does the driver for
    ///   releases detached from their rounds (`machine/detach.rs`), which go on the first connection whose
    ///   set-up went through.
    pub(crate) fn fail(
        &mut self,
        error: NodeError,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) {
        let closed = matches!(error, NodeError::Closed | NodeError::Io(_));
        let idle = self.is_idle() || self.awaits_unread(now, self.backoff) || self.read_after_quiet;
        self.read_after_quiet = false;
        let retry_at = match closed && idle {
            true => now,
            false => {
                let at = later(now, self.backoff);
                self.backoff = self.backoff.saturating_mul(2).min(opts.backoff_max);
                at
            }
        };
        // Detached releases on a connection whose set-up never went through (it never opened, or the node was
        // loading and refused what came behind the set-up) did not run, or not surely: given up, and counted so.
        // (On one set up they may have been written and run: not counted either way.)
        let unset = !self.is_open() || self.setting_up() || error == NodeError::Loading;
        if unset && self.detached > 0 {
            self.stats.given_up(self.detached);
        }
        self.detached = 0;
        self.link = Link::Down { retry_at };
        self.generation = self.generation.wrapping_add(1);
        self.writing = false;
        self.stalled = false;
        let node = self.node;
        for (waiter, _) in self.fifo.drain(..) {
            // A disorder here is filed as such; the connection is dropped already.
            let _ = out.file(node, waiter, Err(error.clone()));
        }
        self.wbuf = BytesMut::new();
        self.unwritten = 0;
        self.last_error = error;
    }
}

/// The name of an encoded command (`SCRIPT LOAD`, `INFO`), for error messages.
fn command_name(command: &[u8]) -> String {
    let mut buf = bytes::BytesMut::from(command);
    match crate::resp::decode(&mut buf) {
        Ok(Some(Value::Array(args))) => {
            let words: Vec<String> = args
                .iter()
                .take(2)
                .filter_map(|a| match a {
                    Value::BulkString(b) if b.len() <= 16 => {
                        Some(String::from_utf8_lossy(b).to_uppercase())
                    }
                    _ => None,
                })
                .collect();
            words.join(" ")
        }
        _ => "set-up command".to_owned(),
    }
}

#[cfg(test)]
#[path = "state_tests/mod.rs"]
mod tests;
