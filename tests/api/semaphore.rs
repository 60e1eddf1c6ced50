//! Semaphores (`Request::permits`) on real redis-server nodes: distinct permits up to `k` and a refusal past
//! it, the per-permit count that refuses the crossed majorities a per-node count would admit, guards and
//! waiting, the async form, and the combinations refused before anything is sent.

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use muxlock::{Error, permit_key};
use support::Cluster;
use support::locks::{manager_of, one_attempt, wait_until};
use support::wire::cmd;

fn steady() -> muxlock::Config {
    one_attempt(Duration::from_secs(1))
}

/// The key of permit `i` of `name`, as a string for raw commands.
fn key(name: &str, i: u32) -> String {
    String::from_utf8(permit_key(name.as_bytes(), i)).expect("an ASCII name")
}

#[test]
fn k_holders_get_distinct_permits_and_the_next_is_refused() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let held: Vec<_> = (0..3)
        .map(|_| {
            locks
                .request("exports")
                .permits(3)
                .acquire()
                .expect("a free permit")
        })
        .collect();
    let mut permits: Vec<u32> = held.iter().map(|l| l.permit().expect("an index")).collect();
    permits.sort_unstable();
    assert_eq!(permits, [0, 1, 2]);
    let refused = locks.request("exports").permits(3).once().acquire();
    assert!(matches!(refused, Err(Error::Held(_))), "{refused:?}");
    // Giving one back frees that permit for the next holder; the others stay.
    let mut held = held;
    let freed = held.remove(1);
    let index = freed.permit();
    locks.unlock(freed).expect("released");
    let next = locks
        .request("exports")
        .permits(3)
        .acquire()
        .expect("the freed permit");
    assert_eq!(next.permit(), index);
    // Each holder's permit is its own key, holding its value on every node.
    for node in cluster.nodes() {
        for l in held.iter().chain([&next]) {
            let got = node.raw(&cmd(&["GET", &key("exports", l.permit().unwrap_or(9))]));
            assert!(
                got.ends_with(format!("{}\r\n", l.value()).as_bytes()),
                "{}",
                String::from_utf8_lossy(&got)
            );
        }
    }
    for l in held.into_iter().chain([next]) {
        locks.unlock(l).expect("released");
    }
}

/// Three nodes, two permits: A holds permit 0 on nodes 0 and 1, B holds permit 1 on nodes 1 and 2 (each on a
/// majority; each missed one node). Node 0 still has permit 1 free and node 2 permit 0: a majority of nodes
/// has room, so a count of holders per node would admit a third holder. Counted per permit, no permit is free
/// on a majority: refused.
#[test]
fn crossed_majorities_are_refused_counted_per_permit() {
    let cluster = Cluster::start(3);
    for (node, i, holder) in [(0, 0, "A"), (1, 0, "A"), (1, 1, "B"), (2, 1, "B")] {
        let reply = cluster
            .node(node)
            .raw(&cmd(&["SET", &key("pool", i), holder, "PX", "30000"]));
        assert_eq!(reply, b"+OK\r\n");
    }
    let locks = manager_of(&cluster, steady());
    let third = locks.request("pool").permits(2).once().acquire();
    assert!(matches!(third, Err(Error::Held(_))), "{third:?}");
    // Its grants are given back (unawaited): nodes 0 and 2 come to hold only what they held.
    for (node, free) in [(0, 1), (2, 0)] {
        wait_until(Duration::from_secs(2), "the give-back", || {
            cluster
                .node(node)
                .raw(&cmd(&["EXISTS", &key("pool", free)]))
                == b":0\r\n"
        });
    }
}

#[test]
fn a_guarded_permit_is_renewed_and_a_waiter_gets_it_when_released() {
    let cluster = Cluster::start(3);
    // Rounds short enough for a 2 s guard (renewed every 2/3 s).
    let locks = manager_of(&cluster, one_attempt(Duration::from_millis(200)));
    let guard = locks
        .request("crawl")
        .permits(1)
        .ttl(Duration::from_secs(2))
        .hold()
        .expect("the permit");
    assert_eq!(guard.permit(), Some(0));
    let waiter = manager_of(&cluster, steady());
    let released_at = thread::scope(|s| {
        let w = s.spawn(|| {
            let lock = waiter
                .request("crawl")
                .permits(1)
                .wait(Duration::from_secs(10))
                .acquire();
            (lock, Instant::now())
        });
        // Held past two renewals, then released: the waiter gets the permit then, not at a lease's end.
        thread::sleep(Duration::from_millis(1_500));
        assert!(!guard.is_lost());
        assert!(guard.renewals() >= 1, "{}", guard.renewals());
        let at = Instant::now();
        guard.release().expect("released");
        let (lock, got_at) = w.join().expect("the waiter");
        let lock = lock.expect("the permit after the release");
        assert_eq!(lock.permit(), Some(0));
        waiter.unlock(lock).expect("released");
        got_at.duration_since(at)
    });
    assert!(released_at < Duration::from_secs(1), "{released_at:?}");
}

#[test]
fn an_async_permit_is_acquired_and_released() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let rt = support::rt::current_thread();
    rt.block_on(async {
        let a = locks
            .request("jobs")
            .permits(2)
            .acquire_async()
            .await
            .expect("one");
        let b = locks
            .request("jobs")
            .permits(2)
            .acquire_async()
            .await
            .expect("two");
        assert_ne!(a.permit(), b.permit());
        let c = locks
            .request("jobs")
            .permits(2)
            .once()
            .acquire_async()
            .await;
        assert!(matches!(c, Err(Error::Held(_))), "{c:?}");
        locks.unlock_async(a).await.expect("released");
        locks.unlock_async(b).await.expect("released");
    });
}

