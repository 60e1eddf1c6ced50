//! [`Conn`]: one node's connection as the threads of a fanout share it under the fanout's lock: its link, the FIFO
//! of requests in flight, the bytes waiting to be written and who writes them, the set-up, the backoff and the
//! hung detection.
//!
//! Nothing here blocks. Under the lock a connection only does bookkeeping, plus a non-blocking `connect` and the
//! checks that complete one. The bytes are written by a [`WriteJob`] that the writer runs after releasing the lock,
//! and read by the driver's [`ReadSide`](super::read::ReadSide), also outside the lock.
//!
//! Redis answers the requests of one connection in order, so replies are matched to requests strictly by position.
//! A request whose caller stopped waiting keeps its place in the FIFO; its reply is read and dropped.
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
//! the role; the driver resumes it when the socket drains.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use super::addr::NodeAddr;
use super::error::NodeError;
use super::options::Options;
use super::resolve::Resolved;
use super::slots::{Reply, SlotRef, Slots};
use super::stats::NodeStats;
use crate::resp::{Decimal, Value, encode_command};
use crate::time::later;

/// Who waits for the reply at one position of the FIFO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A step of the connection set-up.
    Setup(Step),
    /// A request of a round.
    Round(SlotRef),
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

/// Outcomes to file, and the threads their filing wakes: what a connection reports to the rounds.
pub(crate) struct Filing<'a> {
    pub(crate) slots: &'a mut Slots,
    pub(crate) wake: &'a mut Vec<Thread>,
}

impl Filing<'_> {
    pub(crate) fn file(&mut self, node: usize, waiter: Waiter, reply: Reply) {
        if let Waiter::Round(r) = waiter {
            self.wake.extend(self.slots.file(r, node, reply));
        }
    }
}

enum Link {
    /// Not connected; the next dial is allowed at `retry_at`.
    Down {
        retry_at: Instant,
    },
    Connecting {
        deadline: Instant,
    },
    Up,
}

/// One node's connection.
pub(crate) struct Conn {
    node: usize,
    pub(crate) addr: NodeAddr,
    resolved: Resolved,
    link: Link,
    stream: Option<Arc<TcpStream>>,
    /// Names the current connection: it changes when one is dialled and when one fails, so that poll events,
    /// bytes read and writes of an earlier connection are told apart and ignored.
    pub(crate) generation: u32,
    /// Who waits for each reply, and when the request was queued (for the round-trip statistics).
    fifo: VecDeque<(Waiter, Instant)>,
    /// Bytes queued and not yet taken by a writer.
    wbuf: BytesMut,
    /// How many of the FIFO's requests are still in `wbuf`, not handed to a writer: the others are on the wire
    /// (or being written).
    unwritten: usize,
    /// A thread holds the writer role (it took bytes from `wbuf` and writes them without the lock).
    writing: bool,
    backoff: Duration,
    /// Why the node is down, reported as the vote of every request made while it stays down.
    last_error: NodeError,
    /// The last sign of life while requests were outstanding: bytes read, or the first request on an idle
    /// connection. A node with requests and no sign of life for `hung_timeout` is hung.
    last_progress: Instant,
    /// Replies to the caller-supplied set-up commands on the current connection, each with the instant it was
    /// decoded: later than the moment the server produced it, which is what a reading like `INFO`'s uptime
    /// needs to be a safe bound.
    pub(crate) setup_replies: Vec<(Value, Instant)>,
    /// How many connections to this node completed their set-up (0: never reached). Shared with the fanout, so
    /// that callers can read it without taking the fanout's lock.
    pub(crate) sessions: Arc<AtomicU64>,
    pub(crate) stats: Arc<NodeStats>,
}

impl Conn {
    pub(crate) fn new(
        node: usize,
        addr: NodeAddr,
        resolved: Resolved,
        opts: &Options,
        now: Instant,
    ) -> Conn {
        Conn {
            node,
            addr,
            resolved,
            link: Link::Down { retry_at: now },
            stream: None,
            generation: 0,
            fifo: VecDeque::new(),
            wbuf: BytesMut::new(),
            unwritten: 0,
            writing: false,
            backoff: opts.backoff_min,
            last_error: NodeError::Refused,
            last_progress: now,
            setup_replies: Vec::new(),
            sessions: Arc::new(AtomicU64::new(0)),
            stats: Arc::default(),
        }
    }

    /// Whether set-up replies are still awaited (set-up steps are always at the front of the FIFO).
    fn setting_up(&self) -> bool {
        matches!(self.fifo.front(), Some((Waiter::Setup(_), _)))
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.fifo.len()
    }

    pub(crate) fn is_up(&self) -> bool {
        matches!(self.link, Link::Up)
    }

    /// Whether requests are on the wire without replies yet: then a reply is coming, and the driver will flush
    /// what is queued when it reads it.
    pub(crate) fn busy(&self) -> bool {
        self.fifo.len() > self.unwritten
    }

    pub(crate) fn is_connecting(&self) -> bool {
        matches!(self.link, Link::Connecting { .. })
    }

