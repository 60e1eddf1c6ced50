//! Read-write locks (`Request::read`, `Request::write`) on real redis-server nodes: readers share, a writer
//! excludes readers and writers, a reader excludes a writer, crossed majorities refused both ways, a waiting
//! writer gets in while readers keep coming (the intent key), guards, waiting, the async form, and the
//! combinations refused before anything is sent.

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Access, Error, intent_key, reader_key, writer_key};
use support::Cluster;
use support::locks::{manager_of, one_attempt, wait_until};
use support::wire::cmd;

fn steady() -> muxlock::Config {
    one_attempt(Duration::from_secs(1))
}

fn text(key: Vec<u8>) -> String {
    String::from_utf8(key).expect("an ASCII name")
}

fn held<T: std::fmt::Debug>(r: muxlock::Result<T>) {
    assert!(matches!(r, Err(Error::Held(_))), "{r:?}");
}

#[test]
fn readers_share_the_lock_each_in_a_slot_of_its_own() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let r = locks.request("doc").read().once().acquire();
            r.expect("a reader beside readers")
        })
        .collect();
    let mut slots: Vec<&[u8]> = readers.iter().map(|r| r.resource()).collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), 3);
    for r in &readers {
        assert_eq!(r.access(), Some(Access::Read));
        assert_eq!(r.permit(), None);
    }
    assert_eq!(readers[0].resource(), reader_key(b"doc", 0));
    for r in readers {
        locks.unlock(r).expect("released");
    }
}

#[test]
fn a_writer_excludes_readers_and_writers() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let writer = locks
        .request("doc")
        .write()
        .once()
        .acquire()
        .expect("the writer");
    assert_eq!(writer.access(), Some(Access::Write));
    assert_eq!(writer.resource(), writer_key(b"doc"));
    held(locks.request("doc").read().once().acquire());
    held(locks.request("doc").write().once().acquire());
    // A refused reader left no slot behind.
    for node in cluster.nodes() {
        let got = node.raw(&cmd(&["EXISTS", &text(reader_key(b"doc", 0))]));
        assert_eq!(got, b":0\r\n");
    }
    locks.unlock(writer).expect("released");
    let reader = locks.request("doc").read().once().acquire();
    locks
        .unlock(reader.expect("a reader once the writer left"))
        .expect("released");
}

/// Whether each node of `cluster` has `key`.
fn on_every_node(cluster: &Cluster, key: &[u8], present: bool) -> bool {
    let want: &[u8] = match present {
        true => b":1\r\n",
        false => b":0\r\n",
    };
    let key = text(key.to_vec());
    cluster
        .nodes()
        .iter()
        .all(|n| n.raw(&cmd(&["EXISTS", &key])) == want)
}

/// A reader refuses a writer. While the writer asks (it waits), its intent is marked on every node and refuses
/// new readers; when the reader leaves, the writer is granted and deletes the intent.
#[test]
fn a_waiting_writer_s_intent_refuses_new_readers_until_it_is_granted() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let reader = locks
        .request("doc")
        .read()
        .once()
        .acquire()
        .expect("a reader");
    thread::scope(|s| {
        let writer = s.spawn(|| {
            locks
                .request("doc")
                .write()
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(5))
                .acquire()
        });
        wait_until(
            Duration::from_secs(2),
            "the writer's intent on every node",
            || on_every_node(&cluster, &intent_key(b"doc"), true),
        );
        assert!(
            on_every_node(&cluster, &writer_key(b"doc"), false),
            "a refused writer keeps no writer key"
        );
        held(locks.request("doc").read().once().acquire());
        locks.unlock(reader).expect("released");
        let writer = writer
            .join()
            .expect("the writer's thread")
            .expect("the writer once the reader left");
        assert!(
            on_every_node(&cluster, &intent_key(b"doc"), false),
            "a granted writer deletes the intent"
        );
        locks.unlock(writer).expect("released");
    });
}

