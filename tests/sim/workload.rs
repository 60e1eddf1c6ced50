//! The workload: what the simulated clients do, and one run of a seed (or of a fuzzer's bytes) judged by the
//! checker. Shared by `tests/simulation.rs` (seeds) and the `sim` fuzz target (`fuzz/sim.rs`, bytes).

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use muxlock::Config;
use muxlock::redlock::Outcome;
use muxlock::redlock::sim::{Clock, Engine, Handed, Pushed, Waits};

use super::calls::Checked;
use super::check::Hold;
use super::node::{MS, Time};
use super::{
    Member, Rng, Setup, Sim, SimClock, SimNodes, Struck, Tape, fold, guards, owned, rwlock,
    semaphore,
};

/// The first client's turn prefix (8 hex digits of its waiter ids); the others' follow.
const TURN_PREFIXES: u32 = 0x5100_0000;

/// Virtual time each client works for, by default.
pub const HORIZON: Time = 8_000 * MS;

/// A waiter in the nodes' queue, as a waiting request waits (its rounds; the loop's sleeps are drawn): see
/// [`waiting`], whose lock it returns.
pub async fn queued(
    engine: &Checked,
    sim: &Sim,
    rng: &mut Rng,
    waits: Waits<'_>,
    ttl: Duration,
) -> Option<muxlock::Lock> {
    waiting(engine, sim, rng, waits, ttl)
        .await
        .map(|(lock, _)| lock)
}

/// A waiter in the nodes' queue, as a waiting request waits (`wait/handoff.rs`'s `queued_wait`: its rounds and
/// its grant by push are the library's; the loop's sleeps are drawn): queued attempts until granted (which leaves
/// the queue) or it gives up, then it leaves the queue everywhere. After a plain lock's refused attempt, before
/// the next one, it asks the library's grant by push (`Engine::by_push`) with the markers its listener took in
/// the sessions it noted before that attempt (`pushes.rs`); granted so (`true` with the lock), the hand-offs took
/// its entry off the queue where they ran, and the lock's release takes it off wherever else it is. While the
/// markers still to come could make a majority, it asks again every 0.2–2 ms (standing in for the pushes that
/// would wake it) for as long as the library's loop waits for them (`Pushed::Coming`), then attempts. A grant is
/// counted in the history's `queued`, one by push in `granted_by_push` too.
pub async fn waiting(
    engine: &Checked,
    sim: &Sim,
    rng: &mut Rng,
    waits: Waits<'_>,
    ttl: Duration,
) -> Option<(muxlock::Lock, bool)> {
    let clock = engine.clock();
    let me = clock.me();
    let ticket = u128::from(sim.world().now / 1_000);
    let entry = engine.queue_entry(waits, ticket);
    let give_up = sim.world().now + rng.range(20, 1_500) * MS;
    let mut joined = false;
    // The last refused attempt of a plain lock, and the listener's sessions noted before it was sent; until when
    // the waiter waits for the markers still coming, and the longest wait it was told.
    let mut refused: Option<(Handed, Vec<Option<u64>>)> = None;
    let mut coming: Option<Time> = None;
    let got = loop {
        if let Some((handed, armed)) = &refused {
            let now = sim.world().sessions(me);
            match engine.by_push(waits, &entry, handed, (armed, &now)) {
                Pushed::Granted(lock) => {
                    // Its entry is gone where the key was handed on; the lock's release takes it off elsewhere.
                    joined = false;
                    break Some((*lock, true));
                }
                Pushed::Coming(wait) => {
                    // From the first look, as long as the library says (longer once a marker is in).
                    let now = sim.world().now;
                    if now < *coming.get_or_insert(now) + wait.as_nanos() as Time {
                        clock
                            .sleep(Duration::from_micros(rng.range(200, 2_000)))
                            .await;
                        continue;
                    }
                }
                Pushed::No => {}
            }
        }
        sim.world().history.ops += 1;
        let armed = sim.world().sessions(me);
        match engine.queued_attempt(waits, ttl, &entry, joined).await {
            // With the lock the attempt left the queue wherever the waiter may still be in it.
            Ok(Ok(lock)) => {
                joined = false;
                break Some((lock, false));
            }
            Ok(Err(r)) => {
                joined = true;
                refused = r.handed.filter(|_| r.held).map(|h| (h, armed));
                coming = None;
            }
            Err(_) => break None,
        }
        if sim.world().now >= give_up {
            break None;
        }
        clock.sleep(Duration::from_millis(rng.range(0, 30))).await;
    };
    if joined {
        engine.leave_queue(&entry);
    }
    if let Some((_, pushed)) = &got {
        let mut w = sim.world();
        w.history.queued += 1;
        w.history.granted_by_push += u64::from(*pushed);
    }
    got
}

