//! [`Conn`]: one node's connection as the threads of a fanout share it under the fanout's lock: its protocol state
//! ([`NodeState`], pure) and its socket side: the address it dials, the transport of the current connection
//! (plain TCP or TLS, see [`transport`](super::transport)), and the non-blocking connect that starts one.
//!
//! Nothing here blocks. Under the lock a connection only does bookkeeping, plus a non-blocking `connect` and the
//! checks that complete one (creating a TLS session is memory only: its handshake is written by the driver's
//! first read of the connection). The bytes are written by a [`WriteJob`] that the writer runs after releasing
//! the lock, and read by the driver's [`ReadSide`](super::read::ReadSide), also outside the lock. Who writes
//! when (the writer role, batches clocked by replies) is the protocol state's business: see
//! [`state`](super::state).

use std::io;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use super::addr::NodeAddr;
use super::error::NodeError;
use super::options::Options;
use super::resolve::Resolved;
use super::state::{Filing, NodeState};
use super::transport::Transport;
use super::transport::{Connector, Target};
use crate::resp::Value;

/// One node's connection.
pub(crate) struct Conn {
    node: usize,
    pub(crate) addr: NodeAddr,
    resolved: Resolved,
    /// For a `rediss://` node: what its TLS sessions are made with.
    tls: Option<Target>,
    /// The current connection's transport, shared with its writer and the driver's read side.
    transport: Option<Arc<Transport>>,
    pub(crate) state: NodeState,
    /// A connection kept for a node not known yet (a cluster member's node added later): never dialled until
    /// [`occupy`](Conn::occupy) gives it an address.
    vacant: bool,
}

impl Conn {
    pub(crate) fn new(
        node: usize,
        addr: NodeAddr,
        resolved: Resolved,
        tls: Option<&Connector>,
        opts: &Options,
        now: Instant,
    ) -> Conn {
        Conn {
            node,
            tls: tls.and_then(|c| c.target(&addr)),
            addr,
            resolved,
            transport: None,
            state: NodeState::new(node, opts, now),
            vacant: false,
        }
    }

    /// A connection kept for a node not known yet: it dials nothing, and a request for it fails, until
    /// [`occupy`](Conn::occupy) gives it an address.
    pub(crate) fn vacant(node: usize, placeholder: NodeAddr, opts: &Options, now: Instant) -> Conn {
        Conn {
            node,
            tls: None,
            addr: placeholder,
            resolved: Resolved::unresolved(),
            transport: None,
            state: NodeState::new(node, opts, now),
            vacant: true,
        }
    }

    /// Whether the connection waits for an address ([`vacant`](Conn::vacant)).
    pub(crate) fn is_vacant(&self) -> bool {
        self.vacant
    }

    /// Gives a vacant connection its node's address (resolved by the caller, outside the fanout's lock, with its
    /// TLS target); it dials at its next [`ensure`](Conn::ensure). `false` if it was not vacant: a connection's
    /// address never changes once it has one.
    pub(crate) fn occupy(
        &mut self,
        addr: NodeAddr,
        resolved: Resolved,
        tls: Option<Target>,
    ) -> bool {
        if !self.vacant {
            return false;
        }
        self.addr = addr;
        self.resolved = resolved;
        self.tls = tls;
        self.vacant = false;
        true
    }

