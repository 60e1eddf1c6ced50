//! [`Request`]: one way to ask for a lock. What (one resource or a set), for how long, how to wait,
//! which kind — as values; then a terminal: [`acquire`](Request::acquire) a [`Lock`], [`hold`](Request::hold) a
//! [`Guard`], or [`run`](Request::run) a closure under a guard.
//!
//! # The grid
//!
//! Every waiting policy (once, retry, wait) works with every kind and every terminal, except two kinds of sets
//! the nodes have no script for, which are an [`Error::Config`] before anything is sent:
//!
//! | | plain | fenced | owned (reentrant) | permits (semaphore) | read / write |
//! |---|---|---|---|---|---|
//! | one resource | ✓ | ✓ | ✓ | ✓ | ✓ |
//! | a set | ✓ | `Error::Config`: the fencing counter is per resource | `Error::Config`: holds are counted per resource | `Error::Config`: permits are per name | `Error::Config`: a read-write lock is per name |
//!
//! The kinds do not combine: a semaphore's permits or a read-write lock's access with a fencing token or an owner
//! is an [`Error::Config`]; among permits, read and write the last asked wins.

use std::time::Duration;

use super::LockManager;
use crate::redlock::engine::seam::block;
use crate::redlock::error::{Error, Outcome, Result};
use crate::redlock::guard::Guard;
use crate::redlock::kind::Lock;
use crate::redlock::kind::owned::Owner;
use crate::redlock::kind::semaphore::Permits;
use crate::redlock::kind::{self, Kind};
use crate::redlock::lost::Lost;
use crate::redlock::observe;
use crate::redlock::wait;

/// How a request waits when another holder has the resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiting {
    /// One attempt.
    Once,
    /// Up to [`Config::retry_count`](crate::redlock::Config::retry_count) more attempts, a jittered pause apart.
    Retry,
    /// Without polling, up to this long in all.
    Wait(Duration),
}

/// Why a fenced set is refused.
const FENCED_SET: &str = "a fenced set is not supported: the fencing counter is per resource, and no script \
                          confirms one token across a set's counters (fence each resource, or lock the set and \
                          fence one resource that stands for it)";

/// Why a semaphore of a set is refused.
const SEMAPHORE_SET: &str = "a semaphore over a set is not supported: permits are per name (ask for permits of one \
                             name that stands for the set)";

/// Why a semaphore combined with another kind is refused.
const SEMAPHORE_KIND: &str = "a semaphore's permits do not combine with a fencing token or an owner: each permit \
                              is a plain lock of its own key";

/// Why a read-write lock of a set is refused.
const RW_SET: &str = "a read-write lock over a set is not supported: its keys are per name (lock one name that \
                      stands for the set)";

/// Why a read-write lock combined with another kind is refused.
const RW_KIND: &str = "a read-write lock does not combine with a fencing token or an owner: a reader's slot and \
                       the writer key are plain locks of their own keys";

/// Why an owned set is refused.
const OWNED_SET: &str = "an owned (reentrant) set is not supported: holds are counted per resource, and no script \
                         adds a hold to a set's keys together";

