//! Redlock members that are whole Redis Clusters, on real clusters started by the tests
//! (`tests/support/redis_cluster/`: `redis-server --cluster-enabled yes` on loopback, slots assigned by the test).
//!
//! - locking across three members of three masters each: every key lands on its slot's master in every
//!   member, a contender is refused, a guard renews; a semaphore's permits share the name's slot (a name that
//!   cannot have one is refused);
//! - plain members and a cluster member in one manager;
//! - `MOVED`: a slot migrated (with its keys) on every member while a guard holds and renews it; a contender
//!   whose maps are stale follows the redirections and is refused (the deliberate break, a `MOVED` counted as a
//!   grant, is caught here);
//! - `ASK`: a slot half-way through its migration: an absent key is set on the importing master after `ASKING`;
//! - masters restarted without their keys: their grants wait the restart window (judged by the master that made
//!   them, not by the member's first connection) while the member's other master counts;
//! - a failover that loses a grant: two members' masters killed before their (paused) replicas received the
//!   holder's key, the replicas promoted; with the restart guard the promoted masters' grants are quarantined
//!   and the mutual-exclusion checker finds no overlap; the control (guard off) finds the overlap.

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::net::cluster::key_slot;
use muxlock::{Config, Error, LockManager, Outcome};
use support::checker::{Hold, instant_ns, mono_ns, overlaps};
use support::locks::{manager, one_attempt, wait_until};
use support::redis_cluster::get_asking as get;
use support::wire::show;
use support::{Failover, Fault, FaultProxy, RedisCluster, RedisServer};

const ROUND: Duration = Duration::from_millis(500);
/// For guards: a guard's TTL must leave room for renewals (at least 7 round timeouts).
const GUARD_ROUND: Duration = Duration::from_millis(100);

