//! For the async tests (`tests/api/async_*.rs`, `tests/threads/dropped_managers.rs`): runtimes to poll the futures on,
//! and the configuration they share.

use std::time::Duration;

use muxlock::Config;

/// Fresh servers (no restart guard), 200 ms rounds, 3 quick retries.
pub fn config() -> Config {
    Config::default()
        .with_restart_guard(false)
        .with_round_timeout(Duration::from_millis(200))
        .with_retry_count(3)
        .with_retry_delay(Duration::from_millis(20))
        .with_retry_jitter(Duration::from_millis(10))
}

/// A tokio runtime on the calling thread, with its timer.
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// A tokio runtime with 2 worker threads (this machine's vCPUs), with its timer.
pub fn two_workers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime")
}
