//! Clock faults on real servers: nodes whose wall clocks jump forward, step back or run fast while a lock is held
//! (each node on a clock of its own, `support::clock`). Redis and Valkey expire keys by the wall clock, so a node
//! whose clock runs ahead drops its leases early; with a majority of them a second client would get the lock while
//! the first still counts its lease live. The holder holds no guard (a script's lock): the protection must stand
//! on the side that acquires, the clock check (`src/redlock/engine/clock.rs`). Each hazard has its control: the
//! same fault with the check off hands the lock out twice.
//!
//! The restart guard is off in these managers: it is beside the point, and a clock that jumps forward makes a
//! node's uptime (wall clock) look longer, so it would not refuse the node anyway.

use std::thread;
use std::time::Duration;

use crate::support::clock::FakeClock;
use crate::support::{RedisServer, locks};
use muxlock::{Error, LockManager, NodeError, Outcome};

/// The holder's lease: long beside every step of a scenario.
const TTL: Duration = Duration::from_secs(20);
/// How far a jumped clock runs ahead: past the whole lease.
const JUMP: Duration = Duration::from_secs(60);

/// Three nodes, each on a clock of its own (`None`: no C compiler for the clock shim, a counted skip).
fn nodes() -> Option<(Vec<FakeClock>, Vec<RedisServer>)> {
    let clocks: Vec<FakeClock> = (0..3)
        .map(|_| FakeClock::new_or_skip())
        .collect::<Option<_>>()?;
    let servers = clocks
        .iter()
        .map(|c| RedisServer::builder().fake_clock(c).start())
        .collect();
    Some((clocks, servers))
}

fn manager(servers: &[RedisServer], check: bool) -> LockManager {
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    locks::manager(
        urls,
        locks::one_attempt(Duration::from_millis(500)).with_clock_check(check),
    )
}

/// Moves the clocks of `which` nodes, and lets a server that caches its wall clock (Valkey, for up to about a
/// millisecond) see it.
fn move_clocks(clocks: &[FakeClock], which: &[usize], how: impl Fn(&FakeClock)) {
    for &i in which {
        how(&clocks[i]);
    }
    thread::sleep(Duration::from_millis(5));
}

/// The nodes whose outcome in `e`'s report is a clock check failure.
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

/// Asserts that `e` names at least one node whose clock is off, and only nodes of `off` (a round decided early
/// leaves the others unread).
#[track_caller]
fn assert_refused_among(e: &Error, off: &[usize]) {
    let refused = clock_refused(e);
    assert!(
        !refused.is_empty() && refused.iter().all(|i| off.contains(i)),
        "the clock check refused {refused:?}, not among {off:?}: {e}"
    );
}

/// Both locks report valid at once: two holders.
#[track_caller]
fn assert_two_holders(a: &muxlock::Lock, b: &muxlock::Lock) {
    assert!(
        a.is_valid() && b.is_valid(),
        "two holders at once: A for {:?} more, B for {:?}",
        a.validity(),
        b.validity()
    );
}

/// What the second client got while the first held: `Ok` is a second holder.
fn second_try(b: &LockManager) -> Result<muxlock::Lock, Error> {
    b.request("clock:r").ttl(TTL).once().acquire()
}

/// A's lock, set on every node before any clock moves (a round is decided by the first two replies: the third
/// node's `SET` could otherwise run after a jump).
fn held_everywhere(a: &LockManager, servers: &[RedisServer], ttl: Duration) -> muxlock::Lock {
    let held = a
        .request("clock:r")
        .ttl(ttl)
        .once()
        .acquire()
        .expect("A's lock");
    for s in servers {
        locks::wait_until(Duration::from_secs(2), "A's key on every node", || {
            s.raw(&crate::support::cmd(&["EXISTS", "clock:r"])) == b":1\r\n"
        });
    }
    held
}

