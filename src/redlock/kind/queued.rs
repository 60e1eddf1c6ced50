//! A plain resource's attempt behind the nodes' queue, for a waiting request: a waiting process's entry in the
//! nodes' per-resource queue, its scripts ([`lua::QUEUE_ACQUIRE`], [`lua::QUEUE_LEAVE`]), what their replies mean,
//! and the queued acquisition round: the spec's `SET NX PX` behind the queue, decided by the plain [`Quorum`].
//! The design and its safety argument are `wait/handoff.rs`'s module doc.

use std::time::Duration;

use bytes::BytesMut;

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::Engine;
use crate::redlock::engine::reply::is_noscript;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::error::{Outcome, Report, Result};
use crate::redlock::kind::{Kind, Lock, Undo};
use crate::redlock::lua::{self, Lua};
use crate::redlock::quorum::{Failure, Quorum, Status, Vote};
use crate::resp::{Decimal, Value};
use crate::time::later;

/// The start of every turn key: `muxlock:turn:<16 hex digits of the waiter's id>:<resource>`.
pub(crate) const TURN_PREFIX: &[u8] = b"muxlock:turn:";
/// The length of a waiter's id (hex digits).
const ID_LEN: usize = 16;

/// The resource a turn key is about, if `key` is one.
pub(crate) fn resource_of_turn(key: &[u8]) -> Option<&[u8]> {
    let rest = key.strip_prefix(TURN_PREFIX)?;
    match rest.get(ID_LEN) {
        Some(b':') => rest.get(ID_LEN + 1..),
        _ => None,
    }
}

/// How long a queue entry lives on a node without a refresh: 4 round timeouts, at least 1 s. A waiter refreshes it
/// every quarter of this; a dead waiter holds up the queue for at most this plus a quarter.
pub(crate) fn entry_lease(round_timeout: Duration) -> Duration {
    round_timeout.saturating_mul(4).max(Duration::from_secs(1))
}

/// A waiting process's place in the nodes' queue of one resource.
#[derive(Debug)]
pub(crate) struct Entry {
    id: Vec<u8>,
    ticket: Vec<u8>,
    lease_ms: Vec<u8>,
    pub(crate) lease: Duration,
    queue: Vec<u8>,
    deadlines: Vec<u8>,
    pub(crate) turn: Vec<u8>,
}

impl Entry {
    /// A new entry for `resource`: id `random` (16 hex digits), ticket `micros` (when the waiter began to wait, on
    /// the wall clock: the same on every node's copy of the queue, whatever order the joins reach the nodes in).
    pub(crate) fn new(
        random: u64,
        micros: u128,
        round_timeout: Duration,
        resource: &[u8],
    ) -> Entry {
        let id = format!("{random:016x}").into_bytes();
        let lease = entry_lease(round_timeout);
        let decimal = |v: u128| {
            Decimal::new(i64::try_from(v).unwrap_or(i64::MAX))
                .as_bytes()
                .to_vec()
        };
        let with = |prefix: &[u8]| [prefix, resource].concat();
        Entry {
            ticket: decimal(micros),
            lease_ms: decimal(lease.as_millis()),
            lease,
            queue: with(b"muxlock:queue:"),
            deadlines: with(b"muxlock:queue-deadlines:"),
            turn: [TURN_PREFIX, &id, b":", resource].concat(),
            id,
        }
    }

    /// The script call, with `value` and `ttl_ms` for an acquisition (empty for a leave).
    pub(crate) fn call(
        &self,
        buf: &mut BytesMut,
        lua: Lua,
        full: bool,
        resource: &[u8],
        value: &[u8],
        ttl: &[u8],
    ) {
        lua::eval(
            buf,
            lua,
            full,
            &[resource, &self.queue, &self.deadlines],
            &[value, ttl, &self.id, &self.ticket, &self.lease_ms, resource],
        );
    }
}

/// What the nodes that refused a queued attempt said.
#[derive(Debug)]
pub(crate) struct Refusal {
    /// Some node has this waiter at the head of its queue.
    pub(crate) head: bool,
    /// Per node, the turn key's value it reported.
    pub(crate) turns: Vec<Option<i64>>,
}

/// A queued attempt's reply as a vote; a refusal's rank and turn go into `refusal`.
pub(crate) fn queue_vote(reply: &Reply, node: usize, refusal: &mut Refusal) -> (Vote, Outcome) {
    match reply {
        Ok(v) => match v.without_attributes() {
            Value::Integer(1) => (Vote::Yes, Outcome::Granted),
            // Refused, queued: `[rank, turn]`. Any other array is not the script's: a failed vote.
            Value::Array(items) if items.len() == 2 => match (&items[0], &items[1]) {
                (Value::Integer(rank), Value::Integer(turn)) => {
                    refusal.head |= *rank == 0;
                    if let Some(t) = refusal.turns.get_mut(node) {
                        *t = Some(*turn);
                    }
                    (Vote::Taken, Outcome::Taken)
                }
                _ => (
                    Vote::Failed,
                    Outcome::ErrorReply(format!("unexpected reply {v:?}")),
                ),
            },
            Value::Error(msg) | Value::BulkError(msg) => (
                Vote::Failed,
                Outcome::ErrorReply(String::from_utf8_lossy(msg).into_owned()),
            ),
            other => (
                Vote::Failed,
                Outcome::ErrorReply(format!("unexpected reply {other:?}")),
            ),
        },
        Err(e) => (Vote::Failed, Outcome::Failed(e.clone())),
    }
}

