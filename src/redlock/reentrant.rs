//! Reentrant locks, opt-in, by owner: [`Owner`], [`ReentrantLock`],
//! [`LockManager::lock_reentrant`](super::LockManager::lock_reentrant).
//!
//! An [`Owner`] is a random token the caller holds and passes to each acquisition: it is the key's value, so
//! reentrancy works across threads and async tasks (whoever holds the owner), not per thread. A second
//! acquisition by the same owner while the key holds it increments a hold count instead of failing; each release
//! decrements it; the key goes when the count reaches zero.
//!
//! # Invariants
//!
//! - **The count lives on the nodes**, per node, in `muxlock:holds:<resource>` next to the key, with the key's
//!   expiry, changed only by [`lua::ACQUIRE_REENTRANT`] and [`lua::RELEASE_REENTRANT`] (atomic per node). Each
//!   acquisition and each release is a Redlock round: an acquisition holds if a majority of nodes (those the
//!   restart guard trusts) granted it in time; a release counts as a lone release does.
//! - **A nested hold never shortens the lease**: it lengthens the keys' expiry only if its TTL ends later.
//! - **A failed acquisition is undone** where it may have counted: a decrement goes, without waiting, to the nodes
//!   that granted or had not answered by the decision (and in order behind the acquisition on each connection).
//!
//! # Limits
//!
//! - **Counts can differ between nodes** after failures (a node down during one nested acquisition, a connection
//!   broken between an acquisition and its undo): such a node may free the key before the others. The owner keeps
//!   the lock as long as a majority still counts it; a release that finds too few nodes still holding the key for
//!   the owner reports the number of nodes it found, like [`unlock`](super::LockManager::unlock).
//! - **No extension and no guard form** for reentrant locks yet: a nested acquisition renews the lease (up to its
//!   own TTL), and the outer holder can acquire again to extend.

use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::core::{Core, settle};
use super::error::{Error, Outcome, Result};
use super::lua;
use super::pipeline::Kind;
use super::quorum::{Failure, Vote};
use super::token;
use crate::net::{NodeError, NodeSet, Reply};
use crate::resp::{Decimal, Value};
use crate::time::later;

/// Who holds a reentrant lock: a random value (40 hex digits) shared by every acquisition of one owner. Clone it
/// into every thread or task that acts as that owner.
#[derive(Clone, PartialEq, Eq)]
pub struct Owner {
    pub(crate) value: token::Value,
}

impl Owner {
    /// The owner's value, as stored in the keys it holds.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.value).unwrap_or_default()
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Owner").field(&self.as_str()).finish()
    }
}

/// One hold of a reentrant lock. Release each hold with
/// [`LockManager::unlock_reentrant`](super::LockManager::unlock_reentrant); the key goes with the last.
#[must_use = "a hold that is not released keeps the lock until the lease runs out"]
pub struct ReentrantLock {
    resource: Vec<u8>,
    owner: Owner,
    valid_until: Instant,
    holds: u64,
    nodes: NodeSet,
}

impl ReentrantLock {
    /// The locked resource's name.
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The owner.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The hold count after this acquisition, the largest among the nodes counted for the majority.
    pub fn holds(&self) -> u64 {
        self.holds
    }

    /// The instant this hold's lease ends, on the monotonic clock.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Whether this hold's lease has not run out yet.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }
}

impl fmt::Debug for ReentrantLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReentrantLock")
            .field("resource", &String::from_utf8_lossy(&self.resource))
            .field("owner", &self.owner)
            .field("holds", &self.holds)
            .finish_non_exhaustive()
    }
}

/// The hold-count key of `resource`.
fn count_key(resource: &[u8]) -> Vec<u8> {
    [&b"muxlock:holds:"[..], resource].concat()
}

/// A reentrant acquisition's reply: the count (granted), 0 (another owner), anything else failed.
fn vote(reply: &Reply) -> (Vote, Outcome, u64) {
    match reply.as_ref().map(Value::without_attributes) {
        Ok(Value::Integer(c)) if *c > 0 => (Vote::Yes, Outcome::Granted, c.unsigned_abs()),
        Ok(Value::Integer(0)) => (Vote::Taken, Outcome::Taken, 0),
        _ => {
            let (vote, outcome) = super::core::script_vote(reply);
            (
                if vote == Vote::Taken {
                    Vote::Failed
                } else {
                    vote
                },
                outcome,
                0,
            )
        }
    }
}

