//! Fencing tokens across N masters, asked with [`Request::fenced`](crate::redlock::Request::fenced): the token
//! is [`Lock::token`] (and [`Guard::token`](crate::redlock::Guard::token)); [`FencedLock`] is what the engine's
//! acquisition round gives.
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

use crate::net::Reply;
use crate::redlock::error::Outcome;
use crate::redlock::kind::lock::{Kind, Lock};
use crate::redlock::kind::script_vote;
use crate::redlock::quorum::Vote;
use crate::resp::Value;

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

/// A lock with its fencing token: what the engine's acquisition round gives, handed out as a [`Lock`] of kind
/// [`Kind::Fenced`] (released by the fenced release, which leaves the token on every node it frees; a plain
/// release would not).
#[derive(Debug)]
pub(crate) struct FencedLock {
    pub(crate) lock: Lock,
    pub(crate) token: u64,
}

impl From<FencedLock> for Lock {
    /// The fenced lock as one [`Lock`], its token in its kind.
    fn from(fenced: FencedLock) -> Lock {
        fenced.lock.with_kind(Kind::Fenced(fenced.token))
    }
}

/// A fenced acquisition's reply: the incremented counter (granted), 0 (held), anything else failed.
pub(crate) fn fenced_vote(reply: &Reply) -> (Vote, Outcome, u64) {
    match reply.as_ref().map(Value::without_attributes) {
        Ok(Value::Integer(c)) if *c > 0 => (Vote::Yes, Outcome::Granted, c.unsigned_abs()),
        _ => {
            let (vote, outcome) = script_vote(reply);
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
