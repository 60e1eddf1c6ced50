//! Counting semaphores across N masters, asked with [`Request::permits`](crate::redlock::Request::permits): at
//! most `k` holders of a name at once, each holding one permit, whose index is [`Lock::permit`]. Held as a
//! [`Lock`] of kind [`Kind::Semaphore`]. Here the permits' keys, the offer round and what its replies mean.
//!
//! # The design
//!
//! A semaphore of `k` permits named `name` is `k` independent Redlock mutexes, the permits: the keys
//! [`permit_key`]`(name, 0..k)`, `{name}:permit:0` to `{name}:permit:<k-1>` (one hash tag, so that on a cluster
//! member they lie in one slot and one script may touch them all).
//!
//! 1. **Offer** (one round): every node runs [`lua::ACQUIRE_PERMITS`], which takes the lowest permit free on
//!    that node by `SET permit value NX PX ttl`, atomically, and answers with the index it took (or none). The
//!    value is drawn afresh for the attempt, as every kind's is.
//! 2. **Count per permit**: each permit index has a quorum of its own ([`Quorum`], the mutex's): a node's reply is
//!    a "yes" for the indices it took and a "taken" for the others; a node that failed (down, timed out, an error
//!    reply), that the restart guard does not trust yet, or whose clock the clock check rejects, votes "failed"
//!    on every index. The attempt holds permit `i` if a majority granted `i` before the lease's validity
//!    (`start + ttl - drift`, counted from before the first byte was sent), exactly as a mutex on that key. The
//!    round ends as soon as some index is held or none can be, and keeps the **lowest** index held then.
//! 3. **Give back the rest**: every other permit the attempt may have taken is released at once, unawaited, by
//!    compare-and-delete of the attempt's value ([`lua::RELEASE_MANY`]), on every node that listed another permit
//!    and every node sent to whose list was not read (it may have taken any); a failed attempt gives back all of
//!    them so.
//!
//! 4. **Offer again, once, on a split**: if no permit reached a majority although a majority of the nodes took
//!    one (their grants split between permits: concurrent attempts reached the nodes in different orders, or
//!    the nodes' states differ), a second offer, with a value of its own, asks every node to take *every* permit
//!    free there; it is counted and given back as the first. It succeeds whenever some permit is free on a
//!    majority of the nodes. A node sent to and not read when the first round ended counts as one that took a
//!    permit: the round ends as soon as no permit can reach a majority, and the slowest node's grant may be the
//!    one that makes the split.
//!
//! From then on the lock is a plain lock of its permit's key: extended by the compare-and-pexpire of that key,
//! released by its compare-and-delete (folded with other releases), renewed so under a guard.
//!
//! # Why no more than `k` hold at once
//!
//! Each permit index is a Redlock mutex on its own key: a holder of permit `i` got `SET NX` of that key on a
//! majority of the nodes within its validity, and counts it only until then, so, under the mutex's own
//! assumptions (bounded clock drift, the restart guard for nodes that come back without their data, the clock
//! check for nodes whose clocks jump), no two holders of permit `i` overlap. Every holder holds exactly one index
//! of `0..k`, so at most `k` hold at once. Nothing else is needed: an offer taking several permits on one node,
//! a second offer, the give-back running late, and other clients' counts of other indices change no permit's
//! mutual exclusion, because a permit's grant is only ever counted for the index it was granted for, by the
//! offer that asked for it.
//!
//! The **value per offer** keeps the give-back and a failed attempt's clean-up from freeing anything a later
//! offer took: each is a compare-and-delete of *its* attempt's value, so whenever it runs (held for room on a
//! full node, detached from its round: `net/machine/detach.rs`) it removes only keys that offer set. It also
//! never frees the permit kept: that key is not among those it names.
//!
//! **What the obvious construction gets wrong** (and why the count is per index): a counter of holders per node,
//! each node admitting up to `k` holders, a client holding if a majority admitted it, admits more than `k`. Three
//! nodes, `k = 2`: A admitted on {1, 2}, B on {2, 3}, C on {1, 3}; every node has 2 holders, every client a
//! majority, and three hold. Counting per index, A, B and C would need a majority of the *same* index each, and
//! two majorities of three nodes meet. The simulator runs that construction as its control
//! (`tests/sim/semaphore.rs`) and sees `k + 1` holders.
//!
//! # Cost
//!
//! One round trip to acquire, like a plain lock: each node runs one script that looks for its lowest free permit
//! (`O(k)` at worst, hence [`MAX_PERMITS`]); a give-back follows, unawaited, only to nodes whose reply was not
//! read or that took another permit than the one kept. A split costs a second round, whose script tries every
//! permit. Release and extension cost what a plain lock's do.
//!
//! # Contention, waiting and fairness
//!
//! Taking one permit per node lets attempts that overlap in time succeed together: each node hands them distinct
//! permits in the order they reach it, and with nodes that agree on that order each gets a permit of its own in
//! one round. Where the orders or the nodes' states differ (a permit held on one node by an expired holder's
//! leftover, another on another node), a node may answer index 0 where its peers answer index 1: the split the
//! second offer is for, which takes every free permit so that any permit free on a majority is found. (Taking
//! every free permit from the start would make overlapping attempts find the permits taken by each other on the
//! nodes they reach second, and all but one retry, as contenders for a mutex do.)
//!
//! [`retry`](crate::redlock::Request::retry) retries with the mutex's jittered pause.
//! [`wait`](crate::redlock::Request::wait) waits in the nodes' queue of the semaphore, across processes
//! (`wait/handoff.rs`): the offer runs behind the queue's gate ([`lua::QUEUE_PERMITS`]), which lets only the
//! waiter at the head take a permit, whichever is free; it leaves the queue with its permit and the next waiter's
//! turn comes. The head is woken by a release of any of its permits in this process, or (on RESP3 nodes) by the
//! invalidation of any permit key, or at the earliest end of the permits' leases. Waiters are first come, first
//! served, across processes as within one; callers that do not wait take a free permit whenever they try.
//!
//! # Limits
//!
//! - **One `k` per name.** The bound is the largest `k` any client asks with for the name: a client asking for
//!   more permits takes indices past the others' count. Lowering `k` takes effect as holders of the indices past
//!   it release.

