//! Semaphores under faults: workers take one of [`PERMITS`] permits of a name (`Request::permits`) while nodes are
//! killed, restarted without their data and paused. The checker counts per kind: at most [`PERMITS`] holders of a
//! name at once ([`over_capacity`]), at most one holder of each permit ([`overlaps`] of the permits' holds), and
//! at most [`PERMITS`] writers with running leases in the protected section ([`Writers::enter_among`]). The
//! control is the same faults with the restart guard off, which must see more holders than permits; and on three
//! nodes whose links are cut one per client, the majority-of-counters construction admits three holders of two
//! permits where the per-permit count admits two.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::redlock::LockManager;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use super::support::checker::{
    Checked, Entry, FreezeMonitor, Hold, Recorder, Stats, Work, Writers, instant_ns, mono_ns,
    most_at_once, over_capacity, overlaps, report,
};
use super::support::faults::{self, Burst, Struck};
use super::support::{Cluster, RedisServer};
use super::{SPARE, config, long_work, managers, seconds, wait_until_usable};

/// The permits of every semaphore of these scenarios.
const PERMITS: u32 = 2;

/// What a semaphore run recorded: the holders of each name, and of each permit (`name#index`).
struct PermitRun {
    stats: Arc<Stats>,
    /// Holds of the names (up to [`PERMITS`] at once is fine).
    names: Vec<Hold>,
    /// Holds of the permits (one at a time each).
    permits: Vec<Hold>,
    bursts: usize,
    exposed: usize,
    struck: Struck,
}

impl PermitRun {
    /// Every time a name had more holders than permits.
    fn over(&self) -> Vec<Vec<Hold>> {
        over_capacity(&self.names, PERMITS as usize)
    }
}

/// One permit worker: one of [`PERMITS`] permits of a random name of `work.resources` (with retries, or waiting
/// up to `work.wait` in the nodes' queue of the name, woken by releases and invalidations of any permit); writes to the protected
/// section (shared by up to [`PERMITS`] writers) while the lease has its margin left, then releases. Each hold is
/// recorded for the name and for its permit, `[acquired, min(valid_until, released)]`.
fn permit_worker(
    name: &str,
    locks: &LockManager,
    work: &Work,
    protected: SocketAddr,
    (names, permits): (&Recorder, &Recorder),
    stats: &Stats,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(work.seed);
    let mut writers = Writers::connect(protected);
    let mut holds = 0;
    while Instant::now() < work.until {
        let resource = &work.resources[(rng.next_u32() as usize) % work.resources.len()];
        let request = locks.request(resource).ttl(work.ttl).permits(PERMITS);
        let Some(lock) = stats.tally(work.acquire(request)) else {
            continue;
        };
        let start = mono_ns();
        Stats::add(&stats.acquired);
        holds += 1;
        work.pause_before(holds);
        let checked = Checked::now();
        if lock.validity() > work.margin() {
            let lease_end = instant_ns(lock.valid_until());
            match writers.enter_among(resource, lease_end, PERMITS as usize) {
                Entry::Alone => {}
                Entry::WithOverrunner => Stats::add(&stats.entered_with_overrunner),
                Entry::WithHolder => Stats::add(&stats.concurrent_writers),
            }
            let work_for = work
                .max_work
                .mul_f64(f64::from(rng.next_u32() % 1000) / 1000.0);
            thread::sleep(work_for);
            writers.leave(resource);
            if !lock.is_valid() {
                stats.overran_in(checked, mono_ns());
            }
        } else {
            Stats::add(&stats.expired_unused);
        }
        let end = mono_ns().min(instant_ns(lock.valid_until()));
        let index = lock.permit().map_or(u32::MAX, |i| i);
        names.record(Hold {
            resource: resource.clone(),
            holder: name.to_owned(),
            start,
            end,
        });
        permits.record(Hold {
            resource: format!("{resource}#{index}"),
            holder: name.to_owned(),
            start,
            end,
        });
        if locks.unlock(lock).is_err() {
            Stats::add(&stats.release_failed);
        }
    }
}

