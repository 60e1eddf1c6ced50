//! [`Options`]: connection settings shared by every node of a [`Fanout`](super::Fanout).

use std::time::Duration;

use bytes::Bytes;

use crate::resp::Limits;

/// How a [`Fanout`](super::Fanout) connects to and guards against its nodes.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use muxlock::net::Options;
///
/// let opts = Options { connect_timeout: Duration::from_millis(200), ..Options::default() };
/// assert_eq!(opts.max_in_flight, 1024);
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    /// How long a non-blocking connect may take before the node counts as down (default 1 s). Connecting never
    /// blocks a round longer than the round's own deadline; a slow connect just costs that round the node's vote.
    pub connect_timeout: Duration,
    /// The first delay before re-dialling a node whose connection failed (default 10 ms). It doubles on each
    /// further failure, up to `backoff_max`, and starts over once the node answers again.
    pub backoff_min: Duration,
    /// The longest delay between two dials of a down node (default 1 s).
    pub backoff_max: Duration,
    /// Requests a node may have without replies before it is treated as hung: its connection is dropped and its
    /// pending requests fail (default 1,024). Bounds memory however long a node hangs.
    pub max_in_flight: usize,
    /// What the decoder accepts from a node (default: [`Limits::default`] with bulk strings up to 4 MiB,
    /// aggregates up to 65,536 elements and 32 levels: a lock client gets small replies).
    pub limits: Limits,
    /// The longest reply accepted, in bytes, counted as it arrives (default 4 MiB). Each header is checked by
    /// `limits`; this bounds the whole, so that a node sending a valid reply that never ends is cut off (and
    /// memory stays bounded: the read buffer, plus the decoder's record of the unfinished reply, at most 8 bytes
    /// per byte received).
    pub max_reply_len: usize,
    /// Encoded commands pipelined after `AUTH`/`SELECT`/`HELLO` on every new connection (such as `SCRIPT LOAD`).
    /// An error reply to any of them fails the connection.
    pub setup: Vec<Bytes>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            connect_timeout: Duration::from_secs(1),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
            max_in_flight: 1024,
            limits: Limits::default()
                .with_max_bulk_len(4 << 20)
                .with_max_aggregate_len(1 << 16)
                .with_max_depth(32),
            max_reply_len: 4 << 20,
            setup: Vec::new(),
        }
    }
}
