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
//! ([`fenced`](Request::fenced), [`owned`](Request::owned)); its terminal [`acquire`](Request::acquire)s a
//! [`Lock`], [`hold`](Request::hold)s a [`Guard`] or [`run`](Request::run)s a closure under one. Every kind
//! extends with [`LockManager::extend`] and releases with [`LockManager::unlock`].
//!
//! | request | guarantee |
//! |---|---|
//! | `request(r)` | at most one holder while the lock reports valid (a majority granted it, its lease minus the round's time and a drift allowance has not run out) |
//! | `request_all([a, b])` | the same for every name of the set together: a node sets all of them for you or none |
//! | `.fenced()` | also a token above every earlier holder's, for the resource to refuse a late writer ([`FENCED_WRITE`] for a Redis-held resource) |
//! | `.owned(&owner)` | the same owner acquires again instead of being refused; each hold releases on its own |
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
//! # What is public
//!
//! - The lock API, at the crate root: [`LockManager`] (and its [`Builder`]), a [`Request`], what it hands out
//!   ([`Lock`] of every kind, an [`Owner`] for owned ones, [`Guard`] with [`Lost`] and [`LostWatch`]), fencing's
//!   [`counter_key`] and [`FENCED_WRITE`] (a [`Lua`] script for the resource's side), [`Config`] (with
//!   [`TlsConfig`] for `rediss://` nodes, and [`PERSIST_MARKER_KEY`], what the restart guard reads), [`Error`]
//!   (and [`Result`]) with its per-node [`Report`] of [`Outcome`]s and what its variants carry ([`ConfigError`],
//!   [`AddrError`], [`NodeAddr`], [`NodeError`], [`TlsError`], [`IoError`]), the counters of
//!   [`LockManager::stats`] ([`Stats`], [`NodeStats`], [`NodeCounts`], [`GuardStats`], [`ReleaseStats`]), and
//!   what [`LockManager::inspect`] reads of a key ([`Inspection`], [`KeyState`]). This is the API users rely on.
//! - [`resp`]: the RESP2/RESP3 codec, a product of its own (fuzzed, benchmarked, stricter than the common
//!   parsers): public and documented for use without the rest of muxlock.
//! - The layers below the lock API are **not** an API: the network layer (`muxlock::net`: the fanout, rounds,
//!   connection options) and the Redlock internals (`muxlock::redlock::quorum`, `muxlock::redlock::scripts`) are
//!   reachable for the project's own tests and benches but hidden from the docs, and may change in any release.
//!   (A round, for one, trusts its caller's count of replies per request; the lock API never gets it wrong.)
//!
//! # TLS and ACL users
//!
//! `rediss://` nodes connect with TLS (see [`TlsConfig`] and [`Config::with_tls`]); `redis://user:password@host`
//! logs in as an ACL user (`AUTH user password`, or `HELLO 3 AUTH user password` with `?protocol=resp3`). A wrong
//! password is an [`Error`] naming the node; passwords never appear in `Debug`, `Display` or errors. The least
//! permissions a muxlock user needs (each one shown necessary in `tests/api/acl.rs`), with `~lock:*` standing for the
//! lock names used:
//!
//! ```text
//! ACL SETUSER locker on >s3cret ~lock:* +set +get +del +pexpire +eval +evalsha +script|load +info +time +pttl +client|tracking
//! ```
//!
//! - `+set` takes a lock; `+evalsha` runs the release and extend scripts (a guard's renewals are the extend
//!   script), which call `+get`, `+del` and `+pexpire`; `+eval` runs them in full when a node has lost them (a
//!   `SCRIPT FLUSH`, a restart); `+script|load` loads them on each new connection (saving that first `EVAL`:
//!   not needed); `+info` feeds the restart guard (`INFO server`; not needed with
//!   [`Config::with_restart_guard`]`(false)`); `+time` the clock check (`TIME` with each acquisition and
//!   extension; not needed with [`Config::with_clock_check`]`(false)`).
//! - Nodes with native compare-and-delete (Valkey >= 9.0 `DELIFEQ`, Redis >= 8.4 `DELEX`) release and extend without
//!   Lua (`DELIFEQ`/`DELEX ... IFEQ`, `SET ... IFEQ ... PX`), learned per node on each connection with `COMMAND
//!   INFO`: add `+command|info` and `+delifeq` or `+delex` there. A user with only `+set +delifeq +command|info
//!   +info +time` locks, extends, releases and holds guards on such nodes.
//! - Guards and waiting ([`Request::hold`], [`Request::wait`]) add `+client|tracking` (the
//!   watchdog's tracker connections turn client-side tracking on, and read guards' keys with `GET`) and `+pttl`
//!   (a waiter reads the holder's remaining lease, which also arms the tracking of the key). Without them guards
//!   and waiters still work, late: a guard whose key was deleted or overwritten is found lost at its next renewal
//!   instead of at once, and a waiter polls at the retry delay instead of waking on the release.
//! - `AUTH` and `HELLO` need no permission; add `+select` if a URL names a database.
//! - Not in that set (and not yet tested): `+config|get`, `+time`, and `+set`/`+get` on
//!   `~muxlock:persist-marker` (the persistence marker, run by `+eval`) let the restart guard trust nodes that
//!   prove they persist every write at once (without them they get the window rule, never trust); fencing adds
//!   `~muxlock:fence:*`, reentrant locks `+hset +hdel +hlen +exists +pttl +pexpire` and `~muxlock:holds:*`;
//!   [waiting](Request::wait)'s fair queue across processes `+zadd +zrange +zrangebyscore +zrank +zrem +incr
//!   +time +pexpire` and `~muxlock:queue:* ~muxlock:queue-deadlines:* ~muxlock:turn:*` (where a majority of
//!   nodes refuse its script, a manager waits without the queue from then on).
//!
//! # Features
//!
//! - `tls` (on by default): `rediss://` nodes, over rustls (with the `ring` provider) on the same non-blocking
//!   sockets as plain ones; see [`TlsConfig`] and [`Config::with_tls`]. Without it, muxlock has no TLS
//!   dependency and a `rediss://` node is an [`Error::Config`].
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
mod timer;

/// The README's examples, compiled as doc tests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guides' examples (`docs/*.md`), compiled as doc tests for the same reason.
#[cfg(doctest)]
#[doc = include_str!("../docs/operations.md")]
#[doc = include_str!("../docs/acl.md")]
#[doc = include_str!("../docs/cluster.md")]
#[doc = include_str!("../docs/async.md")]
pub struct GuideDoctests;

pub use net::{AddrError, IoError, NodeAddr, NodeCounts, NodeError, TlsConfig, TlsError};
pub use redlock::lua::{FENCED_WRITE, Lua};
pub use redlock::{
    Builder, Config, ConfigError, Error, Guard, GuardStats, Inspection, KeyState, Lock,
    LockManager, Lost, LostWatch, NodeStats, Outcome, Owner, PERSIST_MARKER_KEY, ReleaseStats,
    Report, Request, Result, Stats, counter_key,
};
