//! The clock check: a grant or an extension counts only from a node whose wall clock agrees with this client's.
//!
//! # The hazard
//!
//! Redis and Valkey expire keys by the **wall clock** (a key set with `PX ttl` at the node's time `n` is gone
//! once the node's clock reads `n + ttl`), while a holder counts its lease on its own monotonic clock. A node
//! whose wall clock steps forward (`date -s`, NTP stepping a clock that had drifted, a VM resumed from a
//! snapshot) or runs fast ends the leases it holds early; a majority of such nodes hands the lock to a second
//! holder while the first still counts its lease live. The spec's drift allowance covers clocks that tick at
//! slightly different rates, not steps, and a holder may hold no guard at all (a script's `muxlock acquire`), so
//! the protection must stand on the side that acquires.
//!
//! # The rule
//!
//! Every round that sets or extends a lease ([`Engine::lease_round`](super::Engine)) sends each request between
//! two `TIME`s, in the same write: the node's wall clock just before it ran the request (`b`) and just after
//! (`a`). With `T` the tolerance ([`Config::with_clock_tolerance`](crate::Config::with_clock_tolerance)), `s`
//! this client's wall clock when the round was opened and `r` when the second `TIME` reply was read, the
//! request's replies count only if
//!
//! ```text
//! s − T ≤ b    and    a ≤ r + T
//! ```
//!
//! (and `b ≤ r + T` too: a clock stepped back during the request reads ahead before it and right after, and the
//! request ran on the clock ahead), and every lease's validity is `2T` shorter (`Config::allowance`). A request
//! whose node's clock is off, or whose `TIME`s have no reply (refused, `NOPERM`, the connection failed), gets
//! [`NodeError::Clock`] for each of its commands instead of their replies (a failed vote, with the reason in the
//! report); one whose second `TIME` did not come within the round (a slow node: its replies came in part) gets
//! [`NodeError::Timeout`], as if none had come: its clock was not read, not seen off. The server's own error
//! replies and failures are kept as they are.
//!
//! # Why that is enough
//!
//! Take A's grant of a key on a node, run at the node's time `n_A`, and B's later grant of the same key there at
//! `n_B`. B's `SET NX` succeeded, so A's key had expired on the node: its clock had reached `n_A + ttl`. If the
//! node's clock never went back between A's first `TIME` and B's second (it may have jumped forward, run fast or
//! stopped), then `b_A ≤ n_A` and `n_A + ttl ≤ n_B ≤ a_B`. A counted the node, so `b_A ≥ s_A − T`; B counted it,
//! so `a_B ≤ r_B + T`. Hence `r_B ≥ a_B − T ≥ n_A + ttl − T ≥ s_A + ttl − 2T`. A counts its lease valid until
//! less than `s_A + ttl − 2T` (the round started at `s_A`, and `2T` is taken off), so it has ended by `r_B`,
//! before B can hold. An extension is the same with the extension's round for A's (the key's new expiry is the
//! node's time when it ran, plus the TTL). A node that runs a request late (paused, behind a full queue, a long
//! script) reads times between `s` and `r`: pauses cost nothing, only a clock that disagrees fails.
//!
//! # A clock seen ahead
//!
//! The rule reads a node's clock only at this client's grants and extensions. A clock that jumped ahead, whose
//! keys expired early meanwhile, and was then set right again (an operator undoing `date -s`, NTP stepping a
//! fast clock back) reads right at the next grant: the proof's premise (no step back between A's grant and B's)
//! fails, and nothing the node answers then says so. What *can* be seen is the excursion itself, by a client
//! that read the clock while it was off. So the check remembers, per node, when this client last saw its clock
//! ahead (an [`Off::Ahead`] verdict, more than the tolerance, or a first `TIME` past this client's clock whose
//! second never came), and a node seen ahead does not count for the longest lease in use after that sighting
//! (this manager's longest TTL, or [`Config::restart_window`](crate::Config::restart_window) if longer, plus the
//! drift allowance: every lease that was on the node before its clock jumped has ended by then, as its holder
//! counts it), however right its clock reads meanwhile; its outcome says when it was seen, by how much, and for
//! how long it is not counted.
//! Each sighting starts the window again.
//!
//! A clock seen *behind* is not remembered: keys on it live longer, and the grants and extensions it ran while
//! behind were not counted. An offset that changes while staying within the tolerance is not a fault (the
//! allowance covers it); the rule needs no history beyond sightings, since every counted reading is within the
//! tolerance of this client's clock, and the amount of a change cannot be measured more finely than a round's
//! length anyway.
//!
//! The cost of remembering is liveness: a node seen ahead once stays out for the window. A step back of this
//! client's *own* wall clock by more than the tolerance makes every node look ahead, so the client counts none
//! for a window (it could not tell its own step from a step of every node's clock from one bad time source):
//! keep clients' clocks slewed, not stepped.
//!
//! # Holders
//!
//! A guard's renewals are checked rounds too: a renewal that finds the nodes still holding the lock too few for a
//! majority once those whose clocks are off are counted out reports the guard lost at once, as
//! [`Lost::Clock`](crate::Lost::Clock), not at its deadline (a clock ahead lets the key expire early there). A
//! jump past the lease expires the keys, which a guard learns from their invalidations as
//! [`Lost::Taken`](crate::Lost::Taken). A lock held without a guard learns nothing until its next call.
//!
//! # What it assumes, and cannot see
//!
//! - **A node's clock does not go back between two grants, unseen.** One that jumps forward (its keys expire)
//!   and is set back before another client's grant reads right at both: an excursion that no read of this
//!   client fell into is not seen (`tests/mutex/clocks.rs` shows both ways it gives two holders: a jump undone,
//!   a fast clock stepped back; and that a client that saw the jump refuses the node after it is undone, while
//!   one that did not gets the lock). Keeping nodes' clocks from being stepped (NTP slewing, never `date -s` on
//!   a node holding locks) is the operator's part; the restart guard's window does not help either, since the
//!   node did not restart. A periodic read of the nodes' clocks would narrow the gap to its period, not close
//!   it, at the cost of traffic between grants; it is not done.
//! - **The clients' wall clocks are right** (NTP keeps them within milliseconds): `s_A` and `r_B` are read on
//!   two clients' clocks, and a disagreement of `δ` between them takes `δ` off the margin. A step of a clock
//!   that a client shares with its nodes (one host, one bad time source for all) is invisible to it.
//!
//! # Cluster members
//!
//! A cluster member's request cannot carry this file's bracket: its commands go to the masters of their slots (a
//! guards' renewal or a batch spans many), a keyless `TIME` has no slot and the router refuses it, and a command
//! redirected by `MOVED`/`ASK` runs on a master whose clock the `TIME`s beside it did not read. So the routing
//! layer brackets them itself, per write to a cluster node, on that node's own connection
//! (`net/cluster/route/clock.rs`: `TIME` first and after the write's commands, their outcomes held until the
//! second is read, a resend after a redirection bracketed again, as its replication check does), and hands each
//! outcome up with the readings around the write it ran in ([`NodeRound::take_bracket`]). This round then judges
//! each outcome by the same rule, with the same `s` and `r`, and remembers a sighting by the node it came from
//! ([`NodeRound::source`]: a cluster member's masters each have their own clock). A member's vote counts only
//! if every node its commands ran on had its clock read around them and judged right; an outcome handed up
//! without readings does not count. A plain member in a manager with cluster members is bracketed here, as in
//! any other manager; a manager of plain members only never asks the routing layer for anything.
//!
//! # Extensions on a clock behind
//!
//! An extension on a node whose clock is behind by `d` sets the key to expire `d` early once the clock is right.
//! Beyond the tolerance the check refuses that node's vote, and the lease counts only on nodes that extended it
//! with their clocks right (any majority a second client gathers includes one of those); within it, the
//! allowance covers `d`. `PEXPIRE … GT` (Redis ≥ 7.0, Valkey ≥ 7.2), which never shortens an expiry, was
//! weighed and left: it would not help here (it keeps the old expiry only when `d` exceeds the time since the
//! last grant or extension; otherwise it sets the new one, `d` short, all the same), it would change what `extend` means (an extension to a shorter lease would fail on every
//! node), the native `SET … IFEQ … PX` path of Valkey ≥ 8.1 and Redis ≥ 8.4 has no such flag, and a script can
//! keep the longer expiry on any version without it (as the owned hold's does, comparing `PTTL`).
//!
//! # Cost
//!
//! Two `TIME`s per node per acquisition or extension, in the request's write and, from a node that answers at
//! once, in the same reply packet; the outcomes of a request are handed to the round's caller once its second
//! `TIME` is in (the same read, normally). `scripts/latency-ab` measured no change in a lone caller's latency.
//! On a cluster member, two `TIME`s per write to each cluster node (a resend's own too), in that write. Releases
//! and reads are not checked: they set no lease. The memory of sightings costs one uncontended
//! mutex and one read of the monotonic clock per node per checked round.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;