impl Core {
    fn lock_reentrant(
        &self,
        owner: &Owner,
        resource: &[u8],
        ttl: Duration,
    ) -> Result<ReentrantLock> {
        let ttl_ms = self.check(resource, ttl)?;
        let counter = count_key(resource);
        let keys: [&[u8]; 2] = [resource, &counter];
        let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let mut attempt = 0;
        loop {
            let round = self.acquire_scripted(
                lua::ACQUIRE_REENTRANT,
                (&keys, &[&owner.value, ttl_arg.as_bytes()]),
                (ttl, ttl_ms),
                vote,
            );
            let (quorum, status, outcomes, nodes, holds) = (
                round.quorum,
                round.status,
                round.outcomes,
                round.nodes,
                round.count,
            );
            let failure = match settle(status, &quorum) {
                Ok(valid_until) => {
                    return Ok(ReentrantLock {
                        resource: resource.to_vec(),
                        owner: owner.clone(),
                        valid_until,
                        holds,
                        nodes,
                    });
                }
                Err(failure) => failure,
            };
            // Undo where this attempt may have counted.
            let mut undo = NodeSet::EMPTY;
            for (node, o) in outcomes.iter().enumerate() {
                let maybe = matches!(
                    o,
                    Outcome::Granted
                        | Outcome::Quarantined
                        | Outcome::NotAwaited
                        | Outcome::Failed(NodeError::Timeout)
                );
                if maybe && nodes.contains(node) {
                    undo.insert(node);
                }
            }
            if undo != NodeSet::EMPTY {
                let mut buf = BytesMut::new();
                lua::eval(
                    &mut buf,
                    lua::RELEASE_REENTRANT,
                    true,
                    &keys,
                    &[&owner.value],
                );
                let mut round = self.fanout.release_round(Instant::now());
                round.send_to(undo, &buf, 1);
            }
            if attempt >= self.config.retry_count {
                let report = Box::new(self.report(resource, outcomes, quorum.quorum()));
                return Err(match failure {
                    Failure::Held => Error::Held(report),
                    _ => Error::Quorum(report),
                });
            }
            attempt += 1;
            thread::sleep(self.retry_pause());
        }
    }

    fn unlock_reentrant(&self, lock: ReentrantLock) -> Result<usize> {
        let n = self.fanout.len();
        let quorum = self.quorum();
        let counter = count_key(&lock.resource);
        let keys: [&[u8]; 2] = [&lock.resource, &counter];
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let (mut released, mut answered) = (0, 0);
        for (node, outcome) in outcomes.iter_mut().enumerate() {
            if !lock.nodes.contains(node) {
                *outcome = Outcome::NotSent;
                answered += 1;
            }
        }
        let mut last = false;
        self.pipelined(
            Kind::Release,
            lock.nodes,
            1,
            later(Instant::now(), self.config.round_timeout),
            quorum,
            |buf, full| {
                lua::eval(
                    buf,
                    lua::RELEASE_REENTRANT,
                    full,
                    &keys,
                    &[&lock.owner.value],
                )
            },
            |_, node, reply| {
                let (v, outcome) = match reply.as_ref().map(Value::without_attributes) {
                    Ok(Value::Integer(c)) if *c >= 0 => {
                        last |= *c == 0;
                        (Vote::Yes, Outcome::Granted)
                    }
                    Ok(Value::Integer(_)) => (Vote::Taken, Outcome::Taken),
                    _ => super::core::script_vote(&reply),
                };
                self.votes[node].count(&outcome);
                outcomes[node] = outcome;
                released += usize::from(v == Vote::Yes);
                answered += usize::from(v != Vote::Failed);
                quorum.saturating_sub(released)
            },
        );
        if last {
            self.waits.notify(&lock.resource);
        }
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
    /// A new owner for reentrant locks: a fresh random value.
    ///
    /// # Errors
    ///
    /// [`Error::Os`] if the OS cannot provide randomness.
    pub fn owner(&self) -> Result<Owner> {
        let value = self.core.tokens.next().map_err(|e| Error::Os {
            doing: "drawing the owner value from the OS's randomness",
            error: std::io::Error::from(e).into(),
        })?;
        Ok(Owner { value })
    }

    /// Acquires `resource` for `owner`, reentrantly: if `owner` already holds it (in any thread), the hold count
    /// goes up instead of the call failing. Retries as [`lock`](super::LockManager::lock) does when another owner
    /// holds it. Each hold is released by [`unlock_reentrant`](super::LockManager::unlock_reentrant); the key
    /// goes with the last.
    ///
    /// # Errors
    ///
    /// As [`lock`](super::LockManager::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"])?;
    /// let me = locks.owner()?;
    /// let outer = locks.lock_reentrant(&me, "tree", Duration::from_secs(10))?;
    /// let inner = locks.lock_reentrant(&me, "tree", Duration::from_secs(10))?; // no deadlock: count 2
    /// assert_eq!(inner.holds(), 2);
    /// locks.unlock_reentrant(inner)?;
    /// locks.unlock_reentrant(outer)?; // the key goes now
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn lock_reentrant(
        &self,
        owner: &Owner,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<ReentrantLock> {
        self.core.lock_reentrant(owner, resource.as_ref(), ttl)
    }

    /// Releases one hold of a reentrant lock: each node decrements the owner's count and deletes the key when it
    /// reaches zero. Returns the number of nodes that counted the release, as
    /// [`unlock`](super::LockManager::unlock) does.
    ///
    /// # Errors
    ///
    /// [`Error::Quorum`] if fewer than a majority of nodes answered.
    pub fn unlock_reentrant(&self, lock: ReentrantLock) -> Result<usize> {
        self.core.unlock_reentrant(lock)
    }
}
