//! Fencing tokens across N masters: [`LockManager::lock_fenced`](super::LockManager::lock_fenced),
//! [`LockManager::hold_fenced`](super::LockManager::hold_fenced), [`FencedLock`].
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
//!    that set the key, `INCR` the counter, atomically. The lock is decided as any Redlock acquisition. The
//!    candidate token `t` is the largest counter among the grants counted for the majority.
//! 2. **Write back** (round 2): every node (all N, not only the majority) runs [`lua::FENCE`]:
//!    `counter = max(counter, t)`. The token is handed out only if a majority of all N acknowledged it, counting
//!    only nodes the restart guard trusts, by the **lock's validity end minus one round timeout** (`T − D`);
//!    otherwise the lock is released and the attempt fails ([`Error::Quorum`]).
//! 3. **Release** runs [`lua::RELEASE_FENCED`]: a node raises its counter to `t` before it deletes the key.
//!
//! Taking the maximum over the acquiring majority alone is not enough: with counters 10, 1, 1 on three nodes, A
//! acquires on nodes 1–2 and gets 11, then B acquires on nodes 2–3 and gets 3. The write-back makes node 2 hold
//! 11 before A uses its token, so B gets 12.
//!
//! # Why tokens strictly increase
//!
//! Let A hold the lock with token `t` (its write-back was acknowledged by a majority `W` before `T − D`, where `T`
//! is the end of A's lease as last confirmed), and let B be a later successful fenced acquisition, granted by a
//! majority `M_B`. A's keys were set on A's acquiring majority `M_A`, and `M_B` meets `M_A` in some node `y`:
//! B's `SET NX` succeeded on `y`, so it ran after A's key left `y`. Either
//!
//! - **A released it there**: the release script raised `y`'s counter to `t` first, so B's `INCR` on `y` gives at
//!   least `t + 1`; or
//! - **it expired there**, at `T` or later (the Redlock timing assumption, which the lease's drift allowance
//!   covers). B's round lasted at most `D` (every muxlock round is bounded by its round timeout), so all of B's
//!   `INCR`s ran after `T − D`, hence after the write-back had reached every node of `W`. `M_B` meets `W` in some
//!   node `z`, whose counter was at least `t` before B's `INCR`: B's token is at least `t + 1`.
//!
//! By induction over the holders, in the order the lock's mutual exclusion puts them, every token is larger than
//! every earlier one. Without the `− D` margin the second case breaks: B's `INCR` on `z` could run before the
//! write-back reached `z` and its `SET` on `y` after A's key expired, within one round of B.
//!
//! **A guard** ([`hold_fenced`](super::LockManager::hold_fenced)) keeps its token for its whole life: renewals
//! extend the key with the usual compare-and-pexpire and never touch the counter. The argument holds with `T` the
//! end of the lease as last confirmed, which renewals only move later; the guard's release is the fenced release.
//!
//! # Limits
//!
//! - **The token is exactly as safe as the lock's own timing assumption** (bounded clock drift, bounded pauses of
//!   the nodes' expiry): if a key expires early, two holders may overlap and the older token can still be used
//!   against a resource that has seen the newer one. That is what the fence is for: the resource rejects it.
//! - **Every fenced client must bound its rounds by `D`**: this manager's
//!   [`Config::round_timeout`](super::Config::round_timeout) is assumed to be the largest in use on the resource.
//!   (Strictly, `D` as measured on the slowest client clock; with the drift factors in use, a round timeout of
//!   tens of milliseconds differs by microseconds between clocks, far inside the lease's own drift allowance.)
//! - **Counters must survive a restart** (`appendonly yes`, `appendfsync always`). A node that restarts without
//!   its data comes back with counter 0, and once the restart guard trusts it again it counts like any other; if
//!   it also held the largest value, a later token can repeat an older one. The alternative — not counting a
//!   restarted node for tokens until it has been re-seeded with the majority's maximum — is **not implemented**.
//! - **Counters are exact up to 2^53** (Lua numbers are doubles).
//!
//! # Cost
//!
//! Two round trips to acquire (the acquisition, then the write-back to a majority of all N), one to release: one
//! more than a plain lock. The write-back needs a majority of all N up, as the acquisition does.

use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::core::{Core, script_vote, settle};
use super::error::{Error, Outcome, Report, Result};
use super::guard::Guard;
use super::lock::Lock;
use super::lua;
use super::pipeline::Kind;
use super::quorum::{Failure, Vote};
use super::scripts::{self, Script};
use crate::net::{NodeSet, Reply};
use crate::resp::{Decimal, Value};
use crate::time::later;

