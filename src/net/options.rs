//! [`Options`]: connection settings shared by every node of a [`Fanout`](super::Fanout).

use std::time::Duration;

use bytes::Bytes;

use super::tls_config::TlsConfig;
use crate::resp::Limits;

/// How a [`Fanout`](super::Fanout) connects to and guards against its nodes. Start from [`Options::default`] and
/// change what you need with the `with_*` setters (each says its default).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use muxlock::net::Options;
///
/// let opts = Options::default().with_connect_timeout(Duration::from_millis(200));
/// assert_eq!(opts.max_in_flight(), 16_384);
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    pub(crate) connect_timeout: Duration,
    pub(crate) backoff_min: Duration,
    pub(crate) backoff_max: Duration,
    pub(crate) max_in_flight: usize,
    pub(crate) hung_timeout: Duration,
    pub(crate) spin: Duration,
    pub(crate) limits: Limits,
    pub(crate) max_reply_len: usize,
    pub(crate) setup: Vec<Bytes>,
    /// Positions in `setup` of the commands whose error reply is kept as their reply instead of failing the
    /// connection (a command the server may refuse, such as `CONFIG GET` where `CONFIG` is renamed).
    pub(crate) optional_setup: Vec<usize>,
    pub(crate) pushes: bool,
    pub(crate) tls: TlsConfig,
}

/// A getter and a `with_*` setter per (`Copy`) setting; the setter carries the documentation.
macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident, $with:ident: $ty:ty;)*) => {
        impl Options {
            $(
                #[doc = concat!("The value of [`", stringify!($with), "`](Options::", stringify!($with), ").")]
                pub fn $name(&self) -> $ty {
                    self.$name
                }

                $(#[$doc])*
                #[must_use]
                pub fn $with(mut self, $name: $ty) -> Options {
                    self.$name = $name;
                    self
                }
            )*
        }
    };
}

settings! {
    /// Sets how long a non-blocking connect may take before the node counts as down (default 1 s). Connecting never
    /// blocks a round longer than the round's own deadline; a slow connect just costs that round the node's vote.
    /// A TLS handshake counts too: it must end within this of the dial, or of the moment the client saw the TCP
    /// connect complete (and sent its first flight), whichever is later.
    connect_timeout, with_connect_timeout: Duration;
    /// Sets the first delay before re-dialling a node whose connection failed (default 10 ms). It doubles on each
    /// further failure, up to `backoff_max`, and starts over once the node answers again.
    backoff_min, with_backoff_min: Duration;
    /// Sets the longest delay between two dials of a down node (default 1 s).
    backoff_max, with_backoff_max: Duration;
    /// Sets how many requests a node may have without replies (default 16,384). Past it, a further request is not sent: it is
    /// that node's failed vote ([`NodeError::Overloaded`](super::NodeError::Overloaded)), while the requests on the
    /// wire are kept. Releases may use a reserve of as many again, then wait for room. Bounds memory however slow
    /// a node is.
    max_in_flight, with_max_in_flight: usize;
    /// Sets how long a node may have requests without replies and send nothing at all before it counts as hung and its
    /// connection is dropped, failing those requests (default 5 s). A node that is slow but answers is never
    /// dropped; this catches hosts that vanished without closing their connections, and hung processes.
    hung_timeout, with_hung_timeout: Duration;
    /// Sets how long the thread that waits for replies polls without blocking before it sleeps (default zero: it
    /// sleeps at once). A few tens of microseconds save the wake-up of a halted CPU when replies come that fast
    /// (same host or rack), at the cost of a busy CPU meanwhile; see
    /// `benchmarks/results/2026-11-22-throughput-shared-manager.md`, "Busy polling".
    spin, with_spin: Duration;
    /// Sets whether RESP3 pushes (invalidations of client-side tracking, pub/sub messages) are kept for
    /// [`Fanout::recv_pushes`](super::Fanout::recv_pushes) (default off: they are read and dropped).
    pushes, with_pushes: bool;
    /// Sets what the decoder accepts from a node (default: [`Limits::default`] with bulk strings up to 4 MiB,
    /// aggregates up to 65,536 elements and 32 levels: a lock client gets small replies).
    limits, with_limits: Limits;
    /// Sets the longest reply accepted, in bytes, counted as it arrives (default 4 MiB). Each header is checked by
    /// `limits`; this bounds the whole, so that a node sending a valid reply that never ends is cut off (and
    /// memory stays bounded: the read buffer, plus the decoder's record of the unfinished reply, at most 8 bytes
    /// per byte received).
    max_reply_len, with_max_reply_len: usize;
}

impl Options {
    /// The value of [`with_setup`](Options::with_setup).
    pub fn setup(&self) -> &[Bytes] {
        &self.setup
    }

    /// The value of [`with_tls`](Options::with_tls).
    pub fn tls(&self) -> &TlsConfig {
        &self.tls
    }

    /// Sets what `rediss://` nodes are verified against and which client certificate they get (default: the
    /// platform's roots, no client certificate). Read when the fanout is built.
    #[must_use]
    pub fn with_tls(mut self, tls: TlsConfig) -> Options {
        self.tls = tls;
        self
    }

    /// Sets the encoded commands pipelined after `AUTH`/`SELECT`/`HELLO` on every new connection (such as
    /// `SCRIPT LOAD`; default none). An error reply to any of them fails the connection, except for those the
    /// lock layer marks optional (their error reply is kept as their reply).
    #[must_use]
    pub fn with_setup(mut self, setup: Vec<Bytes>) -> Options {
        self.setup = setup;
        self
    }
}

impl Default for Options {
    fn default() -> Options {
        Options {
            connect_timeout: Duration::from_secs(1),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_secs(1),
            max_in_flight: 16_384,
            hung_timeout: Duration::from_secs(5),
            spin: Duration::ZERO,
            limits: Limits::default()
                .with_max_bulk_len(4 << 20)
                .with_max_aggregate_len(1 << 16)
                .with_max_depth(32),
            max_reply_len: 4 << 20,
            setup: Vec::new(),
            optional_setup: Vec::new(),
            pushes: false,
            tls: TlsConfig::default(),
        }
    }
}
