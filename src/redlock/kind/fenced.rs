//! Fencing tokens across N masters, asked with [`Request::fenced`](crate::redlock::Request::fenced): the token
//! is [`Lock::token`] (and [`Guard::token`](crate::redlock::Guard::token)), held as a [`Lock`] of kind
//! [`Kind::Fenced`]. Here the counters' keys, the rounds and what their replies mean.
//!
//! A fencing token is a number handed out with a lock that strictly increases across every successful
//! acquisition of the resource, by anyone. The protected resource accepts a write only if its token is at least
//! the largest it has seen ([`lua::FENCED_WRITE`] does that for a resource that is itself a Redis key), so a
//! holder that lost its lock without knowing (paused, partitioned) cannot overwrite the work of the next holder.
//!
//! # The design
//!
//! Each node keeps a counter per resource, in the key `muxlock:fence:<resource>` (it has no expiry).
//!
//! 1. **Acquire** (round 1): each node runs [`lua::ACQUIRE_FENCED`]: `SET resource value NX PX ttl` and, only if
//!    that set the key, reads the counter, atomically. The lock is decided as any Redlock acquisition. The
//!    *candidate* token `t` is one more than the largest counter among the grants counted for the majority. Round
//!    1 writes no counter.
//! 2. **Confirm** (round 2, *after* the lock is held): every node (all N) runs [`lua::FENCE`]: if its counter is
//!    below `t` it sets it to `t` and confirms; otherwise it changes nothing and answers with its counter. The
//!    token is handed out only once a majority of all N confirmed it, counting only nodes the restart guard
//!    trusts and only confirmations read **before the lock's validity end** `T`. If a majority found `t` stale,
//!    the next candidate is one more than the largest counter they answered, and round 2 runs again (at most
//!    three times in all); otherwise the lock is released and the attempt fails ([`Error::Quorum`]).
//! 3. **Release** runs [`lua::RELEASE_FENCED`]: a node raises its counter to `t` before it deletes the key.
//!
//! Taking the maximum over the acquiring majority alone is not enough: with counters 10, 1, 1 on three nodes, A
//! acquires on nodes 1–2 and gets 11, then B acquires on nodes 2–3 and gets 3. The confirmation makes a majority
//! hold 11 before A uses its token, and B's confirmation meets one of them.
//!
//! # Why tokens strictly increase
//!
//! Let A hold the lock with token `t_A`: a majority `W_A` confirmed it, each confirmation read before `T_A`, the
//! end of A's lease (as last confirmed: renewals only move it later), so each ran on its node before `T_A`, and
//! left that node's counter at least `t_A`. Let B be a later successful fenced acquisition, with token `t_B`
//! confirmed by a majority `W_B`.
//!
//! - B's confirmations run after B **holds** the lock: round 2 is sent only once round 1 has a majority. B's
//!   round 1 succeeded on a node `y` of A's acquiring majority only after A's key left `y`: released by A (after
//!   A's confirmations, which came before A handed out its token), or expired, at `T_A` or later (the Redlock
//!   timing assumption, covered by the lease's drift allowance). So every confirmation of B runs after every
//!   counted confirmation of A.
//! - `W_B` meets `W_A` in some node `z`. When B's confirmation ran on `z`, `z`'s counter was at least `t_A`, and
//!   a node confirms only a candidate above its counter: `t_B > t_A`.
//!
//! By induction over the holders, in the order the lock's mutual exclusion puts them, every token is larger than
//! every earlier one. **Nothing in the argument depends on how long any client's rounds take**: a client with a
//! long round timeout, or one that reads its replies late (descheduled, overloaded), counts only confirmations
//! that ran after its own lock was held. (Taking the counter in round 1 would rely on every client bounding its
//! rounds by this manager's round timeout, which nothing enforces: `tests/api/fenced.rs`,
//! `a_slow_client_never_gets_a_smaller_token_than_an_earlier_holder`, runs a history where a slow client then
//! gets a smaller token than an earlier holder.)
//!
//! **A guard** (a fenced request's [`hold`](crate::redlock::Request::hold)) keeps its token for its whole life: renewals
//! extend the key with the usual compare-and-pexpire and never touch the counter. The argument holds with `T` the
//! end of the lease as last confirmed, which renewals only move later; the guard's release is the fenced release.
//!
//! # Limits
//!
//! - **The token is exactly as safe as the lock's own timing assumption** (bounded clock drift, bounded pauses of
//!   the nodes' expiry): if a key expires early, two holders may overlap and the older token can still be used
//!   against a resource that has seen the newer one. That is what the fence is for: the resource rejects it.
//! - **Counters must survive a restart** (`appendonly yes`, `appendfsync always`). A node that restarts without
//!   its data comes back with counter 0, and once the restart guard trusts it again it counts like any other; if
//!   it also held the largest value, a later token can repeat an older one. The alternative — not counting a
//!   restarted node for tokens until it has been re-seeded with the majority's maximum — is **not implemented**.
//!   (Every confirmation goes to all N nodes, so the next fenced holder re-seeds a node that missed earlier
//!   ones.)
//! - **Counters are exact up to 2^53** (Lua numbers are doubles).
//!
//! # Cost
//!
//! Two round trips to acquire (the acquisition, then the confirmation by a majority of all N), one to release:
//! one more than a plain lock; a third only when a majority finds the candidate stale (a history like the one
//! above). The confirmation needs a majority of all N up, as the acquisition does.

