//! The kinds of lock, each in a file of its own: its value, what its replies mean and its rounds, run on the
//! engine's machinery (`engine/`), which knows no kind by name. [`Kind`] says which kind: a request chooses it,
//! a [`Lock`](crate::redlock::Lock) and a guard keep it, and the functions here hand each verb to the kind's
//! file.
//!
//! - `plain`: one resource, the spec's `SET NX PX`, the compare-and-X extension and release;
//! - `set`: several resources, all or none (one script per node);
//! - `fenced`: a lock with a fencing token; its module doc is the safety argument;
//! - `owned`: [`Owner`](crate::redlock::Owner) and its holds of a reentrant lock, counted per owner;
//! - `queued`: the nodes' waiting queue, which the offers of the kinds that queue go behind for a waiting request
//!   (`wait/handoff.rs`);
//! - `semaphore`: one of `k` permits, each a mutex of its own; its module doc is the safety argument;
//! - `rwlock`: a read-write lock, a reader one slot of a semaphore of readers, a writer a mutex that no reader
//!   slot may be live beside; its module doc is the safety argument.
//!
//! Here too [`Lock`], what every kind is handed out as: a lease (`engine/lease.rs`) and its kind.
//!
//! Adding a kind: its file here, its variant of [`Kind`] with an arm in each function below, and its option on
//! the request (`manager/request.rs`). Three more places name a kind's parts, and stay so:
//!
//! - its scripts, in `lua.rs` and its `ALL` (a kind that waits in the nodes' queue, [`Kind::queues`]: also its
//!   offer behind the queue's gate, `queued!`, in `QUEUED`, sent in full on first use): every new connection loads
//!   `ALL` (`scripts::setup_commands`, called by the engine's connection set-up), and the engine stands below the
//!   kinds and reaches none of them (tests/house/imports.rs), so the list cannot be gathered from the kind files
//!   without the manager handing it down through the engine and the simulator's engine alike: more plumbing than
//!   the one line per script it saves (a script missing from `ALL` still runs, sent in full after `NOSCRIPT`, one
//!   round trip later);
//! - the public exports of what its users write (`redlock/mod.rs`: its key functions, an `Access`): the kind
//!   files are private modules, so a public item of one is reachable only through a `pub use`, and which items
//!   are public is the API's choice, not the file's;
//! - the simulator's seam (`sim.rs`), if the simulator is to run it: the simulator drives the engine below the
//!   request API, one verb per kind with the deliberately broken variants its controls need (a reader that
//!   ignores the writer, a release without attribution), which only the simulator may reach (feature `sim`).

pub(crate) mod fenced;
pub(crate) mod owned;
pub(crate) mod plain;
pub(crate) mod queued;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod set;

use std::fmt;
use std::time::{Duration, Instant};

use crate::net::cluster::Members;
use crate::redlock::engine::Engine;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::scripted::Scripted;
use crate::redlock::engine::seam::{Clock, Nodes, SystemClock};
use crate::redlock::error::{Error, Report, Result};
use crate::redlock::kind::owned::{Hold, Owner};
use crate::redlock::kind::queued::Gate;
use crate::redlock::kind::semaphore::Permits;
use crate::redlock::quorum::Failure;
use crate::redlock::token;

/// Which kind of lock, with what the kind keeps beside the lease. A request sets it as asked (a set's names, an
/// owner); the kind's acquisition fills in what it learns (a token, a hold); a lock and a guard keep it, and it
/// decides which rounds extend and release them, never the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One resource: `SET NX`, the compare-and-delete / compare-and-pexpire scripts (or native commands).
    Plain,
    /// Every name of a set (sorted, without duplicates once checked; the lock's resource is the first),
    /// acquired, extended and released together.
    Set(Vec<Vec<u8>>),
    /// A fencing token (`None` until one is handed out); released by the fenced release, which leaves the token
    /// on every node it frees.
    Fenced(Option<u64>),
    /// One hold of an owner's reentrant lock: the owner is the key's value (the lease's `value`); the hold
    /// (`None` until acquired) is this acquisition's field in the holds hash and the count after it.
    Owned(Owner, Option<Hold>),
    /// One permit of a semaphore: its name, its number of permits and (once acquired) the index held. The
    /// lease's key is that permit's key, extended and released as a plain lock's.
    Semaphore(Permits),
    /// A reader of a read-write lock: its name and (once acquired) its reader slot. The lease's key is that
    /// slot's key, extended and released as a plain lock's.
    Read(Vec<u8>, Option<u32>),
    /// The writer of the read-write lock named so. The lease's key is the writer key, extended and released as a
    /// plain lock's.
    Write(Vec<u8>),
}

