//! Plain TCP: a [`Transport`](super::Transport)'s writes and reads straight on the socket.

use std::io::{self, Read, Write};

use bytes::{Buf, BytesMut};
use mio::net::TcpStream;

use super::{READ_BUDGET, ReadOutcome};
use crate::net::error::NodeError;
use crate::net::stats::NodeStats;

/// [`Transport::write`](super::Transport::write) over plain TCP.
pub(super) fn write(
    stream: &TcpStream,
    bytes: &mut BytesMut,
    writes: &mut u32,
) -> Result<bool, NodeError> {
    loop {
        if bytes.is_empty() {
            return Ok(true);
        }
        match (&*stream).write(bytes) {
            Ok(0) => return Err(NodeError::Closed),
            Ok(n) => {
                bytes.advance(n);
                *writes += 1;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(NodeError::from_io(e)),
        }
    }
}

/// [`Transport::read`](super::Transport::read) over plain TCP.
pub(super) fn read(
    stream: &TcpStream,
    into: &mut BytesMut,
    scratch: &mut [u8],
    closed: bool,
    stats: &NodeStats,
) -> ReadOutcome {
    let mut out = ReadOutcome::default();
    let mut budget = READ_BUDGET;
    loop {
        let n = match (&*stream).read(scratch) {
            Ok(0) => {
                out.end = Some(NodeError::Closed);
                break;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                out.end = Some(NodeError::from_io(e));
                break;
            }
        };
        out.bytes += n;
        stats.read();
        into.extend_from_slice(&scratch[..n]);
        // A short read drained the socket: on Linux, bytes arriving later raise a new edge-triggered event, so
        // the extra read that would only return WouldBlock is skipped.
        if n < scratch.len() && !closed {
            break;
        }
        budget = budget.saturating_sub(n);
        if budget == 0 {
            out.backlog = true;
            break;
        }
    }
    out
}
