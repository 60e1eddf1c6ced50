//! [`Conn`]: one non-blocking connection to one node, with its buffers and its FIFO of requests in flight.
//!
//! Redis answers the requests of one connection in order, so replies are matched to requests strictly by position.
//! A request whose caller stopped waiting keeps its place in the FIFO; its reply is read and dropped.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use super::addr::NodeAddr;
use super::error::NodeError;
use super::options::Options;
use crate::resp::{Decimal, Decoder, Value, encode_command};
use crate::time::later;

/// Who waits for the reply at one position of the FIFO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A step of the connection set-up.
    Setup(Step),
    /// A request of a round: the round's slot and its generation (a reused slot has another).
    Round { slot: usize, generation: u64 },
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

enum State {
    /// Not connected; the next dial is allowed at `retry_at`.
    Down {
        retry_at: Instant,
    },
    Connecting {
        stream: TcpStream,
        deadline: Instant,
    },
    Up {
        stream: TcpStream,
    },
}

/// One node's connection.
pub(crate) struct Conn {
    pub(crate) addr: NodeAddr,
    state: State,
    /// Distinguishes this connection's poll events from those of the node's earlier connections.
    pub(crate) generation: u32,
    rbuf: BytesMut,
    wbuf: BytesMut,
    decoder: Decoder,
    fifo: VecDeque<Waiter>,
    backoff: Duration,
    /// Why the node is down, reported as the vote of every request made while it stays down.
    last_error: NodeError,
    /// The last read stopped at its byte budget with more perhaps waiting: read again without waiting for an
    /// event (edge-triggered polls report a socket once per arrival, not while bytes remain).
    pub(crate) backlog: bool,
    /// Replies to the caller-supplied set-up commands on the current connection, each with the instant it was
    /// decoded: later than the moment the server produced it, which is what a reading like `INFO`'s uptime
    /// needs to be a safe bound.
    pub(crate) setup_replies: Vec<(Value, Instant)>,
    /// How many connections to this node completed their set-up (0: never reached). Shared with the fanout, so
    /// that callers can read it without taking the fanout's lock.
    pub(crate) sessions: Arc<AtomicU64>,
}

/// How much a read asks the socket for at once: the size of the scratch buffer callers pass in.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// How much one event may read from one connection before the driver moves on: a node that floods us cannot hold
/// the poll (and every other node's replies) past the round's deadline.
const READ_BUDGET: usize = 16 * READ_CHUNK;