/// How a run is made, besides its seed.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Release reentrant holds with the unattributed script, which counts down some hold of the owner, whichever
    /// (the control).
    pub unattributed: bool,
    /// Guard holders that never look at `lost_at` and work on past their guards' deadlines (the guards'
    /// control, `sim/guards.rs`).
    pub ignore_lost: bool,
    /// Virtual time each client works for; `HORIZON` if zero.
    pub horizon: Time,
    /// Plain worlds only (no restore bursts, no durable fencing worlds): the control's search.
    pub plain: bool,
    /// The fuzzer's bytes, which then steer every choice.
    pub tape: Option<Rc<Tape>>,
    /// Half the plain acquisitions wait in the nodes' queue instead (a waiting request's hand-off across
    /// processes): queued attempts until granted or given up, then leaving the queue.
    pub queued: bool,
    /// With `queued`: every client only waits in the nodes' queue for a plain lock, holds it and releases it
    /// (handing the key on), as processes that contend for one lock do: a line of several waiters on each
    /// resource, and most grants handed on.
    pub waiters: bool,
    /// Nodes with native compare-and-delete and `SET IFEQ`, three servers in turn: see `Setup`.
    pub natives: bool,
    /// Extend owned holds with a script that sets the expiry to the extension's TTL even when that cuts a
    /// longer one (the owned holds' control, `sim/owned.rs`).
    pub shortening: bool,
    /// Owned sessions half the time, and every reentrant verb one (a search aimed at the owned holds' paths).
    pub owned: bool,
    /// Half the time, a few locks released together by separate callers of the engine, so that their releases
    /// fold (`sim/fold.rs`).
    pub folds: bool,
    /// With `folds`: about a third of the folded releases' futures are dropped after their first, second or
    /// third poll (an async caller giving up: queued, leading its fold before or after sending, or running alone).
    pub cut_folds: bool,
    /// Clock faults in every world, not one in four (a search aimed at them).
    pub clocks: bool,
    /// Clock faults in every world, and clients with the clock check off (the clock check's control).
    pub unchecked_clocks: bool,
    /// Clock faults in every world, and clocks that step back (`Setup::steps_back`): hazards the clock check
    /// cannot see.
    pub steps_back: bool,
    /// A hostile network in every world, not one in five (`Setup::net`: a search aimed at the fanout's machine).
    pub net: bool,
    /// Clients without the clock check in every world, and no clock faults: the network layer alone keeps a reply
    /// from being counted for another command (see [`UNCHECKED_WORLDS`]).
    pub unchecked: bool,
    /// Half the time, a semaphore holder (`sim/semaphore.rs`): one permit of `s1`, `s2` or `s3`.
    pub semaphores: bool,
    /// With `semaphores`: permits taken by the majority-of-counters construction (the semaphores' control).
    pub counted_per_node: bool,
    /// Half the time, a read-write lock holder (`sim/rwlock.rs`): a reader or the writer of `rw0` or `rw1`.
    pub rwlocks: bool,
    /// With `rwlocks`: readers taken by an offer that ignores the writer and intent keys (the read-write locks'
    /// control).
    pub ignoring_writer: bool,
    /// Cluster members (`sim/cluster.rs`): each member a simulated Redis Cluster (two shards, with or without a
    /// replica each) or a plain node, at least one a cluster; slot migrations, replicas' links down and
    /// failovers; plain worlds (no bursts, no durable fencing worlds, no clock faults), the clients' checks on.
    pub clusters: bool,
    /// A calm world (`Setup::calm`): one client, no fault of any kind, the clients' checks on or off (a stream of
    /// their own); `calls.rs` judges every call's liveness there.
    pub calm: bool,
}

/// The share of worlds with clock faults (`Setup::clocks`), drawn from a stream of their own.
const CLOCK_WORLDS: f64 = 0.25;

/// The share of worlds with a hostile network (`Setup::net`), drawn from a stream of their own.
const NET_WORLDS: f64 = 0.2;

/// The share of worlds whose clients run without the checks that read what the nodes reply besides the fanout
/// (`Setup::unchecked`: the clock check off, and the restart guard where every restart keeps every write, both
/// choices users have), among the worlds without clock faults, drawn from a stream of its own: half the
/// hostile-network worlds and one in ten of the others. The clock check sends each acquisition and extension as
/// `TIME; command; TIME`, so a reply of the wire counted for another command is almost always a `TIME` where none
/// is expected, or none where one is: a refused vote. The restart guard does not trust a new connection whose
/// set-up replies it cannot read for its window. With them on, the fanout's own bookkeeping is not what keeps such
/// a reply from counting. (Clock faults with the clock check off are the clock check's control, not these.)
const UNCHECKED_WORLDS: (f64, f64) = (0.5, 0.1);

