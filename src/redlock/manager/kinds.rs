//! [`LockManager`]'s verbs beside the request: batches of plain locks (`try_lock_batch`, `unlock_batch`) and
//! owners of reentrant holds (`owner`).

use std::time::Duration;

use super::LockManager;
use crate::redlock::engine::seam::block;
use crate::redlock::error::{Error, Result};
use crate::redlock::kind::Kind;
use crate::redlock::kind::Lock;
use crate::redlock::kind::owned::Owner;

impl LockManager {
    /// One attempt to acquire each of `resources` for `ttl`, all in one round: the `SET NX` commands of the
    /// whole batch go to each node pipelined in one write, and each resource gets its own quorum, validity and
    /// result, in the order given: `Ok(Some(lock))` acquired, `Ok(None)` held by another holder (or by an
    /// earlier entry of this batch for the same resource), `Err` for that resource only.
    ///
    /// The locks are ordinary [`Lock`]s: extend or release them one by one, or together with
    /// [`unlock_batch`](crate::redlock::LockManager::unlock_batch). Resources not acquired have been released already on
    /// the nodes that had set them. Nothing is retried.
    ///
    /// # Errors
    ///
    /// Per resource: [`Error::Quorum`](crate::Error::Quorum) if too many nodes failed to answer for its decision, [`Error::Config`](crate::Error::Config) for
    /// an empty name. Every entry is [`Error::Config`](crate::Error::Config) for an invalid `ttl` or a batch larger than
    /// [`Config::max_in_flight`](crate::redlock::Config::max_in_flight) (nothing is sent).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"])?;
    /// let jobs: Vec<String> = (0..100).map(|i| format!("job:{i}")).collect();
    /// let results = locks.try_lock_batch(&jobs, Duration::from_secs(30));
    /// let mine: Vec<_> = results.into_iter().filter_map(|r| r.ok().flatten()).collect();
    /// // ... work on the jobs whose lock we got ...
    /// for released in locks.unlock_batch(mine) {
    ///     released?;
    /// }
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn try_lock_batch<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Vec<Result<Option<Lock>>> {
        block(self.try_lock_batch_async(resources, ttl))
    }

    /// As [`try_lock_batch`](crate::redlock::LockManager::try_lock_batch), as a future that never blocks the
    /// executor's thread. Cancel-safe: dropped part-way, it releases every key it may have set.
    ///
    /// # Errors
    ///
    /// As [`try_lock_batch`](crate::redlock::LockManager::try_lock_batch), per resource.
    pub async fn try_lock_batch_async<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Vec<Result<Option<Lock>>> {
        let names: Vec<&[u8]> = resources.iter().map(AsRef::as_ref).collect();
        let leases = self.engine().try_lock_batch(&names, ttl).await;
        // Batches are plain locks acquired together.
        leases
            .into_iter()
            .map(|r| r.map(|lease| lease.map(|lease| Lock::new(lease, Kind::Plain))))
            .collect()
    }

    /// Releases `locks` in one round: one compare-and-delete script per node for all of them. Returns, per lock
    /// in the order given, what [`unlock`](crate::redlock::LockManager::unlock) would: the number of nodes that deleted
    /// its key, once every lock is confirmed by a majority or every node answered or the round timed out.
    ///
    /// Locks of another kind than one plain resource (a set, a fenced lock, an owned hold: not made by
    /// [`try_lock_batch`](crate::redlock::LockManager::try_lock_batch)) are released as
    /// [`unlock`](crate::redlock::LockManager::unlock) releases them, each in a round of its own: a plain
    /// compare-and-delete would free a set's first name only, a fenced key without raising its counter, or an
    /// owner's key under its other holds.
    ///
    /// # Errors
    ///
    /// Per lock, as [`unlock`](crate::redlock::LockManager::unlock): [`Error::LockLost`] if no majority can have
    /// held it any more (it had expired: its work may have overlapped another holder's), [`Error::Quorum`] if its
    /// release is unconfirmed (the lock ends with its lease).
    pub fn unlock_batch(&self, locks: Vec<Lock>) -> Vec<Result<usize>> {
        block(self.unlock_batch_async(locks))
    }