impl Conn {
    pub(crate) fn new(addr: NodeAddr, opts: &Options, now: Instant) -> Conn {
        Conn {
            addr,
            state: State::Down { retry_at: now },
            generation: 0,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            decoder: Decoder::with_limits(opts.limits),
            fifo: VecDeque::new(),
            backoff: opts.backoff_min,
            last_error: NodeError::Refused,
            backlog: false,
            setup_replies: Vec::new(),
            sessions: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Whether set-up replies are still awaited (set-up steps are always at the front of the FIFO).
    fn setting_up(&self) -> bool {
        matches!(self.fifo.front(), Some(Waiter::Setup(_)))
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.fifo.len()
    }

    pub(crate) fn is_up(&self) -> bool {
        matches!(self.state, State::Up { .. })
    }

    /// Makes the connection usable for a request: dials if it is down and its backoff has passed. `Err` is the
    /// vote of a node that cannot take requests now.
    pub(crate) fn ensure(
        &mut self,
        registry: &Registry,
        token: impl Fn(u32) -> Token,
        opts: &Options,
        now: Instant,
    ) -> Result<(), NodeError> {
        match self.state {
            State::Up { .. } => Ok(()),
            State::Connecting { deadline, .. } if now < deadline => Ok(()),
            State::Connecting { .. } => {
                self.fail(NodeError::ConnectTimeout, opts, now, &mut |_, _| {});
                Err(NodeError::ConnectTimeout)
            }
            State::Down { retry_at } if now < retry_at => Err(self.last_error.clone()),
            State::Down { .. } => match self.dial(registry, &token, opts, now) {
                Ok(()) => Ok(()),
                Err(e) => {
                    self.fail(e.clone(), opts, now, &mut |_, _| {});
                    Err(e)
                }
            },
        }
    }

    fn dial(
        &mut self,
        registry: &Registry,
        token: &impl Fn(u32) -> Token,
        opts: &Options,
        now: Instant,
    ) -> Result<(), NodeError> {
        let addrs = self
            .addr
            .resolve()
            .map_err(|e| NodeError::Resolve(e.to_string()))?;
        let addr: SocketAddr = *addrs
            .first()
            .ok_or_else(|| NodeError::Resolve("no address".into()))?;
        let mut stream = TcpStream::connect(addr).map_err(|e| NodeError::from_io(&e))?;
        self.generation = self.generation.wrapping_add(1);
        registry
            .register(
                &mut stream,
                token(self.generation),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| NodeError::from_io(&e))?;
        self.state = State::Connecting {
            stream,
            deadline: later(now, opts.connect_timeout),
        };
        self.rbuf.clear();
        self.wbuf.clear();
        self.decoder.reset();
        self.setup_replies.clear();
        self.queue_setup(opts);
        Ok(())
    }

    /// Pipelines the set-up ahead of any request: `AUTH`, `SELECT`, `HELLO 3`, then the caller's commands.
    fn queue_setup(&mut self, opts: &Options) {
        if let Some(password) = self.addr.password() {
            match self.addr.username() {
                Some(user) => encode_command(
                    &[b"AUTH", user.as_bytes(), password.as_bytes()],
                    &mut self.wbuf,
                ),
                None => encode_command(&[b"AUTH", password.as_bytes()], &mut self.wbuf),
            }
            self.fifo.push_back(Waiter::Setup(Step::Auth));
        }
        if let Some(db) = self.addr.db() {
            encode_command(
                &[b"SELECT", Decimal::new(i64::from(db)).as_bytes()],
                &mut self.wbuf,
            );
            self.fifo.push_back(Waiter::Setup(Step::Select));
        }
        if self.addr.resp3() {
            encode_command(&[b"HELLO", b"3"], &mut self.wbuf);
            self.fifo.push_back(Waiter::Setup(Step::Hello));
        }
        for (i, command) in opts.setup.iter().enumerate() {
            self.wbuf.extend_from_slice(command);
            self.fifo.push_back(Waiter::Setup(Step::Extra(i)));
        }
    }

    /// Queues one request's bytes (which may hold several commands, one waiter each).
    pub(crate) fn queue(&mut self, bytes: &[u8], waiter: Waiter, replies: usize) {
        self.wbuf.extend_from_slice(bytes);
        for _ in 0..replies {
            self.fifo.push_back(waiter);
        }
    }

    /// Writes what is buffered, until done or the socket is full (then a writable event resumes it).
    pub(crate) fn flush(&mut self) -> Result<(), NodeError> {
        let State::Up { stream } = &mut self.state else {
            return Ok(());
        };
        while !self.wbuf.is_empty() {
            match stream.write(&self.wbuf) {
                Ok(0) => return Err(NodeError::Closed),
                Ok(n) => self.wbuf.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(NodeError::from_io(&e)),
            }
        }
        Ok(())
    }

    /// Handles a poll event for this connection: completes a connect, writes pending bytes, reads and decodes
    /// replies, handing each `(waiter, reply)` to `sink`. A failure drops the connection (see [`Conn::fail`]).
    pub(crate) fn on_event(
        &mut self,
        readable: bool,
        closed: bool,
        scratch: &mut [u8],
        opts: &Options,
        now: Instant,
        sink: &mut dyn FnMut(Waiter, Result<Value, NodeError>),
    ) {
        if let Err(e) = self.try_event(readable, closed, scratch, opts, sink) {
            self.fail(e, opts, now, sink);
        }
    }

    fn try_event(
        &mut self,
        readable: bool,
        closed: bool,
        scratch: &mut [u8],
        opts: &Options,
        sink: &mut dyn FnMut(Waiter, Result<Value, NodeError>),
    ) -> Result<(), NodeError> {
        if let State::Connecting { stream, .. } = &mut self.state {
            // mio's recipe: the connect finished (or failed) when the socket reports an error or has a peer.
            if let Some(e) = stream.take_error().map_err(|e| NodeError::from_io(&e))? {
                return Err(NodeError::from_io(&e));
            }
            match stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(()),
                Err(e) => return Err(NodeError::from_io(&e)),
            }
            // Nagle would hold back the second of two pipelined writes until the first is acknowledged.
            stream
                .set_nodelay(true)
                .map_err(|e| NodeError::from_io(&e))?;
            let now = Instant::now();
            self.state = match std::mem::replace(&mut self.state, State::Down { retry_at: now }) {
                State::Connecting { stream, .. } => State::Up { stream },
                other => other,
            };
            if !self.setting_up() {
                self.sessions.fetch_add(1, Ordering::Release);
            }
        }
        self.flush()?;
        if readable {
            self.read(closed, scratch, opts, sink)?;
        }
        Ok(())
    }

    /// Reads into `scratch` (zeroed once, reused by every connection) and appends what came to the read buffer:
    /// cheaper than growing and zeroing the read buffer for every read when replies are a few bytes.
    ///
    /// `closed` says the peer has closed its side: then the socket is read to its end, so that a close arriving
    /// with the last bytes is seen now (no further event would report it).
    fn read(
        &mut self,
        closed: bool,
        scratch: &mut [u8],
        opts: &Options,
        sink: &mut dyn FnMut(Waiter, Result<Value, NodeError>),
    ) -> Result<(), NodeError> {
        self.backlog = false;
        let mut budget = READ_BUDGET;
        loop {
            let State::Up { stream } = &mut self.state else {
                return Ok(());
            };
            let n = match stream.read(scratch) {
                Ok(0) => return Err(NodeError::Closed),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(NodeError::from_io(&e)),
            };
            self.rbuf.extend_from_slice(&scratch[..n]);
            while let Some(value) = self
                .decoder
                .decode(&mut self.rbuf)
                .map_err(NodeError::Protocol)?
            {
                self.deliver(value, opts, sink)?;
            }
            // What is left is one unfinished reply: each header is within the decoder's limits, but the whole is
            // bounded here, or a peer could stream a valid reply forever.
            if self.rbuf.len() > opts.max_reply_len {
                return Err(NodeError::ReplyTooLarge(opts.max_reply_len));
            }
            // A short read drained the socket: on Linux, bytes arriving later raise a new edge-triggered event, so
            // the extra read that would only return WouldBlock is skipped.
            if n < scratch.len() && !closed {
                break;
            }
            budget = budget.saturating_sub(n);
            if budget == 0 {
                self.backlog = true;
                break;
            }
        }
        Ok(())
    }

    fn deliver(
        &mut self,
        value: Value,
        opts: &Options,
        sink: &mut dyn FnMut(Waiter, Result<Value, NodeError>),
    ) -> Result<(), NodeError> {
        // Out-of-band RESP3 pushes (pub/sub messages, invalidations) answer no request.
        if matches!(value, Value::Push(_)) {
            return Ok(());
        }
        let waiter = self.fifo.pop_front().ok_or(NodeError::Unexpected)?;
        // A node that answers is alive: the next outage starts its backoff from the beginning.
        self.backoff = opts.backoff_min;
        match waiter {
            Waiter::Round { .. } => sink(waiter, Ok(value)),
            Waiter::Setup(step) => {
                let reply = value.without_attributes();
                if let Value::Error(msg) | Value::BulkError(msg) = reply {
                    let msg = String::from_utf8_lossy(msg).into_owned();
                    // Without (or with a wrong) password, any set-up command is refused with NOAUTH.
                    if msg.starts_with("NOAUTH") || msg.starts_with("WRONGPASS") {
                        return Err(NodeError::Auth(msg));
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
        sink: &mut dyn FnMut(Waiter, Result<Value, NodeError>),
    ) {
        let retry_at = later(now, self.backoff);
        self.backoff = (self.backoff * 2).min(opts.backoff_max);
        // Dropping the stream closes the socket, which also removes it from the poll.
        self.state = State::Down { retry_at };
        for waiter in self.fifo.drain(..) {
            if let Waiter::Round { .. } = waiter {
                sink(waiter, Err(error.clone()));
            }
        }
        self.rbuf = BytesMut::new();
        self.wbuf = BytesMut::new();
        self.decoder.reset();
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
