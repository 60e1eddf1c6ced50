//! Every call a simulated client makes, judged for liveness as it returns: the engine's verbs go through
//! [`Checked`], which hands them on to the engine and judges what each did besides keeping the locks safe (the
//! checker's business, `check.rs`).
//!
//! In every world:
//!
//! - **Retries stop at their count, after the pause they were given**: a call that may retry (`lock`, a
//!   `retry` acquisition of a set, a fenced lock, a permit, a reader or writer, `lock_owned`) pauses at most
//!   `retry_count` times, each pause `retry_delay` ± `retry_jitter`; any other call never pauses. (The engine's
//!   only pauses are its retries' `Clock::sleep`s, which the world notes with the clients' own: a call's are
//!   those noted while it ran, as a client runs one call at a time.) A call that pauses past its count breaks
//!   the history at that pause, and the run ends there: a call that retries for ever cannot run the world for
//!   ever.
//! - **An extension is counted when it is confirmed, and only then**: a lock's `extensions()` goes up by one with
//!   each `extend` or `extend_owned` that returns `Ok`, and stays as it was with one that fails (the limit
//!   `Config::max_extensions` is checked against that count).
//! - **A refusal's report names every member**: an error with a per-node report (`Held`, `Quorum`, `LockLost`)
//!   from an acquisition (single, batch or set), an extension or a release has one outcome per member.
//! - **Every outcome a report gives a node is what that node did**, as the node's record of each command carrying
//!   a lock value says (`did.rs`: set, refused, extended, deleted, not found), held against the lock values the
//!   report is about (the lock's, or those the call's commands carried for its keys: an acquisition draws one
//!   per attempt) since the call began (`truth.rs`):
//!   - `Granted` and `Quarantined` (a grant the restart guard did not count): the node set, extended or deleted
//!     the value;
//!   - `Taken`: the node refused to set it, another value holding the key; `NotHeld`: the node compared the key
//!     with the value and found another or none;
//!   - `NotSent`: the call handed its fanout no command carrying the value for that node (none can reach it
//!     then, nor run there later: what a call's rounds send, clean-ups and detached releases too, they hand
//!     the fanout while the call runs);
//!   - `NotAwaited`, `Failed` and `ErrorReply`: nothing (the node may have run the command or not, before the
//!     round ended or after; an error reply is the server's word, and a node's clock or restart can turn a
//!     grant into `Failed`).
//!
//!   Judged: errors of `try_lock`, `lock`, `lock_many`, `try_lock_batch`, `extend`, `extend_value`, `unlock`,
//!   `unlock_value`, `unlock_batch` and `release_guard`, and the report of each guard a renewal found lost.
//!   Not judged against the record: a fenced acquisition's (its failure's report may be the token's
//!   confirmation round, which carries no lock value), permits', readers' and writers' (a request's outcome
//!   spans several keys), and any outcome on a node that ran a script whose reply does not say what it did for
//!   the value (owned holds, waiting lines: `did.rs`). A [`Lock`] carries no report.
//!
//! In a calm world (`Setup::calm`: no fault of any kind, one client whose pauses are cut short, so that nothing
//! it holds expires on it):
//!
//! - **Every call ends within one round timeout, without a retry**: no round meets its deadline, and a call
//!   that waits on after its verdict is in, or for a node it need not hear, or retries, shows it. With a slow
//!   node (half the calm worlds: 20 ms each way), an acquisition, extension or renewal ends before that node's
//!   reply could have come: the others decide it. (Not a release: a release round may wait for a node's first
//!   native command, which an ACL may refuse.) A batch release (`unlock_batch`: the batch script alone, no
//!   native command) whose every lock a majority of the other nodes holds is decided by them too: it ends
//!   before the slow node's reply could have come.
//! - **An acquisition of what is free is granted**: a plain lock, a batch, a set or a fenced lock whose keys no
//!   node has; every permit, reader and writer, owned hold and first queued attempt (the lone client holds no
//!   other at the time).
//! - **An extension or a release of a value every node holds** (for one more round timeout at least) **is
//!   granted, or confirmed by every node**; a renewal of such a guard leaves it held.
//!
//! Each rule breaks the history (`History::breaks`) with the call, its client and what it did.

use std::cell::RefCell;
use std::ops::Deref;
use std::time::{Duration, Instant};

use bytes::Bytes;
use muxlock::net::cluster::Members;
use muxlock::redlock::sim::{Clock, Engine, QueueEntry, Refused, SimGuard, Waits};
use muxlock::redlock::{Lost, Report};
use muxlock::{Config, Error, Lock, Result};

