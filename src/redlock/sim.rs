//! The engine behind its seam, for the deterministic simulator in `tests/sim/`: **not an API**, compiled only
//! with the `sim` feature and hidden from the docs.
//!
//! [`Engine`] runs the very rounds a [`LockManager`](super::LockManager) runs (the same engine, generic over
//! [`Nodes`] and [`Clock`]), against whatever nodes and clock it is given, with lock values drawn from a seeded
//! stream so that one seed gives one history. It has the engine-level verbs of every lock kind, and guards: a
//! [`SimGuard`] is the state a real [`Guard`](crate::redlock::Guard) keeps, renewed by
//! [`Engine::renew_guards`] (the very `guard::renew` the watchdog runs) whenever the simulated client's schedule
//! says, and released by [`Engine::release_guard`] (the guard's own release). The watchdog's thread and the
//! waiting loop stay on the real fanout and clock.
//!
//! A simulated waiter in the nodes' queue makes its attempts with [`Engine::queued_attempt`]; after a refused
//! one, the grant by push (`wait/handoff.rs`, "The grant by push") is the library's own: the engine's turn
//! listener bookkeeping ([`Listener`], `guard/turns.rs`) takes the handed markers the simulated nodes push, in
//! the listener sessions the simulator keeps, and [`Engine::by_push`] asks `kind::queued::by_push` whether they
//! make the lock the waiter's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net::NodeSet;
use crate::net::cluster::{Conns, Members, Plan};
use crate::redlock::config::Config;
use crate::redlock::engine::Engine as Rounds;
use crate::redlock::engine::restart;
use crate::redlock::error::{Error, Result};
use crate::redlock::guard::turns::{self, Turns};
use crate::redlock::guard::{self, Held};
use crate::redlock::kind::Lock;
use crate::redlock::kind::owned::{self, Owner};
use crate::redlock::kind::queued::{self, ByPush, Entry};
use crate::redlock::kind::{self, Kind};
use crate::redlock::kind::{rwlock, semaphore};
use crate::redlock::lost::Lost;
use crate::redlock::lua;
use crate::redlock::schedule::lost_margin;
use crate::redlock::stats::{Activity, Votes};
use crate::redlock::token::Tokens;

pub use crate::redlock::engine::seam::{Clock, NodeRound, Nodes, SystemClock};

/// The lock engine over simulated nodes and a simulated clock.
#[derive(Debug)]
pub struct Engine<N, C> {
    core: Rounds<N, C>,
    /// What the simulated guards did (the watchdog's counters).
    activity: Activity,
    /// The last guard id handed out.
    guards: std::sync::atomic::AtomicU64,
    /// The turn listener's bookkeeping of handed markers (its connections are the simulator's).
    turns: Arc<Turns>,
}

/// A guard's state in the simulator: what a [`Guard`](crate::redlock::Guard) shares with the watchdog, without
/// the thread. Its client renews it ([`Engine::renew_guards`]) at [`SimGuard::due`] and asks it, as a holder
/// does, whether it may still rely on the lock ([`SimGuard::lost_at`]).
#[derive(Debug)]
pub struct SimGuard {
    held: Arc<Held>,
    due: Instant,
}

impl SimGuard {
    /// Why the holder may no longer rely on the lock at `now`, if so (as [`Guard::lost`](crate::redlock::Guard::lost)
    /// at that instant).
    pub fn lost_at(&self, now: Instant) -> Option<Lost> {
        let s = crate::sync::lock(&self.held.state);
        self.held.lost_at(&s, now)
    }

    /// Until when the holder may rely on the lock, as last confirmed ([`Guard::deadline`](crate::redlock::Guard::deadline)).
    pub fn deadline(&self) -> Instant {
        let s = crate::sync::lock(&self.held.state);
        self.held.deadline_of(&s)
    }

    /// When its next renewal is due (`None` once the guard is lost or released).
    pub fn due(&self) -> Option<Instant> {
        (crate::sync::lock(&self.held.state).lost.is_none()).then_some(self.due)
    }

    /// The locked resource (the first of a set's).
    pub fn resource(&self) -> &[u8] {
        &self.held.resource
    }

