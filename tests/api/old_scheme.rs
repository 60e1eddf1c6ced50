//! The old single-instance scheme (`SETNX` + `GETSET` on a timestamp, `tests/api/old_scheme/scheme.rs`) grants one
//! lock to two holders; the same scenarios run against muxlock on 5 real nodes grant it to one at a time.
//!
//! Every scenario is deterministic: the hazards come from clocks and pauses the test sets, not from races. A
//! client's clock skew is an offset added to its wall clock; a pause is a sleep with the lock held. Each hold is
//! recorded as the mutual-exclusion checker records muxlock's (`tests/support/checker.rs`): from the moment the
//! lock call returned to the moment the holder stops believing it holds the lock. Writers also enter the
//! checker's protected resource, which reports a writer that finds another inside whose lease is still running.

use crate::support;

#[path = "old_scheme/scheme.rs"]
mod scheme;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, Error, LockManager};
use scheme::{OldLock, OldScheme};
use support::checker::{Entry, Hold, Writers, instant_ns, mono_ns, overlaps};
use support::{Cluster, RedisServer};

/// Bound on every call of the old scheme's client.
const CALL: Duration = Duration::from_secs(5);

/// A hold of the old scheme: from now until the end its holder believes in, by its own clock.
fn old_hold(client: &OldScheme, lock: &OldLock, holder: &str) -> Hold {
    let start = mono_ns();
    Hold {
        resource: String::from_utf8_lossy(&lock.key).into_owned(),
        holder: holder.into(),
        start,
        end: start + client.remaining(lock).as_nanos() as u64,
    }
}

/// A hold of muxlock's: from now until its validity ends.
fn mux_hold(lock: &muxlock::Lock, holder: &str) -> Hold {
    Hold {
        resource: String::from_utf8_lossy(lock.resource()).into_owned(),
        holder: holder.into(),
        start: mono_ns(),
        end: instant_ns(lock.valid_until()),
    }
}

fn manager(urls: Vec<String>, retries: u32) -> LockManager {
    support::locks::manager(
        urls,
        Config::default()
            .with_restart_guard(false) // the nodes have just started; see tests/api/restart_guard.rs
            .with_retry_count(retries)
            .with_retry_delay(Duration::from_millis(20))
            .with_retry_jitter(Duration::from_millis(5))
            .with_round_timeout(Duration::from_millis(500)),
    )
}

// ------------------------------------------------------------------------------ clients whose clocks disagree

