//! [`LockManager`]: the lock API, a cheap handle on the state its clones, guards and watchdog share ([`Core`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::Config;
use super::core::Core;
use super::error::{Error, Result};
use super::guard::{Guard, Held, Lost};
use super::inspect::Inspection;
use super::lock::Lock;
use super::quorum::drift;
use super::restart;
use super::schedule::lost_margin;
use super::seam::SystemClock;
use super::stats::{Activity, Stats, Votes};
use super::token::Tokens;
use super::wait::WaitRoom;
use crate::net::{Fanout, NodeAddr, Options};

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
    pub(crate) core: Arc<Core>,
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
        // `CONFIG GET *append*` and the persistence marker may be refused: the node then gets the window rule.
        let optional_setup = restart
            .as_ref()
            .map(|(_, ids)| ids.optional())
            .unwrap_or_default();
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
            core: Arc::new(Core {
                votes: (0..fanout.len()).map(|_| Votes::default()).collect(),
                fanout,
                clock: SystemClock,
                config: self.config,
                tokens: Tokens::new(),
                restart,
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
        &self.core.config
    }

    /// The nodes, in configuration order.
    pub fn nodes(&self) -> &[NodeAddr] {
        self.core.fanout.addrs()
    }

    /// What this manager saw of each node so far: votes granted, taken and failed, grants not counted after a
    /// restart, restarts seen, timeouts, reconnects, requests per write and round-trip percentiles. Cheap enough to
    /// call at any time (no lock is taken); `Display` prints it as a table.
    pub fn stats(&self) -> Stats {
        self.core.stats()
    }

    /// The majority: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.core.quorum()
    }

    /// Acquires `resource` for `ttl`, retrying up to [`Config::retry_count`] times with a jittered delay.
    ///
    /// # Errors
    ///
    /// - [`Error::Held`] if another holder still had it at the last attempt;
    /// - [`Error::Quorum`] if too many nodes were down, hung or failing, with every node's outcome;
    /// - [`Error::Config`] for an empty resource name or an invalid `ttl`.
    pub fn lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Lock> {
        self.core.lock(resource.as_ref(), ttl)
    }

    /// Acquires `resource` for [`Config::ttl`], retrying as [`lock`](LockManager::lock) does.
    ///
    /// # Errors
    ///
    /// As [`lock`](LockManager::lock).
    pub fn acquire(&self, resource: impl AsRef<[u8]>) -> Result<Lock> {
        self.core.lock(resource.as_ref(), self.core.config.ttl)
    }

    /// One attempt to acquire `resource` for `ttl`: `Ok(None)` if another holder has it.
    ///
    /// # Errors
    ///
    /// [`Error::Quorum`] if too many nodes failed to answer for a decision, [`Error::Config`] for invalid
    /// arguments.
    pub fn try_lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Option<Lock>> {
        self.core.try_lock(resource.as_ref(), ttl)
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
        self.core.extend(lock, ttl)
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
        self.core
            .extend_value(resource.as_ref(), value.as_ref(), ttl)
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
        self.core.unlock(lock)
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
        self.core.unlock_value(resource.as_ref(), value.as_ref())
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
        self.core.inspect(resource.as_ref())
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
        self.core.lock_wait(resource.as_ref(), ttl, max_wait)
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
        let lock = self.core.lock(resource.as_ref(), ttl)?;
        Ok(self.guard(lock, ttl))
    }

    /// One attempt to acquire `resource` under a [`Guard`]: `Ok(None)` if another holder has it.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](LockManager::try_lock), and [`Error::Config`] for a `ttl` too short to renew.
    pub fn try_hold(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Option<Guard>> {
        self.check_guard_ttl(ttl)?;
        let lock = self.core.try_lock(resource.as_ref(), ttl)?;
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
        let lock = self.core.lock_wait(resource.as_ref(), ttl, max_wait)?;
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
        let fenced = self
            .core
            .lock_fenced_wait(resource.as_ref(), ttl, max_wait)?;
        Ok(self.guard_with(fenced.lock, ttl, Some(fenced.token), None))
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
        self.core.waits.cancel_all();
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
        let config = &self.core.config;
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
        self.guard_with(lock, ttl, None, None)
    }

    /// Puts a freshly acquired lock, fenced or not, under the watchdog.
    pub(crate) fn guard_with(
        &self,
        lock: Lock,
        ttl: Duration,
        fence: Option<u64>,
        set: Option<Vec<Vec<u8>>>,
    ) -> Guard {
        let core = &self.core;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let margin = lost_margin(ttl, core.config.round_timeout);
        let held = Arc::new(Held::new(
            core.watchdog.next_id(),
            lock,
            ttl,
            ttl_ms,
            margin,
            fence,
            set,
        ));
        core.watchdog.add(&held, Instant::now());
        Activity::add(&core.activity.guards, 1);
        core.watchdog.ensure_started(Arc::downgrade(core));
        Guard::new(self.clone(), held)
    }

    /// Ends a guard: no more renewals, marked released, and the lock released on the nodes.
    pub(crate) fn release_held(&self, held: &Held) -> Result<usize> {
        self.core.watchdog.forget(held);
        held.set_lost(Lost::Released);
        Activity::add(&self.core.activity.guards_ended, 1);
        let s = crate::sync::lock(&held.state);
        let lock = Lock {
            resource: held.resource.clone(),
            value: held.value,
            valid_until: s.valid_until,
            acquired: held.acquired,
            extensions: 0,
            nodes: s.nodes,
        };
        drop(s);
        match (&held.set, held.fence) {
            (Some(set), _) => self.core.unlock_many(super::many::LockSet {
                resources: set.clone(),
                value: lock.value,
                valid_until: lock.valid_until,
                acquired: lock.acquired,
                extensions: 0,
                nodes: lock.nodes,
            }),
            (None, Some(token)) => self.core.unlock_fenced(&lock, token),
            (None, None) => self.core.unlock(lock),
        }
    }
}
