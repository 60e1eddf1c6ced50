//! The Redlock algorithm and the lock API: [`LockManager`], [`Lock`], [`Config`], [`Error`].
//!
//! Per "Distributed locks with Redis" (the Redlock page): to acquire, take the time, send `SET resource value NX PX
//! ttl` to all N masters at once, and hold the lock if a majority (N/2 + 1) said OK while the lease is still valid;
//! the validity is the TTL minus the time elapsed minus a clock-drift allowance. Release and extension are
//! compare-and-delete / compare-and-pexpire Lua scripts, also sent to all N at once.
//!
//! - `quorum` (hidden, not an API): the decision as a pure state machine (votes and `now` in, verdict out).
//! - `scripts` (hidden, not an API): the release and extend scripts and their SHA1s.
//! - [`LockManager`]: acquire (`lock`, `try_lock`, `acquire`), `extend`, `unlock`, `stats`; for a lock held by its
//!   value alone (a script, another process), `extend_value` and `unlock_value`; and [`inspect`](LockManager::inspect),
//!   which reads every node's key without changing it ([`Inspection`]).
//! - `lua` (hidden, not an API, but public for tests and for [`lua::FENCED_WRITE`], the resource side of fencing):
//!   the scripts of batches, sets, fencing and reentrancy.
//! - `pipeline`: a round carrying `k` commands per node, replies matched by position, `NOSCRIPT` resent once.
//! - `batch`: [`LockManager::try_lock_batch`], [`LockManager::unlock_batch`].
//! - `many`: [`LockSet`], [`LockManager::lock_many`] and kin, [`LockManager::hold_many`].
//! - `fenced`: [`FencedLock`], [`LockManager::lock_fenced`] and kin; the safety argument is its module doc.
//! - `restart` and `persist`: the restart guard (the spec's delayed restart, done by the client) and what a node
//!   can prove about its persistence (its settings, [`PERSIST_MARKER_KEY`]) to be trusted at once.
//! - `reentrant`: [`Owner`], [`ReentrantLock`], [`LockManager::lock_reentrant`].
//! - `unreleased`: [`Unreleased`], a release not confirmed by a majority, with the lock handed back for a retry.
//!
//! # Layout
//!
//! - **The seam** (`seam`): `Nodes` / `NodeRound` (open a round or a release round with a deadline, send to a node
//!   set with a reply count, `need`, `next()`; a node's session and set-up replies) and `Clock` (`now`, the retry
//!   pause). `net::Fanout` and `SystemClock` implement them; so does the simulator in `tests/sim/`.
//! - **The engine's rounds**, generic over the seam as `Core<N = Fanout, C = SystemClock>` (monomorphised: a lone
//!   caller pays nothing for it): `core` (acquire, extend, release, inspect, the guards' batched renewal),
//!   `pipeline` (k commands per node), `batch`, `many`, `fenced`, `reentrant`; the restart guard (`restart`,
//!   `persist`) reads the seam's set-up replies through typed ids (`SetupIds`). No `Instant::now()` or sleep in
//!   them outside the clock.
//! - **Pure leaves**: `quorum`, `schedule`, `scripts`, `lua`, `token`, `config`, `error`, `stats`.
//! - **Guards, watchdog, waiting, the manager** (`guard`, `watchdog`, `wait`, `manager`, `inspect`): still on the
//!   real fanout and clock (`Core` with its defaults); untangling them from the engine is the rest of issue #22.
//! - `sim`: only with the non-default `sim` cargo feature, for the project's own simulator tests; not an API, never
//!   in a user's build.

mod batch;
mod config;
mod core;
mod error;
mod fenced;
mod guard;
mod inspect;
mod lock;
#[doc(hidden)]
pub mod lua;
mod manager;
mod many;
mod persist;
mod pipeline;
#[doc(hidden)]
pub mod quorum;
mod reentrant;
mod restart;
mod schedule;
#[doc(hidden)]
pub mod scripts;
mod seam;
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod sim;
mod stats;
mod token;
mod unreleased;
mod wait;
mod waiters;
mod watchdog;

pub use config::Config;
pub use error::{ConfigError, Error, Outcome, Report, Result};
pub use fenced::{FencedLock, counter_key};
pub use guard::{Guard, Lost, LostWatch};
pub use inspect::{Inspection, KeyState};
pub use lock::Lock;
pub use manager::{Builder, LockManager};
pub use many::LockSet;
pub use persist::PERSIST_MARKER_KEY;
pub use reentrant::{Owner, ReentrantLock};
pub use stats::{GuardStats, NodeStats, Stats};
pub use unreleased::Unreleased;
