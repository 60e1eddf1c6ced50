//! Clock faults on cluster members: members that are Redis Clusters whose masters' wall clocks jump (each on a
//! clock of its own, `support::clock`). The routing layer brackets every write to a cluster node with `TIME`
//! (`src/net/cluster/route/clock.rs`) and the engine's clock check judges each member's vote by the clock of the
//! node its command ran on (`src/redlock/engine/clock.rs`, "Cluster members"), a node a redirection led to
//! included. Each hazard has its control: the same fault with the check off counts the votes.
//!
//! The restart guard is off here (and with it the replication check): beside the point, as in `mutex/clocks.rs`.

use std::thread;
use std::time::Duration;

use muxlock::net::cluster::key_slot;
use muxlock::{Error, LockManager, NodeError, Outcome};

use crate::support::clock::FakeClock;
use crate::support::redis_cluster::SLOTS;
use crate::support::{RedisCluster, RedisServer, cmd, locks};

/// The holder's lease: long beside every step of a scenario.
const TTL: Duration = Duration::from_secs(20);
/// How far a jumped clock runs ahead: past the whole lease.
const JUMP: Duration = Duration::from_secs(60);

/// Three members, each a Redis Cluster of one master (the cheapest member the support builds), each master on
/// a clock of its own (`None`: no C compiler for the clock shim, a counted skip).
fn members() -> Option<(Vec<FakeClock>, Vec<RedisCluster>)> {
    let clocks: Vec<FakeClock> = (0..3)
        .map(|_| FakeClock::new_or_skip())
        .collect::<Option<_>>()?;
    let members = thread::scope(|s| {
        let handles: Vec<_> = clocks
            .iter()
            .map(|c| {
                s.spawn(move || {
                    RedisCluster::builder(1)
                        .server(RedisServer::builder().fake_clock(c))
                        .start()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a member"))
            .collect()
    });
    Some((clocks, members))
}

fn manager(members: &[RedisCluster], check: bool) -> LockManager {
    let urls: Vec<String> = members.iter().map(RedisCluster::seed_url).collect();
    locks::manager(
        urls,
        locks::one_attempt(Duration::from_millis(500)).with_clock_check(check),
    )
}

/// Whether `key` exists on `c`'s master of shard 0.
fn exists(c: &RedisCluster, key: &str) -> bool {
    c.master(0).raw(&cmd(&["EXISTS", key])) == b":1\r\n"
}

/// The members whose outcome in `e`'s report is a clock check failure.
fn clock_refused(e: &Error) -> Vec<usize> {
    e.report()
        .map(|r| {
            r.nodes()
                .iter()
                .enumerate()
                .filter(|(_, (_, o))| matches!(o, Outcome::Failed(NodeError::Clock(_))))
                .map(|(i, _)| i)
                .collect()
        })
        .unwrap_or_default()
}

/// A holds a lock set on every member's master; then the masters of members 0 and 1 jump past the lease (their
/// copies of A's key expire). Returns A's lock and B's try.
fn jump_under_a_holder(check: bool) -> Option<(muxlock::Lock, Result<muxlock::Lock, Error>)> {
    let (clocks, members) = members()?;
    let (a, b) = (manager(&members, check), manager(&members, check));
    let held = a
        .request("cclock:r")
        .ttl(TTL)
        .once()
        .acquire()
        .expect("A's lock");
    for c in &members {
        locks::wait_until(Duration::from_secs(2), "A's key on every member", || {
            exists(c, "cclock:r")
        });
    }
    for clock in &clocks[..2] {
        clock.jump(JUMP);
    }
    for c in &members[..2] {
        locks::wait_until(Duration::from_secs(2), "the jump expired A's key", || {
            !exists(c, "cclock:r")
        });
    }
    let second = b.request("cclock:r").ttl(TTL).once().acquire();
    assert!(held.is_valid(), "A's lease is live as A counts it");
    Some((held, second))
}

/// Two of three cluster members whose masters' clocks jump past the lease while A holds: with the check, B gets
/// nothing, and its error names members whose clocks are off.
#[test]
fn cluster_members_whose_masters_clocks_jump_forward_hand_no_lock_out_twice() {
    let Some((_held, second)) = jump_under_a_holder(true) else {
        return;
    };
    let e = second.expect_err("B must not get the lock while A holds it");
    let refused = clock_refused(&e);
    assert!(
        !refused.is_empty() && refused.iter().all(|i| [0, 1].contains(i)),
        "the clock check refused {refused:?}, not among [0, 1]: {e}"
    );
}

/// The control: the same jump with the check off gives B the lock while A's lease is live.
#[test]
fn control_cluster_members_whose_masters_clocks_jump_hand_a_lock_out_twice_without_the_check() {
    let Some((held, second)) = jump_under_a_holder(false) else {
        return;
    };
    let second = second.expect("without the check, B gets the lock");
    assert!(
        held.is_valid() && second.is_valid(),
        "two holders at once: A for {:?} more, B for {:?}",
        held.validity(),
        second.validity()
    );
}

/// A command redirected by `MOVED` is judged by the clock of the master it ran on, read around it there: one
/// member of two masters, the second's clock on a clock of its own, the key's slot moved to it after the
/// managers read the map (their first write goes to the first master, whose clock is right). While the second
/// master's clock is right the vote counts; once it is ahead, the vote is refused; with the check off, it
/// counts.
#[test]
fn a_redirected_command_is_judged_by_the_clock_of_the_master_it_ran_on() {
    let Some(clock) = FakeClock::new_or_skip() else {
        return;
    };
    let key = "cclock:moved";
    let slot = key_slot(key.as_bytes());
    // The support splits the slots evenly: shard 0's master (node 0) serves the lower half.
    let from = usize::from(slot >= SLOTS / 2);
    let to = 1 - from;
    let mut c = RedisCluster::builder(2)
        .node_server(to, RedisServer::builder().fake_clock(&clock))
        .start();
    assert_eq!(c.shard_of(slot), from, "slot {slot}'s first master");
    let urls = vec![c.seed_url()];
    let config = || locks::one_attempt(Duration::from_millis(500));
    let (right, checked) = (
        locks::manager(urls.clone(), config()),
        locks::manager(urls.clone(), config()),
    );
    let unchecked = locks::manager(urls, config().with_clock_check(false));
    // After the managers read the map: each one's first write for the key goes to `from`, and meets `MOVED`.
    c.migrate_slot(slot, to);
    let got = right
        .request(key)
        .ttl(TTL)
        .once()
        .acquire()
        .expect("after MOVED, on a master whose clock is right");
    right.unlock(got).expect("released");
    clock.jump(Duration::from_secs(1));
    thread::sleep(Duration::from_millis(5));
    let e = checked
        .request(key)
        .ttl(TTL)
        .once()
        .acquire()
        .expect_err("the master the command ran on is a second ahead");
    assert_eq!(clock_refused(&e), vec![0], "{e}");
    let got = unchecked
        .request(key)
        .ttl(TTL)
        .once()
        .acquire()
        .expect("without the check the vote counts");
    unchecked.unlock(got).expect("released");
}
