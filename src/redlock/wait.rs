//! Waiting for a lock without polling: the loop of a [waiting](super::Request::wait) request around any kind
//! of attempt, on the engine, in this process' line for the resource
//! ([`WaitRoom`](crate::redlock::waiters::WaitRoom), `waiters.rs`), woken by releases and by the watchdog's tracker.
//!
//! After a failed attempt the head of the line probes the nodes (`PTTL`, on the tracker connections, which arms
//! client-side tracking of the key) and sleeps until the holder's lease ends, a release in this process, or an
//! invalidation from the tracker (`watchdog.rs`), whichever comes first.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::net::NodeError;
use crate::redlock::engine::Engine;
use crate::redlock::engine::seam::{NodeRound, Nodes, blocking};
use crate::redlock::error::{Error, Outcome, Report, Result};
use crate::redlock::guard::Keeper;
use crate::redlock::kind::{self, Ask, Intent, Line, Lock};
use crate::redlock::observe;
use crate::redlock::quorum::Failure;
use crate::redlock::stats::Activity;
use crate::redlock::waiters::{Ticket, WaitRoom, Waiter};
use crate::resp::{Value, encode_command};
use crate::time::later;

mod handoff;

/// A waiter's place in its line, left when dropped (with the lock, giving up, or on an error).
struct Place<'a> {
    room: &'a WaitRoom,
    resource: &'a [u8],
    ticket: Ticket,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.room.leave(self.resource, self.ticket);
    }
}

/// What a waiter learned from the nodes after a failed attempt.
struct Probe {
    /// How long until a majority lets the holder's key expire (zero: free already), if known.
    free_in: Option<Duration>,
    /// On how many nodes the key is now tracked: a release there will wake this process' waiters.
    tracked: usize,
}

/// The nodes a wait has said it waits for (their grants not counted by the restart guard): it says so when a
/// node joins them (from the 64th node on, only the first time), not at every attempt.
pub(super) struct Young {
    told: bool,
    nodes: crate::net::NodeSet,
}

impl Young {
    /// A wait's, before its first attempt.
    pub(super) fn new() -> Young {
        Young {
            told: false,
            nodes: crate::net::NodeSet::EMPTY,
        }
    }

    /// Notes a failed attempt's report, and tells of the nodes it waits for if one is new to this wait.
    pub(super) fn note(&mut self, report: &Report) {
        let mut new = false;
        for &(node, ..) in &report.not_counted {
            new |= !self.told || !self.nodes.contains(node);
            self.nodes.insert(node);
        }
        if new {
            self.told = true;
            observe::waiting_for_young(report);
        }
    }
}

/// After this many attempts in a row that failed although the nodes then said the key was free (a race with
/// other clients), the head pauses as after a failure.
const FREE_STREAK: u32 = 3;

/// Acquires `ask` (checked), waiting for it up to `max_wait`. A kind that queues (a plain lock, a semaphore, a
/// read-write lock) waits in the nodes' queue across processes (`handoff`), threads and tasks alike; every other
/// kind (and any on nodes that refuse the queue's scripts) waits in this process' [`Line`], each attempt one round
/// of its kind. Under `block` it blocks the thread; polled by an executor it is a future
/// that never blocks, woken as a parked thread would be unparked, and leaves its line when dropped.
pub(crate) async fn acquire_wait(
    keeper: &Arc<Keeper>,
    ask: &Ask,
    max_wait: Duration,
) -> Result<Lock> {
    let until = later(Instant::now(), max_wait);
    let line = ask.kind.line(&ask.resource);
    // A writer that ends without the lock withdraws its intent (`kind::Intent`).
    let intent = Intent::of(&keeper.engine, ask);
    let mut got = None;
    if ask.kind.queues() && !keeper.waits.unqueued() {
        // Queued across processes: see `handoff`.
        match handoff::queued_wait(keeper, ask, &line, max_wait, &intent).await {
            Ok(queued) => got = Some(queued),
            // The nodes refuse the queue's script (an ACL without its commands or keys, `EVAL` disabled): wait
            // as before the queue, for the time left, and from now on.
            Err(handoff::Refused) => keeper.waits.set_unqueued(),
        }
    }
    let got = match got {
        Some(got) => got,
        None => {
            let left = until.saturating_duration_since(Instant::now());
            wait_for(keeper, &line, left, (ask, &intent)).await
        }
    };
    if got.is_ok() {
        intent.keep();
    }
    got
}

