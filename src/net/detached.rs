//! [`Detached`]: releases that were held for room on a full node when their round ended, kept until the node has
//! room for them (then queued like any request, their replies read and dropped) or until they are given up. Plain
//! bookkeeping, no sockets and no clock of its own: the fanout's machine places them (`machine/detach.rs`).
//!
//! # Why
//!
//! A release round's request that finds its node's queue full (`max_in_flight` in flight, and the release reserve
//! used up) is *held for room* by its round: never written, it waits in the round until replies make room
//! (`Round::retry_held`). The round usually ends first: a release is decided as soon as a majority answered, and
//! its caller drops the round (or a failed acquisition's partial grants are released unawaited, by a round
//! dropped at once), or the round's last deadline passes first. Dropped with its round, the held request never
//! reached its node, which kept the key until its lease ended, although "dropping a round abandons its replies,
//! not its requests" and a release must reach every reachable node.
//!
//! # Invariants
//!
//! - **Only releases are detached.** Only a release round
//!   ([`Fanout::release_round`](super::Fanout::release_round)) holds a request for room: an ordinary round's
//!   request finds a full node refused at once, never held. What a release round sends is, by that method's
//!   contract, a compare-and-delete of a value only its caller holds (`DELIFEQ`, `DELEX`, the
//!   release script, `RELEASE_BATCH` and the other kinds' releases, a queue entry's removal): whenever it runs it
//!   deletes nothing but that value's own key, so it is safe to run after its caller was told the verdict, on a
//!   later connection to the node, with nobody waiting. An acquisition (`SET NX`) or an extension never goes in a
//!   release round: run late, with nobody waiting, it would make a lock nobody holds.
//! - **One reply consumed per command written, in order, never counted for another command.** A held request
//!   was never written (it has no bytes on any wire), so a detached one runs at most once. When it is placed it
//!   is queued with its own reply count under [`Waiter::Detached`](super::state::Waiter::Detached): its replies
//!   take their places in the connection's FIFO, are read, and dropped; they are filed under no round.
//! - **Bounded.** A detached request waits for room at most `hung_timeout` from the moment it was detached (a
//!   node that sends nothing for that long with requests outstanding is dropped anyway), or from the last time
//!   its node refused a set-up as loading its data set (`-LOADING`), whichever is later; then it is given up:
//!   dropped unsent, and counted. A node restarted with its data answers while it loads, and serves once the
//!   load ends, however long that takes (seconds to minutes for a large data set): its detached releases wait
//!   for it as long as it keeps answering so (it is dialled at least every `backoff_max`, so a load's `-LOADING`
//!   replies come closer together than `hung_timeout` unless `backoff_max` is set above it), and go on the first
//!   connection whose set-up goes through. A node that is down, paused or refuses for another reason
//!   (a wrong password) does not extend the bound. Per node at most `2 * max_in_flight` replies' worth wait (the release
//!   reserve's size: as much as the node's queue takes for releases); a request past that is given up at once.
//!   The fanout's drop gives up whatever still waits. The cap is twice `max_in_flight`, not `max_in_flight`,
//!   because folded releases (up to `max_in_flight` replies each) are held whole when they do not fit the room
//!   left: a queue short of full can hold back more than `max_in_flight` replies' worth, and a smaller cap would
//!   give up releases that a node merely paused for a moment could still take.
//! - **Scripts in full.** Nobody reads a detached request's replies, so no `NOSCRIPT` can be answered by sending
//!   the script again. muxlock's releases go in full from the start (`redlock/scripts.rs`, "Releases go in
//!   full": the same holds for every reply of a release round read by nobody), so a detached request is placed
//!   with the bytes it was sent with, and a `SCRIPT FLUSH` while it waits cannot refuse it. Not covered: a native command
//!   refused on a later connection (the node replaced by a server without it), and a routed release answered
//!   `MOVED`/`ASK`: they end with the key's lease.
//! - **In order per node, and ahead of every later request.** A node's detached requests are placed in the order
//!   they were detached: the first that does not fit holds back the node's later ones. And no request offered
//!   to the node after a request was detached goes on its wire before it: a round that offers a request to a
//!   node with detached requests waiting queues them first, right ahead of its own, if both fit (on a
//!   connection still connecting or setting up too: they go out behind the set-up, driven by the fanout whether
//!   or not that round is still there, see "Driven to the end"), and otherwise its request is refused as
//!   overloaded (an ordinary round) or held behind them (a release round, whose held requests make way the same
//!   way when retried): `machine/detach.rs`, `Machine::make_way`. Why it
//!   matters even though every detached request deletes only its own value: a detached clean-up run after a
//!   later request of the same value (a retry that reused it) would delete what that request was counted for.
//!   Values are drawn per attempt so that cannot happen; this order makes the wire agree with the order of the
//!   calls as well, so a reader of the node's command log sees what the caller did.
//! - **Placed by the driver only once the set-up went through.** A server restarted with its data accepts
//!   connections while it loads, and refuses with `-LOADING` whatever needs the data: a release queued behind
//!   the set-up would be refused with nobody to notice. A set-up refused so fails the connection ("A node that
//!   is loading" in [`state`](super::state)), and the driver places detached requests only on a connection
//!   whose set-up was answered (`place_detached`): so they reach the node once it serves its data. A round that
//!   offers a request to the node meanwhile still queues them ahead of its own behind the set-up (`make_way`:
//!   the node keeps its votes while it reconnects); if that set-up is refused as loading, they are counted as
//!   given up (`NodeStats::net.given_up`), as a release that may not have run.
//! - **Driven to the end.** Once queued on a connection a detached request is no longer here, and nobody waits
//!   for its reply; yet its bytes leave only with a turn of the driver when the connection is still connecting
//!   (`make_way` queues them on such a connection, ahead of a round's request: that round usually ends first,
//!   decided by the other nodes), in its TLS handshake, or when a write was cut short by a full socket; and a
//!   node that stops answering is dropped as hung only by a turn that read the sockets. So the
//!   fanout keeps a driver polling until no connection holds one ([`needs_driver`](Detached::needs_driver),
//!   cleared through [`settled`](Detached::settled) by the background driver): else they sat unsent until the
//!   fanout's next call, past their bound and often past their key's lease. Bounded: a connection holds them
//!   until their replies are read, or it is dropped (its connect timeout, `hung_timeout`); dropped before its
//!   set-up went through (never opened, or refused as loading), they are counted as given up.

