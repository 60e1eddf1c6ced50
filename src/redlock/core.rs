//! [`Core`]: the state a [`LockManager`](super::LockManager) handle shares with its guards and its watchdog, and
//! the Redlock rounds themselves (acquire, extend, release) over the [`Fanout`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::config::Config;
use super::error::{Error, Outcome, Report, Result};
use super::guard::{Held, Lost};
use super::inspect::{Inspection, KeyState, key_state};
use super::lock::Lock;
use super::quorum::{Failure, Quorum, Status, Vote, drift};
use super::restart::{RestartGuard, SetupIds};
use super::schedule::{renewal_due, retry_due};
use super::scripts::{self, Script};
use super::seam::{Clock, NodeRound, Nodes, SystemClock};
use super::stats::{Activity, NodeStats, Stats, Votes};
use super::token::Tokens;
use super::wait::WaitRoom;
use super::watchdog::Watchdog;
use crate::net::{Fanout, NodeError, NodeSet, Reply};
use crate::resp::{Value, encode_command};
use crate::sync::lock;
use crate::time::later;

/// Everything a manager's handles, guards and watchdog share.
#[derive(Debug)]
pub(crate) struct Core<N = Fanout, C = SystemClock> {
    /// The nodes, through the seam (`seam.rs`).
    pub(crate) fanout: N,
    /// Where the rounds' time comes from.
    pub(crate) clock: C,
    pub(crate) config: Config,
    pub(crate) tokens: Tokens,
    /// The restart-aware quorum, when on, and where its readings are among the set-up replies.
    pub(crate) restart: Option<(RestartGuard, SetupIds)>,
    /// Per node: the outcomes of every round, for [`LockManager::stats`](super::LockManager::stats).
    pub(crate) votes: Vec<Votes>,
    /// Renews the guards; its thread holds only a `Weak` on this core.
    pub(crate) watchdog: Arc<Watchdog>,
    /// This process' waiters, per resource.
    pub(crate) waits: WaitRoom,
    /// What guards and waiters did, for [`LockManager::stats`](super::LockManager::stats).
    pub(crate) activity: Activity,
}

impl<N, C> Drop for Core<N, C> {
    fn drop(&mut self) {
        self.watchdog.stop();
    }
}

/// What a round's reply means for the vote.
pub(crate) fn set_vote(reply: Reply) -> (Vote, Outcome) {
    match reply {
        Ok(v) => match v.without_attributes() {
            Value::SimpleString(s) if &s[..] == b"OK" => (Vote::Yes, Outcome::Granted),
            Value::NullBulk | Value::Null => (Vote::Taken, Outcome::Taken),
            other => (Vote::Failed, unexpected(other)),
        },
        Err(e) => (Vote::Failed, Outcome::Failed(e)),
    }
}

fn unexpected(v: &Value) -> Outcome {
    match v {
        Value::Error(msg) | Value::BulkError(msg) => {
            Outcome::ErrorReply(String::from_utf8_lossy(msg).into_owned())
        }
        other => Outcome::ErrorReply(format!("unexpected reply {other:?}")),
    }
}

/// What a compare-and-X script's reply means: 1 is done for us, 0 is "the key is not ours", anything else failed.
pub(crate) fn script_vote(reply: &Reply) -> (Vote, Outcome) {
    match reply {
        Ok(v) => match v.without_attributes() {
            Value::Integer(1) => (Vote::Yes, Outcome::Granted),
            Value::Integer(0) => (Vote::Taken, Outcome::Taken),
            other => (Vote::Failed, unexpected(other)),
        },
        Err(e) => (Vote::Failed, Outcome::Failed(e.clone())),
    }
}

/// A lock value given by a caller (`extend_value`, `unlock_value`): anything but empty. An empty value would match
/// a key someone set to the empty string, which no Redlock client does.
fn check_value(value: &[u8]) -> Result<()> {
    if value.is_empty() {
        return Err(Error::config("the lock value is empty"));
    }
    Ok(())
}

