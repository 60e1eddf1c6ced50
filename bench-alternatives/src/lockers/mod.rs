//! The locks compared, behind one small trait: [`Locker`] (one client, one lock at a time) and [`Factory`] (makes
//! clients of one alternative, and says which server processes it uses).
//!
//! - [`mux`]: muxlock, 5 or 3 local Redis nodes.
//! - [`pg`]: PostgreSQL session-level advisory locks.
//! - [`maria`]: the seed's database-table locks on MariaDB: a row inserted under a unique key (deleted to release),
//!   and `SELECT ... FOR UPDATE` in a transaction (committed to release).
//! - [`zk`]: ZooKeeper's lock recipe: an ephemeral sequential node, a watch on the predecessor.
//! - [`old`]: the seed's single-instance `SETNX` + `GETSET` timestamp scheme (`tests/api/old_scheme/scheme.rs`).
//!
//! Every call is bounded by [`BOUND`]: a call that has not returned by then is *hung* (the async clients' futures
//! are dropped at the bound; the blocking ones have socket timeouts of the bound; muxlock, whose calls end by
//! themselves, counts as hung if one returned later than the bound). After a hung or failed call the client drops
//! its connection and makes a new one on the next call, as a careful user's code would.
//!
//! Waiting for a held lock ([`Locker::acquire`]) is done as each alternative's users would: PostgreSQL's
//! `pg_advisory_lock` and `SELECT ... FOR UPDATE` wait in the server; ZooKeeper waits for the predecessor's
//! deletion; the inserted row and the old scheme poll, every 5 ± 5 ms; muxlock either waits without polling (a
//! request that `wait`s, woken by releases) or polls in its retry loop (`mux::Wait`).

pub mod maria;
pub mod mux;
pub mod old;
pub mod pg;
pub mod zk;

use std::cell::RefCell;
use std::time::{Duration, Instant};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// The longest any call may take before it counts as hung.
pub const BOUND: Duration = Duration::from_secs(2);

/// What one bounded call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call<T> {
    Ok(T),
    /// An error came back within the bound.
    Failed(String),
    /// Nothing came back within the bound.
    Hung,
}

impl<T> Call<T> {
    pub fn is_ok(&self) -> bool {
        matches!(self, Call::Ok(_))
    }
}

/// One client of a lock service, holding at most one lock at a time.
pub trait Locker: Send {
    /// Creates whatever `names` need before they can be locked (ZooKeeper's parent nodes, the rows `SELECT ...
    /// FOR UPDATE` locks). Called once per scenario, outside any timing.
    fn prepare(&mut self, names: &[String]) -> Result<(), String> {
        let _ = names;
        Ok(())
    }

    /// One attempt: `Ok(true)` if this client now holds `name`, `Ok(false)` if someone else does.
    fn try_acquire(&mut self, name: &str) -> Call<bool>;

    /// Waits for `name` in this alternative's own way, up to [`BOUND`]: `Ok(false)` if still held then.
    fn acquire(&mut self, name: &str) -> Call<bool>;

    /// Releases the lock the last successful acquisition took.
    fn release(&mut self) -> Call<()>;

    /// Until when the holder may act on its lock, when the lock says: a lease's end (muxlock; the old scheme,
    /// by the holder's own clock). `None` for locks without a lease, which last until released or until their
    /// session ends, which the holder learns only by using it.
    fn lease_end(&self) -> Option<Instant> {
        None
    }

    /// Whether the holder has reason to believe it still holds its lock: its lease runs (muxlock, the old
    /// scheme), its session is connected (ZooKeeper). Database session locks cannot tell without a round trip.
    fn still_valid(&self) -> bool {
        self.lease_end().is_none_or(|end| Instant::now() < end)
    }
}

/// Makes the clients of one alternative.
pub trait Factory: Send + Sync {
    /// The name in the tables.
    fn name(&self) -> String;

    /// A new client for one thread. `shared`: it may share a process-wide client with the other threads (the
    /// way each is meant to be used: one muxlock `LockManager`, one ZooKeeper session per process); otherwise it
    /// has its own, like a separate process. Database clients always have a connection each (a session lock
    /// belongs to a connection).
    fn locker(&self, shared: bool, ttl: Duration) -> Box<dyn Locker>;

    /// The server processes (PIDs, and process trees) whose CPU time counts for this alternative.
    fn servers(&self) -> Pids;
}

/// Processes to read CPU time from: single PIDs, and whole process trees (a root and its descendants).
#[derive(Debug, Clone, Default)]
pub struct Pids {
    pub pids: Vec<u32>,
    pub trees: Vec<u32>,
}

/// The pause between two polls of a held lock: 5 ms ± 5 ms (uniform), as muxlock's `retry_delay` and
/// `retry_jitter` are set in the bench.
pub fn poll_pause() -> Duration {
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        // RandomState is seeded differently per thread: no two pollers share a sequence.
        static RNG: RefCell<ChaCha8Rng> = RefCell::new(ChaCha8Rng::seed_from_u64(
            std::collections::hash_map::RandomState::new().build_hasher().finish(),
        ));
    }
    RNG.with(|r| Duration::from_micros(u64::from(r.borrow_mut().next_u32() % 10_000)))
}

/// Polls `attempt` every [`poll_pause`] until it gives a lock, fails or hangs, or [`BOUND`] has passed.
pub fn poll(mut attempt: impl FnMut() -> Call<bool>) -> Call<bool> {
    let deadline = Instant::now() + BOUND;
    loop {
        match attempt() {
            Call::Ok(false) if Instant::now() < deadline => std::thread::sleep(poll_pause()),
            other => return other,
        }
    }
}

/// Runs `fut` on `rt` from this (non-runtime) thread, bounded by `bound`.
pub fn bounded<T, E: std::fmt::Display>(
    rt: &tokio::runtime::Handle,
    bound: Duration,
    fut: impl Future<Output = Result<T, E>>,
) -> Call<T> {
    match rt.block_on(async { tokio::time::timeout(bound, fut).await }) {
        Ok(Ok(v)) => Call::Ok(v),
        Ok(Err(e)) => Call::Failed(e.to_string()),
        Err(_) => Call::Hung,
    }
}
