//! All-or-nothing sets of resources: [`LockManager::lock_many`](crate::redlock::LockManager::lock_many) and its kin,
//! and [`LockSet`].
//!
//! # Invariants
//!
//! - **One round, one script per node.** An acquisition sends each node one [`lua::ACQUIRE_MANY`] carrying every
//!   key of the set: a node's part is atomic (Redis runs a script to its end before any other command), so a node
//!   holds all of the set for this value or none of it. The quorum is counted per set, as for one key.
//! - **Sorted, no duplicates.** The names are sorted and deduplicated before they are sent, so the same set asked
//!   in any order is the same request, and two callers with overlapping sets in different orders meet in the same
//!   key order. (Within one node there is nothing to deadlock on anyway: a script never waits; the sorting keeps
//!   requests identical and reports stable.)
//! - **A retry is not blocked by its own leftovers.** One call draws one value and keeps it across its retries, and
//!   the script accepts keys that already hold it: a key its own failed attempt left behind (a release that has not
//!   landed yet) does not block the next attempt, as node-redlock's script (which refuses its own value) does.
//! - **After an error nothing of the set stays locked on a node that answered.** A failed attempt releases the set
//!   on every node the attempt was sent to and waits (one round timeout at most) for those releases: a node that
//!   answered the acquisition has, by the time the error is returned, also answered the release (they travel in
//!   order on one connection). A node that never answered gets the release after the acquisition, in order, when it
//!   comes back to life on the same connection; a node whose connection broke has nothing of ours unless it
//!   persisted the keys, and then they expire with the TTL.
//! - **Released and extended together**, by [`lua::RELEASE_MANY`] and [`lua::EXTEND_MANY`]: an extension extends
//!   every key only where every key still holds our value.
//! - **The restart guard counts every vote** (`Engine::counted`), as for one key.

use std::fmt;
use std::time::{Duration, Instant};

use crate::net::NodeSet;
use crate::redlock::kind::lock::{Kind, Lock};
use crate::redlock::token;

/// A set of resources held together on a majority of the nodes, all with one value, valid until
/// [`valid_until`](LockSet::valid_until). Dropping it does not release it.
#[must_use = "a lock that is not used is held until its lease runs out"]
pub struct LockSet {
    pub(crate) resources: Vec<Vec<u8>>,
    pub(crate) value: token::Value,
    pub(crate) valid_until: Instant,
    /// When the acquisition round started (see [`Lock`](crate::redlock::Lock)'s field of that name).
    pub(crate) acquired: Instant,
    pub(crate) extensions: u32,
    pub(crate) nodes: NodeSet,
}

impl LockSet {
    /// The resources, sorted, without duplicates.
    pub fn resources(&self) -> &[Vec<u8>] {
        &self.resources
    }

    /// The value every key of the set holds (40 hex digits).
    pub fn value(&self) -> &str {
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

    /// Whether the lease has not run out yet.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// How many times the set was extended.
    pub fn extensions(&self) -> u32 {
        self.extensions
    }
}

impl From<LockSet> for Lock {
    /// The set as one [`Lock`]: its first name as the resource, every name in its kind.
    fn from(set: LockSet) -> Lock {
        Lock {
            resource: set.resources.first().cloned().unwrap_or_default(),
            value: set.value,
            valid_until: set.valid_until,
            acquired: set.acquired,
            extensions: set.extensions,
            nodes: set.nodes,
            kind: Kind::Set(set.resources),
        }
    }
}

impl LockSet {
    /// A [`Lock`] of kind [`Kind::Set`] as a `LockSet` (for the old verbs); another kind as a set of its one
    /// resource.
    pub(crate) fn from_lock(lock: Lock) -> LockSet {
        let resources = match lock.kind {
            Kind::Set(names) => names,
            _ => vec![lock.resource],
        };
        LockSet {
            resources,
            value: lock.value,
            valid_until: lock.valid_until,
            acquired: lock.acquired,
            extensions: lock.extensions,
            nodes: lock.nodes,
        }
    }

    /// A copy of `set` (for an extension through [`Lock`]).
    pub(crate) fn of_set(set: &LockSet) -> LockSet {
        LockSet {
            resources: set.resources.clone(),
            value: set.value,
            valid_until: set.valid_until,
            acquired: set.acquired,
            extensions: set.extensions,
            nodes: set.nodes,
        }
    }
}

impl fmt::Debug for LockSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockSet")
            .field(
                "resources",
                &self
                    .resources
                    .iter()
                    .map(|r| String::from_utf8_lossy(r))
                    .collect::<Vec<_>>(),
            )
            .field("value", &self.value())
            .field("validity", &self.validity())
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// The names of a set as reports show them: joined by `", "`.
pub(crate) fn set_name(resources: &[Vec<u8>]) -> Vec<u8> {
    resources.join(&b", "[..])
}

/// The keys and the two arguments (value, ttl) of a set's scripts.
pub(crate) fn keys(resources: &[Vec<u8>]) -> Vec<&[u8]> {
    resources.iter().map(|r| &r[..]).collect()
}
