//! muxlock: a Redlock client that talks to N Redis masters at once.
//!
//! A lock is acquired by sending `SET resource value NX PX ttl` to every node at the same time and counting the
//! replies as they arrive: the lock is held once a majority (N/2 + 1) said OK while the lease is still valid
//! ("Distributed locks with Redis", the Redlock algorithm). A node that is down or hung costs nothing unless the
//! majority needs it.
//!
//! # Examples
//!
//! Typical use, against three Redis masters:
//!
//! ```no_run
//! use std::time::Duration;
//! use muxlock::LockManager;
//!
//! let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
//! let lock = locks.lock("invoice:42", Duration::from_secs(10))?;
//! if lock.is_valid() {
//!     // ... work on the invoice ...
//! }
//! locks.unlock(lock)?;
//! # Ok::<(), muxlock::Error>(())
//! ```
//!
//! What a caller sees when the nodes cannot be reached (this one runs: nothing listens on port 1):
//!
//! ```
//! use std::time::Duration;
//! use muxlock::{Config, Error, LockManager};
//!
//! let config = Config::default().with_retry_count(0);
//! let locks = LockManager::builder().node("127.0.0.1:1").config(config).build()?;
//! match locks.try_lock("report", Duration::from_secs(5)) {
//!     Err(Error::Quorum(report)) => {
//!         assert_eq!(report.granted(), 0);
//!         println!("{}", Error::Quorum(report)); // names each node and what happened to it
//!     }
//!     other => panic!("unexpected: {other:?}"),
//! }
//! // Invalid input is refused before anything is sent.
//! assert!(locks.try_lock("", Duration::from_secs(5)).unwrap_err().is_config());
//! # Ok::<(), muxlock::Error>(())
//! ```
//!
//! # What is public
//!
//! - The lock API, at the crate root: [`LockManager`] (and its [`Builder`]), [`Lock`], [`Config`], [`Error`] with
//!   its per-node [`Report`] of [`Outcome`]s, [`NodeAddr`], [`NodeError`], the counters of
//!   [`LockManager::stats`], and what [`LockManager::inspect`] reads of a key ([`Inspection`], [`KeyState`]). This
//!   is the API users rely on.
//! - [`resp`]: the RESP2/RESP3 codec, a product of its own (fuzzed, benchmarked, stricter than the common
//!   parsers): public and documented for use without the rest of muxlock.
//! - The layers below the lock API are **not** an API: the network layer (`muxlock::net`: the fanout, rounds,
//!   connection options) and the Redlock internals (`muxlock::redlock::quorum`, `muxlock::redlock::scripts`) are
//!   reachable for the project's own tests and benches but hidden from the docs, and may change in any release.
//!   (A round, for one, trusts its caller's count of replies per request; the lock API never gets it wrong.)
//!
//! # Layout
//!
//! - [`resp`]: the RESP2/RESP3 codec, pure functions over bytes.
//! - `net` (hidden): non-blocking connections to N nodes on one poll; a request goes to all at once, concurrent
//!   callers' requests share writes, replies are read as they arrive.
//! - [`redlock`]: the Redlock algorithm and the lock API ([`LockManager`], [`Lock`], [`Config`], [`Error`],
//!   [`Stats`]).
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

#[doc(hidden)]
pub mod net;
pub mod redlock;
pub mod resp;
mod sync;
mod time;

pub use net::{AddrError, IoError, NodeAddr, NodeCounts, NodeError};
pub use redlock::{
    Builder, Config, ConfigError, Error, Guard, GuardStats, Inspection, KeyState, Lock,
    LockManager, LockSet, Lost, LostWatch, NodeStats, Outcome, Report, Result, Stats,
};