/// A writer that gives up withdraws its intent: refused once (`once`, and with retries), out of waiting time,
/// or its future dropped mid-wait, it leaves no intent key, and the next reader gets in at once, not when the
/// writer's 30 s lease would have ended.
#[test]
fn a_writer_that_gives_up_withdraws_its_intent_and_readers_get_in() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let retrying = manager_of(&cluster, steady().with_retry_count(2));
    let first = locks
        .request("doc")
        .read()
        .once()
        .acquire()
        .expect("a reader");
    let gone = |how: &str| {
        wait_until(
            Duration::from_secs(2),
            &format!("no intent after a writer {how}"),
            || on_every_node(&cluster, &intent_key(b"doc"), false),
        );
        assert!(on_every_node(&cluster, &writer_key(b"doc"), false));
        let reader = locks.request("doc").read().once().acquire();
        locks
            .unlock(reader.unwrap_or_else(|e| panic!("a reader after a writer {how}: {e}")))
            .expect("released");
    };
    let ttl = Duration::from_secs(30);
    held(locks.request("doc").write().ttl(ttl).once().acquire());
    gone("refused once");
    held(retrying.request("doc").write().ttl(ttl).acquire());
    gone("refused with retries");
    held(
        locks
            .request("doc")
            .write()
            .ttl(ttl)
            .wait(Duration::from_millis(300))
            .acquire(),
    );
    gone("out of waiting time");
    let rt = support::rt::current_thread();
    rt.block_on(async {
        let asked = locks
            .request("doc")
            .write()
            .ttl(ttl)
            .wait(Duration::from_secs(5))
            .acquire_async();
        let dropped = tokio::time::timeout(Duration::from_millis(300), asked).await;
        assert!(dropped.is_err(), "{dropped:?}");
    });
    gone("dropped mid-wait");
    locks.unlock(first).expect("released");
}

/// Three nodes. A writer's key on nodes 0 and 1 (a majority): a reader gets a slot only on node 2, refused, and
/// that slot is given back. Reader slots on nodes 1 and 2: a writer is granted only on node 0, refused, and that
/// writer key released.
#[test]
fn crossed_majorities_are_refused_both_ways() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let writer = text(writer_key(b"a"));
    for node in [0, 1] {
        let reply = cluster
            .node(node)
            .raw(&cmd(&["SET", &writer, "W", "PX", "30000"]));
        assert_eq!(reply, b"+OK\r\n");
    }
    held(locks.request("a").read().once().acquire());
    wait_until(Duration::from_secs(2), "node 2's slot given back", || {
        cluster
            .node(2)
            .raw(&cmd(&["EXISTS", &text(reader_key(b"a", 0))]))
            == b":0\r\n"
    });
    let slot = text(reader_key(b"b", 5));
    for node in [1, 2] {
        let reply = cluster
            .node(node)
            .raw(&cmd(&["SET", &slot, "R", "PX", "30000"]));
        assert_eq!(reply, b"+OK\r\n");
    }
    held(locks.request("b").write().once().acquire());
    wait_until(
        Duration::from_secs(2),
        "node 0's writer key released",
        || {
            cluster
                .node(0)
                .raw(&cmd(&["EXISTS", &text(writer_key(b"b"))]))
                == b":0\r\n"
        },
    );
}

