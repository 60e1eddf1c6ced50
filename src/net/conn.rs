//! [`MioLink`]: the socket side of one node's connection in the threaded fanout (the [`Link`] of its
//! [`Machine`](super::machine::Machine)): the address it dials, the transport of the current connection (plain TCP
//! or TLS, see [`transport`](super::transport)), and the non-blocking connect that starts one; and the
//! [`WriteJob`] a writer runs without the fanout's lock.
//!
//! Nothing here blocks. Under the lock a link only does a non-blocking `connect` and the checks that complete one
//! (creating a TLS session is memory only: its handshake is written by the driver's first read of the
//! connection). The bytes are written by a [`WriteJob`] that the writer runs after releasing the lock, and read by
//! the driver's [`ReadSide`](super::read::ReadSide), also outside the lock. Who writes when (the writer role,
//! batches clocked by replies) is the protocol state's business: see [`state`](super::state).

use std::io;
use std::sync::Arc;

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use super::addr::NodeAddr;
use super::error::NodeError;
use super::machine::{Link, Write, Written};
use super::resolve::Resolved;
use super::transport::Transport;
use super::transport::{Connector, Target};

/// Up to 2^16 - 1 nodes; the rest of a poll token tells a node's successive connections apart.
pub(crate) const NODE_BITS: u32 = 16;
pub(crate) const NODE_MASK: usize = (1 << NODE_BITS) - 1;

/// The poll token of `node`'s connection `generation`.
fn token(node: usize, generation: u32) -> Token {
    Token(((generation as usize) << NODE_BITS) | node)
}

/// One node's socket side.
pub(crate) struct MioLink {
    node: usize,
    addr: NodeAddr,
    resolved: Resolved,
    /// For a `rediss://` node: what its TLS sessions are made with.
    tls: Option<Target>,
    /// The current connection's transport, shared with its writer and the driver's read side.
    transport: Option<Arc<Transport>>,
    registry: Arc<Registry>,
    /// A connection kept for a node not known yet (a cluster member's node added later): never dialled until
    /// [`occupy`](MioLink::occupy) gives it an address.
    vacant: bool,
}

impl MioLink {
    pub(crate) fn new(
        node: usize,
        addr: NodeAddr,
        resolved: Resolved,
        tls: Option<&Connector>,
        registry: &Arc<Registry>,
    ) -> MioLink {
        MioLink {
            node,
            tls: tls.and_then(|c| c.target(&addr)),
            addr,
            resolved,
            transport: None,
            registry: Arc::clone(registry),
            vacant: false,
        }
    }

    /// A link kept for a node not known yet: it dials nothing, and a request for it fails, until
    /// [`occupy`](MioLink::occupy) gives it an address.
    pub(crate) fn vacant(node: usize, placeholder: NodeAddr, registry: &Arc<Registry>) -> MioLink {
        MioLink {
            node,
            tls: None,
            addr: placeholder,
            resolved: Resolved::unresolved(),
            transport: None,
            registry: Arc::clone(registry),
            vacant: true,
        }
    }

    /// Gives a vacant link its node's address (resolved by the caller, outside the fanout's lock, with its TLS
    /// target); it dials at the machine's next `ensure`. `false` if it was not vacant: a connection's address
    /// never changes once it has one.
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

    /// Whether a poll event completed the non-blocking connect (mio's recipe: the connect finished, or failed,
    /// when the socket reports an error or has a peer): `Ok(Some(tls))` connected, `Ok(None)` not yet, `Err`
    /// failed.
    pub(crate) fn connect_outcome(&self) -> Result<Option<bool>, NodeError> {
        let Some(transport) = self.transport.as_ref() else {
            return Ok(None);
        };
        let stream = transport.socket();
        if let Some(e) = stream.take_error().map_err(NodeError::from_io)? {
            return Err(NodeError::from_io(e));
        }
        match stream.peer_addr() {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(None),
            Err(e) => return Err(NodeError::from_io(e)),
        }
        // Nagle would hold back the second of two pipelined writes until the first is acknowledged.
        stream.set_nodelay(true).map_err(NodeError::from_io)?;
        Ok(Some(transport.is_tls()))
    }
}

impl Link for MioLink {
    type Handle = Arc<Transport>;

    fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    fn is_vacant(&self) -> bool {
        self.vacant
    }

    fn dial(&mut self, generation: u32) -> Result<(), NodeError> {
        let addr = self.resolved.current()?;
        let mut stream = TcpStream::connect(addr).map_err(NodeError::from_io)?;
        self.registry
            .register(
                &mut stream,
                token(self.node, generation),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(NodeError::from_io)?;
        let transport = match &self.tls {
            Some(target) => target.link(stream)?,
            None => Transport::Tcp(stream),
        };
        self.transport = Some(Arc::new(transport));
        Ok(())
    }

    /// Other threads may still hold the transport (a writer, the driver's read side): they see it closed.
    fn close(&mut self) {
        if let Some(transport) = self.transport.take() {
            transport.shutdown();
        }
    }

    fn connect_failed(&mut self) {
        self.resolved.refresh(&self.addr);
    }

    /// A non-blocking peek: end of stream or an error (a reset) is closed; no byte waiting is not. Bytes waiting
    /// on plain TCP (a push) are not either (the driver's read side takes those). On TLS they are taken as closed:
    /// a set-up connection with nothing in flight is sent nothing unasked but the server's `close_notify` alert
    /// (redis-server sends one before its FIN when it closes an idle client), which the peek cannot tell from
    /// other records; taken wrongly, an idle connection is dialled again, and nothing in flight is lost.
    fn peer_closed(&self) -> bool {
        let Some(transport) = self.transport.as_ref() else {
            return false;
        };
        match transport.socket().peek(&mut [0u8; 1]) {
            Ok(0) => true,
            Ok(_) => transport.is_tls(),
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }

    fn handle(&self) -> Option<Arc<Transport>> {
        self.transport.clone()
    }
}

/// Bytes a writer sends without the fanout's lock, then hands back with
/// [`Machine::written`](super::machine::Machine::written).
pub(crate) struct WriteJob {
    pub(crate) write: Write<Arc<Transport>>,
    /// `Ok(true)`: all written; `Ok(false)`: the socket filled up first.
    outcome: Result<bool, NodeError>,
    /// Write system calls that took bytes.
    writes: u32,
}

impl WriteJob {
    pub(crate) fn new(write: Write<Arc<Transport>>) -> WriteJob {
        WriteJob {
            write,
            outcome: Ok(false),
            writes: 0,
        }
    }

    /// Writes until done or the socket is full.
    pub(crate) fn run(&mut self) {
        let Write { handle, bytes, .. } = &mut self.write;
        self.outcome = handle.write(bytes, &mut self.writes);
    }

    /// The write and what became of it, for the machine.
    pub(crate) fn finish(self) -> (Write<Arc<Transport>>, Written) {
        (self.write, (self.outcome, self.writes))
    }
}