use std::time::Duration;

use bytes::BytesMut;

use crate::net::{NodeSet, Reply};
use crate::redlock::engine::Engine;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::pipeline::Purpose;
use crate::redlock::engine::reply::script_vote;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::error::{Error, Outcome, Report, Result};
use crate::redlock::kind::queued::Gate;
use crate::redlock::kind::{Kind, Line, Lock, Undo};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Quorum, Status, Vote};
use crate::redlock::token;
use crate::resp::{Decimal, Value};
use crate::time::later;

/// The most permits a semaphore may have: the offer's script tries every permit on every node, and a waiter
/// probes every permit's key, so the cost of an attempt grows with `k`.
pub const MAX_PERMITS: u32 = 64;

/// What a semaphore lock keeps beside its lease: the semaphore's name, its number of permits, and the index of
/// the permit held (`None` until acquired).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Permits {
    pub(crate) name: Vec<u8>,
    pub(crate) count: u32,
    pub(crate) index: Option<u32>,
}

/// The key of permit `index` of the semaphore `name`: `{name}:permit:<index>`, or `name:permits:<index>` when the
/// name has a hash tag of its own (`{pool}:db` gives `{pool}:db:permits:0`) or a brace without one. Either way
/// every permit of a name with a hash tag or no brace lies in one cluster slot. Two names never share a key: the
/// first form's names hold no brace (so the name is what lies between the first `{` and the last `}:permit:`),
/// and the two forms end differently (`:permit:<index>`, `:permits:<index>`), so `jobs` and `{jobs}` are two
/// semaphores.
pub fn permit_key(name: &[u8], index: u32) -> Vec<u8> {
    let tagged = crate::net::cluster::hash_tag(name).len() != name.len();
    let braced = name.iter().any(|&b| b == b'{' || b == b'}');
    match tagged || braced {
        true => [name, format!(":permits:{index}").as_bytes()].concat(),
        false => [&b"{"[..], name, b"}", format!(":permit:{index}").as_bytes()].concat(),
    }
}

