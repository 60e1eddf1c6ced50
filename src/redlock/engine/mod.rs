//! [`Engine`]: the engine. The machinery of the Redlock rounds (quorum rounds, compare-and-X extensions and
//! releases, scripted acquisitions and extensions, pipelining, batches, folded releases, the guards' batched
//! renewal, the restart guard, the clock check, inspection) over the nodes behind the seam (`seam.rs`), on the
//! time of the clock it is given, on [`Lease`]s. It knows no kind of lock by name (each kind is a file of `kind/`
//! that runs its rounds on this machinery), nor guards, the watchdog, waiting or the manager: they call it.

pub(crate) mod awaiting;
pub(crate) mod batch;
pub(crate) mod clock;
pub(crate) mod compare;
pub(crate) mod fold;
pub(crate) mod lease;
pub(crate) mod native;
pub(crate) mod persist;
pub(crate) mod pipeline;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod reply;
pub(crate) mod restart;
pub(crate) mod scripted;
pub(crate) mod seam;
pub(crate) mod untouched;

use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::net::cluster::Members;
use crate::net::{NodeError, NodeSet, Reply};
use crate::redlock::config::Config;
use crate::redlock::engine::clock::Timed;
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::release::Tally;
use crate::redlock::engine::reply::script_vote;
use crate::redlock::engine::restart::{Setup, Standing};
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes, SystemClock};
use crate::redlock::error::{Error, Outcome, Report, Result};
use crate::redlock::inspect::{Inspection, KeyState, key_state};
use crate::redlock::quorum::{Failure, Quorum, Status, Vote};
use crate::redlock::scripts::Script;
use crate::redlock::stats::{Activity, NodeStats, Stats, Votes};
use crate::redlock::token::Tokens;
use crate::resp::encode_command;
use crate::time::later;

/// How many round timeouts a patient round (a plain acquisition, a plain release) may last while nodes are still
/// answering (see [`Round::patient_until`](crate::net::Round::patient_until)): past its first deadline a node
/// that showed no sign of life for a round's length times out as before, so a down or hung node costs what it
/// did; one that answers behind a deep queue (overload) is waited for, up to this bound.
pub(crate) const PATIENT_ROUNDS: u32 = 40;

/// The engine: the nodes, the clock, the configuration, the lock values' source, the restart guard and the
/// per-node tallies; the machinery every kind of lock runs its rounds on.
#[derive(Debug)]
pub(crate) struct Engine<N = Members, C = SystemClock> {
    /// The nodes, through the seam (`seam.rs`).
    pub(crate) fanout: N,
    /// Where the rounds' time comes from.
    pub(crate) clock: C,
    pub(crate) config: Config,
    pub(crate) tokens: Tokens,
    /// What is read from each connection's set-up replies: the restart-aware quorum (when on) and each node's
    /// native commands. (Named for the first; `sim.rs` builds the engine field by field.)
    pub(crate) restart: Setup,
    /// Per node: the outcomes of every round, for [`LockManager::stats`](crate::redlock::LockManager::stats).
    pub(crate) votes: Vec<Votes>,
    /// The plain releases' gate and queue: releases asked for while one is in flight go out folded (`fold.rs`).
    pub(crate) fold: fold::Fold,
}

/// A lock value given by a caller (`extend_value`, `unlock_value`): anything but empty. An empty value would match
/// a key someone set to the empty string, which no Redlock client does.
fn check_value(value: &[u8]) -> Result<()> {
    if value.is_empty() {
        return Err(Error::config("the lock value is empty"));
    }
    Ok(())
}

