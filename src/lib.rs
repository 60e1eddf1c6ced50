//! muxlock: a Redlock client that talks to N Redis masters at once.
//!
//! A lock is acquired by sending `SET resource value NX PX ttl` to every node at the same time and counting the
//! replies as they arrive: the lock is held once a majority (N/2 + 1) said OK while the lease is still valid
//! ("Distributed locks with Redis", the Redlock algorithm). A node that is down or hung costs nothing unless the
//! majority needs it.
//!
//! # Start here
//!
//! - [`LockManager`]: the nodes and their connections, one per process, shared by every thread and task
//!   ([`LockManager::new`] with the node URLs, or [`LockManager::builder`]).
//! - [`Request`]: what to lock, for how long, how to wait and of which kind, from [`LockManager::request`].
//! - [`Lock`]: a lock held, valid until its lease runs out; [`LockManager::extend`] and [`LockManager::unlock`].
//! - [`Guard`]: a lock whose lease is renewed in the background, which says ([`Guard::is_lost`],
//!   [`Guard::until_lost`]) when it can no longer be relied on.
//! - [`Error`]: why a call failed, with each node's [`Outcome`] in a [`Report`] when nodes are to blame.
//! - [`Config`]: timeouts, retries, the restart guard, TLS; the defaults (50 ms rounds) suit nodes on one network.
//!
//! Guides: [`acl`] (TLS and the least ACL permissions); in the repository, `docs/operations.md` (nodes, the
//! restart guard, failures), `docs/cluster.md` (cluster members as nodes) and `docs/async.md` (executors).
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
//! // Wait up to 30 s for the invoice; a guard keeps the 10 s lease alive while the work runs.
//! let guard = locks.request("invoice:42").ttl(Duration::from_secs(10)).wait(Duration::from_secs(30)).hold()?;
//! if !guard.is_lost() {
//!     // ... work on the invoice, checking guard.is_lost() before each step ...
//! }
//! guard.release()?;
//! # Ok::<(), muxlock::Error>(())
//! ```
//!
//! Every terminal has an async form for any executor, with no runtime dependency: [`Request::acquire_async`],
//! [`Request::hold_async`], [`Request::run_async`], [`LockManager::extend_async`], [`LockManager::unlock_async`],
//! [`Guard::release_async`], [`Guard::until_lost`]; dropping one part-way leaves no lock held.
//!
//! A [`Request`] says what to lock (one resource, or a set with [`LockManager::request_all`]), for how long,
//! how to wait ([`once`](Request::once), [`retry`](Request::retry), [`wait`](Request::wait)) and which kind
//! ([`fenced`](Request::fenced), [`owned`](Request::owned), [`permits`](Request::permits),
//! [`read`](Request::read), [`write`](Request::write)); its terminal [`acquire`](Request::acquire)s a
//! [`Lock`], [`hold`](Request::hold)s a [`Guard`] or [`run`](Request::run)s a closure under one. Every kind
//! extends with [`LockManager::extend`] and releases with [`LockManager::unlock`].
//!
//! | request | guarantee |
//! |---|---|
//! | `request(r)` | at most one holder while the lock reports valid (a majority granted it, its lease minus the round's time and a drift allowance has not run out) |
//! | `request_all([a, b])` | the same for every name of the set together: a node sets all of them for you or none |
//! | `.fenced()` | also a token above every earlier holder's, for the resource to refuse a late writer ([`FENCED_WRITE`] for a Redis-held resource) |
//! | `.owned(&owner)` | the same owner acquires again instead of being refused; each hold releases on its own |
//! | `.permits(k)` | a semaphore: at most `k` holders at once, each holding its own permit ([`Lock::permit`]), a mutex of its own key |
//! | `.read()` / `.write()` | a read-write lock: readers share it (at most [`MAX_READERS`]), a writer holds it alone ([`Lock::access`]) |
//! | `.hold()` | a guard renews the lease and says before it can have ended when the lock can no longer be relied on |
//!
//! What a caller sees when the nodes cannot be reached (this one runs: nothing listens on port 1):
//!
//! ```
//! use std::time::Duration;
//! use muxlock::{Config, Error, LockManager};
//!
//! let config = Config::default().with_retry_count(0);
//! let locks = LockManager::builder().node("127.0.0.1:1").config(config).build()?;
//! match locks.request("report").ttl(Duration::from_secs(5)).once().acquire() {
//!     Err(Error::Quorum(report)) => {
//!         assert_eq!(report.granted(), 0);
//!         println!("{}", Error::Quorum(report)); // names each node and what happened to it
//!     }
//!     other => panic!("unexpected: {other:?}"),
//! }
//! // Invalid input is refused before anything is sent.
//! assert!(locks.request("").once().acquire().unwrap_err().is_config());
//! # Ok::<(), muxlock::Error>(())
//! ```
//!
//! # The first run: young nodes
//!
//! A node that restarted without its data may have forgotten the locks it granted, and a node just started looks
//! the same, so by default (the restart guard, [`Config::restart_guard`]) its grants count once it has been up
//! longer than the longest lease in use. On freshly started nodes a first [`once`](Request::once) acquisition fails
//! with [`Error::Quorum`], whose [`Report::restart_wait`] says how long until the nodes count; a
//! [`wait`](Request::wait) waits that long (and says so, with the `tracing` feature). Nodes that persist every
//! write (`appendonly yes`, `appendfsync always`) count at once: `muxlock cluster up` starts them so.
//!
//! # TLS and ACL users
//!
//! `rediss://` nodes connect with TLS ([`TlsConfig`], [`Config::with_tls`]); `redis://user:password@host` logs in
//! as an ACL user. Passwords never appear in `Debug`, `Display` or errors. The least permissions a muxlock user
//! needs, command by command, are on the [`acl`] page.
//!
//! # Features
//!
//! - `tls` (on by default): `rediss://` nodes, over rustls (with the `ring` provider) on the same non-blocking
//!   sockets as plain ones; see [`TlsConfig`] and [`Config::with_tls`]. Without it, muxlock has no TLS
//!   dependency and a `rediss://` node is an [`Error::Config`].
//! - `tracing` (off by default): a span per lock operation and an event per node outcome, a guard's renewals and
//!   losses, and a wait held back by young nodes, through the `tracing` facade. Resource names never appear.
//! - `metrics` (off by default): counters and histograms of operations, renewals, losses and node errors through
//!   the `metrics` facade.
//!
//! Without `tracing` and `metrics` nothing of either is compiled in. No public item is gated by a feature: the
//! API is the same whichever are on.
//!
//! # What is public
//!
//! - The lock API, at the crate root: the types above, and what they hand out or carry: [`Builder`], [`Owner`]
//!   for owned locks, [`Lost`] and [`LostWatch`] for guards, fencing's [`counter_key`] and [`FENCED_WRITE`] (a
//!   [`Lua`] script for the resource's side), [`PERSIST_MARKER_KEY`] (what the restart guard reads), [`Result`],
//!   what errors carry ([`ConfigError`], [`AddrError`], [`NodeAddr`], [`NodeError`], [`TlsError`], [`IoError`]),
//!   the counters of [`LockManager::stats`] ([`Stats`], [`NodeStats`], [`NodeCounts`], [`GuardStats`],
//!   [`ReleaseStats`]), and what [`LockManager::inspect`] reads of a key ([`Inspection`], [`KeyState`]).
//! - [`resp`]: the RESP2/RESP3 codec, a product of its own (fuzzed, benchmarked, stricter than the common
//!   parsers): public and documented for use without the rest of muxlock.
//! - The layers below the lock API are **not** an API: the network layer (`muxlock::net`) and the Redlock
//!   internals (`muxlock::redlock::quorum`, `muxlock::redlock::scripts`) are reachable for the project's own
//!   tests and benches but hidden from the docs, and may change in any release.
//!
//! # Layout
//!
//! - [`resp`]: the RESP2/RESP3 codec, pure functions over bytes.
//! - `net` (hidden): non-blocking connections to N nodes on one poll; a request goes to all at once, concurrent
//!   callers' requests share writes, replies are read as they arrive.
//! - [`redlock`]: the Redlock algorithm and the lock API ([`LockManager`], [`Lock`], [`Config`], [`Error`],
//!   [`Stats`]).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

