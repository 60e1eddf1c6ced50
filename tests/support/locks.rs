//! Lock managers for tests, and bounded waits: the set-up tests share.

use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, LockManager};

/// A manager of `urls` with `config`.
///
/// # Panics
/// If the configuration or an address is refused.
#[track_caller]
pub fn manager<S: Into<String>>(urls: impl IntoIterator<Item = S>, config: Config) -> LockManager {
    LockManager::builder()
        .nodes(urls)
        .config(config)
        .build()
        .expect("a valid configuration")
}

/// A manager of every node of `cluster` with `config`.
///
/// # Panics
/// If the configuration is refused.
#[track_caller]
pub fn manager_of(cluster: &super::Cluster, config: Config) -> LockManager {
    manager(cluster.urls(), config)
}

/// A manager of every node of `cluster` with [`one_attempt`] rounds of 500 ms: what a test of one behaviour on
/// healthy local nodes needs.
#[track_caller]
pub fn quick_manager_of(cluster: &super::Cluster) -> LockManager {
    manager_of(cluster, one_attempt(Duration::from_millis(500)))
}

/// What most tests want on freshly started servers: one attempt per call (a failure shows instead of hiding
/// behind a retry's sleep), no restart guard (it does not trust servers for their first window; it has tests of
/// its own), and a round timeout of `round`.
pub fn one_attempt(round: Duration) -> Config {
    Config::default()
        .with_retry_count(0)
        .with_restart_guard(false)
        .with_round_timeout(round)
}

/// Polls `cond` every 2 ms until it holds, for at most `limit`.
///
/// # Panics
/// Naming `what`, if `cond` does not hold within `limit`.
#[track_caller]
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// Writes the restart guard's persistence marker on every node of `cluster` with an old time, as an operator
/// provisioning brand-new nodes would (`SET muxlock:persist-marker "0 provisioned" NX`): the nodes say they have
/// lost no data since long before any lease, so nodes that persist every write are trusted at once.
///
/// # Panics
/// If a node does not answer `+OK` (the marker was already there).
#[track_caller]
pub fn provision_marker(cluster: &super::Cluster) {
    for node in cluster.nodes() {
        let reply = node.raw(&super::cmd(&[
            "SET",
            muxlock::redlock::PERSIST_MARKER_KEY,
            "0 provisioned-by-test",
            "NX",
        ]));
        assert_eq!(reply, b"+OK\r\n", "{}", super::wire::show(&reply));
    }
}
