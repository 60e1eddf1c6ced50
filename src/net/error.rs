//! [`NodeError`]: why one node did not answer a request; [`IoError`]: an OS error kept whole; [`TlsError`]: a
//! failed TLS session.

use std::fmt;
use std::io;
use std::sync::Arc;

use crate::resp::DecodeError;

/// An OS error kept whole, so that callers and logging crates can walk to it with
/// [`source`](std::error::Error::source). `io::Error` is neither `Clone` nor comparable, and muxlock's errors are
/// both: this shares it in an `Arc`, and two are equal when their kind and message are.
#[derive(Clone, Debug)]
pub struct IoError(Arc<io::Error>);

impl IoError {
    /// The error's kind.
    pub fn kind(&self) -> io::ErrorKind {
        self.0.kind()
    }

    /// The `io::Error` itself.
    pub fn get(&self) -> &io::Error {
        &self.0
    }
}

impl From<io::Error> for IoError {
    fn from(e: io::Error) -> IoError {
        IoError(Arc::new(e))
    }
}

impl PartialEq for IoError {
    fn eq(&self, other: &IoError) -> bool {
        self.kind() == other.kind() && self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoError {}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A TLS session that failed: its certificate was refused (ours or the node's), the handshake failed, or the
/// peer does not speak TLS. It names the server (the host of the node's URL) and keeps rustls' error as its
/// [`source`](std::error::Error::source); two are equal when they name the same server and say the same.
#[derive(Clone, Debug)]
pub struct TlsError {
    server: Arc<str>,
    error: Arc<dyn std::error::Error + Send + Sync>,
    certificate: bool,
    hint: Option<&'static str>,
}

impl TlsError {
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn new(
        server: Arc<str>,
        error: Arc<dyn std::error::Error + Send + Sync>,
        certificate: bool,
        hint: Option<&'static str>,
    ) -> TlsError {
        TlsError {
            server,
            error,
            certificate,
            hint,
        }
    }

    /// The server name the session was for: the host of the node's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Whether a certificate was refused: the node's (not trusted, or not for this name), or ours (missing or
    /// not trusted by the node).
    pub fn is_certificate(&self) -> bool {
        self.certificate
    }
}

impl PartialEq for TlsError {
    fn eq(&self, other: &TlsError) -> bool {
        self.server == other.server && self.error.to_string() == other.error.to_string()
    }
}

impl Eq for TlsError {}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TLS with {}: {}", self.server, self.error)?;
        if let Some(hint) = self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.error)
    }
}

/// Why one node gave no reply to a request. A failed node is a failed vote, never the failure of a whole round.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeError {
    /// The round's deadline passed before the node answered (a hung, slow or black-holed node).
    Timeout,
    /// The TCP connection was refused: nothing listens at the address (the node is down).
    Refused,
    /// The connection (the TCP connect, and for `rediss://` the TLS handshake) was not established within the
    /// connect timeout.
    ConnectTimeout,
    /// The node closed the connection.
    Closed,
    /// Another I/O error on the socket (reset, unreachable, ...), kept as the source.
    Io(IoError),
    /// The node's host name did not resolve to an address: the resolver's error, kept as the source.
    Resolve(IoError),
    /// The node sent bytes that are not valid RESP (or exceed the connection's limits); the connection was dropped.
    Protocol(DecodeError),
    /// A reply came with no request waiting for it; the connection was dropped.
    Unexpected,
    /// A reply was read for a request while an older request of the same round, queued on the same node
    /// before it, still had no outcome: the connection's queue and the round's books disagree, so no reply on
    /// it can be trusted to answer the command it would be counted for. The connection was dropped.
    OutOfOrder,
    /// `AUTH` (or `HELLO`'s authentication) was refused: the server's message, such as `WRONGPASS ...` or
    /// `NOAUTH ...`.
    Auth(String),
    /// Another step of the connection set-up (`SELECT`, `HELLO 3`, a set-up command) was refused: the command and
    /// the server's message.
    Setup(String),
    /// A set-up step was refused with `LOADING`: the node restarted and is still loading its data set, and runs
    /// no command that needs it. The connection was dropped; it is dialled again after its backoff, so that no
    /// request goes to the node before it serves its data (see `net/state.rs`, "A node that is loading").
    Loading,
    /// The request was not sent: the node already had [`Options::max_in_flight`](super::Options::max_in_flight)
    /// requests without replies (it is slow, or hung). Its connection and the requests on it are kept.
    Overloaded,
    /// The node had requests without replies and sent no byte for this long (the
    /// [`Options::hung_timeout`](super::Options::hung_timeout)): it is treated as hung, and its connection was
    /// dropped.
    Hung(std::time::Duration),
    /// The TLS session failed (a certificate refused, a failed handshake, a peer that does not speak TLS); the
    /// connection was dropped. It names the server and keeps rustls' error as the source.
    Tls(TlsError),
    /// A reply grew past [`Options::max_reply_len`](super::Options::max_reply_len) bytes (the limit is given);
    /// the connection was dropped.
    ReplyTooLarge(usize),
    /// A Redlock member that is a Redis Cluster could not route or follow a command: no master serves its
    /// slot, it was redirected more than twice or to a node the member's map does not show, the redirection
    /// could not be read, or its keys lie in different slots. A failed vote, like a node that is down.
    Cluster(String),
    /// The node's wall clock could not be shown to agree with this client's (the lock's clock check, see
    /// [`Config::with_clock_check`](crate::Config::with_clock_check)): the command ran, but its reply is not
    /// counted. The message says how far off the node's clock was, or why it could not be read.
    Clock(String),
}