use crate::net::cluster::{Bracket, TIME};
use crate::net::{CommandId, NodeError, NodeSet, Reply};
use crate::redlock::config::Config;
use crate::redlock::engine::seam::{Clock, NodeRound};
use crate::redlock::quorum::drift;
use crate::resp::Value;
use crate::sync::lock;

/// A node's `TIME` reply as the time since the Unix epoch, if it is one.
pub(crate) fn node_time(reply: &Reply) -> Result<Duration, String> {
    let items = match reply {
        Ok(Value::Array(items)) if items.len() == 2 => items,
        Ok(Value::Error(e) | Value::BulkError(e)) => {
            return Err(format!(
                "the node refused TIME ({}), which the check needs (ACL +time)",
                String::from_utf8_lossy(e)
            ));
        }
        Ok(other) => return Err(format!("TIME answered {other:?}")),
        Err(e) => return Err(format!("its clock could not be read: {e}")),
    };
    let number = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        Value::Integer(i) => u64::try_from(*i).ok(),
        _ => None,
    };
    match (number(&items[0]), number(&items[1])) {
        (Some(secs), Some(micros)) if micros < 1_000_000 => {
            Ok(Duration::from_secs(secs).saturating_add(Duration::from_micros(micros)))
        }
        _ => Err(format!("TIME answered {items:?}")),
    }
}