use std::collections::VecDeque;
use std::time::Instant;

/// What became of a detached request offered to its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// Queued on the node's connection: it goes out with the node's next write.
    Queued,
    /// No room yet (or no connection that can take bytes): it waits, and holds back the node's later ones.
    Wait,
    /// It can never go (no such node): dropped.
    Drop,
}

/// One detached request.
#[derive(Debug)]
struct Request {
    node: usize,
    bytes: Vec<u8>,
    replies: usize,
    give_up_at: Instant,
}

impl Request {
    /// When it is given up: its own bound, or later while its node is alive and loading (`alive`, see "Bounded").
    fn bound(&self, alive: impl Fn(usize) -> Option<Instant>) -> Instant {
        alive(self.node).map_or(self.give_up_at, |t| t.max(self.give_up_at))
    }
}

/// The detached requests of every node, in the order they were detached.
#[derive(Debug, Default)]
pub(crate) struct Detached {
    waiting: VecDeque<Request>,
    /// Per node: the replies its waiting requests expect (for the cap).
    replies: Vec<usize>,
    /// Some were handed to a connection since [`settled`](Detached::settled) last found none left on one: their
    /// replies may still be to come, and someone must drive until they are read (see "Driven to the end").
    placed: bool,
}

impl Detached {
    /// Keeps `bytes` (a release expecting `replies` replies) for `node`, to be placed until `give_up_at`.
    /// Returns `false` if it was given up at once: `node` already has `cap` replies' worth waiting, or would
    /// with this one.
    pub(crate) fn detach(
        &mut self,
        node: usize,
        bytes: Vec<u8>,
        replies: usize,
        give_up_at: Instant,
        cap: usize,
    ) -> bool {
        if self.replies.len() <= node {
            self.replies.resize(node + 1, 0);
        }
        let held = &mut self.replies[node];
        if held.saturating_add(replies) > cap {
            return false;
        }
        *held += replies;
        // Detached under the fanout's lock with a monotonic clock and one bound: non-decreasing already; kept so
        // regardless, so that the front is always the earliest.
        let give_up_at = self
            .waiting
            .back()
            .map_or(give_up_at, |r| r.give_up_at.max(give_up_at));
        self.waiting.push_back(Request {
            node,
            bytes,
            replies,
            give_up_at,
        });
        true
    }

