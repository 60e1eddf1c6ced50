//! [`Unreleased`]: a release that was not confirmed by a majority, with the lock handed back for a retry.

use std::fmt;

use crate::redlock::error::Error;

/// A release that was not confirmed by a majority of nodes (too few answered in time, or the lock was lost): the
/// error, and the lock itself, so that the caller can release it again. Releases that return it are idempotent on each node (a node
/// that already released the hold, or never had it, removes nothing), so a retry is always safe.
///
/// Converts into [`Error`] (the `?` operator does it), dropping the lock: it then stays on the nodes the release
/// did not reach until its lease runs out.
///
/// # Examples
///
/// ```no_run
/// # use std::time::Duration;
/// # use muxlock::LockManager;
/// # let locks = LockManager::new(["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"])?;
/// # let me = locks.owner()?;
/// let mut hold = locks.lock_reentrant(&me, "tree", Duration::from_secs(10))?;
/// for attempt in 0.. {
///     match locks.unlock_reentrant(hold) {
///         Ok(_) => break,
///         Err(e) if e.error().is_quorum() && attempt < 3 => hold = e.into_lock(), // try again, same hold
///         Err(e) => return Err(e.into()),
///     }
/// }
/// # Ok::<(), muxlock::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "the lock may still be held on a majority: release it again, or let it expire knowingly"]
pub struct Unreleased<L> {
    pub(crate) error: Error,
    /// Boxed: the error path stays small, and the happy path's `Result` with it.
    pub(crate) lock: Box<L>,
}

impl<L> Unreleased<L> {
    /// Why the release is not confirmed, with every node's outcome: [`Error::Quorum`] (too few answers: another
    /// release may be confirmed) or [`Error::LockLost`] (no majority can still have had the hold: it had expired).
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The lock, to release again.
    pub fn into_lock(self) -> L {
        *self.lock
    }

    /// The error and the lock.
    pub fn into_parts(self) -> (Error, L) {
        (self.error, *self.lock)
    }
}

impl<L> From<Unreleased<L>> for Error {
    fn from(u: Unreleased<L>) -> Error {
        u.error
    }
}

impl<L> fmt::Display for Unreleased<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "release not confirmed, the lock is handed back: {}",
            self.error
        )
    }
}

impl<L: fmt::Debug> std::error::Error for Unreleased<L> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The inner error is shown by `Display` already: its own source comes next.
        std::error::Error::source(&self.error)
    }
}