impl Engine {
    /// The nodes' tallies, with `activity` (what the guards and waiters did).
    pub(crate) fn stats(&self, activity: &Activity) -> Stats {
        let now = self.clock.now();
        let nodes = (0..self.fanout.len())
            .map(|i| {
                // A cluster member's votes come from any of its masters: what the guard knows of each, together.
                let conns = self.fanout.member_conns(i);
                let (restarts, standing) = match &self.restart.guard {
                    None => (0, Standing::default()),
                    Some((g, info)) => {
                        let restarts = conns.iter().map(|&c| g.restarts(c)).sum();
                        let each = conns
                            .iter()
                            .map(|&c| g.standing(&self.fanout, (c, None), *info, now));
                        (restarts, Standing::of_member(each))
                    }
                };
                NodeStats::new(
                    self.fanout.addrs()[i].clone(),
                    &self.votes[i],
                    restarts,
                    (
                        standing.trusted_at_once,
                        standing.counted_in,
                        standing.broken_clock,
                    ),
                    self.fanout.stats(i),
                )
            })
            .collect();
        let mut stats = Stats::new(nodes, activity);
        (stats.releases.folded_rounds, stats.releases.folded) = self.fold.counts();
        stats
    }
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    pub(crate) fn quorum(&self) -> usize {
        self.fanout.len() / 2 + 1
    }

    /// Extends `lock` to `ttl` from now by the compare-and-pexpire of its key (native or scripted per node). On
    /// failure (or if this future is dropped before it ends) the lease is cut to what the attempt may have left on
    /// the nodes if `ttl` is shorter ([`Engine::after_failed_extension`]).
    pub(crate) async fn extend(&self, lock: &mut Lease, ttl: Duration) -> Result<()> {
        self.config.check_ttl(ttl)?;
        if lock.extensions >= self.config.max_extensions {
            return Err(Error::ExtendLimit(lock.extensions));
        }
        let start = self.clock.now();
        let current = lock.valid_until;
        if start >= current {
            return Err(Error::Expired);
        }
        // The failure's validity before anything is sent: a future dropped part-way (an async caller that gave
        // up) leaves the lock so, and the requests it wrote still run on the nodes.
        lock.valid_until = self.after_failed_extension(current, start, ttl);
        let before = Engine::<N, C>::pending(lock, ttl);
        let (extended, answered) = self
            .extend_on(
                &lock.resource,
                &lock.value,
                (lock.nodes, Some(lock.acquired)),
                ttl,
                Some(current),
            )
            .await;
        if answered {
            lock.pending_ttl = before;
        }
        lock.valid_until = self.bounded(lock, extended?, start);
        lock.extensions += 1;
        Ok(())
    }

    /// Notes, before an extension to `ttl` is sent, that its requests may run late ([`Lease`]'s `pending_ttl`);
    /// returns the bound before it, put back once every node answered the extension.
    pub(crate) fn pending(lock: &mut Lease, ttl: Duration) -> Option<Duration> {
        let before = lock.pending_ttl;
        lock.pending_ttl = Some(before.map_or(ttl, |t| t.min(ttl)));
        before
    }

    /// The validity an extension granted with `valid_until`, begun at `start`, may count: no longer than the
    /// shortest extension that may still run late allows. That one, run on a node after this one, sets the
    /// key's expiry to its TTL from then, which is after `start`; the allowance covers the clocks as for any
    /// lease.
    pub(crate) fn bounded(&self, lock: &Lease, valid_until: Instant, start: Instant) -> Instant {
        match lock.pending_ttl {
            Some(t) => valid_until.min(later(start, t.saturating_sub(self.config.allowance(t)))),
            None => valid_until,
        }
    }

    /// A lock's validity after an extension to `ttl`, begun at `start`, failed or was abandoned (its future
    /// dropped before the verdict: the lock is set to this before anything is sent): the extension may still
    /// have run on any node it reached (a reply too late to count, a node that ran it and then failed), and set
    /// the key there to expire `ttl` after it ran. A `ttl` shorter than what was left of the lease so shortens the keys
    /// on nodes the holder counts on, so the lease ends no later than an extension granted at `start` would
    /// have (less the same allowance); a longer `ttl` leaves it as it was.
    pub(crate) fn after_failed_extension(
        &self,
        valid_until: Instant,
        start: Instant,
        ttl: Duration,
    ) -> Instant {
        valid_until.min(later(start, ttl.saturating_sub(self.config.allowance(ttl))))
    }

