//! The rounds a scripted kind runs (a set, a fenced lock, an owned hold: one script per node carries the kind's
//! request): the acquisition ([`Engine::acquire_scripted`]), decided by the quorum with each reply read by the
//! kind, and the extension ([`Engine::extend_scripted`]) of a [`Scripted`] extension, which the guards' renewal
//! (`renew.rs`) sends too.

use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::net::{NodeError, NodeSet, Reply};
use crate::redlock::engine::lease::Lease;
use crate::redlock::engine::pipeline::{Purpose, scripts_only};
use crate::redlock::engine::seam::{Clock, Nodes};
use crate::redlock::engine::{Engine, answered, settle};
use crate::redlock::error::{Error, Outcome, Result};
use crate::redlock::lua::{self, Lua};
use crate::redlock::quorum::{Failure, Quorum, Status, Vote};
use crate::resp::Decimal;
use crate::time::later;

/// A kind's extension script: `lua` with `keys` and `args`, and the new TTL in milliseconds as its last
/// argument. 1 is extended, 0 is not ours any more.
#[derive(Debug)]
pub(crate) struct Scripted {
    pub(crate) lua: Lua,
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) args: Vec<Vec<u8>>,
}

impl Scripted {
    /// The script's call with the TTL `ttl_ms` (digits), by hash, or in full (`full`).
    pub(crate) fn encode(&self, buf: &mut BytesMut, full: bool, ttl_ms: &[u8]) {
        let keys: Vec<&[u8]> = self.keys.iter().map(Vec::as_slice).collect();
        let args: Vec<&[u8]> = self
            .args
            .iter()
            .map(Vec::as_slice)
            .chain([ttl_ms])
            .collect();
        lua::eval(buf, self.lua, full, &keys, &args);
    }
}

/// How long an acquisition round reads ([`Engine::acquire_scripted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Up to its verdict: its caller waits for it.
    ToVerdict,
    /// A waiting request's attempt: past a failed verdict, on for the outcomes still owed, for as long again as
    /// the verdict took, at most a tenth of the round timeout (never past the round's deadline): beside a hung
    /// node a refused waiter reacts that much later to a hand-off. It sleeps after a refusal anyway, and each
    /// node read refusing is one its clean-up skips ([`Untouched`](crate::redlock::engine::untouched)): a
    /// refused attempt decided by the first majority of refusals otherwise releases, for nothing, on every node
    /// whose refusal came a moment later.
    OnAfterRefusal,
}

/// What one scripted acquisition round ([`Engine::acquire_scripted`]) found.
pub(crate) struct Acquired {
    /// When the round started: the lease is counted from here.
    pub(crate) start: Instant,
    pub(crate) quorum: Quorum,
    pub(crate) status: Status,
    /// Every node's outcome (those the round did not wait for: `NotAwaited`).
    pub(crate) outcomes: Vec<Outcome>,
    /// The nodes the script was sent to.
    pub(crate) nodes: NodeSet,
    /// Of those, the ones that refused every request of the round, each answered ([`Untouched`]: `classify`
    /// said [`Outcome::Taken`]).
    ///
    /// [`Untouched`]: crate::redlock::engine::untouched::Untouched
    pub(crate) untouched: NodeSet,
    /// The largest number that a counted grant carried (a fencing token, a hold count; 0 if none).
    pub(crate) count: u64,
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// One acquisition round of `script` on every node, in Redlock's way: sent at once, each reply classified by
    /// `classify` into a vote, an outcome and a number, votes counted through the restart guard, the round ended
    /// as soon as the quorum's verdict is certain. Shared by sets, fencing and reentrant locks.
    pub(crate) async fn acquire_scripted(
        &self,
        script: lua::Lua,
        (keys, args): (&[&[u8]], &[&[u8]]),
        (ttl, ttl_ms): (Duration, u64),
        reading: Reading,
        classify: impl FnMut(usize, &Reply) -> (Vote, Outcome, u64),
    ) -> Acquired {
        self.acquire_with(
            script,
            (keys, args),
            (ttl, ttl_ms, reading),
            scripts_only(),
            classify,
        )
        .await
    }