/// Client A's clock is right; client B's runs 60 s ahead (an NTP-less VM, a wrong time zone on a `TIMESTAMP`, a
/// clock stepped by hand). A takes the lock for 10 s. B, a moment later, reads A's timestamp, finds it 50 s in
/// its past, and takes the lock over with `GETSET`. Both holders are careful: each writes only while its own
/// clock says its lock has time left. Then A, whose clock says its lock is still valid, releases, and its `DEL`
/// deletes B's lock, so a third client C (clock right) gets it too while B still believes it holds it.
#[test]
fn old_scheme_clock_skew_grants_one_lock_to_two_holders_then_three() {
    let redis = RedisServer::start();
    let protected = RedisServer::start();
    let ttl = Duration::from_secs(10);
    let key = b"invoice:42";
    let mut a = OldScheme::connect(redis.addr(), CALL).expect("A connects");
    let mut b = OldScheme::connect(redis.addr(), CALL)
        .expect("B connects")
        .with_clock_offset(60_000);
    let mut c = OldScheme::connect(redis.addr(), CALL).expect("C connects");
    let (mut wa, mut wb, mut wc) = (
        Writers::connect(protected.addr()),
        Writers::connect(protected.addr()),
        Writers::connect(protected.addr()),
    );

    let lock_a = a
        .try_lock(key, ttl)
        .expect("A's call")
        .expect("A gets the free lock");
    let hold_a = old_hold(&a, &lock_a, "A");
    assert_eq!(wa.enter("invoice:42", hold_a.end), Entry::Alone);

    let lock_b = b
        .try_lock(key, ttl)
        .expect("B's call")
        .expect("B, 60 s ahead, takes over A's lock: the scheme's hazard");
    let hold_b = old_hold(&b, &lock_b, "B");
    assert!(
        b.remaining(&lock_b) > Duration::ZERO,
        "B writes: its clock says it holds the lock"
    );
    assert_eq!(
        wb.enter("invoice:42", hold_b.end),
        Entry::WithHolder,
        "B enters the protected section while A, whose lease runs, is inside"
    );
    wa.leave("invoice:42");
    wb.leave("invoice:42");

    // A is done, and its clock says its lock is still valid: the seed's unlock deletes the key, which is B's.
    let released_a = mono_ns();
    assert!(
        a.unlock(&lock_a).expect("A's unlock"),
        "A's DEL deleted a key"
    );
    let hold_a = Hold {
        end: released_a,
        ..hold_a
    };
    let lock_c = c
        .try_lock(key, ttl)
        .expect("C's call")
        .expect("C gets the lock A's DEL freed, while B holds it");
    let hold_c = old_hold(&c, &lock_c, "C");
    assert_eq!(wb.enter("invoice:42", hold_b.end), Entry::Alone);
    assert_eq!(
        wc.enter("invoice:42", hold_c.end),
        Entry::WithHolder,
        "C writes while B's lease runs"
    );

    let found = overlaps(&[hold_a, hold_b, hold_c]);
    let pairs: Vec<(&str, &str)> = found
        .iter()
        .map(|(x, y)| (x.holder.as_str(), y.holder.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [("A", "B"), ("B", "C")],
        "the checker sees both overlaps"
    );
}

/// The same three clients against muxlock on 5 nodes. There is no clock offset to give B: muxlock reads no wall
/// clock (a node expires the key by its own clock; the client measures the validity on its monotonic clock), so
/// B's request while A holds the lock is refused, whatever B's wall clock says, and A's release deletes only A's
/// value (compare-and-delete). B gets the lock after A released it, C after B.
#[test]
fn muxlock_the_same_clients_hold_the_lock_one_after_another() {
    let cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let ttl = Duration::from_secs(10);
    let (a, b, c) = (
        manager(cluster.urls(), 0),
        manager(cluster.urls(), 0),
        manager(cluster.urls(), 0),
    );
    let (mut wa, mut wb, mut wc) = (
        Writers::connect(protected.addr()),
        Writers::connect(protected.addr()),
        Writers::connect(protected.addr()),
    );

    let lock_a = a
        .request("invoice:42")
        .ttl(ttl)
        .acquire()
        .expect("A gets the free lock");
    let hold_a = mux_hold(&lock_a, "A");
    assert_eq!(wa.enter("invoice:42", hold_a.end), Entry::Alone);
    assert!(
        matches!(
            b.request("invoice:42").ttl(ttl).acquire(),
            Err(Error::Held(_))
        ),
        "B is refused while A holds the lock"
    );
    wa.leave("invoice:42");
    let released_a = mono_ns();
    assert!(
        a.unlock(lock_a).expect("A's unlock") >= 3,
        "a majority released"
    );
    let hold_a = Hold {
        end: released_a,
        ..hold_a
    };

    let lock_b = b
        .request("invoice:42")
        .ttl(ttl)
        .acquire()
        .expect("B gets it once A released it");
    let hold_b = mux_hold(&lock_b, "B");
    assert_eq!(wb.enter("invoice:42", hold_b.end), Entry::Alone);
    assert!(
        matches!(
            c.request("invoice:42").ttl(ttl).acquire(),
            Err(Error::Held(_))
        ),
        "C is refused while B holds the lock"
    );
    wb.leave("invoice:42");
    let released_b = mono_ns();
    assert!(
        b.unlock(lock_b).expect("B's unlock") >= 3,
        "a majority released"
    );
    let hold_b = Hold {
        end: released_b,
        ..hold_b
    };
    let lock_c = c
        .request("invoice:42")
        .ttl(ttl)
        .acquire()
        .expect("C gets it once B released it");
    let hold_c = mux_hold(&lock_c, "C");
    assert_eq!(wc.enter("invoice:42", hold_c.end), Entry::Alone);
    wc.leave("invoice:42");
    assert!(
        c.unlock(lock_c).expect("C's unlock") >= 3,
        "a majority released"
    );

    assert!(overlaps(&[hold_a, hold_b, hold_c]).is_empty());
}

// ------------------------------------------------------------------------------ a holder paused past its timestamp

/// How long the paused holder sleeps with the lock, against a lease of [`SHORT`].
const PAUSE: Duration = Duration::from_millis(1500);
const SHORT: Duration = Duration::from_millis(300);

/// The seed's holder checks its timestamp only when it releases ("比较自己的处理时间和对于锁设置的超时时间"):
/// A takes the lock for 300 ms and is paused for 1.5 s (a GC pause, a frozen VM) before its write. B polls
/// every 20 ms and gets the lock once A's timestamp has passed, which the scheme allows. A wakes and writes while
/// B is inside. A believes it held the lock until its unlock, where it finds its timestamp passed and deletes
/// nothing: too late.
///
/// (A holder of the old scheme that checked its own timestamp before writing would not write here, as long as
/// the clocks agree: the pause hazard is shared by every lease, and muxlock's answer, below, is the same check.
/// The skew hazard above is the scheme's own.)
#[test]
fn old_scheme_a_holder_paused_past_its_timestamp_writes_beside_the_next() {
    let redis = RedisServer::start();
    let protected = RedisServer::start();
    let addr = protected.addr();
    let (a_addr, b_addr) = (redis.addr(), redis.addr());
    let a = thread::spawn(move || {
        let mut a = OldScheme::connect(a_addr, CALL).expect("A connects");
        let mut w = Writers::connect(addr);
        let lock = a
            .try_lock(b"job", SHORT)
            .expect("A's call")
            .expect("A gets the lock");
        let start = mono_ns();
        thread::sleep(PAUSE);
        let entry = w.enter("job", instant_ns(Instant::now() + SHORT)); // the seed's holder writes unchecked
        w.leave("job");
        let end = mono_ns();
        assert!(
            !a.unlock(&lock).expect("A's unlock"),
            "A's timestamp passed: no DEL"
        );
        (
            Hold {
                resource: "job".into(),
                holder: "A".into(),
                start,
                end,
            },
            entry,
        )
    });
    // B starts asking only once A has the lock.
    support::locks::wait_until(Duration::from_secs(5), "A takes the lock", || {
        redis.raw(&support::wire::cmd(&["EXISTS", "job"])) == b":1\r\n"
    });
    let mut b = OldScheme::connect(b_addr, CALL).expect("B connects");
    let mut w = Writers::connect(addr);
    let deadline = Instant::now() + Duration::from_secs(5);
    let lock = loop {
        if let Some(lock) = b
            .try_lock(b"job", Duration::from_secs(5))
            .expect("B's call")
        {
            break lock;
        }
        assert!(Instant::now() < deadline, "B never got the lock");
        thread::sleep(Duration::from_millis(20));
    };
    let hold_b = old_hold(&b, &lock, "B");
    assert_eq!(
        w.enter("job", hold_b.end),
        Entry::Alone,
        "A is still asleep"
    );
    let (hold_a, entry_a) = a.join().expect("A");
    w.leave("job");
    let hold_b = Hold {
        end: mono_ns(),
        ..hold_b
    };
    assert!(b.unlock(&lock).expect("B's unlock"));
    assert_eq!(
        entry_a,
        Entry::WithHolder,
        "A wrote while B, whose lease runs, was inside"
    );
    assert_eq!(overlaps(&[hold_a, hold_b]).len(), 1);
}

/// The same pause against muxlock: A's lock is a 300 ms lease; A wakes after 1.5 s, `Lock::is_valid` is false,
/// and A does not write. Its hold ended when its validity did, before B's began; its `unlock` deletes nothing
/// (the key holds B's value now).
#[test]
fn muxlock_a_holder_paused_past_its_lease_knows_and_does_not_write() {
    let cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let addr = protected.addr();
    let urls = cluster.urls();
    let a_locks = manager(urls.clone(), 0);
    let lock = a_locks
        .request("job")
        .ttl(SHORT)
        .acquire()
        .expect("A gets the lock");
    let hold_a = mux_hold(&lock, "A");
    let a = thread::spawn(move || {
        let mut w = Writers::connect(addr);
        thread::sleep(PAUSE);
        let wrote = lock.is_valid();
        if wrote {
            w.enter("job", instant_ns(lock.valid_until()));
            w.leave("job");
        }
        (wrote, a_locks.unlock(lock))
    });
    // B retries every 20 ms for up to 2 s: it gets the lock once A's key has expired on the nodes.
    let b = manager(urls, 100);
    let lock_b = b
        .request("job")
        .ttl(Duration::from_secs(5))
        .acquire()
        .expect("B gets the lock");
    let hold_b = mux_hold(&lock_b, "B");
    let mut w = Writers::connect(addr);
    assert_eq!(w.enter("job", hold_b.end), Entry::Alone);
    let (wrote, a_released) = a.join().expect("A");
    w.leave("job");
    let hold_b = Hold {
        end: mono_ns(),
        ..hold_b
    };
    assert!(
        b.unlock(lock_b).expect("B's unlock") >= 3,
        "a majority released"
    );
    assert!(!wrote, "A's lock was invalid when it woke");
    // A's unlock deleted nothing (the key was B's), and A is told its lock was lost.
    let deleted = match &a_released {
        Err(Error::LockLost(r)) => r.granted(),
        other => panic!("A's unlock: {other:?}"),
    };
    assert_eq!(deleted, 0, "A's unlock deleted nothing: the key was B's");
    assert!(
        overlaps(&[hold_a, hold_b]).is_empty(),
        "A's hold ended with its validity, before B's began"
    );
}