/// One queued acquisition round ([`lua::QUEUE_ACQUIRE`] on every node), decided by the plain [`Quorum`]. On a
/// failure, partial grants are released at once, as a plain attempt does; the queue is left as it was.
#[allow(clippy::type_complexity)]
pub(crate) async fn attempt<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    resource: &[u8],
    ttl: Duration,
    ttl_ms: u64,
    entry: &Entry,
    joined: bool,
) -> Result<std::result::Result<Lock, (Failure, Report, Refusal)>> {
    let value = engine
        .tokens
        .draw("drawing the lock value from the OS's randomness")?;
    // A task's future dropped before the round is decided releases what the round may have set (as an
    // acquisition attempt does, `kind/mod.rs`); once decided, `conclude` releases a failure's partial grants.
    let mut undo = Undo::new(engine, resource, &Kind::Plain, value);
    let n = engine.fanout.len();
    let ttl_digits = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    let mut request = BytesMut::with_capacity(256 + 4 * resource.len());
    entry.call(
        &mut request,
        lua::QUEUE_ACQUIRE,
        false,
        resource,
        &value,
        ttl_digits.as_bytes(),
    );
    engine.note_ttl(ttl_ms);
    // The clock starts before the first byte is sent, as the spec requires.
    let start = engine.clock.now();
    let mut quorum = Quorum::new(n, start, ttl, engine.config.allowance(ttl));
    let mut round =
        engine.lease_round(later(start, engine.config.round_timeout).min(quorum.deadline()));
    let nodes = round.send_all(&request, 1);
    let mut outcomes = vec![Outcome::NotAwaited; n];
    let mut refusal = Refusal {
        head: false,
        turns: vec![None; n],
    };
    let mut resent: Vec<bool> = Vec::new();
    let mut status = Status::Pending;
    round.need(quorum.votes_to_decide());
    // One request awaited per node at a time (a resend goes after its node's `NOSCRIPT`): an outcome is
    // its node's latest request's.
    while let Some((id, reply)) = round.next().await {
        let node = id.node;
        if is_noscript(&reply) && !resent.get(node).copied().unwrap_or(false) {
            resent.resize(n, false);
            resent[node] = true;
            request.clear();
            entry.call(
                &mut request,
                lua::QUEUE_ACQUIRE,
                true,
                resource,
                &value,
                ttl_digits.as_bytes(),
            );
            round.send(node, &request, 1);
            continue;
        }
        let now = engine.clock.now();
        let (vote, outcome) = engine.counted_from(
            (round.source(node), resource),
            queue_vote(&reply, node, &mut refusal),
            now,
            None,
        );
        engine.votes[node].count(&outcome);
        outcomes[node] = outcome;
        status = quorum.vote(node, vote, now);
        if status != Status::Pending {
            break;
        }
        round.need(quorum.votes_to_decide());
    }
    drop(round);
    undo.disarm();
    // A waiter that never queued may have been queued by this very round on the nodes that did not grant
    // (not awaited, or refused: another waiter headed them a moment ago): with the lock, it leaves there, or
    // its entry would head those nodes' queues, unattended, for a lease. (A waiter that queued before leaves
    // everywhere as its `Queued` drops.)
    let mut others = NodeSet::EMPTY;
    if !joined {
        for (node, o) in outcomes.iter().enumerate() {
            if !matches!(o, Outcome::Granted | Outcome::Quarantined) && nodes.contains(node) {
                others.insert(node);
            }
        }
    }
    match engine.conclude(status, &quorum, start, (resource, value), nodes, outcomes) {
        Ok(lease) => {
            if others != NodeSet::EMPTY {
                leave(engine, resource, entry, others);
            }
            Ok(Ok(Lock::new(lease, Kind::Plain)))
        }
        Err((failure, report)) => Ok(Err((failure, report, refusal))),
    }
}

/// Takes `entry` off the queue on `nodes` ([`lua::QUEUE_LEAVE`]), without waiting for the replies: in full,
/// as every release (nobody reads a `NOSCRIPT` here).
pub(crate) fn leave<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    resource: &[u8],
    entry: &Entry,
    nodes: NodeSet,
) {
    let mut request = BytesMut::with_capacity(256 + 4 * resource.len());
    entry.call(&mut request, lua::QUEUE_LEAVE, true, resource, b"", b"0");
    let mut round = engine.fanout.release_round(engine.clock.now());
    round.send_to(nodes, &request, 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_key_names_its_resource() {
        assert_eq!(
            resource_of_turn(b"muxlock:turn:0123456789abcdef:jobs:42"),
            Some(&b"jobs:42"[..])
        );
        assert_eq!(
            resource_of_turn(b"muxlock:turn:0123456789abcdef:"),
            Some(&b""[..])
        );
        assert_eq!(resource_of_turn(b"muxlock:turn:0123:jobs"), None);
        assert_eq!(resource_of_turn(b"jobs"), None);
        assert_eq!(
            entry_lease(Duration::from_millis(50)),
            Duration::from_secs(1)
        );
        assert_eq!(entry_lease(Duration::from_secs(1)), Duration::from_secs(4));
    }
}
