//! Locking that cannot panic.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m` even if a thread panicked while holding it. Nothing in this crate panics while holding a lock; if a
/// caller's code did (inside a callback), the data is still consistent enough to go on, and a lock client must
/// not turn one panic into a panic in every thread.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