/// Where a waiter of a kind lines up in this process (`WaitRoom::join_as`) and what it probes on the nodes when
/// refused (`wait.rs`); each kind's file says its own.
#[derive(Debug)]
pub(crate) struct Line {
    /// The line: the resource, or for the kinds that hold other keys a key of its own (no Redis key is named so:
    /// it starts with a NUL byte).
    pub(crate) key: Vec<u8>,
    /// The keys whose release may let the head in, when `key` is not one.
    pub(crate) grouped: Vec<Vec<u8>>,
    /// The keys a refused head probes (`PTTL`, which also arms their tracking).
    pub(crate) probed: Vec<Vec<u8>>,
    /// The name reports give.
    pub(crate) name: Vec<u8>,
    /// Whether any one probed key coming free may let the head in (a semaphore's permits), rather than all of
    /// them (a set).
    pub(crate) any: bool,
    /// Whether a refused attempt leaves a mark on the nodes that lapses with the lease asked for (a writer's
    /// intent): the head then tries again within half a lease, whatever it probed.
    pub(crate) marks: bool,
}

impl Line {
    /// One resource's line: on its name, probing it.
    pub(crate) fn of_resource(resource: &[u8]) -> Line {
        Line {
            key: resource.to_vec(),
            grouped: Vec::new(),
            probed: vec![resource.to_vec()],
            name: resource.to_vec(),
            any: false,
            marks: false,
        }
    }

    /// The probed keys, borrowed.
    pub(crate) fn probed(&self) -> Vec<&[u8]> {
        self.probed.iter().map(Vec::as_slice).collect()
    }
}

impl Kind {
    /// The line a waiter for `resource` of this kind joins (see [`Line`]).
    pub(crate) fn line(&self, resource: &[u8]) -> Line {
        match self {
            Kind::Plain | Kind::Fenced(_) => Line::of_resource(resource),
            Kind::Set(names) => set::line(names),
            Kind::Owned(owner, _) => owned::line(owner, resource),
            Kind::Semaphore(p) => semaphore::line(p),
            Kind::Read(name, _) => rwlock::line(name, rwlock::Access::Read),
            Kind::Write(name) => rwlock::line(name, rwlock::Access::Write),
        }
    }

    /// Whether a waiting request of this kind queues on the nodes (`wait/handoff.rs`): a plain lock, a
    /// semaphore's permit, a read-write lock's reader or writer. A set, a fenced lock and an owned hold wait in
    /// this process' line only.
    pub(crate) fn queues(&self) -> bool {
        match self {
            Kind::Plain | Kind::Semaphore(_) | Kind::Read(..) | Kind::Write(_) => true,
            Kind::Set(_) | Kind::Fenced(_) | Kind::Owned(..) => false,
        }
    }