use std::time::Duration;

use bytes::BytesMut;

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::Engine;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::pipeline::Purpose;
use crate::redlock::engine::reply::{grant_vote, script_vote};
use crate::redlock::engine::scripted::Reading;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::settle;
use crate::redlock::error::{Outcome, Report, Result};
use crate::redlock::kind::{Kind, Lock};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Vote};
use crate::redlock::scripts::{self, Script};
use crate::redlock::token;
use crate::resp::{Decimal, Value};
use crate::time::later;

/// The counter key of `resource`: `muxlock:fence:<resource>`. (On a manager with a member that is a Redis
/// Cluster, an untagged resource's counter is `muxlock:fence:{<resource>}` instead, in the resource's slot: see
/// the README, "Cluster members".)
pub fn counter_key(resource: &[u8]) -> Vec<u8> {
    [&b"muxlock:fence:"[..], resource].concat()
}

/// [`counter_key`] as a manager names it: colocated with the resource's slot when some member is a cluster
/// (`routed`; see [`derived_key`](crate::redlock::kind::derived_key)).
pub(crate) fn counter_key_for(resource: &[u8], routed: bool) -> Vec<u8> {
    crate::redlock::kind::derived_key(b"muxlock:fence:", resource, routed)
}

/// A fenced acquisition's reply: the incremented counter (granted), 0 (held), anything else failed.
pub(crate) fn fenced_vote(reply: &Reply) -> (Vote, Outcome, u64) {
    match reply.as_ref().map(Value::without_attributes) {
        Ok(Value::Integer(c)) if *c > 0 => (Vote::Yes, Outcome::Granted, c.unsigned_abs()),
        _ => {
            let (vote, outcome) = grant_vote(reply);
            (vote, outcome, 0)
        }
    }
}

/// How many confirmation rounds one attempt makes at most: the first, and one more per candidate a majority found
/// stale (a counter raised meanwhile by a holder whose confirmation this attempt's reads missed). Two suffice unless
/// the counters keep moving, which only holders of the lock can do.
pub(crate) const MAX_CONFIRMS: usize = 3;

/// A confirmation's reply: 1 confirmed; 0 or less stale, minus the node's counter (returned as the third field).
pub(crate) fn fence_vote(reply: &Reply) -> (Vote, Outcome, u64) {
    match reply.as_ref().map(Value::without_attributes) {
        Ok(Value::Integer(1)) => (Vote::Yes, Outcome::Granted, 0),
        Ok(Value::Integer(c)) if *c <= 0 => (Vote::Taken, Outcome::Taken, c.unsigned_abs()),
        _ => {
            let (vote, outcome) = script_vote(reply);
            (vote, outcome, 0)
        }
    }
}

