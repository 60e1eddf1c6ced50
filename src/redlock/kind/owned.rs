//! Reentrant locks, opt-in, by owner: [`Owner`], asked with [`Request::owned`](crate::redlock::Request::owned);
//! each hold a [`Lock`] of kind [`Kind::Owned`]. Here the owner, the holds, the rounds and what their replies
//! mean.
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

use std::fmt;
use std::time::Duration;

use bytes::BytesMut;

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::Engine;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::reply::script_vote;
use crate::redlock::engine::scripted::{Reading, Scripted};
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::settle;
use crate::redlock::error::{Error, Outcome, Report, Result};
use crate::redlock::kind::{Kind, Line, Lock};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Vote};
use crate::redlock::token;
use crate::resp::{Decimal, Value};

/// Who holds a reentrant lock: a random value (40 hex digits) shared by every acquisition of one owner. Clone it
/// into every thread or task that acts as that owner.
#[derive(Clone, PartialEq, Eq)]
pub struct Owner {
    pub(crate) value: token::Value,
}

impl Owner {
    /// The owner's value, as stored in the keys it holds.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.value).unwrap_or_default()
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Owner").field(&self.as_str()).finish()
    }
}

/// One hold of an owner's reentrant lock, as its acquisition left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hold {
    /// This acquisition's id: its field in the holds hash.
    pub(crate) id: token::Value,
    /// The number of holds the key had after this acquisition (the largest among the nodes counted).
    pub(crate) holds: u64,
}

/// An owner's hold waits in a line of the owner's for the resource: a nested hold never waits behind a waiter
/// for the lock its owner holds. Woken by a release of the resource, probing it.
pub(crate) fn line(owner: &Owner, resource: &[u8]) -> Line {
    Line {
        key: [&b"\0owned"[..], &owner.value[..], resource].concat(),
        grouped: vec![resource.to_vec()],
        ..Line::of_resource(resource)
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
            let (vote, outcome) = crate::redlock::engine::reply::script_vote(reply);
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

/// One reentrant acquisition round, adding the hold `hold`; on a failure the hold is undone everywhere it was sent.
pub(crate) async fn attempt<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    owner: &Owner,
    resource: &[u8],
    hold: token::Value,
    (ttl, ttl_ms): (Duration, u64),
) -> std::result::Result<Lock, (Failure, Report)> {
    let counter = count_key(resource, engine.fanout.routed());
    let keys: [&[u8]; 2] = [resource, &counter];
    let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    let round = engine
        .acquire_scripted(
            lua::ACQUIRE_REENTRANT,
            (&keys, &[&owner.value, &hold, ttl_arg.as_bytes()]),
            (ttl, ttl_ms),
            Reading::ToVerdict,
            |_, reply| vote(reply),
        )
        .await;
    let (quorum, status, outcomes, nodes, holds) = (
        round.quorum,
        round.status,
        round.outcomes,
        round.nodes,
        round.count,
    );
    let failure = match settle(status, &quorum, engine.clock.now()) {
        Ok(valid_until) => {
            return Ok(Lock::new(
                Lease::new(
                    resource.to_vec(),
                    owner.value,
                    (round.start, valid_until),
                    nodes,
                ),
                Kind::Owned(owner.clone(), Some(Hold { id: hold, holds })),
            ));
        }
        Err(failure) => failure,
    };
    // Undo on every node the attempt was sent to, without waiting: whatever a node answered (or did not: a
    // reply lost to a reset or a hang may follow a write that happened), the release removes this attempt's
    // hold if it is there and nothing otherwise.
    if nodes != NodeSet::EMPTY {
        let mut buf = BytesMut::new();
        // In full (`EVAL`), not by hash: nobody reads this reply, so a node that lost the script (`SCRIPT FLUSH`)
        // would refuse a hash unseen and keep this attempt's hold for its whole lease. Undos are rare: only
        // failed attempts pay the script's bytes.
        lua::eval(
            &mut buf,
            lua::RELEASE_REENTRANT,
            true,
            &keys,
            &[&owner.value, &hold],
        );
        let mut round = engine.fanout.release_round(engine.clock.now());
        round.send_to(nodes, &buf, 1);
    }
    Err((failure, engine.report(resource, outcomes, quorum.quorum())))
}

/// One release round of the hold `hold` of the lease's owner (its value) by `script` ([`lua::RELEASE_REENTRANT`],
/// or the tests' control), on every node its acquisition was sent to. Releases one hold; with the number of
/// nodes that confirmed it, whether some node deleted the key (no hold was left there), so that waiters may look.
pub(crate) async fn release<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    lock: &Lease,
    hold: Option<&Hold>,
    script: lua::Lua,
) -> Result<(usize, bool)> {
    let Some(hold) = hold else {
        return Err(Error::config(
            "an owned lock without its hold: nothing of it is held",
        ));
    };
    let (resource, owner, hold) = (&lock.resource[..], &lock.value[..], &hold.id[..]);
    let counter = count_key(resource, engine.fanout.routed());
    let mut last = false;
    let released = engine
        .release_scripted(
            lock,
            resource,
            (script, &[resource, &counter], &[owner, hold]),
            |reply| {
                // The holds left (0: the key went), or -1: the key is not the owner's (it expired), so nothing
                // of this hold is there either. A nested hold removed (holds left > 0) deletes no key but is
                // this release done on that node: it counts as released.
                match reply.as_ref().map(Value::without_attributes) {
                    Ok(Value::Integer(c)) if *c >= 0 => {
                        last |= *c == 0;
                        (Vote::Yes, Outcome::Granted)
                    }
                    Ok(Value::Integer(_)) => (Vote::Taken, Outcome::NotHeld),
                    _ => script_vote(reply),
                }
            },
        )
        .await?;
    Ok((released, last))
}

/// An owned hold's extension ([`lua::EXTEND_REENTRANT`]): the key of `resource` holding the owner's `value`,
/// only while the hold's own field is there. Without a hold nothing is extended (no field is named so).
pub(crate) fn extension(
    resource: &[u8],
    value: &[u8],
    hold: Option<&Hold>,
    routed: bool,
) -> Scripted {
    extension_by(lua::EXTEND_REENTRANT, resource, value, hold, routed)
}

/// [`extension`] by `script` (the tests' control extends with [`lua::EXTEND_REENTRANT_SHORTENING`]).
pub(crate) fn extension_by(
    script: lua::Lua,
    resource: &[u8],
    value: &[u8],
    hold: Option<&Hold>,
    routed: bool,
) -> Scripted {
    Scripted {
        lua: script,
        keys: vec![resource.to_vec(), count_key(resource, routed)],
        args: vec![
            value.to_vec(),
            hold.map_or_else(Vec::new, |h| h.id.to_vec()),
        ],
    }
}

/// Undoes, unawaited and on every node, the hold `hold` an attempt of `owner` at `resource` may have added (its
/// [`Undo`](super::Undo)).
pub(crate) fn undo<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    resource: &[u8],
    owner: &Owner,
    hold: &token::Value,
) {
    let counter = count_key(resource, engine.fanout.routed());
    let mut request = BytesMut::new();
    lua::eval(
        &mut request,
        lua::RELEASE_REENTRANT,
        true,
        &[resource, &counter],
        &[&owner.value, hold],
    );
    let mut round = engine.fanout.release_round(engine.clock.now());
    round.send_to(NodeSet::ALL, &request, 1);
}