    /// [`LockManager::extend_value`](crate::redlock::LockManager::extend_value): an extension on every node, by value.
    pub(crate) async fn extend_value(
        &self,
        resource: &[u8],
        value: &[u8],
        ttl: Duration,
    ) -> Result<Instant> {
        self.check(resource, ttl)?;
        check_value(value)?;
        self.extend_on(resource, value, (NodeSet::ALL, None), ttl, None)
            .await
            .0
    }

    /// Releases `lock` by the compare-and-delete of its key (folded with other releases in flight, `fold.rs`).
    pub(crate) async fn unlock(&self, lock: &Lease) -> Result<usize> {
        self.release_folding(&lock.resource, &lock.value, lock.nodes)
            .await
    }

    /// [`LockManager::unlock_value`](crate::redlock::LockManager::unlock_value): a release on every node, by value.
    pub(crate) async fn unlock_value(&self, resource: &[u8], value: &[u8]) -> Result<usize> {
        if resource.is_empty() {
            return Err(Error::config("the resource name is empty"));
        }
        check_value(value)?;
        self.release_folding(resource, value, NodeSet::ALL).await
    }

    /// [`LockManager::inspect`](crate::redlock::LockManager::inspect): `GET` and `PTTL` pipelined to every node in one
    /// round; each node's replies become a [`KeyState`].
    pub(crate) async fn inspect(&self, resource: &[u8]) -> Result<Inspection> {
        if resource.is_empty() {
            return Err(Error::config("the resource name is empty"));
        }
        let n = self.fanout.len();
        let mut request = BytesMut::with_capacity(64 + 2 * resource.len());
        encode_command(&[b"GET", resource], &mut request);
        encode_command(&[b"PTTL", resource], &mut request);
        let mut round = self
            .fanout
            .round(later(self.clock.now(), self.config.round_timeout));
        round.send_all(&request, 2);
        // Per node, by id: the GET's outcome (0) and the PTTL's (1).
        let mut replies: Vec<[Option<Reply>; 2]> = vec![[None, None]; n];
        let mut pending = 2 * n;
        round.need(pending);
        while let Some((id, reply)) = round.next().await {
            let Some(cell) = replies
                .get_mut(id.node)
                .and_then(|r| r.get_mut(id.seq as usize))
            else {
                continue; // an id nothing was sent for: never happens; ignore it
            };
            *cell = Some(reply);
            pending = pending.saturating_sub(1);
            round.need(pending);
        }
        drop(round);
        let nodes = self
            .fanout
            .addrs()
            .iter()
            .cloned()
            .zip(replies)
            .map(|(addr, [get, pttl])| {
                let state = match get {
                    Some(get) => key_state(get, pttl),
                    None => KeyState::Failed(Outcome::Failed(NodeError::Timeout)),
                };
                (addr, state)
            })
            .collect();
        Ok(Inspection {
            resource: resource.to_vec(),
            nodes,
            quorum: self.quorum(),
        })
    }