    /// The lock's value.
    pub fn value(&self) -> &[u8] {
        &self.held.value
    }

    /// The fencing token of a fenced guard.
    pub fn token(&self) -> Option<u64> {
        self.held.kind.token()
    }

    /// Every resource of a guarded set.
    pub fn resources(&self) -> Option<&[Vec<u8>]> {
        match &self.held.kind {
            Kind::Set(names) => Some(names),
            _ => None,
        }
    }

    /// The owner of a guarded owned (reentrant) hold.
    pub fn owner(&self) -> Option<&Owner> {
        self.held.kind.owner()
    }

    /// Confirmed renewals so far.
    pub fn renewals(&self) -> u64 {
        crate::sync::lock(&self.held.state).renewals
    }
}

/// A waiter's entry in the nodes' queue (see [`Engine::queue_entry`]).
#[derive(Debug)]
pub struct QueueEntry(Entry);

impl QueueEntry {
    /// The waiter's id (24 hex digits: the engine's listener prefix, then its own), as its turn key and its
    /// handed markers name it.
    pub fn id(&self) -> &[u8] {
        self.0.id()
    }
}

/// A queued attempt that was not granted ([`Engine::queued_attempt`]).
#[derive(Clone, Debug)]
pub struct Refused {
    /// The nodes' refusals said another holder or waiter has it, rather than an outage.
    pub held: bool,
    /// A plain lock's attempt: what a grant by push counts of it ([`Engine::by_push`]).
    pub handed: Option<Handed>,
}

/// A plain lock's refused queued attempt, as a grant by push counts it (`kind/queued.rs`'s `Handed`).
#[derive(Clone, Debug)]
pub struct Handed(queued::Handed);

impl Handed {
    /// The attempt's value: what a release hands the key on to the waiter as.
    pub fn value(&self) -> &[u8] {
        &self.0.value
    }

    /// When the attempt's round started, on the client's clock.
    pub fn start(&self) -> Instant {
        self.0.start
    }

    /// The TTL the attempt asked for (the gate registered it with the value).
    pub fn ttl(&self) -> Duration {
        self.0.ttl
    }

    /// The nodes that refused every request of the attempt, each reply read and counted.
    pub fn refused(&self) -> NodeSet {
        self.0.refused
    }
}

/// What [`Engine::by_push`] found (`kind/queued.rs`'s `ByPush`).
#[derive(Debug)]
pub enum Pushed {
    /// The lock: a majority of nodes handed the key on to the waiter in time.
    Granted(Box<Lock>),
    /// Not yet: the nodes that may still push a marker would make a majority. How long the waiting loop waits
    /// for them at most, counted from when it first found them coming (`kind/queued.rs`'s `markers_wait`: a
    /// quarter of the round timeout once a marker is in, else a moment).
    Coming(Duration),
    /// Not a grant.
    No,
}

/// A simulated manager's turn listener: the library's bookkeeping of the handed markers its connections push
/// (`guard/turns.rs`), fed by the simulator, which carries the pushes and keeps the listener's sessions.
#[derive(Clone, Debug)]
pub struct Listener(Arc<Turns>);

impl Listener {
    /// The prefix of every waiter id of its engine (8 hex digits): the nodes push it the changes of the keys
    /// under `muxlock:turn:<prefix>`.
    pub fn prefix(&self) -> u32 {
        self.0.prefix()
    }

    /// Takes a push of `key` from `node`'s listener connection, which is in `session` as the push is taken
    /// (kept if it is a handed marker of a waiter of this engine that expects it, as the listener's thread
    /// keeps it).
    pub fn take(&self, node: usize, key: &[u8], session: u64) {
        let mut sessions = vec![None; node + 1];
        sessions[node] = Some(session);
        self.0.note_handed(&[(node, key.to_vec())], &sessions);
    }
}