/// Starts `count` clusters of `masters` masters at once; the first `with_replicas` get one replica per master.
fn clusters(count: usize, masters: usize, with_replicas: usize) -> Vec<RedisCluster> {
    thread::scope(|s| {
        let handles: Vec<_> = (0..count)
            .map(|i| {
                s.spawn(move || {
                    RedisCluster::builder(masters)
                        .replicas(usize::from(i < with_replicas))
                        .start()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a cluster"))
            .collect()
    })
}

#[track_caller]
fn held(result: muxlock::Result<muxlock::Lock>) {
    match result {
        Err(Error::Held(_)) => {}
        Err(e) => panic!("expected Held, got {e}"),
        Ok(l) => panic!(
            "expected Held, got the lock on {:?}",
            String::from_utf8_lossy(l.resource())
        ),
    }
}

#[test]
fn locks_across_three_cluster_members() {
    let cs = clusters(3, 3, 0);
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    let a = manager(urls.clone(), one_attempt(GUARD_ROUND));
    let b = manager(urls, one_attempt(ROUND));
    let mut masters_used = std::collections::BTreeSet::new();
    for i in 0..24 {
        let r = format!("invoice:{i}");
        let lock = a
            .request(&r)
            .ttl(Duration::from_secs(5))
            .once()
            .acquire()
            .expect("acquired");
        // Granted by a majority: the last member's copy may come just after.
        for c in &cs {
            let owner = c.owner_of(key_slot(r.as_bytes()));
            masters_used.insert(owner);
            wait_until(
                Duration::from_secs(2),
                &format!("{r} on its master"),
                || get(c, owner, &r).as_deref() == Some(lock.value().as_bytes()),
            );
        }
        held(b.request(&r).once().acquire());
        a.unlock(lock).expect("released");
        // Confirmed by a majority: the last member's delete may still be on its way.
        wait_until(Duration::from_secs(2), "released on every member", || {
            cs.iter()
                .all(|c| get(c, c.owner_of(key_slot(r.as_bytes())), &r).is_none())
        });
    }
    assert_eq!(
        masters_used.len(),
        3,
        "the resources spread over every master"
    );
    // A guard renews across members (renewals pipelined per member, split per master).
    let guards: Vec<_> = (0..6)
        .map(|i| {
            a.request(format!("job:{i}"))
                .ttl(Duration::from_millis(800))
                .once()
                .hold()
                .expect("guard")
        })
        .collect();
    // An owned hold's and a fenced lock's renewals name their derived keys in the resource's slot too.
    let me = a.owner().expect("an owner");
    let owned = a
        .request("otree")
        .owned(&me)
        .ttl(Duration::from_millis(800))
        .once()
        .hold()
        .expect("owned guard");
    let fenced = a
        .request("fjob")
        .fenced()
        .ttl(Duration::from_millis(800))
        .once()
        .hold()
        .expect("fenced guard");
    thread::sleep(Duration::from_millis(1_500));
    for g in guards.iter().chain([&owned, &fenced]) {
        assert!(!g.is_lost(), "renewed past two leases: {:?}", g.lost());
    }
    for i in 0..6 {
        held(b.request(format!("job:{i}")).once().acquire());
    }
    for g in guards.into_iter().chain([owned, fenced]) {
        g.release().expect("released");
    }
    // A set on cluster members: one slot or refused before anything is sent.
    let set = a
        .request_all(["{order:7}:a", "{order:7}:b"])
        .once()
        .acquire()
        .expect("one slot");
    a.unlock(set).expect("released");
    match a.request_all(["x", "y"]).once().acquire() {
        Err(Error::Config(msg)) => assert!(msg.to_string().contains("hash slot"), "{msg}"),
        other => panic!("a set over two slots: {other:?}"),
    }
    // Fenced and owned locks keep their derived keys in the resource's slot: `muxlock:fence:{ledger}`.
    let first = a
        .request("ledger")
        .fenced()
        .once()
        .acquire()
        .expect("fenced");
    let t1 = first.token().expect("a token");
    for c in &cs {
        let owner = c.owner_of(key_slot(b"ledger"));
        wait_until(Duration::from_secs(2), "the counter beside the key", || {
            get(c, owner, "muxlock:fence:{ledger}").is_some()
        });
    }
    a.unlock(first).expect("released");
    let second = b
        .request("ledger")
        .fenced()
        .once()
        .acquire()
        .expect("fenced");
    assert!(second.token().expect("a token") > t1, "tokens grow");
    b.unlock(second).expect("released");
    let outer = a
        .request("tree")
        .owned(&me)
        .once()
        .acquire()
        .expect("owned");
    let inner = a
        .request("tree")
        .owned(&me)
        .once()
        .acquire()
        .expect("owned again");
    held(b.request("tree").once().acquire());
    a.unlock(inner).expect("released");
    held(b.request("tree").once().acquire());
    a.unlock(outer).expect("released");
    let free = b.request("tree").once().acquire().expect("free");
    b.unlock(free).expect("released");
    // A semaphore on cluster members: every permit lies in the name's slot, so one script offers them all.
    let p = a
        .request("pool")
        .permits(2)
        .once()
        .acquire()
        .expect("a permit");
    let q = b
        .request("pool")
        .permits(2)
        .once()
        .acquire()
        .expect("the other");
    assert_ne!(p.permit(), q.permit());
    held(a.request("pool").permits(2).once().acquire());
    for lock in [&p, &q] {
        assert_eq!(key_slot(lock.resource()), key_slot(b"pool"));
        let key = String::from_utf8_lossy(lock.resource()).into_owned();
        // Granted by a majority: the third member's copy may come just after.
        for c in &cs {
            wait_until(
                Duration::from_secs(2),
                &format!("{key} on every member"),
                || get(c, c.owner_of(key_slot(b"pool")), &key).is_some(),
            );
        }
    }
    a.unlock(p).expect("released");
    b.unlock(q).expect("released");
    match a.request("a{b").permits(2).once().acquire() {
        Err(Error::Config(msg)) => assert!(msg.to_string().contains("one slot"), "{msg}"),
        other => panic!("permits of a name with a brace and no tag: {other:?}"),
    }
    // A read-write lock on cluster members: its writer, intent and reader keys lie in the name's slot, so one
    // script reads them all; readers share, the writer excludes them.
    let r = a.request("doc").read().once().acquire().expect("a reader");
    let s = b
        .request("doc")
        .read()
        .once()
        .acquire()
        .expect("another reader");
    held(b.request("doc").write().once().acquire());
    for lock in [&r, &s] {
        assert_eq!(key_slot(lock.resource()), key_slot(b"doc"));
    }
    a.unlock(r).expect("released");
    b.unlock(s).expect("released");
    let w = b
        .request("doc")
        .write()
        .once()
        .acquire()
        .expect("the writer");
    assert_eq!(key_slot(w.resource()), key_slot(b"doc"));
    held(a.request("doc").read().once().acquire());
    b.unlock(w).expect("released");
    match a.request("a{b").write().once().acquire() {
        Err(Error::Config(msg)) => assert!(msg.to_string().contains("one slot"), "{msg}"),
        other => panic!("a read-write lock of a name with a brace and no tag: {other:?}"),
    }
    // A batch: split per master inside each member (one write per connection), released one lock at a time.
    let names: Vec<String> = (0..20).map(|i| format!("batch:{i}")).collect();
    let mine: Vec<_> = a
        .try_lock_batch(&names, Duration::from_secs(5))
        .into_iter()
        .map(|r| r.expect("no error").expect("granted"))
        .collect();
    for r in b.try_lock_batch(&names, Duration::from_secs(5)) {
        assert!(r.expect("no error").is_none(), "held by the first batch");
    }
    for released in a.unlock_batch(mine) {
        released.expect("released");
    }
    wait_until(
        Duration::from_secs(2),
        "the batch released on every member",
        || {
            cs.iter().all(|c| {
                names
                    .iter()
                    .all(|n| get(c, c.owner_of(key_slot(n.as_bytes())), n).is_none())
            })
        },
    );
    // Waiting on cluster members: in this process' line (no queue on the nodes), woken at the holder's expiry.
    let short = a
        .request("w")
        .ttl(Duration::from_millis(800))
        .once()
        .acquire()
        .expect("held");
    let started = Instant::now();
    let waited = b
        .request("w")
        .wait(Duration::from_secs(5))
        .acquire()
        .expect("after the expiry");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    b.unlock(waited).expect("released");
    drop(short);
    // A brace without a hash tag: no way to name its counter in its slot.
    assert!(matches!(
        a.request("a{b").fenced().once().acquire(),
        Err(Error::Config(_))
    ));
}

#[test]
fn plain_and_cluster_members_mix() {
    let cs = clusters(1, 3, 0);
    let (mut p0, p1) = (RedisServer::start(), RedisServer::start());
    let urls = vec![p0.url(), cs[0].seed_url(), p1.url()];
    let a = manager(urls.clone(), one_attempt(ROUND));
    let b = manager(urls, one_attempt(ROUND));
    let lock = a
        .request("mixed")
        .ttl(Duration::from_secs(5))
        .once()
        .acquire()
        .expect("acquired");
    let owner = cs[0].owner_of(key_slot(b"mixed"));
    assert_eq!(
        get(&cs[0], owner, "mixed").as_deref(),
        Some(lock.value().as_bytes())
    );
    let plain = p1.raw(&support::cmd(&["GET", "mixed"]));
    assert!(
        plain.ends_with(&[lock.value().as_bytes(), b"\r\n"].concat()),
        "{}",
        show(&plain)
    );
    held(b.request("mixed").once().acquire());
    a.unlock(lock).expect("released");
    // One plain member down: the cluster member and the other plain one are a majority.
    p0.kill();
    let lock = b.request("mixed").once().acquire().expect("2 of 3");
    b.unlock(lock).expect("released");
}

/// Two of a cluster member's three masters killed and back at once without their keys: the restart guard judges
/// each grant by the master that made it, not by the member's first connection. Grants from the two restarted
/// masters are quarantined for the restart window from the kill (never counted before it), the untouched
/// master's grants count meanwhile, and the restarted ones count again after the window. The replicas sync at
/// once (`repl-diskless-sync-delay 0`), so the replication check (`WAIT`) does not refuse those grants first.
/// Plain member 1 refuses every name (another value is set there), so every lock needs the cluster member's vote.
#[test]
fn grants_of_a_cluster_members_restarted_masters_wait_the_window_and_the_others_count() {
    let mut c = RedisCluster::builder(3)
        .replicas(1)
        .node_timeout(Duration::from_secs(1))
        .server(RedisServer::builder().args(["--repl-diskless-sync-delay", "0"]))
        .start();
    let (p1, p2) = (RedisServer::start(), RedisServer::start());
    let window = Duration::from_secs(4);
    let ttl = Duration::from_secs(1);
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(ROUND)
        .with_restart_window(window);
    let a = manager(vec![c.seed_url(), p1.url(), p2.url()], config);
    let mut n = 0;
    // One attempt on a fresh name in shard `s`'s slots, refused by plain member 1: the cluster member's outcome.
    let mut ask = |c: &RedisCluster, s: usize| {
        let name = loop {
            n += 1;
            let name = format!("restart-{n}");
            if c.shard_of(key_slot(name.as_bytes())) == s {
                break name;
            }
        };
        p1.raw(&support::cmd(&["SET", &name, "other", "PX", "10000"]));
        match a.request(&name).ttl(ttl).once().acquire() {
            Ok(lock) => {
                let _ = a.unlock(lock);
                Outcome::Granted
            }
            Err(e) => e
                .report()
                .map_or(Outcome::NotSent, |r| r.nodes()[0].1.clone()),
        }
    };
    // Every master older than the window first.
    wait_until(Duration::from_secs(30), "every shard counted", || {
        let all = (0..3).all(|s| ask(&c, s) == Outcome::Granted);
        if !all {
            thread::sleep(Duration::from_millis(100));
        }
        all
    });
    let restarted = [c.master_index(0), c.master_index(1)];
    let killed = Instant::now();
    for i in restarted {
        c.node_mut(i).kill();
    }
    for i in restarted {
        c.node_mut(i).restart();
    }
    // Per shard: quarantined grants seen, and when the first counted grant came (from the kill).
    let mut quarantined = [0; 3];
    let mut counted: [Option<Duration>; 3] = [None; 3];
    // Whether the member's stats said, while a master was quarantined, how long until it counts.
    let mut told_when = false;
    while counted.iter().any(Option::is_none) && killed.elapsed() < window + Duration::from_secs(20)
    {
        for s in 0..3 {
            match ask(&c, s) {
                Outcome::Quarantined => {
                    quarantined[s] += 1;
                    told_when |= a.stats().nodes[0].counted_in.is_some();
                }
                Outcome::Granted => {
                    counted[s].get_or_insert(killed.elapsed());
                }
                _ => {}
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
    println!(
        "quarantined per shard {quarantined:?}, first counted grant after the kill {counted:?}"
    );
    for s in 0..2 {
        assert!(
            quarantined[s] > 0,
            "shard {s}'s restarted master: no grant quarantined"
        );
        let at = counted[s].expect("the restarted master counts again after the window");
        assert!(
            at >= window,
            "shard {s}'s restarted master counted {at:?} after its kill"
        );
    }
    assert_eq!(
        quarantined[2], 0,
        "the untouched master's grants were quarantined"
    );
    let at = counted[2].expect("the untouched master's grants count");
    assert!(
        at < window,
        "the untouched master counted only {at:?} after the kill"
    );
    // The member's stats cover all its masters, not its first connection only.
    let member = &a.stats().nodes[0];
    assert!(told_when, "no counted_in while a master was quarantined");
    assert!(member.restarts >= 2, "restarts seen: {member:?}");
    assert!(
        member.net.connects >= 5,
        "connects over its masters (3 at first, 2 again): {member:?}"
    );
}

/// A scale-out: a master added to a cluster member after the manager was built, and given the slot of the
/// lock's key. The member's vote comes back on its own: the `MOVED` to a node its map never showed is a failed
/// vote that asks for a new map, which dials the node on one of the member's vacant connections; as a master
/// the table never knew it is quarantined for the restart window (as a promoted replica), then counts. The
/// other plain member refuses meanwhile, so the lock needs that vote.
#[test]
fn a_master_added_after_build_gets_the_members_vote_after_its_window() {
    let mut c = RedisCluster::start(2);
    let p1 = RedisServer::start();
    let p2 = RedisServer::start();
    let proxy2 = FaultProxy::start(p2.addr());
    let ttl = Duration::from_millis(1_500);
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(ROUND)
        .with_restart_window(ttl);
    let a = manager(vec![c.seed_url(), p1.url(), proxy2.url()], config);
    let key = "scale-out";
    let take = || {
        let got = a.request(key).ttl(ttl).once().acquire();
        if got.is_err() {
            thread::sleep(Duration::from_millis(100));
        }
        got.map(|l| a.unlock(l)).is_ok()
    };
    // Every node older than the window, and the member's vote needed from here on.
    wait_until(Duration::from_secs(10), "a first lock", take);
    proxy2.set(Fault::Refuse);
    wait_until(
        Duration::from_secs(10),
        "a lock with member 2 refusing",
        take,
    );
    let shard = c.add_master();
    let slot = key_slot(key.as_bytes());
    c.migrate_slot(slot, shard);
    let moved = Instant::now();
    wait_until(Duration::from_secs(15), "the new master's vote", take);
    let took = moved.elapsed();
    assert!(
        took >= ttl,
        "the new master counted {took:?} after it took the slot, within the window"
    );
    // The lock is on the new master (the same lease: a longer one would widen the window).
    let lock = a.request(key).ttl(ttl).once().acquire().expect("acquired");
    let new = c.master_index(shard);
    assert_eq!(get(&c, new, key).as_deref(), Some(lock.value().as_bytes()));
    a.unlock(lock).expect("released");
}

#[test]
fn moved_during_a_migration_while_a_guard_holds_and_renews() {
    let mut cs = clusters(3, 3, 0);
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    let a = manager(urls.clone(), one_attempt(GUARD_ROUND));
    // Built before the migration: its maps go stale, so every one of its requests meets a MOVED.
    let b = manager(urls, one_attempt(ROUND));
    let r = "moving";
    let slot = key_slot(r.as_bytes());
    let guard = a
        .request(r)
        .ttl(Duration::from_millis(900))
        .once()
        .hold()
        .expect("guard");
    for c in &mut cs {
        let to = (c.shard_of(slot) + 1) % c.shard_count();
        assert_eq!(
            c.migrate_slot(slot, to),
            1,
            "the lock key moves with the slot"
        );
    }
    // The contender's maps are stale: each member answers MOVED, which it follows to the new master, where
    // the holder's key is (a MOVED counted as a grant would give it the lock here).
    held(b.request(r).once().acquire());
    // Renewals (every 300 ms) meet MOVED on every member, follow it, and keep the lock.
    thread::sleep(Duration::from_millis(1_200));
    assert!(
        !guard.is_lost(),
        "renewed across the migration: {:?}",
        guard.lost()
    );
    held(b.request(r).once().acquire());
    guard.release().expect("released");
    let lock = b
        .request(r)
        .once()
        .acquire()
        .expect("free after the release");
    // On a majority of members' new masters. Not necessarily all: the guard's release was confirmed by a
    // majority, and on a loaded machine the last member's delete may meet its `MOVED` after the round was
    // decided, which is not followed (README "Cluster members", `net/cluster`'s doc): that key ends with its
    // lease, and this SET NX found it there.
    wait_until(
        Duration::from_secs(2),
        "on the new master of a majority",
        || {
            let on = |c: &&RedisCluster| {
                get(c, c.owner_of(slot), r).as_deref() == Some(lock.value().as_bytes())
            };
            cs.iter().filter(on).count() >= 2
        },
    );
    b.unlock(lock).expect("released");
}

#[test]
fn ask_mid_migration_sets_an_absent_key_on_the_importing_master() {
    let mut cs = clusters(3, 3, 0);
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    let a = manager(urls.clone(), one_attempt(ROUND));
    let b = manager(urls, one_attempt(ROUND));
    let r = "asked";
    let slot = key_slot(r.as_bytes());
    let migrations: Vec<_> = cs
        .iter()
        .map(|c| c.begin_migration(slot, (c.shard_of(slot) + 1) % c.shard_count()))
        .collect();
    let lock = a
        .request(r)
        .ttl(Duration::from_secs(5))
        .once()
        .acquire()
        .expect("acquired after ASK");
    // An acquisition returns once a majority granted: a member whose `ASK` is read after that is not followed
    // (seen under load), and has the key nowhere. So its value on a majority's importing masters, and on no
    // migrating master.
    let mut set = 0;
    for (c, m) in cs.iter().zip(&migrations) {
        assert_eq!(get(c, m.from, r), None, "not on the migrating master");
        if let Some(v) = get(c, m.to, r) {
            assert_eq!(v, lock.value().as_bytes(), "its own value");
            set += 1;
        }
    }
    assert!(set >= 2, "set on {set} importing masters");
    held(b.request(r).once().acquire());
    a.unlock(lock).expect("released after ASK");
    // A release returns once a majority confirmed it: a member whose ASK came after that is not followed (no
    // one reads the round any more), and its key ends with its lease. So a majority, not every member.
    let freed = cs
        .iter()
        .zip(&migrations)
        .filter(|(c, m)| get(c, m.to, r).is_none())
        .count();
    assert!(freed >= 2, "released on {freed} importing masters");
    for (c, m) in cs.iter_mut().zip(migrations) {
        c.finish_migration(m);
    }
    let lock = b.request(r).once().acquire().expect("after the migration");
    b.unlock(lock).expect("released");
}

/// The mutual-exclusion checker over cluster members while the resources' slots migrate back and forth on
/// every member (`ASK` while half-way, `MOVED` after): four workers, each with its own manager, compete for three
/// resources; every hold is recorded as `[acquired, min(valid_until, unlock)]`; no two may overlap.
#[test]
fn no_two_holders_while_slots_migrate() {
    let mut cs = clusters(3, 3, 0);
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    let resources = ["mx:a", "mx:b", "mx:c"];
    let recorder = support::checker::Recorder::default();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let migrations = thread::scope(|s| {
        for w in 0..4 {
            let (urls, recorder, stop) = (urls.clone(), recorder.clone(), &stop);
            s.spawn(move || {
                let m = manager(urls, one_attempt(ROUND));
                let mut i = w;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let r = resources[i % resources.len()];
                    if let Ok(l) = m
                        .request(r)
                        .ttl(Duration::from_millis(400))
                        .once()
                        .acquire()
                    {
                        let start = mono_ns();
                        thread::sleep(Duration::from_millis(3));
                        let end = mono_ns().min(instant_ns(l.valid_until()));
                        recorder.record(Hold {
                            resource: r.into(),
                            holder: format!("w{w}"),
                            start,
                            end,
                        });
                        let _ = m.unlock(l);
                    }
                }
            });
        }
        let mut moved = 0;
        for round in 0..2 {
            for r in resources {
                let slot = key_slot(r.as_bytes());
                for c in cs.iter_mut() {
                    let to = (c.shard_of(slot) + 1 + round) % c.shard_count();
                    let m = c.begin_migration(slot, to);
                    thread::sleep(Duration::from_millis(30)); // ASK for absent keys meanwhile
                    c.move_slot_keys(&m);
                    thread::sleep(Duration::from_millis(30));
                    c.finish_migration(m);
                    moved += 1;
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        moved
    });
    let holds = recorder.holds();
    eprintln!("{} holds over {migrations} migrations", holds.len());
    assert_eq!(migrations, 18);
    assert!(holds.len() > 50, "too few holds to judge: {}", holds.len());
    let found = overlaps(&holds);
    assert!(found.is_empty(), "two holders: {found:?}");
}

/// The replication check waits for the shard's replicas: with the replicas of two members' masters paused and
/// cut off, a grant those masters make would be lost by a failover to them, so it does not count and no lock
/// is granted; resumed, the replicas catch up and locks are granted again.
#[test]
fn a_grant_counts_only_once_the_shards_replicas_have_it() {
    let mut cs = clusters(3, 1, 3);
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    let ttl = Duration::from_secs(1);
    let config = Config::default()
        .with_retry_count(0)
        .with_round_timeout(ROUND)
        .with_restart_window(ttl);
    let a = manager(urls, config);
    let r = "replicated";
    let take = || {
        let got = a.request(r).ttl(ttl).once().acquire();
        if got.is_err() {
            thread::sleep(Duration::from_millis(100));
        }
        got.map(|l| a.unlock(l)).is_ok()
    };
    // The nodes older than the window (the guard's uptime rule) first.
    wait_until(Duration::from_secs(15), "a first lock", take);
    for c in cs.iter_mut().take(2) {
        let (master, replica) = (c.master_index(0), c.replica_indexes(0)[0]);
        c.node_mut(replica).pause();
        let killed = c.command(master, &["CLIENT", "KILL", "TYPE", "replica"]);
        assert_eq!(killed, b":1\r\n", "{}", show(&killed));
    }
    let err = a
        .request(r)
        .ttl(ttl)
        .once()
        .acquire()
        .expect_err("no grant without the replicas");
    assert!(err.to_string().contains("replication check"), "{err}");
    for c in cs.iter_mut().take(2) {
        let replica = c.replica_indexes(0)[0];
        c.node_mut(replica).resume();
    }
    wait_until(
        Duration::from_secs(15),
        "a lock once the replicas are back",
        take,
    );
}

/// A holder's grant lost in a failover on two of three members: the replicas were paused (so never got the
/// key) when their masters were killed, then promoted (the holder's grants wait for no replica: with the
/// replication check, a grant the replica lacks would not have counted). A contender's grants from the promoted masters must not
/// count while the holder's lease runs: `guarded` with the restart guard on (0 overlaps), and the control with
/// it off must see the overlap (the fault struck).
fn failover_contender(guarded: bool) -> (Vec<(Hold, Hold)>, [bool; 2]) {
    let mut cs = clusters(3, 2, 2);
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    let ttl = Duration::from_secs(3);
    let config = |guard: bool| {
        Config::default()
            .with_retry_count(0)
            .with_round_timeout(ROUND)
            .with_restart_guard(guard)
            .with_restart_window(ttl)
    };
    // The holder's grants do not wait for the replicas (its restart guard, and with it the replication check's
    // `WAIT`, off: a client that makes grants a failover can lose, as any client without the check does); the
    // contenders' guard must not count the promoted replicas that lost them.
    let a = manager(urls.clone(), config(false));
    let b = manager(urls.clone(), config(guarded));
    let r = "failing";
    let slot = key_slot(r.as_bytes());
    let acquired_ns;
    // The restart guard counts nodes up longer than the window (a few seconds after the clusters started).
    let lock = {
        let mut got = None;
        wait_until(Duration::from_secs(20), "the nodes to count", || {
            got = a.request(r).ttl(ttl).once().acquire().ok();
            if got.is_none() {
                thread::sleep(Duration::from_millis(200));
            }
            got.is_some()
        });
        let first = got.expect("acquired");
        a.unlock(first).expect("released");
        // Both managers have used the TTL now (their windows cover it).
        let _ = b
            .request("warm")
            .ttl(ttl)
            .once()
            .acquire()
            .map(|l| b.unlock(l));
        let s: Vec<usize> = cs.iter().take(2).map(|c| c.shard_of(slot)).collect();
        // Each replica is cut off its master and paused: it cannot reconnect, so never gets what follows.
        for (c, &s) in cs.iter_mut().zip(&s) {
            let (master, replica) = (c.master_index(s), c.replica_indexes(s)[0]);
            c.node_mut(replica).pause();
            let killed = c.command(master, &["CLIENT", "KILL", "TYPE", "replica"]);
            assert_eq!(killed, b":1\r\n", "{}", show(&killed));
        }
        let lock = a
            .request(r)
            .ttl(ttl)
            .once()
            .acquire()
            .expect("the holder's lock");
        acquired_ns = mono_ns();
        for (c, &s) in cs.iter_mut().zip(&s) {
            let (master, replica) = (c.master_index(s), c.replica_indexes(s)[0]);
            c.node_mut(master).kill();
            c.node_mut(replica).resume();
        }
        for (c, &s) in cs.iter_mut().zip(&s) {
            let new = c.fail_over(s, Failover::Takeover);
            assert_eq!(
                get(c, new, r),
                None,
                "the promoted replica never got the grant"
            );
        }
        lock
    };
    let holder = Hold {
        resource: r.into(),
        holder: "a".into(),
        start: acquired_ns,
        end: instant_ns(lock.valid_until()),
    };
    // A contender built after the failover (it reads the promoted masters' INFO) and the one built before
    // (it learns of the failover from failed connections and a new map) try until the holder's lease ends.
    let c = manager(urls, config(guarded));
    let mut holds = vec![holder];
    let until = lock.valid_until();
    let mut tries = 0;
    let mut quarantined = [false; 2];
    while Instant::now() < until && tries < 200 {
        tries += 1;
        for (i, (name, m)) in [("b", &b), ("c", &c)].into_iter().enumerate() {
            match m.request(r).ttl(ttl).once().acquire() {
                Ok(l) => {
                    holds.push(Hold {
                        resource: r.into(),
                        holder: name.into(),
                        start: mono_ns(),
                        end: instant_ns(l.valid_until()),
                    });
                    let _ = m.unlock(l);
                }
                Err(Error::Held(report) | Error::Quorum(report)) => {
                    // Grants of the promoted masters, not counted.
                    let n = report
                        .nodes()
                        .iter()
                        .filter(|(_, o)| *o == Outcome::Quarantined)
                        .count();
                    quarantined[i] |= n == 2;
                }
                Err(e) => panic!("{name}: {e}"),
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
    drop(cs);
    (overlaps(&holds), quarantined)
}

#[test]
fn a_failover_that_loses_a_grant_gives_no_second_holder() {
    let (found, quarantined) = failover_contender(true);
    assert!(found.is_empty(), "two holders: {found:?}");
    // Both ways of learning of the failover were exercised: the manager that saw it (a new map after failed
    // connections) and the one built after it (the promoted masters' INFO).
    assert_eq!(
        quarantined,
        [true, true],
        "the promoted masters' grants were not counted"
    );
}

#[test]
fn control_without_the_restart_guard_the_failover_gives_two_holders() {
    let (found, _) = failover_contender(false);
    assert!(
        !found.is_empty(),
        "the failover did not strike: the test proves nothing"
    );
}

/// The async verbs over cluster members: the routed round polled by tasks (`poll_next`), redirections
/// included (an `ASK` mid-migration, then `MOVED` after it).
#[test]
fn async_verbs_route_and_follow_redirections() {
    let mut cs = clusters(3, 3, 0);
    let urls: Vec<String> = cs.iter().map(RedisCluster::seed_url).collect();
    let a = manager(urls.clone(), one_attempt(ROUND));
    let b = manager(urls, one_attempt(ROUND));
    let rt = support::rt::two_workers();
    let r = "async";
    let slot = key_slot(r.as_bytes());
    let migrations: Vec<_> = cs
        .iter()
        .map(|c| c.begin_migration(slot, (c.shard_of(slot) + 1) % c.shard_count()))
        .collect();
    rt.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let a = a.clone();
                tokio::spawn(async move {
                    let name = format!("task:{i}");
                    let lock = a
                        .request(&name)
                        .once()
                        .acquire_async()
                        .await
                        .expect("acquired");
                    a.unlock_async(lock).await.expect("released");
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("a task");
        }
        let lock = a
            .request(r)
            .ttl(Duration::from_secs(5))
            .once()
            .acquire_async()
            .await;
        let lock = lock.expect("acquired after ASK");
        assert!(matches!(
            b.request(r).once().acquire_async().await,
            Err(Error::Held(_))
        ));
        a.unlock_async(lock).await.expect("released after ASK");
    });
    for (c, m) in cs.iter_mut().zip(migrations) {
        c.finish_migration(m);
    }
    rt.block_on(async {
        let lock = b
            .request(r)
            .once()
            .acquire_async()
            .await
            .expect("after MOVED");
        b.unlock_async(lock).await.expect("released");
    });
}

#[allow(dead_code)]
fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn cluster_urls_and_the_builder_call() {
    assert_send_sync::<LockManager>();
    // A cluster whose seeds do not answer builds (its map is read later), and its votes fail.
    let locks = LockManager::builder()
        .cluster(["127.0.0.1:1"])
        .node("127.0.0.1:2")
        .node("127.0.0.1:3")
        .config(
            one_attempt(Duration::from_millis(50)).with_connect_timeout(Duration::from_millis(50)),
        )
        .build()
        .expect("built");
    assert!(matches!(
        locks.request("r").once().acquire(),
        Err(Error::Quorum(_))
    ));
}
