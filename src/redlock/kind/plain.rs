//! The plain kind: one resource, the spec's own lock. An acquisition is `SET resource value NX PX ttl` on every
//! node at once, held if a majority granted it in time; an extension is the compare-and-pexpire of the key and a
//! release its compare-and-delete, each native or scripted per node (the engine's compare-and-X rounds,
//! `engine/compare.rs`; releases in flight go out folded, `engine/fold.rs`). Batches of plain locks are acquired
//! and released together (`engine/batch.rs`); a waiting request for one plain resource queues on the nodes
//! (`queued.rs`).

use std::time::Duration;

use bytes::BytesMut;

use crate::net::NodeSet;
use crate::redlock::engine::Engine;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::reply::{grant_vote, script_vote, set_vote};
use crate::redlock::engine::scripted::Reading;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::untouched::Untouched;
use crate::redlock::error::{Outcome, Report, Result};
use crate::redlock::kind::queued::{Gate, HandOn, Handed};
use crate::redlock::kind::{Kind, Lock};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Quorum, Status};
use crate::redlock::scripts;
use crate::redlock::token;
use crate::resp::{Decimal, Value};
use crate::time::later;

/// One acquisition round. `Err` carries why it failed and every node's outcome; partial grants have been
/// released by then.
pub(crate) async fn attempt<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    resource: &[u8],
    value: token::Value,
    (ttl, ttl_ms): (Duration, u64),
) -> std::result::Result<Lock, (Failure, Report)> {
    let n = engine.fanout.len();
    let mut request = BytesMut::with_capacity(64 + resource.len());
    scripts::acquire(&mut request, resource, &value, ttl_ms);
    engine.note_ttl(ttl_ms);
    // The clock starts before the first byte is sent, as the spec requires.
    let start = engine.clock.now();
    let mut quorum = Quorum::new(n, start, ttl, engine.config.allowance(ttl));
    let mut round =
        engine.lease_round(later(start, engine.config.round_timeout).min(quorum.deadline()));
    // Nodes still answering (behind this client's own queue, under overload) are waited for, up to a few
    // round lengths and never past a third of the lease: a lock that spent more of its lease being acquired
    // would leave a guard no room for its first renewal (due at a third of the TTL; `check_guard_ttl` allows
    // for an acquisition of one round timeout), and would be handed to `hold()` already lost. (A vote after
    // the validity would count for nothing anyway; a third of the TTL always comes first.)
    round.patient_until(
        engine
            .patient_from(start)
            .min(quorum.deadline())
            .min(later(start, ttl / 3)),
    );
    let nodes = round.send_all(&request, 1);
    let mut untouched = Untouched::new();
    untouched.sent(NodeSet::ALL, 1);
    let mut outcomes = vec![Outcome::NotAwaited; n];
    let mut status = Status::Pending;
    round.need(quorum.votes_to_decide());
    // One request per node, and more to some: a node's last outcome is its vote (`id.seq`: which request).
    while let Some((id, reply)) = round.next().await {
        let node = id.node;
        let now = engine.clock.now();
        let source = round.source(node);
        let (vote, outcome) = set_vote(reply);
        untouched.answered(node, outcome == Outcome::Taken);
        let (vote, outcome) = engine.counted_from((source, resource), (vote, outcome), now, None);
        engine.votes[node].count(&outcome);
        if quorum.answered(node, id.seq as usize, vote) {
            outcomes[node] = outcome;
        }
        status = quorum.vote(node, vote, now);
        if status == Status::Pending {
            // A split's "taken" votes are asked again (`Quorum::take_back_taken`).
            let again = quorum.take_back_taken();
            for node in (0..n.min(64)).filter(|&node| again.contains(node)) {
                untouched.sent(round.send(node, &request, 1), 1);
            }
            status = engine.without_silent(&mut quorum, &mut outcomes);
        }
        if status != Status::Pending {
            break; // decided: slower replies are drained later; a release covers them
        }
        round.need(quorum.votes_to_decide());
    }
    drop(round);
    // The round is over: nodes that did not answer count as failed (an undecided split is a held lock, not an
    // outage).
    engine
        .conclude(
            status,
            &quorum,
            start,
            (resource, value),
            (nodes, untouched.of(nodes)),
            outcomes,
        )
        .map(|lease| Lock::new(lease, Kind::Plain))
}

/// A waiting plain request's offer behind the nodes' queue (`queued.rs`): [`lua::QUEUE_ACQUIRE`] on every node,
/// the spec's `SET NX PX` where this waiter heads the queue, decided as [`attempt`] decides.
pub(crate) async fn queued<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    resource: &[u8],
    value: token::Value,
    (ttl, ttl_ms): (Duration, u64),
    gate: &mut Gate<'_>,
) -> std::result::Result<Lock, (Failure, Report)> {
    let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    let (keys, args) = gate.with(&[resource], &[&value, ttl_arg.as_bytes()]);
    let round = engine
        .acquire_scripted(
            lua::QUEUE_ACQUIRE,
            (&keys, &args),
            (ttl, ttl_ms),
            Reading::OnAfterRefusal,
            |node, reply| {
                let (vote, outcome) = grant_vote(&gate.ungate(reply, node, Value::Integer(0)));
                (vote, outcome, 0)
            },
        )
        .await;
    // What a grant by push counts, should the attempt fail: the nodes read refusing it (each refusal counted:
    // its clock check passed), which its clean-up skips.
    let mut refused = NodeSet::EMPTY;
    for (node, outcome) in round.outcomes.iter().enumerate().take(64) {
        if round.untouched.contains(node) && *outcome == Outcome::Taken {
            refused.insert(node);
        }
    }
    gate.refusal.handed = Some(Handed {
        value,
        start: round.start,
        ttl,
        refused,
    });
    engine
        .conclude(
            round.status,
            &round.quorum,
            round.start,
            (resource, value),
            (round.nodes, round.untouched),
            round.outcomes,
        )
        .map(|lease| Lock::new(lease, Kind::Plain))
}

/// Releases a plain lock taken by a waiting request: on every node, its waiter's entry leaves the line's queue,
/// and where the key holds the lock's value it is handed on to the queue's head, or deleted with nobody waiting
/// ([`lua::QUEUE_LEAVE`] given the lock's value; the hand-off and its argument are `wait/handoff.rs`'s). Counted
/// as any release: a node that held the value confirms.
pub(crate) async fn release_handing_on<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    lock: &Lease,
    hand_on: &HandOn,
) -> Result<usize> {
    let ([queue, deadlines, handed], [id, ticket, lease_ms, line]) = hand_on.keys_and_args();
    engine
        .release_scripted(
            lock,
            &lock.resource,
            (
                lua::QUEUE_LEAVE,
                &[queue, deadlines, handed, &lock.resource],
                &[id, ticket, lease_ms, line, &lock.value],
            ),
            script_vote,
        )
        .await
}

/// Releases, unawaited and on every node, what an attempt at `resource` with `value` may have set (its [`Undo`](super::Undo)).
pub(crate) fn undo<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    resource: &[u8],
    value: &token::Value,
) {
    let mut request = BytesMut::new();
    engine.release_unawaited(&mut request, NodeSet::ALL, resource, value);
}
