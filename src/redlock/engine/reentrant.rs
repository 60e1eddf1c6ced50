//! The rounds of reentrant locks (see `kind/reentrant.rs` for the kind: its values, scripts, replies and invariants).

use std::time::Duration;

use bytes::BytesMut;

use crate::net::NodeSet;
use crate::redlock::engine::pipeline::Kind;
use crate::redlock::engine::release::Tally;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::{Engine, settle};
use crate::redlock::error::{Outcome, Report, Result};
use crate::redlock::kind::owner::Owner;
use crate::redlock::kind::reentrant::{ReentrantLock, count_key, vote};
use crate::redlock::kind::script_vote;
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Vote};
use crate::resp::{Decimal, Value};
use crate::time::later;

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// One reentrant acquisition round; on a failure its hold is undone everywhere it was sent.
    #[allow(clippy::type_complexity)]
    pub(crate) async fn attempt_reentrant(
        &self,
        owner: &Owner,
        resource: &[u8],
        hold: crate::redlock::token::Value,
        ttl: Duration,
        ttl_ms: u64,
    ) -> Result<std::result::Result<ReentrantLock, (Failure, Report)>> {
        let counter = count_key(resource, self.fanout.routed());
        let keys: [&[u8]; 2] = [resource, &counter];
        let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let round = self
            .acquire_scripted(
                lua::ACQUIRE_REENTRANT,
                (&keys, &[&owner.value, &hold, ttl_arg.as_bytes()]),
                (ttl, ttl_ms),
                vote,
            )
            .await;
        let (quorum, status, outcomes, nodes, holds) = (
            round.quorum,
            round.status,
            round.outcomes,
            round.nodes,
            round.count,
        );
        let failure = match settle(status, &quorum, self.clock.now()) {
            Ok(valid_until) => {
                return Ok(Ok(ReentrantLock {
                    resource: resource.to_vec(),
                    owner: owner.clone(),
                    hold,
                    valid_until,
                    acquired: round.start,
                    holds,
                    nodes,
                }));
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
            let mut round = self.fanout.release_round(self.clock.now());
            round.send_to(nodes, &buf, 1);
        }
        Ok(Err((
            failure,
            self.report(resource, outcomes, quorum.quorum()),
        )))
    }

    /// One release round of the hold `hold` of `owner` on `resource` by `script`, on `nodes` (every node its
    /// acquisition was sent to). Releases one hold; with the number of nodes that confirmed it, whether some node
    /// deleted the key (no hold was left there), so that waiters may look.
    pub(crate) async fn unlock_reentrant(
        &self,
        (resource, nodes): (&[u8], NodeSet),
        (owner, hold): (&[u8], &[u8]),
        script: lua::Lua,
    ) -> Result<(usize, bool)> {
        let quorum = self.quorum();
        let counter = count_key(resource, self.fanout.routed());
        let keys: [&[u8]; 2] = [resource, &counter];
        let mut tally = Tally::new(&self.votes, self.fanout.len(), quorum, nodes);
        let mut last = false;
        self.pipelined(
            Kind::Release,
            nodes,
            1,
            later(self.clock.now(), self.config.round_timeout),
            quorum,
            |buf, full| lua::eval(buf, script, full, &keys, &[owner, hold]),
            |_, (node, _), reply| {
                // The holds left (0: the key went), or -1: the key is not the owner's (it expired), so nothing
                // of this hold is there either. A nested hold removed (holds left > 0) deletes no key but is
                // this release done on that node: it counts as released.
                let vote = match reply.as_ref().map(Value::without_attributes) {
                    Ok(Value::Integer(c)) if *c >= 0 => {
                        last |= *c == 0;
                        (Vote::Yes, Outcome::Granted)
                    }
                    Ok(Value::Integer(_)) => (Vote::Taken, Outcome::Taken),
                    _ => script_vote(&reply),
                };
                tally.vote(node, vote)
            },
        )
        .await;
        Ok((tally.finish(self, resource)?, last))
    }
}