/// A majority's clocks jump past the lease while A holds (their copies of A's key expire): with the check, B
/// gets nothing, and its error names the two nodes whose clocks are off.
#[test]
fn a_majority_whose_clocks_jump_forward_hands_no_lock_out_twice() {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let (a, b) = (manager(&servers, true), manager(&servers, true));
    let held = held_everywhere(&a, &servers, TTL);
    move_clocks(&clocks, &[0, 1], |c| c.jump(JUMP));
    for s in &servers[..2] {
        locks::wait_until(Duration::from_secs(2), "the jump expired A's key", || {
            s.raw(&crate::support::cmd(&["EXISTS", "clock:r"])) == b":0\r\n"
        });
    }
    let e = second_try(&b).expect_err("B must not get the lock while A holds it");
    assert!(held.is_valid(), "A's lease is live as A counts it");
    assert_refused_among(&e, &[0, 1]);
    // A learns at its release that the jump took its lease: its key is gone from nodes 0 and 1.
    let released = a
        .unlock(held)
        .expect_err("A's key is gone from the majority");
    assert!(matches!(released, Error::LockLost(_)), "{released}");
}

/// The control: the same jump with the check off gives B the lock while A's lease is live.
#[test]
fn control_a_majority_whose_clocks_jump_forward_hands_a_lock_out_twice_without_the_check() {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let (a, b) = (manager(&servers, false), manager(&servers, false));
    let held = held_everywhere(&a, &servers, TTL);
    move_clocks(&clocks, &[0, 1], |c| c.jump(JUMP));
    let second = second_try(&b).expect("without the check, B gets the lock");
    assert_two_holders(&held, &second);
}

/// One node's clock jumps: it is not counted while its clock is off, and the lock stands on the two others: A
/// extends it, B does not get it.
#[test]
fn a_minority_whose_clock_jumps_is_not_counted_and_the_lock_stands() {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let (a, b) = (manager(&servers, true), manager(&servers, true));
    let mut held = held_everywhere(&a, &servers, TTL);
    move_clocks(&clocks, &[0], |c| c.jump(JUMP));
    a.extend(&mut held, TTL)
        .expect("A extends on the two nodes whose clocks agree");
    let e = second_try(&b).expect_err("the lock stands on nodes 1 and 2");
    assert!(e.is_held(), "{e}");
    // Nodes 1 and 2 decide B's round; node 0's outcome, if it came in time, is the clock check's refusal.
    assert!(clock_refused(&e).iter().all(|&i| i == 0), "{e}");
    a.unlock(held).expect("A's release");
}

/// Clocks stepping back make keys live longer: no second holder, and a node whose clock is behind is not counted
/// until it is right again (liveness: the error says why, and locks come back with the clocks).
#[test]
fn clocks_stepping_back_keep_the_lock_and_count_again_once_right() {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let (a, b) = (manager(&servers, true), manager(&servers, true));
    let held = held_everywhere(&a, &servers, TTL);
    move_clocks(&clocks, &[0, 1], |c| c.step_back(JUMP));
    assert!(
        second_try(&b).is_err(),
        "B must not get the lock while A holds it"
    );
    a.unlock(held).expect("A's release");
    let e = second_try(&b).expect_err("nodes 0 and 1 are a minute behind");
    assert_refused_among(&e, &[0, 1]);
    move_clocks(&clocks, &[0, 1], |c| c.set_offset_ms(0));
    let got = second_try(&b).expect("the clocks are right again");
    b.unlock(got).expect("B's release");
}

/// A majority's clocks run twice as fast while A holds a short lease: their copies expire at half of it. With the
/// check, B is refused there (their clocks are ahead by then); without it, the control's B gets the lock while A's
/// lease is live.
#[test]
fn a_majority_whose_clocks_run_fast_hands_no_lock_out_twice() {
    fast_clocks(true);
}

#[test]
fn control_a_majority_whose_clocks_run_fast_hands_a_lock_out_twice_without_the_check() {
    fast_clocks(false);
}

fn fast_clocks(check: bool) {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let (a, b) = (manager(&servers, check), manager(&servers, check));
    let ttl = Duration::from_secs(4);
    let held = held_everywhere(&a, &servers, ttl);
    move_clocks(&clocks, &[0, 1], |c| c.run_at(2.0));
    // At 2× the nodes' copies expire 2 s into the lease; A counts it valid for nearly 4 s.
    thread::sleep(Duration::from_millis(2_600));
    let second = b.request("clock:r").ttl(ttl).once().acquire();
    match check {
        true => {
            let e = second.expect_err("B must not get the lock while A holds it");
            assert!(held.is_valid(), "A's lease is live as A counts it");
            assert_refused_among(&e, &[0, 1]);
        }
        false => {
            let second = second.expect("without the check, B gets the lock");
            assert_two_holders(&held, &second);
        }
    }
}