/// One fenced acquisition: the grant (round 1), then the token's confirmation (round 2, again while a majority
/// finds the candidate stale). On a failure the key is released where the attempt was sent.
pub(crate) async fn attempt<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    resource: &[u8],
    value: token::Value,
    (ttl, ttl_ms): (Duration, u64),
) -> std::result::Result<Lock, (Failure, Report)> {
    let n = engine.fanout.len();
    let counter = counter_key_for(resource, engine.fanout.routed());
    let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    let keys: [&[u8]; 2] = [resource, &counter];
    let round = engine
        .acquire_scripted(
            lua::ACQUIRE_FENCED,
            (&keys, &[&value, ttl_arg.as_bytes()]),
            (ttl, ttl_ms),
            Reading::ToVerdict,
            |_, reply| fenced_vote(reply),
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
        let mut round = engine.fanout.release_round(engine.clock.now());
        round.send_to(nodes, &buf, 1);
    };
    let valid_until = match settle(status, &quorum, engine.clock.now()) {
        Ok(valid_until) => valid_until,
        Err(failure) => {
            let mut buf = BytesMut::new();
            scripts::call(&mut buf, Script::Release, true, resource, &value, 0);
            let mut round = engine.fanout.release_round(engine.clock.now());
            round.send_to(nodes, &buf, 1);
            return Err((failure, engine.report(resource, outcomes, quorum.quorum())));
        }
    };
    // Round 2 (again while a majority finds the candidate stale): the confirmation, by a majority of
    // all N before the lease's end. See the module docs for why that is all the argument needs.
    let majority = engine.quorum();
    let counter_only: [&[u8]; 1] = [&counter];
    let mut token = token.max(1);
    let mut acks = vec![Outcome::NotAwaited; n];
    for _ in 0..MAX_CONFIRMS {
        if engine.clock.now() >= valid_until {
            break;
        }
        let t = Decimal::new(i64::try_from(token).unwrap_or(i64::MAX));
        let (mut yes, mut no, mut seen) = (0usize, 0usize, 0u64);
        acks.iter_mut().for_each(|a| *a = Outcome::NotAwaited);
        engine
            .pipelined(
                Purpose::Lease,
                NodeSet::ALL,
                1,
                later(engine.clock.now(), engine.config.round_timeout).min(valid_until),
                majority,
                |buf, full| lua::eval(buf, lua::FENCE, full, &counter_only, &[t.as_bytes()]),
                |_, (node, source), reply| {
                    let now = engine.clock.now();
                    let (vote, outcome, counter) = fence_vote(&reply);
                    let (vote, outcome) =
                        engine.counted_from((source, counter_only[0]), (vote, outcome), now, None);
                    engine.votes[node].count(&outcome);
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
        if yes >= majority && engine.clock.now() < valid_until {
            return Ok(Lock::new(
                Lease::new(resource.to_vec(), value, (start, valid_until), nodes),
                Kind::Fenced(Some(token)),
            ));
        }
        if seen < token {
            break; // not a stale candidate: nodes failed or were too slow; a new candidate would not help
        }
        token = seen.saturating_add(1);
    }
    release(token);
    let failure = Failure::Unavailable;
    Err((failure, engine.report(resource, acks, majority)))
}

/// Releases a fenced lock: every node that deletes the key raises the counter to the token first.
pub(crate) async fn release<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    lock: &Lease,
    token: u64,
) -> Result<usize> {
    let counter = counter_key_for(&lock.resource, engine.fanout.routed());
    let t = Decimal::new(i64::try_from(token).unwrap_or(i64::MAX));
    engine
        .release_scripted(
            lock,
            &lock.resource,
            (
                lua::RELEASE_FENCED,
                &[&lock.resource, &counter],
                &[&lock.value, t.as_bytes()],
            ),
            script_vote,
        )
        .await
}
