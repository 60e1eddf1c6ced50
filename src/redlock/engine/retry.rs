//! `Engine::retrying`: the one retry loop of the crate, around one attempt of any kind (plain, set, fenced,
//! reentrant). A kind keeps only its attempt, with its own rules inside it (a set draws one value for all its
//! attempts, a reentrant attempt a fresh hold id, a failed fenced attempt releases what it set).
//!
//! # Invariants
//!
//! - **At most `1 + retry_count` attempts**, with [`Engine::retry_pause`] (the delay and its jitter, on the
//!   engine's clock) between two of them and none after the last.
//! - **One attempt (`retry: false`) finds a holder without error**: `Ok(None)` when the attempt failed because
//!   another holder has the resource ([`Failure::Held`]). Any other failure, and every failure of the last of
//!   several attempts, is an error: [`Error::Held`] if the resource is held, else [`Error::Quorum`], each with the
//!   last attempt's report.
//! - **An error outside the nodes ends the loop at once** (the attempt's `Err`: the OS refused randomness).

use std::future::Future;

use crate::redlock::engine::Engine;
use crate::redlock::engine::seam::{Clock, Nodes};
use crate::redlock::error::{Error, Report, Result};
use crate::redlock::quorum::Failure;

/// What one attempt comes to: the lock, or why not with every node's outcome; `Err` for an error outside the
/// nodes, which is not retried.
pub(crate) type Attempt<T> = Result<std::result::Result<T, (Failure, Report)>>;

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// Runs `attempt` once (`retry: false`) or up to `1 + retry_count` times until it acquires; see the module
    /// docs for what a failure becomes. `Ok(None)` only when `retry` is false.
    pub(crate) async fn retrying<T, F, Fut>(&self, retry: bool, mut attempt: F) -> Result<Option<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Attempt<T>>,
    {
        let mut tries = 0;
        loop {
            let (failure, report) = match attempt().await? {
                Ok(lock) => return Ok(Some(lock)),
                Err(failed) => failed,
            };
            if !retry && failure == Failure::Held {
                return Ok(None);
            }
            if !retry || tries >= self.config.retry_count {
                let report = Box::new(report);
                return Err(match failure {
                    Failure::Held => Error::Held(report),
                    _ => Error::Quorum(report),
                });
            }
            tries += 1;
            self.clock.sleep(self.retry_pause()).await;
        }
    }
}

/// The error for a retrying call that [`Engine::retrying`] answered `Ok(None)`, which it never does: kept as
/// an error rather than a panic.
pub(crate) fn retried_to_none() -> Error {
    Error::config("no lock acquired")
}
