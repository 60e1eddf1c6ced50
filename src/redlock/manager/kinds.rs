//! [`LockManager`]'s verbs of the other kinds: sets (`lock_many` and kin, `hold_many`), batches, fenced locks,
//! reentrant locks.

use std::time::Duration;

use super::LockManager;
use crate::redlock::engine::seam::block;
use crate::redlock::error::{Error, Result};
use crate::redlock::guard::Guard;
use crate::redlock::kind::fenced::FencedLock;
use crate::redlock::kind::lock::{Kind, Lock};
use crate::redlock::kind::reentrant::{Owner, ReentrantLock};
use crate::redlock::kind::set::LockSet;
use crate::redlock::lua;
use crate::redlock::unreleased::Unreleased;

impl LockManager {
    /// Acquires every resource of `resources` or none, for `ttl`, in one round: each node gets one script that
    /// sets every key of the set or none (its part is atomic), and the set is held if a majority set it in time.
    /// Retries as [`lock`](crate::redlock::LockManager::lock) does, with one value for all attempts, so that keys left by
    /// its own failed attempt never block it.
    ///
    /// The names are sorted and deduplicated first: two callers asking for overlapping sets in different orders
    /// send the same requests, and neither can hold part of its set waiting for the rest (a node's part is all or
    /// nothing, and a failed attempt releases what it set before returning or retrying).
    ///
    /// # Errors
    ///
    /// - [`Error::Held`](crate::Error::Held) if some resource of the set was held by another holder at the last attempt;
    /// - [`Error::Quorum`](crate::Error::Quorum) if too many nodes failed for a majority (the report names the set as `"a, b, c"`);
    /// - [`Error::Config`](crate::Error::Config) for an empty set, an empty name or an invalid `ttl`.
    ///
    /// In every error case nothing of the set stays locked on the nodes that answered (see the module docs of
    /// `many` in the source for the exact guarantee).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"])?;
    /// let set = locks.lock_many(&["account:7", "account:3"], Duration::from_secs(5))?;
    /// // ... move money between the two accounts ...
    /// locks.unlock_many(set)?;
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    #[deprecated(
        since = "0.2.0",
        note = "use `request_all(resources).ttl(ttl).acquire()`"
    )]
    pub fn lock_many<R: AsRef<[u8]>>(&self, resources: &[R], ttl: Duration) -> Result<LockSet> {
        self.request_all(resources)
            .ttl(ttl)
            .acquire()
            .map(LockSet::from_lock)
    }

    /// One attempt at [`lock_many`](crate::redlock::LockManager::lock_many): `Ok(None)` if some resource of the set is
    /// held by another holder.
    ///
    /// # Errors
    ///
    /// As [`lock_many`](crate::redlock::LockManager::lock_many), without [`Error::Held`](crate::Error::Held).
    #[deprecated(
        since = "0.2.0",
        note = "use `request_all(resources).ttl(ttl).once().acquire()` (`Err(Error::Held)` when held)"
    )]
    pub fn try_lock_many<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Result<Option<LockSet>> {
        crate::redlock::error::not_held(self.request_all(resources).ttl(ttl).once().acquire())
            .map(|set| set.map(LockSet::from_lock))
    }

    /// Extends every key of `set` to `ttl` from now, together: a node extends the set only if it still holds every
    /// key of it. As [`extend`](crate::redlock::LockManager::extend) otherwise.
    ///
    /// # Errors
    ///
    /// As [`extend`](crate::redlock::LockManager::extend).
    #[deprecated(
        since = "0.2.0",
        note = "use `extend` on the `Lock` of `request_all(..).acquire()`"
    )]
    pub fn extend_many(&self, set: &mut LockSet, ttl: Duration) -> Result<()> {
        let mut lock = Lock::from(LockSet::of_set(set));
        block(self.engine().extend_any(&mut lock, ttl))?;
        set.valid_until = lock.valid_until;
        set.extensions = lock.extensions;
        Ok(())
    }

    /// Releases every key of `set` on all nodes at once (each node deletes the keys that still hold the set's
    /// value). Returns the number of nodes that deleted some, as [`unlock`](crate::redlock::LockManager::unlock) does.
    ///
    /// # Errors
    ///
    /// As [`unlock`](crate::redlock::LockManager::unlock): [`Error::LockLost`] if no majority can have held the
    /// set any more (it had expired), [`Error::Quorum`] if it is unconfirmed.
    #[deprecated(
        since = "0.2.0",
        note = "use `unlock` on the `Lock` of `request_all(..).acquire()`"
    )]
    pub fn unlock_many(&self, set: LockSet) -> Result<usize> {
        self.unlock(Lock::from(set))
    }

    /// Acquires a set as [`lock_many`](crate::redlock::LockManager::lock_many) does and holds it under one
    /// [`Guard`](crate::redlock::Guard): the watchdog renews every key of the set together (a node confirms only if it
    /// still holds all of them), and the guard's release releases them together. [`Guard::resources`] lists
    /// the set; [`Guard::resource`] is its first name, the one the watchdog's client-side tracking watches (a
    /// loss of another key is found by the next renewal).
    ///
    /// # Errors
    ///
    /// As [`lock_many`](crate::redlock::LockManager::lock_many), and [`Error::Config`](crate::Error::Config) for a `ttl` too short to renew.
    ///
    /// [`Guard::resources`]: crate::redlock::Guard::resources
    /// [`Guard::resource`]: crate::redlock::Guard::resource
    #[deprecated(since = "0.2.0", note = "use `request_all(resources).ttl(ttl).hold()`")]
    pub fn hold_many<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Result<super::Guard> {
        self.request_all(resources).ttl(ttl).hold()
    }

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
    /// executor's thread (issue #26). Cancel-safe: dropped part-way, it releases every key it may have set.
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
        self.engine().try_lock_batch(&names, ttl).await
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
    /// executor's thread (issue #26).
    ///
    /// # Errors
    ///
    /// As [`unlock_batch`](crate::redlock::LockManager::unlock_batch), per lock.
    pub async fn unlock_batch_async(&self, locks: Vec<Lock>) -> Vec<Result<usize>> {
        type Numbered = Vec<(usize, Lock)>;
        // Cluster members: one release per lock (a batch's keys lie in many slots; no script may span them).
        let routed = self.engine().fanout.is_routed();
        let (plain, other): (Numbered, Numbered) = locks
            .into_iter()
            .enumerate()
            .partition(|(_, l)| l.kind == Kind::Plain && !routed);
        let mut results: Vec<Option<Result<usize>>> =
            (0..plain.len() + other.len()).map(|_| None).collect();
        let (at, plain): (Vec<usize>, Vec<Lock>) = plain.into_iter().unzip();
        let released = self.engine().unlock_batch(&plain).await;
        plain
            .iter()
            .for_each(|l| self.keeper.waits.notify(&l.resource));
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

    /// Acquires `resource` for `ttl` as [`lock`](crate::redlock::LockManager::lock) does, with a fencing token that is
    /// larger than the token of every earlier successful fenced acquisition of `resource`, by any client, even
    /// when the majorities differ, and whatever round timeouts the other clients use. Costs two round trips (see the
    /// module docs of `fenced` in the source for the design, the argument and its limits: counters must survive
    /// restarts, `appendfsync always`).
    ///
    /// # Errors
    ///
    /// As [`lock`](crate::redlock::LockManager::lock); also [`Error::Quorum`](crate::Error::Quorum) when the token was not confirmed by a
    /// majority of all nodes within the lease (the lock is released then).
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
    #[deprecated(
        since = "0.2.0",
        note = "use `request(resource).ttl(ttl).fenced().acquire()`"
    )]
    pub fn lock_fenced(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<FencedLock> {
        self.request(resource)
            .ttl(ttl)
            .fenced()
            .acquire()
            .map(FencedLock::from_lock)
    }

    /// One attempt at [`lock_fenced`](crate::redlock::LockManager::lock_fenced): `Ok(None)` if another holder has it.
    ///
    /// # Errors
    ///
    /// As [`lock_fenced`](crate::redlock::LockManager::lock_fenced), without [`Error::Held`](crate::Error::Held).
    #[deprecated(
        since = "0.2.0",
        note = "use `request(resource).ttl(ttl).fenced().once().acquire()` (`Err(Error::Held)` when held)"
    )]
    pub fn try_lock_fenced(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Option<FencedLock>> {
        crate::redlock::error::not_held(self.request(resource).ttl(ttl).fenced().once().acquire())
            .map(|lock| lock.map(FencedLock::from_lock))
    }

    /// Extends a fenced lock as [`extend`](crate::redlock::LockManager::extend) does; the token does not change.
    ///
    /// # Errors
    ///
    /// As [`extend`](crate::redlock::LockManager::extend).
    #[deprecated(
        since = "0.2.0",
        note = "use `extend` on the `Lock` of `request(..).fenced().acquire()`"
    )]
    pub fn extend_fenced(&self, lock: &mut FencedLock, ttl: Duration) -> Result<()> {
        block(self.engine().extend(&mut lock.lock, ttl))
    }

    /// Releases a fenced lock: each node that deletes the key first raises its counter to the lock's token.
    ///
    /// # Errors
    ///
    /// As [`unlock`](crate::redlock::LockManager::unlock): [`Error::LockLost`] if no majority can have held it any
    /// more, [`Error::Quorum`] if the release is unconfirmed.
    #[deprecated(
        since = "0.2.0",
        note = "use `unlock` on the `Lock` of `request(..).fenced().acquire()`"
    )]
    pub fn unlock_fenced(&self, lock: FencedLock) -> Result<usize> {
        self.unlock(Lock::from(lock))
    }

    /// Acquires `resource` as [`lock_fenced`](crate::redlock::LockManager::lock_fenced) does and holds it under a
    /// [`Guard`] ([`Guard::token`] is the token). Renewals do not change the token; the guard's release is the
    /// fenced release.
    ///
    /// # Errors
    ///
    /// As [`lock_fenced`](crate::redlock::LockManager::lock_fenced), and [`Error::Config`](crate::Error::Config) for a `ttl` too short to renew.
    #[deprecated(
        since = "0.2.0",
        note = "use `request(resource).ttl(ttl).fenced().hold()`"
    )]
    pub fn hold_fenced(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Guard> {
        self.request(resource).ttl(ttl).fenced().hold()
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

    /// Acquires `resource` for `owner`, reentrantly: if `owner` already holds it (in any thread), the hold count
    /// goes up instead of the call failing. Retries as [`lock`](crate::redlock::LockManager::lock) does when another owner
    /// holds it. Each hold is released by [`unlock_reentrant`](crate::redlock::LockManager::unlock_reentrant); the key
    /// goes with the last.
    ///
    /// # Errors
    ///
    /// As [`lock`](crate::redlock::LockManager::lock).
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
    #[deprecated(
        since = "0.2.0",
        note = "use `request(resource).ttl(ttl).owned(owner).acquire()`"
    )]
    pub fn lock_reentrant(
        &self,
        owner: &Owner,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<ReentrantLock> {
        self.request(resource)
            .ttl(ttl)
            .owned(owner)
            .acquire()
            .map(ReentrantLock::from_lock)
    }

    /// Releases one hold of a reentrant lock: each node the acquisition was sent to removes this hold (and only
    /// this one: a node that never saw it removes nothing) and deletes the key when no hold is left. Returns the
    /// number of nodes that confirmed the release, as [`unlock`](crate::redlock::LockManager::unlock) does.
    ///
    /// # Errors
    ///
    /// [`Unreleased`], with the hold itself to release again ([`Unreleased::into_lock`]; releasing a hold twice is
    /// harmless), carrying:
    ///
    /// - [`Error::Quorum`] if fewer than a majority confirmed and the silent nodes may still have the hold;
    /// - [`Error::LockLost`] if no majority can still have had this hold to remove (the lock had expired there): the work it protected may have overlapped another owner's; releasing again
    ///   changes nothing.
    ///
    /// A nested hold's release deletes no key but removes the hold: that counts as confirmed. `?` turns it into
    /// the [`Error`], dropping the hold (it then stays where the release did not reach until its lease runs out).
    #[deprecated(
        since = "0.2.0",
        note = "use `unlock` on the `Lock` of `request(..).owned(owner).acquire()`"
    )]
    pub fn unlock_reentrant(
        &self,
        lock: ReentrantLock,
    ) -> std::result::Result<usize, Unreleased<ReentrantLock>> {
        self.release_hold(lock, lua::RELEASE_REENTRANT)
    }

    /// **For tests only: the bug of issue #20 on purpose.** As
    /// [`unlock_reentrant`](crate::redlock::LockManager::unlock_reentrant), but each node counts down *some* hold of the
    /// owner even if it never saw this one ([`lua::RELEASE_REENTRANT_UNATTRIBUTED`]): the control that the
    /// fault tests must catch. Never use it.
    #[doc(hidden)]
    pub fn unlock_reentrant_unattributed(
        &self,
        lock: ReentrantLock,
    ) -> std::result::Result<usize, Unreleased<ReentrantLock>> {
        self.release_hold(lock, lua::RELEASE_REENTRANT_UNATTRIBUTED)
    }

    /// Releases one reentrant hold with `script`; this process' waiters look if some node deleted the key (or the
    /// release failed: it may have).
    fn release_hold(
        &self,
        lock: ReentrantLock,
        script: lua::Lua,
    ) -> std::result::Result<usize, Unreleased<ReentrantLock>> {
        match block(self.engine().unlock_reentrant(
            (&lock.resource, lock.nodes),
            (&lock.owner.value, &lock.hold),
            script,
        )) {
            Ok((released, freed)) => {
                if freed {
                    self.keeper.waits.notify(lock.resource());
                }
                Ok(released)
            }
            Err(error) => {
                self.keeper.waits.notify(lock.resource());
                Err(Unreleased {
                    error,
                    lock: Box::new(lock),
                })
            }
        }
    }
}