    /// The extension round shared by `extend` and `extend_value`: compare-and-pexpire on `nodes`, decided by a
    /// majority before the new lease's validity and before `decide_by` (the current lease's end, when known).
    /// Returns the new lease's end, and whether every node sent to answered (none may still run it late).
    async fn extend_on(
        &self,
        resource: &[u8],
        value: &[u8],
        (nodes, acquired): (NodeSet, Option<Instant>),
        ttl: Duration,
        decide_by: Option<Instant>,
    ) -> (Result<Instant>, bool) {
        let ttl_ms = match self.config.check_ttl(ttl) {
            Ok(ms) => ms,
            Err(e) => return (Err(e), true),
        };
        let start = self.clock.now();
        let mut quorum = Quorum::new(self.fanout.len(), start, ttl, self.config.allowance(ttl));
        if let Some(instant) = decide_by {
            quorum = quorum.decide_by(instant);
        }
        self.note_ttl(ttl_ms);
        let deadline = later(start, self.config.round_timeout).min(quorum.deadline());
        let mut outcomes = vec![Outcome::NotAwaited; self.fanout.len()];
        let mut status = Status::Pending;
        // Nodes the acquisition never reached hold nothing of ours: their vote is "not ours", unasked.
        for (node, outcome) in outcomes.iter_mut().enumerate() {
            if !nodes.contains(node) {
                *outcome = Outcome::NotSent;
                status = quorum.vote(node, Vote::Taken, start);
            }
        }
        self.script_round(
            Script::Extend,
            resource,
            value,
            ttl_ms,
            (nodes, deadline, quorum.votes_to_decide()),
            |voter, reply| {
                let (node, source) = voter;
                status = self.extension_vote(
                    (node, source, resource),
                    &reply,
                    acquired,
                    (&mut quorum, &mut outcomes),
                );
                match status {
                    Status::Pending => quorum.votes_to_decide(),
                    _ => 0,
                }
            },
        )
        .await;
        let answered = outcomes.iter().all(answered);
        let verdict = settle(status, &quorum, self.clock.now()).map_err(|failure| {
            let report = Box::new(self.report(resource, outcomes, quorum.quorum()));
            if failure == Failure::Held {
                Error::LockLost(report)
            } else {
                Error::Quorum(report)
            }
        });
        (verdict, answered)
    }

    /// The lone release round of `unlock` and `unlock_value` (one that found no other in flight, see `fold.rs`):
    /// compare-and-delete on `nodes`, counted by a [`Tally`]: the number of nodes that deleted the key by the time
    /// a majority confirmed, or why not.
    pub(crate) async fn release_alone(
        &self,
        resource: &[u8],
        value: &[u8],
        nodes: NodeSet,
    ) -> Result<usize> {
        let quorum = self.quorum();
        let deadline = later(self.clock.now(), self.config.round_timeout);
        let mut tally = Tally::new(&self.votes, self.fanout.len(), quorum, nodes);
        self.script_round(
            Script::Release,
            resource,
            value,
            0,
            (nodes, deadline, quorum),
            |(node, _), reply| tally.vote(node, script_vote(&reply)),
        )
        .await;
        tally.finish(self, resource)
    }

    /// An extension's reply from `node` on `key` (1: extended, 0: not ours any more), counted: through the restart
    /// guard (`since`: when the lock was acquired), into the node's tallies, its outcome and the quorum's verdict.
    pub(crate) fn extension_vote(
        &self,
        (node, source, key): (usize, usize, &[u8]),
        reply: &Reply,
        since: Option<Instant>,
        (quorum, outcomes): (&mut Quorum, &mut [Outcome]),
    ) -> Status {
        let now = self.clock.now();
        let (vote, outcome) = self.counted_from((source, key), script_vote(reply), now, since);
        self.votes[node].count(&outcome);
        outcomes[node] = outcome;
        quorum.vote(node, vote, now)
    }

    /// A node's vote on `key` (a key of the command voted on: a cluster member's commands keep theirs in one
    /// slot) as it counts: a "yes" from a node the restart guard does not trust yet is no vote, nor one
    /// from a node whose `INFO` shows a broken monotonic clock (a clock check failure, with why). `since`:
    /// for an extension (or a renewal), when the lock was acquired (`None`: an acquisition, or unknown); see
    /// [`RestartGuard::trusts`](crate::redlock::engine::restart::RestartGuard::trusts). The vote is judged by
    /// the connection it came on, `source` (the round's [`source`](crate::redlock::engine::seam::NodeRound::source)
    /// of the outcome: the node itself for a plain node): a cluster member's master by its own server process,
    /// and not at all for a window after it took over as a promoted replica or took over `key`'s slot.
    pub(crate) fn counted_from(
        &self,
        (source, key): (usize, &[u8]),
        (vote, outcome): (Vote, Outcome),
        now: Instant,
        since: Option<Instant>,
    ) -> (Vote, Outcome) {
        let Some((guard, info)) = &self.restart.guard else {
            return (vote, outcome);
        };
        if vote != Vote::Yes {
            return (vote, outcome);
        }
        // A server whose monotonic clock is broken keeps its keys forever (`restart/mod.rs`).
        if let Some(why) = guard.broken_clock(&self.fanout, source, *info) {
            return (Vote::Failed, Outcome::Failed(NodeError::Clock(why)));
        }
        match guard.trusts(&self.fanout, (source, key), *info, now, since) {
            true => (vote, outcome),
            false => (Vote::Failed, Outcome::Quarantined),
        }
    }