    /// The kind's name in traces and metrics.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Set(_) => "set",
            Kind::Fenced(_) => "fenced",
            Kind::Owned(..) => "owned",
            Kind::Semaphore(_) => "semaphore",
            Kind::Read(..) => "read",
            Kind::Write(_) => "write",
        }
    }

    /// Every resource of a lock of this kind on `resource`: the one resource, or a set's names.
    pub(crate) fn resources<'a>(&'a self, resource: &'a Vec<u8>) -> &'a [Vec<u8>] {
        match self {
            Kind::Set(names) => names,
            _ => std::slice::from_ref(resource),
        }
    }

    /// A fenced lock's token, once handed out.
    pub(crate) fn token(&self) -> Option<u64> {
        match self {
            Kind::Fenced(token) => *token,
            _ => None,
        }
    }

    /// A semaphore lock's permit index, once held.
    pub(crate) fn permit(&self) -> Option<u32> {
        match self {
            Kind::Semaphore(p) => p.index,
            _ => None,
        }
    }

    /// How a lock of a read-write lock holds it; `None` for other kinds.
    pub(crate) fn access(&self) -> Option<rwlock::Access> {
        match self {
            Kind::Read(..) => Some(rwlock::Access::Read),
            Kind::Write(_) => Some(rwlock::Access::Write),
            _ => None,
        }
    }

    /// An owned hold's owner.
    pub(crate) fn owner(&self) -> Option<&Owner> {
        match self {
            Kind::Owned(owner, _) => Some(owner),
            _ => None,
        }
    }

    /// Checks a request of this kind for `resource` (a set's names are in the kind) before anything is sent:
    /// names not empty, a valid TTL, a set sorted and deduplicated, and what cluster members cannot do refused
    /// ([`check_routable`]).
    pub(crate) fn check<N: Nodes, C: Clock>(
        self,
        resource: Vec<u8>,
        engine: &Engine<N, C>,
        ttl: Duration,
    ) -> Result<Ask> {
        let (resource, kind, ttl_ms) = match self {
            Kind::Set(names) => {
                let (sorted, ttl_ms) = set::check(names, &engine.config, ttl)?;
                let first = sorted.first().cloned().unwrap_or_default();
                (first, Kind::Set(sorted), ttl_ms)
            }
            Kind::Semaphore(p) => {
                semaphore::check(p.count)?;
                let ttl_ms = engine.check(&resource, ttl)?;
                (resource, Kind::Semaphore(p), ttl_ms)
            }
            kind => {
                let ttl_ms = engine.check(&resource, ttl)?;
                (resource, kind, ttl_ms)
            }
        };
        let ask = Ask {
            resource,
            kind,
            ttl,
            ttl_ms,
        };
        check_routable(engine, &ask)?;
        Ok(ask)
    }
}

/// A lock held on a majority of the nodes, valid until [`valid_until`](Lock::valid_until): one resource, a set of
/// them, a fenced lock ([`token`](Lock::token)), one hold of an owner's reentrant lock ([`owner`](Lock::owner)) or
/// one permit of a semaphore ([`permit`](Lock::permit)) or a reader or the writer of a read-write lock
/// ([`access`](Lock::access)), as its [request](crate::redlock::Request) asked. Every kind is extended with
/// [`LockManager::extend`](crate::redlock::LockManager::extend) and released with
/// [`LockManager::unlock`](crate::redlock::LockManager::unlock).
///
/// Dropping a `Lock` does not release it: the keys expire at the end of the lease.
///
/// Validity is measured on this process' monotonic clock from the instant *before* the acquiring requests were
/// sent, minus the drift allowance, so that the lock expires here no later than on the nodes. Check
/// [`is_valid`](Lock::is_valid) before acting on the protected resource: a process that was paused (GC, swap,
/// SIGSTOP) may wake up holding a lock that has expired.
#[must_use = "a lock that is not used is held until its lease runs out"]
pub struct Lock {
    pub(crate) lease: Lease,
    pub(crate) kind: Kind,
    /// For a plain lock taken by a waiting request: the line's queue its release hands the key on to.
    pub(crate) hand_on: Option<Box<queued::HandOn>>,
}

impl Lock {
    /// A lease held as `kind`.
    pub(crate) fn new(lease: Lease, kind: Kind) -> Lock {
        Lock {
            lease,
            kind,
            hand_on: None,
        }
    }

    /// Whether `unlock_batch` releases it with the batch's compare-and-delete: a plain lock not taken by a waiting
    /// request (whose release hands the key on and takes the waiter's entry off the queue), on nodes that are not
    /// cluster members (`routed`: a batch's keys lie in many slots, and no script may span them).
    pub(crate) fn batches_with(&self, routed: bool) -> bool {
        self.kind == Kind::Plain && self.hand_on.is_none() && !routed
    }

