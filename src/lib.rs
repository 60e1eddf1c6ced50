//! muxlock: a Redlock client that talks to N Redis masters at once.
//!
//! # Layout
//!
//! - [`resp`]: the RESP2/RESP3 codec, pure functions over bytes.
//!
//! The multiplexed network layer (`net`) and the Redlock algorithm (`redlock`) are not built yet.
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod resp;