/// The clients' checks of what the nodes reply, besides the fanout's own bookkeeping.
#[derive(Clone, Copy, Debug)]
struct Checks {
    /// `Config::with_clock_check`.
    clock: bool,
    /// `Config::with_restart_guard`.
    restart: bool,
}

/// What one client does: a random mix of every engine-level verb on a few contended resources.
async fn client(
    nodes: SimNodes,
    clock: SimClock,
    seed: u64,
    opts: Options,
    world: (bool, bool, Checks),
) {
    let (bursts, fencing, checks) = world;
    let unattributed = opts.unattributed;
    let queued = opts.queued;
    let horizon = opts.horizon;
    let sim = Rc::clone(clock.sim());
    let me = clock.me();
    let mut rng = Rng::steered(seed ^ ((me as u64 + 1) << 40), opts.tape.as_ref());
    let mut config = Config::default()
        .with_retry_count(2)
        .with_restart_window(Duration::from_millis(2_500))
        // Off by default (not shown to save server time); the simulator runs it where it folds.
        .with_fold_releases(opts.folds)
        .with_clock_check(checks.clock)
        .with_restart_guard(checks.restart);
    if fencing {
        // Round timeouts that differ between clients, one far longer than the others: fencing's order must
        // not depend on other clients' round timeouts.
        let longest = match me {
            0 => 3_000,
            _ => 600,
        };
        config = config.with_round_timeout(Duration::from_millis(rng.range(50, longest)));
    }
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8] = me as u8;
    let nodes = nodes.members(&config);
    let Ok(engine) = Engine::new(nodes, clock, config.clone(), key) else {
        return;
    };
    // Each client a manager of its own: its waiter ids start with its own prefix, and, in the queued worlds, its
    // turn listener takes the nodes' pushes (`pushes.rs`).
    let engine = engine.with_turn_prefix(TURN_PREFIXES + me as u32);
    if queued {
        sim.world().listen(me, engine.listener());
    }
    let engine = Checked::new(engine, config);
    let now = |sim: &Sim| sim.world().now;
    let at = |sim: &Sim, i: Instant| sim.world().time(me, i);
    let (clock_checked, replication_checked) = (checks.clock, checks.restart);
    let hold = |sim: &Sim, kind, resource: &[u8], holder: &[u8], until: Instant, token| {
        let mut w = sim.world();
        let (from, until) = (w.now, w.time(me, until));
        // Beside cluster members, with the clock check on, a plain member's requests go between `TIME`s of
        // their own, apart from the clusters' (which their routing brackets): count its grants.
        if clock_checked && w.members.iter().any(|m| matches!(m, Member::Cluster(_))) {
            let plain: Vec<usize> = (w.members.iter())
                .filter_map(|m| match m {
                    Member::Node(n) => Some(*n),
                    Member::Cluster(_) => None,
                })
                .collect();
            for &n in &plain {
                if w.nodes[n].node.holds(resource, holder, from) {
                    w.struck.plain_grants_beside_clusters += 1;
                }
            }
        }
        // With the restart guard on, a cluster member's vote counts only once its replication check proved it
        // (`net/cluster/route/replid.rs`): a grant the plain members alone cannot make counted one.
        let plain = (w.members.iter())
            .filter(|m| matches!(m, Member::Node(_)))
            .count();
        if replication_checked && plain < w.members.len() / 2 + 1 {
            w.struck.grants_by_checked_clusters += 1;
        }
        w.history.hold(Hold {
            client: me,
            kind,
            resource: resource.to_vec(),
            holder: holder.to_vec(),
            from,
            until,
            token,
        })
    };
    let end = |sim: &Sim, i: usize| {
        let mut w = sim.world();
        let t = w.now;
        w.history.end(i, t);
    };
    let extended = |sim: &Sim, i: usize, until: Instant| {
        let mut w = sim.world();
        let (t, u) = (w.now, w.time(me, until));
        w.history.extend(i, t, u);
    };
    // What a holder counts after an extension of its `Lock`, granted or not.
    let counts = |sim: &Sim, i: usize, until: Instant| {
        let mut w = sim.world();
        let (t, u) = (w.now, w.time(me, until));
        w.history.counts(i, t, u);
    };
    // Extensions' TTLs, from a stream of their own (the seed's other choices stay what they were): half the
    // lock's own, half drawn afresh, often shorter than what is left, so that an extension that fails after
    // it ran on nodes shortens the keys there.
    let mut extensions = Rng::new(seed ^ ((me as u64 + 1) << 40) ^ 0x6578_7465);
    let mut extension = move |ttl: Duration| match extensions.chance(0.5) {
        true => ttl,
        false => Duration::from_millis(extensions.range(100, ttl.as_millis() as u64 + 1)),
    };
    let op = |sim: &Sim| sim.world().history.ops += 1;
    let clock = engine.clock();
    // How long a holder works: half the time briefly (up to a tenth of the TTL: many holds and releases, the
    // transitions where bugs live), else up to past the lease (holders that outlive their validity).
    let pause = |rng: &mut Rng, ttl: Duration| {
        let ttl = ttl.as_millis() as u64;
        let ms = match rng.chance(0.5) {
            true => rng.range(0, ttl / 10),
            false => rng.range(0, ttl * 6 / 5),
        };
        Duration::from_millis(ms)
    };
    let owner = engine.owner().ok();
    while now(&sim) < horizon {
        let r = format!("r{}", rng.range(0, 2));
        let longest = match fencing && me == 0 {
            true => 4_000, // the slow client's leases outlast its slow round
            false => 1_500,
        };
        let ttl = Duration::from_millis(rng.range(100, longest));
        op(&sim);
        if opts.folds && rng.chance(0.5) {
            fold::hold(&engine, &sim, &mut rng, me, opts.cut_folds).await;
            continue;
        }
        if opts.semaphores && rng.chance(0.5) {
            semaphore::hold(&engine, &sim, &mut rng, ttl, opts.counted_per_node).await;
            clock.sleep(Duration::from_millis(rng.range(0, 5))).await;
            continue;
        }
        if opts.rwlocks && rng.chance(0.5) {
            rwlock::hold(&engine, &sim, &mut rng, ttl, opts.ignoring_writer).await;
            clock.sleep(Duration::from_millis(rng.range(0, 5))).await;
            continue;
        }
        // Under restore bursts, half the time the verb that needs them.
        let verb = match (bursts || fencing) && rng.chance(0.5) {
            _ if opts.waiters => 0,
            _ if opts.owned && rng.chance(0.5) => 5,
            true if bursts => 6,
            true => 4,
            _ => match rng.range(0, 6) {
                6 => 7,
                v => v,
            },
        };
        match verb {
            7 => {
                // Guards, renewed while held (`sim/guards.rs`).
                guards::hold(&engine, &sim, &mut rng, ttl, fencing, opts.ignore_lost).await;
            }
            6 => {
                // A `Lock` kept after its key was released by value (a script, another process): extending it
                // must not be confirmed by nodes that restored the released key from an older snapshot.
                if let Ok(Some(mut lock)) = engine.try_lock(r.as_bytes(), ttl).await {
                    let value = lock.value().as_bytes().to_vec();
                    let i = hold(&sim, "lock", r.as_bytes(), &value, lock.valid_until(), None);
                    clock.sleep(pause(&mut rng, ttl) / 4).await;
                    end(&sim, i);
                    op(&sim);
                    let since = now(&sim);
                    let v = engine.unlock_value(r.as_bytes(), &value).await;
                    released(&sim, &[r.as_bytes()], &value, since, &v);
                    clock.sleep(pause(&mut rng, ttl) / 2).await;
                    op(&sim);
                    if engine.extend(&mut lock, ttl).await.is_ok() {
                        // Released, yet extended: a new claim from now on.
                        let j = hold(
                            &sim,
                            "kept lock",
                            r.as_bytes(),
                            &value,
                            lock.valid_until(),
                            None,
                        );
                        clock.sleep(pause(&mut rng, ttl) / 4).await;
                        end(&sim, j);
                        op(&sim);
                        let since = now(&sim);
                        let v = engine.unlock(lock).await;
                        released(&sim, &[r.as_bytes()], &value, since, &v);
                    }
                }
            }
            0 if queued && (opts.waiters || rng.chance(0.5)) => {
                let got = waiting(&engine, &sim, &mut rng, Waits::Plain(r.as_bytes()), ttl).await;
                if let Some((lock, pushed)) = got {
                    let kind = match pushed {
                        true => "lock handed by push",
                        false => "queued lock",
                    };
                    let i = hold(
                        &sim,
                        kind,
                        r.as_bytes(),
                        lock.value().as_bytes(),
                        lock.valid_until(),
                        None,
                    );
                    clock.sleep(pause(&mut rng, ttl) / 2).await;
                    end(&sim, i);
                    op(&sim);
                    let value = lock.value().as_bytes().to_vec();
                    let since = now(&sim);
                    let v = engine.unlock(lock).await;
                    released(&sim, &[r.as_bytes()], &value, since, &v);
                }
            }
            0 => {
                let got = match rng.chance(0.5) {
                    true => engine.try_lock(r.as_bytes(), ttl).await,
                    false => engine.lock(r.as_bytes(), ttl).await.map(Some),
                };
                if let Ok(Some(mut lock)) = got {
                    let i = hold(
                        &sim,
                        "lock",
                        r.as_bytes(),
                        lock.value().as_bytes(),
                        lock.valid_until(),
                        None,
                    );
                    clock.sleep(pause(&mut rng, ttl) / 2).await;
                    if rng.chance(0.5) {
                        op(&sim);
                        if engine.extend(&mut lock, extension(ttl)).await.is_ok() {
                            sim.world().struck.extensions += 1;
                        }
                        counts(&sim, i, lock.valid_until());
                        clock.sleep(pause(&mut rng, ttl) / 2).await;
                    }
                    end(&sim, i);
                    op(&sim);
                    let value = lock.value().as_bytes().to_vec();
                    let since = now(&sim);
                    let v = engine.unlock(lock).await;
                    released(&sim, &[r.as_bytes()], &value, since, &v);
                }
            }
            1 => {
                // By value, as another process (`muxlock extend`) would: it extends what it believes it holds.
                if let Ok(Some(lock)) = engine.try_lock(r.as_bytes(), ttl).await {
                    let value = lock.value().as_bytes().to_vec();
                    let i = hold(&sim, "lock", r.as_bytes(), &value, lock.valid_until(), None);
                    clock.sleep(pause(&mut rng, ttl)).await;
                    op(&sim);
                    let still = at(&sim, lock.valid_until()) > now(&sim);
                    let mut by_value = None;
                    match engine.extend_value(r.as_bytes(), &value, ttl).await {
                        Ok(until) if still => extended(&sim, i, until),
                        // Expired meanwhile, yet extended by value: a new claim from now on.
                        Ok(until) => {
                            by_value =
                                Some(hold(&sim, "by value", r.as_bytes(), &value, until, None))
                        }
                        Err(_) => {}
                    }
                    clock.sleep(pause(&mut rng, ttl) / 3).await;
                    end(&sim, i);
                    if let Some(j) = by_value {
                        end(&sim, j);
                    }
                    op(&sim);
                    let since = now(&sim);
                    let v = engine.unlock_value(r.as_bytes(), &value).await;
                    released(&sim, &[r.as_bytes()], &value, since, &v);
                }
            }
            2 => {
                let names: Vec<String> = (0..rng.range(1, 3)).map(|k| format!("r{k}")).collect();
                let refs: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
                let mut held = Vec::new();
                let mut locks = Vec::new();
                for (name, got) in names.iter().zip(engine.try_lock_batch(&refs, ttl).await) {
                    if let Ok(Some(lock)) = got {
                        sim.world().struck.batch_grants += 1;
                        held.push(hold(
                            &sim,
                            "batch",
                            name.as_bytes(),
                            lock.value().as_bytes(),
                            lock.valid_until(),
                            None,
                        ));
                        locks.push(lock);
                    }
                }
                clock.sleep(pause(&mut rng, ttl)).await;
                held.iter().for_each(|&i| end(&sim, i));
                if !locks.is_empty() {
                    op(&sim);
                    let values: Vec<(Vec<u8>, Vec<u8>)> = locks
                        .iter()
                        .map(|l| (l.resource().to_vec(), l.value().as_bytes().to_vec()))
                        .collect();
                    let since = now(&sim);
                    let verdicts = engine.unlock_batch(locks).await;
                    for ((key, value), v) in values.iter().zip(&verdicts) {
                        released(&sim, &[key], value, since, v);
                        if v.is_ok() {
                            sim.world().struck.batch_releases += 1;
                        }
                    }
                }
            }
            3 => {
                let names = [format!("r{}", rng.range(0, 1)), "r2".to_owned()];
                let refs: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
                if let Ok(Some(mut set)) = engine.lock_many(&refs, ttl, rng.chance(0.5)).await {
                    let value = set.value().as_bytes().to_vec();
                    let held: Vec<usize> = names
                        .iter()
                        .map(|n| hold(&sim, "set", n.as_bytes(), &value, set.valid_until(), None))
                        .collect();
                    clock.sleep(pause(&mut rng, ttl) / 2).await;
                    op(&sim);
                    let _ = engine.extend(&mut set, extension(ttl)).await;
                    held.iter()
                        .for_each(|&i| counts(&sim, i, set.valid_until()));
                    clock.sleep(pause(&mut rng, ttl) / 2).await;
                    held.iter().for_each(|&i| end(&sim, i));
                    op(&sim);
                    let since = now(&sim);
                    let v = engine.unlock(set).await;
                    released(&sim, &refs, &value, since, &v);
                }
            }
            4 => {
                if let Ok(Some(lock)) = engine.lock_fenced(r.as_bytes(), ttl, rng.chance(0.5)).await
                {
                    let i = hold(
                        &sim,
                        "fenced",
                        r.as_bytes(),
                        lock.value().as_bytes(),
                        lock.valid_until(),
                        lock.token(),
                    );
                    clock.sleep(pause(&mut rng, ttl)).await;
                    end(&sim, i);
                    op(&sim);
                    let value = lock.value().as_bytes().to_vec();
                    let since = now(&sim);
                    let v = engine.unlock(lock).await;
                    released(&sim, &[r.as_bytes()], &value, since, &v);
                }
            }
            5 if opts.owned || rng.chance(0.5) => {
                // Owned holds as `Lock`s through the one retry loop: guarded or extended, nested, released in
                // any order (`sim/owned.rs`).
                if let Some(owner) = &owner {
                    owned::hold(
                        &engine,
                        &sim,
                        &mut rng,
                        owner,
                        r.as_bytes(),
                        ttl,
                        opts.shortening,
                    )
                    .await;
                }
            }
            _ => {
                let Some(owner) = &owner else { continue };
                let since = now(&sim);
                if let Ok(outer) = engine.lock_owned(owner, r.as_bytes(), ttl).await {
                    let who = owner.as_str().as_bytes();
                    let i = hold(
                        &sim,
                        "reentrant",
                        r.as_bytes(),
                        who,
                        outer.valid_until(),
                        None,
                    );
                    // Nested hold/release pairs: each must leave the outer hold where it is.
                    for _ in 0..rng.range(1, 4) {
                        op(&sim);
                        if let Ok(inner) = engine.lock_owned(owner, r.as_bytes(), ttl).await {
                            clock.sleep(pause(&mut rng, ttl) / 8).await;
                            op(&sim);
                            let _ = engine.unlock_owned(inner, unattributed).await;
                        }
                        // While it reports valid, the outer hold is on a majority (the checker's property:
                        // nested holds and their releases never strip it).
                        if clock.now() < outer.valid_until() {
                            outer_on_majority(&sim, r.as_bytes(), who, since);
                        }
                    }
                    // The outer hold stays ours until its validity: work on.
                    clock.sleep(pause(&mut rng, ttl) / 2).await;
                    end(&sim, i);
                    op(&sim);
                    let _ = engine.unlock_owned(outer, unattributed).await;
                }
            }
        }
        clock.sleep(Duration::from_millis(rng.range(0, 5))).await;
    }
}