/// How far a node's clock was off, one way or the other, beyond the tolerance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Off {
    /// Behind this client's by this much (its first `TIME` before the round was opened).
    Behind(Duration),
    /// Ahead of it by this much (its second `TIME` after its reply was read).
    Ahead(Duration),
}

impl Off {
    /// The verdict in words, for a node's outcome.
    fn describe(self, t: Duration) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let (by, way) = match self {
            Off::Behind(by) => (by, "behind"),
            Off::Ahead(by) => (by, "ahead of"),
        };
        format!(
            "its clock is {:.1} ms {way} this client's (tolerance {} ms)",
            ms(by),
            t.as_millis()
        )
    }
}

/// Judges a node's clock read just before a request (`before`) and just after it (`after`), in a round opened at
/// `s` and read at `r` (all wall clock), with tolerance `t`: `s − t ≤ before` and `after ≤ r + t`, and `before ≤
/// r + t` too (a clock stepped back during the request reads ahead before it and right after: the request ran on
/// the clock ahead). A clock both behind before and ahead after (stepped forward during the request) is judged
/// ahead: only sightings ahead are remembered.
pub(crate) fn judge(
    (before, after): (Duration, Duration),
    s: Duration,
    r: Duration,
    t: Duration,
) -> Result<(), Off> {
    let latest = before.max(after);
    if latest > r.saturating_add(t) {
        return Err(Off::Ahead(latest - r));
    }
    if before.saturating_add(t) < s {
        return Err(Off::Behind(s - before));
    }
    Ok(())
}

/// What the clock check remembers of each node between rounds: when its clock was last seen ahead (see "A clock
/// seen ahead"), and the longest lease in use, which says for how long that matters.
#[derive(Debug)]
pub(crate) struct Seen {
    /// Per node: when this client last saw its clock ahead (this client's monotonic clock), and by how much.
    ahead: Vec<Mutex<Option<(Instant, Duration)>>>,
    /// The longest lease this manager set or extended, in milliseconds.
    max_ttl_ms: AtomicU64,
    /// [`Config::restart_window`]: the longest lease any client uses, if configured.
    configured: Duration,
    drift_factor: f64,
}

impl Seen {
    /// Nothing seen yet, of `n` nodes.
    pub(crate) fn new(n: usize, config: &Config) -> Seen {
        Seen {
            ahead: (0..n).map(|_| Mutex::new(None)).collect(),
            max_ttl_ms: AtomicU64::new(0),
            configured: config.restart_window,
            drift_factor: config.drift_factor,
        }
    }

    /// Records that a lease of `ttl_ms` is in use (before its requests are sent).
    pub(crate) fn note_ttl(&self, ttl_ms: u64) {
        self.max_ttl_ms.fetch_max(ttl_ms, Ordering::Relaxed);
    }

    /// How long after a node's clock was last seen ahead it is not counted: the longest lease in use (this
    /// manager's, or the configured restart window if longer), plus the drift allowance.
    fn window(&self) -> Duration {
        let ttl =
            Duration::from_millis(self.max_ttl_ms.load(Ordering::Relaxed)).max(self.configured);
        ttl.saturating_add(drift(ttl, self.drift_factor))
    }

    /// Records that `node`'s clock was seen `by` ahead at `at`.
    fn saw_ahead(&self, node: usize, at: Instant, by: Duration) {
        if let Some(slot) = self.ahead.get(node) {
            let mut last = lock(slot);
            if last.is_none_or(|(when, _)| when <= at) {
                *last = Some((at, by));
            }
        }
    }

    /// Why `node` is not counted at `now` though its clock agrees now, if it was seen ahead less than the window
    /// ago.
    pub(crate) fn recently_ahead(&self, node: usize, now: Instant) -> Option<String> {
        let (when, by) = (*lock(self.ahead.get(node)?))?;
        let ago = now.saturating_duration_since(when);
        let left = self.window().checked_sub(ago).filter(|d| !d.is_zero())?;
        Some(format!(
            "its clock was seen {:.1} ms ahead of this client's {:.1} s ago, so keys it held may have expired \
             early: not counted for {:.1} s more (the longest lease in use)",
            by.as_secs_f64() * 1e3,
            ago.as_secs_f64(),
            left.as_secs_f64()
        ))
    }
}

