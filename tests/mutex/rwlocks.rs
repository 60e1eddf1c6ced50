//! Read-write locks under faults: workers take a name as a reader or (one time in three) as its writer
//! (`Request::read`, `Request::write`) while nodes are killed and restarted, with their data or without it, and
//! paused. The checker counts per access: never a writer beside any other holder of its name
//! ([`beside_a_writer`]: another writer, or a reader), while readers do share it (the most readers at once is
//! more than one), and a writer entering the protected section finds no live holder inside
//! ([`Writers::enter`]; readers enter it as a semaphore of [`MAX_READERS`] does). The control is the same faults
//! without data and with the restart guard off, which must see a writer beside another holder.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use muxlock::MAX_READERS;
use muxlock::redlock::LockManager;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use super::support::checker::{
    Checked, Entry, FreezeMonitor, Hold, Recorder, Stats, Work, Writers, beside_a_writer,
    instant_ns, mono_ns, most_at_once, report,
};
use super::support::faults::{self, Burst, Struck};
use super::support::{Cluster, RedisServer};
use super::{SPARE, config, long_work, managers, seconds, wait_until_usable};

/// What a read-write lock run recorded: the writers' and the readers' holds of the name.
struct RwRun {
    stats: Arc<Stats>,
    writers: Vec<Hold>,
    readers: Vec<Hold>,
    bursts: usize,
    exposed: usize,
    struck: Struck,
}

impl RwRun {
    /// Every writer's hold found beside another holder of its name.
    fn beside(&self) -> Vec<(Hold, Hold)> {
        beside_a_writer(&self.writers, &self.readers)
    }
}

/// One read-write worker: a reader or (one time in three) the writer of a random name of `work.resources` (with
/// retries, or waiting up to `work.wait` in the nodes' queue); writes to the protected section while the lease
/// has its margin left (a writer alone, a reader among readers), then releases. Each hold is recorded as
/// `[acquired, min(valid_until, released)]`, in `writers` or `readers`.
fn rw_worker(
    name: &str,
    locks: &LockManager,
    work: &Work,
    protected: SocketAddr,
    (writers_held, readers_held): (&Recorder, &Recorder),
    stats: &Stats,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(work.seed);
    let mut section = Writers::connect(protected);
    let mut holds = 0;
    while Instant::now() < work.until {
        let resource = &work.resources[(rng.next_u32() as usize) % work.resources.len()];
        let write = rng.next_u32() % 3 == 0;
        let request = locks.request(resource).ttl(work.ttl);
        let request = match write {
            true => request.write(),
            false => request.read(),
        };
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
            let entry = match write {
                true => section.enter(resource, lease_end),
                false => section.enter_among(resource, lease_end, MAX_READERS as usize),
            };
            match entry {
                Entry::Alone => {}
                Entry::WithOverrunner => Stats::add(&stats.entered_with_overrunner),
                Entry::WithHolder => Stats::add(&stats.concurrent_writers),
            }
            let work_for = work
                .max_work
                .mul_f64(f64::from(rng.next_u32() % 1000) / 1000.0);
            thread::sleep(work_for);
            section.leave(resource);
            if !lock.is_valid() {
                stats.overran_in(checked, mono_ns());
            }
        } else {
            Stats::add(&stats.expired_unused);
        }
        let end = mono_ns().min(instant_ns(lock.valid_until()));
        let hold = Hold {
            resource: resource.clone(),
            holder: name.to_owned(),
            start,
            end,
        };
        match write {
            true => writers_held.record(hold),
            false => readers_held.record(hold),
        }
        if locks.unlock(lock).is_err() {
            Stats::add(&stats.release_failed);
        }
    }
}

