//! [`Engine`]: the engine. The Redlock rounds themselves (acquire, extend, release, inspect, the guards' batched
//! renewal) over the nodes behind the seam (`seam.rs`), on the time of the clock it is given. It knows nothing
//! of guards, the watchdog, waiting or the manager: they call it.

pub(crate) mod any;
pub(crate) mod batch;
pub(crate) mod fenced;
pub(crate) mod native;
pub(crate) mod persist;
pub(crate) mod pipeline;
pub(crate) mod queued;
pub(crate) mod reentrant;
pub(crate) mod release;
pub(crate) mod renew;
pub(crate) mod restart;
pub(crate) mod seam;
pub(crate) mod set;

use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::net::{Fanout, NodeError, NodeSet, Reply};
use crate::redlock::config::Config;
use crate::redlock::engine::release::Tally;
use crate::redlock::engine::restart::Setup;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes, SystemClock};
use crate::redlock::error::{Error, Outcome, Report, Result};
use crate::redlock::inspect::{Inspection, KeyState, key_state};
use crate::redlock::kind::lock::{Kind, Lock};
use crate::redlock::kind::{Refused, compare_vote, refused, script_vote, set_vote};
use crate::redlock::quorum::{Failure, Quorum, Status, Vote, drift};
use crate::redlock::scripts;
use crate::redlock::scripts::{Native, Script, Via};
use crate::redlock::stats::{Activity, NodeStats, Stats, Votes};
use crate::redlock::token::Tokens;
use crate::resp::{Value, encode_command};
use crate::time::later;