    /// Whether none waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Whether someone must drive for them: some wait, or some were queued on a connection and may not have been
    /// read yet (see "Driven to the end").
    pub(crate) fn needs_driver(&self) -> bool {
        !self.waiting.is_empty() || self.placed
    }

    /// Told whether any connection still holds one of them (`on_connections`): if none does, those queued so far
    /// no longer need a driver.
    pub(crate) fn settled(&mut self, on_connections: bool) {
        self.placed = on_connections;
    }

    /// How many wait.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// The replies `node`'s waiting requests expect in all (0: none waits for it).
    pub(crate) fn waiting_on(&self, node: usize) -> usize {
        self.replies.get(node).copied().unwrap_or(0)
    }

    /// At `now`: hands every request waiting for `node` to `queue(bytes, replies)`, in the order they were
    /// detached, and gives up those past their bound (`given_up(replies)` for each; `alive`: until when the node
    /// extends it, see "Bounded"): for a caller about to queue a request of its own on `node`, which must go
    /// behind them (see "In order per node").
    pub(crate) fn take_node(
        &mut self,
        (node, alive): (usize, Option<Instant>),
        now: Instant,
        mut queue: impl FnMut(&[u8], usize),
        mut given_up: impl FnMut(usize),
    ) {
        if self.waiting_on(node) == 0 {
            return;
        }
        self.waiting.retain(|r| {
            if r.node != node {
                return true;
            }
            match now >= r.bound(|_| alive) {
                true => given_up(r.replies),
                false => {
                    queue(&r.bytes, r.replies);
                    self.placed = true;
                }
            }
            false
        });
        if let Some(n) = self.replies.get_mut(node) {
            *n = 0;
        }
    }

    /// When the first of them is given up, if any waits; `alive(node)`: until when `node` extends the bounds of
    /// its requests (see "Bounded").
    pub(crate) fn earliest(&self, alive: impl Fn(usize) -> Option<Instant>) -> Option<Instant> {
        self.waiting.iter().map(|r| r.bound(&alive)).min()
    }

    /// At `now`: gives up the requests whose bound has passed (`given_up(node, replies)` for each; `alive(node)`:
    /// until when `node` extends it, see "Bounded"), and offers the others to `place(node, bytes, replies)` in
    /// order, a node's requests after its earlier ones only once those were queued.
    pub(crate) fn place(
        &mut self,
        now: Instant,
        alive: impl Fn(usize) -> Option<Instant>,
        mut place: impl FnMut(usize, &[u8], usize) -> Placed,
        mut given_up: impl FnMut(usize, usize),
    ) {
        // Nodes whose earlier request still waits in this pass.
        let mut blocked: Vec<usize> = Vec::new();
        let replies = &mut self.replies;
        let placed = &mut self.placed;
        self.waiting.retain(|r| {
            let gone = if now >= r.bound(&alive) {
                given_up(r.node, r.replies);
                true
            } else if blocked.contains(&r.node) {
                false
            } else {
                match place(r.node, &r.bytes, r.replies) {
                    Placed::Queued => {
                        *placed = true;
                        true
                    }
                    Placed::Drop => true,
                    Placed::Wait => {
                        blocked.push(r.node);
                        false
                    }
                }
            };
            if gone {
                if let Some(n) = replies.get_mut(r.node) {
                    *n = n.saturating_sub(r.replies);
                }
            }
            !gone
        });
    }