#[test]
fn permits_combine_with_neither_a_set_nor_a_token_nor_an_owner() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let owner = locks.owner().expect("an owner");
    let refused = [
        locks.request_all(["a", "b"]).permits(2).acquire(),
        locks.request("a").permits(2).fenced().acquire(),
        locks.request("a").fenced().permits(2).acquire(),
        locks.request("a").owned(&owner).permits(2).acquire(),
        locks.request("a").permits(0).acquire(),
        locks
            .request("a")
            .permits(muxlock::MAX_PERMITS + 1)
            .acquire(),
    ];
    for (i, r) in refused.into_iter().enumerate() {
        assert!(matches!(r, Err(Error::Config(_))), "case {i}: {r:?}");
    }
    // Nothing was sent: no permit key anywhere.
    for node in cluster.nodes() {
        for i in 0..2 {
            assert_eq!(node.raw(&cmd(&["EXISTS", &key("a", i)])), b":0\r\n");
        }
    }
}

/// Another application's key of another type under a permit's name (a hash at `{pool}:permit:0` on every node)
/// blocks that permit, and must cost no more: the permits an offer took but did not keep are given back past it.
/// Node 0 has permit 1 taken, so it grants permit 2 where the others grant permit 1, which is kept; node 0's
/// permit 2 goes back although the give-back names permit 0 first.
#[test]
fn permits_not_kept_are_given_back_past_a_permit_key_of_another_type() {
    let cluster = Cluster::start(3);
    for node in cluster.nodes() {
        let reply = node.raw(&cmd(&["HSET", &key("pool", 0), "field", "value"]));
        assert_eq!(reply, b":1\r\n");
    }
    let reply = cluster
        .node(0)
        .raw(&cmd(&["SET", &key("pool", 1), "Z", "PX", "30000"]));
    assert_eq!(reply, b"+OK\r\n");
    let locks = manager_of(&cluster, steady());
    let lock = locks
        .request("pool")
        .permits(3)
        .once()
        .acquire()
        .expect("permit 1, free on nodes 1 and 2");
    assert_eq!(lock.permit(), Some(1));
    wait_until(
        Duration::from_secs(2),
        "node 0's permit 2 given back",
        || cluster.node(0).raw(&cmd(&["EXISTS", &key("pool", 2)])) == b":0\r\n",
    );
    locks.unlock(lock).expect("released");
}

/// Two names are two semaphores, as they are two locks: `jobs` and `{jobs}` (the same name with a hash tag)
/// must not share permits, or a holder of one refuses the other's callers.
#[test]
fn semaphores_of_distinct_names_share_no_permit() {
    let cluster = Cluster::start(3);
    let locks = manager_of(&cluster, steady());
    let plain = locks
        .request("jobs")
        .permits(1)
        .once()
        .acquire()
        .expect("the permit of jobs");
    let tagged = locks.request("{jobs}").permits(1).once().acquire();
    let tagged = tagged.expect("the permit of {jobs}, another semaphore");
    assert_ne!(plain.resource(), tagged.resource());
    locks.unlock(plain).expect("released");
    locks.unlock(tagged).expect("released");
}

/// The second offer is for grants split between permits; a split seen only once the slowest node answers must
/// still get it. Five nodes, three permits: H0 holds permit 0 on nodes 1 to 4, H1 permit 1 on nodes 2 to 4, a
/// leftover permit 2 on nodes 2 and 3; permit 2 is free on nodes 0, 1 and 4, a majority. The offer: node 0
/// grants permit 0, node 1 permit 1, nodes 2 and 3 nothing, and node 4, the slowest, permit 2. Before node 4
/// answers no permit can reach a majority any more, but three nodes granted: a split, and the second offer finds
/// permit 2.
#[test]
fn a_split_shown_by_the_slowest_node_still_gets_the_permit_free_on_a_majority() {
    use support::proxy::{Fault, FaultProxy};
    let cluster = Cluster::start(5);
    let held = [
        (1, 0, "H0"),
        (2, 0, "H0"),
        (3, 0, "H0"),
        (4, 0, "H0"),
        (2, 1, "H1"),
        (3, 1, "H1"),
        (4, 1, "H1"),
        (2, 2, "L"),
        (3, 2, "L"),
    ];
    for (node, i, holder) in held {
        let reply = cluster
            .node(node)
            .raw(&cmd(&["SET", &key("pool", i), holder, "PX", "30000"]));
        assert_eq!(reply, b"+OK\r\n");
    }
    let slow = FaultProxy::start(cluster.node(4).addr());
    let mut urls = cluster.urls();
    urls[4] = slow.url();
    let locks = support::locks::manager(urls, steady());
    let warm = locks
        .request("warm")
        .once()
        .acquire()
        .expect("a warm-up lock");
    locks.unlock(warm).expect("released");
    slow.set(Fault::Latency(Duration::from_millis(30)));
    let lock = locks
        .request("pool")
        .permits(3)
        .once()
        .acquire()
        .expect("permit 2, free on nodes 0, 1 and 4");
    assert_eq!(lock.permit(), Some(2));
    locks.unlock(lock).expect("released");
}
