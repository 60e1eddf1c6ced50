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
//! and every lease's validity is `2T` shorter (`Config::allowance`). A request whose node's clock is off, or
//! whose `TIME`s have no reply (refused, `NOPERM`, the connection failed), gets [`NodeError::Clock`] for each of
//! its commands instead of their replies (a failed vote, with the reason in the report); one whose second `TIME`
//! did not come within the round (a slow node: its replies came in part) gets [`NodeError::Timeout`], as if none
//! had come: its clock was not read, not seen off. The server's own error replies and failures are kept as they
//! are.
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
//! - **A node's clock does not go back between two grants.** One that jumps forward (its keys expire) and is set
//!   back before another client's grant reads right at both: that excursion is not seen
//!   (`tests/mutex/clocks.rs` shows both ways it gives two holders: a jump undone, a fast clock stepped back).
//!   Keeping nodes' clocks from being stepped (NTP slewing, never `date -s` on a node holding locks) is the
//!   operator's part; the restart guard's window does not help either, since the node did not restart.
//! - **The clients' wall clocks are right** (NTP keeps them within milliseconds): `s_A` and `r_B` are read on
//!   two clients' clocks, and a disagreement of `δ` between them takes `δ` off the margin. A step of a clock
//!   that a client shares with its nodes (one host, one bad time source for all) is invisible to it.
//! - **Cluster members**: a keyless `TIME` cannot follow a redirected command to its new master, so rounds
//!   routed over cluster members are not checked yet.
//!
//! # Cost
//!
//! Two `TIME`s per node per acquisition or extension, in the request's write and, from a node that answers at
//! once, in the same reply packet; the outcomes of a request are handed to the round's caller once its second
//! `TIME` is in (the same read, normally). `scripts/latency-ab` measured no change in a lone caller's latency.
//! Releases and reads are not checked: they set no lease.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::BytesMut;

use crate::net::{CommandId, NodeError, NodeSet, Reply};
use crate::redlock::engine::seam::{Clock, NodeRound};
use crate::resp::Value;

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

/// Judges a node's clock read just before a request (`before`) and just after it (`after`), in a round opened at
/// `s` and read at `r` (all wall clock), with tolerance `t`: `s − t ≤ before` and `after ≤ r + t`.
pub(crate) fn judge(
    (before, after): (Duration, Duration),
    s: Duration,
    r: Duration,
    t: Duration,
) -> Result<(), String> {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let n = before;
    if n.saturating_add(t) < s {
        return Err(format!(
            "its clock is {:.1} ms behind this client's (tolerance {} ms)",
            ms(s - n),
            t.as_millis()
        ));
    }
    let n = after;
    if n > r.saturating_add(t) {
        return Err(format!(
            "its clock is {:.1} ms ahead of this client's (tolerance {} ms)",
            ms(n - r),
            t.as_millis()
        ));
    }
    Ok(())
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
}

impl<'c, R: NodeRound, C: Clock> Timed<'c, R, C> {
    /// Wraps `round` over `n` nodes; `tolerance` `None` turns the check off.
    pub(crate) fn new(round: R, n: usize, clock: &'c C, tolerance: Option<Duration>) -> Self {
        let on = tolerance.is_some();
        Timed {
            round,
            clock,
            tolerance,
            opened: if on { clock.wall() } else { Duration::ZERO },
            next: if on { vec![0; n] } else { Vec::new() },
            sent: Vec::new(),
            largest: 1,
            ready: VecDeque::new(),
        }
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
        let verdict = match reply {
            // The request ran, but its second `TIME` did not come within the round: the node is slow, its clock
            // unread and not seen off. Its replies time out as a request does whose replies all come late.
            Err(NodeError::Timeout) => Err(NodeError::Timeout),
            reply => before
                .and_then(|b| {
                    node_time(&reply)
                        .and_then(|a| judge((b, a), self.opened, self.clock.wall(), tolerance))
                })
                .map_err(NodeError::Clock),
        };
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
        for node in 0..self.next.len() {
            if nodes.contains(node) {
                self.note(node, replies);
            }
        }
        self.round.send_to(nodes, &with_time(request), replies + 2)
    }

    fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet {
        if self.tolerance.is_none() {
            return self.round.send(node, request, replies);
        }
        self.note(node, replies);
        self.round.send(node, &with_time(request), replies + 2)
    }

    fn need(&mut self, outcomes: usize) {
        // Each request brings its two `TIME`s' outcomes with its commands': as few as the largest request's
        // would bring (being woken early is harmless; late, a round would wait for nodes it does not need).
        match self.tolerance {
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

    fn next_seq(&self, node: usize) -> u32 {
        match self.tolerance {
            None => self.round.next_seq(node),
            Some(_) => self.next.get(node).copied().unwrap_or(0),
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

/// `TIME`, encoded.
const TIME: &[u8] = b"*1\r\n$4\r\nTIME\r\n";

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
        let behind = judge((s(974), s(1_000)), s(1_000), s(1_010), T).unwrap_err();
        assert!(behind.contains("26.0 ms behind"), "{behind}");
        let ahead = judge((s(1_000), s(1_036)), s(1_000), s(1_010), T).unwrap_err();
        assert!(ahead.contains("26.0 ms ahead"), "{ahead}");
        // A node that ran the command late (paused) reads a time between the two: no failure, however long.
        assert_eq!(judge((s(2_000), s(60_000)), s(1_000), s(61_000), T), Ok(()));
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
    fn time_is_encoded_as_the_encoder_would() {
        let mut encoded = BytesMut::new();
        crate::resp::encode_command(&[b"TIME"], &mut encoded);
        assert_eq!(&encoded[..], TIME);
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