/// One request sent through a [`Timed`] round to one node: where its replies are, and its `TIME`'s verdict.
#[derive(Debug)]
struct Sent {
    node: usize,
    /// The id the caller knows its first reply by.
    outer: u32,
    /// The id the round below gave the `TIME` before the request; its commands follow, then the `TIME` after,
    /// at `inner + replies + 1`.
    inner: u32,
    replies: u32,
    /// The node's clock before the request, once read.
    before: Option<Result<Duration, String>>,
    verdict: Option<Result<(), NodeError>>,
    /// Outcomes that came before the `TIME`'s, by the caller's id (the first apart: most requests are one
    /// command, and then nothing is allocated).
    held: Option<(u32, Reply)>,
    held_more: Vec<(u32, Reply)>,
}

/// A round whose every request carries `TIME` (see the module doc), or, with the check off, the round itself.
/// Its caller sees the ids and outcomes of its own commands only.
pub(crate) struct Timed<'c, R, C> {
    round: R,
    clock: &'c C,
    /// What the check remembers of the nodes between rounds.
    seen: &'c Seen,
    /// `None`: the check is off, everything passes through.
    tolerance: Option<Duration>,
    opened: Duration,
    /// Per node, the id the caller's next command gets.
    next: Vec<u32>,
    /// The requests sent, in one list for all nodes (a round sends each node one or a few).
    sent: Vec<Sent>,
    /// The most commands one request of this round carried (for [`need`](NodeRound::need)).
    largest: u32,
    /// Outcomes released by a `TIME` beyond the one handed out at once.
    ready: VecDeque<(CommandId, Reply)>,
    /// Per node: whether the round below brackets its writes itself (a cluster member's, see "Cluster
    /// members"); empty when none is.
    routed: Vec<bool>,
}

impl<'c, R: NodeRound, C: Clock> Timed<'c, R, C> {
    /// Wraps `round` over `n` nodes; `tolerance` `None` turns the check off.
    pub(crate) fn new(
        round: R,
        n: usize,
        (clock, seen): (&'c C, &'c Seen),
        tolerance: Option<Duration>,
    ) -> Self {
        let on = tolerance.is_some();
        Timed {
            round,
            clock,
            seen,
            tolerance,
            opened: if on { clock.wall() } else { Duration::ZERO },
            next: if on { vec![0; n] } else { Vec::new() },
            sent: Vec::new(),
            largest: 1,
            ready: VecDeque::new(),
            routed: Vec::new(),
        }
    }

    /// Has the round below bracket its cluster members' writes itself ([`NodeRound::time_writes`]), when the
    /// check is on: their outcomes are judged by the readings it hands up with each (see "Cluster members").
    pub(crate) fn bracketing_clusters(mut self) -> Self {
        if self.tolerance.is_some() {
            self.routed = self.round.time_writes();
        }
        self
    }

    /// Whether the round below brackets `node`'s writes.
    fn is_routed(&self, node: usize) -> bool {
        self.routed.get(node).copied().unwrap_or(false)
    }

    /// The verdict on a node's clock read `before` a request and `after` it (the second `TIME`'s reply), the
    /// node known as `conn` to the memory of sightings.
    fn verdict(
        &self,
        conn: usize,
        before: Result<Duration, String>,
        after: Reply,
        tolerance: Duration,
    ) -> Result<(), NodeError> {
        // The first reading alone shows a clock ahead, whatever comes of the second (late, or lost with the
        // connection): the node read it before now, so a reading past this client's clock now was ahead then.
        let ahead_before = || {
            if let Ok(b) = &before {
                let wall = self.clock.wall();
                if *b > wall.saturating_add(tolerance) {
                    self.seen.saw_ahead(conn, self.clock.now(), *b - wall);
                }
            }
        };
        match after {
            // The request ran, but its second `TIME` did not come within the round: the node is slow, its clock
            // unread and not seen off. Its replies time out as a request does whose replies all come late.
            Err(NodeError::Timeout) => {
                ahead_before();
                Err(NodeError::Timeout)
            }
            after => match before
                .clone()
                .and_then(|b| node_time(&after).map(|a| (b, a)))
            {
                Err(why) => {
                    ahead_before();
                    Err(NodeError::Clock(why))
                }
                Ok(times) => {
                    let now = self.clock.now();
                    match judge(times, self.opened, self.clock.wall(), tolerance) {
                        Err(off) => {
                            if let Off::Ahead(by) = off {
                                self.seen.saw_ahead(conn, now, by);
                            }
                            Err(NodeError::Clock(off.describe(tolerance)))
                        }
                        // Right now, but seen ahead not long ago: its keys may have expired early then.
                        Ok(()) => match self.seen.recently_ahead(conn, now) {
                            Some(why) => Err(NodeError::Clock(why)),
                            None => Ok(()),
                        },
                    }
                }
            },
        }
    }

    /// An outcome of a node whose writes the round below bracketed: judged by the readings of the node it came
    /// from, around the write it came in (none: not counted).
    fn judge_routed(
        &mut self,
        id: CommandId,
        reply: Reply,
        tolerance: Duration,
    ) -> (CommandId, Reply) {
        let verdict = match self.round.take_bracket(id.node) {
            Some(Bracket { before, after }) => {
                let conn = self.round.source(id.node);
                self.verdict(conn, node_time(&before), after, tolerance)
            }
            None => Err(NodeError::Clock(
                "its clock was not read around the command".to_owned(),
            )),
        };
        (id, checked(&verdict, reply))
    }