/// A reentrant owner's outer hold that reports valid now must be on a majority of nodes (or on nodes that came back
/// without their data since it was taken: the restart guard, not the keys, covers those).
fn outer_on_majority(sim: &Sim, key: &[u8], owner: &[u8], since: Time) {
    let mut w = sim.world();
    w.struck.reentrant_checks += 1;
    let (holding, excused) = w.holding(key, owner, since);
    let quorum = w.members.len() / 2 + 1;
    if holding + excused < quorum {
        let what = format!(
            "a reentrant outer hold of {} valid at {} ms but on {holding} of {} nodes ({excused} came back \
             without their data or had their clocks moved ahead)",
            String::from_utf8_lossy(key),
            w.now / MS,
            w.members.len()
        );
        w.history.breaks(what);
    }
}

/// Judges a release's verdict on the nodes as it is returned (`keys` released, holding `value`; the release began
/// at `since`). Confirmed by `n` nodes (`Ok(n)`): `n` nodes removed the value, so at most N − n still hold it, the
/// ones the count did not include (they refused, timed out, were paused or never reached). Not confirmed: the
/// report names each node's outcome, and none it says released the lock (`Outcome::Granted`) holds it. Excused:
/// nodes that came back from a snapshot since the release began (the restore brings the key back).
fn released(
    sim: &Sim,
    keys: &[&[u8]],
    value: &[u8],
    since: Time,
    verdict: &muxlock::Result<usize>,
) {
    let mut w = sim.world();
    w.struck.releases_judged += 1;
    let now = w.now;
    let total = w.nodes.len();
    let mut kept = false;
    for key in keys {
        let holding: Vec<usize> = (0..total)
            .filter(|&i| {
                let n = &mut w.nodes[i];
                n.node.holds(key, value, now) && n.lost_data_at.is_none_or(|t| t < since)
            })
            .collect();
        kept |= !holding.is_empty();
        let wrong = match verdict {
            Ok(n) => (holding.len() + n > total).then(|| format!("confirmed by {n}")),
            Err(e) => e.report().and_then(|r| {
                let said = |i: usize| {
                    r.nodes()
                        .get(i)
                        .is_some_and(|(_, o)| *o == Outcome::Granted)
                };
                holding
                    .iter()
                    .find(|&&i| said(i))
                    .map(|i| format!("reported released on node {i} ({e})"))
            }),
        };
        if let Some(wrong) = wrong {
            let what = format!(
                "a release of {} {wrong} while nodes {holding:?} of {total} still hold it at {} ms",
                String::from_utf8_lossy(key),
                now / MS
            );
            w.history.breaks(what);
        }
    }
    if kept && verdict.is_ok() {
        w.struck.kept_after_release += 1;
    }
}