    /// This lock as `kind`.
    #[cfg(feature = "sim")]
    pub(crate) fn with_kind(mut self, kind: Kind) -> Lock {
        self.kind = kind;
        self
    }

    /// The locked resource's name (the Redis key); for a set, the first of its names (sorted); for a semaphore,
    /// the key of the permit held ([`permit_key`](crate::redlock::permit_key)); for a reader of a read-write lock
    /// its slot's key ([`reader_key`](crate::redlock::reader_key)), for its writer the writer key
    /// ([`writer_key`](crate::redlock::writer_key)).
    pub fn resource(&self) -> &[u8] {
        &self.lease.resource
    }

    /// Every locked resource: the one resource, or a set's names (sorted, without duplicates).
    pub fn resources(&self) -> &[Vec<u8>] {
        self.kind.resources(&self.lease.resource)
    }

    /// The fencing token of a [fenced](crate::redlock::Request::fenced) lock: larger than the token of every
    /// earlier fenced acquisition of the resource. Send it with every write to the protected resource, which
    /// must refuse a token below the largest it has seen. `None` for other kinds.
    pub fn token(&self) -> Option<u64> {
        self.kind.token()
    }

    /// The owner of an [owned](crate::redlock::Request::owned) (reentrant) hold, `None` for other kinds.
    pub fn owner(&self) -> Option<&Owner> {
        self.kind.owner()
    }

    /// The index of the permit held, in `0..k`, for a lock of a semaphore of `k`
    /// [permits](crate::redlock::Request::permits); `None` for other kinds. No other holder holds this index
    /// while the lock is valid.
    pub fn permit(&self) -> Option<u32> {
        self.kind.permit()
    }

    /// For a lock of a read-write lock ([`read`](crate::redlock::Request::read),
    /// [`write`](crate::redlock::Request::write)), whether it is held as a reader or as the writer; `None` for
    /// other kinds.
    pub fn access(&self) -> Option<rwlock::Access> {
        self.kind.access()
    }

    /// For an owned hold, the number of holds the key had after this acquisition (1 for an outer hold, 2 for
    /// the first nested one, ...; the largest among the nodes counted); `None` for other kinds.
    pub fn holds(&self) -> Option<u64> {
        match &self.kind {
            Kind::Owned(_, hold) => hold.as_ref().map(|h| h.holds),
            _ => None,
        }
    }

    /// This acquisition's unique value (40 hex digits), stored in the key on each node (for an owned hold, the
    /// owner's value, shared by its holds).
    pub fn value(&self) -> &str {
        // Hex digits are ASCII; the fallback is never taken.
        std::str::from_utf8(&self.lease.value).unwrap_or_default()
    }

    /// The instant the lease ends, on the monotonic clock.
    pub fn valid_until(&self) -> Instant {
        self.lease.valid_until
    }

    /// The time left on the lease (zero once it has run out).
    pub fn validity(&self) -> Duration {
        self.lease
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// Whether the lease has not run out yet, on the monotonic clock. That clock stops while the machine is
    /// suspended: after a system suspend and resume a lock can report valid although its keys expired (see
    /// "When nodes fail" in `docs/operations.md`).
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.lease.valid_until
    }

    /// How many times the lock was extended.
    pub fn extensions(&self) -> u32 {
        self.lease.extensions
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Lock");
        match &self.kind {
            Kind::Set(names) => d.field(
                "resources",
                &names
                    .iter()
                    .map(|r| String::from_utf8_lossy(r))
                    .collect::<Vec<_>>(),
            ),
            _ => d.field("resource", &String::from_utf8_lossy(&self.lease.resource)),
        };
        d.field("value", &self.value());
        match &self.kind {
            Kind::Fenced(Some(token)) => d.field("token", token),
            Kind::Owned(_, Some(hold)) => d.field("holds", &hold.holds),
            Kind::Semaphore(p) => d.field("permit", &p.index).field("permits", &p.count),
            Kind::Read(_, slot) => d.field("access", &"read").field("slot", slot),
            Kind::Write(_) => d.field("access", &"write"),
            _ => &mut d,
        };
        d.field("validity", &self.validity())
            .field("extensions", &self.lease.extensions)
            .finish()
    }
}