/// The waiting loop around any kind's attempt, for threads and tasks alike: the head of the line attempts,
/// probes the holder's lease when refused, and waits ([`park`]) for a release, an invalidation or its timer.
async fn wait_for(
    keeper: &Arc<Keeper>,
    line: &Line,
    max_wait: Duration,
    (ask, intent): (&Ask, &Intent<'_>),
) -> Result<Lock> {
    let until = later(Instant::now(), max_wait);
    let cancels = keeper.waits.cancels();
    let resource = &line.key[..];
    let waiter = match blocking() {
        true => Waiter::Thread(std::thread::current()),
        false => Waiter::Task(poll_fn(|cx| Poll::Ready(cx.waker().clone())).await),
    };
    let ticket = keeper.waits.join_as(resource, &line.grouped, waiter);
    let _place = Place {
        room: &keeper.waits,
        resource,
        ticket,
    };
    let mut last: Option<Error> = None;
    let mut free_streak = 0;
    let mut waited = false;
    let mut young = Young::new();
    let activity = &keeper.activity;
    loop {
        let (head, generation) = keeper.waits.head(resource, ticket);
        let cancelled = keeper.waits.cancels() != cancels;
        if let Some(e) = give_up(
            keeper,
            (resource, &line.name),
            (head, cancelled, until),
            &mut last,
        ) {
            return Err(e);
        }
        if !head {
            note_wait(&mut waited, activity);
            park(&keeper.waits, (resource, ticket, None), until).await;
            continue;
        }
        let (failure, mut report) = match kind::attempt(&keeper.engine, ask, intent).await? {
            Ok(lock) => return Ok(lock),
            Err(failed) => failed,
        };
        young.note(&report);
        let now = Instant::now();
        let wake = match failure {
            Failure::Held => {
                // Tracking needs the watchdog to listen for the invalidations the probe arms.
                keeper.watchdog.ensure_started(Arc::downgrade(keeper));
                wake_for_holder(
                    keeper,
                    (&line.probed(), line.any),
                    &mut report,
                    &mut free_streak,
                    now,
                )
                .await
            }
            Failure::Unavailable | Failure::TooLate => later(now, keeper.engine.retry_pause()),
        };
        let error = match failure {
            Failure::Held => Error::Held(Box::new(report)),
            _ => Error::Quorum(Box::new(report)),
        };
        keeper.waits.set_error(resource, &error);
        last = Some(error);
        note_wait(&mut waited, activity);
        // A head whose refused attempt left a mark on the nodes that lapses with its lease (a writer's intent)
        // tries again within half a lease, or the mark lapses between its tries and the readers it holds off
        // get in again.
        let wake = match line.marks {
            true => wake.min(later(now, ask.ttl / 2)),
            false => wake,
        };
        sleep(
            keeper,
            (resource, ticket, generation),
            wake.min(until),
            until,
        )
        .await;
    }
}

/// Waits (as [`park`] does) until `wake`, or until the line's generation moves on (a release, an invalidation),
/// and counts the wake-up if it comes before `until`.
async fn sleep(
    keeper: &Keeper,
    (resource, ticket, generation): (&[u8], Ticket, u64),
    wake: Instant,
    until: Instant,
) {
    while Instant::now() < wake && keeper.waits.head(resource, ticket).1 == generation {
        park(&keeper.waits, (resource, ticket, Some(generation)), wake).await;
    }
    if Instant::now() < until {
        Activity::add(&keeper.activity.wakeups, 1);
    }
}

/// Waits until the waiter `ticket` may go on — it heads its line and (with `seen`) the line's generation moved
/// on — or `until`; may return early (callers look again). A thread under `block` parks; a task registers its
/// waker in the line (woken as a thread would be unparked) and a timer for `until`, and never blocks.
async fn park(
    room: &WaitRoom,
    (resource, ticket, seen): (&[u8], Ticket, Option<u64>),
    until: Instant,
) {
    if blocking() {
        room.park(resource, ticket, seen, until);
        return;
    }
    let mut timer = crate::timer::sleep(until.saturating_duration_since(Instant::now()));
    poll_fn(|cx| {
        if room.ready_or_register(resource, ticket, seen, cx.waker()) {
            return Poll::Ready(());
        }
        Pin::new(&mut timer).poll(cx)
    })
    .await;
}

/// Whether a waiter gives up now (its time ran out, or a cancel came): `Some(error)` to return, `None` to go on
/// (the head makes one attempt, even with no time to wait at all). `last` is its own last attempt's error.
fn give_up(
    keeper: &Keeper,
    (resource, name): (&[u8], &[u8]),
    (head, cancelled, until): (bool, bool, Instant),
    last: &mut Option<Error>,
) -> Option<Error> {
    if Instant::now() < until && !cancelled {
        return None;
    }
    let error = last.take().or_else(|| keeper.waits.last_error(resource));
    if error.is_some() || !head || cancelled {
        Activity::add(&keeper.activity.waits_given_up, 1);
    }
    if error.is_some() {
        return error;
    }
    (!head || cancelled).then(|| {
        Error::Held(Box::new(keeper.engine.report(
            name,
            vec![Outcome::NotAwaited; keeper.engine.fanout.len()],
            keeper.engine.quorum(),
        )))
    })
}

/// Counts a wait, once per waiter.
fn note_wait(waited: &mut bool, activity: &Activity) {
    if !*waited {
        *waited = true;
        Activity::add(&activity.waits, 1);
    }
}

/// When the head wakes after an attempt the holder refused: the holder's lease end as the nodes' `PTTL`s say
/// (with a little jitter), at once if the key is free already (up to [`FREE_STREAK`] times in a row), and no
/// later than the retry pause if too few nodes track the key for a release elsewhere to be seen (RESP2-only
/// servers, nodes down): then it looks again as a polling client would. The probe's reading goes in `report`.
async fn wake_for_holder(
    keeper: &Keeper,
    (probed, any): (&[&[u8]], bool),
    report: &mut Report,
    free_streak: &mut u32,
    now: Instant,
) -> Instant {
    let engine = &keeper.engine;
    // Every key must be free (a set): the latest to come free, tracked where all of them are. Any one key
    // (a semaphore's permits): the earliest to come free among those the nodes answered for.
    let mut probe = Probe {
        free_in: (!any).then_some(Duration::ZERO),
        tracked: usize::MAX,
    };
    for resource in probed {
        let p = self::probe(keeper, resource).await;
        probe.free_in = match any {
            false => probe.free_in.zip(p.free_in).map(|(a, b)| a.max(b)),
            true => match (probe.free_in, p.free_in) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        };
        probe.tracked = probe.tracked.min(p.tracked);
    }
    let probe = Probe {
        tracked: probe.tracked.min(engine.fanout.len()),
        ..probe
    };
    report.holder_ttl = probe.free_in.filter(|d| !d.is_zero());
    let wake = match probe.free_in {
        Some(d) if d.is_zero() && *free_streak < FREE_STREAK => {
            *free_streak += 1;
            now
        }
        Some(d) if !d.is_zero() => {
            *free_streak = 0;
            later(now, d + expiry_jitter(engine, d))
        }
        _ => later(now, engine.retry_pause()),
    };
    match probe.tracked < engine.quorum() {
        true => wake.min(later(now, engine.retry_pause())),
        false => wake,
    }
}

/// How long until a majority of nodes no longer hold `resource`'s key, as their `PTTL`s say: zero if it is
/// free on a majority already, `None` if too few answered or the key has no expiry there. On the watchdog's
/// tracker connections the `PTTL` also arms client-side tracking of the key, so that its release, overwrite
/// or expiry wakes the waiters; the manager's own connections stand in for nodes the tracker cannot reach.
async fn probe(keeper: &Keeper, resource: &[u8]) -> Probe {
    let engine = &keeper.engine;
    let mut request = BytesMut::with_capacity(24 + resource.len());
    encode_command(&[b"PTTL", resource], &mut request);
    let quorum = engine.quorum();
    // Per node, milliseconds until the key is gone there (`u64::MAX`: never, it has no expiry).
    let mut left: Vec<Option<u64>> = vec![None; engine.fanout.len()];
    let mut tracked = 0;
    if let Some(tracker) = keeper.watchdog.tracker(engine) {
        // A tracker that never connected to some node has its set-up to do: give it the connect timeout.
        let fresh = (0..tracker.len()).any(|i| tracker.sessions(i) == 0);
        let wait = match fresh {
            true => engine
                .config
                .round_timeout
                .saturating_add(engine.config.connect_timeout),
            false => engine.config.round_timeout,
        };
        let errors = pttl_round(tracker, &request, &mut left, wait, quorum).await;
        keeper.watchdog.note_tracker_errors(errors.iter().map(Some));
        tracked = left.iter().flatten().count();
    }
    if tracked < quorum {
        let enough = quorum.saturating_sub(tracked);
        pttl_round(
            &engine.fanout,
            &request,
            &mut left,
            engine.config.round_timeout,
            enough,
        )
        .await;
    }
    let mut known: Vec<u64> = left.into_iter().flatten().collect();
    known.sort_unstable();
    let free_in = known
        .get(quorum - 1)
        .filter(|ms| **ms != u64::MAX)
        .map(|ms| Duration::from_millis(*ms));
    Probe { free_in, tracked }
}

/// One `PTTL` round on `fanout` for the nodes whose entry in `left` is unknown, until `enough` of them have
/// answered (a majority is enough: a node hung or down must not cost every probe a round timeout) or the
/// round ends; returns the errors seen. The nodes not awaited still run the `PTTL` (and arm tracking): a
/// release is either seen by a reply or pushed, on every node of the answering majority.
async fn pttl_round<N: Nodes>(
    fanout: &N,
    request: &[u8],
    left: &mut [Option<u64>],
    wait: Duration,
    enough: usize,
) -> Vec<NodeError> {
    let mut round = Nodes::round(fanout, later(Instant::now(), wait));
    let mut nodes = crate::net::NodeSet::EMPTY;
    for (node, l) in left.iter().enumerate() {
        if l.is_none() {
            nodes.insert(node);
        }
    }
    round.send_to(nodes, request, 1);
    round.need(enough);
    let mut errors = Vec::new();
    let mut answered = 0;
    while answered < enough {
        // One request per node: its outcome is the node's.
        let Some((id, reply)) = NodeRound::next(&mut round).await else {
            break;
        };
        let node = id.node;
        match reply {
            Ok(v) => {
                if let (Value::Integer(ms), Some(l)) = (v.without_attributes(), left.get_mut(node))
                {
                    *l = match *ms {
                        -2 => Some(0),
                        ms if ms >= 0 => Some(ms.unsigned_abs()),
                        _ => Some(u64::MAX),
                    };
                    answered += 1;
                }
            }
            Err(e) => errors.push(e),
        }
        round.need(enough.saturating_sub(answered));
    }
    errors
}

/// A little extra on a timer set for a holder's expiry: 1 ms for the nodes' millisecond clocks, and up to
/// a sixteenth of the wait (at most 8 ms) at random, so that waiters of several processes do not all try at
/// once.
fn expiry_jitter(engine: &Engine, wait: Duration) -> Duration {
    let spread = (wait / 16).min(Duration::from_millis(8)).as_micros() as u64;
    let r = engine.tokens.random_u64().unwrap_or(0) % (spread + 1);
    Duration::from_millis(1) + Duration::from_micros(r)
}