/// 3 managers × 2 read-write workers (one retrying, one waiting) on 5 nodes, one name, while [`Burst`]s of
/// minority restarts run (`persist`: `appendonly yes`, `appendfsync always`, so a restart keeps the keys; else
/// they are gone), each followed by `quiet` with a pause (SIGSTOP) of a node for 200 ms in it; for `secs`.
fn bursts_and_pauses(
    scenario: &str,
    (persist, restart_guard): (bool, bool),
    quiet: Duration,
    secs: Duration,
) -> RwRun {
    let mut builder = Cluster::builder(5);
    if persist {
        builder = builder
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg("always");
    }
    let mut cluster = builder.start();
    let protected = RedisServer::start();
    let locks = managers(&cluster.urls(), &config(restart_guard), 3);
    let w = long_work(1, Duration::ZERO);
    wait_until_usable(&locks[0], w.ttl);
    let w = Work {
        resources: vec!["doc".to_owned()],
        ..long_work(1, secs)
    };
    let until = w.until;
    let (writers, readers) = (Recorder::default(), Recorder::default());
    let stats = Arc::new(Stats::default());
    let monitor = FreezeMonitor::start(Arc::clone(&stats));
    let down = Duration::from_millis(50);
    let mut bursts = Vec::new();
    thread::scope(|s| {
        for (m, locks) in locks.iter().enumerate() {
            for t in 0..2 {
                // One worker of each manager waits, the other retries.
                let work = Work {
                    seed: w.seed + (m * 100 + t) as u64,
                    wait: (t == 1).then_some(w.ttl * 2),
                    ..w.clone()
                };
                let (writers, readers, stats) = (&writers, &readers, &stats);
                let addr = protected.addr();
                s.spawn(move || {
                    rw_worker(
                        &format!("m{m}t{t}"),
                        locks,
                        &work,
                        addr,
                        (writers, readers),
                        stats,
                    )
                });
            }
        }
        thread::sleep(Duration::from_millis(150));
        while Instant::now() + 2 * down + Duration::from_millis(600) < until {
            let (first, second) = Burst::pairs(&[0, 1, 2, 3, 4], bursts.len());
            bursts.push(Burst::run(&mut cluster, first, second, down));
            thread::sleep(quiet / 2);
            let paused = (bursts.len() * 3) % 5;
            cluster.pause(paused);
            thread::sleep(Duration::from_millis(200));
            cluster.resume(paused);
            thread::sleep(quiet / 2);
        }
    });
    drop(monitor);
    let (writers, readers) = (writers.holds(), readers.holds());
    let struck = Struck::of(locks.iter().map(|l| &**l));
    let all: Vec<Hold> = writers.iter().chain(&readers).cloned().collect();
    let exposed = faults::exposed(&all, &bursts);
    let beside = beside_a_writer(&writers, &readers);
    report(scenario, &stats, &all, &beside);
    println!(
        "  {} bursts; holds exposed to a whole burst {exposed}; {} writers, {} readers, most readers at once {}; \
         writers beside another holder {}; {struck}",
        bursts.len(),
        writers.len(),
        readers.len(),
        most_at_once(&readers),
        beside.len()
    );
    RwRun {
        stats,
        writers,
        readers,
        bursts: bursts.len(),
        exposed,
        struck,
    }
}

#[test]
fn the_checker_finds_a_writer_beside_any_holder_and_readers_together_fine() {
    let h = |r: &str, who: &str, s, e| Hold {
        resource: r.into(),
        holder: who.into(),
        start: s,
        end: e,
    };
    let readers = [h("d", "a", 0, 20), h("d", "b", 5, 20), h("e", "c", 25, 40)];
    let writers = [h("d", "w", 20, 30), h("d", "v", 30, 35)];
    assert!(beside_a_writer(&writers, &readers).is_empty());
    assert_eq!(most_at_once(&readers), 2);
    // A reader from 29 meets both writers; a writer from 34 meets the other writer.
    let mut late = readers.to_vec();
    late.push(h("d", "x", 29, 31));
    assert_eq!(beside_a_writer(&writers, &late).len(), 2);
    let mut two = writers.to_vec();
    two.push(h("d", "u", 34, 50));
    assert_eq!(beside_a_writer(&two, &readers).len(), 1);
}

/// Asserts what a safe run must show: no writer beside another holder, no writer entering beside a live holder,
/// overruns explained.
fn assert_safe(r: &RwRun) {
    let beside = r.beside();
    assert!(
        beside.is_empty(),
        "a writer beside another holder: {beside:?}"
    );
    assert_eq!(
        Stats::get(&r.stats.concurrent_writers),
        0,
        "a writer entered beside a live holder: {}",
        r.stats
    );
    let unexplained = r.stats.unexplained_overruns(SPARE / 2);
    assert!(
        unexplained.is_empty(),
        "overruns {unexplained:?}: {}",
        r.stats
    );
}