    /// [`acquire_scripted`](Self::acquire_scripted), where the nodes of `natively` are sent what `encode_native`
    /// writes instead: a native command that does what the script does, with the script's replies (a node that
    /// refuses it gets the script; see [`pipelined_with`](Self::pipelined_with)).
    pub(crate) async fn acquire_with(
        &self,
        script: lua::Lua,
        (keys, args): (&[&[u8]], &[&[u8]]),
        (ttl, ttl_ms, reading): (Duration, u64, Reading),
        native: (NodeSet, impl Fn(&mut BytesMut), impl Fn(usize)),
        mut classify: impl FnMut(usize, &Reply) -> (Vote, Outcome, u64),
    ) -> Acquired {
        let n = self.fanout.len();
        self.note_ttl(ttl_ms);
        let start = self.clock.now();
        let mut quorum = Quorum::new(n, start, ttl, self.config.allowance(ttl));
        let deadline = later(start, self.config.round_timeout).min(quorum.deadline());
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let mut status = Status::Pending;
        let mut count = 0;
        let mut touched = NodeSet::EMPTY;
        let need = quorum.votes_to_decide();
        let (nodes, settled) = self
            .pipelined_with(
                Purpose::Lease,
                (NodeSet::ALL, 1, deadline, need),
                |buf, full| lua::eval(buf, script, full, keys, args),
                native,
                |(_, pass), (node, source), reply| {
                    let now = self.clock.now();
                    let (vote, outcome, number) = classify(node, &reply);
                    if outcome != Outcome::Taken {
                        touched.insert(node);
                    }
                    let key = keys.first().copied().unwrap_or_default();
                    if status != Status::Pending {
                        // Read on past the verdict: it only tells where the attempt left the key as it was. The
                        // report names it as a vote before the verdict would be (a young node's grant is not
                        // counted, and says so); a node the round stopped reading on for was not awaited, not
                        // silent.
                        let (_, outcome) =
                            self.counted_from((source, key), (vote, outcome), now, None);
                        let cut = outcome == Outcome::Failed(NodeError::Timeout);
                        if outcomes[node] == Outcome::NotAwaited && !cut {
                            outcomes[node] = outcome;
                        }
                        return (0, NodeSet::EMPTY, None);
                    }
                    let (vote, outcome) =
                        self.counted_from((source, key), (vote, outcome), now, None);
                    self.votes[node].count(&outcome);
                    if quorum.answered(node, pass, vote) {
                        outcomes[node] = outcome;
                    }
                    if vote == Vote::Yes {
                        // Only counted grants: a node the restart guard does not trust may have lost its counters.
                        count = count.max(number);
                    }
                    status = quorum.vote(node, vote, now);
                    let mut again = NodeSet::EMPTY;
                    if status == Status::Pending {
                        again = quorum.take_back_taken();
                        status = self.without_silent(&mut quorum, &mut outcomes);
                    }
                    match status {
                        Status::Pending => (quorum.votes_to_decide(), again, None),
                        Status::Failed(_) if reading == Reading::OnAfterRefusal => {
                            let verdict_took = now.saturating_duration_since(start);
                            let read_on =
                                later(now, verdict_took.min(self.config.round_timeout / 10));
                            (0, again, Some(read_on))
                        }
                        _ => (0, again, None),
                    }
                },
            )
            .await;
        Acquired {
            start,
            quorum,
            status,
            outcomes,
            nodes,
            untouched: settled.difference(touched),
            count,
        }
    }

    /// The extension round of a scripted kind: `script` on every node the acquisition was sent to, decided by a majority (1 = extended, 0 = not ours any more) before the
    /// new lease's validity and before the current lease ends. A lock past its lease or its extension limit is
    /// refused before anything is sent: an extension never revives an expired lock.
    /// Failures are reported under `name` (a set's names, joined).
    pub(crate) async fn extend_scripted(
        &self,
        lock: &mut Lease,
        ttl: Duration,
        script: &Scripted,
        name: &[u8],
    ) -> Result<()> {
        let ttl_ms = self.config.check_ttl(ttl)?;
        if lock.extensions >= self.config.max_extensions {
            return Err(Error::ExtendLimit(lock.extensions));
        }
        let start = self.clock.now();
        if start >= lock.valid_until {
            return Err(Error::Expired);
        }
        let n = self.fanout.len();
        let mut quorum =
            Quorum::new(n, start, ttl, self.config.allowance(ttl)).decide_by(lock.valid_until);
        // The failure's validity before anything is sent: a future dropped part-way leaves the lock so.
        lock.valid_until = self.after_failed_extension(lock.valid_until, start, ttl);
        let before = Engine::<N, C>::pending(lock, ttl);
        self.note_ttl(ttl_ms);
        let deadline = later(start, self.config.round_timeout).min(quorum.deadline());
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let mut status = Status::Pending;
        // Nodes the acquisition never reached hold nothing of ours: their vote is "not ours", unasked.
        for (node, outcome) in outcomes.iter_mut().enumerate() {
            if !lock.nodes.contains(node) {
                *outcome = Outcome::NotSent;
                status = quorum.vote(node, Vote::Taken, start);
            }
        }
        let ttl_arg = Decimal::new(i64::try_from(ttl_ms).unwrap_or(i64::MAX));
        let need = quorum.votes_to_decide();
        let acquired = lock.acquired;
        self.pipelined(
            Purpose::Lease,
            lock.nodes,
            1,
            deadline,
            need,
            |buf, full| script.encode(buf, full, ttl_arg.as_bytes()),
            |_, (node, source), reply| {
                let key = script.keys.first().map_or(&[][..], Vec::as_slice);
                status = self.extension_vote(
                    (node, source, key),
                    &reply,
                    Some(acquired),
                    (&mut quorum, &mut outcomes),
                );
                match status {
                    Status::Pending => quorum.votes_to_decide(),
                    _ => 0,
                }
            },
        )
        .await;
        if outcomes.iter().all(answered) {
            lock.pending_ttl = before;
        }
        match settle(status, &quorum, self.clock.now()) {
            Ok(valid_until) => {
                lock.valid_until = self.bounded(lock, valid_until, start);
                lock.extensions += 1;
                Ok(())
            }
            Err(failure) => {
                let key = script.keys.first().map_or(&[][..], Vec::as_slice);
                let report = Box::new(self.report_keyed((name, key), outcomes, quorum.quorum()));
                Err(match failure {
                    Failure::Held => Error::LockLost(report),
                    _ => Error::Quorum(report),
                })
            }
        }
    }
}
