//! The network layer: one non-blocking connection per Redis node on `mio`, and a [`Fanout`] that sends a request
//! to N nodes at once and hands back replies as they arrive.
//!
//! This layer knows nothing of locks: it moves RESP requests and replies, keeps connections alive, and turns every
//! failure into a per-node [`NodeError`]: a node that is down fails at once, a hung node at the round's deadline,
//! and neither holds up the replies of the others.
//!
//! - [`NodeAddr`]: where a node is and how to log in (`redis://user:pass@host:port/db`).
//! - [`Options`]: timeouts, backoff, bounds, set-up commands.
//! - [`Fanout`] and [`Round`]: the multiplexer and one request/reply exchange.

mod addr;
mod conn;
mod error;
mod fanout;
mod options;
mod read;
mod resolve;
mod slots;
mod stats;

pub use addr::{AddrError, NodeAddr};
pub use error::{IoError, NodeError};
pub use fanout::{Fanout, NodeSet, Pushes, Round};
pub use options::Options;
pub use slots::Reply;
pub use stats::NodeCounts;
