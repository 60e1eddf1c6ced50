//! The clients the lock benches measure, behind one small trait: [`Locker`] (acquire a resource, then release it;
//! or wait for it). `benches/lock.rs`, `benches/throughput.rs` and `benches/report.rs` share them:
//!
//! - [`Muxlock`]: muxlock's [`LockManager`] (`request(..).acquire()`/`unlock`, and `.wait(..)` to wait).
//! - [`Rslock`]: the `rslock` crate (async, one redis-rs multiplexed connection per node, `join_all` over the
//!   nodes), run on a current-thread tokio runtime with `block_on` per call, so that a call costs what it costs a
//!   caller that waits for it, as muxlock's callers do.
//! - [`RedlockRs`]: the `redlock` crate 2.x (sync): it opens a new TCP connection per node for every command and
//!   asks the nodes one after another.
//! - [`RedisSingle`]: no Redlock at all: a plain redis-rs sync connection to one node, `SET k v NX PX ttl` and the
//!   compare-and-delete script (`redis::Script`, by `EVALSHA`). What a lock costs when one node is trusted.
//! - [`QuorumSync`]: [`quorum::RedisQuorum`] (Redlock by hand on redis-rs multiplexed connections, an answer at
//!   the majority) on a current-thread runtime, `block_on` per call, as [`Rslock`].
//!
//! All are configured for a single attempt per [`Locker::acquire`] (no retry), so that a failed call is counted
//! rather than hidden behind a retry's sleep. [`Locker::acquire_wait`] is each client's own way of waiting for a
//! held resource: muxlock's `.wait(..)`, rslock's `acquire_no_guard` with its default retry (3 tries, a random
//! pause up to 200 ms), the `redlock` crate's retry pause (random, up to 200 ms), and for the hand-written redis-rs
//! clients a loop with a random pause up to [`HAND_RETRY`].
//!
//! For `benches/throughput.rs`, whose async callers share one client between tasks (so not behind [`Locker`]):
//! [`quorum::RedisQuorum`] itself, and `rslock` on a multi-thread runtime.

// Each bench uses only some of the peers.
#![allow(dead_code)]

pub mod quorum;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, Lock, LockManager};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// The longest random pause between two tries of the hand-written redis-rs clients' wait loops (a user's choice:
/// short enough for a quick hand-off, long enough not to hammer the nodes; rslock and the `redlock` crate pause
/// up to 200 ms by default).
pub const HAND_RETRY: Duration = Duration::from_millis(20);

/// A random pause in `0..max`, from a generator seeded by the OS.
fn pause(rng: &mut ChaCha8Rng, max: Duration) -> Duration {
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX).max(1);
    Duration::from_nanos(rng.next_u64() % nanos)
}

fn seeded() -> ChaCha8Rng {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("a seed from the OS");
    ChaCha8Rng::from_seed(seed)
}

/// Tries `acquire` until it succeeds or `max_wait` has passed, pausing `pause_for()` between tries: the retry
/// loop a user writes around a client that does not wait by itself.
fn retry_loop(
    max_wait: Duration,
    mut acquire: impl FnMut() -> Result<(), String>,
    mut pause_for: impl FnMut() -> Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + max_wait;
    loop {
        match acquire() {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => {
                thread::sleep(pause_for().min(deadline.saturating_duration_since(Instant::now())))
            }
        }
    }
}

/// One client of N Redlock nodes that holds at most one lock at a time.
pub trait Locker: Send {
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

    /// Acquires `resource`, waiting up to about `max_wait` while another client holds it, the client's own way
    /// (see the module's documentation).
    ///
    /// # Errors
    ///
    /// The last attempt's error once `max_wait` has passed.
    fn acquire_wait(&mut self, resource: &[u8], max_wait: Duration) -> Result<(), String>;
}

/// muxlock's lock manager.
pub struct Muxlock {
    manager: LockManager,
    ttl: Duration,
    held: Option<Lock>,
}