/// A checked request for a lock: its resource (a set's first name), its [`Kind`] as asked, and its TTL.
#[derive(Debug)]
pub(crate) struct Ask {
    pub(crate) resource: Vec<u8>,
    pub(crate) kind: Kind,
    pub(crate) ttl: Duration,
    pub(crate) ttl_ms: u64,
}

/// Refuses, before anything is sent, what cluster members cannot do: a set whose names do not share one hash slot
/// (its all-or-none script must run on one master: tag the names, `{order:7}:a`, `{order:7}:b`), and a fenced or
/// owned lock of a resource with a brace but no hash tag, whose fencing counter or hold count cannot be named in
/// its slot ([`derived_key`]). Nothing is refused on a manager of plain members.
fn check_routable<N: Nodes, C: Clock>(engine: &Engine<N, C>, ask: &Ask) -> Result<()> {
    use crate::net::cluster::key_slot;
    if !engine.fanout.routed() {
        return Ok(());
    }
    match &ask.kind {
        Kind::Plain => Ok(()),
        Kind::Set(names) => {
            let first = names.first().map(|n| key_slot(n));
            match names.iter().all(|n| Some(key_slot(n)) == first) {
                true => Ok(()),
                false => Err(Error::config(
                    "on cluster members a set's names must share one hash slot (its all-or-none script runs \
                     on one master): give them one hash tag, such as {order:7}:a and {order:7}:b",
                )),
            }
        }
        Kind::Fenced(_) | Kind::Owned(..) if !colocatable(&ask.resource) => Err(Error::config(
            "on cluster members a fenced or owned lock's resource must have a hash tag ({invoice}:42) \
             or no brace at all: its counter must lie in the resource's slot",
        )),
        Kind::Fenced(_) | Kind::Owned(..) => Ok(()),
        Kind::Semaphore(_) if !colocatable(&ask.resource) => Err(Error::config(
            "on cluster members a semaphore's name must have a hash tag ({pool}:db) or no brace at all: \
             its permits must lie in one slot",
        )),
        Kind::Semaphore(_) => Ok(()),
        Kind::Read(..) | Kind::Write(_) if !colocatable(&ask.resource) => Err(Error::config(
            "on cluster members a read-write lock's name must have a hash tag ({doc}:7) or no brace at all: \
             its writer, intent and reader keys must lie in one slot",
        )),
        Kind::Read(..) | Kind::Write(_) => Ok(()),
    }
}

/// One acquisition round of `ask`'s kind: the lock, or why not with every node's outcome (partial grants are
/// released by then, as each kind does it).
///
/// **Cancel-safe**: if this future is dropped before the round concludes (an async caller gave up), an
/// [`Undo`] releases whatever the attempt may have been granted, on every node, at once and unawaited (each
/// kind's release is a compare-and-delete of this attempt's own value or hold id: a node that never granted
/// removes nothing). On the blocking seam the future is never dropped part-way; the guard costs a flag.
/// `intent`: the call's, told the attempt's value.
pub(crate) async fn attempt<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    ask: &Ask,
    intent: &Intent<'_, N, C>,
) -> Result<std::result::Result<Lock, (Failure, Report)>> {
    // A fresh value per attempt, for every kind (for an owned hold the value is the owner's and the fresh id is
    // the hold's): the clean-up of a failed attempt is a compare-and-delete of that value, so whenever it runs,
    // even after a later attempt of the same call on the same node, it removes only what the attempt it cleans
    // up set (the contract of `Fanout::release_round`).
    let fresh = engine
        .tokens
        .draw("drawing the lock value from the OS's randomness")?;
    intent.offered(fresh);
    let mut undo = Undo::new(engine, &ask.resource, &ask.kind, fresh);
    let got = offer(engine, ask, fresh, None).await;
    undo.disarm();
    Ok(got)
}