/// Every permit's key, in index order.
pub(crate) fn permit_keys(name: &[u8], count: u32) -> Vec<Vec<u8>> {
    (0..count).map(|i| permit_key(name, i)).collect()
}

/// A semaphore's waiting line: on its name, woken by a release of any of its permits, probing them all for the
/// earliest to come free (any one lets the head in).
pub(crate) fn line(p: &Permits) -> Line {
    let keys = permit_keys(&p.name, p.count);
    Line {
        key: [&b"\0semaphore\0"[..], &p.name].concat(),
        grouped: keys.clone(),
        probed: keys,
        name: p.name.clone(),
        any: true,
        marks: false,
    }
}

/// Checks a semaphore's number of permits.
pub(crate) fn check(count: u32) -> Result<()> {
    match count {
        0 => Err(Error::config("a semaphore needs at least one permit")),
        c if c > MAX_PERMITS => Err(Error::config(format!(
            "a semaphore has at most {MAX_PERMITS} permits (asked for {c})"
        ))),
        _ => Ok(()),
    }
}

/// A node's reply to the offer: its vote (yes if it took any permit) and outcome, and the indices it took (below
/// `count`; others are ignored).
pub(crate) fn offer_vote(reply: &Reply, count: u32) -> (Vote, Outcome, Vec<u32>) {
    match reply.as_ref().map(Value::without_attributes) {
        Ok(Value::Array(items)) => {
            let taken: Vec<u32> = items
                .iter()
                .filter_map(|v| match v.without_attributes() {
                    Value::Integer(i) => u32::try_from(*i).ok().filter(|&i| i < count),
                    _ => None,
                })
                .collect();
            match taken.is_empty() {
                true => (Vote::Taken, Outcome::Taken, taken),
                false => (Vote::Yes, Outcome::Granted, taken),
            }
        }
        Ok(Value::Error(_) | Value::BulkError(_)) | Err(_) => {
            let (vote, outcome) = script_vote(reply);
            (vote, outcome, Vec::new())
        }
        Ok(other) => (
            Vote::Failed,
            Outcome::ErrorReply(format!("unexpected reply {other:?}")),
            Vec::new(),
        ),
    }
}

/// How an offer's grants are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    /// Per permit index: the semaphore.
    PerPermit,
    /// **The simulator's control, unsafe on purpose**: a node that took any permit admits the client, and a
    /// majority of admissions is a hold (the majority-of-counters construction of the module doc).
    #[cfg(feature = "sim")]
    PerNode,
}

/// What one offer round found.
struct Offer {
    start: std::time::Instant,
    /// One quorum per permit index.
    permits: Vec<Quorum>,
    /// Whether a node took some permit: the control's count.
    #[cfg(feature = "sim")]
    admitted: Quorum,
    outcomes: Vec<Outcome>,
    /// The nodes the offer was queued for.
    nodes: NodeSet,
    /// How many nodes took some permit, counted (trusted, read in time): a majority of them and of the nodes not
    /// read, without a permit held, is a split.
    granting: usize,
    /// Per node, the indices it took, as its reply said (counted or not: what the give-back must cover); `None`
    /// where no list was read (no reply, a failure, an error reply): the node may have taken any permit.
    took: Vec<Option<Vec<u32>>>,
}