#[doc(hidden)]
pub mod net;
pub mod redlock;
pub mod resp;

/// TLS and ACL users: certificates, logins and the least permissions muxlock needs, command by command
/// (`docs/acl.md`; its examples compile as this page's doc tests).
#[doc = include_str!("../docs/acl.md")]
pub mod acl {}
mod sync;
mod time;
mod timer;

/// The README's examples, compiled as doc tests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guides' examples (`docs/*.md`), compiled as doc tests for the same reason.
#[cfg(doctest)]
#[doc = include_str!("../docs/operations.md")]
#[doc = include_str!("../docs/cluster.md")]
#[doc = include_str!("../docs/async.md")]
pub struct GuideDoctests;

pub use net::{AddrError, IoError, NodeAddr, NodeCounts, NodeError, TlsConfig, TlsError};
pub use redlock::lua::{FENCED_WRITE, Lua};
#[doc(inline)]
pub use redlock::{
    Access, Builder, Config, ConfigError, Error, Guard, GuardStats, Inspection, KeyState, Lock,
    LockManager, Lost, LostWatch, MAX_PERMITS, MAX_READERS, NodeStats, Outcome, Owner,
    PERSIST_MARKER_KEY, ReleaseStats, Report, Request, Result, Stats, counter_key, intent_key,
    permit_key, reader_key, writer_key,
};