/// 3 managers × 2 permit workers (one retrying, one waiting) on 5 nodes without persistence, one semaphore of
/// [`PERMITS`] permits (six workers for two permits), while [`Burst`]s of minority restarts run, each followed by `quiet` with a pause
/// (SIGSTOP) of a node for 200 ms in it; for `secs`.
fn bursts_and_pauses(
    scenario: &str,
    restart_guard: bool,
    quiet: Duration,
    secs: Duration,
) -> PermitRun {
    let mut cluster = Cluster::start(5);
    let protected = RedisServer::start();
    let locks = managers(&cluster.urls(), &config(restart_guard), 3);
    let w = long_work(1, Duration::ZERO);
    wait_until_usable(&locks[0], w.ttl);
    let w = Work {
        resources: vec!["pool".to_owned()],
        ..long_work(1, secs)
    };
    let until = w.until;
    let (names, permits) = (Recorder::default(), Recorder::default());
    let stats = Arc::new(Stats::default());
    let monitor = FreezeMonitor::start(Arc::clone(&stats));
    let down = Duration::from_millis(50);
    let mut bursts = Vec::new();
    thread::scope(|s| {
        for (m, locks) in locks.iter().enumerate() {
            for t in 0..2 {
                // One worker of each manager waits for a permit, the other retries.
                let work = Work {
                    seed: w.seed + (m * 100 + t) as u64,
                    wait: (t == 1).then_some(w.ttl * 2),
                    ..w.clone()
                };
                let (names, permits, stats) = (&names, &permits, &stats);
                let addr = protected.addr();
                s.spawn(move || {
                    permit_worker(
                        &format!("m{m}t{t}"),
                        locks,
                        &work,
                        addr,
                        (names, permits),
                        stats,
                    )
                });
            }
        }
        thread::sleep(Duration::from_millis(150));
        while Instant::now() + 2 * down + Duration::from_millis(600) < until {
            let (first, second) = Burst::pairs(&[0, 1, 2, 3, 4], bursts.len());
            bursts.push(Burst::run(&mut cluster, first, second, down));
            // The quiet after a burst (restarted nodes count again after the guard's window), with a pause in it.
            thread::sleep(quiet / 2);
            let paused = (bursts.len() * 3) % 5;
            cluster.pause(paused);
            thread::sleep(Duration::from_millis(200));
            cluster.resume(paused);
            thread::sleep(quiet / 2);
        }
    });
    drop(monitor);
    let (names, permits) = (names.holds(), permits.holds());
    let struck = Struck::of(locks.iter().map(|l| &**l));
    let exposed = faults::exposed(&names, &bursts);
    let over = over_capacity(&names, PERMITS as usize);
    report(scenario, &stats, &names, &overlaps(&permits));
    println!(
        "  {} bursts; holds exposed to a whole burst {exposed}; most holders at once {}; times over {PERMITS} \
         permits {}; {struck}",
        bursts.len(),
        most_at_once(&names),
        over.len()
    );
    PermitRun {
        stats,
        names,
        permits,
        bursts: bursts.len(),
        exposed,
        struck,
    }
}

#[test]
fn the_checker_counts_a_semaphores_holders() {
    let h = |r: &str, who: &str, s, e| Hold {
        resource: r.into(),
        holder: who.into(),
        start: s,
        end: e,
    };
    // Two at once is a semaphore of 2 at work; the third from 15 to 20 is one too many; one holder counted twice
    // (two holds of its own) is one holder.
    let holds = [
        h("p", "a", 0, 20),
        h("p", "b", 5, 20),
        h("p", "c", 20, 30),
        h("p", "b", 21, 40),
        h("p", "b", 22, 25),
        h("q", "x", 0, 50),
    ];
    assert!(over_capacity(&holds, 2).is_empty());
    assert_eq!(most_at_once(&holds), 2);
    let mut crowded = holds.to_vec();
    crowded.push(h("p", "d", 15, 20));
    let over = over_capacity(&crowded, 2);
    assert_eq!(over.len(), 1, "{over:?}");
    assert_eq!(over[0].len(), 3);
    assert_eq!(most_at_once(&crowded), 3);
}

