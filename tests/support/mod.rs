//! Test support: real `redis-server` processes for integration tests and benches.
//!
//! # Layout
//! - [`server`]: [`RedisServer`], a guard around one `redis-server` child on a free loopback port,
//!   with a throwaway `--dir`, no persistence, and kill / pause / resume / restart controls.
//! - [`cluster`]: [`Cluster`], N independent servers started in parallel (Redlock's N masters;
//!   they are not a Redis Cluster).
//! - [`redis_cluster`]: [`RedisCluster`], a real Redis Cluster (`--cluster-enabled yes`) of K masters and R
//!   replicas each, built by the test (MEET, ADDSLOTSRANGE, REPLICATE), with slot migration (`ASK`, `MOVED`) and
//!   failover helpers.
//! - [`clock`]: [`FakeClock`], a wall clock a test moves (jumps, steps back, runs fast or slow) under running
//!   servers ([`RedisServerBuilder::fake_clock`]), through a preload shim built at run time.
//! - [`certs`]: [`certs::Certs`], a throwaway CA with server and client certificates (rcgen, with subject
//!   alternative names), for servers started with [`RedisServerBuilder::tls`].
//! - [`process`]: finding the binary, free ports, temp dirs, signals, `/proc` states.
//! - [`acceptor`]: [`acceptor::Acceptor`], the loopback listener and thread bookkeeping under the fake server and the
//!   proxy.
//! - [`fake`]: [`FakeServer`], a scripted impostor for the bytes a real Redis never sends.
//! - [`proxy`]: [`FaultProxy`], a loopback TCP proxy that injects latency, black holes, slow
//!   replies and resets between a client and one server (this kernel has no netem).
//! - [`wire`]: raw bytes on the wire: [`cmd`] encodes a command, [`read_reply`] reads one reply.
//! - [`checker`]: the mutual-exclusion checker: workers, recorded holds, overlap detection, a protected resource.
//! - [`faults`]: bursts of minority restarts, and what faults did to the lock managers' rounds ([`faults::Struck`]).
//! - [`locks`]: lock managers with the settings tests use, and bounded waits ([`locks::wait_until`]).
//! - [`stall`]: a failed attempt's clean-up detached on a stalled node, and the same call's next attempt there
//!   while it reconnects (the directed sequence, for sets and owned holds).
//! - [`skip`](mod@skip): [`skip()`], the one way a test says it skips because a kind of server is missing
//!   (counted and named by `scripts/test`).
//!
//! # Use
//! A test binary that is a folder (`tests/api/main.rs`): `#[path = "../support/mod.rs"] mod support;` in its
//! `main.rs`, `use crate::support;` in its modules. One that is a file (`tests/mutex.rs`): `mod support;`.
//! Benches: `#[path = "../tests/support/mod.rs"] mod support;`.
//!
//! Every process a helper starts is stopped by its own PID when its guard drops (never by name:
//! other tests run servers in parallel), every wait is bounded, and nothing touches a system
//! `redis-server` on port 6379 that the Debian package may have started.
//!
//! The binary is `$REDIS_SERVER` if set, else `redis-server` on `PATH`, else
//! `/usr/bin/redis-server` or `/usr/local/bin/redis-server`. `scripts/test` installs it.

// Not every test binary uses every helper.
#![allow(dead_code)]

pub mod acceptor;
pub mod certs;
pub mod checker;
pub mod clock;
pub mod cluster;
pub mod fake;
pub mod faults;
pub mod locks;
pub mod process;
pub mod proxy;
pub mod redis_cluster;
pub mod rt;
pub mod server;
pub mod skip;
pub mod stall;
pub mod wire;

// Re-exports for short paths; a test binary that uses none of them must still build cleanly.
#[allow(unused_imports)]
pub use clock::FakeClock;
#[allow(unused_imports)]
pub use cluster::{Cluster, ClusterBuilder};
#[allow(unused_imports)]
pub use fake::{Action, FakeServer, redis_like};
#[allow(unused_imports)]
pub use proxy::{Fault, FaultProxy};
#[allow(unused_imports)]
pub use redis_cluster::{Failover, RedisCluster, RedisClusterBuilder};
#[allow(unused_imports)]
pub use server::{RedisServer, RedisServerBuilder};
#[allow(unused_imports)]
pub use skip::skip;
#[allow(unused_imports)]
pub use wire::{cmd, read_reply};
