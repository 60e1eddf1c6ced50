//! The network layer: one non-blocking connection per Redis node on `mio`, and a [`Fanout`] that sends a request
//! to N nodes at once and hands back replies as they arrive.
//!
//! This layer knows nothing of locks: it moves RESP requests and replies, keeps connections alive, and turns every
//! failure into a per-node [`NodeError`]: a node that is down fails at once, a hung node at the round's deadline,
//! and neither holds up the replies of the others.
//!
//! - [`NodeAddr`]: where a node is and how to log in (`redis://user:pass@host:port/db`).
//! - [`Options`]: timeouts, backoff, bounds, set-up commands, [`TlsConfig`].
//! - [`Fanout`] and [`Round`]: the multiplexer and one request/reply exchange.

//!
//! # Layout
//!
//! - `state` (one node's protocol state, pure) and `inbound` (its bytes decoded, pure): no socket, unit-tested
//!   with byte buffers and a virtual clock;
//! - `machine/` (the fanout's state machine, sans-IO: the nodes' states, the rounds' slots, offering, holding,
//!   detaching, patience, filing, hung connections), driven by `fanout/` on `mio` and by the simulator through
//!   `sim` (feature `sim`);
//! - `transport/` (one connection's bytes on its `mio` socket: `tcp`, and `tls`, rustls driven sans-IO, with
//!   `no_tls.rs` standing in without the `tls` feature), `conn` (a node's socket side: dialling, completing a
//!   connect), `read` (the driver's read side);
//! - `fanout/` (the machine on one poll, shared by threads: the fanout itself, its `driver`, a `round`, the
//!   `background` driver), `node_set` (which nodes a request goes to), `slots` (rounds' mailboxes), `detached` (releases whose round ended
//!   while they were held for room, pure), `addr`, `resolve`, `options`, `tls_config`, `stats`, `error`;
//! - `cluster/`: a Redis Cluster's key slots, slot map, `MOVED`/`ASK` and `redis+cluster://` seed
//!   URLs (pure), and `cluster/route/`: a manager's members over one fanout, routed per slot.

mod addr;
// Key slots, slot maps, redirections, cluster URLs, and the members' routing over the fanout.
#[doc(hidden)]
pub mod cluster;
mod conn;
mod detached;
mod error;
mod fanout;
mod inbound;
mod machine;
mod node_set;
mod options;
mod read;
mod resolve;
// The deterministic simulator in tests/sim/ drives the fanout's machine through it (feature `sim`).
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod sim;
// The simulator in tests/sim/ files its rounds' outcomes through the real bookkeeping (feature `sim`).
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod slots;
#[cfg(not(feature = "sim"))]
mod slots;
mod state;
mod stats;
#[cfg(test)]
pub(crate) mod test_peer;
mod tls_config;
mod transport;

pub use addr::{AddrError, NodeAddr};
pub use error::{IoError, NodeError, TlsError};
pub use fanout::{Fanout, Occupier, Pushes, Round};
pub use node_set::NodeSet;
pub use options::Options;
pub use slots::{CommandId, Reply};
pub use stats::NodeCounts;
pub use tls_config::TlsConfig;
