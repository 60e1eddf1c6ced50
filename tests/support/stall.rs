//! A failed attempt's clean-up, detached for room on a stalled node, and the same call's next attempt offered to
//! that node while it reconnects: the directed sequence of `tests/api/all_or_nothing.rs` (sets) and
//! `tests/api/reentrant.rs` (owned holds), with real servers.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use super::locks;
use super::{RedisServer, cmd};

const TTL: Duration = Duration::from_secs(10);

fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

/// The requests a stalled node's queue takes for ordinary rounds (releases may use as many again).
pub const STALL_MAX: usize = 64;
/// One round's length: long enough for the next attempt to outlast node 0's slow reconnect (a SYN dropped by a
/// full accept queue is sent again after 1 s).
pub const STALL_ROUND: Duration = Duration::from_millis(1300);
/// The pause between attempts of a set: its failed attempt's clean-up is awaited for a round, so the next
/// attempt comes two rounds and this pause after the first, past `STALL_HUNG`.
pub const STALL_RETRY: Duration = Duration::from_millis(400);
/// The pause between attempts of an owned hold: its failed attempt's clean-up is not awaited, so the pause
/// alone must bring the next attempt past `STALL_HUNG` (and well within the redial's connect timeout).
pub const STALL_RETRY_OWNED: Duration = Duration::from_millis(2000);
/// Node 0's connection is dropped as hung this long after its first unanswered request: after the first
/// attempt's clean-up was detached (2 rounds), before the second attempt (2 rounds and the retry pause).
pub const STALL_HUNG: Duration = Duration::from_millis(2800);

/// How the lock is asked for.
#[derive(Clone, Copy, Debug)]
pub enum Asked {
    /// `retry().acquire()`.
    Acquire,
    /// `wait(..).acquire()`: the waiting loop's attempts.
    Wait,
}

/// Which kind of lock is asked for: a value drawn per attempt (a set), or a value shared by every attempt of
/// every call of its owner, each attempt a hold of its own (an owned, reentrant lock).
#[derive(Clone, Copy, Debug)]
pub enum Held {
    /// `request_all(["stall:a", "stall:b"])`.
    Set,
    /// `request("stall:a").owned(&owner)`.
    Owned,
}

/// Runs of the sequence at most: a run whose steps did not fall in the order the sequence needs (a machine too
/// busy to queue the fillers within the first attempt's round) proves nothing either way and is run again; at
/// least one run must get through.
pub const STALL_RUNS: usize = 3;

/// The sequence: node 0 stalls (`SIGSTOP`, its accept queue full so that a new connection to it waits for a SYN
/// retransmission, about a second, or until it is resumed); node 1 fails every attempt at the lock (a key of
/// another type); node 2 grants. A call asks for the lock ([`Held`]) with retries or waiting ([`Asked`]):
///
/// 1. The first attempt is queued on node 0 (its first request: the node's hung clock starts there) and fails
///    (node 0 silent, node 1 an error) when its round ends. Meanwhile releases fill node 0's queue to twice
///    `STALL_MAX`, so its clean-up is held for room there, then detached when the clean-up's round ends.
/// 2. Node 0's connection is dropped as hung; the redial waits in the full accept queue.
/// 3. The next attempt is offered to node 0 while it connects; only then is node 0 resumed: the connection
///    completes, the attempt is granted by nodes 0 and 2 (a majority), and the detached clean-up goes too.
///
/// Each step waits for the event it needs, seen in node 0's and node 2's counters (`stats().nodes[i].net`):
/// nothing is timed by the test. The library's own schedule (`STALL_ROUND`, `STALL_RETRY` or `STALL_RETRY_OWNED`, `STALL_HUNG`) puts
/// the events in order; a run that finds them in another order starts again (`STALL_RUNS`).
///
/// Whatever the order on node 0's new connection, the lock the call returns must stand on a majority once the
/// clean-up ran: a clean-up deletes only what its own attempt set. Then another client must not get the lock
/// while it is held. Node 0's statistics show the sequence happened (a clean-up detached, a reconnect).
///
/// Two protections keep the clean-up from deleting the retry's grant: each attempt draws a value of its own
/// (`kind/set.rs`, "A value per attempt"; an owned lock's value is its owner's, shared by every attempt, and
/// each attempt draws a hold id of its own, which alone its clean-up removes: `kind/owned.rs`, "Holds are
/// attributable"), and a node's detached releases go on its wire ahead of any request offered after them
/// (`net/detached.rs`, "In order per node"). Either alone suffices; with both removed, the clean-up runs after
/// the retry on node 0, and the lock stands on node 2 alone: this test fails.
pub fn late_clean_up_then_retry(held: Held, asked: Asked) {
    let mut missed = Vec::new();
    for _ in 0..STALL_RUNS {
        match stalled_run(held, asked) {
            Ok(()) => return,
            Err(why) => {
                println!("{held:?}, {asked:?}: the sequence did not happen, run again: {why}");
                missed.push(why);
            }
        }
    }
    panic!("{held:?}, {asked:?}: the sequence never happened in {STALL_RUNS} runs: {missed:?}");
}

