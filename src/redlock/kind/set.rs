//! All-or-nothing sets of resources, asked with
//! [`LockManager::request_all`](crate::redlock::LockManager::request_all), held as a [`Lock`] of kind
//! [`Kind::Set`]: the names, their rounds and what their replies mean.
//!
//! # Invariants
//!
//! - **One round, one command per node.** An acquisition sends each node one [`lua::ACQUIRE_MANY`] carrying every
//!   key of the set: a node's part is atomic (Redis runs a script to its end before any other command), so a node
//!   holds all of the set for this value or none of it. The quorum is counted per set, as for one key. A node
//!   whose connection's probe shows `MSETEX` (Valkey >= 9.1, Redis >= 8.4; `engine/native.rs`) is sent
//!   `MSETEX n key value ... NX PX ttl` instead: one native command, atomic the same way (it sets every key, with
//!   the expiry, only if none of them exists, and answers 1 or 0 as the script does), without Lua; one that
//!   refuses it (its ACL) gets the script, in the same round.
//! - **Sorted, no duplicates.** The names are sorted and deduplicated before they are sent, so the same set asked
//!   in any order is the same request, and two callers with overlapping sets in different orders meet in the same
//!   key order. (Within one node there is nothing to deadlock on anyway: a script never waits; the sorting keeps
//!   requests identical and reports stable.)
//! - **A value per attempt.** Every attempt, the first and each retry (of `acquire` and of `wait`), draws a value of
//!   its own, as a plain lock's does. A failed attempt's clean-up is a compare-and-delete of *its* value, and may run
//!   late: held for room on a full node, detached from its round, sent on a later connection. Whenever it runs it
//!   deletes nothing a later attempt set. (A value reused across attempts would let a clean-up that reaches a node
//!   after the next attempt was granted there delete that attempt's keys: a set reported held on a node where it no
//!   longer is, which another client can then take.) The price: a key a failed attempt left behind (its clean-up not
//!   landed yet) blocks the next attempt on that node until the clean-up lands or the lease ends, as any other
//!   holder's key would.
//! - **After an error nothing of the set stays locked on a node that answered.** A failed attempt releases the set
//!   on every node the attempt was sent to and waits (one round timeout at most) for those releases: a node that
//!   answered the acquisition has, by the time the error is returned, also answered the release (they travel in
//!   order on one connection). A node that never answered gets the release after the acquisition, in order, when it
//!   comes back to life on the same connection; a node whose connection broke has nothing of ours unless it
//!   persisted the keys, and then they expire with the TTL.
//! - **Released and extended together**, by [`lua::RELEASE_MANY`] and [`lua::EXTEND_MANY`]: an extension extends
//!   every key only where every key still holds our value.
//! - **The restart guard counts every vote** (`Engine::counted_from`), as for one key.

use std::time::Duration;

use bytes::BytesMut;

use crate::net::NodeSet;
use crate::redlock::config::Config;
use crate::redlock::engine::Engine;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::reply::{grant_vote, script_vote};
use crate::redlock::engine::scripted::Reading;
use crate::redlock::engine::scripted::Scripted;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::settle;
use crate::redlock::error::{Error, Outcome, Report, Result};
use crate::redlock::kind::{Kind, Line, Lock};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Vote};
use crate::redlock::token;
use crate::resp::{Decimal, Value, encode_command};
use crate::time::later;