/// Readers keep coming: a new reader every 50 ms, each holding 300 ms, so that some reader holds at every
/// instant. A writer waiting for the name gets in anyway, within a few of the readers' holds: its first refused
/// attempt marks its intent, new readers are refused, the readers in finish. Readers are refused while the
/// writer waits and holds, and come back after it leaves (three of them, within 3 s of its release).
#[test]
fn a_waiting_writer_gets_in_while_readers_keep_coming() {
    let cluster = Cluster::start(3);
    let readers = manager_of(&cluster, steady());
    let writers = manager_of(&cluster, steady());
    use std::sync::atomic::{AtomicBool, Ordering};
    let released = AtomicBool::new(false);
    let (refused, back) = thread::scope(|s| {
        let stream = s.spawn(|| {
            let (mut holding, mut refused, mut back) = (Vec::new(), 0, 0);
            let mut until = Instant::now() + Duration::from_secs(10);
            let mut after = false;
            while back < 3 && Instant::now() < until {
                if !after && released.load(Ordering::Relaxed) {
                    after = true;
                    until = until.min(Instant::now() + Duration::from_secs(3));
                }
                match readers.request("feed").read().once().acquire() {
                    Ok(r) => {
                        back += usize::from(after);
                        holding.push((Instant::now(), r));
                    }
                    Err(Error::Held(_)) => refused += 1,
                    Err(e) => panic!("{e}"),
                }
                let now = Instant::now();
                while holding
                    .first()
                    .is_some_and(|(at, _)| now.duration_since(*at) >= Duration::from_millis(300))
                {
                    let (_, r) = holding.remove(0);
                    readers.unlock(r).expect("released");
                }
                thread::sleep(Duration::from_millis(50));
            }
            for (_, r) in holding {
                readers.unlock(r).expect("released");
            }
            (refused, back)
        });
        // Let the stream fill up first: several readers hold when the writer asks.
        thread::sleep(Duration::from_millis(500));
        let asked = Instant::now();
        let writer = writers
            .request("feed")
            .write()
            .wait(Duration::from_secs(5))
            .acquire()
            .expect("the writer, in spite of the readers");
        let waited = asked.elapsed();
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        thread::sleep(Duration::from_millis(300));
        writers.unlock(writer).expect("released");
        released.store(true, Ordering::Relaxed);
        stream.join().expect("the readers")
    });
    assert!(refused > 0, "no reader was refused");
    assert_eq!(back, 3, "readers did not come back after the writer");
}

#[test]
fn guarded_readers_and_writers_are_renewed_and_exclude_each_other() {
    let cluster = Cluster::start(3);
    // Rounds short enough for a 2 s guard (renewed every 2/3 s).
    let locks = manager_of(&cluster, one_attempt(Duration::from_millis(200)));
    let ttl = Duration::from_secs(2);
    let a = locks.request("g").read().ttl(ttl).hold().expect("a");
    let b = locks.request("g").read().ttl(ttl).hold().expect("b");
    assert_eq!(
        (a.access(), b.access()),
        (Some(Access::Read), Some(Access::Read))
    );
    thread::sleep(Duration::from_millis(1_500));
    for g in [&a, &b] {
        assert!(!g.is_lost());
        assert!(g.renewals() >= 1, "{}", g.renewals());
    }
    held(locks.request("g").write().once().acquire());
    a.release().expect("released");
    b.release().expect("released");
    // The refused writer withdrew its intent as it gave up; a writer is granted once the readers left.
    let w = locks
        .request("g")
        .write()
        .ttl(ttl)
        .hold()
        .expect("the writer");
    assert_eq!(w.access(), Some(Access::Write));
    thread::sleep(Duration::from_millis(1_500));
    assert!(!w.is_lost() && w.renewals() >= 1, "{}", w.renewals());
    held(locks.request("g").read().once().acquire());
    held(locks.request("g").write().once().acquire());
    w.release().expect("released");
}

/// A waiting reader is let in when the writer releases, and a waiting writer when the last reader does: by the
/// release (in this process), not at a lease's end.
#[test]
fn a_release_wakes_a_waiter() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let ttl = Duration::from_secs(10);
    for (first, then) in [(true, false), (false, true)] {
        let ask = |write: bool| {
            let r = locks.request("w").ttl(ttl);
            match write {
                true => r.write(),
                false => r.read(),
            }
        };
        let holder = ask(first).once().acquire().expect("the first");
        let (lock, after) = thread::scope(|s| {
            let w = s.spawn(|| {
                let lock = ask(then).wait(Duration::from_secs(8)).acquire();
                (lock, Instant::now())
            });
            thread::sleep(Duration::from_millis(500));
            let at = Instant::now();
            locks.unlock(holder).expect("released");
            let (lock, got_at) = w.join().expect("the waiter");
            (lock, got_at.duration_since(at))
        });
        let lock = lock.expect("the waiter's lock");
        assert!(after < Duration::from_secs(1), "{after:?}");
        locks.unlock(lock).expect("released");
    }
}

