//! One extension and one release for a [`Lock`] of any kind: the kind decides the round, never the caller. Plain and
//! fenced locks extend by the compare-and-pexpire of their key; sets and owned holds by their script, in
//! [`Engine::extend_scripted`], the one extension voting loop of the scripted kinds.

use std::time::Duration;

use bytes::BytesMut;

use crate::net::NodeSet;
use crate::redlock::engine::pipeline::Kind as Pipe;
use crate::redlock::engine::seam::{Clock, NodeRound, Nodes};
use crate::redlock::engine::{Engine, answered, settle};
use crate::redlock::error::{Error, Outcome, Report, Result};
use crate::redlock::kind::lock::{Kind, Lock};
use crate::redlock::kind::owner::Owner;
use crate::redlock::kind::reentrant::count_key;
use crate::redlock::kind::set::{keys, set_name};
use crate::redlock::lua;
use crate::redlock::quorum::{Failure, Quorum, Status, Vote};
use crate::redlock::token;
use crate::resp::Decimal;
use crate::time::later;

/// What an acquisition asks for: the kind and its resources, checked (names not empty, a set sorted and
/// deduplicated).
#[derive(Debug)]
pub(crate) enum Want<'a> {
    /// One resource.
    One(&'a [u8]),
    /// A set, all or none: its names sorted and deduplicated. Each attempt draws its own value, as for one
    /// resource (see `kind/set.rs`, "A value per attempt").
    Set(&'a [Vec<u8>]),
    /// One resource with a fencing token.
    Fenced(&'a [u8]),
    /// One hold of `owner`'s reentrant lock.
    Owned(&'a Owner, &'a [u8]),
}

impl Want<'_> {
    /// The kind's name in traces and metrics.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Want::One(_) => "plain",
            Want::Set(..) => "set",
            Want::Fenced(_) => "fenced",
            Want::Owned(..) => "owned",
        }
    }

    /// The name reports and this process' line of waiters use: the resource, or a set's first name.
    pub(crate) fn resource(&self) -> &[u8] {
        match self {
            Want::One(r) | Want::Fenced(r) | Want::Owned(_, r) => r,
            Want::Set(names) => names.first().map_or(&[][..], Vec::as_slice),
        }
    }
}

/// An acquisition round under way, undone if its future is dropped before the round concludes: see
/// [`Engine::attempt_any`] (and the queued attempt, `queued.rs`). `fresh` is the attempt's value (an owned hold's
/// id).
pub(crate) struct Undo<'a, N: Nodes, C: Clock> {
    engine: &'a Engine<N, C>,
    want: &'a Want<'a>,
    fresh: token::Value,
    armed: bool,
}

impl<'a, N: Nodes, C: Clock> Undo<'a, N, C> {
    /// Armed: dropped as it is, it releases what an attempt at `want` with the value `fresh` may have set.
    pub(crate) fn new(engine: &'a Engine<N, C>, want: &'a Want<'a>, fresh: token::Value) -> Self {
        Undo {
            engine,
            want,
            fresh,
            armed: true,
        }
    }

    /// The round concluded (its own failure path releases partial grants): nothing to undo.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl<N: Nodes, C: Clock> Drop for Undo<'_, N, C> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let engine = self.engine;
        let mut request = BytesMut::new();
        match self.want {
            // A fenced attempt's key holds its value too; the counter is left alone (no token was handed out).
            Want::One(resource) | Want::Fenced(resource) => {
                engine.release_unawaited(&mut request, NodeSet::ALL, resource, &self.fresh);
                return;
            }
            Want::Set(names) => {
                lua::eval(
                    &mut request,
                    lua::RELEASE_MANY,
                    true,
                    &keys(names),
                    &[&self.fresh],
                );
            }
            Want::Owned(owner, resource) => {
                let counter = count_key(resource, engine.fanout.routed());
                lua::eval(
                    &mut request,
                    lua::RELEASE_REENTRANT,
                    true,
                    &[resource, &counter],
                    &[&owner.value, &self.fresh],
                );
            }
        }
        let mut round = engine.fanout.release_round(engine.clock.now());
        round.send_to(NodeSet::ALL, &request, 1);
    }
}

