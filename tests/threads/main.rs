//! What the client does with its process's threads, and many threads on one manager: the threads a dropped
//! manager leaves, the guard room's watchdog, releases held up in the fanout's background, one manager shared by
//! 64 threads.

#[path = "../support/mod.rs"]
mod support;

mod detached_releases;
mod dropped_managers;
mod guard_room;
mod shared_manager;

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Turns between this binary's tests. A test that counts the process's threads, or loads both vCPUs with 64
/// threads, runs [`alone`]; every other test runs [`beside_others`], never beside one that runs alone. Every test
/// here takes one or the other: one that took neither would move the counts of a test that runs alone.
static TURNS: RwLock<()> = RwLock::new(());

/// The turn of a test that nothing else of this binary may run beside.
pub fn alone() -> RwLockWriteGuard<'static, ()> {
    TURNS.write().unwrap_or_else(PoisonError::into_inner)
}

/// The turn of a test that may run beside the others, but not beside one that runs [`alone`].
pub fn beside_others() -> RwLockReadGuard<'static, ()> {
    TURNS.read().unwrap_or_else(PoisonError::into_inner)
}