/// A known limit, shown: a majority's clocks jump past the lease and come back (a wrong time source corrected, a
/// `date -s` undone) while A holds. Their copies of A's key expired during the excursion, and the clocks read
/// right again at B's grant, so the check, which reads clocks only at grants, lets B in while A counts its lease
/// live (`engine/clock.rs`, "What it assumes"; RELIABILITY.md's known limits). If this ever fails, the limit is
/// gone: say so in both.
#[test]
fn a_clock_excursion_undone_before_the_next_grant_is_not_seen() {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let (a, b) = (manager(&servers, true), manager(&servers, true));
    let held = held_everywhere(&a, &servers, TTL);
    move_clocks(&clocks, &[0, 1], |c| c.jump(JUMP));
    for s in &servers[..2] {
        locks::wait_until(Duration::from_secs(2), "the jump expired A's key", || {
            s.raw(&crate::support::cmd(&["EXISTS", "clock:r"])) == b":0\r\n"
        });
    }
    move_clocks(&clocks, &[0, 1], |c| c.set_offset_ms(0));
    let second = second_try(&b).expect("the limit: B gets the lock");
    assert_two_holders(&held, &second);
}

/// A majority's clocks jump past the lease while A holds; B's attempt sees them ahead and is refused; then the
/// clocks are set right before B tries again. They read right now, but their copies of A's key expired during
/// the jump: B remembers what it saw and does not count them for the longest lease in use after, and says so.
/// C, a client that never read them while they were ahead, is the limit above and this test's control: it gets
/// the lock while A counts its lease live.
#[test]
fn clocks_seen_ahead_and_set_right_again_are_not_counted_by_the_client_that_saw_them() {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let (a, b, c) = (
        manager(&servers, true),
        manager(&servers, true),
        manager(&servers, true),
    );
    let held = held_everywhere(&a, &servers, TTL);
    move_clocks(&clocks, &[0, 1], |c| c.jump(JUMP));
    for s in &servers[..2] {
        locks::wait_until(Duration::from_secs(2), "the jump expired A's key", || {
            s.raw(&crate::support::cmd(&["EXISTS", "clock:r"])) == b":0\r\n"
        });
    }
    let seen = second_try(&b).expect_err("nodes 0 and 1 are a minute ahead");
    assert_refused_among(&seen, &[0, 1]);
    move_clocks(&clocks, &[0, 1], |c| c.set_offset_ms(0));
    let e = second_try(&b).expect_err("B saw nodes 0 and 1 ahead while A holds");
    assert_refused_among(&e, &[0, 1]);
    assert!(
        e.to_string().contains("was seen") && e.to_string().contains("ahead"),
        "{e}"
    );
    assert!(held.is_valid(), "A's lease is live as A counts it");
    let third = second_try(&c).expect("the limit: C never saw the clocks ahead");
    assert_two_holders(&held, &third);
}

/// A known limit, shown (as above): a majority's clocks run fast while A holds, and are stepped back to the right
/// time (NTP correcting them) before B asks: their copies of A's key expired early, and at B's grant their
/// clocks agree with B's.
#[test]
fn fast_clocks_stepped_back_before_the_next_grant_are_not_seen() {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let (a, b) = (manager(&servers, true), manager(&servers, true));
    let ttl = Duration::from_secs(4);
    let held = held_everywhere(&a, &servers, ttl);
    move_clocks(&clocks, &[0, 1], |c| c.run_at(2.0));
    // At 2× the nodes' copies expire 2 s into the lease; then the clocks are set right again.
    thread::sleep(Duration::from_millis(2_300));
    move_clocks(&clocks, &[0, 1], |c| {
        c.run_at(1.0);
        c.set_offset_ms(0);
    });
    let second = b
        .request("clock:r")
        .ttl(ttl)
        .once()
        .acquire()
        .expect("the limit: B gets the lock");
    assert_two_holders(&held, &second);
}