/// A request for a lock, made by [`LockManager::request`] (one resource) or [`LockManager::request_all`] (a set,
/// all or none): set its options, then call a terminal. Nothing is sent before the terminal.
///
/// | option | default | |
/// |---|---|---|
/// | [`ttl`](Request::ttl) | [`Config::ttl`](crate::redlock::Config::ttl) | the lease (for a guard: each renewal's) |
/// | [`once`](Request::once) / [`retry`](Request::retry) / [`wait`](Request::wait) | `retry` | one attempt; [`Config::retry_count`](crate::redlock::Config::retry_count) more; wait without polling |
/// | [`fenced`](Request::fenced) / [`owned`](Request::owned) / [`permits`](Request::permits) / [`read`](Request::read) / [`write`](Request::write) | plain | a fencing token; one hold of an owner's reentrant lock; one of `k` permits; a reader or the writer of a read-write lock |
///
/// | terminal | gives | |
/// |---|---|---|
/// | [`acquire`](Request::acquire) | [`Lock`] | extend with [`LockManager::extend`], release with [`LockManager::unlock`]; it expires if you do neither |
/// | [`hold`](Request::hold) | [`Guard`] | renewed in the background until dropped or released; says before expiry when it is lost |
/// | [`run`](Request::run) | the closure's value | the closure runs under a guard; an error if the guard was lost meanwhile |
///
/// A combination the nodes cannot do — a fenced set, an owned set, a semaphore or read-write lock of a set or with a token — is an [`Error::Config`] naming why, before
/// anything is sent.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use muxlock::LockManager;
///
/// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
/// // Wait up to 30 s for the invoice, then hold it while the work runs.
/// let guard = locks.request("invoice:42").ttl(Duration::from_secs(10)).wait(Duration::from_secs(30)).hold()?;
/// // ... work, checking guard.is_lost() before each step ...
/// guard.release()?;
///
/// // Two accounts at once, or neither; one attempt.
/// let both = locks.request_all(["account:7", "account:3"]).once().acquire()?;
/// locks.unlock(both)?;
///
/// // A fencing token for the storage to check.
/// let lock = locks.request("ledger").fenced().acquire()?;
/// let token = lock.token(); // Some(n)
/// locks.unlock(lock)?;
/// # Ok::<(), muxlock::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "a request does nothing until a terminal (acquire, hold, run) is called"]
pub struct Request<'m> {
    locks: &'m LockManager,
    /// The resource (empty for a set: its names are in its kind).
    resource: Vec<u8>,
    ttl: Option<Duration>,
    waiting: Waiting,
    /// The kind asked for: [`Kind::Plain`] or [`Kind::Set`] as made, then as an option says.
    kind: Kind,
    /// Why the kind asked for cannot be had (an option a set cannot take), refused at the terminal.
    refused: Option<&'static str>,
}

impl LockManager {
    /// A request for a lock on `resource`: set its options, then [`acquire`](Request::acquire),
    /// [`hold`](Request::hold) or [`run`](Request::run).
    pub fn request(&self, resource: impl AsRef<[u8]>) -> Request<'_> {
        Request::new(self, resource.as_ref().to_vec(), Kind::Plain)
    }

    /// A request for a set of resources, all or none, with one value and one lease: one script per node carries
    /// every key, so a node holds all of the set for this holder or none of it. The names are sorted and
    /// deduplicated (the same set asked in any order is the same request).
    pub fn request_all<R: AsRef<[u8]>>(
        &self,
        resources: impl IntoIterator<Item = R>,
    ) -> Request<'_> {
        let names = resources.into_iter().map(|r| r.as_ref().to_vec()).collect();
        Request::new(self, Vec::new(), Kind::Set(names))
    }
}

impl<'m> Request<'m> {
    fn new(locks: &'m LockManager, resource: Vec<u8>, kind: Kind) -> Request<'m> {
        Request {
            locks,
            resource,
            ttl: None,
            waiting: Waiting::Retry,
            kind,
            refused: None,
        }
    }

    /// The request as `kind`, asked by an option: a set cannot take it (`why`, at the terminal), nor does a
    /// semaphore or a read-write lock combine with a fencing token or an owner ([`SEMAPHORE_KIND`],
    /// [`RW_KIND`]); otherwise the last option asked wins.
    fn asking(mut self, kind: Kind, why: &'static str) -> Request<'m> {
        // The kinds whose lock is a plain key of a name's own family: they replace each other.
        let named = |k: &Kind| matches!(k, Kind::Semaphore(_) | Kind::Read(..) | Kind::Write(_));
        let rw = |k: &Kind| matches!(k, Kind::Read(..) | Kind::Write(_));
        match (&self.kind, &kind) {
            (Kind::Set(_), _) => self.refused = Some(why),
            (Kind::Plain, _) => self.kind = kind,
            (a, b) if named(a) && named(b) => self.kind = kind,
            (a, b) if rw(a) || rw(b) => self.refused = Some(RW_KIND),
            (a, b) if named(a) || named(b) => self.refused = Some(SEMAPHORE_KIND),
            _ => self.kind = kind,
        }
        self
    }

    /// The lease: how long the lock outlives this process if it dies (default
    /// [`Config::ttl`](crate::redlock::Config::ttl)). For a guard, what each renewal grants.
    pub fn ttl(mut self, ttl: Duration) -> Request<'m> {
        self.ttl = Some(ttl);
        self
    }

    /// One attempt: [`Error::Held`] at once if another holder has the resource.
    pub fn once(mut self) -> Request<'m> {
        self.waiting = Waiting::Once;
        self
    }

