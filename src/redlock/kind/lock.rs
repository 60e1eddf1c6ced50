//! [`Lock`]: a held lease, of any kind: one resource, a set, fenced, or owned (reentrant).

use std::fmt;
use std::time::{Duration, Instant};

use crate::net::NodeSet;
use crate::redlock::kind::owner::Owner;
use crate::redlock::token;

/// What kind of lock a [`Lock`] is, and what that kind keeps beside the lease. The kind decides which scripts
/// extend and release it (the engine's business), never the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One resource, `SET NX` and the compare-and-delete / compare-and-pexpire scripts (or native commands).
    Plain,
    /// Every name of a set (sorted, without duplicates; the lock's `resource` is the first), acquired,
    /// extended and released together.
    Set(Vec<Vec<u8>>),
    /// A fencing token; released by the fenced release, which leaves the token on every node it frees.
    Fenced(u64),
    /// One hold of an owner's reentrant lock: the owner is the key's value (the lock's `value`), `hold` this
    /// acquisition's field in the holds hash, `holds` the count after it.
    Owned {
        owner: Owner,
        hold: token::Value,
        holds: u64,
    },
}

/// A lock held on a majority of the nodes, valid until [`valid_until`](Lock::valid_until): one resource, a set of
/// them, a fenced lock ([`token`](Lock::token)) or one hold of an owner's reentrant lock ([`owner`](Lock::owner)),
/// as its [request](crate::redlock::Request) asked. Every kind is extended with
/// [`LockManager::extend`](crate::redlock::LockManager::extend) and released with
/// [`LockManager::unlock`](crate::redlock::LockManager::unlock).
///
/// Dropping a `Lock` does not release it: the keys expire at the end of the lease.
///
/// Validity is measured on this process' monotonic clock from the instant *before* the acquiring requests were
/// sent, minus the drift allowance, so that the lock expires here no later than on the nodes. Check
/// [`is_valid`](Lock::is_valid) before acting on the protected resource: a process that was paused (GC, swap,
/// SIGSTOP) may wake up holding a lock that has expired.
#[must_use = "a lock that is not used is held until its lease runs out"]
pub struct Lock {
    pub(crate) resource: Vec<u8>,
    pub(crate) value: token::Value,
    pub(crate) valid_until: Instant,
    /// When the acquisition round started: an extension counts a node that restarted since only if the restart
    /// guard trusts it (see `restart.rs`, "Extensions").
    pub(crate) acquired: Instant,
    pub(crate) extensions: u32,
    /// The shortest TTL of an extension that some node may still run: a request of it whose reply was never read
    /// (the round was decided without it, timed out, was abandoned, or its connection dropped: bytes already
    /// sent may still arrive). Run after a later, longer extension it shortens the key there to this TTL from
    /// when it runs, so no later extension counts a lease longer than this TTL from its own start
    /// (`Engine::bounded`). `None` until an extension leaves one unanswered.
    pub(crate) pending_ttl: Option<Duration>,
    /// The nodes the acquisition's `SET` was queued for: the others cannot hold the key, so releases and
    /// extensions skip them.
    pub(crate) nodes: NodeSet,
    pub(crate) kind: Kind,
}

impl Kind {
    /// The kind's name in traces and metrics.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Set(_) => "set",
            Kind::Fenced(_) => "fenced",
            Kind::Owned { .. } => "owned",
        }
    }
}

impl Lock {
    /// This lock as `kind`.
    pub(crate) fn with_kind(mut self, kind: Kind) -> Lock {
        self.kind = kind;
        self
    }

    /// The locked resource's name (the Redis key); for a set, the first of its names (sorted).
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// Every locked resource: the one resource, or a set's names (sorted, without duplicates).
    pub fn resources(&self) -> &[Vec<u8>] {
        match &self.kind {
            Kind::Set(names) => names,
            _ => std::slice::from_ref(&self.resource),
        }
    }

    /// The fencing token of a [fenced](crate::redlock::Request::fenced) lock: larger than the token of every
    /// earlier fenced acquisition of the resource. Send it with every write to the protected resource, which
    /// must refuse a token below the largest it has seen. `None` for other kinds.
    pub fn token(&self) -> Option<u64> {
        match self.kind {
            Kind::Fenced(token) => Some(token),
            _ => None,
        }
    }

    /// The owner of an [owned](crate::redlock::Request::owned) (reentrant) hold, `None` for other kinds.
    pub fn owner(&self) -> Option<&Owner> {
        match &self.kind {
            Kind::Owned { owner, .. } => Some(owner),
            _ => None,
        }
    }

    /// For an owned hold, the number of holds the key had after this acquisition (1 for an outer hold, 2 for
    /// the first nested one, ...; the largest among the nodes counted); `None` for other kinds.
    pub fn holds(&self) -> Option<u64> {
        match &self.kind {
            Kind::Owned { holds, .. } => Some(*holds),
            _ => None,
        }
    }

    /// This acquisition's unique value (40 hex digits), stored in the key on each node (for an owned hold, the
    /// owner's value, shared by its holds).
    pub fn value(&self) -> &str {
        // Hex digits are ASCII; the fallback is never taken.
        std::str::from_utf8(&self.value).unwrap_or_default()
    }

    /// The instant the lease ends, on the monotonic clock.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The time left on the lease (zero once it has run out).
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether the lease has not run out yet, on the monotonic clock. That clock stops while the machine is
    /// suspended: after a system suspend and resume a lock can report valid although its keys expired (see the
    /// README's "A lock is a lease").
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// How many times the lock was extended.
    pub fn extensions(&self) -> u32 {
        self.extensions
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Lock");
        match &self.kind {
            Kind::Set(names) => d.field(
                "resources",
                &names
                    .iter()
                    .map(|r| String::from_utf8_lossy(r))
                    .collect::<Vec<_>>(),
            ),
            _ => d.field("resource", &String::from_utf8_lossy(&self.resource)),
        };
        d.field("value", &self.value());
        match &self.kind {
            Kind::Fenced(token) => d.field("token", token),
            Kind::Owned { holds, .. } => d.field("holds", holds),
            _ => &mut d,
        };
        d.field("validity", &self.validity())
            .field("extensions", &self.extensions)
            .finish()
    }
}