/// What a run of one seed found.
#[derive(Debug)]
pub struct Run {
    pub violation: Option<String>,
    pub struck: Struck,
    pub ops: u64,
    /// Grants of queued attempts, and of them those granted by push.
    pub queued: u64,
    pub granted_by_push: u64,
    /// Keys handed on to a waiter by a release or a leave, and of them those the waiter's gate granted.
    pub handed: (u64, u64),
    /// Holders of semaphores' permits.
    pub permits: u64,
    /// Readers and writers of read-write locks that held.
    pub rw_holders: u64,
    /// Of them, writers.
    pub rw_writers: u64,
    /// Whether the clients ran with the clock check, and with the restart guard.
    pub clock_check: bool,
    pub restart_guard: bool,
    pub history: String,
}

/// Runs seed `seed` (steered by `opts.tape` if any) and judges its history.
pub fn run(seed: u64, opts: &Options) -> Run {
    let mut opts = opts.clone();
    if opts.horizon == 0 {
        opts.horizon = HORIZON;
    }
    let mut rng = Rng::steered(seed ^ 0x5EED, opts.tape.as_ref());
    let mut setup = Setup {
        nodes: [3, 5][rng.range(0, 1) as usize],
        clients: rng.range(2, 5) as usize,
        horizon: opts.horizon,
        bursts: false,
        durable: false,
        tape: opts.tape.clone(),
        threads: true,
        per_process: None,
        natives: opts.natives,
        clocks: !opts.unchecked
            && (opts.clocks
                || opts.unchecked_clocks
                || opts.steps_back
                || Rng::new(seed ^ 0x636c_6f63).chance(CLOCK_WORLDS)),
        steps_back: opts.steps_back,
        net: opts.net || Rng::new(seed ^ 0x6e65_7477).chance(NET_WORLDS),
        unchecked: false,
        layout: None,
        calm: opts.calm,
    };
    // The clients' checks off (`Setup::unchecked`) in a share of the worlds without clock faults.
    let share = match setup.net {
        true => UNCHECKED_WORLDS.0,
        false => UNCHECKED_WORLDS.1,
    };
    setup.unchecked =
        opts.unchecked || !setup.clocks && Rng::new(seed ^ 0x0075_6e63_6865_636b).chance(share);
    // Three kinds of world: plain (4 in 10), restore bursts (3 in 10), durable with fencing clients of
    // different round timeouts (3 in 10). Without the clients' checks, plain worlds are durable too, so that the
    // restart guard is off in 7 in 10.
    match rng.range(0, 9) {
        _ if opts.plain => {}
        0..=2 => setup.bursts = true,
        3..=5 => setup.durable = true,
        _ if setup.unchecked => setup.durable = true,
        _ => {}
    }
    if opts.clusters {
        // Plain worlds whose members are clusters or nodes: the restart guard on (a failover to a replica
        // without its master's latest writes is what it guards against), no queue or folds (a manager with
        // cluster members has neither).
        (setup.bursts, setup.durable, setup.clocks, setup.unchecked) = (false, false, false, false);
        let mut rng = Rng::new(seed ^ 0x6c61_796f_7574);
        let layout = super::cluster::Layout::draw(&mut rng, setup.nodes);
        setup.layout = Some(Rc::new(layout));
        opts.queued = false;
        opts.folds = false;
    }
    if opts.calm {
        setup.clients = 1;
        (setup.bursts, setup.durable, setup.clocks, setup.net) = (false, false, false, false);
    }
    let (bursts, fencing) = (setup.bursts, setup.durable);
    // The restart guard's reading of a new connection's set-up would hold back a connection whose replies are one
    // place off for its window (a reading it cannot parse is a process just started).
    let mut checks = Checks {
        clock: !opts.unchecked_clocks && !setup.unchecked,
        restart: !(setup.unchecked && setup.durable),
    };
    if opts.calm {
        let mut rng = Rng::new(seed ^ 0x6361_6c6d);
        checks = Checks {
            clock: rng.chance(0.5),
            restart: rng.chance(0.5),
        };
    }
    let config = Config::default().with_restart_guard(checks.restart);
    let net = match &setup.layout {
        Some(layout) => muxlock::redlock::sim::options_for(&config, &layout.plan()),
        None => muxlock::redlock::sim::options(&config, setup.nodes),
    };
    let sim = super::world(seed, &setup, &net);
    if setup.layout.is_none() && !setup.calm {
        super::plan_acls(&mut sim.world(), seed, setup.horizon);
    }
    super::run(&sim, |nodes, clock| {
        client(nodes, clock, seed, opts.clone(), (bursts, fencing, checks))
    });
    let mut w = sim.world();
    let now = w.now;
    w.count_net();
    let tokens_before = w.struck.counters_lost_at.unwrap_or(Time::MAX);
    w.struck.tokens_checked = w.history.tokens_before(tokens_before);
    let mut violation = w.history.violation(tokens_before);
    if violation.is_none() {
        // No release went by hash to a node that had lost its scripts: its `NOSCRIPT` may be read by nobody, and
        // the key stays there until its lease ends though the release was confirmed.
        if let Some((i, n)) = w
            .nodes
            .iter()
            .enumerate()
            .find(|(_, n)| n.node.releases_by_hash > 0)
        {
            violation = Some(format!(
                "node {i} answered NOSCRIPT to {} releases sent by hash",
                n.node.releases_by_hash
            ));
        }
    }
    if violation.is_none() {
        // Every key left behind expires by its TTL (fence counters and the marker are documented exceptions).
        for (i, n) in w.nodes.iter_mut().enumerate() {
            let keys = n.node.keys_without_expiry(now);
            if !keys.is_empty() {
                violation = Some(format!("node {i} keeps keys without expiry: {keys:?}"));
                break;
            }
        }
    }
    let native_calls = w.nodes.iter().map(|n| n.node.native_calls).sum();
    let mut struck = w.struck.clone();
    struck.native_calls = native_calls;
    for n in &w.nodes {
        for (sum, k) in struck.noperm.iter_mut().zip(n.node.refusals) {
            *sum += k;
        }
    }
    Run {
        violation,
        struck,
        ops: w.history.ops,
        queued: w.history.queued,
        granted_by_push: w.history.granted_by_push,
        handed: (
            w.nodes.iter().map(|n| n.node.handed_on).sum(),
            w.nodes.iter().map(|n| n.node.handed_taken).sum(),
        ),
        permits: w.history.permits.len() as u64,
        rw_holders: w.history.rw.len() as u64,
        rw_writers: w.history.rw.iter().filter(|h| h.write).count() as u64,
        clock_check: checks.clock,
        restart_guard: checks.restart,
        history: w.history.tail(80),
    }
}

