//! All-or-nothing sets of resources, asked with
//! [`LockManager::request_all`](crate::redlock::LockManager::request_all): [`LockSet`], what an acquisition
//! round gives, held as a [`Lock`] of kind [`Kind::Set`].
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
//! - **A value per attempt.** Every attempt, the first and each retry (of `acquire` and of `wait`), draws a value of
//!   its own, as a plain lock's does. A failed attempt's clean-up is a compare-and-delete of *its* value, and may run
//!   late: held for room on a full node, detached from its round, sent on a later connection. Whenever it runs it
//!   deletes nothing a later attempt set. (A value reused across attempts would let a clean-up that reaches a node
//!   after the next attempt was granted there delete that attempt's keys: a set reported held on a node where it no
//!   longer is, which another client can then take.) The price: a key a failed attempt left behind (its clean-up not
//!   landed yet) blocks the next attempt on that node until the clean-up lands or the lease ends, as any other
//!   holder's key would.
//! - **After an error nothing of the set stays locked on a node that answered.** A failed attempt releases the set
//!   on every node the attempt was sent to and waits (one round timeout at most) for those releases: a node that
//!   answered the acquisition has, by the time the error is returned, also answered the release (they travel in
//!   order on one connection). A node that never answered gets the release after the acquisition, in order, when it
//!   comes back to life on the same connection; a node whose connection broke has nothing of ours unless it
//!   persisted the keys, and then they expire with the TTL.
//! - **Released and extended together**, by [`lua::RELEASE_MANY`] and [`lua::EXTEND_MANY`]: an extension extends
//!   every key only where every key still holds our value.
//! - **The restart guard counts every vote** (`Engine::counted`), as for one key.

use std::time::Instant;

use crate::net::NodeSet;
use crate::redlock::kind::lock::{Kind, Lock};
use crate::redlock::token;

/// A set of resources held together on a majority of the nodes, all with one value: what the engine's
/// acquisition round gives, handed out as a [`Lock`] of kind [`Kind::Set`].
#[derive(Debug)]
pub(crate) struct LockSet {
    pub(crate) resources: Vec<Vec<u8>>,
    pub(crate) value: token::Value,
    pub(crate) valid_until: Instant,
    /// When the acquisition round started (see [`Lock`]'s field of that name).
    pub(crate) acquired: Instant,
    pub(crate) extensions: u32,
    pub(crate) nodes: NodeSet,
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
            pending_ttl: None,
            nodes: set.nodes,
            kind: Kind::Set(set.resources),
        }
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