/// The `monotonic_clock` line of `server`'s `INFO server`.
fn monotonic_clock(server: &RedisServer) -> String {
    let info = String::from_utf8_lossy(&server.raw(&crate::support::cmd(&["INFO", "server"])))
        .into_owned();
    info.lines()
        .find_map(|l| l.strip_prefix("monotonic_clock:"))
        .unwrap_or_else(|| panic!("no monotonic_clock in {info}"))
        .trim()
        .to_owned()
}

/// Two of three nodes start with a crawling `CLOCK_MONOTONIC` (the shim, at 500 millionths of real speed).
/// Valkey calibrates its processor counter against it (10 ms sleeps measured as a few µs): `INFO server` shows
/// millions of ticks a microsecond, a broken rate, and the server's timers crawl. With the restart guard, which
/// reads that line on every connection, those nodes do not count, and the report quotes it. There is no
/// control that hands a lock out wrong: on Valkey 9.1.2 a crawling clock (`8388608.00 ticks/us` here) still let
/// a 1 s key expire when touched, so the hazard valkey-io/valkey#4345 reports (keys that never expire, with a
/// clock calibrated to a standstill, which 9.1.2 no longer keeps) is not reproduced here; the refusal stands on
/// the reading alone. A server whose clock is the kernel's (`POSIX clock_gettime`: Redis 7.0 here) names no
/// rate: it is not judged, and counts.
#[test]
fn nodes_whose_info_shows_a_broken_monotonic_clock_do_not_count() {
    let Some(clocks) = (0..3)
        .map(|_| FakeClock::new_or_skip())
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let servers: Vec<RedisServer> = clocks
        .iter()
        .enumerate()
        .map(|(i, c)| match i {
            0 | 1 => RedisServer::builder().crawling_monotonic(c, 500).start(),
            _ => RedisServer::builder().fake_clock(c).start(),
        })
        .collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let ttl = Duration::from_secs(1);
    let line = monotonic_clock(&servers[0]);
    // The clock check is off: a crawling server's `TIME` may lag, and this test is about the `INFO` reading.
    let guarded = |guard: bool| {
        locks::manager(
            urls.clone(),
            locks::one_attempt(Duration::from_millis(500))
                .with_clock_check(false)
                .with_restart_guard(guard)
                .with_restart_window(Duration::ZERO),
        )
    };
    if !line.contains("ticks/us") {
        // No counter to calibrate: the crawl does not show, and nothing is judged.
        assert_eq!(monotonic_clock(&servers[2]), line);
        thread::sleep(Duration::from_secs(3));
        let a = guarded(true);
        let held = a
            .request("mono:r")
            .ttl(ttl)
            .once()
            .acquire()
            .unwrap_or_else(|e| panic!("{line} is not judged: {e}"));
        a.unlock(held).expect("A's release");
        return;
    }
    assert!(
        line.contains("X86 TSC @ ") || line.contains("ARM CNTVCT @ "),
        "a counter: {line}"
    );
    let e = guarded(true)
        .request("mono:r")
        .ttl(ttl)
        .once()
        .acquire()
        .expect_err("nodes 0 and 1 must not count");
    let broken: Vec<usize> = clock_refused(&e);
    assert!(
        !broken.is_empty() && broken.iter().all(|i| [0, 1].contains(i)),
        "{e}"
    );
    assert!(
        e.to_string().contains(&format!("monotonic_clock:{line}")),
        "{e}"
    );
}

/// How many keys [`big_set`] has.
const SET_SIZE: usize = 30_000;

/// Every node's outcome in `e`'s report, without the resource (a big set's name is long).
fn outcomes(e: &Error) -> String {
    match e.report() {
        Some(r) => format!("{:?}", r.nodes()),
        None => e.to_string(),
    }
}

/// Names of a set big enough that its acquisition script runs for a good part of a second on a node.
fn big_set(prefix: &str) -> Vec<String> {
    (0..SET_SIZE).map(|i| format!("{prefix}:{i:06}")).collect()
}