/// Virtual time each client works for when the fuzzer drives the run: short, so that it tries many histories.
pub const FUZZ_HORIZON: Time = 2_000 * MS;

/// Runs the history a fuzzer's bytes describe: the first 8 bytes are the seed, the rest a tape that steers
/// every choice (the world's shape and faults, the scheduler, each client's verbs and pauses) while it lasts.
pub fn run_bytes(data: &[u8]) -> Run {
    let (head, tail) = data.split_at(data.len().min(8));
    let mut seed = [0u8; 8];
    seed[..head.len()].copy_from_slice(head);
    let opts = Options {
        horizon: FUZZ_HORIZON,
        tape: Some(Tape::new(tail)),
        ..Options::default()
    };
    run(u64::from_le_bytes(seed), &opts)
}

/// A slow client's history, directed (as `tests/api/fenced.rs`'s slow-client test on real nodes): counters 10, 1, 1;
/// A (round timeout 600 ms) is 200 ms from node 1 and 50 ms from node 2, which someone else holds for 300 ms; B
/// (6 s) starts at 350 ms and is 2.5 s from node 1; A's messages to node 1 are lost from 500 ms on. Returns A's
/// and B's tokens: B's must be larger.
pub fn slow_fence_history() -> (Option<u64>, Option<u64>) {
    use super::node::Time;
    let sim = super::directed_world(3, 2);
    {
        let mut w = sim.world();
        let near: Time = MS / 10;
        for c in 0..2 {
            for n in 0..3 {
                w.fix_link(c, n, near);
            }
        }
        w.fix_link(0, 1, 200 * MS);
        w.fix_link(0, 2, 50 * MS);
        w.fix_link(1, 1, 2_500 * MS);
        w.cut(0, 1, 500 * MS, Time::MAX);
        for (n, c) in [10, 1, 1].into_iter().enumerate() {
            w.nodes[n].node.set_counter(b"r0", c);
        }
        // Until after A's SET there (at 50 ms) and the asks again of A's split (at about 150 and 250 ms).
        w.nodes[2].node.hold(b"r0", b"someone-else", 300 * MS);
    }
    let tokens = Rc::new(Cell::new([None, None]));
    super::run(&sim, |nodes, clock| {
        let out = Rc::clone(&tokens);
        async move {
            let me = clock.me();
            let (round, ttl, start) = match me {
                0 => (600, 2_000, 0),
                _ => (6_000, 20_000, 350),
            };
            let config = Config::default()
                .with_round_timeout(Duration::from_millis(round))
                .with_retry_count(0)
                .with_restart_guard(false);
            let Ok(engine) = Engine::new(nodes, clock, config, [me as u8 + 1; 32]) else {
                return;
            };
            engine.clock().sleep(Duration::from_millis(start)).await;
            if let Ok(Some(lock)) = engine
                .lock_fenced(b"r0", Duration::from_millis(ttl), false)
                .await
            {
                let mut t = out.get();
                t[me] = lock.token();
                out.set(t);
            }
        }
    });
    let t = tokens.get();
    (t[0], t[1])
}