/// The counter key of `resource`: `muxlock:fence:<resource>`.
pub fn counter_key(resource: &[u8]) -> Vec<u8> {
    [&b"muxlock:fence:"[..], resource].concat()
}

/// A lock with its fencing token. Release it with
/// [`LockManager::unlock_fenced`](super::LockManager::unlock_fenced), which leaves the token on every node it
/// frees (a plain release would not).
#[must_use = "a lock that is not used is held until its lease runs out"]
pub struct FencedLock {
    pub(crate) lock: Lock,
    pub(crate) token: u64,
}

impl FencedLock {
    /// The fencing token: larger than the token of every earlier successful fenced acquisition of this resource.
    /// Send it with every write to the protected resource, which must refuse a token smaller than the largest it
    /// has seen.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock itself (resource, value, validity).
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Whether the lease has not run out yet.
    pub fn is_valid(&self) -> bool {
        self.lock.is_valid()
    }
}

impl fmt::Debug for FencedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedLock")
            .field("lock", &self.lock)
            .field("token", &self.token)
            .finish()
    }
}

/// A fenced acquisition's reply: the incremented counter (granted), 0 (held), anything else failed.
fn fenced_vote(reply: &Reply) -> (Vote, Outcome, u64) {
    match reply.as_ref().map(Value::without_attributes) {
        Ok(Value::Integer(c)) if *c > 0 => (Vote::Yes, Outcome::Granted, c.unsigned_abs()),
        _ => {
            let (vote, outcome) = script_vote(reply);
            (vote, outcome, 0)
        }
    }
}

impl Core {
    pub(crate) fn lock_fenced(
        &self,
        resource: &[u8],
        ttl: Duration,
        retry: bool,
    ) -> Result<Option<FencedLock>> {
        let ttl_ms = self.check(resource, ttl)?;
        let mut attempt = 0;
        loop {
            let (failure, report) = match self.attempt_fenced(resource, ttl, ttl_ms)? {
                Ok(lock) => return Ok(Some(lock)),
                Err(failed) => failed,
            };
            if !retry && failure == Failure::Held {
                return Ok(None);
            }
            if !retry || attempt >= self.config.retry_count {
                let report = Box::new(report);
                return Err(match failure {
                    Failure::Held => Error::Held(report),
                    _ => Error::Quorum(report),
                });
            }
            attempt += 1;
            thread::sleep(self.retry_pause());
        }
    }

    #[allow(clippy::type_complexity)]
    fn attempt_fenced(
        &self,
        resource: &[u8],
        ttl: Duration,
        ttl_ms: u64,
    ) -> Result<std::result::Result<FencedLock, (Failure, Report)>> {
        let value = self.tokens.next().map_err(|e| Error::Os {
            doing: "drawing the lock value from the OS's randomness",
            error: std::io::Error::from(e).into(),
        })?;
        let n = self.fanout.len();
        let counter = counter_key(resource);
        let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let keys: [&[u8]; 2] = [resource, &counter];
        let round = self.acquire_scripted(
            lua::ACQUIRE_FENCED,
            (&keys, &[&value, ttl_arg.as_bytes()]),
            (ttl, ttl_ms),
            fenced_vote,
        );
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
            let mut round = self.fanout.release_round(Instant::now());
            round.send_to(nodes, &buf, 1);
        };
        let valid_until = match settle(status, &quorum) {
            Ok(valid_until) => valid_until,
            Err(failure) => {
                let mut buf = BytesMut::new();
                scripts::call(&mut buf, Script::Release, true, resource, &value, 0);
                let mut round = self.fanout.release_round(Instant::now());
                round.send_to(nodes, &buf, 1);
                return Ok(Err((
                    failure,
                    self.report(resource, outcomes, quorum.quorum()),
                )));
            }
        };
        // Round 2: the write-back, acknowledged by a majority of all N by the validity end minus one round
        // timeout (see the module docs for why the margin).
        let by = valid_until
            .checked_sub(self.config.round_timeout)
            .unwrap_or(start);
        let majority = self.quorum();
        let mut acks = vec![Outcome::NotAwaited; n];
        let (mut yes, mut failed) = (0usize, 0usize);
        let t = Decimal::new(i64::try_from(token).unwrap_or(i64::MAX));
        let counter_only: [&[u8]; 1] = [&counter];
        if Instant::now() < by {
            self.pipelined(
                Kind::Normal,
                NodeSet::ALL,
                1,
                later(Instant::now(), self.config.round_timeout).min(by),
                majority,
                |buf, full| lua::eval(buf, lua::FENCE, full, &counter_only, &[t.as_bytes()]),
                |_, node, reply| {
                    let now = Instant::now();
                    let (vote, outcome) = self.counted(node, script_vote(&reply), now);
                    self.votes[node].count(&outcome);
                    acks[node] = outcome;
                    yes += usize::from(vote == Vote::Yes && now < by);
                    failed += usize::from(vote != Vote::Yes);
                    if yes >= majority || n - failed < majority {
                        0
                    } else {
                        majority - yes
                    }
                },
            );
        }
        if yes >= majority && Instant::now() < by {
            return Ok(Ok(FencedLock {
                lock: Lock {
                    resource: resource.to_vec(),
                    value,
                    valid_until,
                    extensions: 0,
                    nodes,
                },
                token,
            }));
        }
        release(token);
        let failure = Failure::Unavailable;
        Ok(Err((failure, self.report(resource, acks, majority))))
    }

    /// Releases a fenced lock: every node that deletes the key raises the counter to the token first.
    pub(crate) fn unlock_fenced(&self, lock: &Lock, token: u64) -> Result<usize> {
        let n = self.fanout.len();
        let quorum = self.quorum();
        let deadline = later(Instant::now(), self.config.round_timeout);
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let (mut released, mut answered) = (0, 0);
        for (node, outcome) in outcomes.iter_mut().enumerate() {
            if !lock.nodes.contains(node) {
                *outcome = Outcome::NotSent;
                answered += 1;
            }
        }
        let counter = counter_key(&lock.resource);
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
            |_, node, reply| {
                let (vote, outcome) = script_vote(&reply);
                self.votes[node].count(&outcome);
                outcomes[node] = outcome;
                released += usize::from(vote == Vote::Yes);
                answered += usize::from(vote != Vote::Failed);
                quorum.saturating_sub(released)
            },
        );
        self.waits.notify(&lock.resource);
        if answered < quorum {
            return Err(Error::Quorum(Box::new(self.report(
                &lock.resource,
                outcomes,
                quorum,
            ))));
        }
        Ok(released)
    }
}