impl<N: Nodes, C: Clock> Engine<N, C> {
    /// One acquisition round of any kind: the lock, or why not with every node's outcome (partial grants are
    /// released by then, as each kind does it).
    ///
    /// **Cancel-safe**: if this future is dropped before the round concludes (an async caller gave up), an
    /// [`Undo`] releases whatever the attempt may have been granted, on every node, at once and unawaited
    /// (each kind's release is a compare-and-delete of this attempt's own value or hold id: a node that never
    /// granted removes nothing). On the blocking seam the future is never dropped part-way; the guard costs a
    /// flag.
    #[allow(clippy::type_complexity)]
    pub(crate) async fn attempt_any(
        &self,
        want: &Want<'_>,
        ttl: Duration,
        ttl_ms: u64,
    ) -> Result<std::result::Result<Lock, (Failure, Report)>> {
        // A fresh value per attempt, for every kind (for an owned hold the value is the owner's and the fresh id
        // is the hold's): the clean-up of a failed attempt is a compare-and-delete of that value, so whenever it
        // runs, even after a later attempt of the same call on the same node, it removes only what the attempt
        // it cleans up set (the contract of `Fanout::release_round`).
        let fresh = self
            .tokens
            .draw("drawing the lock value from the OS's randomness")?;
        let mut undo = Undo::new(self, want, fresh);
        let got = match want {
            Want::One(resource) => self.attempt(resource, fresh, ttl, ttl_ms).await,
            Want::Set(names) => self
                .attempt_many(names, fresh, ttl, ttl_ms)
                .await
                .map(Lock::from),
            Want::Fenced(resource) => self
                .attempt_fenced(resource, fresh, ttl, ttl_ms)
                .await?
                .map(Lock::from),
            Want::Owned(owner, resource) => self
                .attempt_reentrant(owner, resource, fresh, ttl, ttl_ms)
                .await?
                .map(Lock::from),
        };
        undo.disarm();
        Ok(got)
    }

    /// Acquires `want`: one attempt, or (`retry`) up to [`Config::retry_count`](crate::redlock::Config) more
    /// after a jittered pause — the one retry loop of every kind. [`Error::Held`] if another holder had it at
    /// the last attempt, [`Error::Quorum`] for any other failure, each with the last attempt's report.
    pub(crate) async fn acquire_any(
        &self,
        want: &Want<'_>,
        ttl: Duration,
        ttl_ms: u64,
        retry: bool,
    ) -> Result<Lock> {
        let mut attempt = 0;
        loop {
            let (failure, report) = match self.attempt_any(want, ttl, ttl_ms).await? {
                Ok(lock) => return Ok(lock),
                Err(failed) => failed,
            };
            if !retry || attempt >= self.config.retry_count {
                let report = Box::new(report);
                return Err(match failure {
                    Failure::Held => Error::Held(report),
                    _ => Error::Quorum(report),
                });
            }
            attempt += 1;
            self.clock.sleep(self.retry_pause()).await;
        }
    }

    /// Extends `lock`'s lease to `ttl` from now, as its kind is extended. On failure (or if this future is dropped
    /// before it ends) the lock keeps its lease, cut to what the attempt may have left on the nodes if `ttl` is
    /// shorter ([`Engine::after_failed_extension`]).
    pub(crate) async fn extend_any(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        match lock.kind.clone() {
            Kind::Plain | Kind::Fenced(_) => self.extend(lock, ttl).await,
            Kind::Set(names) => {
                let names = keys(&names);
                let value = lock.value;
                self.extend_scripted(lock, ttl, lua::EXTEND_MANY, &names, |ttl| {
                    vec![value.to_vec(), ttl.to_vec()]
                })
                .await
            }
            Kind::Owned { owner, hold, .. } => {
                let counter = count_key(&lock.resource, self.fanout.routed());
                let resource = lock.resource.clone();
                let owner = owner.value;
                self.extend_scripted(
                    lock,
                    ttl,
                    lua::EXTEND_REENTRANT,
                    &[&resource, &counter],
                    |ttl| vec![owner.to_vec(), hold.to_vec(), ttl.to_vec()],
                )
                .await
            }
        }
    }

    /// Releases `lock` as its kind is released; the number of nodes that confirmed.
    pub(crate) async fn release(&self, lock: &Lock) -> Result<usize> {
        match &lock.kind {
            Kind::Plain => self.unlock(lock).await,
            Kind::Fenced(token) => self.unlock_fenced(lock, *token).await,
            Kind::Set(names) => self.unlock_many(lock, names).await,
            Kind::Owned { owner, hold, .. } => self
                .unlock_reentrant(
                    (&lock.resource, lock.nodes),
                    (&owner.value, hold),
                    lua::RELEASE_REENTRANT,
                )
                .await
                .map(|(released, _)| released),
        }
    }

    /// The extension round of a scripted kind: `script` with `keys` and the arguments `args(ttl in ms)` on every
    /// node the acquisition was sent to, decided by a majority (1 = extended, 0 = not ours any more) before the
    /// new lease's validity and before the current lease ends. A lock past its lease or its extension limit is
    /// refused before anything is sent: an extension never revives an expired lock.
    pub(crate) async fn extend_scripted(
        &self,
        lock: &mut Lock,
        ttl: Duration,
        script: lua::Lua,
        keys: &[&[u8]],
        args: impl Fn(&[u8]) -> Vec<Vec<u8>>,
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
        let args = args(ttl_arg.as_bytes());
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let need = quorum.votes_to_decide();
        let acquired = lock.acquired;
        self.pipelined(
            Pipe::Normal,
            lock.nodes,
            1,
            deadline,
            need,
            |buf, full| lua::eval(buf, script, full, keys, &args),
            |_, (node, source), reply| {
                status = self.extension_vote(
                    (node, source),
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
                let report =
                    Box::new(self.report(&set_name(lock.resources()), outcomes, quorum.quorum()));
                Err(match failure {
                    Failure::Held => Error::LockLost(report),
                    _ => Error::Quorum(report),
                })
            }
        }
    }
}