/// Checks, sorts and deduplicates a set's names (in place: the caller's own copy).
pub(crate) fn check(
    mut sorted: Vec<Vec<u8>>,
    config: &Config,
    ttl: Duration,
) -> Result<(Vec<Vec<u8>>, u64)> {
    let ttl_ms = config.check_ttl(ttl)?;
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

/// One acquisition round of the set `sorted` ([`lua::ACQUIRE_MANY`] on every node); on a failure the set is
/// released everywhere it was sent, and those releases awaited.
pub(crate) async fn attempt<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    sorted: &[Vec<u8>],
    value: token::Value,
    (ttl, ttl_ms): (Duration, u64),
) -> std::result::Result<Lock, (Failure, Report)> {
    let names = keys(sorted);
    let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    let natives = &engine.restart.natives;
    let mut natively = NodeSet::EMPTY;
    (0..engine.fanout.len().min(64))
        .filter(|&node| natives.msetex(&engine.fanout, node))
        .for_each(|node| natively.insert(node));
    let msetex = |buf: &mut BytesMut| encode_msetex(buf, &names, &value, ttl_arg.as_bytes());
    let round = engine
        .acquire_with(
            lua::ACQUIRE_MANY,
            (&names, &[&value, ttl_arg.as_bytes()]),
            (ttl, ttl_ms, Reading::ToVerdict),
            (natively, msetex, |node| natives.refused_msetex(node)),
            |_, reply| {
                let (vote, outcome) = grant_vote(reply);
                (vote, outcome, 0)
            },
        )
        .await;
    let (quorum, outcomes, nodes, start) = (round.quorum, round.outcomes, round.nodes, round.start);
    match settle(round.status, &quorum, engine.clock.now()) {
        Ok(valid_until) => Ok(Lock::new(
            Lease::new(
                sorted.first().cloned().unwrap_or_default(),
                value,
                (start, valid_until),
                nodes,
            ),
            Kind::Set(sorted.to_vec()),
        )),
        Err(failure) => {
            // Nothing of the set may stay: release everywhere it was sent, and wait for those replies.
            let mut release = BytesMut::new();
            lua::eval(&mut release, lua::RELEASE_MANY, true, &names, &[&value]);
            let mut round = engine
                .fanout
                .release_round(later(engine.clock.now(), engine.config.round_timeout));
            round.send_to(nodes, &release, 1);
            while round.next().await.is_some() {}
            drop(round);
            Err((
                failure,
                engine.report_keyed(
                    (
                        &set_name(sorted),
                        names.first().copied().unwrap_or_default(),
                    ),
                    outcomes,
                    quorum.quorum(),
                ),
            ))
        }
    }
}

/// Releases the set `lock` holds (`names`: every key of it) where its acquisition was sent.
pub(crate) async fn release<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    lock: &Lease,
    names: &[Vec<u8>],
) -> Result<usize> {
    let keys = keys(names);
    engine
        .release_scripted(
            lock,
            &set_name(names),
            (lua::RELEASE_MANY, &keys, &[&lock.value]),
            // The number of keys deleted: any is "released here".
            |reply| match reply.as_ref().map(Value::without_attributes) {
                Ok(Value::Integer(k)) if *k > 0 => (Vote::Yes, Outcome::Granted),
                _ => script_vote(reply),
            },
        )
        .await
}

/// `MSETEX n key value ... NX PX ttl`: every key of the set to `value` for `ttl` ms, if none of them exists; 1 if
/// set, 0 if not (as [`lua::ACQUIRE_MANY`]).
fn encode_msetex(buf: &mut BytesMut, keys: &[&[u8]], value: &[u8], ttl: &[u8]) {
    let n = Decimal::new(i64::try_from(keys.len()).unwrap_or(i64::MAX));
    let mut parts: Vec<&[u8]> = Vec::with_capacity(5 + 2 * keys.len());
    parts.extend_from_slice(&[b"MSETEX", n.as_bytes()]);
    for key in keys {
        parts.extend_from_slice(&[key, value]);
    }
    parts.extend_from_slice(&[b"NX", b"PX", ttl]);
    encode_command(&parts, buf);
}

/// The names of a set as reports show them: joined by `", "`.
pub(crate) fn set_name(resources: &[Vec<u8>]) -> Vec<u8> {
    resources.join(&b", "[..])
}

/// A set's waiting line: all its names together (not blocking the waiters of one of them), woken by a release of
/// any, probing them all (every one must come free).
pub(crate) fn line(names: &[Vec<u8>]) -> Line {
    Line {
        key: [&b"\0set\0"[..], &names.join(&b"\0"[..])].concat(),
        grouped: names.to_vec(),
        probed: names.to_vec(),
        name: set_name(names),
        any: false,
        marks: false,
    }
}

/// The keys and the two arguments (value, ttl) of a set's scripts.
pub(crate) fn keys(resources: &[Vec<u8>]) -> Vec<&[u8]> {
    resources.iter().map(|r| &r[..]).collect()
}

/// The set's extension ([`lua::EXTEND_MANY`]): every key, only where every key still holds `value`.
pub(crate) fn extension(names: &[Vec<u8>], value: &[u8]) -> Scripted {
    Scripted {
        lua: lua::EXTEND_MANY,
        keys: names.to_vec(),
        args: vec![value.to_vec()],
    }
}

/// Releases, unawaited and on every node, what an attempt at the set `names` with `value` may have set (its
/// [`Undo`](super::Undo)).
pub(crate) fn undo<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    names: &[Vec<u8>],
    value: &token::Value,
) {
    let mut request = BytesMut::new();
    lua::eval(
        &mut request,
        lua::RELEASE_MANY,
        true,
        &keys(names),
        &[value],
    );
    let mut round = engine.fanout.release_round(engine.clock.now());
    round.send_to(NodeSet::ALL, &request, 1);
}