/// The verdict of the quorums `permits` at `now`: the lowest index held, with its validity end; or why none can
/// be (held if any index failed on holders, else too late if any did, else unavailable); or pending.
fn verdict(permits: &[Quorum], now: std::time::Instant, closed: bool) -> Verdict {
    let mut failure: Option<Failure> = None;
    let mut pending = false;
    for (i, q) in permits.iter().enumerate() {
        let status = match closed {
            true => q.closed(now),
            false => q.status(now),
        };
        match status {
            Status::Acquired { valid_until } => return Verdict::Held(i as u32, valid_until),
            Status::Pending => pending = true,
            Status::Failed(f) => {
                failure = Some(match (failure, f) {
                    (Some(Failure::Held), _) | (_, Failure::Held) => Failure::Held,
                    (Some(Failure::TooLate), _) | (_, Failure::TooLate) => Failure::TooLate,
                    _ => Failure::Unavailable,
                })
            }
        }
    }
    match (pending, failure) {
        (true, _) => Verdict::Pending,
        (false, f) => Verdict::Failed(f.unwrap_or(Failure::Unavailable)),
    }
}

/// A semaphore offer's verdict: pending, the permit held until when, or why none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Pending,
    Held(u32, std::time::Instant),
    Failed(Failure),
}

/// The kind of a lock held on slot `Some(index)` (or, `None`, of an attempt not holding yet).
pub(crate) type KindOf<'a> = &'a (dyn Fn(Option<u32>) -> Kind + Sync);

/// What an offer round offers: the slots' keys in index order (a semaphore's permits, a read-write lock's reader
/// slots), the keys whose existence on a node refuses the offer there (none for a semaphore; a read-write lock's
/// writer and intent keys), sent first in `KEYS`, and the script that takes the slots ([`lua::ACQUIRE_PERMITS`],
/// or [`lua::ACQUIRE_READ`], which also looks at the blockers) and its form behind the nodes' waiting queue
/// (`queued.rs`).
pub(crate) struct Slots {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) blockers: Vec<Vec<u8>>,
    pub(crate) script: lua::Lua,
    pub(crate) queued: lua::Lua,
}

impl Slots {
    /// The permits of the semaphore `name` of `count` permits.
    fn permits(name: &[u8], count: u32) -> Slots {
        Slots {
            keys: permit_keys(name, count),
            blockers: Vec::new(),
            script: lua::ACQUIRE_PERMITS,
            queued: lua::QUEUE_PERMITS,
        }
    }
}

