//! [`Transport`]: how one connection's bytes move, over the one non-blocking `mio` socket it has: plain TCP, or
//! TLS ([`tls`](tls), with the `tls` feature) driven sans-IO on the same socket. The protocol state above
//! ([`NodeState`](super::state::NodeState), [`Inbound`](super::inbound::Inbound)) sees plaintext only.
//!
//! A transport is shared (in an `Arc`) by the writer of the moment and the driver's read side, each outside the
//! fanout's lock. Plain TCP needs nothing more: reads and writes are separate directions of the socket. A TLS
//! session is one state for both directions, so it sits behind a mutex of its own (see [`tls`](tls) for
//! the lock order).
//!
//! # Layout
//!
//! - this file: [`Transport`] and what one read did ([`ReadOutcome`]), each call passed to the child that moves
//!   the bytes;
//! - `tcp`: plain TCP's writes and reads;
//! - `tls`: rustls on the same socket, with the client configurations ([`Connector`], [`Target`]) that make a
//!   TLS transport; `no_tls.rs` stands in for it in a build without the `tls` feature, refusing `rediss://`
//!   nodes.

mod tcp;
#[cfg(feature = "tls")]
pub(super) mod tls;
#[cfg(not(feature = "tls"))]
#[path = "no_tls.rs"]
pub(super) mod tls;

use std::net::Shutdown;

use bytes::BytesMut;
use mio::net::TcpStream;

use super::error::NodeError;
use super::stats::NodeStats;
pub(crate) use tls::{Connector, Target};

/// How much a read asks the socket for at once: the size of the scratch buffer callers pass in.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// How much one turn may read from one connection before the driver moves on: a node that floods us cannot hold
/// the poll (and every other node's replies) past the round's deadline.
pub(crate) const READ_BUDGET: usize = 16 * READ_CHUNK;

/// One connection's way of moving bytes.
#[derive(Debug)]
pub(crate) enum Transport {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS over TCP (boxed: a session is a kilobyte, a socket a few bytes).
    #[cfg(feature = "tls")]
    Tls(Box<tls::TlsLink>),
}

/// What one read of a transport did.
#[derive(Debug, Default)]
pub(crate) struct ReadOutcome {
    /// Bytes taken from the socket (ciphertext, for TLS).
    pub(crate) bytes: usize,
    /// The TLS handshake completed during this read.
    pub(crate) secured: bool,
    /// The read stopped at its byte budget with more perhaps waiting.
    pub(crate) backlog: bool,
    /// The connection must be dropped (after what was read is decoded).
    pub(crate) end: Option<NodeError>,
}

impl Transport {
    /// The socket under the transport.
    pub(crate) fn socket(&self) -> &TcpStream {
        match self {
            Transport::Tcp(s) => s,
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.socket(),
        }
    }

    /// Whether a TLS handshake must follow the TCP connect.
    pub(crate) fn is_tls(&self) -> bool {
        !matches!(self, Transport::Tcp(_))
    }

    /// Closes both directions of the socket, so that other threads still holding it see it closed, and the peer
    /// sees the close now rather than when the last of them lets go. (No TLS `close_notify`: it would need the
    /// session, which is never taken under the fanout's lock, and Redis does not need it.)
    pub(crate) fn shutdown(&self) {
        let _ = self.socket().shutdown(Shutdown::Both);
    }

    /// Writes `bytes` (plaintext) until all are handed over or the socket is full; what was written is taken from
    /// the front of `bytes`, and `writes` counts the system calls that took bytes. `Ok(true)`: all handed over
    /// and on the wire; `Ok(false)`: the socket is full, the rest waits for it to drain (over TLS `bytes` may be
    /// empty then, the records rustls encrypted waiting in it). Over TLS, only once the handshake completed.
    pub(crate) fn write(&self, bytes: &mut BytesMut, writes: &mut u32) -> Result<bool, NodeError> {
        match self {
            Transport::Tcp(stream) => tcp::write(stream, bytes, writes),
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.write(bytes, writes),
        }
    }

    /// Reads what the socket has, up to [`READ_BUDGET`] bytes, appending the plaintext to `into`. `closed`: the
    /// peer has closed its side (the poll said so), so the socket is read to its end, and a close that arrived
    /// with the last bytes is seen now (no further event would report it).
    pub(crate) fn read(
        &self,
        into: &mut BytesMut,
        scratch: &mut [u8],
        closed: bool,
        stats: &NodeStats,
    ) -> ReadOutcome {
        match self {
            Transport::Tcp(stream) => tcp::read(stream, into, scratch, closed, stats),
            #[cfg(feature = "tls")]
            Transport::Tls(t) => t.read(into, scratch, closed, stats),
        }
    }
}