/// What a waiter in the nodes' queue waits for: a lock of a kind that queues.
#[derive(Clone, Copy, Debug)]
pub enum Waits<'a> {
    /// A plain lock of a resource.
    Plain(&'a [u8]),
    /// A permit of the semaphore named so, of that many permits.
    Permit(&'a [u8], u32),
    /// A reader of the read-write lock named so.
    Read(&'a [u8]),
    /// The writer of the read-write lock named so.
    Write(&'a [u8]),
}

impl Waits<'_> {
    fn name(&self) -> &[u8] {
        match *self {
            Waits::Plain(n) | Waits::Permit(n, _) | Waits::Read(n) | Waits::Write(n) => n,
        }
    }

    fn kind(&self) -> Kind {
        match *self {
            Waits::Plain(_) => Kind::Plain,
            Waits::Permit(name, count) => Kind::Semaphore(semaphore::Permits {
                name: name.to_vec(),
                count,
                index: None,
            }),
            Waits::Read(name) => Kind::Read(name.to_vec(), None),
            Waits::Write(name) => Kind::Write(name.to_vec()),
        }
    }
}

/// The fanout options a manager of `config` over `nodes` nodes runs with: the commands a connection runs before
/// its first request (the scripts' `SCRIPT LOAD`s, the native probe, then the restart guard's readings if
/// `config` turns it on), which of them may be refused, the room and timeouts. A simulated client's fanout runs
/// them on every new connection, and [`Nodes::setup_replies`] hands back their replies.
pub fn options(config: &Config, nodes: usize) -> crate::net::Options {
    let (setup, restart) = restart::connection_setup(config, nodes);
    crate::redlock::manager::fanout_options(config, setup, &restart)
}

/// The fanout options a manager of `plan`'s members runs with ([`options`] for plain nodes): with cluster
/// members, one connection per node of their maps, and `INFO` reads the replication section too.
pub fn options_for(config: &Config, plan: &Plan) -> crate::net::Options {
    let (setup, restart) =
        restart::connection_setup_for(config, plan.members(), plan.connections(), plan.is_routed());
    crate::redlock::manager::fanout_options(config, setup, &restart)
}

/// `plan`'s members over `conns` (whose connections are [`Plan::conns`]), as a manager of `config` builds them:
/// with the restart guard on, cluster nodes' votes carry the replication check.
pub fn members<F: Conns>(plan: Plan, conns: F, config: &Config) -> Members<F> {
    let routed = plan.is_routed();
    let (_, restart) =
        restart::connection_setup_for(config, plan.members(), plan.connections(), routed);
    let mut members = Members::over(plan, conns);
    if let Some((_, ids)) = &restart.guard {
        members.check_replication(ids.info());
    }
    members
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
        let (_, restart) = restart::connection_setup_for(
            &config,
            nodes.len(),
            nodes.connections(),
            nodes.routed(),
        );
        Ok(Engine {
            core: Rounds {
                votes: (0..nodes.len()).map(|_| Votes::default()).collect(),
                fanout: nodes,
                clock,
                config,
                tokens: Tokens::seeded(seed),
                restart,
                fold: Default::default(),
            },
            activity: Activity::default(),
            guards: std::sync::atomic::AtomicU64::new(0),
            turns: Arc::new(Turns::new(0)),
        })
    }

    /// The engine with waiter ids that start with `prefix` (8 hex digits; 0 unless set), as a manager's
    /// start with its own: its [`Listener`] is pushed the changes of their turn keys and handed markers.
    #[must_use]
    pub fn with_turn_prefix(mut self, prefix: u32) -> Engine<N, C> {
        self.turns = Arc::new(Turns::new(prefix));
        self
    }

    /// Its turn listener's bookkeeping, for the simulator to feed the pushes it carries.
    pub fn listener(&self) -> Listener {
        Listener(Arc::clone(&self.turns))
    }

    /// Grants by push so far ([`GuardStats::granted_by_push`](super::GuardStats::granted_by_push)).
    pub fn granted_by_push(&self) -> u64 {
        self.activity
            .granted_by_push
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `(folded release rounds, releases that went out in them)` so far (`engine/fold.rs`).
    pub fn folds(&self) -> (u64, u64) {
        self.core.fold.counts()
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

    /// As a request's `once().acquire()` (`Ok(None)` when held).
    pub async fn try_lock(&self, resource: &[u8], ttl: Duration) -> Result<Option<Lock>> {
        crate::redlock::error::not_held(self.acquire(Kind::Plain, resource, ttl, false).await)
    }

    /// As a request's `acquire()` (retries with the clock's pauses).
    pub async fn lock(&self, resource: &[u8], ttl: Duration) -> Result<Lock> {
        self.acquire(Kind::Plain, resource, ttl, true).await
    }

    /// As a request's `acquire` (`retry`: with retries, else one attempt): the one retry loop of every kind.
    async fn acquire(
        &self,
        kind: Kind,
        resource: &[u8],
        ttl: Duration,
        retry: bool,
    ) -> Result<Lock> {
        let ask = kind.check(resource.to_vec(), &self.core, ttl)?;
        kind::acquire(&self.core, &ask, retry).await
    }

    /// As [`LockManager::extend`](super::LockManager::extend): a lock of any kind.
    pub async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        kind::extend(&self.core, lock, ttl).await
    }

    /// As [`LockManager::unlock`](super::LockManager::unlock): a lock of any kind.
    pub async fn unlock(&self, lock: Lock) -> Result<usize> {
        kind::release(&self.core, &lock).await
    }

    /// As [`Engine::extend`]; `shortening` extends an owned hold with
    /// [`lua::EXTEND_REENTRANT_SHORTENING`] (its expiry set to `ttl` even when that cuts a longer one), the
    /// simulator's control of owned extensions. Other kinds: as [`Engine::extend`].
    pub async fn extend_owned(
        &self,
        lock: &mut Lock,
        ttl: Duration,
        shortening: bool,
    ) -> Result<()> {
        let Kind::Owned(_, hold) = &lock.kind else {
            return self.extend(lock, ttl).await;
        };
        if !shortening {
            return self.extend(lock, ttl).await;
        }
        let script = owned::extension_by(
            lua::EXTEND_REENTRANT_SHORTENING,
            &lock.lease.resource,
            &lock.lease.value,
            hold.as_ref(),
            false,
        );
        let name = lock.lease.resource.clone();
        self.core
            .extend_scripted(&mut lock.lease, ttl, &script, &name)
            .await
    }

    /// As [`LockManager::extend_value`](super::LockManager::extend_value).
    pub async fn extend_value(
        &self,
        resource: &[u8],
        value: &[u8],
        ttl: Duration,
    ) -> Result<Instant> {
        self.core.extend_value(resource, value, ttl).await
    }

    /// As [`LockManager::unlock_value`](super::LockManager::unlock_value).
    pub async fn unlock_value(&self, resource: &[u8], value: &[u8]) -> Result<usize> {
        self.core.unlock_value(resource, value).await
    }

    /// As [`LockManager::try_lock_batch`](super::LockManager::try_lock_batch).
    pub async fn try_lock_batch(
        &self,
        resources: &[&[u8]],
        ttl: Duration,
    ) -> Vec<Result<Option<Lock>>> {
        let leases = self.core.try_lock_batch(resources, ttl).await;
        leases
            .into_iter()
            .map(|r| r.map(|lease| lease.map(|lease| Lock::new(lease, Kind::Plain))))
            .collect()
    }

    /// As [`LockManager::unlock_batch`](super::LockManager::unlock_batch).
    pub async fn unlock_batch(&self, locks: Vec<Lock>) -> Vec<Result<usize>> {
        let routed = self.core.fanout.routed();
        let mut results: Vec<Option<Result<usize>>> = (0..locks.len()).map(|_| None).collect();
        let (batched, alone): (Vec<_>, Vec<_>) = locks
            .into_iter()
            .enumerate()
            .partition(|(_, l)| l.batches_with(routed));
        let leases: Vec<_> = batched.iter().map(|(_, l)| &l.lease).collect();
        let released = self.core.unlock_batch(&leases).await;
        for ((i, _), r) in batched.iter().zip(released) {
            results[*i] = Some(r);
        }
        for (i, lock) in alone {
            results[i] = Some(self.unlock(lock).await);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::config("no release result"))))
            .collect()
    }

    /// As a request for a set ([`LockManager::request_all`](super::LockManager::request_all)) with retries
    /// (`retry`) or one attempt (`Ok(None)` when held): every name or none, as one [`Lock`] (extended by
    /// [`Engine::extend`], released by [`Engine::unlock`], guarded by [`Engine::guard`]).
    pub async fn lock_many(
        &self,
        resources: &[&[u8]],
        ttl: Duration,
        retry: bool,
    ) -> Result<Option<Lock>> {
        let names = resources.iter().map(|r| r.to_vec()).collect();
        let ask = Kind::Set(names).check(Vec::new(), &self.core, ttl)?;
        let got = kind::acquire(&self.core, &ask, retry).await;
        match retry {
            true => got.map(Some),
            false => crate::redlock::error::not_held(got),
        }
    }

    /// As [`Engine::lock_many`] with retries, every attempt with the first one's value, where a request draws a
    /// value per attempt (`kind/set.rs`, "A value per attempt"): a failed attempt's clean-up, a compare-and-delete
    /// of that value, then deletes the retry's keys if it runs after the retry on a node. The simulator's aim at
    /// the other rule that keeps them apart: a node's detached releases go on its wire ahead of any request offered
    /// after them (`net/machine/detach.rs`, `Machine::make_way`), so a retry never overtakes its clean-up.
    pub async fn lock_many_one_value(&self, resources: &[&[u8]], ttl: Duration) -> Result<Lock> {
        let names = resources.iter().map(|r| r.to_vec()).collect();
        let ask = Kind::Set(names).check(Vec::new(), &self.core, ttl)?;
        let Kind::Set(sorted) = &ask.kind else {
            return Err(crate::redlock::Error::config("a set was asked"));
        };
        let value = self.core.tokens.draw("drawing the lock value")?;
        let ttl = (ask.ttl, ask.ttl_ms);
        self.core
            .retrying(true, || async {
                Ok(kind::set::attempt(&self.core, sorted, value, ttl).await)
            })
            .await
    }

    /// As a [fenced](super::Request::fenced) request with retries (`retry`) or one attempt (`Ok(None)` when
    /// held): a [`Lock`] with its token (extended by [`Engine::extend`], released by [`Engine::unlock`] with
    /// the fenced release).
    pub async fn lock_fenced(
        &self,
        resource: &[u8],
        ttl: Duration,
        retry: bool,
    ) -> Result<Option<Lock>> {
        let got = self.acquire(Kind::Fenced(None), resource, ttl, retry).await;
        match retry {
            true => got.map(Some),
            false => crate::redlock::error::not_held(got),
        }
    }

    /// As a request with [`permits`](super::Request::permits)`(count)` of `name`, with retries (`retry`) or one
    /// attempt (`Ok(None)` when held): a [`Lock`] of one permit ([`Lock::permit`]), extended by
    /// [`Engine::extend`], released by [`Engine::unlock`], guarded by [`Engine::guard`]. `counted_per_node`:
    /// **the control, unsafe on purpose**: each node takes one free permit, whichever, and a majority of nodes
    /// that took one is a hold, with no index (the majority-of-counters construction of `kind/semaphore.rs`);
    /// released by [`Engine::unlock`], which gives back every permit holding its value.
    pub async fn lock_permit(
        &self,
        name: &[u8],
        count: u32,
        ttl: Duration,
        (retry, counted_per_node): (bool, bool),
    ) -> Result<Option<Lock>> {
        let kind = Kind::Semaphore(semaphore::Permits {
            name: name.to_vec(),
            count,
            index: None,
        });
        let got =
            match counted_per_node {
                false => self.acquire(kind, name, ttl, retry).await,
                true => {
                    let ask = kind.check(name.to_vec(), &self.core, ttl)?;
                    let ttl = (ask.ttl, ask.ttl_ms);
                    self.core
                        .retrying(retry, || async {
                            let value = self.core.tokens.draw("drawing the lock value")?;
                            Ok(semaphore::attempt_counted_per_node(
                                &self.core, name, count, value, ttl,
                            )
                            .await)
                        })
                        .await
                }
            };
        match retry {
            true => got.map(Some),
            false => crate::redlock::error::not_held(got),
        }
    }

    /// As a request with [`read`](super::Request::read) (`write` false) or [`write`](super::Request::write) of
    /// `name`, with retries (`retry`) or one attempt (`Ok(None)` when held): a [`Lock`] of a reader slot or of the
    /// writer key ([`Lock::access`]), extended by [`Engine::extend`], released by [`Engine::unlock`], guarded by
    /// [`Engine::guard`]. `ignoring_writer`: **the control, unsafe on purpose**: a reader's offer that ignores the
    /// writer and intent keys (`kind/rwlock.rs`), so that readers may hold beside a writer.
    pub async fn lock_rw(
        &self,
        name: &[u8],
        write: bool,
        ttl: Duration,
        (retry, ignoring_writer): (bool, bool),
    ) -> Result<Option<Lock>> {
        let kind = match write {
            true => Kind::Write(name.to_vec()),
            false => Kind::Read(name.to_vec(), None),
        };
        let got = match ignoring_writer && !write {
            false => self.acquire(kind, name, ttl, retry).await,
            true => {
                let ask = kind.check(name.to_vec(), &self.core, ttl)?;
                let ttl = (ask.ttl, ask.ttl_ms);
                self.core
                    .retrying(retry, || async {
                        let value = self.core.tokens.draw("drawing the lock value")?;
                        Ok(rwlock::read_ignoring_writer(&self.core, name, value, ttl).await)
                    })
                    .await
            }
        };
        match retry {
            true => got.map(Some),
            false => crate::redlock::error::not_held(got),
        }
    }

    /// As [`LockManager::owner`](super::LockManager::owner), from the seeded stream.
    pub fn owner(&self) -> Result<Owner> {
        let value = self.core.tokens.draw("drawing the owner value")?;
        Ok(Owner { value })
    }

    /// A waiter's entry in the nodes' queue of what it waits for (a waiting request's hand-off across
    /// processes): a random id from the seeded stream, and `ticket` (when the waiter began, in µs of some wall
    /// clock: the order of the queue).
    pub fn queue_entry(&self, waits: Waits<'_>, ticket: u128) -> QueueEntry {
        let kind = waits.kind();
        let line = kind.line(waits.name()).key;
        QueueEntry(Entry::new(
            (
                self.turns.prefix(),
                self.core.tokens.random_u64().unwrap_or(0),
            ),
            ticket,
            self.core.config.round_timeout,
            (&line, matches!(kind, Kind::Plain)),
        ))
    }

    /// One queued attempt, as a waiting request's loop makes it (`kind/queued.rs`): the lock, `Ok(Err(refused))`,
    /// or an error. `joined`: the waiter queued with an earlier attempt (a grant then leaves everywhere). As the
    /// waiting loop does, a plain lock's waiter's [`Listener`] forgets the markers pushed before the attempt and
    /// keeps those pushed from now on; the caller notes the listener's sessions before it calls (what
    /// [`Engine::by_push`] is given as `armed`).
    pub async fn queued_attempt(
        &self,
        waits: Waits<'_>,
        ttl: Duration,
        entry: &QueueEntry,
        joined: bool,
    ) -> Result<std::result::Result<Lock, Refused>> {
        let ask = waits.kind().check(waits.name().to_vec(), &self.core, ttl)?;
        if entry.0.hands_on() {
            self.turns.expect(entry.0.id());
        }
        // The simulator's waiting loop is its own: its writers leave their intent to lapse.
        let intent = kind::Intent::of(&self.core, &ask);
        let got = queued::attempt(&self.core, &ask, (&entry.0, joined), &intent).await;
        intent.keep();
        Ok(got?.map_err(|(failure, _, refusal)| Refused {
            held: failure == crate::redlock::quorum::Failure::Held,
            handed: refusal.handed.map(Handed),
        }))
    }

    /// The grant by push of a plain lock's waiter whose last attempt was refused (`handed`), as the waiting
    /// loop asks it before its next attempt: the library's `kind::queued::by_push`, given the nodes whose handed
    /// marker of the attempt's value the engine's [`Listener`] took in the session `armed` notes for them (each
    /// node's listener session before the attempt was sent), and the nodes still in that session `now`. A grant
    /// is counted in [`Engine::granted_by_push`]; the lock is released by [`Engine::unlock`] (handing the key
    /// on, and taking the waiter's entry off the queue).
    pub fn by_push(
        &self,
        waits: Waits<'_>,
        entry: &QueueEntry,
        handed: &Handed,
        (armed, now): (&[Option<u64>], &[Option<u64>]),
    ) -> Pushed {
        let armed = armed.to_vec();
        let pushed = self.turns.pushed(entry.0.id(), &handed.0.value, &armed);
        let listening = turns::still_in(&armed, now);
        match queued::by_push(
            &self.core,
            (&entry.0, waits.name()),
            &handed.0,
            (pushed, listening),
        ) {
            ByPush::Granted(lock) => {
                Activity::add(&self.activity.granted_by_push, 1);
                self.turns.forget(entry.0.id());
                Pushed::Granted(lock)
            }
            ByPush::Coming(wait) => Pushed::Coming(wait),
            ByPush::No => Pushed::No,
        }
    }

    /// Takes `entry` off the queue on every node (sent, not awaited), as a waiter does with the lock or giving up;
    /// its [`Listener`] no longer keeps its markers.
    pub fn leave_queue(&self, entry: &QueueEntry) {
        self.turns.forget(entry.0.id());
        queued::leave(&self.core, &entry.0, NodeSet::ALL);
    }

    /// As a request with [`owned`](super::Request::owned): one hold of `owner`'s reentrant lock, as a [`Lock`]
    /// (extended by [`Engine::extend`], released by [`Engine::unlock`], guarded by [`Engine::guard`]).
    pub async fn lock_owned(&self, owner: &Owner, resource: &[u8], ttl: Duration) -> Result<Lock> {
        self.acquire(Kind::Owned(owner.clone(), None), resource, ttl, true)
            .await
    }

    /// As [`Engine::unlock`] of an owned hold; `unattributed` releases with the script that counts down some
    /// hold of the owner, whichever ([`lua::RELEASE_REENTRANT_UNATTRIBUTED`]): the simulator's control. Another
    /// kind of lock is released as [`Engine::unlock`] releases it.
    pub async fn unlock_owned(&self, lock: Lock, unattributed: bool) -> Result<usize> {
        let Kind::Owned(_, hold) = &lock.kind else {
            return self.unlock(lock).await;
        };
        let script = match unattributed {
            true => lua::RELEASE_REENTRANT_UNATTRIBUTED,
            false => lua::RELEASE_REENTRANT,
        };
        owned::release(&self.core, &lock.lease, hold.as_ref(), script)
            .await
            .map(|(released, _)| released)
    }

    /// Puts `lock` (of any kind) under a guard, as a request's `hold` does after acquiring it (`fence`: a
    /// fenced lock's token, for a lock that lost it on the way).
    pub fn guard(&self, lock: Lock, ttl: Duration, fence: Option<u64>) -> SimGuard {
        let lock = match fence {
            Some(token) => lock.with_kind(Kind::Fenced(Some(token))),
            None => lock,
        };
        self.guard_with(lock, ttl)
    }

    fn guard_with(&self, lock: Lock, ttl: Duration) -> SimGuard {
        let id = self
            .guards
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let margin = lost_margin(ttl, self.core.config.round_timeout);
        let now = self.core.clock.now();
        let held = Held::new(id, lock, ttl, ttl_ms, margin);
        let due = held.due(now, self.core.config.round_timeout);
        SimGuard {
            held: Arc::new(held),
            due,
        }
    }

    /// One renewal round for `guards` (the watchdog's turn for the guards due): each gets its next due time, or
    /// none once lost.
    pub async fn renew_guards(&self, guards: &mut [&mut SimGuard]) {
        let held: Vec<Arc<Held>> = guards.iter().map(|g| Arc::clone(&g.held)).collect();
        let next = guard::renew(&self.core, &self.activity, &held).await;
        for (g, next) in guards.iter_mut().zip(next) {
            if let Some(at) = next {
                g.due = at;
            }
        }
    }

    /// Releases a guard, as [`Guard::release`](crate::redlock::Guard::release) does.
    pub async fn release_guard(&self, g: SimGuard) -> Result<usize> {
        guard::end(&self.core, &g.held).await
    }
}
