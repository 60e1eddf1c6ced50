//! [`Error`]: what went wrong, in terms a caller can act on, with every node's outcome when nodes are to blame.

use std::fmt;
use std::time::Duration;

use crate::net::{AddrError, IoError, NodeAddr, NodeError};

/// What one node did in a round.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The node granted (or extended, or released) the key for us.
    Granted,
    /// The node holds the key for another holder: an acquisition found it taken, or a read found another value.
    Taken,
    /// The node does not hold this lock: an extension, release or confirmation compared the key with this lock's
    /// value and found another holder's or none (the reply does not tell which; a read of the key does, as
    /// [`LockManager::inspect`](super::LockManager::inspect) gives).
    NotHeld,
    /// The node answered with an error reply (`-READONLY ...`, `-OOM ...`, `-NOPERM ...`): the server's message.
    ErrorReply(String),
    /// The node gave no reply: down, hung, refused the login, sent garbage, ...
    Failed(NodeError),
    /// The node's reply was not needed: the round was decided before it arrived.
    NotAwaited,
    /// The node was not asked: the lock's acquisition never reached it (it was down, or had too many requests
    /// waiting), so it holds nothing of this lock.
    NotSent,
    /// The node granted, but its vote is not counted: it restarted less than the restart window ago and may have
    /// forgotten locks it granted before (see [`Config::restart_guard`](super::Config::restart_guard)).
    Quarantined,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Granted => f.write_str("granted"),
            Outcome::Taken => f.write_str("held by another holder"),
            Outcome::NotHeld => f.write_str("not held by this lock (another holder's, or gone)"),
            Outcome::ErrorReply(msg) => write!(f, "error reply: {msg}"),
            Outcome::Failed(e) => e.fmt(f),
            Outcome::NotAwaited => f.write_str("not awaited (decided without it)"),
            Outcome::NotSent => f.write_str("not asked (the acquisition never reached it)"),
            Outcome::Quarantined => f.write_str(
                "granted, not counted: started less than the longest lease ago, and not proven to persist every write",
            ),
        }
    }
}

/// Every node's outcome in the round that failed, so that "why no quorum" never needs guessing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub(crate) resource: Vec<u8>,
    pub(crate) nodes: Vec<(NodeAddr, Outcome)>,
    pub(crate) quorum: usize,
    /// How long the holder's lease still ran, as the nodes said when asked (for a wait that ran out).
    pub(crate) holder_ttl: Option<std::time::Duration>,
    /// Per node whose grant was not counted ([`Outcome::Quarantined`]): its index, how long it had been up at
    /// least, and how long until its grants count.
    pub(crate) not_counted: Vec<(usize, Duration, Duration)>,
}

impl Report {
    /// The resource the round was for.
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// Each node (password hidden when displayed) and its outcome, in configuration order.
    pub fn nodes(&self) -> &[(NodeAddr, Outcome)] {
        &self.nodes
    }

    /// The majority that was needed.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How long the other holder's lease still ran when this report was made, if it is known: set when a
    /// [waiting](super::Request::wait) request gives up, from the key's remaining TTL on the
    /// nodes (the time until a majority of them will have let it expire, unless it is extended).
    pub fn holder_ttl(&self) -> Option<std::time::Duration> {
        self.holder_ttl
    }

    /// The nodes whose grant was not counted by the restart guard ([`Outcome::Quarantined`]): each with how long
    /// it had been up at least and how long until its grants count, when the report was made.
    pub fn not_counted(&self) -> impl Iterator<Item = (&NodeAddr, Duration, Duration)> + '_ {
        self.not_counted
            .iter()
            .filter_map(|&(i, up, left)| self.nodes.get(i).map(|(addr, _)| (addr, up, left)))
    }

    /// How long until every node whose grant was not counted by the restart guard counts: after that, the same
    /// attempt would have had their votes. `None` if no grant went uncounted.
    pub fn restart_wait(&self) -> Option<Duration> {
        self.not_counted.iter().map(|&(_, _, left)| left).max()
    }

    /// How many nodes granted.
    pub fn granted(&self) -> usize {
        self.count(|o| *o == Outcome::Granted)
    }

    /// How many nodes voted against: they hold the key for someone else ([`Outcome::Taken`]) or, asked to compare
    /// it with this lock's value, found another holder's or none ([`Outcome::NotHeld`]).
    pub fn taken(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Taken | Outcome::NotHeld))
    }

    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.nodes.iter().filter(|(_, o)| f(o)).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} nodes granted, {} needed",
            self.granted(),
            self.nodes.len(),
            self.quorum
        )?;
        if let Some(ttl) = self.holder_ttl {
            write!(f, "; the holder's lease runs {} ms more", ttl.as_millis())?;
        }
        for (addr, outcome) in &self.nodes {
            write!(f, "; {addr}: {outcome}")?;
        }
        if !self.not_counted.is_empty() {
            let n = self.not_counted.len();
            write!(
                f,
                ". {n} {} granted but {} not counted yet: {} started less than the longest lease ago and \
                 {} not proven to persist every write, so {} may have forgotten locks granted before a restart (the restart \
                 guard) —",
                if n == 1 { "node" } else { "nodes" },
                if n == 1 { "is" } else { "are" },
                if n == 1 { "it" } else { "they" },
                if n == 1 { "is" } else { "are" },
                if n == 1 { "it" } else { "they" },
            )?;
            for (i, (addr, up, left)) in self.not_counted().enumerate() {
                let sep = if i == 0 { "" } else { ";" };
                write!(
                    f,
                    "{sep} {addr} up {:.1}s, counted in {:.1}s",
                    up.as_secs_f64(),
                    left.as_secs_f64()
                )?;
            }
            f.write_str(
                ". To avoid the wait, run the nodes with `appendonly yes` and `appendfsync always` (trusted at \
                 once once their persistence marker is older than the lease, or at once if provisioned, as \
                 `muxlock cluster up` does), or retry after that time",
            )?;
        }
        Ok(())
    }
}