/// One run of [`late_clean_up_then_retry`]'s sequence: `Err` (why) if its steps came in another order.
fn stalled_run(held: Held, asked: Asked) -> Result<(), String> {
    /// The releases that fill node 0's queue behind the first attempt: to twice `STALL_MAX`, its room for
    /// releases.
    const FILL: usize = 2 * STALL_MAX - 1;
    let mut x = RedisServer::builder().arg("--tcp-backlog").arg("0").start();
    let y = RedisServer::start();
    let z = RedisServer::start();
    let urls = [x.url(), y.url(), z.url()];
    let config = locks::one_attempt(STALL_ROUND)
        .with_retry_count(3)
        .with_retry_delay(match held {
            Held::Set => STALL_RETRY,
            Held::Owned => STALL_RETRY_OWNED,
        })
        .with_retry_jitter(Duration::ZERO)
        .with_max_in_flight(STALL_MAX)
        .with_hung_timeout(STALL_HUNG)
        .with_connect_timeout(Duration::from_secs(4))
        // The sequence is counted in requests on node 0's queue: one reply per attempt, without the clock
        // check's `TIME` (which is beside the point here).
        .with_clock_check(false);
    let ours = Arc::new(locks::manager(urls.clone(), config.clone()));
    let theirs = locks::manager(urls, locks::one_attempt(Duration::from_millis(300)));
    let keys: &'static [&'static str] = match held {
        Held::Set => &["stall:a", "stall:b"],
        Held::Owned => &["stall:a"],
    };
    let owner = ours.owner().expect("an owner");
    for m in [&*ours, &theirs] {
        locks::wait_until(Duration::from_secs(5), "connections set up", || {
            m.request("stall:warm")
                .ttl(TTL)
                .once()
                .acquire()
                .is_ok_and(|l| m.unlock(l).is_ok())
        });
    }
    // Node 1: a key of another type fails every attempt at the set there (an error, not another holder).
    assert_eq!(y.raw(&cmd(&["HSET", "stall:a", "f", "v"])), b":1\r\n");
    let node = |i: usize| ours.stats().nodes[i].net.clone();
    // Releases of values nobody holds, started together once the first attempt is queued on node 0.
    let go = Arc::new(Barrier::new(FILL + 1));
    let fillers: Vec<_> = (0..FILL)
        .map(|i| {
            let (ours, go) = (Arc::clone(&ours), Arc::clone(&go));
            thread::spawn(move || {
                go.wait();
                let _ = ours.unlock_value(format!("stall:fill:{i}"), "f".repeat(40));
            })
        })
        .collect();

    x.pause();
    // Node 0's accept queue is filled, so a redial hangs until it is resumed.
    let filler = x.fill_accept_queue();
    let before = node(0);
    let caller = {
        let (ours, owner) = (Arc::clone(&ours), owner.clone());
        thread::spawn(move || {
            let request = match held {
                Held::Set => ours.request_all(keys),
                Held::Owned => ours.request(keys[0]).owned(&owner),
            }
            .ttl(TTL);
            match asked {
                Asked::Acquire => request.retry().acquire(),
                Asked::Wait => request.wait(Duration::from_secs(8)).acquire(),
            }
        })
    };
    // A run that cannot go on resumes node 0 and lets the call end before it is tried again.
    let give_up = |mut x: RedisServer, caller: thread::JoinHandle<_>, why: String| {
        x.resume();
        if let Ok(set) = caller.join().expect("the caller") {
            let _ = ours.unlock(set);
        }
        Err(why)
    };

    // 1. The first attempt is on node 0's queue; the releases fill it behind the attempt.
    locks::wait_until(
        Duration::from_secs(5),
        "the first attempt queued on node 0",
        || node(0).requests > before.requests,
    );
    go.wait();
    // Every release queued and none held, on the connection the attempt went on, seen while the attempt's round
    // is still open (nothing detached yet): the queue was full before that round ended, so its clean-up (offered
    // when the round ends) is held. Had the clean-up come first, it would have been queued and a release held.
    let target = before.requests + 1 + FILL as u64;
    let mut full = node(0);
    for _ in 0..2_500 {
        if full.requests >= target || full.detached != before.detached {
            break;
        }
        thread::sleep(Duration::from_millis(2));
        full = node(0);
    }
    fillers
        .into_iter()
        .for_each(|f| f.join().expect("a release"));
    let queued = full.requests == target;
    let same = full.connects == before.connects && full.drops == before.drops;
    if !queued || !same || full.detached != before.detached {
        drop(filler);
        return give_up(
            x,
            caller,
            format!(
                "node 0's queue was not full behind the first attempt alone: {before:?} -> {full:?}"
            ),
        );
    }
    // The clean-up detached when its round ended, before node 0 was dropped as hung (had it been dropped first,
    // the clean-up would have been queued on the new connection, not detached).
    let mut seen = full.clone();
    locks::wait_until(
        Duration::from_secs(10),
        "the first attempt's clean-up detached on node 0",
        || {
            seen = node(0);
            seen.detached > before.detached || seen.connects > before.connects
        },
    );
    if seen.detached == before.detached {
        drop(filler);
        return give_up(
            x,
            caller,
            "node 0 was dialled again before the clean-up was detached".to_owned(),
        );
    }
    let sent = node(2).requests;
    // 2. Node 0 dropped as hung, and dialled again: the dial waits in the full accept queue.
    locks::wait_until(Duration::from_secs(10), "node 0 dialled again", || {
        node(0).connects > before.connects
    });
    let dialled = node(0);
    if node(2).requests > sent {
        drop(filler);
        return give_up(
            x,
            caller,
            "the next attempt came before node 0 was dialled again".to_owned(),
        );
    }
    // 3. The next attempt is offered to node 0 while it connects (a round's offers to the nodes are queued
    //    together: node 2's count shows node 0's offer); then node 0 comes back.
    locks::wait_until(Duration::from_secs(10), "the next attempt offered", || {
        node(2).requests > sent
    });
    x.resume();
    let set = caller
        .join()
        .expect("the caller")
        .expect("the lock, on nodes 0 and 2");
    drop(filler);
    let after = node(0);
    assert!(
        after.detached > before.detached,
        "the first attempt's clean-up was detached on node 0: {before:?} -> {after:?}"
    );
    assert!(
        after.connects > before.connects,
        "node 0 was reconnected: {before:?} -> {after:?}"
    );
    // Node 0 answered every request of its new connection, the detached clean-up's included (the old
    // connection's requests, up to `full`, are never answered).
    locks::wait_until(
        Duration::from_secs(5),
        "node 0 answered its new connection's requests",
        || {
            let n = node(0);
            n.replies - dialled.replies >= n.requests - full.requests
        },
    );
    assert_eq!(
        node(0).given_up,
        before.given_up,
        "the clean-up was sent, not given up"
    );
    let holding: Vec<usize> = [&x, &y, &z]
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            keys.iter()
                .all(|k| s.raw(&cmd(&["GET", k])) == bulk(set.value()).as_slice())
        })
        .map(|(i, _)| i)
        .collect();
    assert!(
        holding.len() >= 2 && set.is_valid(),
        "{held:?}, {asked:?}: the lock is reported valid for {:?}, and held on nodes {holding:?} only",
        set.validity()
    );
    // Node 1's obstacle gone, another client must still find the set held.
    assert_eq!(y.raw(&cmd(&["DEL", "stall:a"])), b":1\r\n");
    let other = match held {
        Held::Set => theirs.request_all(keys),
        Held::Owned => theirs.request(keys[0]),
    }
    .ttl(TTL)
    .once()
    .acquire();
    assert!(
        other.is_err() || !set.is_valid(),
        "{held:?}, {asked:?}: two holders: ours on {holding:?}, another client's too"
    );
    let _ = ours.unlock(set);
    Ok(())
}
