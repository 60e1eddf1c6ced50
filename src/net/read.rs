//! [`ReadSide`]: the part of a node's connection that only the driver touches: the socket's read end, the read
//! buffer and the decoder. The driver reads and decodes without the fanout's lock, then files what it decoded
//! under it.

use std::io::{self, Read};
use std::sync::Arc;

use bytes::BytesMut;
use mio::net::TcpStream;

use super::error::NodeError;
use super::options::Options;
use super::stats::NodeStats;
use crate::resp::{Decoder, Value};

/// How much a read asks the socket for at once: the size of the scratch buffer callers pass in.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// How much one turn may read from one connection before the driver moves on: a node that floods us cannot hold
/// the poll (and every other node's replies) past the round's deadline.
const READ_BUDGET: usize = 16 * READ_CHUNK;

/// What a read produced for the connection of a given generation.
#[derive(Debug)]
pub(crate) enum Item {
    /// A decoded reply.
    Reply(Value),
    /// An out-of-band RESP3 push (an invalidation, a pub/sub message): it answers no request.
    Push(Value),
    /// The connection must be dropped: closed by the peer, an I/O error, a protocol error. Always the last item
    /// of a read.
    Failed(NodeError),
}

/// The driver's view of one node's current connection.
#[derive(Debug)]
pub(crate) struct ReadSide {
    /// The connection these buffers belong to (see `Conn::generation`).
    pub(crate) generation: u32,
    stream: Option<Arc<TcpStream>>,
    rbuf: BytesMut,
    decoder: Decoder,
    /// The last read stopped at its byte budget with more perhaps waiting: read again without waiting for an
    /// event (edge-triggered polls report a socket once per arrival, not while bytes remain).
    pub(crate) backlog: bool,
    stats: Arc<NodeStats>,
}

impl ReadSide {
    pub(crate) fn new(opts: &Options, stats: Arc<NodeStats>) -> ReadSide {
        ReadSide {
            generation: 0,
            stream: None,
            rbuf: BytesMut::new(),
            decoder: Decoder::with_limits(opts.limits),
            backlog: false,
            stats,
        }
    }

    /// Whether these buffers follow connection `generation` and can read from it.
    pub(crate) fn reads(&self, generation: u32) -> bool {
        self.generation == generation && self.stream.is_some()
    }

    /// Follows connection `generation` from its start (`stream` is `None` while it is not up, or once it failed).
    pub(crate) fn attach(&mut self, generation: u32, stream: Option<Arc<TcpStream>>) {
        if self.generation != generation {
            self.rbuf.clear();
            self.decoder.reset();
        }
        self.generation = generation;
        self.stream = stream;
        self.backlog = false;
    }

    /// Reads what the socket has (up to the budget) and decodes every complete reply, appending them to `out`,
    /// followed by a failure if the connection must be dropped. Returns how many bytes were read.
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
        let mut total = 0;
        if let Err(e) = self.try_read(closed, scratch, opts, out, &mut total) {
            out.push(Item::Failed(e));
            self.stream = None;
        }
        total
    }

    fn try_read(
        &mut self,
        closed: bool,
        scratch: &mut [u8],
        opts: &Options,
        out: &mut Vec<Item>,
        total: &mut usize,
    ) -> Result<(), NodeError> {
        let Some(stream) = self.stream.as_deref() else {
            return Ok(());
        };
        let mut budget = READ_BUDGET;
        loop {
            let n = match (&*stream).read(scratch) {
                Ok(0) => return Err(NodeError::Closed),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(NodeError::from_io(e)),
            };
            *total += n;
            self.stats.read();
            self.rbuf.extend_from_slice(&scratch[..n]);
            while let Some(value) = self
                .decoder
                .decode(&mut self.rbuf)
                .map_err(NodeError::Protocol)?
            {
                // Out-of-band RESP3 pushes (pub/sub messages, invalidations) answer no request.
                out.push(match value {
                    Value::Push(_) => Item::Push(value),
                    _ => Item::Reply(value),
                });
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
}