    /// The current connection's socket, for the driver's reads.
    pub(crate) fn stream(&self) -> Option<Arc<TcpStream>> {
        self.stream.clone()
    }

    /// Makes the connection usable for a request: dials if it is down and its backoff has passed. `Err` is the
    /// vote of a node that cannot take requests now. (Whether a connection is hung or its connect too slow is
    /// decided by the driver only, right after it read the sockets: see [`Conn::check`].)
    pub(crate) fn ensure(
        &mut self,
        registry: &Registry,
        token: impl Fn(u32) -> Token,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) -> Result<(), NodeError> {
        match self.link {
            Link::Up | Link::Connecting { .. } => Ok(()),
            Link::Down { retry_at } if now < retry_at => Err(self.last_error.clone()),
            Link::Down { .. } => match self.dial(registry, &token, opts, now) {
                Ok(()) => Ok(()),
                Err(e) => {
                    self.fail(e.clone(), opts, now, out);
                    self.resolved.refresh(&self.addr);
                    Err(e)
                }
            },
        }
    }

    /// Drops the connection if its connect took too long, or if it has had requests and no sign of life for
    /// `hung_timeout`: a node that is slow but answers is never dropped. Called by the driver right after a turn
    /// read the sockets at `now`: a client that was not running (a descheduled process, a stolen vCPU) must not
    /// blame a node for bytes that wait unread in its own socket.
    pub(crate) fn check(&mut self, opts: &Options, now: Instant, out: &mut Filing<'_>) {
        match self.link {
            Link::Connecting { deadline } if now >= deadline => {
                self.fail(NodeError::ConnectTimeout, opts, now, out);
                self.resolved.refresh(&self.addr);
            }
            Link::Up
                if !self.fifo.is_empty()
                    && now.saturating_duration_since(self.last_progress) >= opts.hung_timeout =>
            {
                self.fail(NodeError::Hung(opts.hung_timeout), opts, now, out);
            }
            _ => {}
        }
    }