#[test]
fn async_readers_and_writer() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let rt = support::rt::current_thread();
    rt.block_on(async {
        let a = locks.request("x").read().acquire_async().await.expect("a");
        let b = locks.request("x").read().acquire_async().await.expect("b");
        held(locks.request("x").write().once().acquire_async().await);
        locks.unlock_async(a).await.expect("released");
        locks.unlock_async(b).await.expect("released");
        let w = locks.request("x").write().acquire_async().await.expect("w");
        held(locks.request("x").read().once().acquire_async().await);
        locks.unlock_async(w).await.expect("released");
    });
}

#[test]
fn read_and_write_combine_with_neither_a_set_nor_a_token_nor_an_owner() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let owner = locks.owner().expect("an owner");
    let refused = [
        locks.request_all(["a", "b"]).read().acquire(),
        locks.request_all(["a", "b"]).write().acquire(),
        locks.request("a").read().fenced().acquire(),
        locks.request("a").fenced().write().acquire(),
        locks.request("a").owned(&owner).read().acquire(),
        locks.request("a").write().owned(&owner).acquire(),
    ];
    for (i, r) in refused.into_iter().enumerate() {
        assert!(matches!(r, Err(Error::Config(_))), "case {i}: {r:?}");
    }
    // The last asked of permits, read and write wins.
    let w = locks.request("a").permits(2).read().write().acquire();
    let w = w.expect("the writer");
    assert_eq!(w.access(), Some(Access::Write));
    locks.unlock(w).expect("released");
}

/// Readers keep coming, each every 700 ms and holding 1.5 s (so that two or three hold at every instant), and a
/// writer whose lease (and so whose intent key's) is much shorter than the gaps between the readers' comings and
/// goings waits for the name. Its intent must keep refusing new readers for as long as it waits, or each new
/// reader, arriving after the intent lapsed, keeps the writer out for good.
#[test]
fn a_waiting_writer_with_a_short_lease_is_not_starved_by_readers() {
    let cluster = Cluster::start(3);
    let readers = manager_of(&cluster, steady());
    let writers = manager_of(&cluster, steady());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let got = thread::scope(|s| {
        let stream = s.spawn(|| {
            let (mut holding, mut got) = (Vec::new(), 0);
            let until = Instant::now() + Duration::from_secs(12);
            let mut next = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until {
                if Instant::now() >= next {
                    next += Duration::from_millis(700);
                    match readers
                        .request("slow-feed")
                        .read()
                        .ttl(Duration::from_secs(5))
                        .once()
                        .acquire()
                    {
                        Ok(r) => {
                            got += 1;
                            holding.push((Instant::now(), r));
                        }
                        Err(Error::Held(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                let now = Instant::now();
                while holding
                    .first()
                    .is_some_and(|(at, _)| now.duration_since(*at) >= Duration::from_millis(1500))
                {
                    let (_, r) = holding.remove(0);
                    readers.unlock(r).expect("released");
                }
                thread::sleep(Duration::from_millis(10));
            }
            for (_, r) in holding {
                readers.unlock(r).expect("released");
            }
            got
        });
        thread::sleep(Duration::from_millis(1600));
        let asked = Instant::now();
        let writer = writers
            .request("slow-feed")
            .write()
            .ttl(Duration::from_millis(300))
            .wait(Duration::from_secs(8))
            .acquire();
        let waited = asked.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let got = stream.join().expect("the readers");
        let writer = writer.unwrap_or_else(|e| panic!("the writer, after {waited:?}: {e}"));
        let _ = writers.unlock(writer);
        got
    });
    assert!(got > 2, "readers held: {got}");
}
