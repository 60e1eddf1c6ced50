//! The rounds of set locks (see `kind/set.rs` for the kind: its values, scripts, replies and invariants).

use std::time::Duration;

use bytes::BytesMut;

use crate::redlock::engine::pipeline::Kind;
use crate::redlock::engine::release::Tally;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::{Engine, settle};
use crate::redlock::error::{Error, Outcome, Report, Result};
use crate::redlock::kind::lock::Lock;
use crate::redlock::kind::script_vote;
use crate::redlock::kind::set::{LockSet, keys, set_name};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Vote};
use crate::redlock::token;
use crate::resp::{Decimal, Value};
use crate::time::later;

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// Checks, sorts and deduplicates a set's names (in place: the caller's own copy).
    pub(crate) fn check_set(
        &self,
        mut sorted: Vec<Vec<u8>>,
        ttl: Duration,
    ) -> Result<(Vec<Vec<u8>>, u64)> {
        let ttl_ms = self.config.check_ttl(ttl)?;
        if sorted.is_empty() {
            return Err(Error::config("the set of resources is empty"));
        }
        if sorted.iter().any(Vec::is_empty) {
            return Err(Error::config("a resource name in the set is empty"));
        }
        sorted.sort_unstable();
        sorted.dedup();
        Ok((sorted, ttl_ms))
    }

    pub(crate) async fn attempt_many(
        &self,
        sorted: &[Vec<u8>],
        value: token::Value,
        ttl: Duration,
        ttl_ms: u64,
    ) -> std::result::Result<LockSet, (Failure, Report)> {
        let names = keys(sorted);
        let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let round = self
            .acquire_scripted(
                lua::ACQUIRE_MANY,
                (&names, &[&value, ttl_arg.as_bytes()]),
                (ttl, ttl_ms),
                |reply| {
                    let (vote, outcome) = script_vote(reply);
                    (vote, outcome, 0)
                },
            )
            .await;
        let (quorum, outcomes, nodes, start) =
            (round.quorum, round.outcomes, round.nodes, round.start);
        match settle(round.status, &quorum, self.clock.now()) {
            Ok(valid_until) => Ok(LockSet {
                resources: sorted.to_vec(),
                value,
                valid_until,
                acquired: start,
                extensions: 0,
                nodes,
            }),
            Err(failure) => {
                // Nothing of the set may stay: release everywhere it was sent, and wait for those replies.
                let mut release = BytesMut::new();
                lua::eval(&mut release, lua::RELEASE_MANY, true, &names, &[&value]);
                let mut round = self
                    .fanout
                    .release_round(later(self.clock.now(), self.config.round_timeout));
                round.send_to(nodes, &release, 1);
                while round.next().await.is_some() {}
                drop(round);
                Err((
                    failure,
                    self.report(&set_name(sorted), outcomes, quorum.quorum()),
                ))
            }
        }
    }

    /// Releases the set `lock` holds (`names`: every key of it) where its acquisition was sent.
    pub(crate) async fn unlock_many(&self, lock: &Lock, names: &[Vec<u8>]) -> Result<usize> {
        let quorum = self.quorum();
        let deadline = later(self.clock.now(), self.config.round_timeout);
        let mut tally = Tally::new(&self.votes, self.fanout.len(), quorum, lock.nodes);
        let keys = keys(names);
        self.pipelined(
            Kind::Release,
            lock.nodes,
            1,
            deadline,
            quorum,
            |buf, full| lua::eval(buf, lua::RELEASE_MANY, full, &keys, &[&lock.value]),
            |_, (node, _), reply| {
                // The number of keys deleted: any is "released here".
                let vote = match reply.as_ref().map(Value::without_attributes) {
                    Ok(Value::Integer(k)) if *k > 0 => (Vote::Yes, Outcome::Granted),
                    _ => script_vote(&reply),
                };
                tally.vote(node, vote)
            },
        )
        .await;
        tally.finish(self, &set_name(names))
    }
}