    /// [`send_to`](NodeRound::send_to) when the round below brackets some nodes' writes itself: those get
    /// `request` as it is, the others it between two `TIME`s.
    fn send_split(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        let n = self.next.len();
        if n > 64 {
            // A `NodeSet` counts every node from 64 on as a member: one node at a time.
            let mut sent = NodeSet::EMPTY;
            for node in (0..n).filter(|&node| nodes.contains(node)) {
                sent = sent.union(NodeRound::send(self, node, request, replies));
            }
            return sent;
        }
        let (mut plain, mut routed) = (NodeSet::EMPTY, NodeSet::EMPTY);
        for node in (0..n).filter(|&node| nodes.contains(node)) {
            match self.is_routed(node) {
                true => routed.insert(node),
                false => {
                    self.note(node, replies);
                    plain.insert(node);
                }
            }
        }
        let mut sent = NodeSet::EMPTY;
        if plain != NodeSet::EMPTY {
            sent = self.round.send_to(plain, &with_time(request), replies + 2);
        }
        if routed != NodeSet::EMPTY {
            sent = sent.union(self.round.send_to(routed, request, replies));
        }
        sent
    }

    /// Notes a request of `replies` commands about to be sent to `node` (its `TIME` follows them).
    fn note(&mut self, node: usize, replies: usize) {
        let inner = self.round.next_seq(node);
        if let Some(next) = self.next.get_mut(node) {
            let replies = u32::try_from(replies).unwrap_or(u32::MAX);
            self.largest = self.largest.max(replies);
            self.sent.push(Sent {
                node,
                outer: *next,
                inner,
                replies,
                before: None,
                verdict: None,
                held: None,
                held_more: Vec::new(),
            });
            *next = next.wrapping_add(replies);
        }
    }

    /// Files one outcome of the round below: a command's (held until its request's `TIME` is judged) or a
    /// `TIME`'s (judged, and the request's outcomes released with the verdict). Returns an outcome to hand out
    /// now; any more go to `ready`.
    fn file(
        &mut self,
        id: CommandId,
        reply: Reply,
        tolerance: Duration,
    ) -> Option<(CommandId, Reply)> {
        let node = id.node;
        let q = self.sent.iter_mut().find(|q| {
            q.node == node && id.seq.wrapping_sub(q.inner) <= q.replies.saturating_add(1)
        })?;
        let place = id.seq.wrapping_sub(q.inner);
        let out = |seq: u32, r: Reply| (CommandId { node, seq }, r);
        if place == 0 {
            q.before = Some(node_time(&reply));
            return None;
        }
        if place <= q.replies {
            let outer = q.outer.wrapping_add(place - 1);
            return match &q.verdict {
                Some(v) => Some(out(outer, checked(v, reply))),
                None if q.held.is_none() => {
                    q.held = Some((outer, reply));
                    None
                }
                None => {
                    q.held_more.push((outer, reply));
                    None
                }
            };
        }
        // The `TIME` before comes first on the connection; a request refused or timed out whole files its
        // outcomes in any order: without the reading before, no verdict but a failure.
        let before = q
            .before
            .take()
            .unwrap_or_else(|| Err("its clock could not be read before the request".to_string()));
        let verdict = self.verdict(node, before, reply, tolerance);
        let q = self.sent.iter_mut().find(|q| {
            q.node == node && id.seq.wrapping_sub(q.inner) == q.replies.saturating_add(1)
        })?;
        for (outer, r) in q.held_more.drain(..) {
            self.ready.push_back(out(outer, checked(&verdict, r)));
        }
        let first = q
            .held
            .take()
            .map(|(outer, r)| out(outer, checked(&verdict, r)));
        q.verdict = Some(verdict);
        first
    }
}

