//! Reentrant locks, opt-in, by owner: [`Owner`], asked with [`Request::owned`](crate::redlock::Request::owned);
//! each hold a [`Lock`] of kind [`Kind::Owned`] ([`ReentrantLock`] is what the engine's acquisition round gives).
//!
//! An [`Owner`] is a random token the caller holds and passes to each acquisition: it is the key's value, so
//! reentrancy works across threads and async tasks (whoever holds the owner), not per thread. A second
//! acquisition by the same owner while the key holds it adds a hold instead of failing; each release removes
//! its own hold; the key goes with the last.
//!
//! # Invariants
//!
//! - **Holds are attributable.** Each acquisition draws a random id (40 hex digits, one per attempt); a node
//!   records the holds it granted as fields of the hash `muxlock:holds:<resource>` next to the key, one field per
//!   id, changed only by [`lua::ACQUIRE_REENTRANT`] and [`lua::RELEASE_REENTRANT`] (each atomic on its node). A
//!   release removes its own field and nothing else, and deletes the key only when no field is left.
//! - **Releases are idempotent**, so they go to every node the acquisition was sent to, whatever its outcome
//!   there: a node that never ran the acquisition (its connection was reset before the write, it was down) or
//!   already ran the release removes nothing. The undo of a failed attempt goes to every node the attempt was
//!   sent to, including those whose reply was lost (closed, reset, hung): the attempt may have run there.
//! - **The outer hold stays on a majority while it reports valid.** An owner's first acquisition holds the key on
//!   a majority `M` with at least its TTL to live from before the round started (the Redlock rule). On a node of
//!   `M` the key goes before that only when its own field is removed (by its own release) or its expiry passes:
//!   nested holds add fields and never shorten the expiry, their releases remove only their own fields, and
//!   other owners cannot write the key. So while [`Lock::is_valid`] (the lease minus drift) holds, `M`
//!   holds the key for the owner, and no other owner can get a majority. (Node restarts without persistence are
//!   the restart guard's, as for every lock.)
//! - **Every key the scripts write has an expiry**: the key and the hash share one, set in the same script.
//!
//! # Limits
//!
//! - **A release not confirmed by a majority** ([`Error::Quorum`](crate::redlock::Error::Quorum)) leaves the hold
//!   on the nodes it did not reach until its lease runs out. Releases are idempotent, so the nodes that did
//!   release it would remove nothing if the same hold's release came again.
//! - **An acquisition that runs after its own release or undo** (possible only if it waited in a queue the
//!   release overtook, which one connection per node does not allow) leaves its field: the key then stays until
//!   it expires, as a lock whose release was lost does. That costs waiting, never safety.
//! - **A node that lost the hash but kept the key** (evicted, deleted by hand) no longer knows its holds: it
//!   keeps the key until it expires rather than guess (a field `?` that no release removes). Evicting lock keys
//!   breaks every Redlock lock: run the nodes with `maxmemory-policy noeviction`.
//! - **An extension (or a guard's renewal) of one hold never shortens the key** ([`lua::EXTEND_REENTRANT`]:
//!   the expiry becomes the larger of the two), so the lock it returns may report less validity than the nodes
//!   give it: conservative, never more than a majority holds. It extends only while the hold's own field is
//!   there: a released hold cannot keep the key alive.

use crate::redlock::kind::owner::Owner;
use std::time::Instant;

use crate::net::{NodeSet, Reply};
use crate::redlock::error::Outcome;
use crate::redlock::kind::lock::{Kind, Lock};
use crate::redlock::quorum::Vote;
use crate::redlock::token;
use crate::resp::Value;

/// One hold of a reentrant lock: what the engine's acquisition round gives, handed out as a [`Lock`] of kind
/// [`Kind::Owned`].
#[derive(Debug)]
pub(crate) struct ReentrantLock {
    pub(crate) resource: Vec<u8>,
    pub(crate) owner: Owner,
    /// This acquisition's id: its field in the holds hash.
    pub(crate) hold: token::Value,
    pub(crate) valid_until: Instant,
    /// When the acquisition round started (see [`Lock`]'s field of that name).
    pub(crate) acquired: Instant,
    pub(crate) holds: u64,
    pub(crate) nodes: NodeSet,
}

impl From<ReentrantLock> for Lock {
    /// The hold as one [`Lock`]: the owner's value is the key's, the hold in its kind.
    fn from(r: ReentrantLock) -> Lock {
        Lock {
            resource: r.resource,
            value: r.owner.value,
            valid_until: r.valid_until,
            acquired: r.acquired,
            extensions: 0,
            pending_ttl: None,
            nodes: r.nodes,
            kind: Kind::Owned {
                owner: r.owner,
                hold: r.hold,
                holds: r.holds,
            },
        }
    }
}

/// The hold-count key of `resource`, colocated with the resource's slot when some member is a cluster
/// (`routed`; see [`derived_key`](crate::redlock::kind::derived_key)).
pub(crate) fn count_key(resource: &[u8], routed: bool) -> Vec<u8> {
    crate::redlock::kind::derived_key(b"muxlock:holds:", resource, routed)
}

/// A reentrant acquisition's reply: the count (granted), 0 (another owner), anything else failed.
pub(crate) fn vote(reply: &Reply) -> (Vote, Outcome, u64) {
    match reply.as_ref().map(Value::without_attributes) {
        Ok(Value::Integer(c)) if *c > 0 => (Vote::Yes, Outcome::Granted, c.unsigned_abs()),
        Ok(Value::Integer(0)) => (Vote::Taken, Outcome::Taken, 0),
        _ => {
            let (vote, outcome) = crate::redlock::kind::script_vote(reply);
            (
                if vote == Vote::Taken {
                    Vote::Failed
                } else {
                    vote
                },
                outcome,
                0,
            )
        }
    }
}
