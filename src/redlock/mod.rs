//! The Redlock algorithm and the lock API: [`LockManager`], [`Lock`], [`Config`], [`Error`].
//!
//! Per "Distributed locks with Redis" (the Redlock page): to acquire, take the time, send `SET resource value NX PX
//! ttl` to all N masters at once, and hold the lock if a majority (N/2 + 1) said OK while the lease is still valid;
//! the validity is the TTL minus the time elapsed minus a clock-drift allowance. Release and extension are
//! compare-and-delete / compare-and-pexpire Lua scripts, also sent to all N at once, or per node the native
//! `DELIFEQ` / `DELEX ... IFEQ` and `SET ... IFEQ ... PX` where it has them.
//!
//! What a user names is re-exported here and at the crate root: [`LockManager`] (every verb) and its
//! [`Request`], what it hands out ([`Lock`] of every kind with its [`Owner`], [`Guard`] with [`LostWatch`]),
//! [`Config`], [`Error`] with its per-node [`Report`], [`Inspection`], [`Stats`].
//!
//! # Layout
//!
//! Rooms, each reaching only the ones below it, however many steps away (`tests/house/imports.rs` checks it):
//!
//! ```text
//! manager/          LockManager + Builder: every public verb (mod.rs: the basic ones; request.rs: the
//!                   Request, its options and terminals; holding.rs: cancel_waits, the guards' TTL check;
//!                   kinds.rs: batches, owners); the only room that knows all
//!   wait.rs         the waiting loop around any kind's attempt, in this process' lines; probes on the tracker;
//!                   wait/handoff.rs: the queue across processes (plain locks, semaphores, read-write locks)
//!   guard/          Guard, LostWatch; Held (a guard's state, its lock's kind); Keeper (what handles and
//!                   guards share: the engine, the watchdog, the waiters); renew (applies the engine's renewal
//!                   verdicts); watchdog.rs (the thread: renewals, the tracker connections, invalidation pushes)
//!   waiters.rs      WaitRoom: this process' lines of waiters (a resource's, a set's, an owner's), who wakes whom
//!   kind/           each kind in one file: its value, its replies' meaning, its rounds. mod.rs: Kind (the one
//!                   enum that says which kind), Lock (a lease and its kind), the dispatch of each verb to the
//!                   kind's file; plain.rs, set.rs, fenced.rs (and the fencing safety argument), owned.rs
//!                   (Owner, reentrant holds), queued.rs (a plain attempt behind the nodes' queue),
//!                   semaphore.rs (one of k permits, and the argument that at most k hold)
//!   engine/         Engine<N = Fanout, C = SystemClock>: the machinery every kind runs on, knowing no kind
//!                   mod.rs (compare-and-X extension and release of a Lease, inspect, reports, the retry
//!                   loop), lease.rs (Lease), scripted.rs (a scripted kind's acquisition and extension),
//!                   release.rs (Tally: the one release verdict), reply.rs (the shared replies' meaning),
//!                   compare.rs (compare-and-X requests, native or scripted per node, with refusal fallback),
//!                   renew.rs (the guards' batched renewal), pipeline.rs (k commands per node), batch.rs,
//!                   fold.rs, awaiting.rs; restart/ + persist.rs (the restart guard); clock.rs (the clock
//!                   check); native.rs (each node's DELIFEQ / DELEX); seam.rs (Nodes / NodeRound / Clock)
//!   leaves          quorum (the verdict, a pure state machine), schedule, scripts + lua (the scripts and SHA1s),
//!                   token, config, error, lost, stats, observe, inspect
//! ```
//!
//! - **The engine is sans-IO in time and nodes**: it reaches the nodes only through the seam (`engine/seam.rs`;
//!   `net::Fanout` implements it, and so does the simulator in `tests/sim/`) and the time only through its
//!   `Clock` (no `Instant::now()` or sleep elsewhere in `engine/`). Generic with the real ones as defaults, it is
//!   monomorphised: a lone caller pays nothing for it. The restart guard reads the seam's set-up replies through
//!   typed ids (`SetupIds`), not positions.
//! - **Guards and waiting are on the real fanout and clock** (threads, condvars); guard renewal is generic
//!   (`guard::renew`), so the simulator runs it on its clock.
//! - `quorum`, `scripts` and `lua` are hidden public modules (not an API): tests use them, and
//!   [`lua::FENCED_WRITE`] is the resource side of fencing.
//! - `sim`: only with the non-default `sim` cargo feature, for the project's own simulator tests; not an API,
//!   never in a user's build.

mod config;
mod engine;
mod error;
mod guard;
mod inspect;
mod kind;
mod lost;
#[doc(hidden)]
pub mod lua;
mod manager;
mod observe;
#[doc(hidden)]
pub mod quorum;
mod schedule;
#[doc(hidden)]
pub mod scripts;
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod sim;
mod stats;
mod token;
mod wait;
mod waiters;

pub use config::Config;
pub use engine::persist::PERSIST_MARKER_KEY;
pub use error::{ConfigError, Error, Outcome, Report, Result};
pub use guard::{Guard, LostWatch};
pub use inspect::{Inspection, KeyState};
pub use kind::Lock;
pub use kind::fenced::counter_key;
pub use kind::owned::Owner;
pub use kind::rwlock::{Access, MAX_READERS, intent_key, reader_key, writer_key};
pub use kind::semaphore::{MAX_PERMITS, permit_key};
pub use lost::Lost;
pub use manager::{Builder, LockManager, Request};
pub use stats::{GuardStats, NodeStats, ReleaseStats, Stats};