/// The node's expiry of `key` (`PEXPIRETIME`: ms since the epoch on the node's clock).
fn expiry_ms(s: &RedisServer, key: &str) -> i64 {
    let reply = s.raw(&crate::support::cmd(&["PEXPIRETIME", key]));
    let text = String::from_utf8_lossy(&reply);
    text.trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("PEXPIRETIME {key} answered {text:?}"))
}

fn wall_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch");
    i64::try_from(since.as_millis()).expect("in range")
}

/// A node whose clock is behind runs a long acquisition (a set of many keys: its script sets the first key long
/// before it ends). The `TIME` after the script reads the node's clock at its end, which looks right although
/// the clock was behind when the first key's lease began; once the clock is set right, that key expires early,
/// and B takes it while A counts its lease live. The lease's base is the node's time when the command ran, not
/// when its `TIME` ran: the check must bound the former (the lock must be refused, or B must not get the key).
/// A server that bases every key of a script on the script's start (Valkey 9.1) has no such gap: the test
/// says so and ends once its calibration shows it.
#[test]
fn a_long_grant_on_nodes_whose_clocks_are_behind_hands_no_lock_out_twice() {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let ttl = Duration::from_secs(6);
    let tolerance: i64 = 25;
    let config = locks::one_attempt(Duration::from_secs(4))
        .with_clock_tolerance(Duration::from_millis(tolerance.unsigned_abs()));
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let a = locks::manager(urls.clone(), config.clone());
    let b = locks::manager(urls, config);
    // The script is loaded, and the time a grant of the set takes on the nodes measured with every clock right:
    // where its first and last keys' leases begin on node 0, from the start of A's call.
    let warm = a
        .request_all(["warm:a", "warm:b"])
        .ttl(ttl)
        .once()
        .acquire()
        .expect("warm-up");
    a.unlock(warm).expect("warm-up release");
    let calibration = big_set("cal");
    let s = wall_ms();
    let t0 = std::time::Instant::now();
    let cal = a
        .request_all(&calibration)
        .ttl(ttl)
        .once()
        .acquire()
        .unwrap_or_else(|e| panic!("calibration: {}", outcomes(&e)));
    let took = t0.elapsed();
    let ttl_ms = i64::try_from(ttl.as_millis()).expect("in range");
    let first = expiry_ms(&servers[0], &calibration[0]) - ttl_ms - s;
    let last = expiry_ms(&servers[0], calibration.last().expect("names")) - ttl_ms - s;
    a.unlock(cal).expect("calibration release");
    if first == last && took > Duration::from_millis(100) {
        // The server bases every key a script sets on one time, the script's start (Valkey 9.1 does): the `TIME`
        // before the script bounds that base, and the gap this test looks for does not exist.
        return;
    }
    // The drift allowance and twice the tolerance: what A takes off its lease.
    let allowance = ttl_ms / 100 + 2 + 2 * tolerance;
    // Behind by more than the allowance (and the first key's delay): that key expires before A's lease ends once
    // the clock is right. By no more than the script's run and the tolerance: the `TIME` after it passes.
    let (lo, hi) = (allowance + first, last + tolerance);
    assert!(
        hi > lo + 40,
        "the set's script ran too briefly for a margin ({first} ms to its first key, {last} ms to its last, \
         {took:?} in all)"
    );
    let behind = (lo + hi) / 2;
    move_clocks(&clocks, &[0, 1], |c| c.set_offset_ms(-behind));
    let names = big_set("gap");
    let held = match a.request_all(&names).ttl(ttl).once().acquire() {
        Ok(held) => held,
        Err(e) => {
            // The clocks of nodes 0 and 1 are `behind` ms off: refusing them is right.
            let refused = clock_refused(&e);
            assert!(
                !refused.is_empty() && refused.iter().all(|i| [0, 1].contains(i)),
                "{}",
                outcomes(&e)
            );
            return;
        }
    };
    // NTP sets the clocks right (a step forward of `behind`).
    move_clocks(&clocks, &[0, 1], |c| c.set_offset_ms(0));
    for s in &servers[..2] {
        locks::wait_until(ttl, "the first key's early expiry", || {
            s.raw(&crate::support::cmd(&["EXISTS", &names[0]])) == b":0\r\n"
        });
    }
    match b.request(&names[0]).ttl(ttl).once().acquire() {
        Ok(second) => assert!(
            !held.is_valid(),
            "two holders of {} at once: A for {:?} more, B for {:?} (nodes 0 and 1 {behind} ms behind at A's \
             grant; the script set its first key {first} ms and its last {last} ms after A's call began)",
            names[0],
            held.validity(),
            second.validity()
        ),
        Err(e) => assert!(e.is_held(), "{}", outcomes(&e)),
    }
}

