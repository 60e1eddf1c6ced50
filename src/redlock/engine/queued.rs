//! The queued acquisition round (the design is `wait/handoff.rs`'s module doc): the spec's `SET NX PX` behind the
//! nodes' queue ([`lua::QUEUE_ACQUIRE`]), decided by the plain [`Quorum`], and leaving the queue.

use std::time::Duration;

use bytes::BytesMut;

use crate::net::NodeSet;
use crate::redlock::engine::Engine;
use crate::redlock::engine::any::{Undo, Want};
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::error::{Outcome, Report, Result};
use crate::redlock::kind::is_noscript;
use crate::redlock::kind::lock::Lock;
use crate::redlock::kind::queued::{Entry, Refusal, queue_vote};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Quorum, Status};
use crate::resp::Decimal;
use crate::time::later;

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// One queued acquisition round ([`lua::QUEUE_ACQUIRE`] on every node), decided by the plain [`Quorum`]. On a
    /// failure, partial grants are released at once, as [`Engine::attempt`] does; the queue is left as it was.
    #[allow(clippy::type_complexity)]
    pub(crate) async fn queued_attempt(
        &self,
        resource: &[u8],
        ttl: Duration,
        ttl_ms: u64,
        entry: &Entry,
        joined: bool,
    ) -> Result<std::result::Result<Lock, (Failure, Report, Refusal)>> {
        let value = self
            .tokens
            .draw("drawing the lock value from the OS's randomness")?;
        // A task's future dropped before the round is decided releases what the round may have set (as an
        // acquisition attempt does, `any.rs`); once decided, `conclude` releases a failure's partial grants.
        let want = Want::One(resource);
        let mut undo = Undo::new(self, &want, value);
        let n = self.fanout.len();
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
        self.note_ttl(ttl_ms);
        // The clock starts before the first byte is sent, as the spec requires.
        let start = self.clock.now();
        let mut quorum = Quorum::new(n, start, ttl, self.config.allowance(ttl));
        let mut round =
            self.lease_round(later(start, self.config.round_timeout).min(quorum.deadline()));
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
            let now = self.clock.now();
            let (vote, outcome) = self.counted_from(
                round.source(node),
                queue_vote(&reply, node, &mut refusal),
                now,
                None,
            );
            self.votes[node].count(&outcome);
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
        match self.conclude(status, &quorum, start, (resource, value), nodes, outcomes) {
            Ok(lock) => {
                if others != NodeSet::EMPTY {
                    self.leave_queue(resource, entry, others);
                }
                Ok(Ok(lock))
            }
            Err((failure, report)) => Ok(Err((failure, report, refusal))),
        }
    }

    /// Takes `entry` off the queue on `nodes` ([`lua::QUEUE_LEAVE`]), without waiting for the replies: in full,
    /// as every release (nobody reads a `NOSCRIPT` here).
    pub(crate) fn leave_queue(&self, resource: &[u8], entry: &Entry, nodes: NodeSet) {
        let mut request = BytesMut::with_capacity(256 + 4 * resource.len());
        entry.call(&mut request, lua::QUEUE_LEAVE, true, resource, b"", b"0");
        let mut round = self.fanout.release_round(self.clock.now());
        round.send_to(nodes, &request, 1);
    }
}