    /// Up to [`Config::retry_count`](crate::redlock::Config::retry_count) more attempts, each after a jittered
    /// pause (the default).
    pub fn retry(mut self) -> Request<'m> {
        self.waiting = Waiting::Retry;
        self
    }

    /// Waits for the resource up to `max_wait` in all (not a number of tries), without polling. The waiter
    /// sleeps until the key may have come free, and is woken by:
    /// - a release of the resource in this process (by [`LockManager::unlock`] or a guard), at once;
    /// - on nodes that speak RESP3 (Redis 6 and later), Redis' client-side tracking: after a failed attempt the
    ///   waiter reads the key's TTL on the watchdog's *tracker* connections, which tracks the key there, and its
    ///   release, overwrite or expiry anywhere (by any client) sends an invalidation that wakes the waiter;
    /// - a timer at the end of the holder's lease as the nodes report it (the time until a majority lets the key
    ///   expire), plus a little jitter: expiry invalidations can lag the TTL, and RESP2-only servers (Redis 5,
    ///   or with `HELLO` disabled) send none. With them waiting still works, on this timer and on this process'
    ///   releases only.
    ///
    /// Waiters of this process for one resource line up first come, first served: only the first contends on the
    /// nodes, the others wait for their turn. One plain resource also lines up in a queue on the nodes, across
    /// processes (not with cluster members; where a majority of nodes refuse the queue's script, a manager waits
    /// without it from then on). A set waits in a
    /// line of its own, woken by a release of any of its names and probing them all; an owner's holds in a line
    /// of the owner's, so that a nested hold never waits behind another owner's waiter; a semaphore's in a line of
    /// its name, woken by a release of any of its permits.
    ///
    /// Tracking is chosen over pub/sub because it needs nothing from the holder: a release by any Redlock client
    /// (redsync, node-redlock, a crashed holder's expiry) wakes the waiter, where a channel would only hear
    /// releases that publish to it. The tracker connections are separate from the lock connections so that
    /// nobody has to poll the lock connections for pushes between rounds (see the watchdog in the [`Guard`]
    /// docs).
    ///
    /// `max_wait` bounds the wait: the terminal returns by then, plus at most one round timeout if an attempt is
    /// under way at that moment; [`LockManager::cancel_waits`] ends it early. A `max_wait` of zero makes one
    /// attempt. When the wait runs out the terminal returns [`Error::Held`], whose
    /// [`Report::holder_ttl`](crate::redlock::Report::holder_ttl) says how long the holder's lease still ran, if
    /// the nodes said (a waiter still behind another waiter of this process gets the error of that waiter's last
    /// attempt). A fenced wait makes each attempt one fenced acquisition (two rounds: the grant, then the
    /// token's confirmation); its [`Error::Held`] names no node's outcome.
    ///
    /// On nodes younger than the restart window (freshly started, not proven to persist every write: see
    /// [`Config::restart_guard`](crate::redlock::Config::restart_guard)) the wait goes on until their grants count.
    /// It says so as it waits, with the `tracing` feature: an `INFO` event "waiting for young nodes" naming them
    /// and the time left (`muxlock.wait = "young nodes"`). A wait that runs out first returns [`Error::Quorum`],
    /// whose [`Report::restart_wait`](crate::redlock::Report::restart_wait) and
    /// [`Report::not_counted`](crate::redlock::Report::not_counted) say the same.
    ///
    /// An async waiter ([`acquire_async`](Request::acquire_async)) takes its turn in the same lines as threads;
    /// **a waiting future must be polled**: one kept alive but not polled while it heads its line (a `select!`
    /// branch left pending, a busy executor) holds up this process' other waiters of the resource, threads
    /// included, until it is polled or dropped.
    pub fn wait(mut self, max_wait: Duration) -> Request<'m> {
        self.waiting = Waiting::Wait(max_wait);
        self
    }

    /// With a fencing token ([`Lock::token`], [`Guard::token`]): larger than the token of every earlier fenced
    /// acquisition of the resource, by any client, whatever the majorities and round timeouts. Costs a second
    /// round trip (the token's confirmation); counters must survive restarts (`appendfsync always`). The
    /// release leaves the token on every node it frees. Not for a set ([`Error::Config`]).
    pub fn fenced(self) -> Request<'m> {
        self.asking(Kind::Fenced(None), FENCED_SET)
    }

    /// One hold of `owner`'s reentrant lock ([`LockManager::owner`] makes one): if `owner` already holds the
    /// resource (in any thread: clone the owner into it), the acquisition adds a hold instead of failing; each hold is released
    /// on its own, and the key goes with the last. Not for a set ([`Error::Config`]).
    pub fn owned(self, owner: &Owner) -> Request<'m> {
        self.asking(Kind::Owned(owner.clone(), None), OWNED_SET)
    }

    /// One of `k` permits of a counting semaphore named by the resource: at most `k` holders at once, across
    /// processes, each holding a permit whose index is [`Lock::permit`] (or [`Guard::permit`]). Extended, renewed
    /// and released as a plain lock of the permit's key ([`permit_key`](crate::redlock::permit_key)). Every
    /// client must ask for a name with the same `k`.
    ///
    /// **Why at most `k`**: each permit is a Redlock mutex of its own key, so under the mutex's assumptions no two
    /// holders of one permit overlap, and every holder holds exactly one of the `k`. An acquisition is one round:
    /// every node takes its lowest free permit (`SET NX PX`, in a script), the grants are counted per permit, the
    /// lowest permit a majority granted within the lease's validity is kept, and any other permit taken is given
    /// back at once (compare-and-delete of the offer's value); if the grants split between permits, a second
    /// round takes every free permit on each node. Counting holders per node instead (each node admits `k`, a
    /// majority of admissions holds) is unsafe: with 3 nodes and `k = 2`, A admitted on {1, 2}, B on {2, 3} and C
    /// on {1, 3} would all hold. Cost: one round trip (two on a split), `O(k)` script work per node at worst.
    ///
    /// [`wait`](Request::wait) waits in the nodes' queue of the semaphore, across processes, first come, first
    /// served (as a plain lock's waiters do), woken by a release or an invalidation of any permit. `k` must be
    /// between 1 and [`MAX_PERMITS`](crate::redlock::MAX_PERMITS); not for a set, nor with
    /// [`fenced`](Request::fenced) or [`owned`](Request::owned) ([`Error::Config`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// // At most 4 exports at once, across every process.
    /// let permit = locks.request("exports").permits(4).acquire()?;
    /// let index = permit.permit(); // Some(0..4)
    /// locks.unlock(permit)?;
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn permits(self, k: u32) -> Request<'m> {
        let name = self.resource.clone();
        self.asking(
            Kind::Semaphore(Permits {
                name,
                count: k,
                index: None,
            }),
            SEMAPHORE_SET,
        )
    }

    /// A reader of the read-write lock named by the resource: any number of readers hold it together (at most
    /// [`MAX_READERS`](crate::redlock::MAX_READERS) at once; more are refused, or wait), never beside a
    /// [writer](Request::write). A reader takes one reader slot, a mutex of its own key
    /// ([`reader_key`](crate::redlock::reader_key)), by the semaphore's offer round, on nodes where neither the
    /// writer key nor a waiting writer's intent exists (the argument is in the module docs of the kind, and in the
    /// README); extended, renewed and released as a plain lock of that key. [`Lock::access`] says
    /// [`Access::Read`](crate::redlock::Access::Read).
    ///
    /// [`wait`](Request::wait) waits in the nodes' queue of the name's readers, across processes, first come, first
    /// served (a waiting writer goes first: its intent keeps new readers out); woken by a release of the writer or
    /// an invalidation of the writer or intent key. Not for a set, nor with [`fenced`](Request::fenced) or
    /// [`owned`](Request::owned) ([`Error::Config`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::{Access, LockManager};
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let reading = locks.request("catalog").read().acquire()?;
    /// assert_eq!(reading.access(), Some(Access::Read));
    /// locks.unlock(reading)?;
    /// let writing = locks.request("catalog").write().hold()?; // alone: no reader, no other writer
    /// writing.release()?;
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn read(self) -> Request<'m> {
        let name = self.resource.clone();
        self.asking(Kind::Read(name, None), RW_SET)
    }

    /// The writer of the read-write lock named by the resource: it holds alone, beside no reader and no other
    /// writer. The writer key ([`writer_key`](crate::redlock::writer_key)) is a mutex that each node grants only
    /// while no reader slot is live there; refused because of readers, the attempt marks the writer's intent
    /// ([`intent_key`](crate::redlock::intent_key), for one TTL), which refuses new readers so that a stream of
    /// readers cannot starve writers. Extended, renewed and released as a plain lock of the writer key.
    /// [`Lock::access`] says [`Access::Write`](crate::redlock::Access::Write).
    ///
    /// [`wait`](Request::wait) waits in the nodes' queue of the name's writers, across processes, first come,
    /// first served; woken by a release of the writer or a reader here, or an invalidation of the writer key
    /// or a reader slot. Not for a set, nor with
    /// [`fenced`](Request::fenced) or [`owned`](Request::owned) ([`Error::Config`]).
    pub fn write(self) -> Request<'m> {
        let name = self.resource.clone();
        self.asking(Kind::Write(name), RW_SET)
    }

    /// Acquires the lock as asked.
    ///
    /// # Errors
    ///
    /// - [`Error::Held`] if another holder had it at the last attempt (or when the wait ran out);
    /// - [`Error::Quorum`] if too many nodes were down, hung or failing for a decision, with every node's
    ///   outcome (for a fenced lock also when the token was not confirmed by a majority within the lease);
    /// - [`Error::Config`] for an empty name or set, an invalid TTL, or a combination the nodes cannot do.
    pub fn acquire(self) -> Result<Lock> {
        self.obtain(false)
    }

    /// Acquires the lock as asked and holds it under a [`Guard`] that renews it in the background (at a third of
    /// the lease it holds, about a third of the TTL) until dropped or [released](Guard::release), and says before
    /// the lease ends when it can no longer be relied on. [`Config::max_extensions`](crate::redlock::Config::max_extensions) does not limit
    /// guards.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Request::acquire), and [`Error::Config`] for a TTL too short to renew (at least about six
    /// round timeouts).
    pub fn hold(self) -> Result<Guard> {
        let (locks, ttl) = (self.locks, self.ttl.unwrap_or(self.locks.config().ttl()));
        let lock = self.obtain(true)?;
        Ok(locks.keeper.guard(lock, ttl))
    }

    /// Runs `work` under a [`Guard`] (acquired as [`hold`](Request::hold) does), then releases it; `work`
    /// should check [`Guard::is_lost`] before each step that needs the lock.
    ///
    /// # Errors
    ///
    /// - As [`hold`](Request::hold): `work` does not run.
    /// - [`Error::LockLost`] if the guard was lost while `work` ran, or the release found that fewer than a
    ///   majority still held it: `work`'s value is dropped, because what it did may have overlapped another
    ///   holder. A release that merely could not reach a majority (the lock ends with its lease) is not an
    ///   error: `work` ran under the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let rows = locks.request("compaction").run(|guard| {
    ///     let mut rows = 0;
    ///     while !guard.is_lost() && rows < 1_000 {
    ///         rows += 1; // ... one step of work ...
    ///     }
    ///     rows
    /// })?;
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn run<R>(self, work: impl FnOnce(&Guard) -> R) -> Result<R> {
        let locks = self.locks;
        let guard = self.hold()?;
        let out = work(&guard);
        let lost = guard.lost();
        let resource = guard.resource().to_vec();
        let released = guard.release();
        if let Some(lost) = lost {
            return Err(lost_error(locks, &resource, lost));
        }
        match released {
            Err(e @ (Error::LockLost(_) | Error::Expired)) => Err(e),
            _ => Ok(out),
        }
    }

    /// As [`acquire`](Request::acquire), as a future for any executor (tokio, smol, ...; the library needs no
    /// runtime): it never blocks the executor's thread — its rounds are woken by the manager's driver thread,
    /// its pauses by the crate's timer thread — and `.wait(d)` waits without polling, woken by releases and
    /// invalidations as a blocking waiter is (a plain lock, a semaphore or a read-write lock in the nodes' queue
    /// across processes, a set, fenced or owned lock in this process' line).
    ///
    /// **Cancel-safe**: dropping the future at any point leaves no lock held — an attempt under way is undone on
    /// every node at once, a waiter leaves its line (and the nodes' queue).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Request::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn job() -> Result<(), muxlock::Error> {
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let lock = locks.request("invoice:42").wait(Duration::from_secs(30)).acquire_async().await?;
    /// // ... work while lock.is_valid() ...
    /// locks.unlock_async(lock).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_async(self) -> Result<Lock> {
        self.obtain_any(false).await
    }

    /// As [`hold`](Request::hold), as a future (see [`acquire_async`](Request::acquire_async)). The guard's
    /// drop releases on the manager's watchdog thread, never blocking the executor's — shortly after the drop,
    /// so a request for the same resource made at once after it may still find it held: await
    /// [`Guard::release_async`] to release before going on and to see the outcome, and [`Guard::until_lost`] to
    /// learn of a loss. Guards still queued for release when the last handle on the manager goes are released
    /// then (bounded by one release round: up to 40 round timeouts for a plain lock while nodes answer slowly).
    ///
    /// # Errors
    ///
    /// As [`hold`](Request::hold).
    pub async fn hold_async(self) -> Result<Guard> {
        let (locks, ttl) = (self.locks, self.ttl.unwrap_or(self.locks.config().ttl()));
        let lock = self.obtain_any(true).await?;
        Ok(locks.keeper.guard(lock, ttl).in_background())
    }

    /// As [`run`](Request::run), with async work: `work` gets the guard and its future runs under it; then the
    /// guard is released (awaited, not blocking).
    ///
    /// # Errors
    ///
    /// As [`run`](Request::run): [`Error::LockLost`] if the guard was lost while the work ran (the work's value
    /// is dropped: what it did may have overlapped another holder).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn job() -> Result<(), muxlock::Error> {
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let rows = locks
    ///     .request("compaction")
    ///     .run_async(async |guard| {
    ///         let mut rows = 0;
    ///         while !guard.is_lost() && rows < 1_000 {
    ///             rows += 1; // ... one step of work, awaiting what it needs ...
    ///         }
    ///         rows
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_async<R>(self, work: impl AsyncFnOnce(&Guard) -> R) -> Result<R> {
        let locks = self.locks;
        let guard = self.hold_async().await?;
        let out = work(&guard).await;
        let lost = guard.lost();
        let resource = guard.resource().to_vec();
        let released = guard.release_async().await;
        if let Some(lost) = lost {
            return Err(lost_error(locks, &resource, lost));
        }
        match released {
            Err(e @ (Error::LockLost(_) | Error::Expired)) => Err(e),
            _ => Ok(out),
        }
    }

    /// Checks the request, then acquires as its waiting policy says (`guarded`: for a guard, whose TTL must
    /// leave room to renew).
    fn obtain(self, guarded: bool) -> Result<Lock> {
        block(self.obtain_any(guarded))
    }

    /// [`obtain`](Request::obtain) as a future: blocking under [`block`], never blocking under an executor.
    async fn obtain_any(self, guarded: bool) -> Result<Lock> {
        let engine = self.locks.engine();
        let ttl = self.ttl.unwrap_or(engine.config.ttl);
        if guarded {
            self.locks.check_guard_ttl(ttl)?;
        }
        if let Some(why) = self.refused {
            return Err(Error::config(why));
        }
        let ask = self.kind.check(self.resource, engine, ttl)?;
        let op = observe::start(
            "acquire",
            ask.kind.label(),
            engine.fanout.len(),
            engine.quorum(),
        );
        let got = op
            .instrument(async {
                match self.waiting {
                    Waiting::Once => kind::acquire(engine, &ask, false).await,
                    Waiting::Retry => kind::acquire(engine, &ask, true).await,
                    Waiting::Wait(max_wait) => {
                        wait::acquire_wait(&self.locks.keeper, &ask, max_wait).await
                    }
                }
            })
            .await;
        op.finish(&got, got.as_ref().ok().map(Lock::validity));
        got
    }
}

/// A guard's loss as the error [`Request::run`] returns: [`Error::LockLost`] with the report of the round that
/// found it, or with no node's outcome when the lease ran out without one.
fn lost_error(locks: &LockManager, resource: &[u8], lost: Lost) -> Error {
    let engine = locks.engine();
    let unknown = || {
        Box::new(engine.report(
            resource,
            vec![Outcome::NotAwaited; engine.fanout.len()],
            engine.quorum(),
        ))
    };
    match lost {
        Lost::Taken(report) | Lost::Down(report) | Lost::Clock(report) => Error::LockLost(report),
        Lost::Expired(Some(e)) => match *e {
            Error::Quorum(report) | Error::LockLost(report) => Error::LockLost(report),
            _ => Error::LockLost(unknown()),
        },
        Lost::Expired(None) | Lost::Released => Error::LockLost(unknown()),
    }
}