    /// A round that sets or extends leases: each request carries `TIME`, and a node whose clock disagrees with
    /// this client's counts for nothing (`clock.rs`); over cluster members the routing layer brackets each write
    /// to a cluster node itself (`clock.rs`, "Cluster members"). Not checked when the configuration turns the
    /// check off.
    pub(crate) fn lease_round(&self, deadline: Instant) -> Timed<'_, N::Round<'_>, C> {
        let tolerance = self
            .config
            .clock_check
            .then_some(self.config.clock_tolerance);
        let timed = Timed::new(
            self.fanout.round(deadline),
            self.fanout.len(),
            (&self.clock, &self.restart.clocks),
            tolerance,
        );
        match self.fanout.routed() {
            false => timed,
            true => timed.bracketing_clusters(),
        }
    }

    /// A round that sets no lease (a release), with the type of [`lease_round`](Self::lease_round)'s.
    pub(crate) fn unchecked<'a>(&'a self, round: N::Round<'a>) -> Timed<'a, N::Round<'a>, C> {
        Timed::new(
            round,
            self.fanout.len(),
            (&self.clock, &self.restart.clocks),
            None,
        )
    }

    pub(crate) fn note_ttl(&self, ttl_ms: u64) {
        self.restart.clocks.note_ttl(ttl_ms);
        if let Some((guard, _)) = &self.restart.guard {
            guard.note_ttl(ttl_ms);
        }
    }

    /// How far a patient round opened at `start` may wait for nodes that are still answering
    /// ([`NodeRound::patient_until`]): [`PATIENT_ROUNDS`] round timeouts.
    pub(crate) fn patient_from(&self, start: Instant) -> Instant {
        later(
            start,
            self.config.round_timeout.saturating_mul(PATIENT_ROUNDS),
        )
    }

    pub(crate) fn check(&self, resource: &[u8], ttl: Duration) -> Result<u64> {
        if resource.is_empty() {
            return Err(Error::config("the resource name is empty"));
        }
        self.config.check_ttl(ttl)
    }

    /// The verdict of an acquisition round still undecided after a vote that was not a grant, once the nodes it
    /// waits on are judged: when every node yet to vote has stopped answering (requests outstanding and nothing
    /// read from it for a round timeout and four times its usual round trip, when the sockets were last read:
    /// [`Nodes::silent`]), each counts as failed ([`NodeError::Timeout`]) now, and the round is decided without
    /// them; else it goes on waiting.
    ///
    /// # Why
    ///
    /// Two contenders that split the live nodes (2 grants and 2 refusals of 5) leave a verdict only a paused or
    /// hung fifth node could give: the round waited for its whole timeout, and a waiting line stalled behind each
    /// split for that long. A node silent for four times its usual round trip is not answering in its usual
    /// time; one silent for a round timeout is not answering within the time a round gives it (a patient round's
    /// measure of a node that stopped answering). Any less, and a node whose link slowed down (its usual round
    /// trip, counted since the fanout began, still the old one) is cut whenever an earlier request of this
    /// client to it is still on its way: a split it decides within the round fails for every contender.
    ///
    /// Counting a silent node failed is always safe: it can only take a grant away, and a failed attempt holds
    /// nothing (its release goes on every connection behind its acquisition: a late grant on the silent node is
    /// deleted by the release queued after it, or expires). It costs at most a grant the node would still have
    /// given within the round, and the attempt's caller then retries or waits as after any refusal.
    ///
    /// Only after a vote that was not a grant (a split, or a failure): an attempt whose votes so far are all
    /// grants never asks, so a lone caller's round costs nothing more.
    pub(crate) fn without_silent(&self, quorum: &mut Quorum, outcomes: &mut [Outcome]) -> Status {
        let now = self.clock.now();
        if quorum.yes() == quorum.voted() {
            return quorum.status(now);
        }
        let silence = self.config.round_timeout;
        let all_silent = {
            let mut undecided = quorum.undecided().peekable();
            undecided.peek().is_some() && undecided.all(|node| self.fanout.silent(node, silence))
        };
        if !all_silent {
            return quorum.status(now);
        }
        // Only now, when the round is cut (rare), the list to vote for.
        let silent: Vec<usize> = quorum.undecided().collect();
        for node in silent {
            let outcome = Outcome::Failed(NodeError::Timeout);
            self.votes[node].count(&outcome);
            outcomes[node] = outcome;
            quorum.vote(node, Vote::Failed, now);
        }
        quorum.status(now)
    }

    /// How an acquisition round of one key ends (plain or queued): a round still undecided is judged closed
    /// (silent nodes count as failed); the lock if a majority granted it in time, else why, with every
    /// node's outcome — after releasing at once wherever the key may have been set, without waiting: the spec's
    /// "unlock all the instances", and it keeps a failed attempt from blocking others until the TTL. `nodes`:
    /// those the round was sent to; `untouched`: those of them that refused every request of the round, where
    /// nothing is released ([`untouched`](self::untouched)).
    pub(crate) fn conclude(
        &self,
        status: Status,
        quorum: &Quorum,
        start: Instant,
        (resource, value): (&[u8], crate::redlock::token::Value),
        (nodes, untouched): (NodeSet, NodeSet),
        outcomes: Vec<Outcome>,
    ) -> std::result::Result<Lease, (Failure, Report)> {
        let now = self.clock.now();
        let status = match status {
            Status::Pending => quorum.closed(now),
            decided => decided,
        };
        match settle(status, quorum, now) {
            Ok(valid_until) => Ok(Lease::new(
                resource.to_vec(),
                value,
                (start, valid_until),
                nodes,
            )),
            Err(failure) => {
                let touched = nodes.difference(untouched);
                if self.fanout.len() > 64 || touched != NodeSet::EMPTY {
                    let mut release = BytesMut::new();
                    self.release_unawaited(&mut release, touched, resource, &value);
                }
                Err((failure, self.report(resource, outcomes, quorum.quorum())))
            }
        }
    }

    pub(crate) fn report(&self, resource: &[u8], outcomes: Vec<Outcome>, quorum: usize) -> Report {
        self.report_keyed((resource, resource), outcomes, quorum)
    }

    /// [`report`](Self::report) under `name`, the restart guard's standing judged for votes on `key` (a set's
    /// report is named by all its names; its votes were on its keys' one slot).
    pub(crate) fn report_keyed(
        &self,
        (name, key): (&[u8], &[u8]),
        outcomes: Vec<Outcome>,
        quorum: usize,
    ) -> Report {
        // Nodes whose grant was not counted: how long they have been up and until they count, for the message.
        let now = self.clock.now();
        let not_counted = match &self.restart.guard {
            Some((guard, info)) => outcomes
                .iter()
                .enumerate()
                .filter(|(_, o)| **o == Outcome::Quarantined)
                .map(|(i, _)| {
                    // A cluster member's grant came on one of its connections (which one is not kept): the one
                    // that will count last.
                    let s = self
                        .fanout
                        .member_conns(i)
                        .into_iter()
                        .map(|conn| guard.standing(&self.fanout, (conn, Some(key)), *info, now))
                        .max_by_key(|s| s.counted_in)
                        .unwrap_or_default();
                    (
                        i,
                        s.up.unwrap_or_default(),
                        s.counted_in.unwrap_or_default(),
                    )
                })
                .collect(),
            None => Vec::new(),
        };
        let nodes = self.fanout.addrs().iter().cloned().zip(outcomes).collect();
        Report {
            resource: name.to_vec(),
            nodes,
            quorum,
            holder_ttl: None,
            not_counted,
        }
    }

    /// Acquires by `attempt`: once, or (`retry`) up to [`Config::retry_count`](crate::redlock::Config) more
    /// times after a jittered pause — the one retry loop of every kind. [`Error::Held`] if another holder had it
    /// at the last attempt, [`Error::Quorum`] for any other failure, each with the last attempt's report.
    pub(crate) async fn retrying<T, F>(
        &self,
        retry: bool,
        mut attempt: impl FnMut() -> F,
    ) -> Result<T>
    where
        F: Future<Output = Result<std::result::Result<T, (Failure, Report)>>>,
    {
        let mut tries = 0;
        loop {
            let (failure, report) = match attempt().await? {
                Ok(got) => return Ok(got),
                Err(failed) => failed,
            };
            if !retry || tries >= self.config.retry_count {
                let report = Box::new(report);
                return Err(match failure {
                    Failure::Held => Error::Held(report),
                    _ => Error::Quorum(report),
                });
            }
            tries += 1;
            self.clock.sleep(self.retry_pause()).await;
        }
    }

    /// `retry_delay` ± a uniformly random amount up to `retry_jitter`.
    pub(crate) fn retry_pause(&self) -> Duration {
        let jitter = self
            .config
            .retry_jitter
            .as_nanos()
            .min(u128::from(u64::MAX / 2)) as u64;
        let r = self.tokens.random_u64().unwrap_or(0) % (2 * jitter + 1);
        let delay = self.config.retry_delay;
        if r >= jitter {
            delay + Duration::from_nanos(r - jitter)
        } else {
            delay.saturating_sub(Duration::from_nanos(jitter - r))
        }
    }
}