/// A guard whose lock stands on a majority whose clocks jump ahead by less than its lease (their copies of the
/// key will expire early, not yet): its next renewal sees the clocks off and reports the guard lost for that
/// reason ([`Lost::Clock`](muxlock::Lost::Clock)) at once, well before the guard's deadline (a guard only renewed
/// in vain is lost by time, at the deadline), and a second client is refused meanwhile. (A jump past the lease
/// expires the keys, and the guard learns of it sooner still, as [`Lost::Taken`](muxlock::Lost::Taken), from the
/// keys' invalidations: the key is gone.)
#[test]
fn a_guard_whose_majority_clocks_jump_ahead_is_lost_for_its_clocks_before_its_deadline() {
    let Some((clocks, servers)) = nodes() else {
        return;
    };
    let (a, b) = (manager(&servers, true), manager(&servers, true));
    let ttl = Duration::from_secs(6);
    let guard = a.request("clock:r").ttl(ttl).hold().expect("A's guard");
    for s in &servers {
        locks::wait_until(Duration::from_secs(2), "A's key on every node", || {
            s.raw(&crate::support::cmd(&["EXISTS", "clock:r"])) == b":1\r\n"
        });
    }
    let deadline = guard.deadline();
    move_clocks(&clocks, &[0, 1], |c| c.jump(Duration::from_secs(2)));
    assert!(
        guard.wait_lost(ttl),
        "the guard was never reported lost (its deadline: {:?} from now)",
        deadline.saturating_duration_since(std::time::Instant::now())
    );
    let lost = guard.lost().expect("lost");
    assert!(
        matches!(lost, muxlock::Lost::Clock(_)),
        "lost for another reason: {lost}"
    );
    assert!(
        std::time::Instant::now() < deadline,
        "lost only at its deadline: {lost}"
    );
    let e = second_try(&b).expect_err("B must not get the lock while the clocks are off");
    assert_refused_among(&e, &[0, 1]);
}

/// Two of three nodes answer slowly for a while (their replies trickle in, a byte every 2 ms, through a proxy):
/// a renewal meanwhile reads each request's first `TIME` and its reply within the round, its second `TIME`
/// after it. Their clocks agree with this client's all along: the guard is not lost for its clocks, and once
/// the replies come at speed again a renewal confirms it, well within its lease.
#[test]
fn a_guard_whose_majority_answers_slowly_for_a_while_is_not_lost_for_its_clocks() {
    use crate::support::proxy::{Fault, FaultProxy};
    let cluster = crate::support::Cluster::start(3);
    let proxies: Vec<FaultProxy> = cluster.addrs().into_iter().map(FaultProxy::start).collect();
    let a = locks::manager(
        proxies.iter().map(FaultProxy::url),
        locks::one_attempt(Duration::from_millis(100)),
    );
    let ttl = Duration::from_secs(3);
    let guard = a.request("slow:r").ttl(ttl).hold().expect("A's guard");
    // Slow from before the first renewal (due a third of the TTL in) until past it.
    for p in &proxies[1..] {
        p.set(Fault::Trickle(Duration::from_millis(2)));
    }
    thread::sleep(ttl / 3 + Duration::from_millis(300));
    for p in &proxies[1..] {
        p.set(Fault::None);
    }
    let lost_while_slow = guard.lost();
    // Past the lease the acquisition gave: only a renewal confirmed since keeps the guard.
    thread::sleep(ttl - ttl / 3);
    assert!(
        lost_while_slow.is_none() && !guard.is_lost(),
        "a slow majority lost the guard: {}",
        guard.lost().map(|l| l.to_string()).unwrap_or_default()
    );
    assert!(guard.renewals() > 0, "never renewed");
}