/// One offer of `ask` with the attempt's value `fresh`, as its kind makes it; behind the nodes' waiting queue
/// with a `gate` (`queued.rs`), for the kinds that queue ([`Kind::queues`]: the others ignore it).
pub(crate) async fn offer<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    ask: &Ask,
    fresh: token::Value,
    gate: Option<&mut Gate<'_>>,
) -> std::result::Result<Lock, (Failure, Report)> {
    let (resource, ttl) = (&ask.resource[..], (ask.ttl, ask.ttl_ms));
    match (&ask.kind, gate) {
        (Kind::Plain, Some(gate)) => plain::queued(engine, resource, fresh, ttl, gate).await,
        (Kind::Plain, None) => plain::attempt(engine, resource, fresh, ttl).await,
        (Kind::Set(names), _) => set::attempt(engine, names, fresh, ttl).await,
        (Kind::Fenced(_), _) => fenced::attempt(engine, resource, fresh, ttl).await,
        (Kind::Owned(owner, _), _) => owned::attempt(engine, owner, resource, fresh, ttl).await,
        (Kind::Semaphore(p), gate) => {
            semaphore::attempt(engine, resource, p.count, fresh, ttl, gate).await
        }
        (Kind::Read(..), gate) => rwlock::read(engine, resource, fresh, ttl, gate).await,
        (Kind::Write(_), gate) => rwlock::write(engine, resource, fresh, ttl, gate).await,
    }
}

/// Acquires `ask`: one attempt, or (`retry`) up to [`Config::retry_count`](crate::redlock::Config) more after a
/// jittered pause ([`Engine::retrying`]). A writer that ends without the lock withdraws its intent ([`Intent`]).
pub(crate) async fn acquire<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    ask: &Ask,
    retry: bool,
) -> Result<Lock> {
    let intent = Intent::of(engine, ask);
    let got = engine
        .retrying(retry, || attempt(engine, ask, &intent))
        .await;
    if got.is_ok() {
        intent.keep();
    }
    got
}

/// The kind's extension script of a lease of `resource` holding `value`, or `None` for the compare-and-pexpire
/// of the key (plain and fenced locks). Shared by [`extend`] and the guards' renewal.
pub(crate) fn extension(
    kind: &Kind,
    resource: &[u8],
    value: &[u8],
    routed: bool,
) -> Option<Scripted> {
    match kind {
        Kind::Plain | Kind::Fenced(_) | Kind::Semaphore(_) | Kind::Read(..) | Kind::Write(_) => {
            None
        }
        Kind::Set(names) => Some(set::extension(names, value)),
        Kind::Owned(_, hold) => Some(owned::extension(resource, value, hold.as_ref(), routed)),
    }
}

/// Extends `lock`'s lease to `ttl` from now, as its kind is extended. On failure (or if this future is dropped
/// before it ends) the lock keeps its lease, cut to what the attempt may have left on the nodes if `ttl` is
/// shorter ([`Engine::after_failed_extension`]).
pub(crate) async fn extend<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    lock: &mut Lock,
    ttl: Duration,
) -> Result<()> {
    let routed = engine.fanout.routed();
    match extension(&lock.kind, &lock.lease.resource, &lock.lease.value, routed) {
        None => engine.extend(&mut lock.lease, ttl).await,
        Some(script) => {
            let name = set::set_name(lock.resources());
            engine
                .extend_scripted(&mut lock.lease, ttl, &script, &name)
                .await
        }
    }
}