/// The engine: the nodes, the clock, the configuration, the lock values' source, the restart guard and the
/// per-node tallies; every round of every kind of lock is a method of it.
#[derive(Debug)]
pub(crate) struct Engine<N = Fanout, C = SystemClock> {
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
        let nodes = (0..self.fanout.len())
            .map(|i| {
                let restarts = self
                    .restart
                    .guard
                    .as_ref()
                    .map_or(0, |(g, _)| g.restarts(i));
                let standing = self
                    .restart
                    .guard
                    .as_ref()
                    .map(|(g, info)| g.standing(&self.fanout, i, *info, self.clock.now()))
                    .unwrap_or_default();
                NodeStats::new(
                    self.fanout.addrs()[i].clone(),
                    &self.votes[i],
                    restarts,
                    standing,
                    self.fanout.stats(i),
                )
            })
            .collect();
        Stats::new(nodes, activity)
    }
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    pub(crate) fn quorum(&self) -> usize {
        self.fanout.len() / 2 + 1
    }

    pub(crate) async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        self.config.check_ttl(ttl)?;
        if lock.extensions >= self.config.max_extensions {
            return Err(Error::ExtendLimit(lock.extensions));
        }
        if self.clock.now() >= lock.valid_until {
            return Err(Error::Expired);
        }
        lock.valid_until = self
            .extend_on(
                &lock.resource,
                &lock.value,
                (lock.nodes, Some(lock.acquired)),
                ttl,
                Some(lock.valid_until),
            )
            .await?;
        lock.extensions += 1;
        Ok(())
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
    }

    pub(crate) async fn unlock(&self, lock: &Lock) -> Result<usize> {
        self.release_on(&lock.resource, &lock.value, lock.nodes)
            .await
    }

    /// [`LockManager::unlock_value`](crate::redlock::LockManager::unlock_value): a release on every node, by value.
    pub(crate) async fn unlock_value(&self, resource: &[u8], value: &[u8]) -> Result<usize> {
        if resource.is_empty() {
            return Err(Error::config("the resource name is empty"));
        }
        check_value(value)?;
        self.release_on(resource, value, NodeSet::ALL).await
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
        // A node's replies come in request order: its GET's outcome first, then its PTTL's.
        let mut gets: Vec<Option<Reply>> = vec![None; n];
        let mut states: Vec<Option<KeyState>> = vec![None; n];
        let mut pending = 2 * n;
        round.need(pending);
        while let Some((node, reply)) = round.next().await {
            let Some(get) = gets.get_mut(node) else {
                continue;
            };
            match get.take() {
                None if states[node].is_none() => *get = Some(reply),
                None => continue, // a third outcome for a node: never happens; ignore it
                Some(first) => states[node] = Some(key_state(first, Some(reply))),
            }
            pending = pending.saturating_sub(1);
            round.need(pending);
        }
        drop(round);
        let nodes = self
            .fanout
            .addrs()
            .iter()
            .cloned()
            .zip(states.into_iter().zip(gets))
            .map(|(addr, (state, get))| {
                let state = state.unwrap_or_else(|| match get {
                    Some(first) => key_state(first, None),
                    None => KeyState::Failed(Outcome::Failed(NodeError::Timeout)),
                });
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
    /// Returns the new lease's end.
    async fn extend_on(
        &self,
        resource: &[u8],
        value: &[u8],
        (nodes, acquired): (NodeSet, Option<Instant>),
        ttl: Duration,
        decide_by: Option<Instant>,
    ) -> Result<Instant> {
        let ttl_ms = self.config.check_ttl(ttl)?;
        let start = self.clock.now();
        let drift = drift(ttl, self.config.drift_factor);
        let mut quorum = Quorum::new(self.fanout.len(), start, ttl, drift);
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
            |node, reply| {
                let now = self.clock.now();
                let (vote, outcome) = self.counted(node, script_vote(&reply), now, acquired);
                self.votes[node].count(&outcome);
                outcomes[node] = outcome;
                status = quorum.vote(node, vote, now);
                match status {
                    Status::Pending => quorum.votes_to_decide(),
                    _ => 0,
                }
            },
        )
        .await;
        settle(status, &quorum, self.clock.now()).map_err(|failure| {
            let report = Box::new(self.report(resource, outcomes, quorum.quorum()));
            if failure == Failure::Held {
                Error::LockLost(report)
            } else {
                Error::Quorum(report)
            }
        })
    }

    /// The release round shared by `unlock` and `unlock_value`: compare-and-delete on `nodes`, counted by a
    /// [`Tally`]: the number of nodes that deleted the key by the time a majority confirmed, or why not.
    async fn release_on(&self, resource: &[u8], value: &[u8], nodes: NodeSet) -> Result<usize> {
        let quorum = self.quorum();
        let deadline = later(self.clock.now(), self.config.round_timeout);
        let mut tally = Tally::new(&self.votes, self.fanout.len(), quorum, nodes);
        self.script_round(
            Script::Release,
            resource,
            value,
            0,
            (nodes, deadline, quorum),
            |node, reply| tally.vote(node, script_vote(&reply)),
        )
        .await;
        tally.finish(self, resource)
    }

    /// A node's vote as it counts: a "yes" from a node the restart guard does not trust yet is no vote. `since`:
    /// for an extension (or a renewal), when the lock was acquired (`None`: an acquisition, or unknown); see
    /// [`RestartGuard::trusts`](crate::redlock::engine::restart::RestartGuard::trusts).
    pub(crate) fn counted(
        &self,
        node: usize,
        (vote, outcome): (Vote, Outcome),
        now: Instant,
        since: Option<Instant>,
    ) -> (Vote, Outcome) {
        match &self.restart.guard {
            Some((guard, info))
                if vote == Vote::Yes && !guard.trusts(&self.fanout, node, *info, now, since) =>
            {
                (Vote::Failed, Outcome::Quarantined)
            }
            _ => (vote, outcome),
        }
    }

    pub(crate) fn note_ttl(&self, ttl_ms: u64) {
        if let Some((guard, _)) = &self.restart.guard {
            guard.note_ttl(ttl_ms);
        }
    }

    pub(crate) fn check(&self, resource: &[u8], ttl: Duration) -> Result<u64> {
        if resource.is_empty() {
            return Err(Error::config("the resource name is empty"));
        }
        self.config.check_ttl(ttl)
    }

    /// One acquisition round. `Err` carries why it failed and every node's outcome; partial grants have been
    /// released by then.
    #[allow(clippy::type_complexity)]
    pub(crate) async fn attempt(
        &self,
        resource: &[u8],
        ttl: Duration,
        ttl_ms: u64,
    ) -> Result<std::result::Result<Lock, (Failure, Report)>> {
        let value = self
            .tokens
            .draw("drawing the lock value from the OS's randomness")?;
        let n = self.fanout.len();
        let mut request = BytesMut::with_capacity(64 + resource.len());
        scripts::acquire(&mut request, resource, &value, ttl_ms);
        self.note_ttl(ttl_ms);
        // The clock starts before the first byte is sent, as the spec requires.
        let start = self.clock.now();
        let mut quorum = Quorum::new(n, start, ttl, drift(ttl, self.config.drift_factor));
        let mut round = self
            .fanout
            .round(later(start, self.config.round_timeout).min(quorum.deadline()));
        let nodes = round.send_all(&request, 1);
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let mut status = Status::Pending;
        round.need(quorum.votes_to_decide());
        while let Some((node, reply)) = round.next().await {
            let now = self.clock.now();
            let (vote, outcome) = self.counted(node, set_vote(reply), now, None);
            self.votes[node].count(&outcome);
            outcomes[node] = outcome;
            status = quorum.vote(node, vote, now);
            if status != Status::Pending {
                break; // decided: slower replies are drained later; a release covers them
            }
            round.need(quorum.votes_to_decide());
        }
        drop(round);
        // The round is over: nodes that did not answer count as failed (#24: an undecided split is not an outage).
        Ok(self.conclude(status, &quorum, start, (resource, value), nodes, outcomes))
    }

    /// How an acquisition round of one key ends (plain or queued): a round still undecided is judged closed
    /// (silent nodes count as failed, #24); the lock if a majority granted it in time, else why, with every
    /// node's outcome — after releasing at once wherever the key may have been set, without waiting: the spec's
    /// "unlock all the instances", and it keeps a failed attempt from blocking others until the TTL.
    pub(crate) fn conclude(
        &self,
        status: Status,
        quorum: &Quorum,
        start: Instant,
        (resource, value): (&[u8], crate::redlock::token::Value),
        nodes: NodeSet,
        outcomes: Vec<Outcome>,
    ) -> std::result::Result<Lock, (Failure, Report)> {
        let now = self.clock.now();
        let status = match status {
            Status::Pending => quorum.closed(now),
            decided => decided,
        };
        match settle(status, quorum, now) {
            Ok(valid_until) => Ok(Lock {
                resource: resource.to_vec(),
                value,
                valid_until,
                acquired: start,
                extensions: 0,
                nodes,
                kind: Kind::Plain,
            }),
            Err(failure) => {
                let mut release = BytesMut::new();
                self.release_unawaited(&mut release, nodes, resource, &value);
                Err((failure, self.report(resource, outcomes, quorum.quorum())))
            }
        }
    }

    /// Runs `script` on `nodes` until the round ends by `deadline` or `on_reply` says to stop: it returns how many
    /// more replies are worth waiting for before it is called again (`need` at first), 0 to stop. Each node gets
    /// the cheapest correct request it has ([`Engine::via`]: its native command, else the script by hash); a node
    /// that refuses it (see [`Refused`]: nothing ran) gets it once another way, so no vote is lost to a refusal
    /// ([`Engine::next_via`]). A release must reach every reachable node: it goes in a release round (see
    /// [`Fanout::release_round`]).
    pub(crate) async fn script_round(
        &self,
        script: Script,
        resource: &[u8],
        value: &[u8],
        ttl_ms: u64,
        (nodes, deadline, need): (NodeSet, Instant, usize),
        mut on_reply: impl FnMut(usize, Reply) -> usize,
    ) {
        let mut round = match script {
            Script::Release => self.fanout.release_round(deadline),
            Script::Extend => self.fanout.round(deadline),
        };
        let mut request = BytesMut::with_capacity(128 + resource.len());
        let sent = self.send_compare(
            &mut round,
            &mut request,
            script,
            nodes,
            (resource, value, ttl_ms),
        );
        round.need(need);
        // Nodes sent a native command they have not run yet on this connection (the first of each kind on a new
        // connection): their answer is awaited even once `on_reply` has had enough, so that a refusal (an ACL
        // without `+delifeq`) is seen and the script sent instead. Unseen, that node would keep the key until
        // its lease ends, and be sent the refused command again next time. The cost: a node that hangs at its
        // first native command holds that one round to its deadline (once per connection: a timeout counts as
        // "ran").
        let mut unsure: u64 = 0;
        for (_, set) in &sent[1..] {
            for node in (0..self.fanout.len().min(64)).filter(|&n| set.contains(n)) {
                if !self.restart.natives.ran(node, script) {
                    unsure |= 1 << node;
                }
            }
        }
        let mut enough = false;
        // Per node, the ways tried (allocated only if some node refused one: after a SCRIPT FLUSH, on a node whose
        // ACL lacks a command), so that a release or an extension allocates nothing for it.
        let mut tried: Vec<Tried> = Vec::new();
        while let Some((node, reply)) = round.next().await {
            let via = tried
                .get(node)
                .map_or_else(|| first_via(&sent, node), |t| t.last);
            let why = refused(&reply);
            if node < 64 {
                unsure &= !(1 << node);
            }
            if let Some(why) = why {
                if tried.is_empty() {
                    tried = (0..self.fanout.len())
                        .map(|n| Tried::new(first_via(&sent, n)))
                        .collect();
                }
                if let Some(next) = tried
                    .get_mut(node)
                    .and_then(|t| self.next_via(node, script, t, via, why))
                {
                    request.clear();
                    scripts::compare(&mut request, script, next, resource, value, ttl_ms);
                    round.send(node, &request, 1);
                    if !enough {
                        continue;
                    }
                }
            } else if matches!(via, Via::Native(_)) {
                // Ran, or no answer (a hung node is waited for once per connection, not every round).
                self.restart.natives.note_ran(node, script);
            }
            if !enough {
                match on_reply(node, compare_reply(script, via, reply)) {
                    0 => enough = true,
                    more => round.need(more),
                }
            }
            if enough {
                if unsure == 0 {
                    break;
                }
                round.need(unsure.count_ones() as usize);
            }
        }
    }

    /// Releases `resource` (held with `value`) on `nodes` without waiting for the replies (a failed attempt's
    /// partial grants). Nobody sees a refusal there, so a node whose native release has not run yet on its
    /// connection (its ACL may lack it) is sent the script by hash as well: both compare-and-delete the same
    /// value, so whichever is allowed deletes the key and the other finds nothing.
    pub(crate) fn release_unawaited(
        &self,
        request: &mut BytesMut,
        nodes: NodeSet,
        resource: &[u8],
        value: &[u8],
    ) {
        let mut round = self.fanout.release_round(self.clock.now());
        let sent = self.send_compare(
            &mut round,
            request,
            Script::Release,
            nodes,
            (resource, value, 0),
        );
        let mut unsure = NodeSet::EMPTY;
        for (_, set) in &sent[1..] {
            for node in (0..self.fanout.len()).filter(|&n| set.contains(n)) {
                if !self.restart.natives.ran(node, Script::Release) {
                    unsure.insert(node);
                }
            }
        }
        if unsure != NodeSet::EMPTY {
            request.clear();
            scripts::compare(request, Script::Release, Via::Sha, resource, value, 0);
            round.send_to(unsure, request, 1);
        }
    }

    /// Sends `script`'s compare-and-X request to `nodes`, each the cheapest way it has: one encoding and one send
    /// per way in use (one of each on a uniform cluster). Returns which nodes were sent which way.
    pub(crate) fn send_compare(
        &self,
        round: &mut N::Round<'_>,
        request: &mut BytesMut,
        script: Script,
        nodes: NodeSet,
        (resource, value, ttl_ms): (&[u8], &[u8], u64),
    ) -> [(Via, NodeSet); 3] {
        let mut ways: [(Via, NodeSet); 3] = [
            (Via::Sha, NodeSet::EMPTY),
            (Via::Native(Native::DelIfEq), NodeSet::EMPTY),
            (Via::Native(Native::DelEx), NodeSet::EMPTY),
        ];
        for node in (0..self.fanout.len()).filter(|&n| nodes.contains(n)) {
            let via = self.via(script, node);
            // Both natives extend alike (`SET IFEQ`): one request for them.
            let i = match via {
                Via::Native(Native::DelIfEq) => 1,
                Via::Native(Native::DelEx) if script == Script::Release => 2,
                Via::Native(_) => 1,
                Via::Sha | Via::Full => 0,
            };
            ways[i].1.insert(node);
        }
        for (via, set) in ways {
            if set != NodeSet::EMPTY {
                request.clear();
                scripts::compare(request, script, via, resource, value, ttl_ms);
                round.send_to(set, request, 1);
            }
        }
        ways
    }

    /// How `script` goes to `node` first: its native command if its current connection has one, else the script
    /// by hash.
    #[inline]
    pub(crate) fn via(&self, script: Script, node: usize) -> Via {
        match self.restart.natives.of(&self.fanout, node, script) {
            Some(native) => Via::Native(native),
            None => Via::Sha,
        }
    }

    /// The way to try after `node` refused `refused` for `why`, if one is left: a lost script in full; the
    /// script after a refused native command (and the node keeps to the scripts for that connection); the
    /// node's native command after a refused script (`NOPERM` without `+evalsha`, `EVAL` disabled), read again
    /// now that its set-up is surely done. Each way is tried once per round.
    pub(crate) fn next_via(
        &self,
        node: usize,
        script: Script,
        tried: &mut Tried,
        refused: Via,
        why: Refused,
    ) -> Option<Via> {
        let next = match (refused, why) {
            (Via::Sha, Refused::NoScript) => Via::Full,
            (Via::Native(_), _) => {
                self.restart.natives.refused(node, script);
                if tried.has(Via::Sha) {
                    Via::Full
                } else {
                    Via::Sha
                }
            }
            (Via::Sha | Via::Full, _) => {
                Via::Native(self.restart.natives.of(&self.fanout, node, script)?)
            }
        };
        if tried.has(next) {
            return None;
        }
        tried.add(next);
        Some(next)
    }

    pub(crate) fn report(&self, resource: &[u8], outcomes: Vec<Outcome>, quorum: usize) -> Report {
        // Nodes whose grant was not counted: how long they have been up and until they count, for the message.
        let now = self.clock.now();
        let not_counted = match &self.restart.guard {
            Some((guard, info)) => outcomes
                .iter()
                .enumerate()
                .filter(|(_, o)| **o == Outcome::Quarantined)
                .map(|(i, _)| {
                    let s = guard.standing(&self.fanout, i, *info, now);
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
            resource: resource.to_vec(),
            nodes,
            quorum,
            holder_ttl: None,
            not_counted,
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

/// The ways a compare-and-X request was tried on one node in a round, and the last.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tried {
    pub(crate) last: Via,
    mask: u8,
}

impl Tried {
    pub(crate) fn new(first: Via) -> Tried {
        Tried {
            last: first,
            mask: Tried::bit(first),
        }
    }

    fn bit(via: Via) -> u8 {
        match via {
            Via::Sha => 1,
            Via::Full => 2,
            Via::Native(Native::DelIfEq) => 4,
            Via::Native(Native::DelEx) => 8,
        }
    }

    fn has(&self, via: Via) -> bool {
        self.mask & Tried::bit(via) != 0
    }

    fn add(&mut self, via: Via) {
        self.mask |= Tried::bit(via);
        self.last = via;
    }
}

/// The way [`Engine::send_compare`] sent to `node` (the script by hash if it sent nothing there).
fn first_via(sent: &[(Via, NodeSet); 3], node: usize) -> Via {
    sent.iter()
        .find(|(_, set)| set.contains(node))
        .map_or(Via::Sha, |(via, _)| *via)
}

/// A compare-and-X reply made readable by the scripts' reader: the native extension's `+OK` / nil become 1 / 0
/// (the scripts' and `DELIFEQ`'s replies are that already).
fn compare_reply(script: Script, via: Via, reply: Reply) -> Reply {
    match (script, via) {
        (Script::Extend, Via::Native(_)) => match compare_vote(script, via, &reply).0 {
            Vote::Yes => Ok(Value::Integer(1)),
            Vote::Taken => Ok(Value::Integer(0)),
            _ => reply,
        },
        _ => reply,
    }
}

/// Whether a node's outcome means it no longer holds the key: it is down (refuses connections, or closed or reset
/// the connection), so it holds nothing unless it persisted its keys, which a lock cannot count on.
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
