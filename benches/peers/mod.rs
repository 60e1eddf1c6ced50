//! The clients `benches/lock.rs` measures, behind one small trait: [`Locker`] (acquire a resource, then release
//! it). muxlock's own two (its lock manager and a raw `SET`/`DEL` on its fanout) are in `lock.rs`; the peers are
//! here:
//!
//! - [`Rslock`]: the `rslock` crate (async, one redis-rs multiplexed connection per node, `join_all` over the
//!   nodes), run on a current-thread tokio runtime with `block_on` per call, so that a call costs what it costs a
//!   caller that waits for it, as muxlock's callers do.
//! - [`RedlockRs`]: the `redlock` crate 2.x (sync): it opens a new TCP connection per node for every command and
//!   asks the nodes one after another.
//!
//! Both are configured for a single attempt per call (no retry), like muxlock in the bench, so that a failed call
//! is counted rather than hidden behind a retry's sleep.
//!
//! For `benches/throughput.rs`, whose callers share one client between tasks (so not behind [`Locker`]):
//!
//! - [`quorum::RedisQuorum`]: Redlock written by hand on redis-rs (one multiplexed connection per node, every request
//!   to all nodes at once, an answer at the majority), the best a user could do with the common library.
//!
//! The throughput bench also runs `rslock` itself, on a multi-thread runtime, rather than through [`Rslock`].

// Each bench uses only some of the peers.
#![allow(dead_code)]

pub mod quorum;

use std::time::Duration;

/// One client of N Redlock nodes that holds at most one lock at a time.
pub trait Locker {
    /// Acquires `resource` for the bench's TTL, keeping the lock inside until [`release`](Locker::release).
    ///
    /// # Errors
    ///
    /// Why the lock was not acquired, in the client's words.
    fn acquire(&mut self, resource: &[u8]) -> Result<(), String>;

    /// Releases the lock taken by the last [`acquire`](Locker::acquire).
    ///
    /// # Errors
    ///
    /// Why the release failed, when the client says so (`rslock` and `redlock` never do: their release is
    /// best effort and returns nothing).
    fn release(&mut self) -> Result<(), String>;
}

/// The `rslock` crate on a current-thread tokio runtime.
pub struct Rslock {
    runtime: tokio::runtime::Runtime,
    manager: rslock::LockManager,
    ttl: Duration,
    held: Option<rslock::Lock>,
}

impl Rslock {
    /// A client of `urls` (`redis://host:port`), locking for `ttl`. Connects lazily, on the first call.
    pub fn new(urls: &[String], ttl: Duration) -> Rslock {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread tokio runtime");
        let mut manager = rslock::LockManager::new(urls.to_vec());
        // One attempt: rslock's default of 3 would hide a failure behind up to 2 × 200 ms of sleep.
        manager.set_retry(1, Duration::from_millis(1));
        Rslock {
            runtime,
            manager,
            ttl,
            held: None,
        }
    }
}

impl Locker for Rslock {
    fn acquire(&mut self, resource: &[u8]) -> Result<(), String> {
        let lock = self
            .runtime
            .block_on(self.manager.lock(resource, self.ttl))
            .map_err(|e| format!("rslock: {e}"))?;
        self.held = Some(lock);
        Ok(())
    }

    fn release(&mut self) -> Result<(), String> {
        let lock = self.held.take().ok_or("rslock: nothing held")?;
        // Best effort: waits for every node's answer (or its response timeout) and reports nothing.
        self.runtime.block_on(self.manager.unlock(&lock));
        Ok(())
    }
}

/// The `redlock` crate 2.x.
pub struct RedlockRs {
    manager: redlock::RedLock,
    ttl_ms: usize,
    /// The held lock's resource and value (its `Lock` borrows the manager, so it is rebuilt to release it).
    held: Option<(Vec<u8>, Vec<u8>)>,
}

impl RedlockRs {
    /// A client of `urls` (`redis://host:port`), locking for `ttl`.
    pub fn new(urls: &[String], ttl: Duration) -> RedlockRs {
        let mut manager = redlock::RedLock::new(urls.to_vec());
        // One attempt; the delay must be at least 1 ms (the crate draws the sleep from `0..delay`).
        manager.set_retry(1, 1);
        RedlockRs {
            manager,
            ttl_ms: usize::try_from(ttl.as_millis()).expect("a TTL in range"),
            held: None,
        }
    }
}

impl Locker for RedlockRs {
    fn acquire(&mut self, resource: &[u8]) -> Result<(), String> {
        match self.manager.lock(resource, self.ttl_ms) {
            Ok(Some(lock)) => {
                self.held = Some((lock.resource, lock.val));
                Ok(())
            }
            Ok(None) => Err("redlock: no majority".into()),
            Err(e) => Err(format!("redlock: {e}")),
        }
    }

    fn release(&mut self) -> Result<(), String> {
        let (resource, val) = self.held.take().ok_or("redlock: nothing held")?;
        let lock = redlock::Lock {
            resource,
            val,
            validity_time: 0,
            lock_manager: &self.manager,
        };
        self.manager.unlock(&lock);
        Ok(())
    }
}