/// Whether a run exercised what its safety is judged on: readers sharing, a writer holding, a hold meeting a
/// whole burst, and the faults failing votes and cutting requests off. `Err` says what it missed.
fn exercised(r: &RwRun) -> Result<(), String> {
    if most_at_once(&r.readers) < 2 {
        return Err(format!(
            "readers never shared ({} reader holds)",
            r.readers.len()
        ));
    }
    if r.writers.is_empty() {
        return Err("no writer held".into());
    }
    if r.bursts == 0 || r.exposed == 0 {
        return Err(format!("no hold met a whole burst ({} bursts)", r.bursts));
    }
    if r.struck.failed == 0 || r.struck.timeouts + r.struck.drops == 0 {
        return Err(format!(
            "the restarts and pauses must fail votes and cut requests off: {}",
            r.struck
        ));
    }
    Ok(())
}

/// Runs a scenario ([`bursts_and_pauses`]) until a run exercised it ([`exercised`]), at most three times, each
/// judged safe ([`assert_safe`]) whatever else it showed: on a loaded machine a 3 s run may see few holds (one
/// CI run saw 4 readers' holds, none beside another) or a single burst that no hold spans. Returns that run.
fn safe_and_exercised(
    scenario: &str,
    (persist, restart_guard): (bool, bool),
    quiet: Duration,
) -> RwRun {
    let mut missed = Vec::new();
    for run in 1..=3 {
        let r = bursts_and_pauses(
            &format!("{scenario} (run {run})"),
            (persist, restart_guard),
            quiet,
            seconds(),
        );
        assert_safe(&r);
        match exercised(&r) {
            Ok(()) => return r,
            Err(why) => missed.push(why),
        }
    }
    panic!("three runs did not exercise the scenario: {missed:?}");
}

/// Kills and restarts without data (the restart guard on) and node pauses: never a writer beside a reader or
/// another writer; the guard refused restarted nodes' grants. Control:
/// [`rwlock_with_the_restart_guard_off_puts_a_writer_beside_another_holder`].
#[test]
fn rwlock_under_restarts_without_data_and_pauses_keeps_writers_alone() {
    let r = safe_and_exercised(
        "read-write lock: restart bursts without data and pauses, guard on",
        (false, true),
        Duration::from_millis(1200),
    );
    assert!(r.struck.quarantined > 0, "{}", r.struck);
}

/// Kills and restarts with the data (`appendfsync always`: every key comes back) and node pauses: never a writer
/// beside another holder.
#[test]
fn rwlock_under_restarts_with_data_and_pauses_keeps_writers_alone() {
    safe_and_exercised(
        "read-write lock: restart bursts with data and pauses, guard on",
        (true, true),
        Duration::from_millis(600),
    );
}

/// The control: the same bursts without data and with the restart guard off. A reader slot (or the writer key)
/// taken before a burst is left on one node, and a writer (or reader) is granted on the other four: the checker
/// must see a writer beside another holder. The hazard needs a hold to span a burst while rivals try, which
/// random runs may not meet (4 runs on a CI machine once met none, writers giving up leaving readers free): the
/// random runs (up to 4, until one sees it) say what they found, and a directed history must show it: a reader
/// holds while nodes 0 and 1 are down, they and then nodes 2 and 3 come back empty, and a writer asks
/// (`sets::held_twice_directed`).
#[test]
fn rwlock_with_the_restart_guard_off_puts_a_writer_beside_another_holder() {
    let mut random = false;
    for attempt in 1..=4 {
        let r = bursts_and_pauses(
            &format!("control: read-write lock, restart bursts, guard off (run {attempt})"),
            (false, false),
            Duration::from_millis(300),
            Duration::from_millis(2500),
        );
        assert!(r.struck.failed > 0, "{}", r.struck);
        if !r.beside().is_empty() {
            random = true;
            break;
        }
    }
    let ask = |l: &LockManager, i: usize| {
        let r = l.request("doc").ttl(super::sets::DIRECTED_TTL);
        match i {
            0 => r.read().acquire(),
            _ => r.write().acquire(),
        }
    };
    let (beside, _) = super::sets::held_twice_directed(ask, |_| vec!["doc".to_owned()]);
    println!("control: a writer beside a reader by a directed history: {beside:?}");
    assert!(
        beside.iter().any(|(a, b)| a.holder != b.holder),
        "the directed history's writer beside a reader went unseen (random runs saw one: {random})"
    );
}