/// One offer round of `slots` (`want`: how many each node takes at most), decided by `rule`; behind the nodes'
/// waiting queue with a `gate` (a node whose queue another waiter heads takes nothing).
async fn offer<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    slots: &Slots,
    value: &token::Value,
    (ttl, ttl_ms): (Duration, u64),
    (want, rule): (u32, Rule),
    mut gate: Option<&mut Gate<'_>>,
) -> Offer {
    let n = engine.fanout.len();
    let keys = &slots.keys;
    let count = keys.len() as u32;
    engine.note_ttl(ttl_ms);
    let start = engine.clock.now();
    let quorum = Quorum::new(n, start, ttl, engine.config.allowance(ttl));
    let deadline = later(start, engine.config.round_timeout).min(quorum.deadline());
    let mut permits = vec![quorum.clone(); keys.len()];
    #[cfg(feature = "sim")]
    let mut admitted = quorum.clone();
    let mut outcomes = vec![Outcome::NotAwaited; n];
    let mut took = vec![None; n];
    let mut granting = 0;
    let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
    let want_arg = Decimal::new(i64::from(want));
    // The blockers first, then the slots: the script answers with the slots' indices.
    let key_refs: Vec<&[u8]> = (slots.blockers.iter().chain(keys))
        .map(Vec::as_slice)
        .collect();
    let args: [&[u8]; 3] = [value, ttl_arg.as_bytes(), want_arg.as_bytes()];
    // The slots' keys first, for the restart guard's quarantine and the script's `KEYS`; the gate's after them.
    // Built only behind the gate: the offer without it sends the slots' keys and arguments as they are.
    let gated = gate.as_ref().map(|g| g.with(&key_refs, &args));
    let (script, sent_keys, args): (_, &[&[u8]], &[&[u8]]) = match &gated {
        Some((keys, args)) => (slots.queued, keys, args),
        None => (slots.script, &key_refs, &args),
    };
    let nodes = engine
        .pipelined(
            Purpose::Lease,
            NodeSet::ALL,
            1,
            deadline,
            quorum.votes_to_decide(),
            |buf, full| lua::eval(buf, script, full, sent_keys, args),
            |_, (node, source), reply| {
                let now = engine.clock.now();
                let reply = match gate.as_deref_mut() {
                    Some(g) => g.ungate(&reply, node, Value::Array(Vec::new())),
                    None => reply,
                };
                let listed = matches!(
                    reply.as_ref().map(Value::without_attributes),
                    Ok(Value::Array(_))
                );
                let (vote, outcome, taken) = offer_vote(&reply, count);
                // Every key lies in the name's slot: the first stands for them (the restart guard's quarantine).
                let key = key_refs.first().copied().unwrap_or_default();
                let (vote, outcome) =
                    engine.counted_from((source, key), (vote, outcome), now, None);
                engine.votes[node].count(&outcome);
                outcomes[node] = outcome;
                for (i, q) in permits.iter_mut().enumerate() {
                    let v = match vote {
                        Vote::Yes if taken.contains(&(i as u32)) => Vote::Yes,
                        Vote::Yes | Vote::Taken => Vote::Taken,
                        Vote::Failed => Vote::Failed,
                    };
                    q.vote(node, v, now);
                }
                took[node] = listed.then_some(taken);
                granting += usize::from(vote == Vote::Yes);
                match rule {
                    Rule::PerPermit => match verdict(&permits, now, false) {
                        Verdict::Pending => permits
                            .iter()
                            .filter(|q| q.status(now) == Status::Pending)
                            .map(Quorum::votes_to_decide)
                            .min()
                            .unwrap_or(0),
                        _ => 0,
                    },
                    #[cfg(feature = "sim")]
                    Rule::PerNode => match admitted.vote(node, vote, now) {
                        Status::Pending => admitted.votes_to_decide(),
                        _ => 0,
                    },
                }
            },
        )
        .await;
    Offer {
        start,
        permits,
        #[cfg(feature = "sim")]
        admitted,
        outcomes,
        nodes,
        granting,
        took,
    }
}

/// One acquisition of a permit of the semaphore `name` of `count` permits: the offer (each node its lowest free
/// permit), counted per permit; on a split, once more with a value of its own (each node every free permit). The
/// lowest index a majority granted is kept; every other permit an offer took is given back. Both offers go
/// behind the nodes' waiting queue with a `gate`.
pub(crate) async fn attempt<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    name: &[u8],
    count: u32,
    value: token::Value,
    ttl: (Duration, u64),
    gate: Option<&mut Gate<'_>>,
) -> std::result::Result<Lock, (Failure, Report)> {
    let kind = |index| {
        Kind::Semaphore(Permits {
            name: name.to_vec(),
            count,
            index,
        })
    };
    take(
        engine,
        &Slots::permits(name, count),
        (name, &kind),
        value,
        ttl,
        gate,
    )
    .await
}

