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
    /// Requests a node may have without replies (default 1,024). Past it, a further request is not sent: it is
    /// that node's failed vote ([`NodeError::Overloaded`](super::NodeError::Overloaded)), while the requests on the
    /// wire are kept. Releases may use a reserve of as many again, then wait for room. Bounds memory however slow
    /// a node is.
    pub max_in_flight: usize,
    /// How long a node may have requests without replies and send nothing at all before it counts as hung and its
    /// connection is dropped, failing those requests (default 5 s). A node that is slow but answers is never
    /// dropped; this catches hosts that vanished without closing their connections, and hung processes.
    pub hung_timeout: Duration,
    /// How long the thread that waits for replies polls without blocking before it sleeps (default zero: it
    /// sleeps at once). A few tens of microseconds save the wake-up of a halted CPU when replies come that fast
    /// (same host or rack), at the cost of a busy CPU meanwhile; see `BENCHMARKS.md`.
    pub spin: Duration,
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
            hung_timeout: Duration::from_secs(5),
            spin: Duration::ZERO,
            limits: Limits::default()
                .with_max_bulk_len(4 << 20)
                .with_max_aggregate_len(1 << 16)
                .with_max_depth(32),
            max_reply_len: 4 << 20,
            setup: Vec::new(),
        }
    }
}