impl<R: NodeRound, C: Clock> NodeRound for Timed<'_, R, C> {
    fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        if self.tolerance.is_none() {
            return self.round.send_to(nodes, request, replies);
        }
        if !self.routed.is_empty() {
            return self.send_split(nodes, request, replies);
        }
        for node in 0..self.next.len() {
            if nodes.contains(node) {
                self.note(node, replies);
            }
        }
        self.round.send_to(nodes, &with_time(request), replies + 2)
    }

    fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet {
        if self.tolerance.is_none() || self.is_routed(node) {
            return self.round.send(node, request, replies);
        }
        self.note(node, replies);
        self.round.send(node, &with_time(request), replies + 2)
    }

    fn need(&mut self, outcomes: usize) {
        // Each request brings its two `TIME`s' outcomes with its commands': as few as the largest request's
        // would bring (being woken early is harmless; late, a round would wait for nodes it does not need).
        // With cluster members, the round below counts its own writes' `TIME`s, and a plain member's only wake
        // the caller early.
        match self.tolerance {
            Some(_) if !self.routed.is_empty() => self.round.need(outcomes),
            None => self.round.need(outcomes),
            Some(_) => {
                let k = self.largest as usize;
                self.round
                    .need(outcomes.saturating_add(outcomes.div_ceil(k).saturating_mul(2)))
            }
        }
    }

    fn patient_until(&mut self, hard: std::time::Instant) {
        self.round.patient_until(hard);
    }

    fn cut_short(&mut self, at: std::time::Instant) {
        self.round.cut_short(at);
    }

    fn next_seq(&self, node: usize) -> u32 {
        match self.tolerance {
            Some(_) if !self.is_routed(node) => self.next.get(node).copied().unwrap_or(0),
            _ => self.round.next_seq(node),
        }
    }

    async fn next(&mut self) -> Option<(CommandId, Reply)> {
        let Some(tolerance) = self.tolerance else {
            return self.round.next().await;
        };
        loop {
            if let Some(out) = self.ready.pop_front() {
                return Some(out);
            }
            match self.round.next().await {
                Some((id, reply)) if self.is_routed(id.node) => {
                    return Some(self.judge_routed(id, reply, tolerance));
                }
                Some((id, reply)) => {
                    if let Some(out) = self.file(id, reply, tolerance) {
                        return Some(out);
                    }
                }
                None => {
                    // Every id gets an outcome, a request's `TIME` too; should one not, its commands still get
                    // theirs, uncounted.
                    let why = "its clock could not be read: no reply to TIME";
                    for q in &mut self.sent {
                        let held = q.held.take().into_iter().chain(q.held_more.drain(..));
                        for (outer, _) in held {
                            let id = CommandId {
                                node: q.node,
                                seq: outer,
                            };
                            self.ready
                                .push_back((id, Err(NodeError::Clock(why.into()))));
                        }
                    }
                    return self.ready.pop_front();
                }
            }
        }
    }

    fn source(&self, node: usize) -> usize {
        self.round.source(node)
    }
}

/// `request` between two `TIME`s: one buffer, so that the three go out in one write.
fn with_time(request: &[u8]) -> BytesMut {
    let mut timed = BytesMut::with_capacity(request.len() + 2 * TIME.len());
    timed.extend_from_slice(TIME);
    timed.extend_from_slice(request);
    timed.extend_from_slice(TIME);
    timed
}