    fn dial(
        &mut self,
        registry: &Registry,
        token: &impl Fn(u32) -> Token,
        opts: &Options,
        now: Instant,
    ) -> Result<(), NodeError> {
        let addr = self.resolved.current()?;
        let mut stream = TcpStream::connect(addr).map_err(NodeError::from_io)?;
        self.generation = self.generation.wrapping_add(1);
        registry
            .register(
                &mut stream,
                token(self.generation),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(NodeError::from_io)?;
        self.stream = Some(Arc::new(stream));
        self.stats.connect();
        self.link = Link::Connecting {
            deadline: later(now, opts.connect_timeout),
        };
        self.wbuf.clear();
        self.unwritten = 0;
        self.writing = false;
        self.setup_replies.clear();
        self.last_progress = now;
        self.queue_setup(opts, now);
        // The set-up goes out when the connect completes, ahead of anything queued meanwhile.
        self.unwritten = self.fifo.len();
        Ok(())
    }

    /// Pipelines the set-up ahead of any request: `AUTH`, `SELECT`, `HELLO 3`, then the caller's commands.
    fn queue_setup(&mut self, opts: &Options, now: Instant) {
        if let Some(password) = self.addr.password() {
            match self.addr.username() {
                Some(user) => encode_command(
                    &[b"AUTH", user.as_bytes(), password.as_bytes()],
                    &mut self.wbuf,
                ),
                None => encode_command(&[b"AUTH", password.as_bytes()], &mut self.wbuf),
            }
            self.fifo.push_back((Waiter::Setup(Step::Auth), now));
        }
        if let Some(db) = self.addr.db() {
            encode_command(
                &[b"SELECT", Decimal::new(i64::from(db)).as_bytes()],
                &mut self.wbuf,
            );
            self.fifo.push_back((Waiter::Setup(Step::Select), now));
        }
        if self.addr.resp3() {
            encode_command(&[b"HELLO", b"3"], &mut self.wbuf);
            self.fifo.push_back((Waiter::Setup(Step::Hello), now));
        }
        for (i, command) in opts.setup.iter().enumerate() {
            self.wbuf.extend_from_slice(command);
            self.fifo.push_back((Waiter::Setup(Step::Extra(i)), now));
        }
        self.stats.requests(self.fifo.len());
    }

    /// Completes a non-blocking connect, on a poll event of the current connection (mio's recipe: the connect
    /// finished, or failed, when the socket reports an error or has a peer). A failure drops the connection.
    pub(crate) fn on_connect_event(&mut self, opts: &Options, now: Instant, out: &mut Filing<'_>) {
        if !self.is_connecting() {
            return;
        }
        let Some(stream) = self.stream.clone() else {
            return;
        };
        let result = (|| {
            if let Some(e) = stream.take_error().map_err(NodeError::from_io)? {
                return Err(NodeError::from_io(e));
            }
            match stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(false),
                Err(e) => return Err(NodeError::from_io(e)),
            }
            // Nagle would hold back the second of two pipelined writes until the first is acknowledged.
            stream.set_nodelay(true).map_err(NodeError::from_io)?;
            Ok(true)
        })();
        match result {
            Ok(false) => {}
            Ok(true) => {
                self.link = Link::Up;
                self.last_progress = now;
                if !self.setting_up() {
                    self.sessions.fetch_add(1, Ordering::Release);
                }
            }
            Err(e) => {
                self.fail(e, opts, now, out);
                self.resolved.refresh(&self.addr);
            }
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
        self.wbuf.extend_from_slice(bytes);
        self.unwritten += replies;
        self.stats.requests(replies);
        for _ in 0..replies {
            self.fifo.push_back((waiter, now));
        }
    }

    /// Takes the writer role and every queued byte, if the connection is up, has bytes, and has no writer.
    pub(crate) fn take_write(&mut self) -> Option<WriteJob> {
        if self.writing || self.wbuf.is_empty() || !self.is_up() {
            return None;
        }
        let stream = Arc::clone(self.stream.as_ref()?);
        self.writing = true;
        self.unwritten = 0;
        Some(WriteJob {
            node: self.node,
            generation: self.generation,
            stream,
            bytes: self.wbuf.split(),
            outcome: Ok(false),
            writes: 0,
        })
    }

    /// Ends a write job (run without the lock). Bytes other threads queued meanwhile wait for the replies to what
    /// was just written, and the driver flushes them when it reads those (see the module docs); but if those
    /// replies have all been read already (the driver could not flush then: this job held the writer role),
    /// nothing is coming to clock them out, and the writer sends them now.
    pub(crate) fn written(
        &mut self,
        job: WriteJob,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) -> Option<WriteJob> {
        (0..job.writes).for_each(|_| self.stats.write());
        if job.generation != self.generation {
            return None; // the connection was replaced meanwhile, and the role with it
        }
        self.writing = false;
        match job.outcome {
            Ok(true) => {
                drop(job.bytes); // so that the queue's next append can reuse the allocation
                match self.busy() {
                    true => None,
                    false => self.take_write(),
                }
            }
            Ok(false) => {
                // The socket is full: the rest goes back in front of what was queued since. The driver resumes
                // the write when the socket drains.
                let mut rest = job.bytes;
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

    /// Bytes were read from the current connection at `now`: a sign of life.
    pub(crate) fn progress(&mut self, now: Instant) {
        self.last_progress = now;
    }

    /// Files one decoded reply, read at `now`, under the request it answers.
    pub(crate) fn deliver(
        &mut self,
        value: Value,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) -> Result<(), NodeError> {
        let (waiter, queued) = self.fifo.pop_front().ok_or(NodeError::Unexpected)?;
        self.stats.reply(now.saturating_duration_since(queued));
        // A node that answers is alive: the next outage starts its backoff from the beginning.
        self.backoff = opts.backoff_min;
        match waiter {
            Waiter::Round(_) => out.file(self.node, waiter, Ok(value)),
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
                        self.setup_replies.push((value, Instant::now()));
                        if !self.setting_up() {
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
                    self.setup_replies.push((value, Instant::now()));
                }
                if !self.setting_up() {
                    self.sessions.fetch_add(1, Ordering::Release);
                }
            }
        }
        Ok(())
    }

    /// Drops the connection: every request in flight fails with `error`, and the node stays down until its backoff
    /// (doubling up to the cap) has passed.
    pub(crate) fn fail(
        &mut self,
        error: NodeError,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) {
        let retry_at = later(now, self.backoff);
        self.backoff = (self.backoff * 2).min(opts.backoff_max);
        self.link = Link::Down { retry_at };
        // Other threads may still hold the socket (a writer, the driver's read side): shut it down so that they
        // see it closed, and the peer sees the close now rather than when the last of them lets go.
        if let Some(stream) = self.stream.take() {
            let _ = stream.shutdown(Shutdown::Both);
            self.stats.dropped();
        }
        self.generation = self.generation.wrapping_add(1);
        self.writing = false;
        let node = self.node;
        for (waiter, _) in self.fifo.drain(..) {
            out.file(node, waiter, Err(error.clone()));
        }
        self.wbuf = BytesMut::new();
        self.unwritten = 0;
        self.last_error = error;
    }
}

/// Bytes a writer sends without the fanout's lock, then hands back with [`Conn::written`].
pub(crate) struct WriteJob {
    pub(crate) node: usize,
    generation: u32,
    stream: Arc<TcpStream>,
    bytes: BytesMut,
    /// `Ok(true)`: all written; `Ok(false)`: the socket filled up first.
    outcome: Result<bool, NodeError>,
    /// Write system calls that took bytes.
    writes: u32,
}

impl WriteJob {
    /// Writes until done or the socket is full.
    pub(crate) fn run(&mut self) {
        self.outcome = loop {
            if self.bytes.is_empty() {
                break Ok(true);
            }
            match (&*self.stream).write(&self.bytes) {
                Ok(0) => break Err(NodeError::Closed),
                Ok(n) => {
                    self.bytes.advance(n);
                    self.writes += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(NodeError::from_io(e)),
            }
        };
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
