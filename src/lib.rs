//! muxlock: a Redlock client that talks to N Redis masters at once.
//!
//! # Layout
//!
//! - [`resp`]: the RESP2/RESP3 codec, pure functions over bytes.
//! - [`net`]: non-blocking connections to N nodes on one poll; a request goes to all at once.
//!
//! The Redlock algorithm (`redlock`) is not built yet.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod net;
pub mod resp;