/// One acquisition of one of `slots` for the lock `name`: the offer, counted per slot; on a split, once more with
/// a value of its own. The lowest index a majority granted is kept, held as `kind(Some(index))`; every other slot
/// an offer took is given back. Shared by semaphores and a read-write lock's readers (`rwlock.rs`).
pub(crate) async fn take<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    slots: &Slots,
    (name, kind): (&[u8], KindOf<'_>),
    value: token::Value,
    ttl: (Duration, u64),
    mut gate: Option<&mut Gate<'_>>,
) -> std::result::Result<Lock, (Failure, Report)> {
    let count = slots.keys.len() as u32;
    let first = offer(
        engine,
        slots,
        &value,
        ttl,
        (1, Rule::PerPermit),
        gate.as_deref_mut(),
    )
    .await;
    // A node not read when the round ended (as soon as no permit could reach a majority) may have granted: its
    // grant may be the one that makes the split (module doc, 4).
    let unread = (first.outcomes.iter().enumerate())
        .filter(|&(node, o)| first.nodes.contains(node) && *o == Outcome::NotAwaited)
        .count();
    let split = first.granting + unread >= engine.quorum();
    let (failure, report) = match settle(engine, first, (&slots.keys, name, kind), value) {
        Ok(lock) => return Ok(lock),
        Err(failed) => failed,
    };
    if !split || count == 1 {
        return Err((failure, report));
    }
    // The second offer's value is its own: the first's give-back, whenever it runs, frees nothing of it. Its
    // own undo covers it if this future is dropped meanwhile (the caller's covers the first's).
    let Ok(again) = engine
        .tokens
        .draw("drawing the lock value from the OS's randomness")
    else {
        return Err((failure, report));
    };
    let unheld = kind(None);
    let mut undo = Undo::new(engine, name, &unheld, again);
    let second = offer(engine, slots, &again, ttl, (count, Rule::PerPermit), gate).await;
    undo.disarm();
    settle(engine, second, (&slots.keys, name, kind), again)
}

/// How an offer ends: the lowest permit held, or why none; every other permit it may have taken is given back
/// where it may have been taken: on every node sent to whose list was not read (it may have taken any), and every
/// node that listed another.
fn settle<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    offer: Offer,
    (keys, name, kind): (&[Vec<u8>], &[u8], KindOf<'_>),
    value: token::Value,
) -> std::result::Result<Lock, (Failure, Report)> {
    let count = keys.len() as u32;
    let kept = match verdict(&offer.permits, engine.clock.now(), true) {
        Verdict::Held(i, valid_until) => Ok((i, valid_until)),
        Verdict::Failed(f) => Err(f),
        Verdict::Pending => Err(Failure::Unavailable),
    };
    let keep = kept.as_ref().ok().map(|&(i, _)| i);
    let mut back = NodeSet::EMPTY;
    for (node, took) in offer.took.iter().enumerate() {
        let other = took
            .as_ref()
            .is_none_or(|t| t.iter().any(|&i| Some(i) != keep));
        if offer.nodes.contains(node) && other {
            back.insert(node);
        }
    }
    let rest: Vec<&[u8]> = (0..count)
        .filter(|&i| Some(i) != keep)
        .map(|i| &keys[i as usize][..])
        .collect();
    give_back(engine, &rest, &value, back);
    match kept {
        Ok((i, valid_until)) => Ok(Lock::new(
            Lease::new(
                keys[i as usize].clone(),
                value,
                (offer.start, valid_until),
                offer.nodes,
            ),
            kind(Some(i)),
        )),
        Err(failure) => Err((
            failure,
            engine.report(name, offer.outcomes, engine.quorum()),
        )),
    }
}

/// **The simulator's control, unsafe on purpose**: the majority-of-counters semaphore (module doc). Each node
/// takes one free permit, whichever; a majority of nodes that took one is a hold. The lock has no index (its
/// lease names the semaphore), and its release gives back every permit holding its value.
#[cfg(feature = "sim")]
pub(crate) async fn attempt_counted_per_node<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    name: &[u8],
    count: u32,
    value: token::Value,
    ttl: (Duration, u64),
) -> std::result::Result<Lock, (Failure, Report)> {
    let slots = Slots::permits(name, count);
    let offer = offer(engine, &slots, &value, ttl, (1, Rule::PerNode), None).await;
    let now = engine.clock.now();
    let all: Vec<&[u8]> = slots.keys.iter().map(Vec::as_slice).collect();
    match offer.admitted.closed(now) {
        Status::Acquired { valid_until } => Ok(Lock::new(
            Lease::new(
                name.to_vec(),
                value,
                (offer.start, valid_until),
                offer.nodes,
            ),
            Kind::Semaphore(Permits {
                name: name.to_vec(),
                count,
                index: None,
            }),
        )),
        status => {
            give_back(engine, &all, &value, offer.nodes);
            let failure = match status {
                Status::Failed(f) => f,
                _ => Failure::Unavailable,
            };
            Err((
                failure,
                engine.report(name, offer.outcomes, engine.quorum()),
            ))
        }
    }
}

