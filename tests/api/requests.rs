//! The request API's grid, one test per cell, against real redis-servers: every kind (one resource,
//! a set, fenced, owned) × every waiting policy (once, retry, wait) × every terminal (acquire, hold, run). In each
//! cell: the request gets a free lock of the right kind, with an expiry on every key; it is refused (`Held`) while
//! another holder has the resource; a waiting request gets it once that holder lets go; an acquired lock extends
//! and unlocks with the one `extend` and `unlock`, a guard outlives its TTL by renewals and releases, a closure
//! runs under a guard. The two cells the nodes cannot do (fenced and owned sets) are `Error::Config` before
//! anything is sent.

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Config, Error, LockManager, Request};
use support::locks;
use support::{Cluster, cmd};

/// Long enough for a guard (at least about seven round timeouts), short enough to see renewals in a test.
const TTL: Duration = Duration::from_millis(700);
const ROUND: Duration = Duration::from_millis(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    One,
    Set,
    Fenced,
    Owned,
    FencedSet,
    OwnedSet,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Waiting {
    Once,
    Retry,
    Wait,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Terminal {
    Acquire,
    Hold,
    Run,
}

fn config() -> Config {
    Config::default()
        .with_restart_guard(false)
        .with_round_timeout(ROUND)
        .with_retry_count(2)
        .with_retry_delay(Duration::from_millis(20))
        .with_retry_jitter(Duration::from_millis(5))
}

/// The names a cell's request locks.
fn names(kind: Kind) -> Vec<&'static str> {
    match kind {
        Kind::Set | Kind::FencedSet | Kind::OwnedSet => vec!["grid:b", "grid:a"],
        _ => vec!["grid:a"],
    }
}

/// The request of a cell, on `locks`, for `owner` when owned.
fn request<'m>(
    locks: &'m LockManager,
    kind: Kind,
    waiting: Waiting,
    owner: &muxlock::Owner,
    wait: Duration,
) -> Request<'m> {
    let r = match kind {
        Kind::One | Kind::Fenced | Kind::Owned => locks.request(names(kind)[0]),
        _ => locks.request_all(names(kind)),
    };
    let r = r.ttl(TTL);
    let r = match kind {
        Kind::Fenced | Kind::FencedSet => r.fenced(),
        Kind::Owned | Kind::OwnedSet => r.owned(owner),
        _ => r,
    };
    match waiting {
        Waiting::Once => r.once(),
        Waiting::Retry => r.retry(),
        Waiting::Wait => r.wait(wait),
    }
}

/// Every node's PTTL of `key`: -2 where the key is missing, -1 where it has no expiry.
fn pttls(cluster: &Cluster, key: &str) -> Vec<i64> {
    cluster
        .nodes()
        .iter()
        .map(|n| {
            let reply = n.raw(&cmd(&["PTTL", key]));
            String::from_utf8_lossy(&reply[1..reply.len() - 2])
                .parse()
                .unwrap_or(i64::MIN)
        })
        .collect()
}

/// Every key a lock of `kind` writes on `name` has an expiry on every node that has it, and a majority has it.
fn assert_held_with_expiry(cluster: &Cluster, kind: Kind, name: &str) {
    let mut keys = vec![name.to_owned()];
    if kind == Kind::Owned {
        keys.push(format!("muxlock:holds:{name}"));
    }
    for key in keys {
        let t = pttls(cluster, &key);
        assert!(t.iter().all(|&t| t == -2 || t > 0), "{key}: {t:?}");
        assert!(t.iter().filter(|&&t| t > 0).count() >= 2, "{key}: {t:?}");
    }
}

fn assert_free(cluster: &Cluster, kind: Kind) {
    for name in names(kind) {
        locks::wait_until(Duration::from_secs(2), "the keys go", || {
            pttls(cluster, name).iter().all(|&t| t == -2)
        });
    }
}

/// A holder of `grid:a` on another manager, of a kind that conflicts with every cell's.
fn other_holder(cluster: &Cluster) -> (LockManager, muxlock::Lock) {
    let other = locks::manager(cluster.urls(), config());
    let lock = other
        .request("grid:a")
        .ttl(Duration::from_secs(5))
        .once()
        .acquire()
        .expect("free");
    (other, lock)
}