impl Muxlock {
    /// A manager of `urls`, locking for `ttl`, with one attempt per call and rounds of `round_timeout`. The
    /// restart guard is off: these servers have just started, and it would not count them for a whole TTL.
    pub fn new(urls: &[String], ttl: Duration, round_timeout: Duration) -> Muxlock {
        let config = Config::default()
            .with_restart_guard(false)
            .with_retry_count(0)
            .with_round_timeout(round_timeout);
        let manager = LockManager::builder()
            .nodes(urls.iter().cloned())
            .config(config)
            .build()
            .expect("a valid configuration");
        Muxlock::on(manager, ttl)
    }

    /// As [`Muxlock::new`], with the clock check off: what the check costs a call, beside a client with it on.
    pub fn unclocked(urls: &[String], ttl: Duration, round_timeout: Duration) -> Muxlock {
        let config = Config::default()
            .with_restart_guard(false)
            .with_clock_check(false)
            .with_retry_count(0)
            .with_round_timeout(round_timeout);
        let manager = LockManager::builder()
            .nodes(urls.iter().cloned())
            .config(config)
            .build()
            .expect("a valid configuration");
        Muxlock::on(manager, ttl)
    }

    /// A client on `manager` (a clone shares its connections and its waiters' lines).
    pub fn on(manager: LockManager, ttl: Duration) -> Muxlock {
        Muxlock {
            manager,
            ttl,
            held: None,
        }
    }

    /// The manager.
    pub fn manager(&self) -> &LockManager {
        &self.manager
    }
}

impl Locker for Muxlock {
    fn acquire(&mut self, resource: &[u8]) -> Result<(), String> {
        let lock = self
            .manager
            .request(resource)
            .ttl(self.ttl)
            .acquire()
            .map_err(|e| e.to_string())?;
        self.held = Some(lock);
        Ok(())
    }

    fn release(&mut self) -> Result<(), String> {
        let lock = self.held.take().ok_or("nothing held")?;
        let released = self.manager.unlock(lock).map_err(|e| e.to_string())?;
        if released < self.manager.quorum() {
            return Err(format!("released on {released} nodes only"));
        }
        Ok(())
    }

    fn acquire_wait(&mut self, resource: &[u8], max_wait: Duration) -> Result<(), String> {
        let lock = self
            .manager
            .request(resource)
            .ttl(self.ttl)
            .wait(max_wait)
            .acquire()
            .map_err(|e| e.to_string())?;
        self.held = Some(lock);
        Ok(())
    }
}

/// The `rslock` crate on a current-thread tokio runtime.
pub struct Rslock {
    runtime: tokio::runtime::Runtime,
    manager: rslock::LockManager,
    /// The same nodes with rslock's default retry (3 tries, a random pause up to 200 ms), for waiting.
    waiting: rslock::LockManager,
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
            waiting: rslock::LockManager::new(urls.to_vec()),
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

    fn acquire_wait(&mut self, resource: &[u8], max_wait: Duration) -> Result<(), String> {
        // `acquire_no_guard` loops until it gets the lock: bounded here by `max_wait`.
        let lock = self
            .runtime
            .block_on(async {
                tokio::time::timeout(max_wait, self.waiting.acquire_no_guard(resource, self.ttl))
                    .await
            })
            .map_err(|_| format!("rslock: not acquired in {max_wait:?}"))?
            .map_err(|e| format!("rslock: {e}"))?;
        self.held = Some(lock);
        Ok(())
    }
}

/// The `redlock` crate 2.x.
pub struct RedlockRs {
    manager: redlock::RedLock,
    ttl_ms: usize,
    rng: ChaCha8Rng,
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
            rng: seeded(),
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

    fn acquire_wait(&mut self, resource: &[u8], max_wait: Duration) -> Result<(), String> {
        // What the crate's own retry does between tries (its default: a random pause below 200 ms).
        let mut rng = self.rng.clone();
        let result = retry_loop(
            max_wait,
            || self.acquire(resource),
            || pause(&mut rng, Duration::from_millis(200)),
        );
        self.rng = rng;
        result
    }
}

/// Delete the key only if it still holds our value (the release script of the Redlock page).
const RELEASE: &str = r#"if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end"#;

