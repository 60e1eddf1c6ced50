//! [`Inbound`]: the bytes a node sent, turned into replies and pushes, with no socket: the read buffer, the
//! resumable decoder, and the bound on a reply's length. The driver's [`ReadSide`](super::read::ReadSide) appends
//! what its transport read (plaintext, after TLS) and decodes here; the unit tests feed byte buffers.

use bytes::BytesMut;

use super::error::NodeError;
use super::options::Options;
use crate::resp::{Decoder, Value};

/// What a read produced for the connection of a given generation.
#[derive(Debug)]
pub(crate) enum Item {
    /// The TLS handshake completed (always before any reply of the connection).
    Secured,
    /// A decoded reply.
    Reply(Value),
    /// An out-of-band RESP3 push (an invalidation, a pub/sub message): it answers no request.
    Push(Value),
    /// The connection must be dropped: closed by the peer, an I/O error, a protocol error. Always the last item
    /// of a read.
    Failed(NodeError),
}

/// One connection's undecoded bytes and decoder.
#[derive(Debug)]
pub(crate) struct Inbound {
    rbuf: BytesMut,
    decoder: Decoder,
}

impl Inbound {
    pub(crate) fn new(opts: &Options) -> Inbound {
        Inbound {
            rbuf: BytesMut::new(),
            decoder: Decoder::with_limits(opts.limits),
        }
    }

    /// Forgets everything: a new connection starts.
    pub(crate) fn reset(&mut self) {
        self.rbuf.clear();
        self.decoder.reset();
    }

    /// Where the transport appends what it read.
    pub(crate) fn buffer(&mut self) -> &mut BytesMut {
        &mut self.rbuf
    }

    /// The capacity of the read buffer (for tests of what a declared size costs).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.rbuf.capacity()
    }

    /// Decodes every complete reply buffered, appending it to `out`. `Err`: the bytes are not valid RESP, or
    /// the unfinished reply left is longer than [`Options::max_reply_len`]: the connection must be dropped (the
    /// replies decoded before the fault are in `out` all the same).
    pub(crate) fn decode(&mut self, opts: &Options, out: &mut Vec<Item>) -> Result<(), NodeError> {
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
        Ok(())
    }
}