fn cell(kind: Kind, waiting: Waiting, terminal: Terminal) {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let owner = locks.owner().expect("an owner");
    let wait = Duration::from_millis(300);

    if matches!(kind, Kind::FencedSet | Kind::OwnedSet) {
        let votes = |locks: &LockManager| {
            locks
                .stats()
                .nodes
                .iter()
                .map(|n| n.granted + n.taken + n.failed)
                .sum::<u64>()
        };
        let before = votes(&locks);
        let e = match terminal {
            Terminal::Acquire => request(&locks, kind, waiting, &owner, wait)
                .acquire()
                .map(drop),
            Terminal::Hold => request(&locks, kind, waiting, &owner, wait)
                .hold()
                .map(drop),
            Terminal::Run => request(&locks, kind, waiting, &owner, wait).run(|_| ()),
        }
        .expect_err("a fenced or owned set is refused");
        assert!(e.is_config(), "{e}");
        assert!(e.to_string().contains("not supported"), "{e}");
        assert_eq!(before, votes(&locks), "nothing is sent");
        assert_free(&cluster, kind);
        return;
    }

    // Refused while another holder has the resource (its name is in every cell's request).
    let (other, held) = other_holder(&cluster);
    let refused = match terminal {
        Terminal::Acquire => request(&locks, kind, waiting, &owner, wait)
            .acquire()
            .map(drop),
        Terminal::Hold => request(&locks, kind, waiting, &owner, wait)
            .hold()
            .map(drop),
        Terminal::Run => request(&locks, kind, waiting, &owner, wait).run(|_| ()),
    };
    match refused {
        Err(Error::Held(report)) => assert!(report.taken() >= 2, "{report}"),
        other => panic!("{kind:?}/{waiting:?}/{terminal:?} while held: {other:?}"),
    }

    // Granted once the other holder lets go: a waiting request while it waits, the others after.
    match waiting {
        Waiting::Wait => {
            let releaser = thread::spawn(move || {
                thread::sleep(Duration::from_millis(200));
                other.unlock(held).expect("released");
            });
            let wait = Duration::from_secs(5);
            let started = Instant::now();
            run_terminal(&cluster, &locks, kind, waiting, terminal, &owner, wait);
            releaser.join().expect("releaser");
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "woken by the release, not at the end of the holder's 5 s lease: {:?}",
                started.elapsed()
            );
        }
        _ => {
            other.unlock(held).expect("released");
            run_terminal(&cluster, &locks, kind, waiting, terminal, &owner, wait)
        }
    }
    assert_free(&cluster, kind);
}

/// Runs a cell's terminal on a free (or soon free) resource and checks what it got; everything is released at
/// the end.
fn run_terminal(
    cluster: &Cluster,
    locks: &LockManager,
    kind: Kind,
    waiting: Waiting,
    terminal: Terminal,
    owner: &muxlock::Owner,
    wait: Duration,
) {
    let quorum = locks.quorum();
    match terminal {
        Terminal::Acquire => {
            let mut lock = request(locks, kind, waiting, owner, wait)
                .acquire()
                .expect("granted");
            assert!(lock.is_valid());
            check_kind(kind, lock.resources(), lock.token(), lock.owner(), owner);
            for name in names(kind) {
                assert_held_with_expiry(cluster, kind, name);
            }
            let before = lock.valid_until();
            thread::sleep(Duration::from_millis(50));
            locks
                .extend(&mut lock, Duration::from_secs(3))
                .expect("extended");
            assert!(lock.valid_until() > before + Duration::from_secs(1));
            for name in names(kind) {
                assert!(pttls(cluster, name).iter().filter(|&&t| t > 1500).count() >= quorum);
            }
            let released = locks.unlock(lock).expect("released");
            assert!(released >= quorum, "{released}");
        }
        Terminal::Hold => {
            let guard = request(locks, kind, waiting, owner, wait)
                .hold()
                .expect("granted");
            check_kind(kind, guard.resources(), guard.token(), guard.owner(), owner);
            // Past two TTLs: only renewals keep it.
            thread::sleep(TTL * 2);
            assert!(!guard.is_lost(), "{:?}", guard.lost());
            assert!(guard.renewals() >= 2, "{}", guard.renewals());
            for name in names(kind) {
                assert_held_with_expiry(cluster, kind, name);
            }
            let released = guard.release().expect("released");
            assert!(released >= quorum, "{released}");
        }
        Terminal::Run => {
            let got = request(locks, kind, waiting, owner, wait)
                .run(|guard| {
                    check_kind(kind, guard.resources(), guard.token(), guard.owner(), owner);
                    for name in names(kind) {
                        assert_held_with_expiry(cluster, kind, name);
                    }
                    42
                })
                .expect("ran");
            assert_eq!(got, 42);
        }
    }
}

fn check_kind(
    kind: Kind,
    resources: &[Vec<u8>],
    token: Option<u64>,
    lock_owner: Option<&muxlock::Owner>,
    owner: &muxlock::Owner,
) {
    let mut want: Vec<Vec<u8>> = names(kind).iter().map(|n| n.as_bytes().to_vec()).collect();
    want.sort();
    assert_eq!(resources, &want[..]);
    assert_eq!(token.is_some(), kind == Kind::Fenced, "{token:?}");
    assert!(token.is_none_or(|t| t > 0));
    match kind {
        Kind::Owned => assert_eq!(lock_owner, Some(owner)),
        _ => assert_eq!(lock_owner, None),
    }
}

macro_rules! grid {
    ($($name:ident: $kind:ident $waiting:ident $terminal:ident;)*) => {
        $(
            #[test]
            fn $name() {
                cell(Kind::$kind, Waiting::$waiting, Terminal::$terminal);
            }
        )*
    };
}