/// Whether a node's outcome means it no longer holds the key: it is down (refuses connections, or closed or reset
/// the connection), so it holds nothing unless it persisted its keys, which a lock cannot count on.
/// Whether a node's outcome in an extension round means its reply was read (or nothing was sent to it): the
/// request cannot run there later. Anything else (not awaited, timed out, dropped) may still run late.
pub(crate) fn answered(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Granted
            | Outcome::Taken
            | Outcome::NotHeld
            | Outcome::ErrorReply(_)
            | Outcome::Quarantined
            | Outcome::NotSent
    )
}

pub(crate) fn is_gone(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Failed(NodeError::Refused | NodeError::Closed | NodeError::Io(_))
    )
}

/// The verdict once the round is over. Every node has voted or timed out by then, so the state machine has
/// decided; a round that ended early for another reason is a failure unless it holds a majority in time.
pub(crate) fn settle(
    status: Status,
    quorum: &Quorum,
    now: Instant,
) -> std::result::Result<Instant, Failure> {
    let status = if status == Status::Pending {
        quorum.status(now)
    } else {
        status
    };
    match status {
        Status::Acquired { valid_until } => Ok(valid_until),
        Status::Failed(failure) => Err(failure),
        Status::Pending => Err(Failure::Unavailable),
    }
}

/// An engine over a plain fanout to `addrs` with the default configuration, for the engine's unit tests.
#[cfg(test)]
pub(crate) fn test_engine(addrs: Vec<crate::net::NodeAddr>) -> Engine<crate::net::Fanout> {
    let config = Config::default();
    let n = addrs.len();
    let fanout = crate::net::Fanout::new(addrs, crate::net::Options::default()).expect("fanout");
    let (_, restart) = restart::connection_setup(&config, n);
    Engine {
        fanout,
        clock: SystemClock,
        config,
        tokens: Tokens::new(),
        restart,
        votes: (0..n).map(|_| Votes::default()).collect(),
        fold: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_empty_lock_value_from_a_caller_is_refused() {
        assert!(super::check_value(b"").is_err());
        assert!(super::check_value(b"v").is_ok());
    }
}