/// A reply as it counts after its request's clock verdict: [`NodeError::Clock`], or the failure of its second
/// `TIME` (a timeout) when the clock went unread for that.
/// Failures and the server's error replies stay what they are (they count for nothing either way, and say more).
fn checked(verdict: &Result<(), NodeError>, reply: Reply) -> Reply {
    match (verdict, reply) {
        (Ok(()), r) => r,
        (Err(_), r @ (Err(_) | Ok(Value::Error(_) | Value::BulkError(_)))) => r,
        (Err(e), Ok(_)) => Err(e.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const T: Duration = Duration::from_millis(25);

    fn s(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn time_reply(secs: &str, micros: &str) -> Reply {
        Ok(Value::Array(vec![
            Value::BulkString(Bytes::from(secs.to_string())),
            Value::BulkString(Bytes::from(micros.to_string())),
        ]))
    }

    #[test]
    fn a_node_time_within_the_round_and_the_tolerance_passes_and_beyond_it_fails() {
        // Opened at 1,000 ms, read at 1,010 ms (wall clock).
        for n in [975, 1_000, 1_005, 1_010, 1_035] {
            assert_eq!(judge((s(n), s(n)), s(1_000), s(1_010), T), Ok(()), "{n}");
        }
        let behind = judge((s(974), s(1_000)), s(1_000), s(1_010), T);
        assert_eq!(behind, Err(Off::Behind(s(26))));
        let ahead = judge((s(1_000), s(1_036)), s(1_000), s(1_010), T);
        assert_eq!(ahead, Err(Off::Ahead(s(26))));
        let said = Off::Behind(s(26)).describe(T);
        assert!(said.contains("26.0 ms behind this client's"), "{said}");
        let said = Off::Ahead(s(26)).describe(T);
        assert!(said.contains("26.0 ms ahead of this client's"), "{said}");
        // A node that ran the command late (paused) reads a time between the two: no failure, however long.
        assert_eq!(judge((s(2_000), s(60_000)), s(1_000), s(61_000), T), Ok(()));
    }

    /// A node seen ahead is not counted for the longest lease in use (plus the drift allowance) after the last
    /// sighting, however right its clock reads meanwhile; the configured restart window counts as a lease in use.
    #[test]
    fn a_node_seen_ahead_is_not_counted_for_the_longest_lease_after() {
        let seen = Seen::new(3, &Config::default());
        seen.note_ttl(10_000);
        let t0 = Instant::now();
        assert_eq!(seen.recently_ahead(1, t0), None, "never seen ahead");
        seen.saw_ahead(1, t0, s(60_000));
        // 10 s and the drift allowance (1 % and 2 ms): 10.102 s.
        let inside = seen
            .recently_ahead(1, t0 + s(10_101))
            .expect("within the window");
        assert!(inside.contains("60000.0 ms ahead"), "{inside}");
        assert_eq!(seen.recently_ahead(1, t0 + s(10_102)), None);
        assert_eq!(seen.recently_ahead(0, t0 + s(1)), None, "another node");
        // Each sighting starts the window again; an older one reported late does not shorten it.
        seen.saw_ahead(1, t0 + s(5_000), s(30));
        seen.saw_ahead(1, t0 + s(1_000), s(40));
        assert!(seen.recently_ahead(1, t0 + s(15_000)).is_some());
        assert_eq!(seen.recently_ahead(1, t0 + s(15_102)), None);
        let configured = Seen::new(1, &Config::default().with_restart_window(s(60_000)));
        configured.saw_ahead(0, t0, s(30));
        assert!(
            configured.recently_ahead(0, t0 + s(59_000)).is_some(),
            "the window"
        );
        assert_eq!(configured.recently_ahead(7, t0), None, "no such node");
    }

    /// A round below the check that hands out the outcomes it is given, in order, numbered per node as a round
    /// numbers them.
    struct Given {
        sent: Vec<u32>,
        handed: Vec<u32>,
        outcomes: VecDeque<(usize, Reply)>,
    }

    impl Given {
        fn new(outcomes: Vec<(usize, Reply)>) -> Given {
            Given {
                sent: vec![0; 2],
                handed: vec![0; 2],
                outcomes: outcomes.into(),
            }
        }
    }

    impl NodeRound for Given {
        fn send_to(&mut self, nodes: NodeSet, _: &[u8], replies: usize) -> NodeSet {
            for node in 0..self.sent.len() {
                if nodes.contains(node) {
                    self.send(node, &[], replies);
                }
            }
            nodes
        }
        fn send(&mut self, node: usize, _: &[u8], replies: usize) -> NodeSet {
            self.sent[node] += u32::try_from(replies).unwrap_or(u32::MAX);
            NodeSet::ALL
        }
        fn need(&mut self, _: usize) {}
        fn patient_until(&mut self, _: Instant) {}
        fn cut_short(&mut self, _: Instant) {}
        fn next_seq(&self, node: usize) -> u32 {
            self.sent[node]
        }
        async fn next(&mut self) -> Option<(CommandId, Reply)> {
            let (node, reply) = self.outcomes.pop_front()?;
            let seq = self.handed[node];
            self.handed[node] += 1;
            Some((CommandId { node, seq }, reply))
        }
    }

    /// A clock that stands still: this client's monotonic and wall clocks.
    struct Still(Instant, Duration);

    impl Clock for Still {
        fn now(&self) -> Instant {
            self.0
        }
        fn wall(&self) -> Duration {
            self.1
        }
        fn sleep(&self, _: Duration) -> impl Future<Output = ()> {
            std::future::ready(())
        }
    }

    /// One checked round of one command on node 0, whose `TIME`s read `before` and `after` (wall clock): the
    /// command's outcome as the round's caller sees it.
    fn one_request(clock: &Still, seen: &Seen, before: Duration, after: Duration) -> Reply {
        one_request_then(clock, seen, before, time(after))
    }

    /// A `TIME` reply reading `t`.
    fn time(t: Duration) -> Reply {
        Ok(Value::Array(vec![
            Value::Integer(i64::try_from(t.as_secs()).unwrap_or(i64::MAX)),
            Value::Integer(i64::from(t.subsec_micros())),
        ]))
    }

    /// As [`one_request`], the second `TIME`'s outcome `after` (a reading, or a failure).
    fn one_request_then(clock: &Still, seen: &Seen, before: Duration, after: Reply) -> Reply {
        let below = Given::new(vec![
            (0, time(before)),
            (0, Ok(Value::SimpleString(Bytes::from_static(b"OK")))),
            (0, after),
        ]);
        let mut round = Timed::new(below, 2, (clock, seen), Some(T));
        round.send(0, b"SET", 1);
        let (id, reply) = crate::redlock::engine::seam::block(round.next()).expect("an outcome");
        assert_eq!(id, CommandId { node: 0, seq: 0 });
        reply
    }

    /// With the check on, the ids a checked round hands its caller count the caller's commands only: a request
    /// of two commands goes below with its two `TIME`s (four ids there), and the caller's next command on that
    /// node gets id 2. With the check off, the round below's ids pass through.
    #[test]
    fn a_checked_round_numbers_the_callers_commands_without_its_times() {
        let clock = Still(Instant::now(), Duration::from_secs(1_700_000_000));
        let seen = Seen::new(2, &Config::default());
        let mut round = Timed::new(Given::new(Vec::new()), 2, (&clock, &seen), Some(T));
        assert_eq!(round.next_seq(0), 0);
        round.send(0, b"SET", 2);
        assert_eq!(round.round.next_seq(0), 4, "the two TIMEs went below");
        assert_eq!((round.next_seq(0), round.next_seq(1)), (2, 0));
        round.send_to(NodeSet::ALL, b"SET", 1);
        assert_eq!((round.next_seq(0), round.next_seq(1)), (3, 1));
        let mut off = Timed::new(Given::new(Vec::new()), 2, (&clock, &seen), None);
        off.send(1, b"SET", 2);
        assert_eq!((off.next_seq(0), off.next_seq(1)), (0, 2));
    }

    /// A node whose clock reads behind the round's opening before the request and ahead of its end after it
    /// stepped forward during the request: it was seen ahead, and is not counted for the longest lease after,
    /// however right it reads at the next round (its keys may have expired early meanwhile).
    #[test]
    fn a_clock_read_behind_then_ahead_in_one_request_is_remembered_as_seen_ahead() {
        let clock = Still(Instant::now(), Duration::from_secs(1_700_000_000));
        let seen = Seen::new(2, &Config::default());
        seen.note_ttl(10_000);
        let wall = clock.1;
        let stepped = one_request(&clock, &seen, wall - s(1_000), wall + s(3_600_000));
        assert!(matches!(stepped, Err(NodeError::Clock(_))), "{stepped:?}");
        // The next round, its clock set right again: still not counted.
        let right = one_request(&clock, &seen, wall, wall);
        assert!(
            matches!(&right, Err(NodeError::Clock(why)) if why.contains("seen")),
            "a node seen ahead counted at once: {right:?}"
        );
    }

    /// A node whose clock reads ahead before a request and right after it was stepped back during the request:
    /// it was ahead when the request ran (its keys may have expired early), so the request's grant does not
    /// count, and the node is not counted for the longest lease after.
    #[test]
    fn a_clock_read_ahead_before_a_request_and_right_after_it_is_seen_ahead() {
        let clock = Still(Instant::now(), Duration::from_secs(1_700_000_000));
        let seen = Seen::new(2, &Config::default());
        seen.note_ttl(10_000);
        let wall = clock.1;
        let stepped_back = one_request(&clock, &seen, wall + s(3_600_000), wall);
        assert!(
            matches!(stepped_back, Err(NodeError::Clock(_))),
            "a grant counted from a node read an hour ahead just before it: {stepped_back:?}"
        );
        let right = one_request(&clock, &seen, wall, wall);
        assert!(
            matches!(&right, Err(NodeError::Clock(why)) if why.contains("seen")),
            "a node seen ahead counted at once: {right:?}"
        );
    }

    /// A node whose `TIME` before a request reads ahead of this client's clock, whose second `TIME` then never
    /// comes (the round ends first, or the connection drops), was seen ahead all the same: the first reading
    /// alone shows it. It is not counted for the longest lease after, however right it reads at the next round.
    #[test]
    fn a_clock_read_ahead_before_a_request_is_remembered_without_the_reading_after() {
        for after in [Err(NodeError::Timeout), Err(NodeError::Closed)] {
            let clock = Still(Instant::now(), Duration::from_secs(1_700_000_000));
            let seen = Seen::new(2, &Config::default());
            seen.note_ttl(10_000);
            let wall = clock.1;
            let unread = one_request_then(&clock, &seen, wall + s(3_600_000), after.clone());
            assert!(unread.is_err(), "{unread:?}");
            let right = one_request(&clock, &seen, wall, wall);
            assert!(
                matches!(&right, Err(NodeError::Clock(why)) if why.contains("seen")),
                "after {after:?}, a node seen ahead counted at once: {right:?}"
            );
        }
    }

    #[test]
    fn time_replies_are_read_and_anything_else_is_no_reading() {
        assert_eq!(
            node_time(&time_reply("1700000000", "250000")),
            Ok(Duration::from_millis(1_700_000_000_250))
        );
        for bad in [
            time_reply("x", "0"),
            time_reply("1", "1000000"),
            Ok(Value::Integer(1)),
            Ok(Value::Array(vec![])),
            Err(NodeError::Timeout),
        ] {
            assert!(node_time(&bad).is_err(), "{bad:?}");
        }
        let refused = node_time(&Ok(Value::Error(Bytes::from_static(b"NOPERM no")))).unwrap_err();
        assert!(refused.contains("+time"), "{refused}");
    }

    #[test]
    fn a_verdict_turns_counted_replies_into_clock_failures_and_keeps_the_rest() {
        let off = Err(NodeError::Clock("off".into()));
        assert_eq!(
            checked(&off, Ok(Value::SimpleString(Bytes::from_static(b"OK")))),
            Err(NodeError::Clock("off".into()))
        );
        assert_eq!(
            checked(&off, Err(NodeError::Timeout)),
            Err(NodeError::Timeout)
        );
        let error = Ok(Value::Error(Bytes::from_static(b"ERR x")));
        assert_eq!(checked(&off, error.clone()), error);
        let ok = Ok(Value::Integer(1));
        assert_eq!(checked(&Ok(()), ok.clone()), ok);
        // A second `TIME` that timed out: the reply that came times out too.
        assert_eq!(
            checked(&Err(NodeError::Timeout), ok),
            Err(NodeError::Timeout)
        );
    }
}
