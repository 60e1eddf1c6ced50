//! [`LockManager`]: the lock API, a cheap handle on what its clones and guards share (the guard room's
//! `Keeper`: the engine, the watchdog, the waiters). Every public verb of every kind of lock is here: this is the
//! only file that knows the engine, the guards and waiting together.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net::{Fanout, NodeAddr, Options};
use crate::redlock::config::Config;
use crate::redlock::engine::seam::{SystemClock, block};
use crate::redlock::engine::{Engine, restart};
use crate::redlock::error::{Error, Result};
use crate::redlock::guard::{Guard, Keeper};
use crate::redlock::inspect::Inspection;
use crate::redlock::kind::fenced::FencedLock;
use crate::redlock::kind::lock::Lock;
use crate::redlock::kind::reentrant::{Owner, ReentrantLock, draw};
use crate::redlock::kind::set::LockSet;
use crate::redlock::lua;
use crate::redlock::quorum::drift;
use crate::redlock::schedule::lost_margin;
use crate::redlock::stats::{Activity, Stats, Votes};
use crate::redlock::token::Tokens;
use crate::redlock::unreleased::Unreleased;
use crate::redlock::wait;
use crate::redlock::waiters::WaitRoom;

/// A distributed lock manager over N independent Redis masters (the Redlock algorithm).
///
/// Every operation sends its request to all N nodes at once and decides as soon as the outcome is certain: an
/// acquisition costs about one round trip to the majority's slowest node, and a node that is down or hung costs
/// nothing unless the majority needs it.
///
/// A `LockManager` is a cheap handle: clone it to share it between threads, guards and tasks (the clones share
/// one set of connections, and concurrent calls share writes on them). The connections close when the last clone
/// and the last [`Guard`](super::Guard) are gone.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use muxlock::redlock::LockManager;
///
/// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
/// let lock = locks.lock("invoice:42", Duration::from_secs(10))?;
/// // ... work while lock.is_valid() ...
/// locks.unlock(lock)?;
/// # Ok::<(), muxlock::redlock::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LockManager {
    keeper: Arc<Keeper>,
}

/// Builds a [`LockManager`]: nodes, then an optional [`Config`].
#[derive(Debug, Default)]
#[must_use]
pub struct Builder {
    nodes: Vec<String>,
    config: Config,
}

impl Builder {
    /// Adds a node: `redis://[user:pass@]host:port[/db]`, `rediss://...` (TLS: see [`Config::with_tls`]) or
    /// `host:port` (see [`NodeAddr`]).
    pub fn node(mut self, url: impl Into<String>) -> Builder {
        self.nodes.push(url.into());
        self
    }

    /// Adds several nodes.
    pub fn nodes<S: Into<String>>(mut self, urls: impl IntoIterator<Item = S>) -> Builder {
        self.nodes.extend(urls.into_iter().map(Into::into));
        self
    }

    /// Replaces the configuration (default: [`Config::default`]).
    pub fn config(mut self, config: Config) -> Builder {
        self.config = config;
        self
    }

    /// Checks everything and starts connecting to the nodes (without waiting for them).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for no nodes, an invalid address, the same node listed twice, an invalid setting, or TLS
    /// files ([`Config::with_tls`]) that cannot be read or hold nothing usable.
    /// An even number of nodes is allowed: the majority is then `N/2 + 1`, so 4 nodes tolerate one failure, like 3.
    pub fn build(self) -> Result<LockManager> {
        self.config.validate()?;
        if self.nodes.is_empty() {
            return Err(Error::config(
                "no nodes: give at least one redis://host:port",
            ));
        }
        let mut addrs: Vec<NodeAddr> = Vec::with_capacity(self.nodes.len());
        for url in &self.nodes {
            let addr: NodeAddr = url.parse().map_err(Error::addr)?;
            if let Some(twin) = addrs.iter().find(|a| same_server(a, &addr)) {
                return Err(Error::config(format!(
                    "node {addr} is listed twice (also as {twin}): a majority must span distinct servers"
                )));
            }
            addrs.push(addr);
        }
        let (setup, restart) = restart::connection_setup(&self.config, addrs.len());
        // The scripts' loading, the native probe, `CONFIG GET *append*` and the persistence marker may be refused.
        let optional_setup = restart.optional();
        let opts = Options {
            connect_timeout: self.config.connect_timeout,
            max_in_flight: self.config.max_in_flight,
            hung_timeout: self.config.hung_timeout,
            spin: self.config.spin,
            setup,
            tls: self.config.tls.clone(),
            optional_setup,
            ..Options::default()
        };
        let fanout = Fanout::new(addrs, opts).map_err(|e| match e.kind() {
            // The input is unusable (TLS files, too many nodes): the message names what.
            std::io::ErrorKind::InvalidInput => Error::config(e.to_string()),
            _ => Error::Os {
                doing: "creating the event poll",
                error: e.into(),
            },
        })?;
        Ok(LockManager {
            keeper: Arc::new(Keeper {
                engine: Engine {
                    votes: (0..fanout.len()).map(|_| Votes::default()).collect(),
                    fanout,
                    clock: SystemClock,
                    config: self.config,
                    tokens: Tokens::new(),
                    restart,
                },
                watchdog: Arc::default(),
                waits: WaitRoom::default(),
                activity: Activity::default(),
            }),
        })
    }
}