/// The semaphore under minority restart bursts (with the restart guard) and node pauses: never more holders than
/// permits, never two holders of a permit, never more writers than permits; the faults failed votes and the
/// guard refused restarted nodes' grants; the semaphore did admit two holders at once. Control:
/// [`semaphore_with_the_restart_guard_off_admits_more_holders_than_permits`].
#[test]
fn semaphore_under_restart_bursts_and_pauses_never_exceeds_its_permits() {
    let r = bursts_and_pauses(
        "semaphore of 2: restart bursts and pauses, guard on",
        true,
        Duration::from_millis(1200),
        seconds(),
    );
    let over = r.over();
    assert!(over.is_empty(), "more holders than permits: {over:?}");
    let twice = overlaps(&r.permits);
    assert!(twice.is_empty(), "a permit held twice: {twice:?}");
    assert_eq!(
        Stats::get(&r.stats.concurrent_writers),
        0,
        "more writers than permits: {}",
        r.stats
    );
    let unexplained = r.stats.unexplained_overruns(SPARE / 2);
    assert!(
        unexplained.is_empty(),
        "overruns {unexplained:?}: {}",
        r.stats
    );
    assert_eq!(most_at_once(&r.names), PERMITS as usize, "{}", r.stats);
    assert!(r.bursts > 0 && r.exposed > 0, "no hold met a whole burst");
    assert!(
        r.struck.failed > 0 && r.struck.quarantined > 0 && r.struck.timeouts + r.struck.drops > 0,
        "the restarts and pauses must fail votes and cut requests off, and the guard refuse grants: {}",
        r.struck
    );
}

/// The control: the same bursts with the restart guard off (restarts after 50 ms, no persistence). A permit
/// taken before a burst is left on one node and a rival takes it on the other four: the checker must see more
/// holders than permits. The hazard needs a hold to span a burst while rivals try: up to 4 runs.
#[test]
fn semaphore_with_the_restart_guard_off_admits_more_holders_than_permits() {
    for attempt in 1..=4 {
        let r = bursts_and_pauses(
            &format!(
                "control: semaphore of 2, restart bursts and pauses, guard off (run {attempt})"
            ),
            false,
            Duration::from_millis(300),
            Duration::from_millis(2500),
        );
        assert!(r.struck.failed > 0, "{}", r.struck);
        if !r.over().is_empty() {
            return;
        }
    }
    panic!("4 runs of restart bursts without the guard never admitted more holders than permits");
}

/// The majority-of-counters construction on real servers: it needs the `sim` feature's unsafe acquisition.
#[cfg(feature = "sim")]
mod counted_per_node {
    use super::*;
    use crate::support::locks::{manager, one_attempt};
    use crate::support::proxy::{Fault, FaultProxy};

    /// Three nodes, a semaphore of 2 permits, three clients one after the other (leases of 10 s, so every holder
    /// holds to the end), each behind proxies of its own with one link refused: A cannot reach node 2, B node 0, C
    /// node 1. Returns every client's hold of the name. Counted per node, A is admitted by {0, 1}, B by {1, 2}, C by
    /// {0, 2}: three holders. Counted per permit, A holds permit 0 on {0, 1}, B permit 1 on {1, 2}, and C's two nodes
    /// grant different permits: refused.
    fn crossed_links(counted_per_node: bool) -> Vec<Hold> {
        let cluster = Cluster::start(3);
        let cut = [2, 0, 1];
        let proxies: Vec<Vec<FaultProxy>> = (0..3)
            .map(|_| cluster.addrs().into_iter().map(FaultProxy::start).collect())
            .collect();
        let ttl = Duration::from_secs(10);
        let mut holds = Vec::new();
        for (c, links) in proxies.iter().enumerate() {
            links[cut[c]].set(Fault::Refuse);
            let urls: Vec<String> = links.iter().map(FaultProxy::url).collect();
            let locks = manager(urls, one_attempt(Duration::from_millis(500)));
            let start = mono_ns();
            let got = match counted_per_node {
                true => locks.acquire_permit_counted_per_node("pool", PERMITS, ttl),
                false => locks
                    .request("pool")
                    .ttl(ttl)
                    .permits(PERMITS)
                    .once()
                    .acquire(),
            };
            match got {
                Ok(lock) => holds.push(Hold {
                    resource: "pool".to_owned(),
                    holder: format!("c{c}"),
                    start,
                    end: instant_ns(lock.valid_until()),
                }),
                Err(muxlock::Error::Held(_)) => {}
                Err(e) => panic!("client {c}: {e}"),
            }
        }
        holds
    }

    /// The per-permit count on real servers, against the construction it replaces: with each client cut off from a
    /// different node, the majority-of-counters semaphore (the control) admits three holders of two permits, and the
    /// semaphore admits two.
    #[test]
    fn crossed_links_admit_three_holders_of_two_permits_only_counted_per_node() {
        let control = crossed_links(true);
        assert_eq!(control.len(), 3, "{control:?}");
        assert_eq!(
            over_capacity(&control, PERMITS as usize).len(),
            1,
            "{control:?}"
        );
        let held = crossed_links(false);
        assert_eq!(held.len(), 2, "{held:?}");
        assert!(over_capacity(&held, PERMITS as usize).is_empty());
    }
}
