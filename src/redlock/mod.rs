//! The Redlock algorithm and the lock API: [`LockManager`], [`Lock`], [`Config`], [`Error`].
//!
//! Per "Distributed locks with Redis" (the Redlock page): to acquire, take the time, send `SET resource value NX PX
//! ttl` to all N masters at once, and hold the lock if a majority (N/2 + 1) said OK while the lease is still valid;
//! the validity is the TTL minus the time elapsed minus a clock-drift allowance. Release and extension are
//! compare-and-delete / compare-and-pexpire Lua scripts, also sent to all N at once.
//!
//! - `quorum` (hidden, not an API): the decision as a pure state machine (votes and `now` in, verdict out).
//! - `scripts` (hidden, not an API): the release and extend scripts and their SHA1s.
//! - [`LockManager`]: acquire (`lock`, `try_lock`, `acquire`), `extend`, `unlock`, `stats`.

mod config;
mod core;
mod error;
mod guard;
mod lock;
mod manager;
#[doc(hidden)]
pub mod quorum;
mod restart;
mod schedule;
#[doc(hidden)]
pub mod scripts;
mod stats;
mod token;
mod wait;
mod watchdog;

pub use config::Config;
pub use error::{ConfigError, Error, Outcome, Report, Result};
pub use guard::{Guard, Lost, LostWatch};
pub use lock::Lock;
pub use manager::{Builder, LockManager};
pub use stats::{GuardStats, NodeStats, Stats};