pub(crate) fn is_noscript(reply: &Reply) -> bool {
    matches!(reply.as_ref().map(Value::without_attributes), Ok(Value::Error(m)) if m.starts_with(b"NOSCRIPT"))
}

impl Core {
    pub(crate) fn stats(&self) -> Stats {
        let nodes = (0..self.fanout.len())
            .map(|i| {
                let restarts = self.restart.as_ref().map_or(0, |(g, _)| g.restarts(i));
                let standing = self
                    .restart
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
        Stats::new(nodes, &self.activity)
    }
}

impl<N: Nodes, C: Clock> Core<N, C> {
    pub(crate) fn quorum(&self) -> usize {
        self.fanout.len() / 2 + 1
    }

    pub(crate) fn lock(&self, resource: &[u8], ttl: Duration) -> Result<Lock> {
        let ttl_ms = self.check(resource, ttl)?;
        let mut attempt = 0;
        loop {
            let (failure, report) = match self.attempt(resource, ttl, ttl_ms)? {
                Ok(lock) => return Ok(lock),
                Err(failed) => failed,
            };
            if attempt >= self.config.retry_count {
                let report = Box::new(report);
                return Err(if failure == Failure::Held {
                    Error::Held(report)
                } else {
                    Error::Quorum(report)
                });
            }
            attempt += 1;
            self.clock.sleep(self.retry_pause());
        }
    }

    pub(crate) fn try_lock(&self, resource: &[u8], ttl: Duration) -> Result<Option<Lock>> {
        let ttl_ms = self.check(resource, ttl)?;
        match self.attempt(resource, ttl, ttl_ms)? {
            Ok(lock) => Ok(Some(lock)),
            Err((Failure::Held, _)) => Ok(None),
            Err((_, report)) => Err(Error::Quorum(Box::new(report))),
        }
    }

    pub(crate) fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        self.config.check_ttl(ttl)?;
        if lock.extensions >= self.config.max_extensions {
            return Err(Error::ExtendLimit(lock.extensions));
        }
        if self.clock.now() >= lock.valid_until {
            return Err(Error::Expired);
        }
        lock.valid_until = self.extend_on(
            &lock.resource,
            &lock.value,
            (lock.nodes, Some(lock.acquired)),
            ttl,
            Some(lock.valid_until),
        )?;
        lock.extensions += 1;
        Ok(())
    }

    /// [`LockManager::extend_value`](super::LockManager::extend_value): an extension on every node, by value.
    pub(crate) fn extend_value(
        &self,
        resource: &[u8],
        value: &[u8],
        ttl: Duration,
    ) -> Result<Instant> {
        self.check(resource, ttl)?;
        check_value(value)?;
        self.extend_on(resource, value, (NodeSet::ALL, None), ttl, None)
    }

    pub(crate) fn unlock(&self, lock: Lock) -> Result<usize> {
        self.release_on(&lock.resource, &lock.value, lock.nodes)
    }

    /// [`LockManager::unlock_value`](super::LockManager::unlock_value): a release on every node, by value.
    pub(crate) fn unlock_value(&self, resource: &[u8], value: &[u8]) -> Result<usize> {
        if resource.is_empty() {
            return Err(Error::config("the resource name is empty"));
        }
        check_value(value)?;
        self.release_on(resource, value, NodeSet::ALL)
    }

    /// [`LockManager::inspect`](super::LockManager::inspect): `GET` and `PTTL` pipelined to every node in one
    /// round; each node's replies become a [`KeyState`].
    pub(crate) fn inspect(&self, resource: &[u8]) -> Result<Inspection> {
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
        while let Some((node, reply)) = round.next() {
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
    fn extend_on(
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
        );
        settle(status, &quorum, self.clock.now()).map_err(|failure| {
            let report = Box::new(self.report(resource, outcomes, quorum.quorum()));
            if failure == Failure::Held {
                Error::LockLost(report)
            } else {
                Error::Quorum(report)
            }
        })
    }

    /// The release round shared by `unlock` and `unlock_value`: compare-and-delete on `nodes`; the number of nodes
    /// that deleted the key by the time a majority confirmed, every node answered, or the round timed out.
    fn release_on(&self, resource: &[u8], value: &[u8], nodes: NodeSet) -> Result<usize> {
        let n = self.fanout.len();
        let quorum = self.quorum();
        let deadline = later(self.clock.now(), self.config.round_timeout);
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let (mut released, mut answered) = (0, 0);
        // Nodes the acquisition never reached have nothing to delete: they count as answered.
        for (node, outcome) in outcomes.iter_mut().enumerate() {
            if !nodes.contains(node) {
                *outcome = Outcome::NotSent;
                answered += 1;
            }
        }
        self.script_round(
            Script::Release,
            resource,
            value,
            0,
            (nodes, deadline, quorum),
            |node, reply| {
                let (vote, outcome) = script_vote(&reply);
                self.votes[node].count(&outcome);
                outcomes[node] = outcome;
                released += usize::from(vote == Vote::Yes);
                answered += usize::from(vote != Vote::Failed);
                quorum.saturating_sub(released)
            },
        );
        // Whatever the outcome, the key may be free now: this process' waiters look.
        self.waits.notify(resource);
        if answered < quorum {
            return Err(Error::Quorum(Box::new(
                self.report(resource, outcomes, quorum),
            )));
        }
        Ok(released)
    }

    /// One renewal of each guard in `guards`, all in one round: every guard's compare-and-pexpire pipelined in
    /// one request per node. Returns, per guard, when to renew it next, or `None` if it is lost (its state says
    /// why, and whoever waits on it was woken).
    ///
    /// A renewal counts only if a majority confirms it before the guard's deadline (its lease minus the margin):
    /// a lost guard is never revived. A renewal that fails for want of answers is tried again soon, until the
    /// deadline; one that finds the key gone or taken on too many nodes, or those nodes down (refusing or closing
    /// connections: a node that restarts without persistence comes back without the key), ends the guard at once.
    pub(crate) fn renew(&self, guards: &[Arc<Held>]) -> Vec<Option<Instant>> {
        let n = self.fanout.len();
        let start = self.clock.now();
        let mut next = vec![None; guards.len()];
        // The guards still worth renewing, and each one's decision.
        let mut live: Vec<(usize, Quorum)> = Vec::with_capacity(guards.len());
        for (i, g) in guards.iter().enumerate() {
            let s = lock(&g.state);
            if let Some(lost) = g.lost_at(&s, start) {
                drop(s);
                self.lost(g, lost);
                continue;
            }
            let deadline = g.deadline_of(&s);
            drop(s);
            let q = Quorum::new(n, start, g.ttl, drift(g.ttl, self.config.drift_factor));
            live.push((i, q.decide_by(deadline)));
        }
        if live.is_empty() {
            return next;
        }
        let k = live.len();
        let mut request = BytesMut::with_capacity(k * 128);
        for (i, _) in &live {
            let g = &guards[*i];
            self.note_ttl(g.ttl_ms);
            renewal(&mut request, g, false);
        }
        let mut round = self.fanout.round(later(start, self.config.round_timeout));
        round.send_all(&request, k);
        round.need(k);
        // Per node: how many replies came (the i-th reply is for live[i % k]; from k on, for the batch sent again
        // in full after a NOSCRIPT).
        let mut index = vec![0; n];
        let mut resent = vec![false; n];
        let mut outcomes = vec![vec![Outcome::NotAwaited; n]; k];
        let mut status = vec![Status::Pending; k];
        let mut undecided = k;
        while let Some((node, reply)) = round.next() {
            let (j, first) = (index[node] % k, index[node] < k);
            index[node] += 1;
            if first && is_noscript(&reply) {
                if !resent[node] {
                    resent[node] = true;
                    let mut full = BytesMut::with_capacity(k * 256);
                    for (i, _) in &live {
                        let g = &guards[*i];
                        renewal(&mut full, g, true);
                    }
                    round.send(node, &full, k);
                }
                continue; // the guard's vote on this node comes with the script in full
            }
            // A reply from the first batch that worked before a flush, then the same from the second: once.
            if outcomes[j][node] != Outcome::NotAwaited || status[j] != Status::Pending {
                continue;
            }
            let now = self.clock.now();
            let (vote, outcome) = self.counted(
                node,
                script_vote(&reply),
                now,
                Some(guards[live[j].0].acquired),
            );
            self.votes[node].count(&outcome);
            outcomes[j][node] = outcome;
            status[j] = live[j].1.vote(node, vote, now);
            if status[j] != Status::Pending {
                undecided -= 1;
                if undecided == 0 {
                    break;
                }
            }
        }
        drop(round);
        Activity::add(&self.activity.renewal_rounds, 1);
        for (((i, q), status), outcomes) in live.iter().zip(status).zip(outcomes) {
            let g = &guards[*i];
            next[*i] = self.settle_renewal(g, start, settle(status, q, self.clock.now()), outcomes);
        }
        next
    }

    /// Marks a guard lost, and counts it.
    pub(crate) fn lost(&self, g: &Held, why: Lost) {
        if g.set_lost(why) {
            Activity::add(&self.activity.lost, 1);
        }
    }

    /// Applies one renewal's verdict to a guard; returns when to renew it next, `None` if it is lost.
    fn settle_renewal(
        &self,
        g: &Held,
        start: Instant,
        verdict: std::result::Result<Instant, Failure>,
        outcomes: Vec<Outcome>,
    ) -> Option<Instant> {
        let n = self.fanout.len();
        let quorum = self.quorum();
        let now = self.clock.now();
        let mut s = lock(&g.state);
        let deadline = g.deadline_of(&s);
        match verdict {
            // Confirmed in time, and nobody can have seen the guard lost yet (that is decided under this lock).
            Ok(valid_until) if s.lost.is_none() && now < deadline => {
                s.valid_until = valid_until;
                s.renewals += 1;
                Activity::add(&self.activity.renewals, 1);
                s.last_error = None;
                drop(s);
                g.changed.notify_all();
                return Some(renewal_due(start, g.ttl));
            }
            Ok(_) => {
                drop(s);
                self.lost(g, Lost::Expired(None));
                return None;
            }
            Err(_) => {}
        }
        let report = Box::new(self.report(&g.resource, outcomes, quorum));
        let taken = report.taken();
        let gone = report.nodes.iter().filter(|(_, o)| is_gone(o)).count();
        if taken > n - quorum {
            drop(s);
            self.lost(g, Lost::Taken(report));
            return None;
        }
        if taken + gone > n - quorum {
            drop(s);
            self.lost(g, Lost::Down(report));
            return None;
        }
        s.last_error = Some(Error::Quorum(report));
        if now >= deadline {
            let last = s.last_error.take().map(Box::new);
            drop(s);
            self.lost(g, Lost::Expired(last));
            return None;
        }
        Some(retry_due(now, g.ttl, self.config.round_timeout, deadline))
    }

    /// A node's vote as it counts: a "yes" from a node the restart guard does not trust yet is no vote. `since`:
    /// for an extension (or a renewal), when the lock was acquired (`None`: an acquisition, or unknown); see
    /// [`RestartGuard::trusts`](super::restart::RestartGuard::trusts).
    pub(crate) fn counted(
        &self,
        node: usize,
        (vote, outcome): (Vote, Outcome),
        now: Instant,
        since: Option<Instant>,
    ) -> (Vote, Outcome) {
        match &self.restart {
            Some((guard, info))
                if vote == Vote::Yes && !guard.trusts(&self.fanout, node, *info, now, since) =>
            {
                (Vote::Failed, Outcome::Quarantined)
            }
            _ => (vote, outcome),
        }
    }

    pub(crate) fn note_ttl(&self, ttl_ms: u64) {
        if let Some((guard, _)) = &self.restart {
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
    pub(crate) fn attempt(
        &self,
        resource: &[u8],
        ttl: Duration,
        ttl_ms: u64,
    ) -> Result<std::result::Result<Lock, (Failure, Report)>> {
        let value = self.tokens.next().map_err(|e| Error::Os {
            doing: "drawing the lock value from the OS's randomness",
            error: std::io::Error::from(e).into(),
        })?;
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
        while let Some((node, reply)) = round.next() {
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
        let now = self.clock.now();
        let status = match status {
            Status::Pending => quorum.closed(now),
            decided => decided,
        };
        match settle(status, &quorum, now) {
            Ok(valid_until) => Ok(Ok(Lock {
                resource: resource.to_vec(),
                value,
                valid_until,
                acquired: start,
                extensions: 0,
                nodes,
            })),
            Err(failure) => {
                // Release at once wherever the key may have been set, without waiting: the spec's "unlock all
                // the instances", and it keeps a failed attempt from blocking others until the TTL.
                let mut release = BytesMut::new();
                scripts::call(&mut release, Script::Release, false, resource, &value, 0);
                let mut round = self.fanout.release_round(self.clock.now());
                round.send_to(nodes, &release, 1);
                Ok(Err((
                    failure,
                    self.report(resource, outcomes, quorum.quorum()),
                )))
            }
        }
    }

    /// Runs `script` on `nodes` until the round ends by `deadline` or `on_reply` says to stop: it returns how many
    /// more replies are worth waiting for before it is called again (`need` at first), 0 to stop. A node that has
    /// lost the script (`NOSCRIPT`) gets it once more in full with `EVAL`. A release must reach every reachable
    /// node: it goes in a release round (see [`Fanout::release_round`]).
    pub(crate) fn script_round(
        &self,
        script: Script,
        resource: &[u8],
        value: &[u8],
        ttl_ms: u64,
        (nodes, deadline, need): (NodeSet, Instant, usize),
        mut on_reply: impl FnMut(usize, Reply) -> usize,
    ) {
        let mut request = BytesMut::with_capacity(128 + resource.len());
        scripts::call(&mut request, script, false, resource, value, ttl_ms);
        let mut round = match script {
            Script::Release => self.fanout.release_round(deadline),
            Script::Extend => self.fanout.round(deadline),
        };
        round.send_to(nodes, &request, 1);
        round.need(need);
        // Which nodes got the script in full; allocated only if some node has lost it (rare: after a restart or
        // a SCRIPT FLUSH), so that a release or an extension allocates nothing for it.
        let mut resent: Vec<bool> = Vec::new();
        while let Some((node, reply)) = round.next() {
            if is_noscript(&reply) && !resent.get(node).copied().unwrap_or(false) {
                resent.resize(self.fanout.len(), false);
                resent[node] = true;
                request.clear();
                scripts::call(&mut request, script, true, resource, value, ttl_ms);
                round.send(node, &request, 1);
                continue;
            }
            match on_reply(node, reply) {
                0 => break,
                more => round.need(more),
            }
        }
    }

    pub(crate) fn report(&self, resource: &[u8], outcomes: Vec<Outcome>, quorum: usize) -> Report {
        // Nodes whose grant was not counted: how long they have been up and until they count, for the message.
        let now = self.clock.now();
        let not_counted = match &self.restart {
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

/// One guard's renewal command: compare-and-pexpire of its key, or of every key of its set together.
fn renewal(buf: &mut BytesMut, g: &Held, full: bool) {
    match &g.set {
        None => scripts::call(buf, Script::Extend, full, &g.resource, &g.value, g.ttl_ms),
        Some(set) => {
            let keys: Vec<&[u8]> = set.iter().map(|k| &k[..]).collect();
            let ttl = crate::resp::Decimal::new(i64::try_from(g.ttl_ms).unwrap_or(i64::MAX));
            super::lua::eval(
                buf,
                super::lua::EXTEND_MANY,
                full,
                &keys,
                &[&g.value, ttl.as_bytes()],
            );
        }
    }
}

/// Whether a node's outcome means it no longer holds the key: it is down (refuses connections, or closed or reset
/// the connection), so it holds nothing unless it persisted its keys, which a lock cannot count on.
fn is_gone(outcome: &Outcome) -> bool {
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
