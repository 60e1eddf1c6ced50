//! muxlock: a Redlock client that talks to N Redis masters at once.
//!
//! # Layout
//!
//! - [`resp`]: the RESP2/RESP3 codec, pure functions over bytes.
//! - [`net`]: non-blocking connections to N nodes on one poll; a request goes to all at once.
//! - [`redlock`]: the Redlock algorithm and the lock API ([`LockManager`], [`Lock`], [`Config`], [`Error`]).
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

#[doc(hidden)]
pub mod fuzzing;
pub mod net;
pub mod redlock;
pub mod resp;

pub use redlock::{Config, Error, Lock, LockManager};