    /// The current connection's transport, for the driver's reads.
    pub(crate) fn transport(&self) -> Option<Arc<Transport>> {
        self.transport.clone()
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
        if self.vacant {
            return Err(NodeError::Cluster(
                "a connection kept for a node not known yet".into(),
            ));
        }
        if !self.state.needs_dial(now)? {
            return Ok(());
        }
        match self.dial(registry, &token, opts, now) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.fail(e.clone(), opts, now, out);
                self.resolved.refresh(&self.addr);
                Err(e)
            }
        }
    }

    /// See [`NodeState::check`]; closes the socket of a connection it drops.
    pub(crate) fn check(&mut self, opts: &Options, now: Instant, out: &mut Filing<'_>) {
        let connecting = !self.state.is_up();
        if self.state.check(opts, now, out) {
            self.close();
            if connecting {
                self.resolved.refresh(&self.addr);
            }
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
        registry
            .register(
                &mut stream,
                token(self.state.next_generation()),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(NodeError::from_io)?;
        let transport = match &self.tls {
            Some(target) => target.link(stream)?,
            None => Transport::Tcp(stream),
        };
        self.transport = Some(Arc::new(transport));
        self.state.stats.connect();
        self.state.dialled(&self.addr, opts, now);
        Ok(())
    }

    /// Completes a non-blocking connect, on a poll event of the current connection (mio's recipe: the connect
    /// finished, or failed, when the socket reports an error or has a peer). A failure drops the connection.
    pub(crate) fn on_connect_event(&mut self, opts: &Options, now: Instant, out: &mut Filing<'_>) {
        if !self.state.is_connecting() {
            return;
        }
        let Some(transport) = self.transport.clone() else {
            return;
        };
        let stream = transport.socket();
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
            Ok(true) => self.state.connected(transport.is_tls(), opts, now),
            Err(e) => {
                self.fail(e, opts, now, out);
                self.resolved.refresh(&self.addr);
            }
        }
    }

    /// Takes the writer role and every queued byte (see [`NodeState::take_write`]).
    pub(crate) fn take_write(&mut self) -> Option<WriteJob> {
        let transport = Arc::clone(self.transport.as_ref()?);
        let (generation, bytes) = self.state.take_write()?;
        Some(WriteJob {
            node: self.node,
            generation,
            transport,
            bytes,
            outcome: Ok(false),
            writes: 0,
        })
    }

    /// Ends a write job (run without the lock), and returns the next one if the bytes queued meanwhile must go
    /// now (see [`NodeState::written`]).
    pub(crate) fn written(
        &mut self,
        job: WriteJob,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) -> Option<WriteJob> {
        (0..job.writes).for_each(|_| self.state.stats.write());
        let failed = job.outcome.is_err() && job.generation == self.state.generation;
        let next = self
            .state
            .written(job.generation, job.bytes, job.outcome, opts, now, out);
        if failed {
            self.close();
        }
        let (generation, bytes) = next?;
        Some(WriteJob {
            node: self.node,
            generation,
            transport: job.transport,
            bytes,
            outcome: Ok(false),
            writes: 0,
        })
    }

    /// Files one decoded reply, read at `now`; drops the connection if it must (see [`NodeState::deliver`]).
    pub(crate) fn deliver(
        &mut self,
        value: Value,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) {
        if let Err(e) = self.state.deliver(value, opts, now, out) {
            self.fail(e, opts, now, out);
        }
    }

    /// Drops the connection: every request in flight fails with `error`, the socket is closed, and the node stays
    /// down until its backoff has passed.
    pub(crate) fn fail(
        &mut self,
        error: NodeError,
        opts: &Options,
        now: Instant,
        out: &mut Filing<'_>,
    ) {
        self.state.fail(error, opts, now, out);
        self.close();
    }

    /// Closes the current socket, if any. Other threads may still hold the transport (a writer, the driver's read
    /// side): they see it closed.
    fn close(&mut self) {
        if let Some(transport) = self.transport.take() {
            transport.shutdown();
            self.state.stats.dropped();
        }
    }
}

/// Bytes a writer sends without the fanout's lock, then hands back with [`Conn::written`].
pub(crate) struct WriteJob {
    pub(crate) node: usize,
    generation: u32,
    transport: Arc<Transport>,
    bytes: BytesMut,
    /// `Ok(true)`: all written; `Ok(false)`: the socket filled up first.
    outcome: Result<bool, NodeError>,
    /// Write system calls that took bytes.
    writes: u32,
}

impl WriteJob {
    /// Writes until done or the socket is full.
    pub(crate) fn run(&mut self) {
        self.outcome = self.transport.write(&mut self.bytes, &mut self.writes);
    }
}