use super::node::{MS, Time};
use super::{CALM_SLOW, Open, Sim, SimClock, SimNodes, World, did, truth};

/// The engine, every call of it judged ([`Checked`]'s verbs shadow the engine's; the rest go through `Deref`).
pub struct Checked {
    engine: Engine<Members<SimNodes>, SimClock>,
    config: Config,
    /// Calm worlds: the keys and value of each release confirmed, and when, until [`Checked::gone`] looks.
    released: RefCell<Vec<Released>>,
}

/// Which lock values a call's report is about: the lock's own, or those the call carried for its keys (an
/// acquisition draws its values as it goes, one per attempt), or for the key the report names (a batch's).
enum Whose<'a> {
    Value(&'a [u8]),
    Keys(&'a [&'a [u8]]),
    Named,
}

impl Whose<'_> {
    fn values(&self, w: &World, me: usize, r: &Report) -> Vec<Bytes> {
        let keys: Vec<&[u8]> = match self {
            Whose::Value(v) => return vec![Bytes::copy_from_slice(v)],
            Whose::Keys(keys) => keys.to_vec(),
            Whose::Named => vec![r.resource()],
        };
        let mut values: Vec<Bytes> = Vec::new();
        for o in w.offered(me) {
            for k in &keys {
                for v in did::values_for(&o.cmd, k) {
                    if !values.contains(&v) {
                        values.push(v);
                    }
                }
            }
        }
        values
    }
}

/// A release confirmed in a calm world: its keys, its value, and when.
type Released = (Vec<Vec<u8>>, Vec<u8>, Time);

/// A call under way: when it began, and how many pauses its client had asked for by then.
struct Call {
    what: &'static str,
    retry: bool,
    at: Time,
    paused: usize,
}

impl Deref for Checked {
    type Target = Engine<Members<SimNodes>, SimClock>;
    fn deref(&self) -> &Self::Target {
        &self.engine
    }
}

impl Checked {
    pub fn new(engine: Engine<Members<SimNodes>, SimClock>, config: Config) -> Checked {
        Checked {
            engine,
            config,
            released: RefCell::new(Vec::new()),
        }
    }

    fn sim(&self) -> &Sim {
        self.engine.clock().sim()
    }

    fn me(&self) -> usize {
        self.engine.clock().me()
    }

    fn begin(&self, what: &'static str, retry: bool) -> Call {
        self.gone();
        let mut w = self.sim().world();
        w.forget_offers(self.me());
        let (at, paused) = (w.now, w.pauses(self.me()).len());
        let retries = match retry {
            true => self.config.retry_count() as usize,
            false => 0,
        };
        let open = Open {
            what,
            at,
            paused,
            retries,
        };
        w.open(self.me(), Some(open));
        Call {
            what,
            retry,
            at,
            paused,
        }
    }

    /// Whether every node holds `value` on every key of `keys` for one more round timeout at least (a calm
    /// world's release or extension of it must then be confirmed everywhere).
    fn everywhere(&self, keys: &[&[u8]], value: &[u8]) -> bool {
        let w = self.sim().world();
        let (now, later) = (
            w.now,
            w.now + self.config.round_timeout().as_nanos() as Time,
        );
        (w.nodes.iter()).all(|n| keys.iter().all(|k| n.node.keeps(k, value, now, later)))
    }

    /// Whether no node has any of `keys` (a calm world's acquisition of them must then be granted).
    fn free(&self, keys: &[&[u8]]) -> bool {
        let w = self.sim().world();
        (w.nodes.iter()).all(|n| keys.iter().all(|k| !n.node.sees(k, w.now)))
    }

    /// How many members a release is confirmed by when every one of them confirms it.
    fn members(&self) -> usize {
        self.sim().world().members.len()
    }