/// Two addresses name the same server if host and port match, or if they resolve to a common socket address
/// (`localhost:6379` and `127.0.0.1:6379`). Names that do not resolve now are compared as written.
fn same_server(a: &NodeAddr, b: &NodeAddr) -> bool {
    if a.port() != b.port() {
        return false;
    }
    if a.host().eq_ignore_ascii_case(b.host()) {
        return true;
    }
    match (a.resolve(), b.resolve()) {
        (Ok(x), Ok(y)) => x.iter().any(|s| y.contains(s)),
        _ => false,
    }
}

impl LockManager {
    /// The engine: every round goes through it.
    #[inline]
    fn engine(&self) -> &Engine {
        &self.keeper.engine
    }

    /// A manager for `nodes` (URLs or `host:port`) with the default [`Config`].
    ///
    /// # Errors
    ///
    /// As [`Builder::build`].
    pub fn new<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> Result<LockManager> {
        LockManager::builder().nodes(nodes).build()
    }

    /// A builder, to set a [`Config`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.engine().config
    }

    /// The nodes, in configuration order.
    pub fn nodes(&self) -> &[NodeAddr] {
        self.engine().fanout.addrs()
    }

    /// What this manager saw of each node so far: votes granted, taken and failed, grants not counted after a
    /// restart, restarts seen, timeouts, reconnects, requests per write and round-trip percentiles. Cheap enough to
    /// call at any time (no lock is taken); `Display` prints it as a table.
    pub fn stats(&self) -> Stats {
        self.engine().stats(&self.keeper.activity)
    }

    /// The majority: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.engine().quorum()
    }

    /// Acquires `resource` for `ttl`, retrying up to [`Config::retry_count`] times with a jittered delay.
    ///
    /// # Errors
    ///
    /// - [`Error::Held`] if another holder still had it at the last attempt;
    /// - [`Error::Quorum`] if too many nodes were down, hung or failing, with every node's outcome;
    /// - [`Error::Config`] for an empty resource name or an invalid `ttl`.
    pub fn lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Lock> {
        block(self.engine().lock(resource.as_ref(), ttl))
    }

    /// Acquires `resource` for [`Config::ttl`], retrying as [`lock`](LockManager::lock) does.
    ///
    /// # Errors
    ///
    /// As [`lock`](LockManager::lock).
    pub fn acquire(&self, resource: impl AsRef<[u8]>) -> Result<Lock> {
        block(
            self.engine()
                .lock(resource.as_ref(), self.engine().config.ttl),
        )
    }

    /// One attempt to acquire `resource` for `ttl`: `Ok(None)` if another holder has it.
    ///
    /// # Errors
    ///
    /// [`Error::Quorum`] if too many nodes failed to answer for a decision, [`Error::Config`] for invalid
    /// arguments.
    pub fn try_lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Option<Lock>> {
        block(self.engine().try_lock(resource.as_ref(), ttl))
    }

    /// Extends `lock`'s lease to `ttl` from now, on all nodes at once. On success the new validity is measured
    /// from the start of this call; on failure `lock` keeps its current validity.
    ///
    /// # Errors
    ///
    /// - [`Error::Expired`] if the lease had already run out (nothing is sent: an extension never re-creates an
    ///   expired lock);
    /// - [`Error::ExtendLimit`] after [`Config::max_extensions`] extensions;
    /// - [`Error::LockLost`] if a majority no longer holds our value;
    /// - [`Error::Quorum`] if too few nodes answered within the current lease.
    pub fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        block(self.engine().extend(lock, ttl))
    }

    /// Extends the lock on `resource` whose value is `value` to `ttl` from now, on all nodes at once, and returns
    /// the instant the new lease ends on this process' monotonic clock (measured from the start of this call, less
    /// the drift allowance, as for an acquisition).
    ///
    /// This is [`extend`](LockManager::extend) for a caller that holds the lock by its value alone, such as a
    /// script that acquired it in another process (`muxlock acquire` prints the value). It sends the same
    /// compare-and-pexpire script, which only extends a key that still holds `value`: **an extension by value
    /// cannot revive an expired key**, and never touches another holder's. Unlike `extend`, it does not know when
    /// the lease ends, so it cannot refuse an expired lock before sending; the nodes refuse it instead
    /// ([`Error::LockLost`]). It is not counted against [`Config::max_extensions`].
    ///
    /// # Errors
    ///
    /// - [`Error::LockLost`] if a majority does not hold `value` under `resource` (it expired, was released, or
    ///   was never taken);
    /// - [`Error::Quorum`] if too few nodes answered in time;
    /// - [`Error::Config`] for an empty resource name or value, or an invalid `ttl`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// // The value printed by `muxlock acquire nightly-report --ttl 30s` in another process:
    /// let value = "6f1c0e3a9b2d4c5e8f7a6b5c4d3e2f1a0b9c8d7e";
    /// let valid_until = locks.extend_value("nightly-report", value, Duration::from_secs(30))?;
    /// println!("valid for {:?} more", valid_until.saturating_duration_since(std::time::Instant::now()));
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn extend_value(
        &self,
        resource: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Instant> {
        block(
            self.engine()
                .extend_value(resource.as_ref(), value.as_ref(), ttl),
        )
    }

    /// Releases `lock` on all nodes at once (compare-and-delete: a node only deletes the key if it still holds this
    /// lock's value, so an expired lock never deletes its next holder's key).
    ///
    /// Returns once a majority confirmed, or every node answered, or the round timed out: the number of nodes that
    /// deleted the key by then. Nodes that had not answered still delete it when the request reaches them.
    ///
    /// # Errors
    ///
    /// [`Error::Quorum`] if fewer than a majority of nodes answered at all: the release may not have happened, and
    /// the lock will end with its lease.
    pub fn unlock(&self, lock: Lock) -> Result<usize> {
        let released = block(self.engine().unlock(&lock));
        // Whatever the outcome, the key may be free now: this process' waiters look.
        self.keeper.waits.notify(&lock.resource);
        released
    }

    /// Releases the lock on `resource` whose value is `value`, on all nodes at once: [`unlock`](LockManager::unlock)
    /// for a caller that holds the lock by its value alone (a script, another process). The same compare-and-delete
    /// script: a node deletes the key only if it still holds `value`, so another holder's lock is never touched.
    ///
    /// Returns the number of nodes that deleted the key before the round ended (as `unlock`): fewer than
    /// [`quorum`](LockManager::quorum) means the value was not held by a majority any more (the lock had expired,
    /// or was never taken), not an error.
    ///
    /// # Errors
    ///
    /// [`Error::Quorum`] if fewer than a majority of nodes answered at all; [`Error::Config`] for an empty resource
    /// name or value.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let released = locks.unlock_value("nightly-report", "6f1c0e3a9b2d4c5e8f7a6b5c4d3e2f1a0b9c8d7e")?;
    /// if released < locks.quorum() {
    ///     eprintln!("the lock had already expired: the work it protected may have overlapped another holder's");
    /// }
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn unlock_value(
        &self,
        resource: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<usize> {
        let released = block(
            self.engine()
                .unlock_value(resource.as_ref(), value.as_ref()),
        );
        // A release refused before its round (an empty name or value) released nothing: nobody to wake.
        if !matches!(released, Err(Error::Config(_))) {
            self.keeper.waits.notify(resource.as_ref());
        }
        released
    }

    /// Reads what every node holds under `resource`'s key, in one round to all nodes (`GET` and `PTTL`, pipelined),
    /// without taking or changing anything: for a status display, or to find who holds a lock.
    ///
    /// Nodes that are down or do not answer within [`Config::round_timeout`] appear as [`KeyState::Failed`](super::KeyState::Failed); the
    /// call itself fails only for an invalid argument.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty resource name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::{KeyState, LockManager};
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let seen = locks.inspect("invoice:42")?;
    /// match seen.holder() {
    ///     Some(value) => println!("held by {} on {} nodes", String::from_utf8_lossy(value), seen.holding(value)),
    ///     None => println!("not held by a majority"),
    /// }
    /// for (node, state) in seen.nodes() {
    ///     if let KeyState::Held { ttl: Some(ttl), .. } = state {
    ///         println!("{node}: expires in {ttl:?}");
    ///     }
    /// }
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn inspect(&self, resource: impl AsRef<[u8]>) -> Result<Inspection> {
        block(self.engine().inspect(resource.as_ref()))
    }

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
    /// [`Report::holder_ttl`]: super::Report::holder_ttl
    pub fn lock_wait(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Lock> {
        wait::lock_wait(&self.keeper, resource.as_ref(), ttl, max_wait)
    }

    /// Acquires `resource` as [`lock`](LockManager::lock) does and returns a [`Guard`] that keeps the lease
    /// alive in the background (renewed at a third of `ttl`) until it is dropped or
    /// [released](Guard::release). [`Config::max_extensions`] does not limit guards.
    ///
    /// `ttl` is the lease each renewal grants: how long the lock outlives this process if it dies. It must leave
    /// room for a renewal before the guard's deadline (at least about six round timeouts: 300 ms by default).
    ///
    /// # Errors
    ///
    /// As [`lock`](LockManager::lock), and [`Error::Config`] for a `ttl` too short to renew.
    pub fn hold(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Guard> {
        self.check_guard_ttl(ttl)?;
        let lock = block(self.engine().lock(resource.as_ref(), ttl))?;
        Ok(self.guard(lock, ttl))
    }

    /// One attempt to acquire `resource` under a [`Guard`]: `Ok(None)` if another holder has it.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](LockManager::try_lock), and [`Error::Config`] for a `ttl` too short to renew.
    pub fn try_hold(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Option<Guard>> {
        self.check_guard_ttl(ttl)?;
        let lock = block(self.engine().try_lock(resource.as_ref(), ttl))?;
        Ok(lock.map(|lock| self.guard(lock, ttl)))
    }

    /// Waits for `resource` as [`lock_wait`](LockManager::lock_wait) does, and holds it under a [`Guard`].
    ///
    /// # Errors
    ///
    /// As [`lock_wait`](LockManager::lock_wait), and [`Error::Config`] for a `ttl` too short to renew.
    pub fn hold_wait(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Guard> {
        self.check_guard_ttl(ttl)?;
        let lock = wait::lock_wait(&self.keeper, resource.as_ref(), ttl, max_wait)?;
        Ok(self.guard(lock, ttl))
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
    /// [`Report::holder_ttl`](super::Report::holder_ttl) says how long the holder had left).
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
    pub fn hold_fenced_wait(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        max_wait: Duration,
    ) -> Result<Guard> {
        self.check_guard_ttl(ttl)?;
        let fenced = wait::lock_fenced_wait(&self.keeper, resource.as_ref(), ttl, max_wait)?;
        Ok(self
            .keeper
            .guard(fenced.lock, ttl, Some(fenced.token), None))
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
    pub fn with_lock<R>(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        work: impl FnOnce(&Guard) -> R,
    ) -> Result<R> {
        let guard = self.hold(resource, ttl)?;
        let out = work(&guard);
        drop(guard);
        Ok(out)
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

    /// Puts a freshly acquired lock under the watchdog.
    fn guard(&self, lock: Lock, ttl: Duration) -> Guard {
        self.keeper.guard(lock, ttl, None, None)
    }

    /// Acquires every resource of `resources` or none, for `ttl`, in one round: each node gets one script that
    /// sets every key of the set or none (its part is atomic), and the set is held if a majority set it in time.
    /// Retries as [`lock`](super::LockManager::lock) does, with one value for all attempts, so that keys left by
    /// its own failed attempt never block it.
    ///
    /// The names are sorted and deduplicated first: two callers asking for overlapping sets in different orders
    /// send the same requests, and neither can hold part of its set waiting for the rest (a node's part is all or
    /// nothing, and a failed attempt releases what it set before returning or retrying).
    ///
    /// # Errors
    ///
    /// - [`Error::Held`] if some resource of the set was held by another holder at the last attempt;
    /// - [`Error::Quorum`] if too many nodes failed for a majority (the report names the set as `"a, b, c"`);
    /// - [`Error::Config`] for an empty set, an empty name or an invalid `ttl`.
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
    pub fn lock_many<R: AsRef<[u8]>>(&self, resources: &[R], ttl: Duration) -> Result<LockSet> {
        let names: Vec<&[u8]> = resources.iter().map(AsRef::as_ref).collect();
        block(self.engine().lock_many(&names, ttl, true))?
            .ok_or_else(|| Error::config("no set acquired"))
    }

    /// One attempt at [`lock_many`](super::LockManager::lock_many): `Ok(None)` if some resource of the set is
    /// held by another holder.
    ///
    /// # Errors
    ///
    /// As [`lock_many`](super::LockManager::lock_many), without [`Error::Held`].
    pub fn try_lock_many<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Result<Option<LockSet>> {
        let names: Vec<&[u8]> = resources.iter().map(AsRef::as_ref).collect();
        block(self.engine().lock_many(&names, ttl, false))
    }

    /// Extends every key of `set` to `ttl` from now, together: a node extends the set only if it still holds every
    /// key of it. As [`extend`](super::LockManager::extend) otherwise.
    ///
    /// # Errors
    ///
    /// As [`extend`](super::LockManager::extend).
    pub fn extend_many(&self, set: &mut LockSet, ttl: Duration) -> Result<()> {
        block(self.engine().extend_many(set, ttl))
    }

    /// Releases every key of `set` on all nodes at once (each node deletes the keys that still hold the set's
    /// value). Returns the number of nodes that deleted some, as [`unlock`](super::LockManager::unlock) does.
    ///
    /// # Errors
    ///
    /// [`Error::Quorum`] if fewer than a majority of nodes answered.
    pub fn unlock_many(&self, set: LockSet) -> Result<usize> {
        let released = block(self.engine().unlock_many(&set));
        set.resources
            .iter()
            .for_each(|r| self.keeper.waits.notify(r));
        released
    }

    /// Acquires a set as [`lock_many`](super::LockManager::lock_many) does and holds it under one
    /// [`Guard`](super::Guard): the watchdog renews every key of the set together (a node confirms only if it
    /// still holds all of them), and the guard's release releases them together. [`Guard::resources`] lists
    /// the set; [`Guard::resource`] is its first name, the one the watchdog's client-side tracking watches (a
    /// loss of another key is found by the next renewal).
    ///
    /// # Errors
    ///
    /// As [`lock_many`](super::LockManager::lock_many), and [`Error::Config`] for a `ttl` too short to renew.
    ///
    /// [`Guard::resources`]: super::Guard::resources
    /// [`Guard::resource`]: super::Guard::resource
    pub fn hold_many<R: AsRef<[u8]>>(
        &self,
        resources: &[R],
        ttl: Duration,
    ) -> Result<super::Guard> {
        self.check_guard_ttl(ttl)?;
        let set = self.lock_many(resources, ttl)?;
        let lock = crate::redlock::kind::lock::Lock {
            resource: set.resources.first().cloned().unwrap_or_default(),
            value: set.value,
            valid_until: set.valid_until,
            acquired: set.acquired,
            extensions: 0,
            nodes: set.nodes,
        };
        Ok(self.keeper.guard(lock, ttl, None, Some(set.resources)))
    }

    /// One attempt to acquire each of `resources` for `ttl`, all in one round: the `SET NX` commands of the
    /// whole batch go to each node pipelined in one write, and each resource gets its own quorum, validity and
    /// result, in the order given: `Ok(Some(lock))` acquired, `Ok(None)` held by another holder (or by an
    /// earlier entry of this batch for the same resource), `Err` for that resource only.
    ///
    /// The locks are ordinary [`Lock`]s: extend or release them one by one, or together with
    /// [`unlock_batch`](super::LockManager::unlock_batch). Resources not acquired have been released already on
    /// the nodes that had set them. Nothing is retried.
    ///
    /// # Errors
    ///
    /// Per resource: [`Error::Quorum`] if too many nodes failed to answer for its decision, [`Error::Config`] for
    /// an empty name. Every entry is [`Error::Config`] for an invalid `ttl` or a batch larger than
    /// [`Config::max_in_flight`](super::Config::max_in_flight) (nothing is sent).
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
        let names: Vec<&[u8]> = resources.iter().map(AsRef::as_ref).collect();
        block(self.engine().try_lock_batch(&names, ttl))
    }

    /// Releases `locks` in one round: one compare-and-delete script per node for all of them. Returns, per lock
    /// in the order given, what [`unlock`](super::LockManager::unlock) would: the number of nodes that deleted
    /// its key, once every lock is confirmed by a majority or every node answered or the round timed out.
    ///
    /// # Errors
    ///
    /// Per lock: [`Error::Quorum`] if fewer than a majority of nodes answered; the lock ends with its lease.
    pub fn unlock_batch(&self, locks: Vec<Lock>) -> Vec<Result<usize>> {
        let released = block(self.engine().unlock_batch(&locks));
        locks
            .iter()
            .for_each(|l| self.keeper.waits.notify(&l.resource));
        released
    }

    /// Acquires `resource` for `ttl` as [`lock`](super::LockManager::lock) does, with a fencing token that is
    /// larger than the token of every earlier successful fenced acquisition of `resource`, by any client, even
    /// when the majorities differ, and whatever round timeouts the other clients use. Costs two round trips (see the
    /// module docs of `fenced` in the source for the design, the argument and its limits: counters must survive
    /// restarts, `appendfsync always`).
    ///
    /// # Errors
    ///
    /// As [`lock`](super::LockManager::lock); also [`Error::Quorum`] when the token was not confirmed by a
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
    pub fn lock_fenced(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<FencedLock> {
        block(self.engine().lock_fenced(resource.as_ref(), ttl, true))?
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
        block(self.engine().lock_fenced(resource.as_ref(), ttl, false))
    }

    /// Extends a fenced lock as [`extend`](super::LockManager::extend) does; the token does not change.
    ///
    /// # Errors
    ///
    /// As [`extend`](super::LockManager::extend).
    pub fn extend_fenced(&self, lock: &mut FencedLock, ttl: Duration) -> Result<()> {
        block(self.engine().extend(&mut lock.lock, ttl))
    }

    /// Releases a fenced lock: each node that deletes the key first raises its counter to the lock's token.
    ///
    /// # Errors
    ///
    /// As [`unlock`](super::LockManager::unlock).
    pub fn unlock_fenced(&self, lock: FencedLock) -> Result<usize> {
        let released = block(self.engine().unlock_fenced(&lock.lock, lock.token));
        self.keeper.waits.notify(&lock.lock.resource);
        released
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
        Ok(self
            .keeper
            .guard(fenced.lock, ttl, Some(fenced.token), None))
    }

    /// A new owner for reentrant locks: a fresh random value.
    ///
    /// # Errors
    ///
    /// [`Error::Os`] if the OS cannot provide randomness.
    pub fn owner(&self) -> Result<Owner> {
        let value = draw(
            &self.engine().tokens,
            "drawing the owner value from the OS's randomness",
        )?;
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
        block(self.engine().lock_reentrant(owner, resource.as_ref(), ttl))
    }

    /// Releases one hold of a reentrant lock: each node the acquisition was sent to removes this hold (and only
    /// this one: a node that never saw it removes nothing) and deletes the key when no hold is left. Returns the
    /// number of nodes that confirmed the release, as [`unlock`](super::LockManager::unlock) does.
    ///
    /// # Errors
    ///
    /// [`Unreleased`] if fewer than a majority of nodes answered: it carries [`Error::Quorum`] and the hold
    /// itself, to release again ([`Unreleased::into_lock`]); releasing a hold twice is harmless. `?` turns it
    /// into the [`Error`], dropping the hold (it then stays where the release did not reach until its lease
    /// runs out).
    pub fn unlock_reentrant(
        &self,
        lock: ReentrantLock,
    ) -> std::result::Result<usize, Unreleased<ReentrantLock>> {
        self.release_hold(lock, lua::RELEASE_REENTRANT)
    }

    /// **For tests only: the bug of issue #20 on purpose.** As
    /// [`unlock_reentrant`](super::LockManager::unlock_reentrant), but each node counts down *some* hold of the
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
        match block(self.engine().unlock_reentrant(&lock, script)) {
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
