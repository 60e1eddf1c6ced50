//! The rounds of fenced locks (see `kind/fenced.rs` for the kind: its values, scripts, replies and invariants).

use std::time::Duration;

use bytes::BytesMut;

use crate::net::NodeSet;
use crate::redlock::engine::pipeline::Kind;
use crate::redlock::engine::release::Tally;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::{Engine, settle};
use crate::redlock::error::{Outcome, Report, Result};
use crate::redlock::kind::fenced::{
    FencedLock, MAX_CONFIRMS, counter_key_for, fence_vote, fenced_vote,
};
use crate::redlock::kind::lock::{Kind as LockKind, Lock};
use crate::redlock::kind::script_vote;
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Vote};
use crate::redlock::scripts;
use crate::redlock::scripts::Script;
use crate::resp::Decimal;
use crate::time::later;

impl<N: Nodes, C: Clock> Engine<N, C> {
    #[allow(clippy::type_complexity)]
    pub(crate) async fn attempt_fenced(
        &self,
        resource: &[u8],
        value: crate::redlock::token::Value,
        ttl: Duration,
        ttl_ms: u64,
    ) -> Result<std::result::Result<FencedLock, (Failure, Report)>> {
        let n = self.fanout.len();
        let counter = counter_key_for(resource, self.fanout.routed());
        let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let keys: [&[u8]; 2] = [resource, &counter];
        let round = self
            .acquire_scripted(
                lua::ACQUIRE_FENCED,
                (&keys, &[&value, ttl_arg.as_bytes()]),
                (ttl, ttl_ms),
                fenced_vote,
            )
            .await;
        let (start, quorum, status, outcomes, nodes, token) = (
            round.start,
            round.quorum,
            round.status,
            round.outcomes,
            round.nodes,
            round.count,
        );
        let release = |token: u64| {
            let mut buf = BytesMut::new();
            let t = Decimal::new(i64::try_from(token).unwrap_or(i64::MAX));
            lua::eval(
                &mut buf,
                lua::RELEASE_FENCED,
                true,
                &keys,
                &[&value, t.as_bytes()],
            );
            let mut round = self.fanout.release_round(self.clock.now());
            round.send_to(nodes, &buf, 1);
        };
        let valid_until = match settle(status, &quorum, self.clock.now()) {
            Ok(valid_until) => valid_until,
            Err(failure) => {
                let mut buf = BytesMut::new();
                scripts::call(&mut buf, Script::Release, true, resource, &value, 0);
                let mut round = self.fanout.release_round(self.clock.now());
                round.send_to(nodes, &buf, 1);
                return Ok(Err((
                    failure,
                    self.report(resource, outcomes, quorum.quorum()),
                )));
            }
        };
        // Round 2 (again while a majority finds the candidate stale): the confirmation, by a majority of
        // all N before the lease's end. See the module docs for why that is all the argument needs.
        let majority = self.quorum();
        let counter_only: [&[u8]; 1] = [&counter];
        let mut token = token.max(1);
        let mut acks = vec![Outcome::NotAwaited; n];
        for _ in 0..MAX_CONFIRMS {
            if self.clock.now() >= valid_until {
                break;
            }
            let t = Decimal::new(i64::try_from(token).unwrap_or(i64::MAX));
            let (mut yes, mut no, mut seen) = (0usize, 0usize, 0u64);
            acks.iter_mut().for_each(|a| *a = Outcome::NotAwaited);
            self.pipelined(
                Kind::Normal,
                NodeSet::ALL,
                1,
                later(self.clock.now(), self.config.round_timeout).min(valid_until),
                majority,
                |buf, full| lua::eval(buf, lua::FENCE, full, &counter_only, &[t.as_bytes()]),
                |_, (node, source), reply| {
                    let now = self.clock.now();
                    let (vote, outcome, counter) = fence_vote(&reply);
                    let (vote, outcome) = self.counted_from(source, (vote, outcome), now, None);
                    self.votes[node].count(&outcome);
                    acks[node] = outcome;
                    seen = seen.max(counter);
                    // Only a confirmation read before the lease's end counts: it ran on the node before then.
                    yes += usize::from(vote == Vote::Yes && now < valid_until);
                    no += usize::from(vote != Vote::Yes || now >= valid_until);
                    if yes >= majority || n - no < majority {
                        0
                    } else {
                        majority - yes
                    }
                },
            )
            .await;
            if yes >= majority && self.clock.now() < valid_until {
                return Ok(Ok(FencedLock {
                    lock: Lock {
                        resource: resource.to_vec(),
                        value,
                        valid_until,
                        acquired: start,
                        extensions: 0,
                        pending_ttl: None,
                        nodes,
                        kind: LockKind::Plain,
                    },
                    token,
                }));
            }
            if seen < token {
                break; // not a stale candidate: nodes failed or were too slow; a new candidate would not help
            }
            token = seen.saturating_add(1);
        }
        release(token);
        let failure = Failure::Unavailable;
        Ok(Err((failure, self.report(resource, acks, majority))))
    }

    /// Releases a fenced lock: every node that deletes the key raises the counter to the token first.
    pub(crate) async fn unlock_fenced(&self, lock: &Lock, token: u64) -> Result<usize> {
        let quorum = self.quorum();
        let deadline = later(self.clock.now(), self.config.round_timeout);
        let mut tally = Tally::new(&self.votes, self.fanout.len(), quorum, lock.nodes);
        let counter = counter_key_for(&lock.resource, self.fanout.routed());
        let keys: [&[u8]; 2] = [&lock.resource, &counter];
        let t = Decimal::new(i64::try_from(token).unwrap_or(i64::MAX));
        self.pipelined(
            Kind::Release,
            lock.nodes,
            1,
            deadline,
            quorum,
            |buf, full| {
                lua::eval(
                    buf,
                    lua::RELEASE_FENCED,
                    full,
                    &keys,
                    &[&lock.value, t.as_bytes()],
                )
            },
            |_, (node, _), reply| tally.vote(node, script_vote(&reply)),
        )
        .await;
        tally.finish(self, &lock.resource)
    }
}