/// Releases `lock` as its kind is released; the number of nodes that confirmed.
pub(crate) async fn release<N: Nodes, C: Clock>(
    engine: &Engine<N, C>,
    lock: &Lock,
) -> Result<usize> {
    match &lock.kind {
        // A fenced lock without a token handed out has no counter to raise.
        Kind::Plain => match &lock.hand_on {
            Some(hand_on) => plain::release_handing_on(engine, &lock.lease, hand_on).await,
            None => engine.unlock(&lock.lease).await,
        },
        Kind::Fenced(None) => engine.unlock(&lock.lease).await,
        // A reader's slot and the writer key are plain keys.
        Kind::Read(..) | Kind::Write(_) => engine.unlock(&lock.lease).await,
        // A permit is a plain key; a lock without an index (the simulator's control) gives back every permit.
        Kind::Semaphore(p) if p.index.is_some() => engine.unlock(&lock.lease).await,
        Kind::Semaphore(p) => {
            set::release(
                engine,
                &lock.lease,
                &semaphore::permit_keys(&p.name, p.count),
            )
            .await
        }
        Kind::Fenced(Some(token)) => fenced::release(engine, &lock.lease, *token).await,
        Kind::Set(names) => set::release(engine, &lock.lease, names).await,
        Kind::Owned(_, hold) => owned::release(
            engine,
            &lock.lease,
            hold.as_ref(),
            crate::redlock::lua::RELEASE_REENTRANT,
        )
        .await
        .map(|(released, _)| released),
    }
}

/// An acquisition round under way, undone if its future is dropped before the round concludes: see [`attempt`]
/// (and the queued attempt, `queued.rs`). `fresh` is the attempt's value (an owned hold's id).
pub(crate) struct Undo<'a, N: Nodes, C: Clock> {
    engine: &'a Engine<N, C>,
    resource: &'a [u8],
    kind: &'a Kind,
    fresh: token::Value,
    armed: bool,
}

impl<'a, N: Nodes, C: Clock> Undo<'a, N, C> {
    /// Armed: dropped as it is, it releases what an attempt at `resource` of `kind` with the value `fresh` may
    /// have set.
    pub(crate) fn new(
        engine: &'a Engine<N, C>,
        resource: &'a [u8],
        kind: &'a Kind,
        fresh: token::Value,
    ) -> Self {
        Undo {
            engine,
            resource,
            kind,
            fresh,
            armed: true,
        }
    }

    /// The round concluded (its own failure path releases partial grants): nothing to undo.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl<N: Nodes, C: Clock> Drop for Undo<'_, N, C> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (engine, fresh) = (self.engine, &self.fresh);
        match self.kind {
            // A fenced attempt's key holds its value too; the counter is left alone (no token was handed out).
            Kind::Plain | Kind::Fenced(_) => plain::undo(engine, self.resource, fresh),
            Kind::Set(names) => set::undo(engine, names, fresh),
            Kind::Owned(owner, _) => owned::undo(engine, self.resource, owner, fresh),
            Kind::Semaphore(p) => semaphore::undo(engine, self.resource, p.count, fresh),
            Kind::Read(..) => rwlock::undo_read(engine, self.resource, fresh),
            // The intent is the call's to withdraw ([`Intent`]), not one attempt's.
            Kind::Write(_) => plain::undo(engine, &rwlock::writer_key(self.resource), fresh),
        }
    }
}

/// How many of a writer call's latest intent values [`Intent`] withdraws: the last attempt's marks every node it
/// reached; an earlier value is left only where later attempts did not reach (a node down or cut off meanwhile).
const MARKS_WITHDRAWN: usize = 4;

/// One writer's call (every attempt of one acquisition, retried or waiting): the values its attempts may have
/// marked the writer's intent with, **withdrawn when the call ends without the lock** (refused, given up, or its
/// future dropped): a compare-and-delete of the intent key with each value, unawaited, on every node (the last
/// [`MARKS_WITHDRAWN`]). A call that holds the lock keeps nothing: its grant deleted the intent where it was
/// granted. Any other kind's call has no intent, and this is nothing.
///
/// The intent only refuses readers (`rwlock.rs`, where the intent and its argument are): withdrawing it (or
/// failing to, on a node cut off: it lapses with its `PX`) never makes a grant the argument forbids. A
/// withdrawal that reaches a node before a late attempt of the same call leaves that attempt's intent to lapse.
pub(crate) struct Intent<'a, N: Nodes = Members, C: Clock = SystemClock> {
    engine: &'a Engine<N, C>,
    /// The read-write lock's name, for a writer's call.
    name: Option<&'a [u8]>,
    marked: std::sync::Mutex<Vec<token::Value>>,
}