    /// Judges `call` as it returns; in a calm world, `must` says whether it had to succeed, and `failed` (if any)
    /// what it did instead.
    fn end(&self, call: Call, must: bool, mut failed: Option<String>) {
        let me = self.me();
        let mut w = self.sim().world();
        w.open(me, None);
        let took = w.now - call.at;
        let pauses = w.pauses(me)[call.paused..].to_vec();
        let (count, delay, jitter) = (
            self.config.retry_count() as usize,
            self.config.retry_delay(),
            self.config.retry_jitter(),
        );
        let allowed = match call.retry {
            true => count,
            false => 0,
        };
        w.struck.calls += 1;
        let round = self.config.round_timeout().as_nanos() as Time;
        w.struck.retried += u64::from(!pauses.is_empty());
        w.struck.judged_calm += u64::from(w.calm && must);
        let mut broken = None;
        if pauses.len() > allowed {
            broken = Some(format!(
                "paused {} times, past its {allowed} retries",
                pauses.len()
            ));
        } else if let Some(p) = pauses
            .iter()
            .find(|&&p| p + jitter < delay || p > delay + jitter)
        {
            broken = Some(format!(
                "paused {p:?} before a retry, outside {delay:?} ± {jitter:?}"
            ));
        } else if w.calm && must {
            if !pauses.is_empty() {
                broken = Some(format!("retried {} times in a calm world", pauses.len()));
            } else if took > round {
                broken = Some(format!(
                    "took {} ms in a calm world, past one round timeout",
                    took / MS
                ));
            } else if w.slow_node
                && !call.what.contains("unlock")
                && !call.what.contains("release")
                && took >= 2 * CALM_SLOW
            {
                broken = Some(format!(
                    "took {} ms in a calm world, waiting for its slow node",
                    took / MS
                ));
            } else if let Some(failed) = failed.take() {
                broken = Some(format!("{failed} in a calm world"));
            }
        }
        if let (Some(what), Some(failed)) = (&mut broken, &failed) {
            what.push_str(&format!(" ({failed})"));
        }
        if let Some(what) = broken {
            let line = format!(
                "c{me}'s {} at {} ms (ended at {} ms) {what}",
                call.what,
                call.at / MS,
                w.now / MS
            );
            w.history.breaks(line);
        }
    }

