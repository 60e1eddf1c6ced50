//! The workload's folded releases (`engine/fold.rs`): a client takes two to four locks of the
//! contended resources, works, and releases them all at once, as separate callers of one engine would: one
//! future each, polled together ([`join_all`]), so that the first release goes alone and the others queue and go
//! out folded in one round (`RELEASE_BATCH` on the script nodes, one native command per key elsewhere).
//!
//! Besides every property of the checker (a fold that deleted a key it does not hold would let two holders
//! overlap), each verdict is checked against the nodes: a lock released only after its key expired on every node
//! (virtual time past its acquisition's reply plus its TTL: a node set the key no earlier, and its clock advanced
//! at least as fast as real time since, unless a clock fault held it back) cannot be confirmed released by any
//! node, so its verdict must not be `Ok`. A fold that counts a reply for the wrong key gives such a lock a
//! neighbour's confirmation.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use muxlock::redlock::sim::Clock;

use super::check::Hold;
use super::node::{MS, Time};
use super::{Rng, Sim};

type SimEngine = super::calls::Checked;

/// A release's future, borrowing the engine.
type Release<'a> = Pin<Box<dyn Future<Output = muxlock::Result<usize>> + 'a>>;

/// Polls every future until all are done: after a pass in which one finished, passes again at once (a fold's
/// next leader is made when the round before it ends, and must be polled to start its round before the task
/// waits). Returns their outputs in order.
pub async fn join_all<T>(futures: Vec<Pin<Box<dyn Future<Output = T> + '_>>>) -> Vec<T> {
    let mut futures: Vec<Option<Pin<Box<dyn Future<Output = T> + '_>>>> =
        futures.into_iter().map(Some).collect();
    let mut out: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    poll_fn(move |cx| {
        loop {
            let mut finished = false;
            for (slot, done) in futures.iter_mut().zip(out.iter_mut()) {
                if let Some(future) = slot {
                    if let Poll::Ready(v) = future.as_mut().poll(cx) {
                        *done = Some(v);
                        *slot = None;
                        finished = true;
                    }
                }
            }
            if futures.iter().all(Option::is_none) {
                return Poll::Ready(out.iter_mut().filter_map(Option::take).collect());
            }
            if !finished {
                return Poll::Pending;
            }
        }
    })
    .await
}

/// A release future that may be cut: its verdict, or `None` if it was dropped part-way.
type MaybeCut<'a> = Pin<Box<dyn Future<Output = Option<muxlock::Result<usize>>> + 'a>>;

/// A release future dropped after `polls` polls if it has not finished by then (`None`: never): an async caller
/// that gave up. Its output: the verdict, or `None` if it was dropped.
struct Cut<'a> {
    release: Option<Release<'a>>,
    polls: Option<u64>,
}

impl Future for Cut<'_> {
    type Output = Option<muxlock::Result<usize>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let Some(release) = self.release.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(v) = release.as_mut().poll(cx) {
            self.release = None;
            return Poll::Ready(Some(v));
        }
        match &mut self.polls {
            Some(0 | 1) => {
                self.release = None; // dropped part-way: queued, leading, or alone
                Poll::Ready(None)
            }
            Some(n) => {
                *n -= 1;
                Poll::Pending
            }
            None => Poll::Pending,
        }
    }
}

/// One session: locks on two to four of the resources `r0`..`r3`, each with its own TTL, held for a drawn
/// time, then released together; what folded goes into the world's [`Struck`](super::Struck).
pub async fn hold(engine: &SimEngine, sim: &Sim, rng: &mut Rng, me: usize, cut: bool) {
    let clock = engine.clock();
    let mut held = Vec::new();
    for r in 0..rng.range(2, 4) {
        let name = format!("r{r}");
        let ttl = Duration::from_millis(rng.range(100, 1_500));
        sim.world().history.ops += 1;
        let asked = sim.world().now;
        if let Ok(Some(lock)) = engine.try_lock(name.as_bytes(), ttl).await {
            let mut w = sim.world();
            let (from, until) = (w.now, w.time(me, lock.valid_until()));
            let i = w.history.hold(Hold {
                client: me,
                kind: "folded lock",
                resource: name.as_bytes().to_vec(),
                holder: lock.value().as_bytes().to_vec(),
                from,
                until,
                token: None,
            });
            // Gone from every node by then: set no earlier than the round began, for `ttl` of the node's clock.
            let expired_at = from + ttl.as_nanos() as Time + MS;
            held.push((lock, i, expired_at, asked));
        }
    }
    if held.is_empty() {
        return;
    }
    // Half the time a short stay; else up to past some of the leases.
    let pause = match rng.chance(0.5) {
        true => rng.range(0, 50),
        false => rng.range(0, 1_600),
    };
    clock.sleep(Duration::from_millis(pause)).await;
    let now = sim.world().now;
    let mut names = Vec::new();
    let mut releases: Vec<MaybeCut<'_>> = Vec::new();
    for (lock, i, expired_at, asked) in held {
        let mut w = sim.world();
        w.history.end(i, now);
        // A clock held back (stepped back, stopped) since the key was set may keep it: not judged then.
        let paced = !w.nodes.iter().any(|n| n.clock_held_back_since(asked));
        drop(w);
        names.push((lock.resource().to_vec(), now >= expired_at && paced));
        let release: Release<'_> = Box::pin(engine.unlock(lock));
        // Cut after this many polls (an async caller that gave up), or never.
        let polls = match cut && rng.chance(0.35) {
            true => Some(rng.range(1, 4)),
            false => None,
        };
        releases.push(Box::pin(Cut {
            release: Some(release),
            polls,
        }));
    }
    sim.world().history.ops += releases.len() as u64;
    let before = engine.folds();
    let verdicts = join_all(releases).await;
    let mut w = sim.world();
    for ((name, expired), verdict) in names.iter().zip(&verdicts) {
        let Some(verdict) = verdict else {
            w.struck.cut_releases += 1;
            continue;
        };
        if *expired && verdict.is_ok() {
            w.history.breaks(format!(
                "c{me} {}: released as {verdict:?} though its key had expired on every node",
                String::from_utf8_lossy(name)
            ));
        }
    }
    let (rounds, folded) = engine.folds();
    w.struck.folded_rounds += rounds - before.0;
    w.struck.folded += folded - before.1;
    // This client's releases are all this session's while it waits for them: some went out folded.
    if folded > before.1 && verdicts.iter().all(|v| matches!(v, Some(Ok(_)))) {
        w.struck.folded_confirmed += 1;
    }
    w.struck.expired_released += names.iter().filter(|(_, e)| *e).count() as u64;
}