/// Why a configuration or an argument was refused: a message naming the setting or argument, and for a node
/// address that does not parse, the [`AddrError`] as the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    message: String,
    addr: Option<AddrError>,
}

impl ConfigError {
    /// What is wrong, e.g. `"ttl must be more than zero"`.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.addr
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The one error type of the lock API. Each variant is something a caller can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The configuration or an argument is invalid (no nodes, a bad URL, a zero TTL, an empty resource name...).
    /// Nothing was sent.
    Config(ConfigError),
    /// Another holder has the resource: enough nodes hold its key for someone else that a majority is impossible.
    Held(Box<Report>),
    /// No majority for another reason: too many nodes down, hung, refusing the login or answering errors, or the
    /// round took longer than the lease. The report lists every node's outcome.
    Quorum(Box<Report>),
    /// The lock's validity had already run out: an extension cannot bring it back. Nothing was sent.
    Expired,
    /// The nodes say the lock is no longer held by a majority: it is lost (its lease ran out, and someone else
    /// may have it). Returned by
    ///
    /// - an extension (`extend` and kin, `extend_value`) that a majority did not confirm because the key no longer
    ///   holds our value;
    /// - a release (`unlock` of a lock of any kind, `unlock_value`, each entry of `unlock_batch`, [`Guard::release`](super::Guard::release)) that so many nodes answered "not ours" (or
    ///   were never reached) that no majority can still have held it (for a reentrant hold: had the hold): it had expired
    ///   or been released already, so **the work it protected may have overlapped another holder's**. The keys
    ///   were deleted where the nodes still held them; nothing else is left to release.
    ///
    /// The report has every node's outcome: [`Outcome::Granted`] where the node confirmed, [`Outcome::NotHeld`]
    /// where it no longer held our value.
    LockLost(Box<Report>),
    /// The lock was already extended the maximum number of times
    /// ([`Config::max_extensions`](super::Config::max_extensions)).
    ExtendLimit(u32),
    /// The OS refused something muxlock needs outside any node: randomness for lock values, or an event poll.
    /// The OS error is the [`source`](std::error::Error::source).
    Os {
        /// What muxlock was doing, e.g. `"creating the event poll"`.
        doing: &'static str,
        /// The OS error.
        error: IoError,
    },
}

impl Error {
    /// An [`Error::Config`] with this message.
    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error::Config(ConfigError {
            message: message.into(),
            addr: None,
        })
    }

    /// An [`Error::Config`] for a node address that does not parse.
    pub(crate) fn addr(e: AddrError) -> Error {
        Error::Config(ConfigError {
            message: e.to_string(),
            addr: Some(e),
        })
    }

    /// Whether the resource is held by someone else.
    pub fn is_held(&self) -> bool {
        matches!(self, Error::Held(_))
    }

    /// Whether not enough nodes could be reached or answered properly.
    pub fn is_quorum(&self) -> bool {
        matches!(self, Error::Quorum(_))
    }

    /// Whether the configuration or an argument is invalid.
    pub fn is_config(&self) -> bool {
        matches!(self, Error::Config(_))
    }

    /// Whether the lock is gone (expired before the call, or lost on the nodes).
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::Expired | Error::LockLost(_))
    }

    /// Whether nodes timing out prevented the majority.
    pub fn is_timeout(&self) -> bool {
        self.report().is_some_and(|r| {
            r.nodes
                .iter()
                .any(|(_, o)| *o == Outcome::Failed(NodeError::Timeout))
        })
    }

    /// Whether a node refused the login (wrong password or user).
    pub fn is_auth(&self) -> bool {
        self.report().is_some_and(|r| {
            r.nodes
                .iter()
                .any(|(_, o)| matches!(o, Outcome::Failed(NodeError::Auth(_))))
        })
    }

    /// The per-node report, for the variants that have one.
    pub fn report(&self) -> Option<&Report> {
        match self {
            Error::Held(r) | Error::Quorum(r) | Error::LockLost(r) => Some(r),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |r: &Report| String::from_utf8_lossy(&r.resource).into_owned();
        match self {
            Error::Config(e) => write!(f, "invalid configuration: {e}"),
            Error::Held(r) => write!(f, "lock {:?} is held by another holder ({r})", name(r)),
            Error::Quorum(r) => write!(f, "no quorum for lock {:?} ({r})", name(r)),
            Error::Expired => f.write_str("the lock had expired before the call"),
            Error::LockLost(r) => write!(f, "lock {:?} was lost ({r})", name(r)),
            Error::ExtendLimit(n) => write!(
                f,
                "the lock was already extended {n} times, the configured maximum"
            ),
            Error::Os { doing, error } => write!(f, "os error while {doing}: {error}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Config(e) => Some(e),
            Error::Os { error, .. } => Some(error.get()),
            _ => None,
        }
    }
}

/// A one-attempt result as the simulator's verbs give it: `Ok(None)` when another holder has it.
#[cfg(feature = "sim")]
pub(crate) fn not_held<T>(got: Result<T>) -> Result<Option<T>> {
    match got {
        Ok(got) => Ok(Some(got)),
        Err(Error::Held(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The lock API's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