    /// Judges the reports of `what`'s errors: each names every member once (one outcome per member), and every
    /// outcome is what its node did with `whose` lock values since `call` began (`truth.rs`).
    fn reported<'a>(
        &self,
        call: &Call,
        what: &str,
        whose: Whose<'_>,
        errors: impl IntoIterator<Item = &'a Error>,
    ) {
        for e in errors {
            let Some(r) = e.report() else { continue };
            self.judge_report(call, what, &whose, r, &e.to_string());
        }
    }

    /// Judges one report of `what` (`shown`: what carried it, for the message), as [`Checked::reported`] does.
    fn judge_report(&self, call: &Call, what: &str, whose: &Whose<'_>, r: &Report, shown: &str) {
        let members = self.members();
        let me = self.me();
        let mut w = self.sim().world();
        let broken = match r.nodes().len() != members {
            true => Some(format!(
                "reported {} nodes' outcomes of {members}",
                r.nodes().len()
            )),
            false => {
                let values = whose.values(&w, me, r);
                truth::misreported(&mut w, me, call.at, r, &values)
            }
        };
        if let Some(why) = broken {
            let line = format!(
                "c{me}'s {what} at {} ms (ended at {} ms) {why} ({shown})",
                call.at / MS,
                w.now / MS
            );
            w.history.breaks(line);
        }
    }

    /// Judges the count of `lock`'s extensions as `what` returns `got`: one more than `before` if the extension
    /// was confirmed, `before` if not (the count is what [`Config::max_extensions`]' limit is checked against).
    fn counted(&self, what: &str, before: u32, lock: &Lock, got: &Result<()>) {
        let want = before + u32::from(got.is_ok());
        if lock.extensions() != want {
            let mut w = self.sim().world();
            let line = format!(
                "c{}'s {what} at {} ms ({got:?}) left the lock's extensions at {}, not {want}",
                self.me(),
                w.now / MS,
                lock.extensions()
            );
            w.history.breaks(line);
        }
    }

    pub async fn try_lock(&self, resource: &[u8], ttl: Duration) -> Result<Option<Lock>> {
        let call = self.begin("try_lock", false);
        let free = self.free(&[resource]);
        let got = self.engine.try_lock(resource, ttl).await;
        self.reported(
            &call,
            "try_lock",
            Whose::Keys(&[resource]),
            got.as_ref().err(),
        );
        let must = free;
        let failed = (must && !matches!(got, Ok(Some(_)))).then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn lock(&self, resource: &[u8], ttl: Duration) -> Result<Lock> {
        let call = self.begin("lock", true);
        let free = self.free(&[resource]);
        let got = self.engine.lock(resource, ttl).await;
        self.reported(&call, "lock", Whose::Keys(&[resource]), got.as_ref().err());
        let must = free;
        let failed = (must && got.is_err()).then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn lock_fenced(
        &self,
        resource: &[u8],
        ttl: Duration,
        retry: bool,
    ) -> Result<Option<Lock>> {
        let call = self.begin("lock_fenced", retry);
        let free = self.free(&[resource]);
        let got = self.engine.lock_fenced(resource, ttl, retry).await;
        let must = free;
        let failed = (must && !matches!(got, Ok(Some(_)))).then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn lock_many(
        &self,
        resources: &[&[u8]],
        ttl: Duration,
        retry: bool,
    ) -> Result<Option<Lock>> {
        let call = self.begin("lock_many", retry);
        let free = self.free(resources);
        let got = self.engine.lock_many(resources, ttl, retry).await;
        self.reported(
            &call,
            "lock_many",
            Whose::Keys(resources),
            got.as_ref().err(),
        );
        let must = free;
        let failed = (must && !matches!(got, Ok(Some(_)))).then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn try_lock_batch(
        &self,
        resources: &[&[u8]],
        ttl: Duration,
    ) -> Vec<Result<Option<Lock>>> {
        let call = self.begin("try_lock_batch", false);
        let free = self.free(resources);
        let got = self.engine.try_lock_batch(resources, ttl).await;
        let errors = got.iter().filter_map(|g| g.as_ref().err());
        self.reported(&call, "try_lock_batch", Whose::Named, errors);
        let must = free;
        let failed = (must && got.iter().any(|g| !matches!(g, Ok(Some(_)))))
            .then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn lock_permit(
        &self,
        name: &[u8],
        count: u32,
        ttl: Duration,
        how: (bool, bool),
    ) -> Result<Option<Lock>> {
        let call = self.begin("lock_permit", how.0);
        let got = self.engine.lock_permit(name, count, ttl, how).await;
        let must = true;
        let failed = (!matches!(got, Ok(Some(_)))).then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn lock_rw(
        &self,
        name: &[u8],
        write: bool,
        ttl: Duration,
        how: (bool, bool),
    ) -> Result<Option<Lock>> {
        let call = self.begin("lock_rw", how.0);
        let got = self.engine.lock_rw(name, write, ttl, how).await;
        let must = true;
        let failed = (!matches!(got, Ok(Some(_)))).then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn lock_owned(
        &self,
        owner: &muxlock::redlock::Owner,
        resource: &[u8],
        ttl: Duration,
    ) -> Result<Lock> {
        let call = self.begin("lock_owned", true);
        let got = self.engine.lock_owned(owner, resource, ttl).await;
        let must = true;
        let failed = got.is_err().then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn queued_attempt(
        &self,
        waits: Waits<'_>,
        ttl: Duration,
        entry: &QueueEntry,
        joined: bool,
    ) -> Result<std::result::Result<Lock, Refused>> {
        let call = self.begin("queued_attempt", false);
        let free = !joined
            && match waits {
                Waits::Plain(r) => self.free(&[r]),
                _ => true,
            };
        let got = self.engine.queued_attempt(waits, ttl, entry, joined).await;
        let must = free;
        let failed = (must && !matches!(got, Ok(Ok(_)))).then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn extend(&self, lock: &mut Lock, ttl: Duration) -> Result<()> {
        let call = self.begin("extend", false);
        let held = self.held(lock);
        let before = lock.extensions();
        let value = lock.value().as_bytes().to_vec();
        let got = self.engine.extend(lock, ttl).await;
        self.reported(&call, "extend", Whose::Value(&value), got.as_ref().err());
        self.counted("extend", before, lock, &got);
        let must = held;
        let failed = (must && got.is_err()).then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    pub async fn extend_owned(
        &self,
        lock: &mut Lock,
        ttl: Duration,
        shortening: bool,
    ) -> Result<()> {
        let call = self.begin("extend_owned", false);
        let before = lock.extensions();
        let got = self.engine.extend_owned(lock, ttl, shortening).await;
        self.counted("extend_owned", before, lock, &got);
        self.end(call, false, None);
        got
    }

    pub async fn extend_value(
        &self,
        resource: &[u8],
        value: &[u8],
        ttl: Duration,
    ) -> Result<Instant> {
        let call = self.begin("extend_value", false);
        let held = self.everywhere(&[resource], value);
        let got = self.engine.extend_value(resource, value, ttl).await;
        self.reported(
            &call,
            "extend_value",
            Whose::Value(value),
            got.as_ref().err(),
        );
        let must = held;
        let failed = (must && got.is_err()).then(|| format!("refused: {got:?}"));
        self.end(call, must, failed);
        got
    }

    /// Whether every node holds `lock`'s value on each of its keys, for a round timeout more at least.
    /// (Not judged for owned holds: an owner's holds share their keys, which its sessions let go of, extend and
    /// release in any order.)
    fn held(&self, lock: &Lock) -> bool {
        if lock.owner().is_some() {
            return false;
        }
        let (keys, value) = keys_of(lock);
        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        self.everywhere(&keys, &value)
    }

    /// A release's verdict, when `held` said every node held it: confirmed by a majority at least (the round
    /// may end once it is), and the value gone from every node a round timeout later ([`Checked::begin`] looks).
    /// (A nested owned hold's release leaves the owner's value for the outer one: `owned` releases are not
    /// looked for.)
    fn confirmed(
        &self,
        (held, owned): (bool, bool),
        keys: &[&[u8]],
        value: &[u8],
        got: &Result<usize>,
    ) -> Option<String> {
        let quorum = self.engine.quorum();
        let calm = self.sim().world().calm;
        if calm && held && !owned && matches!(got, Ok(n) if *n >= quorum) {
            let at = self.sim().world().now;
            let keys = keys.iter().map(|k| k.to_vec()).collect();
            (self.released.borrow_mut()).push((keys, value.to_vec(), at));
        }
        (held && !matches!(got, Ok(n) if *n >= quorum))
            .then(|| format!("not confirmed by a majority of {}: {got:?}", self.members()))
    }

    /// In a calm world, a value released (confirmed) a round timeout ago or more is on no node: the release
    /// reached the nodes the round did not wait for too.
    fn gone(&self) {
        let mut released = self.released.borrow_mut();
        if released.is_empty() {
            return;
        }
        let mut w = self.sim().world();
        let (now, round) = (w.now, self.config.round_timeout().as_nanos() as Time);
        let mut lost = None;
        released.retain(|(keys, value, at)| {
            if at + round > now {
                return true;
            }
            for (i, n) in w.nodes.iter().enumerate() {
                if let Some(k) = keys.iter().find(|k| n.node.keeps(k, value, now, now)) {
                    lost.get_or_insert((i, k.clone(), *at));
                }
            }
            false
        });
        if let Some((node, key, at)) = lost {
            let me = self.me();
            let line = format!(
                "c{me}'s release of {} confirmed at {} ms, yet node {node} still holds it at {} ms in a calm world",
                String::from_utf8_lossy(&key),
                at / MS,
                now / MS
            );
            w.history.breaks(line);
        }
    }

    pub async fn unlock(&self, lock: Lock) -> Result<usize> {
        let call = self.begin("unlock", false);
        let held = self.held(&lock);
        let owned = lock.owner().is_some();
        let (keys, value) = keys_of(&lock);
        let got = self.engine.unlock(lock).await;
        self.reported(&call, "unlock", Whose::Value(&value), got.as_ref().err());
        let must = held;
        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let failed = self.confirmed((held, owned), &keys, &value, &got);
        self.end(call, must, failed);
        got
    }

    pub async fn unlock_value(&self, resource: &[u8], value: &[u8]) -> Result<usize> {
        let call = self.begin("unlock_value", false);
        let held = self.everywhere(&[resource], value);
        let got = self.engine.unlock_value(resource, value).await;
        self.reported(
            &call,
            "unlock_value",
            Whose::Value(value),
            got.as_ref().err(),
        );
        let must = held;
        let failed = self.confirmed((held, false), &[resource], value, &got);
        self.end(call, must, failed);
        got
    }

    pub async fn unlock_batch(&self, locks: Vec<Lock>) -> Vec<Result<usize>> {
        let call = self.begin("unlock_batch", false);
        let (at, quick) = (call.at, self.decided_without_the_slow_node(&locks));
        let held: Vec<bool> = locks.iter().map(|l| self.held(l)).collect();
        let kept: Vec<(Vec<Vec<u8>>, Vec<u8>)> = locks.iter().map(keys_of).collect();
        let got = self.engine.unlock_batch(locks).await;
        for ((_, value), g) in kept.iter().zip(&got) {
            self.reported(&call, "unlock_batch", Whose::Value(value), g.as_ref().err());
        }
        let must = held.iter().any(|&h| h);
        let failed = (held.iter().zip(&kept).zip(&got)).find_map(|((&h, (keys, value)), g)| {
            let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            self.confirmed((h, false), &keys, value, g)
        });
        self.end(call, must, failed);
        let mut w = self.sim().world();
        if quick && w.now - at >= 2 * CALM_SLOW {
            let line = format!(
                "c{}'s unlock_batch at {} ms (ended at {} ms) waited for its slow node in a calm world, every \
                 lock held by a majority of the others",
                self.me(),
                at / MS,
                w.now / MS
            );
            w.history.breaks(line);
        }
        got
    }

    /// In a calm world with a slow node, whether a majority of the other nodes holds each of `locks` (for a
    /// round timeout more at least): a batch release of them is then decided without the slow node.
    fn decided_without_the_slow_node(&self, locks: &[Lock]) -> bool {
        let quorum = self.engine.quorum();
        let w = self.sim().world();
        let (now, later) = (
            w.now,
            w.now + self.config.round_timeout().as_nanos() as Time,
        );
        w.calm
            && w.slow_node
            && !locks.is_empty()
            && locks.iter().all(|lock| {
                let (keys, value) = keys_of(lock);
                let holders = (w.nodes.iter())
                    .filter(|n| n.faults.latency.0 != CALM_SLOW)
                    .filter(|n| keys.iter().all(|k| n.node.keeps(k, &value, now, later)))
                    .count();
                lock.owner().is_none() && holders >= quorum
            })
    }

    pub async fn unlock_owned(&self, lock: Lock, unattributed: bool) -> Result<usize> {
        let call = self.begin("unlock_owned", false);
        let got = self.engine.unlock_owned(lock, unattributed).await;
        self.end(call, false, None);
        got
    }

    pub async fn renew_guards(&self, guards: &mut [&mut SimGuard]) {
        let call = self.begin("renew_guards", false);
        let held: Vec<bool> = (guards.iter())
            .map(|g| {
                // Begun a round timeout before its deadline at least: it can be confirmed in time.
                let ahead = g.deadline() >= self.engine.clock().now() + self.config.round_timeout();
                ahead && g.owner().is_none() && self.everywhere(&guard_keys(g), g.value())
            })
            .collect();
        let renewed: Vec<u64> = guards.iter().map(|g| g.renewals()).collect();
        let now = self.engine.clock().now();
        let live: Vec<bool> = guards.iter().map(|g| g.lost_at(now).is_none()).collect();
        self.engine.renew_guards(guards).await;
        // A guard this renewal found lost: the renewal's report (a lease that merely ran down has none).
        let now = self.engine.clock().now();
        for (g, _) in guards.iter().zip(&live).filter(|(_, l)| **l) {
            if let Some(Lost::Taken(r) | Lost::Down(r) | Lost::Clock(r)) = g.lost_at(now) {
                let whose = Whose::Value(g.value());
                self.judge_report(&call, "renew_guards", &whose, &r, &format!("lost: {r}"));
            }
        }
        let must = held.iter().any(|&h| h);
        let failed = (held.iter().zip(&renewed).zip(guards.iter()))
            .find(|((h, r), g)| **h && g.renewals() == **r)
            .map(|(_, g)| {
                format!(
                    "did not renew a guard of {} every node held",
                    String::from_utf8_lossy(g.resource())
                )
            });
        self.end(call, must, failed);
    }

    pub async fn release_guard(&self, g: SimGuard) -> Result<usize> {
        let call = self.begin("release_guard", false);
        let keys: Vec<Vec<u8>> = guard_keys(&g).iter().map(|k| k.to_vec()).collect();
        let value = g.value().to_vec();
        let owned = g.owner().is_some();
        let held = !owned && self.everywhere(&guard_keys(&g), &value);
        let got = self.engine.release_guard(g).await;
        self.reported(
            &call,
            "release_guard",
            Whose::Value(&value),
            got.as_ref().err(),
        );
        let must = held;
        let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let failed = self.confirmed((held, owned), &keys, &value, &got);
        self.end(call, must, failed);
        got
    }
}

/// A guard's keys: a set's names, or its one resource.
fn guard_keys(g: &SimGuard) -> Vec<&[u8]> {
    match g.resources() {
        Some(names) => names.iter().map(|k| &k[..]).collect(),
        None => vec![g.resource()],
    }
}

/// A lock's keys (a set's names, or its one key) and value.
fn keys_of(lock: &Lock) -> (Vec<Vec<u8>>, Vec<u8>) {
    let keys = match lock.resources() {
        [] => vec![lock.resource().to_vec()],
        many => many.to_vec(),
    };
    (keys, lock.value().as_bytes().to_vec())
}
