//! [`LockManager`]'s verbs that hold or wait: `lock_wait`, `hold` and kin, `with_lock`, `cancel_waits`; a guard
//! made for a fresh lock.

use std::time::Duration;

use super::LockManager;
use crate::redlock::error::{Error, Result};
use crate::redlock::guard::Guard;
use crate::redlock::kind::lock::Lock;
use crate::redlock::quorum::drift;
use crate::redlock::schedule::lost_margin;

impl LockManager {
    /// Acquires `resource` as [`lock`](LockManager::lock) does, waiting for it if another holder has it, up to
    /// `max_wait` in all (not a number of tries).
    ///
    /// The waiter does not poll. It sleeps until the key may have come free, and is woken by:
    /// - a release of `resource` in this process (by [`unlock`](LockManager::unlock) or a guard), at once;
    /// - on nodes that speak RESP3 (Redis 6 and later), Redis' client-side tracking: after a failed attempt the
    ///   waiter reads the key's TTL on the watchdog's *tracker* connections, which tracks the key there, and its
    ///   release, overwrite or expiry anywhere (by any client) sends an invalidation that wakes the waiter;
    /// - a timer at the end of the holder's lease as the nodes report it (the time until a majority lets the key
    ///   expire), plus a little jitter: expiry invalidations can lag the TTL, and RESP2-only servers (Redis 5,
    ///   or with `HELLO` disabled) send none. With them waiting still works, on this timer and on this process'
    ///   releases only.
    ///
    /// Waiters of this process for one resource line up first come, first served: only the first contends on the
    /// nodes, the others wait for their turn. Between processes there is no queue (Redis keeps none): the first to
    /// try after a release wins.
    ///
    /// Tracking is chosen over pub/sub because it needs nothing from the holder: a release by any Redlock client
    /// (redsync, node-redlock, a crashed holder's expiry) wakes the waiter, where a channel would only hear
    /// releases that publish to it. The tracker connections are separate from the lock connections so that
    /// nobody has to poll the lock connections for pushes between rounds (see the watchdog in the
    /// [`Guard`] docs).
    ///
    /// `max_wait` bounds the wait: the call returns by then, plus at most one round timeout if an attempt is
    /// under way at that moment. A `max_wait` of zero makes one attempt, like [`try_lock`](LockManager::try_lock)
    /// but with an error when the resource is held.
    ///
    /// # Errors
    ///
    /// - [`Error::Held`] if the resource was still held when `max_wait` ran out; [`Report::holder_ttl`] says how
    ///   long the holder's lease still ran, if the nodes said. A waiter still behind another waiter of this
    ///   process then gets the error of that waiter's last attempt.
    /// - [`Error::Quorum`] if, at the last attempt, too many nodes were down, hung or failing for a decision.
    /// - [`Error::Config`] for an empty resource name or an invalid `ttl`.
    ///
    /// [`Report::holder_ttl`]: crate::redlock::Report::holder_ttl
    #[deprecated(
        since = "0.2.0",
        note = "use `request(resource).ttl(ttl).wait(max_wait).acquire()`"
    )]
    pub fn lock_wait(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock> {
        self.request(resource).ttl(ttl).wait(max_wait).acquire()
    }

    /// Acquires `resource` as [`lock`](LockManager::lock) does and returns a [`Guard`] that keeps the lease
    /// alive in the background (renewed at a third of `ttl`) until it is dropped or
    /// [released](Guard::release). [`Config::max_extensions`](crate::redlock::Config::max_extensions) does not limit guards.
    ///
    /// `ttl` is the lease each renewal grants: how long the lock outlives this process if it dies. It must leave
    /// room for a renewal before the guard's deadline (at least about six round timeouts: 300 ms by default).
    ///
    /// # Errors
    ///
    /// As [`lock`](LockManager::lock), and [`Error::Config`] for a `ttl` too short to renew.
    #[deprecated(since = "0.2.0", note = "use `request(resource).ttl(ttl).hold()`")]
    pub fn hold(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Guard> {
        self.request(resource).ttl(ttl).hold()
    }

    /// One attempt to acquire `resource` under a [`Guard`]: `Ok(None)` if another holder has it.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](LockManager::try_lock), and [`Error::Config`] for a `ttl` too short to renew.
    #[deprecated(
        since = "0.2.0",
        note = "use `request(resource).ttl(ttl).once().hold()` (`Err(Error::Held)` when held)"
    )]
    pub fn try_hold(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Option<Guard>> {
        crate::redlock::error::not_held(self.request(resource).ttl(ttl).once().hold())
    }

    /// Waits for `resource` as [`lock_wait`](LockManager::lock_wait) does, and holds it under a [`Guard`].
    ///
    /// # Errors
    ///
    /// As [`lock_wait`](LockManager::lock_wait), and [`Error::Config`] for a `ttl` too short to renew.
    #[deprecated(
        since = "0.2.0",
        note = "use `request(resource).ttl(ttl).wait(max_wait).hold()`"
    )]
    pub fn hold_wait(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Guard> {
        self.request(resource).ttl(ttl).wait(max_wait).hold()
    }

    /// Waits for `resource` as [`lock_wait`](LockManager::lock_wait) does, with a fencing token as
    /// [`lock_fenced`](LockManager::lock_fenced) hands out, and holds it under a [`Guard`] ([`Guard::token`] is
    /// the token; renewals do not change it, and the guard's release is the fenced release).
    ///
    /// Each attempt is one fenced acquisition (two rounds: the grant, then the token's confirmation); between
    /// attempts the waiter sleeps as [`lock_wait`](LockManager::lock_wait)'s does, woken by releases and at the
    /// holder's lease end.
    ///
    /// # Errors
    ///
    /// As [`lock_wait`](LockManager::lock_wait) and [`lock_fenced`](LockManager::lock_fenced), and
    /// [`Error::Config`] for a `ttl` too short to renew. An [`Error::Held`] names no node's outcome (the probe's
    /// [`Report::holder_ttl`](crate::redlock::Report::holder_ttl) says how long the holder had left).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"])?;
    /// let guard = locks.hold_fenced_wait("ledger", Duration::from_secs(10), Duration::from_secs(30))?;
    /// let token = guard.token(); // Some(n): send it with every write to the ledger
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    #[deprecated(
        since = "0.2.0",
        note = "use `request(resource).ttl(ttl).fenced().wait(max_wait).hold()`"
    )]
    pub fn hold_fenced_wait(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Guard> {
        self.request(resource)
            .ttl(ttl)
            .fenced()
            .wait(max_wait)
            .hold()
    }

    /// Makes every call of this manager (and of its clones) that is waiting for a lock at this moment
    /// ([`lock_wait`](LockManager::lock_wait), [`hold_wait`](LockManager::hold_wait),
    /// [`hold_fenced_wait`](LockManager::hold_fenced_wait)) give up, as if its `max_wait` had run out: it returns
    /// after at most the attempt under way (bounded by the round timeout), with that attempt's lock if it got
    /// one, else with its last error, or [`Error::Held`] if it had not made an attempt yet. Calls that start
    /// later wait as usual.
    ///
    /// For an interrupt (Ctrl-C) while another thread waits: cancel, then release whatever the waiter returns.
    pub fn cancel_waits(&self) {
        self.keeper.waits.cancel_all();
    }

    /// Runs `work` under a [`Guard`] on `resource` (acquired as [`hold`](LockManager::hold) does), then releases
    /// it. `work` should check [`Guard::is_lost`] before each step that needs the lock.
    ///
    /// The release is best effort, as when a guard is dropped: if it fails, the lock ends with its lease. Use
    /// [`hold`](LockManager::hold) and [`Guard::release`] to see the release's outcome.
    ///
    /// # Errors
    ///
    /// As [`hold`](LockManager::hold): `work` does not run.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"])?;
    /// let rows = locks.with_lock("compaction", Duration::from_secs(10), |guard| {
    ///     let mut rows = 0;
    ///     while !guard.is_lost() && rows < 1_000 {
    ///         rows += 1; // ... one step of work ...
    ///     }
    ///     rows
    /// })?;
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    #[deprecated(since = "0.2.0", note = "use `request(resource).ttl(ttl).run(work)`")]
    pub fn with_lock<R>(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        work: impl FnOnce(&Guard) -> R,
    ) -> Result<R> {
        self.request(resource).ttl(ttl).run(work)
    }

    /// A guard's TTL must leave a renewal at a third of it time to be confirmed before the guard's deadline.
    pub(crate) fn check_guard_ttl(&self, ttl: Duration) -> Result<()> {
        let config = &self.engine().config;
        config.check_ttl(ttl)?;
        let margin = lost_margin(ttl, config.round_timeout);
        let room = ttl
            .saturating_sub(drift(ttl, config.drift_factor))
            .saturating_sub(margin);
        if room <= (ttl / 3).saturating_add(config.round_timeout) {
            return Err(Error::config(format!(
                "ttl {ttl:?} is too short for a guard with round_timeout {:?}: a renewal at a third of it could \
                 not be confirmed before the guard's deadline (give at least {:?})",
                config.round_timeout,
                config.round_timeout.saturating_mul(7)
            )));
        }
        Ok(())
    }
}