impl NodeError {
    /// Whether the request was never sent or surely failed at the connection level, so that retrying it on a new
    /// connection cannot do harm. (A `Timeout` leaves the outcome on the node unknown; after a `Clock` failure the
    /// command ran.)
    pub fn is_connection_failure(&self) -> bool {
        !matches!(self, NodeError::Timeout | NodeError::Clock(_))
    }

    pub(crate) fn from_io(e: io::Error) -> NodeError {
        match e.kind() {
            io::ErrorKind::ConnectionRefused => NodeError::Refused,
            io::ErrorKind::TimedOut => NodeError::ConnectTimeout,
            io::ErrorKind::UnexpectedEof => NodeError::Closed,
            _ => NodeError::Io(IoError::from(e)),
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Timeout => f.write_str("timed out"),
            NodeError::Refused => f.write_str("connection refused"),
            NodeError::ConnectTimeout => f.write_str("connect timed out"),
            NodeError::Closed => f.write_str("connection closed by the server"),
            NodeError::Io(e) => write!(f, "i/o error: {e}"),
            NodeError::Resolve(e) => write!(f, "cannot resolve host: {e}"),
            NodeError::Protocol(e) => write!(f, "protocol error: {e}"),
            NodeError::Unexpected => f.write_str("protocol error: a reply nobody asked for"),
            NodeError::OutOfOrder => {
                f.write_str("a reply out of its request's order on the connection (dropped)")
            }
            NodeError::Auth(msg) => write!(f, "authentication failed: {msg}"),
            NodeError::Setup(msg) => write!(f, "connection set-up failed: {msg}"),
            NodeError::Loading => f.write_str("the node is loading its data set (it restarted)"),
            NodeError::Overloaded => {
                f.write_str("not sent: too many requests already wait for this node's replies")
            }
            NodeError::Hung(d) => write!(f, "hung: no reply for {d:?} with requests waiting"),
            NodeError::Tls(e) => e.fmt(f),
            NodeError::ReplyTooLarge(limit) => {
                write!(f, "protocol error: a reply longer than {limit} bytes")
            }
            NodeError::Cluster(why) => write!(f, "cluster routing: {why}"),
            NodeError::Clock(why) => write!(f, "clock check: {why}"),
        }
    }
}

impl std::error::Error for NodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NodeError::Io(e) | NodeError::Resolve(e) => Some(e.get()),
            NodeError::Protocol(e) => Some(e),
            NodeError::Tls(e) => Some(e),
            _ => None,
        }
    }
}
