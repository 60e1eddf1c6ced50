//! [`Lease`]: what the engine knows of a held lock, whatever its kind: the key's name and value, until when it is
//! valid, when it was acquired, and the nodes its acquisition reached. A kind (`kind/`) wraps it with what the
//! kind keeps beside it: a [`Lock`](crate::redlock::Lock) is a lease and its kind.

use std::time::{Duration, Instant};

use crate::net::NodeSet;
use crate::redlock::token;

/// A lease held on a majority of the nodes, valid until `valid_until`.
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    /// The key (for a set, its first name).
    pub(crate) resource: Vec<u8>,
    /// The value stored in the key on each node (for an owned hold, the owner's).
    pub(crate) value: token::Value,
    pub(crate) valid_until: Instant,
    /// When the acquisition round started: an extension counts a node that restarted since only if the restart
    /// guard trusts it (see `restart/mod.rs`, "Extensions").
    pub(crate) acquired: Instant,
    pub(crate) extensions: u32,
    /// The shortest TTL of an extension that some node may still run: a request of it whose reply was never read
    /// (the round was decided without it, timed out, was abandoned, or its connection dropped: bytes already
    /// sent may still arrive). Run after a later, longer extension it shortens the key there to this TTL from
    /// when it runs, so no later extension counts a lease longer than this TTL from its own start
    /// (`Engine::bounded`). `None` until an extension leaves one unanswered.
    pub(crate) pending_ttl: Option<Duration>,
    /// The nodes the acquisition's request was queued for: the others cannot hold the key, so releases and
    /// extensions skip them.
    pub(crate) nodes: NodeSet,
}

impl Lease {
    /// A lease just granted: `resource` holds `value` until `valid_until`, acquired by the round that started at
    /// `acquired` and reached `nodes`.
    pub(crate) fn new(
        resource: Vec<u8>,
        value: token::Value,
        (acquired, valid_until): (Instant, Instant),
        nodes: NodeSet,
    ) -> Lease {
        Lease {
            resource,
            value,
            valid_until,
            acquired,
            extensions: 0,
            pending_ttl: None,
            nodes,
        }
    }
}