impl super::LockManager {
    /// Acquires `resource` for `ttl` as [`lock`](super::LockManager::lock) does, with a fencing token that is
    /// larger than the token of every earlier successful fenced acquisition of `resource`, by any client, even
    /// when the majorities differ. Costs two round trips (see the module docs of `fenced` in the source for the
    /// design, the argument and its limits: counters must survive restarts, `appendfsync always`).
    ///
    /// # Errors
    ///
    /// As [`lock`](super::LockManager::lock); also [`Error::Quorum`] when the token's write-back was not
    /// acknowledged by a majority of all nodes in time (the lock is released then).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"])?;
    /// let lock = locks.lock_fenced("ledger", Duration::from_secs(10))?;
    /// // storage.write_if_token_at_least(lock.token(), data) ...
    /// locks.unlock_fenced(lock)?;
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn lock_fenced(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<FencedLock> {
        self.core
            .lock_fenced(resource.as_ref(), ttl, true)?
            .ok_or_else(|| Error::config("no lock acquired"))
    }

    /// One attempt at [`lock_fenced`](super::LockManager::lock_fenced): `Ok(None)` if another holder has it.
    ///
    /// # Errors
    ///
    /// As [`lock_fenced`](super::LockManager::lock_fenced), without [`Error::Held`].
    pub fn try_lock_fenced(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Option<FencedLock>> {
        self.core.lock_fenced(resource.as_ref(), ttl, false)
    }

    /// Extends a fenced lock as [`extend`](super::LockManager::extend) does; the token does not change.
    ///
    /// # Errors
    ///
    /// As [`extend`](super::LockManager::extend).
    pub fn extend_fenced(&self, lock: &mut FencedLock, ttl: Duration) -> Result<()> {
        self.core.extend(&mut lock.lock, ttl)
    }

    /// Releases a fenced lock: each node that deletes the key first raises its counter to the lock's token.
    ///
    /// # Errors
    ///
    /// As [`unlock`](super::LockManager::unlock).
    pub fn unlock_fenced(&self, lock: FencedLock) -> Result<usize> {
        self.core.unlock_fenced(&lock.lock, lock.token)
    }

    /// Acquires `resource` as [`lock_fenced`](super::LockManager::lock_fenced) does and holds it under a
    /// [`Guard`] ([`Guard::token`] is the token). Renewals do not change the token; the guard's release is the
    /// fenced release.
    ///
    /// # Errors
    ///
    /// As [`lock_fenced`](super::LockManager::lock_fenced), and [`Error::Config`] for a `ttl` too short to renew.
    pub fn hold_fenced(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Guard> {
        self.check_guard_ttl(ttl)?;
        let fenced = self.lock_fenced(resource, ttl)?;
        Ok(self.guard_with(fenced.lock, ttl, Some(fenced.token), None))
    }
}
