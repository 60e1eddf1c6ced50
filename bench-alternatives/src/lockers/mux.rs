//! muxlock on N local Redis nodes.
//!
//! `Config::default().with_restart_guard(false)`: these nodes have just been started, and the restart guard
//! (on by default) would not count them for a whole TTL; in the fault scenarios a killed node comes back empty,
//! which the guard exists to catch, so the figures here are muxlock *without* its restart guard (one node of three
//! restarting cannot break a majority's lock; see RELIABILITY.md for the guard's own scenarios). A request that
//! `retry`s does so every 5 ± 5 ms (`with_retry_delay`, `with_retry_jitter`) for up to about [`BOUND`]; `once`
//! makes one attempt. The round timeout is the default 50 ms.

use std::sync::Arc;
use std::time::{Duration, Instant};

use muxlock::{Config, Error, Lock, LockManager};

use super::{BOUND, Call, Factory, Locker, Pids};

pub fn config() -> Config {
    Config::default()
        .with_restart_guard(false)
        .with_retry_delay(Duration::from_millis(5))
        .with_retry_jitter(Duration::from_millis(5))
        // About BOUND of polling at 5 ms on average, plus the rounds themselves.
        .with_retry_count(300)
}

/// How a muxlock client waits for a held lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// A request that `wait`s: no polling.
    LockWait,
    /// A request that `retry`s: the retry loop.
    Retry,
}

pub struct MuxFactory {
    pub urls: Vec<String>,
    pub pids: Vec<u32>,
    pub wait: Wait,
    /// Every client uses the one manager, even where a scenario gives each client its own (as separate processes
    /// would have): the in-process case, where waiting requests queue first come, first served.
    pub one_manager: bool,
    shared: Arc<LockManager>,
}

impl MuxFactory {
    pub fn new(urls: Vec<String>, pids: Vec<u32>, wait: Wait, one_manager: bool) -> MuxFactory {
        let shared = Arc::new(manager(&urls));
        MuxFactory {
            urls,
            pids,
            wait,
            one_manager,
            shared,
        }
    }
}

fn manager(urls: &[String]) -> LockManager {
    LockManager::builder()
        .nodes(urls.iter().cloned())
        .config(config())
        .build()
        .expect("a valid muxlock configuration")
}

impl Factory for MuxFactory {
    fn name(&self) -> String {
        let n = self.urls.len();
        match (self.wait, self.one_manager) {
            (Wait::LockWait, false) => format!("muxlock ({n} nodes)"),
            (Wait::LockWait, true) => format!("muxlock ({n} nodes, one manager)"),
            (Wait::Retry, _) => format!("muxlock ({n} nodes, retry loop)"),
        }
    }

    fn locker(&self, shared: bool, ttl: Duration) -> Box<dyn Locker> {
        let manager = if shared || self.one_manager {
            Arc::clone(&self.shared)
        } else {
            Arc::new(manager(&self.urls))
        };
        Box::new(MuxLocker {
            manager,
            ttl,
            wait: self.wait,
            held: None,
        })
    }

    fn servers(&self) -> Pids {
        Pids {
            pids: self.pids.clone(),
            trees: Vec::new(),
        }
    }
}

pub struct MuxLocker {
    manager: Arc<LockManager>,
    ttl: Duration,
    wait: Wait,
    held: Option<Lock>,
}

impl MuxLocker {
    /// muxlock's calls end by themselves (round timeout, retry count): one that ended later than the bound is
    /// counted as hung, and a lock it brought back is released.
    fn judge(&mut self, t0: Instant, result: Result<Lock, Error>) -> Call<bool> {
        let late = t0.elapsed() > BOUND;
        match result {
            Ok(lock) if late => {
                let _ = self.manager.unlock(lock);
                Call::Hung
            }
            _ if late => Call::Hung,
            Ok(lock) => {
                self.held = Some(lock);
                Call::Ok(true)
            }
            Err(Error::Held(_)) => Call::Ok(false),
            Err(e) => Call::Failed(e.to_string()),
        }
    }
}

impl Locker for MuxLocker {
    fn try_acquire(&mut self, name: &str) -> Call<bool> {
        let t0 = Instant::now();
        let result = self.manager.request(name).ttl(self.ttl).once().acquire();
        self.judge(t0, result)
    }

    fn acquire(&mut self, name: &str) -> Call<bool> {
        let t0 = Instant::now();
        let result = match self.wait {
            // Ends by BOUND: max_wait, plus at most one round timeout (50 ms) if an attempt is under way.
            Wait::LockWait => self
                .manager
                .request(name)
                .ttl(self.ttl)
                .wait(BOUND - Duration::from_millis(100))
                .acquire(),
            Wait::Retry => self.manager.request(name).ttl(self.ttl).acquire(),
        };
        self.judge(t0, result)
    }

    fn release(&mut self) -> Call<()> {
        let Some(lock) = self.held.take() else {
            return Call::Failed("nothing held".into());
        };
        let t0 = Instant::now();
        let result = self.manager.unlock(lock);
        match result {
            _ if t0.elapsed() > BOUND => Call::Hung,
            Ok(n) if n >= self.manager.quorum() => Call::Ok(()),
            // Our value was gone from a majority: the lease had ended (or the nodes forgot it).
            Ok(n) => Call::Failed(format!("released on {n} nodes only")),
            Err(e) => Call::Failed(e.to_string()),
        }
    }

    fn lease_end(&self) -> Option<Instant> {
        self.held.as_ref().map(Lock::valid_until)
    }
}
