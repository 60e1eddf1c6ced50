//! [`LockManager`]: the Redlock algorithm over a [`Fanout`].

use std::thread;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::config::Config;
use super::error::{Error, Outcome, Report, Result};
use super::inspect::{Inspection, KeyState, key_state};
use super::lock::Lock;
use super::quorum::{Failure, Quorum, Status, Vote, drift};
use super::restart::{self, RestartGuard};
use super::scripts::{self, Script};
use super::stats::{NodeStats, Stats, Votes};
use super::token::Tokens;
use crate::net::{Fanout, NodeAddr, NodeError, NodeSet, Options, Reply};
use crate::resp::{Value, encode_command};
use crate::time::later;

/// A distributed lock manager over N independent Redis masters (the Redlock algorithm).
///
/// Every operation sends its request to all N nodes at once and decides as soon as the outcome is certain: an
/// acquisition costs about one round trip to the majority's slowest node, and a node that is down or hung costs
/// nothing unless the majority needs it. `LockManager` is `Send + Sync`: share it between threads (in an `Arc`);
/// concurrent calls pipeline on the same connections.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use muxlock::redlock::LockManager;
///
/// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
/// let lock = locks.lock("invoice:42", Duration::from_secs(10))?;
/// // ... work while lock.is_valid() ...
/// locks.unlock(lock)?;
/// # Ok::<(), muxlock::redlock::Error>(())
/// ```
#[derive(Debug)]
pub struct LockManager {
    fanout: Fanout,
    config: Config,
    tokens: Tokens,
    /// The restart-aware quorum, when on, and the position of its `INFO server` among the set-up commands.
    restart: Option<(RestartGuard, usize)>,
    /// Per node: the outcomes of every round, for [`LockManager::stats`].
    votes: Vec<Votes>,
}

/// Builds a [`LockManager`]: nodes, then an optional [`Config`].
#[derive(Debug, Default)]
#[must_use]
pub struct Builder {
    nodes: Vec<String>,
    config: Config,
}

impl Builder {
    /// Adds a node: `redis://[user:pass@]host:port[/db]` or `host:port` (see [`NodeAddr`]).
    pub fn node(mut self, url: impl Into<String>) -> Builder {
        self.nodes.push(url.into());
        self
    }

    /// Adds several nodes.
    pub fn nodes<S: Into<String>>(mut self, urls: impl IntoIterator<Item = S>) -> Builder {
        self.nodes.extend(urls.into_iter().map(Into::into));
        self
    }

    /// Replaces the configuration (default: [`Config::default`]).
    pub fn config(mut self, config: Config) -> Builder {
        self.config = config;
        self
    }

    /// Checks everything and starts connecting to the nodes (without waiting for them).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for no nodes, an invalid address, the same node listed twice, or an invalid setting.
    /// An even number of nodes is allowed: the majority is then `N/2 + 1`, so 4 nodes tolerate one failure, like 3.
    pub fn build(self) -> Result<LockManager> {
        self.config.validate()?;
        if self.nodes.is_empty() {
            return Err(Error::config(
                "no nodes: give at least one redis://host:port",
            ));
        }
        let mut addrs: Vec<NodeAddr> = Vec::with_capacity(self.nodes.len());
        for url in &self.nodes {
            let addr: NodeAddr = url.parse().map_err(Error::addr)?;
            if let Some(twin) = addrs.iter().find(|a| same_server(a, &addr)) {
                return Err(Error::config(format!(
                    "node {addr} is listed twice (also as {twin}): a majority must span distinct servers"
                )));
            }
            addrs.push(addr);
        }
        let mut setup = scripts::setup_commands();
        let restart = self.config.restart_guard.then(|| {
            setup.push(restart::setup_command());
            let guard = RestartGuard::new(
                addrs.len(),
                self.config.restart_window,
                self.config.drift_factor,
            );
            (guard, setup.len() - 1)
        });
        let opts = Options {
            connect_timeout: self.config.connect_timeout,
            max_in_flight: self.config.max_in_flight,
            hung_timeout: self.config.hung_timeout,
            spin: self.config.spin,
            setup,
            ..Options::default()
        };
        let fanout = Fanout::new(addrs, opts).map_err(|e| Error::Os {
            doing: "creating the event poll",
            error: e.into(),
        })?;
        Ok(LockManager {
            votes: (0..fanout.len()).map(|_| Votes::default()).collect(),
            fanout,
            config: self.config,
            tokens: Tokens::new(),
            restart,
        })
    }
}

