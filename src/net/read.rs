//! [`ReadSide`]: the part of a node's connection that only the driver touches: the transport's read end and the
//! connection's [`Inbound`] bytes. The driver reads and decodes without the fanout's lock, then files what it
//! decoded under it.

use std::sync::Arc;

use super::inbound::{Inbound, Item};
use super::options::Options;
use super::stats::NodeStats;
use super::transport::Transport;

/// The driver's view of one node's current connection.
#[derive(Debug)]
pub(crate) struct ReadSide {
    /// The connection these buffers belong to (see `NodeState::generation`).
    pub(crate) generation: u32,
    transport: Option<Arc<Transport>>,
    inbound: Inbound,
    /// The last read stopped at its byte budget with more perhaps waiting: read again without waiting for an
    /// event (edge-triggered polls report a socket once per arrival, not while bytes remain).
    pub(crate) backlog: bool,
    stats: Arc<NodeStats>,
}

impl ReadSide {
    pub(crate) fn new(opts: &Options, stats: Arc<NodeStats>) -> ReadSide {
        ReadSide {
            generation: 0,
            transport: None,
            inbound: Inbound::new(opts),
            backlog: false,
            stats,
        }
    }

    /// Whether these buffers follow connection `generation` and can read from it.
    pub(crate) fn reads(&self, generation: u32) -> bool {
        self.generation == generation && self.transport.is_some()
    }

    /// Follows connection `generation` from its start (`transport` is `None` while it is not connected, or once
    /// it failed).
    pub(crate) fn attach(&mut self, generation: u32, transport: Option<Arc<Transport>>) {
        if self.generation != generation {
            self.inbound.reset();
        }
        self.generation = generation;
        self.transport = transport;
        self.backlog = false;
    }

    /// Reads what the transport has (up to its budget) and decodes every complete reply, appending them to `out`
    /// (after [`Item::Secured`] if the TLS handshake completed), followed by a failure if the connection must be
    /// dropped. Returns how many bytes were read.
    ///
    /// `closed` says the peer has closed its side: then the socket is read to its end, so that a close arriving
    /// with the last bytes is seen now (no further event would report it).
    pub(crate) fn read(
        &mut self,
        closed: bool,
        scratch: &mut [u8],
        opts: &Options,
        out: &mut Vec<Item>,
    ) -> usize {
        self.backlog = false;
        let Some(transport) = self.transport.as_deref() else {
            return 0;
        };
        let read = transport.read(self.inbound.buffer(), scratch, closed, &self.stats);
        self.backlog = read.backlog;
        if read.secured {
            out.push(Item::Secured);
        }
        let end = match self.inbound.decode(opts, out) {
            // Replies decoded before a fault are filed all the same; a protocol error comes before a close.
            Err(e) => Some(e),
            Ok(()) => read.end,
        };
        if let Some(e) = end {
            out.push(Item::Failed(e));
            self.transport = None;
            self.backlog = false;
        }
        read.bytes
    }
}