/// Releases, unawaited, the permits `keys` where they hold `value`, on `nodes`.
pub(crate) fn give_back<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    keys: &[&[u8]],
    value: &token::Value,
    nodes: NodeSet,
) {
    if keys.is_empty() || nodes == NodeSet::EMPTY {
        return;
    }
    let mut request = BytesMut::new();
    lua::eval(&mut request, lua::RELEASE_MANY, true, keys, &[value]);
    let mut round = engine.fanout.release_round(engine.clock.now());
    round.send_to(nodes, &request, 1);
}

/// Releases, unawaited and on every node, every permit an attempt at `name` with `value` may have taken (its
/// [`Undo`](super::Undo)).
pub(crate) fn undo<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    name: &[u8],
    count: u32,
    value: &token::Value,
) {
    let keys = permit_keys(name, count);
    let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    give_back(engine, &refs, value, NodeSet::ALL);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::cluster::key_slot;
    use std::time::Instant;

    #[test]
    fn permits_of_a_name_share_its_slot() {
        assert_eq!(permit_key(b"pool", 3), b"{pool}:permit:3");
        assert_eq!(permit_key(b"{pool}:db", 0), b"{pool}:db:permits:0");
        assert_ne!(permit_key(b"jobs", 0), permit_key(b"{jobs}", 0));
        for name in [&b"pool"[..], b"{t}x", b"a:b"] {
            let slot = key_slot(&permit_key(name, 0));
            assert!((1..MAX_PERMITS).all(|i| key_slot(&permit_key(name, i)) == slot));
        }
    }

    #[test]
    fn permit_counts_out_of_range_are_refused() {
        assert!(check(0).is_err());
        assert!(check(1).is_ok());
        assert!(check(MAX_PERMITS).is_ok());
        assert!(check(MAX_PERMITS + 1).is_err());
    }

    #[test]
    fn an_offer_reply_names_the_permits_taken() {
        let reply = |v: Value| -> Reply { Ok(v) };
        let took = offer_vote(
            &reply(Value::Array(vec![
                Value::Integer(0),
                Value::Integer(2),
                Value::Integer(9),
            ])),
            3,
        );
        assert_eq!((took.0, took.2), (Vote::Yes, vec![0, 2]));
        let none = offer_vote(&reply(Value::Array(vec![])), 3);
        assert_eq!((none.0, none.2), (Vote::Taken, vec![]));
        let odd = offer_vote(&reply(Value::Integer(1)), 3);
        assert_eq!(odd.0, Vote::Failed);
    }

    #[test]
    fn the_count_is_per_permit_so_three_crossed_majorities_hold_nothing() {
        // One attempt over three nodes and two permits: node 0 took permit 0, node 1 permit 1. Both nodes took
        // *a* permit, a majority by the per-node count, but no permit has a majority; node 2 decides.
        let t0 = Instant::now();
        let ttl = Duration::from_secs(1);
        let q = Quorum::new(3, t0, ttl, Duration::from_millis(12));
        let mut permits = vec![q.clone(), q];
        permits[0].vote(0, Vote::Yes, t0);
        permits[1].vote(0, Vote::Taken, t0);
        permits[0].vote(1, Vote::Taken, t0);
        permits[1].vote(1, Vote::Yes, t0);
        assert_eq!(verdict(&permits, t0, false), Verdict::Pending);
        let mut failed = permits.clone();
        failed[0].vote(2, Vote::Taken, t0);
        failed[1].vote(2, Vote::Taken, t0);
        assert_eq!(verdict(&failed, t0, false), Verdict::Failed(Failure::Held));
        permits[0].vote(2, Vote::Taken, t0);
        permits[1].vote(2, Vote::Yes, t0);
        let until = t0 + ttl - Duration::from_millis(12);
        assert_eq!(verdict(&permits, t0, false), Verdict::Held(1, until));
    }
}