/// Two addresses name the same server if host and port match, or if they resolve to a common socket address
/// (`localhost:6379` and `127.0.0.1:6379`). Names that do not resolve now are compared as written.
fn same_server(a: &NodeAddr, b: &NodeAddr) -> bool {
    if a.port() != b.port() {
        return false;
    }
    if a.host().eq_ignore_ascii_case(b.host()) {
        return true;
    }
    match (a.resolve(), b.resolve()) {
        (Ok(x), Ok(y)) => x.iter().any(|s| y.contains(s)),
        _ => false,
    }
}

/// What a round's reply means for the vote.
fn set_vote(reply: Reply) -> (Vote, Outcome) {
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
fn script_vote(reply: &Reply) -> (Vote, Outcome) {
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

fn is_noscript(reply: &Reply) -> bool {
    matches!(reply.as_ref().map(Value::without_attributes), Ok(Value::Error(m)) if m.starts_with(b"NOSCRIPT"))
}

impl LockManager {
    /// A manager for `nodes` (URLs or `host:port`) with the default [`Config`].
    ///
    /// # Errors
    ///
    /// As [`Builder::build`].
    pub fn new<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> Result<LockManager> {
        LockManager::builder().nodes(nodes).build()
    }

    /// A builder, to set a [`Config`].
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The nodes, in configuration order.
    pub fn nodes(&self) -> &[NodeAddr] {
        self.fanout.addrs()
    }

    /// What this manager saw of each node so far: votes granted, taken and failed, grants not counted after a
    /// restart, restarts seen, timeouts, reconnects, requests per write and round-trip percentiles. Cheap enough to
    /// call at any time (no lock is taken); `Display` prints it as a table.
    pub fn stats(&self) -> Stats {
        let nodes = (0..self.fanout.len())
            .map(|i| {
                let restarts = self.restart.as_ref().map_or(0, |(g, _)| g.restarts(i));
                NodeStats::new(
                    self.fanout.addrs()[i].clone(),
                    &self.votes[i],
                    restarts,
                    self.fanout.stats(i),
                )
            })
            .collect();
        Stats::new(nodes)
    }

    /// The majority: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.fanout.len() / 2 + 1
    }

    /// Acquires `resource` for `ttl`, retrying up to [`Config::retry_count`] times with a jittered delay.
    ///
    /// # Errors
    ///
    /// - [`Error::Held`] if another holder still had it at the last attempt;
    /// - [`Error::Quorum`] if too many nodes were down, hung or failing, with every node's outcome;
    /// - [`Error::Config`] for an empty resource name or an invalid `ttl`.
    pub fn lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Lock> {
        let resource = resource.as_ref();
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
            thread::sleep(self.retry_pause());
        }
    }

    /// Acquires `resource` for [`Config::ttl`], retrying as [`lock`](LockManager::lock) does.
    ///
    /// # Errors
    ///
    /// As [`lock`](LockManager::lock).
    pub fn acquire(&self, resource: impl AsRef<[u8]>) -> Result<Lock> {
        self.lock(resource, self.config.ttl)
    }

    /// One attempt to acquire `resource` for `ttl`: `Ok(None)` if another holder has it.
    ///
    /// # Errors
    ///
    /// [`Error::Quorum`] if too many nodes failed to answer for a decision, [`Error::Config`] for invalid
    /// arguments.
    pub fn try_lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<Option<Lock>> {
        let resource = resource.as_ref();
        let ttl_ms = self.check(resource, ttl)?;
        match self.attempt(resource, ttl, ttl_ms)? {
            Ok(lock) => Ok(Some(lock)),
            Err((Failure::Held, _)) => Ok(None),
            Err((_, report)) => Err(Error::Quorum(Box::new(report))),
        }
    }

    /// Extends `lock`'s lease to `ttl` from now, on all nodes at once. On success the new validity is measured
    /// from the start of this call; on failure `lock` keeps its current validity.
    ///
    /// # Errors
    ///
    /// - [`Error::Expired`] if the lease had already run out (nothing is sent: an extension never re-creates an
    ///   expired lock);
    /// - [`Error::ExtendLimit`] after [`Config::max_extensions`] extensions;
    /// - [`Error::LockLost`] if a majority no longer holds our value;
    /// - [`Error::Quorum`] if too few nodes answered within the current lease.
    pub fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        self.config.check_ttl(ttl)?;
        if lock.extensions >= self.config.max_extensions {
            return Err(Error::ExtendLimit(lock.extensions));
        }
        if Instant::now() >= lock.valid_until {
            return Err(Error::Expired);
        }
        lock.valid_until = self.extend_on(
            &lock.resource,
            &lock.value,
            lock.nodes,
            ttl,
            Some(lock.valid_until),
        )?;
        lock.extensions += 1;
        Ok(())
    }

    /// Extends the lock on `resource` whose value is `value` to `ttl` from now, on all nodes at once, and returns
    /// the instant the new lease ends on this process' monotonic clock (measured from the start of this call, less
    /// the drift allowance, as for an acquisition).
    ///
    /// This is [`extend`](LockManager::extend) for a caller that holds the lock by its value alone, such as a
    /// script that acquired it in another process (`muxlock acquire` prints the value). It sends the same
    /// compare-and-pexpire script, which only extends a key that still holds `value`: **an extension by value
    /// cannot revive an expired key**, and never touches another holder's. Unlike `extend`, it does not know when
    /// the lease ends, so it cannot refuse an expired lock before sending; the nodes refuse it instead
    /// ([`Error::LockLost`]). It is not counted against [`Config::max_extensions`].
    ///
    /// # Errors
    ///
    /// - [`Error::LockLost`] if a majority does not hold `value` under `resource` (it expired, was released, or
    ///   was never taken);
    /// - [`Error::Quorum`] if too few nodes answered in time;
    /// - [`Error::Config`] for an empty resource name or value, or an invalid `ttl`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// // The value printed by `muxlock acquire nightly-report --ttl 30s` in another process:
    /// let value = "6f1c0e3a9b2d4c5e8f7a6b5c4d3e2f1a0b9c8d7e";
    /// let valid_until = locks.extend_value("nightly-report", value, Duration::from_secs(30))?;
    /// println!("valid for {:?} more", valid_until.saturating_duration_since(std::time::Instant::now()));
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn extend_value(
        &self,
        resource: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<Instant> {
        let (resource, value) = (resource.as_ref(), value.as_ref());
        self.check(resource, ttl)?;
        check_value(value)?;
        self.extend_on(resource, value, NodeSet::ALL, ttl, None)
    }

    /// Releases `lock` on all nodes at once (compare-and-delete: a node only deletes the key if it still holds this
    /// lock's value, so an expired lock never deletes its next holder's key).
    ///
    /// Returns once a majority confirmed, or every node answered, or the round timed out: the number of nodes that
    /// deleted the key by then. Nodes that had not answered still delete it when the request reaches them.
    ///
    /// # Errors
    ///
    /// [`Error::Quorum`] if fewer than a majority of nodes answered at all: the release may not have happened, and
    /// the lock will end with its lease.
    pub fn unlock(&self, lock: Lock) -> Result<usize> {
        self.release_on(&lock.resource, &lock.value, lock.nodes)
    }

    /// Releases the lock on `resource` whose value is `value`, on all nodes at once: [`unlock`](LockManager::unlock)
    /// for a caller that holds the lock by its value alone (a script, another process). The same compare-and-delete
    /// script: a node deletes the key only if it still holds `value`, so another holder's lock is never touched.
    ///
    /// Returns the number of nodes that deleted the key before the round ended (as `unlock`): fewer than
    /// [`quorum`](LockManager::quorum) means the value was not held by a majority any more (the lock had expired,
    /// or was never taken), not an error.
    ///
    /// # Errors
    ///
    /// [`Error::Quorum`] if fewer than a majority of nodes answered at all; [`Error::Config`] for an empty resource
    /// name or value.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::LockManager;
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let released = locks.unlock_value("nightly-report", "6f1c0e3a9b2d4c5e8f7a6b5c4d3e2f1a0b9c8d7e")?;
    /// if released < locks.quorum() {
    ///     eprintln!("the lock had already expired: the work it protected may have overlapped another holder's");
    /// }
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn unlock_value(
        &self,
        resource: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<usize> {
        let (resource, value) = (resource.as_ref(), value.as_ref());
        if resource.is_empty() {
            return Err(Error::config("the resource name is empty"));
        }
        check_value(value)?;
        self.release_on(resource, value, NodeSet::ALL)
    }

    /// Reads what every node holds under `resource`'s key, in one round to all nodes (`GET` and `PTTL`, pipelined),
    /// without taking or changing anything: for a status display, or to find who holds a lock.
    ///
    /// Nodes that are down or do not answer within [`Config::round_timeout`] appear as [`KeyState::Failed`]; the
    /// call itself fails only for an invalid argument.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty resource name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use muxlock::{KeyState, LockManager};
    ///
    /// let locks = LockManager::new(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])?;
    /// let seen = locks.inspect("invoice:42")?;
    /// match seen.holder() {
    ///     Some(value) => println!("held by {} on {} nodes", String::from_utf8_lossy(value), seen.holding(value)),
    ///     None => println!("not held by a majority"),
    /// }
    /// for (node, state) in seen.nodes() {
    ///     if let KeyState::Held { ttl: Some(ttl), .. } = state {
    ///         println!("{node}: expires in {ttl:?}");
    ///     }
    /// }
    /// # Ok::<(), muxlock::Error>(())
    /// ```
    pub fn inspect(&self, resource: impl AsRef<[u8]>) -> Result<Inspection> {
        let resource = resource.as_ref();
        if resource.is_empty() {
            return Err(Error::config("the resource name is empty"));
        }
        let n = self.fanout.len();
        let mut request = BytesMut::with_capacity(64 + 2 * resource.len());
        encode_command(&[b"GET", resource], &mut request);
        encode_command(&[b"PTTL", resource], &mut request);
        let mut round = self
            .fanout
            .round(later(Instant::now(), self.config.round_timeout));
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

    /// The extension round shared by [`extend`](LockManager::extend) and
    /// [`extend_value`](LockManager::extend_value): compare-and-pexpire on `nodes`, decided by a majority before
    /// the new lease's validity and before `decide_by` (the current lease's end, when known). Returns the new
    /// lease's end.
    fn extend_on(
        &self,
        resource: &[u8],
        value: &[u8],
        nodes: NodeSet,
        ttl: Duration,
        decide_by: Option<Instant>,
    ) -> Result<Instant> {
        let ttl_ms = self.config.check_ttl(ttl)?;
        let start = Instant::now();
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
                let now = Instant::now();
                let (vote, outcome) = self.counted(node, script_vote(&reply), now);
                self.votes[node].count(&outcome);
                outcomes[node] = outcome;
                status = quorum.vote(node, vote, now);
                match status {
                    Status::Pending => quorum.votes_to_decide(),
                    _ => 0,
                }
            },
        );
        settle(status, &quorum).map_err(|failure| {
            let report = Box::new(self.report(resource, outcomes, quorum.quorum()));
            if failure == Failure::Held {
                Error::LockLost(report)
            } else {
                Error::Quorum(report)
            }
        })
    }

    /// The release round shared by [`unlock`](LockManager::unlock) and
    /// [`unlock_value`](LockManager::unlock_value): compare-and-delete on `nodes`; the number of nodes that
    /// deleted the key by the time a majority confirmed, every node answered, or the round timed out.
    fn release_on(&self, resource: &[u8], value: &[u8], nodes: NodeSet) -> Result<usize> {
        let n = self.fanout.len();
        let quorum = self.quorum();
        let deadline = later(Instant::now(), self.config.round_timeout);
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
        if answered < quorum {
            return Err(Error::Quorum(Box::new(
                self.report(resource, outcomes, quorum),
            )));
        }
        Ok(released)
    }

    /// A node's vote as it counts: a "yes" from a node the restart guard does not trust yet is no vote.
    fn counted(
        &self,
        node: usize,
        (vote, outcome): (Vote, Outcome),
        now: Instant,
    ) -> (Vote, Outcome) {
        match &self.restart {
            Some((guard, info))
                if vote == Vote::Yes && !guard.trusts(&self.fanout, node, *info, now) =>
            {
                (Vote::Failed, Outcome::Quarantined)
            }
            _ => (vote, outcome),
        }
    }

    fn note_ttl(&self, ttl_ms: u64) {
        if let Some((guard, _)) = &self.restart {
            guard.note_ttl(ttl_ms);
        }
    }

    fn check(&self, resource: &[u8], ttl: Duration) -> Result<u64> {
        if resource.is_empty() {
            return Err(Error::config("the resource name is empty"));
        }
        self.config.check_ttl(ttl)
    }

    /// One acquisition round. `Err` carries why it failed and every node's outcome; partial grants have been
    /// released by then.
    #[allow(clippy::type_complexity)]
    fn attempt(
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
        let start = Instant::now();
        let mut quorum = Quorum::new(n, start, ttl, drift(ttl, self.config.drift_factor));
        let mut round = self
            .fanout
            .round(later(start, self.config.round_timeout).min(quorum.deadline()));
        let nodes = round.send_all(&request, 1);
        let mut outcomes = vec![Outcome::NotAwaited; n];
        let mut status = Status::Pending;
        round.need(quorum.votes_to_decide());
        while let Some((node, reply)) = round.next() {
            let now = Instant::now();
            let (vote, outcome) = self.counted(node, set_vote(reply), now);
            self.votes[node].count(&outcome);
            outcomes[node] = outcome;
            status = quorum.vote(node, vote, now);
            if status != Status::Pending {
                break; // decided: slower replies are drained later; a release covers them
            }
            round.need(quorum.votes_to_decide());
        }
        drop(round);
        match settle(status, &quorum) {
            Ok(valid_until) => Ok(Ok(Lock {
                resource: resource.to_vec(),
                value,
                valid_until,
                extensions: 0,
                nodes,
            })),
            Err(failure) => {
                // Release at once wherever the key may have been set, without waiting: the spec's "unlock all
                // the instances", and it keeps a failed attempt from blocking others until the TTL.
                let mut release = BytesMut::new();
                scripts::call(&mut release, Script::Release, false, resource, &value, 0);
                let mut round = self.fanout.release_round(Instant::now());
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
    fn script_round(
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

    fn report(&self, resource: &[u8], outcomes: Vec<Outcome>, quorum: usize) -> Report {
        let nodes = self.fanout.addrs().iter().cloned().zip(outcomes).collect();
        Report {
            resource: resource.to_vec(),
            nodes,
            quorum,
        }
    }

    /// `retry_delay` ± a uniformly random amount up to `retry_jitter`.
    fn retry_pause(&self) -> Duration {
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

/// The verdict once the round is over. Every node has voted or timed out by then, so the state machine has
/// decided; a round that ended early for another reason is a failure unless it holds a majority in time.
fn settle(status: Status, quorum: &Quorum) -> std::result::Result<Instant, Failure> {
    let status = if status == Status::Pending {
        quorum.status(Instant::now())
    } else {
        status
    };
    match status {
        Status::Acquired { valid_until } => Ok(valid_until),
        Status::Failed(failure) => Err(failure),
        Status::Pending => Err(Failure::Unavailable),
    }
}