    /// Gives up everything that waits (`given_up(node, replies)` for each).
    pub(crate) fn clear(&mut self, mut given_up: impl FnMut(usize, usize)) {
        for r in self.waiting.drain(..) {
            given_up(r.node, r.replies);
        }
        self.replies.iter_mut().for_each(|n| *n = 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Places what `room` (replies each node takes now) lets through; returns `(node, bytes)` queued, in order.
    fn place(d: &mut Detached, now: Instant, room: &mut [usize]) -> (Vec<(usize, Vec<u8>)>, usize) {
        let mut queued = Vec::new();
        let mut given_up = 0;
        d.place(
            now,
            |_| None,
            |node, bytes, replies| match room.get_mut(node) {
                None => Placed::Drop,
                Some(r) if *r >= replies => {
                    *r -= replies;
                    queued.push((node, bytes.to_vec()));
                    Placed::Queued
                }
                Some(_) => Placed::Wait,
            },
            |_, replies| given_up += replies,
        );
        (queued, given_up)
    }

    #[test]
    fn a_node_s_requests_go_in_order_when_room_comes() {
        let t0 = Instant::now();
        let bound = t0 + Duration::from_secs(5);
        let mut d = Detached::default();
        assert!(d.detach(1, b"a".to_vec(), 2, bound, 8));
        assert!(d.detach(0, b"b".to_vec(), 1, bound, 8));
        assert!(d.detach(1, b"c".to_vec(), 1, bound, 8));
        // Node 1 has room for one reply only: "a" (2) waits, and "c" behind it though it would fit.
        let (queued, _) = place(&mut d, t0, &mut [5, 1]);
        assert_eq!(queued, vec![(0, b"b".to_vec())]);
        assert_eq!(d.len(), 2);
        let (queued, _) = place(&mut d, t0, &mut [0, 3]);
        assert_eq!(queued, vec![(1, b"a".to_vec()), (1, b"c".to_vec())]);
        assert!(d.is_empty());
        assert_eq!(d.earliest(|_| None), None);
    }

    #[test]
    fn past_its_bound_a_request_is_given_up_unsent() {
        let t0 = Instant::now();
        let mut d = Detached::default();
        assert!(d.detach(0, b"a".to_vec(), 3, t0 + Duration::from_millis(10), 8));
        assert!(d.detach(0, b"b".to_vec(), 1, t0 + Duration::from_millis(20), 8));
        assert_eq!(d.earliest(|_| None), Some(t0 + Duration::from_millis(10)));
        let (queued, given_up) = place(&mut d, t0 + Duration::from_millis(10), &mut [0]);
        assert!(queued.is_empty());
        assert_eq!(given_up, 3);
        assert_eq!(d.earliest(|_| None), Some(t0 + Duration::from_millis(20)));
        // "a" no longer holds "b" back.
        let (queued, given_up) = place(&mut d, t0 + Duration::from_millis(15), &mut [1]);
        assert_eq!((queued, given_up), (vec![(0, b"b".to_vec())], 0));
    }

    #[test]
    fn a_node_that_answers_as_loading_keeps_its_requests_past_their_bound_and_no_other_does() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut d = Detached::default();
        assert!(d.detach(0, b"a".to_vec(), 1, ms(10), 4));
        assert!(d.detach(1, b"b".to_vec(), 1, ms(10), 4));
        // Node 0 refused a set-up as loading at 8 ms (alive until 18 ms); node 1 said nothing.
        let alive = |node: usize| (node == 0).then_some(ms(18));
        assert_eq!(d.earliest(alive), Some(ms(10)));
        let mut given_up = Vec::new();
        d.place(
            ms(12),
            alive,
            |_, _, _| Placed::Wait,
            |n, r| given_up.push((n, r)),
        );
        assert_eq!(given_up, vec![(1, 1)], "node 1's bound passed");
        assert_eq!(d.earliest(alive), Some(ms(18)));
        // Loaded: its next set-up goes through, and the request is placed.
        let mut queued = Vec::new();
        d.place(
            ms(15),
            alive,
            |n, bytes, _| {
                queued.push((n, bytes.to_vec()));
                Placed::Queued
            },
            |_, _| panic!("still alive"),
        );
        assert_eq!(queued, vec![(0, b"a".to_vec())]);
        // Past the extension it is given up like any other.
        assert!(d.detach(0, b"c".to_vec(), 1, ms(10), 4));
        let mut given_up = 0;
        d.take_node(
            (0, alive(0)),
            ms(18),
            |_, _| panic!("past it"),
            |r| given_up += r,
        );
        assert_eq!(given_up, 1);
    }

    #[test]
    fn a_node_keeps_at_most_its_cap_and_a_request_that_went_frees_its_share() {
        let t0 = Instant::now();
        let bound = t0 + Duration::from_secs(5);
        let mut d = Detached::default();
        assert!(d.detach(2, b"a".to_vec(), 3, bound, 4));
        assert!(!d.detach(2, b"b".to_vec(), 2, bound, 4), "3 + 2 > 4");
        assert!(
            d.detach(1, b"c".to_vec(), 4, bound, 4),
            "another node's share"
        );
        assert!(
            !d.detach(0, b"d".to_vec(), 5, bound, 4),
            "larger than the cap"
        );
        let (queued, _) = place(&mut d, t0, &mut [0, 0, 3]);
        assert_eq!(queued, vec![(2, b"a".to_vec())]);
        assert!(d.detach(2, b"b".to_vec(), 2, bound, 4));
    }

    #[test]
    fn taking_a_node_s_requests_hands_them_over_in_order_and_gives_up_those_past_their_bound() {
        let t0 = Instant::now();
        let mut d = Detached::default();
        assert!(d.detach(1, b"a".to_vec(), 2, t0 + Duration::from_millis(10), 8));
        assert!(d.detach(0, b"b".to_vec(), 1, t0 + Duration::from_secs(5), 8));
        assert!(d.detach(1, b"c".to_vec(), 1, t0 + Duration::from_secs(5), 8));
        assert!(d.detach(1, b"d".to_vec(), 3, t0 + Duration::from_secs(5), 8));
        assert_eq!(
            (d.waiting_on(0), d.waiting_on(1), d.waiting_on(9)),
            (1, 6, 0)
        );
        let (mut queued, mut given_up) = (Vec::new(), Vec::new());
        d.take_node(
            (1, None),
            t0 + Duration::from_millis(10),
            |bytes, replies| queued.push((bytes.to_vec(), replies)),
            |replies| given_up.push(replies),
        );
        assert_eq!(queued, vec![(b"c".to_vec(), 1), (b"d".to_vec(), 3)]);
        assert_eq!(given_up, vec![2], "\"a\" was past its bound");
        assert_eq!((d.waiting_on(0), d.waiting_on(1), d.len()), (1, 0, 1));
        // The node's share is free again; the other node's request is untouched.
        assert!(d.detach(1, b"e".to_vec(), 8, t0 + Duration::from_secs(5), 8));
        let (mut queued, mut given_up) = (Vec::new(), 0);
        d.take_node(
            (7, None),
            t0,
            |b, _| queued.push(b.to_vec()),
            |_| given_up += 1,
        );
        assert!(queued.is_empty() && given_up == 0 && d.len() == 2);
    }

    #[test]
    fn a_request_for_a_node_that_is_not_there_is_dropped_and_clear_gives_up_the_rest() {
        let t0 = Instant::now();
        let bound = t0 + Duration::from_secs(5);
        let mut d = Detached::default();
        assert!(d.detach(7, b"a".to_vec(), 1, bound, 4));
        assert!(d.detach(0, b"b".to_vec(), 2, bound, 4));
        let (queued, given_up) = place(&mut d, t0, &mut [0]);
        assert_eq!((queued.len(), given_up, d.len()), (0, 0, 1));
        let mut gone = Vec::new();
        d.clear(|node, replies| gone.push((node, replies)));
        assert_eq!(gone, vec![(0, 2)]);
        assert!(d.is_empty());
        assert!(
            d.detach(0, b"c".to_vec(), 4, bound, 4),
            "the share was freed"
        );
    }

    #[test]
    fn requests_handed_to_a_connection_need_a_driver_until_none_is_left_on_one() {
        let t0 = Instant::now();
        let bound = t0 + Duration::from_secs(5);
        let mut d = Detached::default();
        assert!(!d.needs_driver());
        assert!(d.detach(0, b"a".to_vec(), 1, bound, 4));
        assert!(d.detach(1, b"b".to_vec(), 1, bound, 4));
        assert!(d.needs_driver(), "waiting");
        let (queued, _) = place(&mut d, t0, &mut [1, 0]);
        assert_eq!(queued.len(), 1);
        let mut taken = Vec::new();
        d.take_node((1, None), t0, |bytes, _| taken.push(bytes.to_vec()), |_| {});
        assert_eq!(taken, vec![b"b".to_vec()]);
        assert!(d.is_empty());
        assert!(d.needs_driver(), "queued on connections, replies to come");
        d.settled(true);
        assert!(d.needs_driver(), "a connection still holds one");
        d.settled(false);
        assert!(!d.needs_driver());
        // Given up, not queued: nothing left for a driver.
        assert!(d.detach(0, b"c".to_vec(), 1, t0, 4));
        d.take_node((0, None), t0, |_, _| panic!("past its bound"), |_| {});
        assert!(!d.needs_driver());
    }
}
