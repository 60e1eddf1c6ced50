//! The engine behind its seam, for the deterministic simulator in `tests/sim/`: **not an API**, compiled only
//! with the `sim` feature and hidden from the docs.
//!
//! [`Engine`] runs the very rounds a [`LockManager`](super::LockManager) runs (the same `Core`, generic over
//! [`Nodes`] and [`Clock`]), against whatever nodes and clock it is given, with lock values drawn from a seeded
//! stream so that one seed gives one history. It has the engine-level verbs of every lock kind; guards, the
//! watchdog and waiting stay on the real fanout and clock in this stage.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::config::Config;
use super::core::Core;
use super::error::Result;
use super::fenced::FencedLock;
use super::lock::Lock;
use super::lua;
use super::many::LockSet;
use super::reentrant::{Owner, ReentrantLock};
use super::restart;
use super::stats::Votes;
use super::token::Tokens;

pub use super::seam::{Clock, NodeRound, Nodes, SystemClock};

/// The lock engine over simulated nodes and a simulated clock.
#[derive(Debug)]
pub struct Engine<N, C> {
    core: Core<N, C>,
}

/// The commands a connection runs before its first request, in order (the scripts' `SCRIPT LOAD`s, then the
/// restart guard's readings if `config` turns it on): a simulated node runs them on every new connection and
/// [`Nodes::setup_replies`] hands back their replies.
pub fn setup_commands(config: &Config) -> Vec<Bytes> {
    restart::connection_setup(config, 0).0
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// An engine over `nodes` and `clock`, with `config` (checked as a manager's is) and lock values from a
    /// stream seeded by `seed`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`](super::Error::Config) for an invalid `config`.
    pub fn new(nodes: N, clock: C, config: Config, seed: [u8; 32]) -> Result<Engine<N, C>> {
        config.validate()?;
        let (_, restart) = restart::connection_setup(&config, nodes.len());
        Ok(Engine {
            core: Core {
                votes: (0..nodes.len()).map(|_| Votes::default()).collect(),
                fanout: nodes,
                clock,
                config,
                tokens: Tokens::seeded(seed),
                restart,
            },
        })
    }

    /// The nodes.
    pub fn nodes(&self) -> &N {
        &self.core.fanout
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.core.clock
    }

    /// The majority.
    pub fn quorum(&self) -> usize {
        self.core.quorum()
    }

    /// As [`LockManager::try_lock`](super::LockManager::try_lock).
    pub fn try_lock(&self, resource: &[u8], ttl: Duration) -> Result<Option<Lock>> {
        self.core.try_lock(resource, ttl)
    }

    /// As [`LockManager::lock`](super::LockManager::lock) (retries with the clock's pauses).
    pub fn lock(&self, resource: &[u8], ttl: Duration) -> Result<Lock> {
        self.core.lock(resource, ttl)
    }

    /// As [`LockManager::extend`](super::LockManager::extend).
    pub fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        self.core.extend(lock, ttl)
    }

    /// As [`LockManager::unlock`](super::LockManager::unlock).
    pub fn unlock(&self, lock: Lock) -> Result<usize> {
        self.core.unlock(&lock)
    }

    /// As [`LockManager::extend_value`](super::LockManager::extend_value).
    pub fn extend_value(&self, resource: &[u8], value: &[u8], ttl: Duration) -> Result<Instant> {
        self.core.extend_value(resource, value, ttl)
    }

    /// As [`LockManager::unlock_value`](super::LockManager::unlock_value).
    pub fn unlock_value(&self, resource: &[u8], value: &[u8]) -> Result<usize> {
        self.core.unlock_value(resource, value)
    }

    /// As [`LockManager::try_lock_batch`](super::LockManager::try_lock_batch).
    pub fn try_lock_batch(&self, resources: &[&[u8]], ttl: Duration) -> Vec<Result<Option<Lock>>> {
        self.core.try_lock_batch(resources, ttl)
    }

    /// As [`LockManager::unlock_batch`](super::LockManager::unlock_batch).
    pub fn unlock_batch(&self, locks: Vec<Lock>) -> Vec<Result<usize>> {
        self.core.unlock_batch(&locks)
    }

    /// As [`LockManager::lock_many`](super::LockManager::lock_many) (`retry`) or
    /// [`try_lock_many`](super::LockManager::try_lock_many).
    pub fn lock_many(
        &self,
        resources: &[&[u8]],
        ttl: Duration,
        retry: bool,
    ) -> Result<Option<LockSet>> {
        self.core.lock_many(resources, ttl, retry)
    }

    /// As [`LockManager::extend_many`](super::LockManager::extend_many).
    pub fn extend_many(&self, set: &mut LockSet, ttl: Duration) -> Result<()> {
        self.core.extend_many(set, ttl)
    }

    /// As [`LockManager::unlock_many`](super::LockManager::unlock_many).
    pub fn unlock_many(&self, set: LockSet) -> Result<usize> {
        self.core.unlock_many(&set)
    }

    /// As [`LockManager::lock_fenced`](super::LockManager::lock_fenced) (`retry`) or
    /// [`try_lock_fenced`](super::LockManager::try_lock_fenced).
    pub fn lock_fenced(
        &self,
        resource: &[u8],
        ttl: Duration,
        retry: bool,
    ) -> Result<Option<FencedLock>> {
        self.core.lock_fenced(resource, ttl, retry)
    }

    /// As [`LockManager::extend_fenced`](super::LockManager::extend_fenced).
    pub fn extend_fenced(&self, lock: &mut FencedLock, ttl: Duration) -> Result<()> {
        self.core.extend(&mut lock.lock, ttl)
    }

    /// As [`LockManager::unlock_fenced`](super::LockManager::unlock_fenced).
    pub fn unlock_fenced(&self, lock: FencedLock) -> Result<usize> {
        self.core.unlock_fenced(&lock.lock, lock.token)
    }

    /// As [`LockManager::owner`](super::LockManager::owner), from the seeded stream.
    pub fn owner(&self) -> Result<Owner> {
        let value = self.core.tokens.next().map_err(|e| super::Error::Os {
            doing: "drawing the owner value",
            error: std::io::Error::from(e).into(),
        })?;
        Ok(Owner { value })
    }

    /// As [`LockManager::lock_reentrant`](super::LockManager::lock_reentrant).
    pub fn lock_reentrant(
        &self,
        owner: &Owner,
        resource: &[u8],
        ttl: Duration,
    ) -> Result<ReentrantLock> {
        self.core.lock_reentrant(owner, resource, ttl)
    }

    /// As [`LockManager::unlock_reentrant`](super::LockManager::unlock_reentrant); `unattributed` releases with
    /// the script of issue #20's bug ([`lua::RELEASE_REENTRANT_UNATTRIBUTED`]), the simulator's control.
    pub fn unlock_reentrant(&self, lock: &ReentrantLock, unattributed: bool) -> Result<usize> {
        let script = match unattributed {
            true => lua::RELEASE_REENTRANT_UNATTRIBUTED,
            false => lua::RELEASE_REENTRANT,
        };
        self.core
            .unlock_reentrant(lock, script)
            .map(|(released, _)| released)
    }
}
