//! [`Lock`]: a held lease on a resource.

use std::fmt;
use std::time::{Duration, Instant};

use crate::net::NodeSet;
use crate::redlock::token;

/// A lock held on a majority of the nodes, valid until [`valid_until`](Lock::valid_until).
///
/// Dropping a `Lock` does not release it: the keys expire at the end of the lease. Release it early with
/// [`LockManager::unlock`](crate::redlock::LockManager::unlock).
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
    /// The nodes the acquisition's `SET` was queued for: the others cannot hold the key, so releases and
    /// extensions skip them.
    pub(crate) nodes: NodeSet,
}

impl Lock {
    /// The locked resource's name (the Redis key).
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// This acquisition's unique value (40 hex digits), stored in the key on each node.
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
        f.debug_struct("Lock")
            .field("resource", &String::from_utf8_lossy(&self.resource))
            .field("value", &self.value())
            .field("validity", &self.validity())
            .field("extensions", &self.extensions)
            .finish()
    }
}