    /// As [`unlock_batch`](crate::redlock::LockManager::unlock_batch), as a future that never blocks the
    /// executor's thread.
    ///
    /// # Errors
    ///
    /// As [`unlock_batch`](crate::redlock::LockManager::unlock_batch), per lock.
    pub async fn unlock_batch_async(&self, locks: Vec<Lock>) -> Vec<Result<usize>> {
        type Numbered = Vec<(usize, Lock)>;
        // Cluster members: one release per lock (a batch's keys lie in many slots; no script may span them). A
        // waiting request's plain lock goes as `unlock` releases it: it hands the key on and takes the waiter's
        // entry off the queue (`kind/queued.rs`).
        let routed = self.engine().fanout.is_routed();
        let (plain, other): (Numbered, Numbered) = locks
            .into_iter()
            .enumerate()
            .partition(|(_, l)| l.batches_with(routed));
        let mut results: Vec<Option<Result<usize>>> =
            (0..plain.len() + other.len()).map(|_| None).collect();
        let (at, plain): (Vec<usize>, Vec<Lock>) = plain.into_iter().unzip();
        let leases: Vec<_> = plain.iter().map(|l| &l.lease).collect();
        let released = self.engine().unlock_batch(&leases).await;
        plain
            .iter()
            .for_each(|l| self.keeper.waits.notify(l.resource()));
        for (i, r) in at.into_iter().zip(released) {
            results[i] = Some(r);
        }
        for (i, lock) in other {
            results[i] = Some(self.unlock_async(lock).await);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::config("no release result"))))
            .collect()
    }

    /// A new owner for reentrant locks: a fresh random value.
    ///
    /// # Errors
    ///
    /// [`Error::Os`](crate::Error::Os) if the OS cannot provide randomness.
    pub fn owner(&self) -> Result<Owner> {
        let value = self
            .engine()
            .tokens
            .draw("drawing the owner value from the OS's randomness")?;
        Ok(Owner { value })
    }

    /// **For the project's tests only (the `sim` feature): a release that ignores which hold it counts down, on
    /// purpose.** As [`unlock`](crate::redlock::LockManager::unlock) of an [owned](crate::redlock::Request::owned)
    /// hold, but each node counts down *some* hold of the owner even if it never saw this one
    /// ([`RELEASE_REENTRANT_UNATTRIBUTED`](crate::redlock::lua::RELEASE_REENTRANT_UNATTRIBUTED)): the control
    /// that the fault tests must catch. Another kind of lock is released as `unlock` releases it.
    ///
    /// # Errors
    ///
    /// As [`unlock`](crate::redlock::LockManager::unlock).
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub fn unlock_reentrant_unattributed(&self, lock: Lock) -> Result<usize> {
        let Kind::Owned(_, hold) = &lock.kind else {
            return self.unlock(lock);
        };
        let released = block(crate::redlock::kind::owned::release(
            self.engine(),
            &lock.lease,
            hold.as_ref(),
            crate::redlock::lua::RELEASE_REENTRANT_UNATTRIBUTED,
        ));
        // This process' waiters look if some node deleted the key, or if the release failed (it may have).
        if !matches!(released, Ok((_, false))) {
            self.keeper.waits.notify(lock.resource());
        }
        released.map(|(released, _)| released)
    }

    /// **For the project's tests only (the `sim` feature): an unsafe semaphore, on purpose.** One attempt at a
    /// permit of `name` (of `permits`) by the majority-of-counters construction: each node takes one free
    /// permit, whichever, and a majority of nodes that took one is a hold, with no index
    /// (`kind/semaphore.rs`'s module doc: it admits more than `permits` holders). The control the fault tests
    /// must catch; released by [`unlock`](crate::redlock::LockManager::unlock).
    ///
    /// # Errors
    ///
    /// As [`Request::acquire`](crate::redlock::Request::acquire) of [`permits`](crate::redlock::Request::permits)
    /// with [`once`](crate::redlock::Request::once).
    #[cfg(feature = "sim")]
    #[doc(hidden)]
    pub fn acquire_permit_counted_per_node(
        &self,
        name: impl AsRef<[u8]>,
        permits: u32,
        ttl: Duration,
    ) -> Result<Lock> {
        use crate::redlock::kind::semaphore::{self, Permits};
        let engine = self.engine();
        let name = name.as_ref();
        let kind = Kind::Semaphore(Permits {
            name: name.to_vec(),
            count: permits,
            index: None,
        });
        let ask = kind.check(name.to_vec(), engine, ttl)?;
        let ttl = (ask.ttl, ask.ttl_ms);
        block(engine.retrying(false, || async {
            let value = engine.tokens.draw("drawing the lock value")?;
            Ok(semaphore::attempt_counted_per_node(engine, name, permits, value, ttl).await)
        }))
    }
}