grid! {
    one_once_acquire: One Once Acquire;
    one_once_hold: One Once Hold;
    one_once_run: One Once Run;
    one_retry_acquire: One Retry Acquire;
    one_retry_hold: One Retry Hold;
    one_retry_run: One Retry Run;
    one_wait_acquire: One Wait Acquire;
    one_wait_hold: One Wait Hold;
    one_wait_run: One Wait Run;
    set_once_acquire: Set Once Acquire;
    set_once_hold: Set Once Hold;
    set_once_run: Set Once Run;
    set_retry_acquire: Set Retry Acquire;
    set_retry_hold: Set Retry Hold;
    set_retry_run: Set Retry Run;
    set_wait_acquire: Set Wait Acquire;
    set_wait_hold: Set Wait Hold;
    set_wait_run: Set Wait Run;
    fenced_once_acquire: Fenced Once Acquire;
    fenced_once_hold: Fenced Once Hold;
    fenced_once_run: Fenced Once Run;
    fenced_retry_acquire: Fenced Retry Acquire;
    fenced_retry_hold: Fenced Retry Hold;
    fenced_retry_run: Fenced Retry Run;
    fenced_wait_acquire: Fenced Wait Acquire;
    fenced_wait_hold: Fenced Wait Hold;
    fenced_wait_run: Fenced Wait Run;
    owned_once_acquire: Owned Once Acquire;
    owned_once_hold: Owned Once Hold;
    owned_once_run: Owned Once Run;
    owned_retry_acquire: Owned Retry Acquire;
    owned_retry_hold: Owned Retry Hold;
    owned_retry_run: Owned Retry Run;
    owned_wait_acquire: Owned Wait Acquire;
    owned_wait_hold: Owned Wait Hold;
    owned_wait_run: Owned Wait Run;
    fenced_set_once_acquire: FencedSet Once Acquire;
    fenced_set_retry_hold: FencedSet Retry Hold;
    fenced_set_wait_run: FencedSet Wait Run;
    owned_set_once_hold: OwnedSet Once Hold;
    owned_set_retry_run: OwnedSet Retry Run;
    owned_set_wait_acquire: OwnedSet Wait Acquire;
}

/// Nested owned holds under guards: the outer guard keeps the key past its TTL while an inner hold is taken and
/// released; the inner guard's release removes only its own hold; the key goes with the outer guard; another
/// owner is refused throughout.
#[test]
fn nested_owned_guards_keep_and_release_their_own_holds() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let (me, other) = (locks.owner().unwrap(), locks.owner().unwrap());
    let outer = locks.request("tree").ttl(TTL).owned(&me).hold().unwrap();
    let inner = locks.request("tree").ttl(TTL).owned(&me).hold().unwrap();
    thread::sleep(TTL * 2);
    assert!(!outer.is_lost() && !inner.is_lost());
    let e = locks
        .request("tree")
        .owned(&other)
        .once()
        .acquire()
        .unwrap_err();
    assert!(e.is_held(), "{e}");
    inner.release().expect("inner released");
    thread::sleep(TTL * 2);
    assert!(!outer.is_lost(), "{:?}", outer.lost());
    assert!(outer.renewals() >= 4, "{}", outer.renewals());
    let e = locks
        .request("tree")
        .owned(&other)
        .once()
        .acquire()
        .unwrap_err();
    assert!(e.is_held(), "{e}");
    outer.release().expect("outer released");
    let got = locks
        .request("tree")
        .owned(&other)
        .once()
        .acquire()
        .expect("free after the last hold");
    locks.unlock(got).unwrap();
}

/// An owned hold's extension never shortens the lease another hold of the same owner relies on.
#[test]
fn owned_extension_never_shortens_another_hold() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let me = locks.owner().unwrap();
    let long = locks
        .request("tree")
        .ttl(Duration::from_secs(20))
        .owned(&me)
        .acquire()
        .unwrap();
    let mut short = locks
        .request("tree")
        .ttl(Duration::from_secs(1))
        .owned(&me)
        .acquire()
        .unwrap();
    locks.extend(&mut short, Duration::from_secs(2)).unwrap();
    for t in pttls(&cluster, "tree") {
        assert!(t > 15_000, "the 20 s hold's lease was shortened: {t}");
    }
    locks.unlock(short).unwrap();
    locks.unlock(long).unwrap();
    assert_free(&cluster, Kind::Owned);
}

/// `run` reports a guard lost while the closure ran as `Error::LockLost`, not as the closure's value.
#[test]
fn run_reports_a_lost_guard() {
    let cluster = Cluster::start(3);
    let locks = locks::manager(cluster.urls(), config());
    let got = locks.request("job").ttl(TTL).run(|guard| {
        // Another holder's doing, as an operator's `DEL` would be: the key goes on every node.
        for n in cluster.nodes() {
            n.raw(&cmd(&["DEL", "job"]));
        }
        assert!(guard.wait_lost(Duration::from_secs(3)), "the loss is seen");
        "done"
    });
    match got {
        Err(Error::LockLost(report)) => assert_eq!(report.resource(), b"job"),
        other => panic!("a lost guard's closure must not look like success: {other:?}"),
    }
}
