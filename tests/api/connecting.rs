//! `LockManager::wait_connected`: a manager connects in the background once built, and a round's deadline counts
//! from the round's start whatever its connections are doing; a fresh process (a command-line tool) waits for its
//! connections first, so that its first round waits for the nodes' answers only.
//!
//! - A round made at once after building includes connecting: two nodes that answer nothing yet (stopped: the
//!   kernel still completes the TCP handshake) time out in it (the control, before anything is resumed).
//! - The same nodes resumed 300 ms after another manager is built: `wait_connected` returns once all three are
//!   set up (`true`), and the next round, shorter than the wait, hears all three.
//! - A node nobody listens on is not waited for: its dial is refused at once, and `wait_connected` says `false`
//!   well within the connect timeout.

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, KeyState};
use support::RedisServer;
use support::locks::manager;
use support::process::free_port;

const ROUND: Duration = Duration::from_millis(100);

fn config() -> Config {
    Config::default()
        .with_retry_count(0)
        .with_restart_guard(false)
        .with_round_timeout(ROUND)
}

#[test]
fn a_manager_waits_for_connections_still_being_set_up() {
    let mut servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    servers[1].pause();
    servers[2].pause();
    // The control: a round made at once counts the connecting, and the stopped nodes never answer it.
    let hasty = manager(urls.clone(), config());
    let seen = hasty.inspect("r").expect("an inspection");
    let answered = seen.nodes().iter().filter(|(_, s)| s.answered()).count();
    assert_eq!(answered, 1, "{seen:?}");
    drop(hasty);

    let patient = manager(urls, config());
    let rest = &mut servers[1..];
    thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(300));
            rest.iter_mut().for_each(RedisServer::resume);
        });
        assert!(patient.wait_connected(), "every node was set up");
    });
    let seen = patient.inspect("r").expect("an inspection");
    assert!(
        seen.nodes()
            .iter()
            .all(|(_, s)| matches!(s, KeyState::Absent)),
        "{seen:?}"
    );
}

#[test]
fn a_node_that_refuses_connections_is_not_waited_for() {
    let up = [RedisServer::start(), RedisServer::start()];
    let mut urls: Vec<String> = up.iter().map(RedisServer::url).collect();
    urls.push(format!("redis://127.0.0.1:{}", free_port()));
    let locks = manager(urls, config().with_connect_timeout(Duration::from_secs(10)));
    let start = Instant::now();
    assert!(!locks.wait_connected(), "the refused node was not set up");
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "a refused dial ends the wait for that node: {took:?}"
    );
}