impl<'a, N: Nodes, C: Clock> Intent<'a, N, C> {
    /// The intent of a call of `ask`: something to withdraw only if it asks for a writer.
    pub(crate) fn of(engine: &'a Engine<N, C>, ask: &'a Ask) -> Self {
        let name = matches!(ask.kind, Kind::Write(_)).then_some(&ask.resource[..]);
        Intent {
            engine,
            name,
            marked: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// An attempt of the call offers `value` (which marks the intent where readers refuse it).
    pub(crate) fn offered(&self, value: token::Value) {
        if self.name.is_none() {
            return;
        }
        let mut marked = crate::sync::lock(&self.marked);
        if marked.len() == MARKS_WITHDRAWN {
            marked.remove(0);
        }
        marked.push(value);
    }

    /// The call holds the lock: nothing to withdraw.
    pub(crate) fn keep(self) {
        crate::sync::lock(&self.marked).clear();
    }
}

impl<N: Nodes, C: Clock> Drop for Intent<'_, N, C> {
    fn drop(&mut self) {
        let Some(name) = self.name else {
            return;
        };
        let marked = std::mem::take(&mut *crate::sync::lock(&self.marked));
        if marked.is_empty() {
            return;
        }
        let key = rwlock::intent_key(name);
        let mut request = bytes::BytesMut::new();
        for value in &marked {
            request.clear();
            (self.engine).release_unawaited(&mut request, crate::net::NodeSet::ALL, &key, value);
        }
    }
}

/// The name of a key derived from `resource` (a fencing counter, a hold count): `prefix + resource` on plain
/// members, as always. When some member is a Redis Cluster (`routed`), the key must lie in the resource's slot
/// or its script is `CROSSSLOT`: a resource with a hash tag (`{invoice}:42`) shares it with `prefix + resource`;
/// an untagged one is wrapped, `prefix + "{" + resource + "}"`, which hashes like the resource itself. A resource
/// with a brace but no hash tag can be colocated neither way: the engine refuses it on cluster members before
/// anything is sent ([`Kind::check`]).
///
/// Every client of a deployment must name keys alike: the naming follows the members (a deployment whose
/// members become clusters starts new counters: fencing tokens restart from the largest any node still holds
/// under the new name, so change members only with no fenced lock in use).
pub(crate) fn derived_key(prefix: &[u8], resource: &[u8], routed: bool) -> Vec<u8> {
    if !routed || crate::net::cluster::hash_tag(resource).len() != resource.len() {
        return [prefix, resource].concat();
    }
    [prefix, b"{", resource, b"}"].concat()
}

/// Whether `resource`'s derived keys can share its slot ([`derived_key`]): it has a hash tag, or no brace.
pub(crate) fn colocatable(resource: &[u8]) -> bool {
    crate::net::cluster::hash_tag(resource).len() != resource.len()
        || !resource.iter().any(|&b| b == b'{' || b == b'}')
}

#[cfg(test)]
mod tests {
    use super::{colocatable, derived_key};
    use crate::net::cluster::key_slot;

    #[test]
    fn derived_keys_share_the_resource_slot_on_cluster_members() {
        // Plain members: the prefix and the resource, unwrapped.
        assert_eq!(derived_key(b"p:", b"r", false), b"p:r");
        assert_eq!(derived_key(b"p:", b"{t}x", false), b"p:{t}x");
        // Cluster members: an untagged resource is wrapped, a tagged one keeps its tag.
        for (resource, expected) in [
            (&b"invoice:42"[..], &b"p:{invoice:42}"[..]),
            (b"{t}x", b"p:{t}x"),
        ] {
            let key = derived_key(b"p:", resource, true);
            assert_eq!(key, expected);
            assert_eq!(key_slot(&key), key_slot(resource));
            assert!(colocatable(resource));
        }
        // A brace without a tag cannot be colocated.
        for resource in [&b"a{b"[..], b"a}b", b"{}x"] {
            assert!(!colocatable(resource), "{resource:?}");
        }
    }
}