/// No Redlock: `SET NX PX` and the release script on one node, over a plain redis-rs sync connection (no read
/// timeout: redis-rs' default, so a hung node blocks its caller).
pub struct RedisSingle {
    conn: redis::Connection,
    release: redis::Script,
    ttl_ms: u64,
    rng: ChaCha8Rng,
    held: Option<(Vec<u8>, [u8; 20])>,
}

impl RedisSingle {
    /// A connection to `url`, locking for `ttl`.
    ///
    /// # Panics
    ///
    /// If the node cannot be reached.
    pub fn new(url: &str, ttl: Duration) -> RedisSingle {
        let conn = redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .expect("a redis-rs connection");
        RedisSingle {
            conn,
            release: redis::Script::new(RELEASE),
            ttl_ms: u64::try_from(ttl.as_millis()).expect("a TTL in range"),
            rng: seeded(),
            held: None,
        }
    }
}

impl Locker for RedisSingle {
    fn acquire(&mut self, resource: &[u8]) -> Result<(), String> {
        let mut value = [0u8; 20];
        self.rng.fill_bytes(&mut value);
        let reply: redis::Value = redis::cmd("SET")
            .arg(resource)
            .arg(&value[..])
            .arg("NX")
            .arg("PX")
            .arg(self.ttl_ms)
            .query(&mut self.conn)
            .map_err(|e| format!("redis-rs/single: {e}"))?;
        if reply != redis::Value::Okay {
            return Err("redis-rs/single: held".into());
        }
        self.held = Some((resource.to_vec(), value));
        Ok(())
    }

    fn release(&mut self) -> Result<(), String> {
        let (resource, value) = self.held.take().ok_or("redis-rs/single: nothing held")?;
        let deleted: i64 = self
            .release
            .key(resource)
            .arg(&value[..])
            .invoke(&mut self.conn)
            .map_err(|e| format!("redis-rs/single: {e}"))?;
        if deleted != 1 {
            return Err("redis-rs/single: the lock was gone".into());
        }
        Ok(())
    }

    fn acquire_wait(&mut self, resource: &[u8], max_wait: Duration) -> Result<(), String> {
        let mut rng = self.rng.clone();
        let result = retry_loop(
            max_wait,
            || self.acquire(resource),
            || pause(&mut rng, HAND_RETRY),
        );
        self.rng = rng;
        result
    }
}

/// [`quorum::RedisQuorum`] on a current-thread tokio runtime, `block_on` per call.
pub struct QuorumSync {
    runtime: tokio::runtime::Runtime,
    client: quorum::RedisQuorum,
    rng: ChaCha8Rng,
    held: Option<(Vec<u8>, quorum::LockValue)>,
}

impl QuorumSync {
    /// Connects to every node of `urls`, locking for `ttl`.
    ///
    /// # Panics
    ///
    /// If a node cannot be reached.
    pub fn new(urls: &[String], ttl: Duration) -> QuorumSync {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread tokio runtime");
        let client = runtime
            .block_on(quorum::RedisQuorum::connect(urls, ttl))
            .expect("redis-rs connections");
        QuorumSync {
            runtime,
            client,
            rng: seeded(),
            held: None,
        }
    }
}

impl Locker for QuorumSync {
    fn acquire(&mut self, resource: &[u8]) -> Result<(), String> {
        let value = self.runtime.block_on(self.client.acquire(resource))?;
        self.held = Some((resource.to_vec(), value));
        Ok(())
    }

    fn release(&mut self) -> Result<(), String> {
        let (resource, value) = self.held.take().ok_or("redis-rs/quorum: nothing held")?;
        self.runtime
            .block_on(self.client.release(&resource, &value))
    }

    fn acquire_wait(&mut self, resource: &[u8], max_wait: Duration) -> Result<(), String> {
        let mut rng = self.rng.clone();
        let result = retry_loop(
            max_wait,
            || self.acquire(resource),
            || pause(&mut rng, HAND_RETRY),
        );
        self.rng = rng;
        result
    }
}
