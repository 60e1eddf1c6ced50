//! [`Detached`]: releases that were held for room on a full node when their round ended, kept until the node has
//! room for them (then queued like any request, their replies read and dropped) or until they are given up. Plain
//! bookkeeping, no sockets and no clock of its own: the fanout places them (`fanout/detach.rs`).
//!
//! # Why
//!
//! A release round's request that finds its node's queue full (`max_in_flight` in flight, and the release reserve
//! used up) is *held for room* by its round: never written, it waits in the round until replies make room
//! (`Round::retry_held`). The round usually ends first: a release is decided as soon as a majority answered, and
//! its caller drops the round (or a failed acquisition's partial grants are released unawaited, by a round
//! dropped at once), or the round's last deadline passes first. Dropped with its round, the held request never
//! reached its node, which kept the key until its lease ended, although "dropping a round abandons its replies,
//! not its requests" and a release must reach every reachable node (the review of issue #25, finding 7).
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
//!   node that sends nothing for that long with requests outstanding is dropped anyway), then it is given up:
//!   dropped unsent, as it was before this existed, and counted. Per node at most `2 * max_in_flight` replies'
//!   worth wait (the release reserve's size: as much as the node's queue takes for releases); a request past
//!   that is given up at once. The fanout's drop gives up whatever still waits. (The cap was `max_in_flight`
//!   once: folded releases, up to `max_in_flight` replies each, are held whole when they do not fit the room
//!   left, so a queue short of full holds back more than `max_in_flight` replies' worth, and a paused node lost
//!   up to 6 of 24 releases in `lost_release`'s folded case, 1 run in 4.)
//! - **Scripts in full.** Nobody reads a detached request's replies, so no `NOSCRIPT` can be answered by sending
//!   the script again: an `EVALSHA` of a script the manager knows ([`Options::with_scripts`](super::Options::with_scripts)) is
//!   detached as `EVAL` of its body ([`in_full`]), which a `SCRIPT FLUSH` while it waits cannot refuse. Not
//!   covered: a native command refused on a later connection (the node replaced by a server without it), and a
//!   routed release answered `MOVED`/`ASK`: they end with the key's lease.
//! - **In order per node.** A node's detached requests are placed in the order they were detached: the first
//!   that does not fit holds back the node's later ones (a node's requests are all releases; the order only
//!   keeps a large one from being overtaken for ever by small ones).

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use crate::net::cluster::parse_command;
use crate::resp::encode_command;

/// `request` with every `EVALSHA` of a script in `scripts` (`(sha1 in hex, body)`) made an `EVAL` of its body,
/// the other commands as they were; `request` itself if it has none or cannot be read as commands.
///
/// Why: a release round sends a script by `EVALSHA` and, on `NOSCRIPT` (the node's script cache flushed), sends
/// it again in full. Once detached, nobody reads its reply: a `SCRIPT FLUSH` while it waited for room would
/// leave its key for the whole lease (the review of the detached releases, finding 1). The same command with
/// the body runs the same script on the same keys and arguments, with one reply: the invariants above hold.
pub(crate) fn in_full(request: Vec<u8>, scripts: &[(Bytes, Bytes)]) -> Vec<u8> {
    if scripts.is_empty() {
        return request;
    }
    let mut out = Vec::with_capacity(request.len() + 256);
    let mut rewrote = false;
    let mut at = 0;
    while at < request.len() {
        let Some((end, args)) = parse_command(&request, at) else {
            return request; // not commands we can read: as it was, never half rewritten
        };
        let arg = |i: usize| args.get(i).map(|r| &request[r.clone()]);
        let body = arg(0)
            .filter(|name| name.eq_ignore_ascii_case(b"EVALSHA"))
            .and(arg(1))
            .and_then(|sha| {
                scripts
                    .iter()
                    .find(|(known, _)| known.eq_ignore_ascii_case(sha))
            })
            .map(|(_, body)| body);
        match body {
            Some(body) => {
                let mut parts: Vec<&[u8]> = vec![b"EVAL", body];
                parts.extend(args[2..].iter().map(|r| &request[r.clone()]));
                let mut buf = bytes::BytesMut::new();
                encode_command(&parts, &mut buf);
                out.extend_from_slice(&buf);
                rewrote = true;
            }
            None => out.extend_from_slice(&request[at..end]),
        }
        at = end;
    }
    match rewrote {
        true => out,
        false => request,
    }
}

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

/// The detached requests of every node, in the order they were detached.
#[derive(Debug, Default)]
pub(crate) struct Detached {
    waiting: VecDeque<Request>,
    /// Per node: the replies its waiting requests expect (for the cap).
    replies: Vec<usize>,
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

    /// How many wait.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// When the first of them is given up, if any waits.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.waiting.front().map(|r| r.give_up_at)
    }

    /// At `now`: gives up the requests whose bound has passed (`given_up(node, replies)` for each), and offers the
    /// others to `place(node, bytes, replies)` in order, a node's requests after its earlier ones only once those
    /// were queued.
    pub(crate) fn place(
        &mut self,
        now: Instant,
        mut place: impl FnMut(usize, &[u8], usize) -> Placed,
        mut given_up: impl FnMut(usize, usize),
    ) {
        // Nodes whose earlier request still waits in this pass.
        let mut blocked: Vec<usize> = Vec::new();
        let replies = &mut self.replies;
        self.waiting.retain(|r| {
            let gone = if now >= r.give_up_at {
                given_up(r.node, r.replies);
                true
            } else if blocked.contains(&r.node) {
                false
            } else {
                match place(r.node, &r.bytes, r.replies) {
                    Placed::Queued | Placed::Drop => true,
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

    fn command(args: &[&[u8]]) -> Vec<u8> {
        let mut buf = bytes::BytesMut::new();
        encode_command(args, &mut buf);
        buf.to_vec()
    }

    #[test]
    fn a_known_script_by_hash_goes_in_full_and_the_rest_as_it_was() {
        let scripts = vec![
            (
                Bytes::from_static(b"abc123"),
                Bytes::from_static(b"return 1"),
            ),
            (
                Bytes::from_static(b"def456"),
                Bytes::from_static(b"return 2"),
            ),
        ];
        let mut request = command(&[b"EVALSHA", b"ABC123", b"1", b"k", b"v"]);
        request.extend(command(&[b"DELIFEQ", b"k2", b"v2"]));
        request.extend(command(&[b"evalsha", b"def456", b"2", b"a", b"b", b"x"]));
        request.extend(command(&[b"EVALSHA", b"unknown", b"1", b"k", b"v"]));
        let mut want = command(&[b"EVAL", b"return 1", b"1", b"k", b"v"]);
        want.extend(command(&[b"DELIFEQ", b"k2", b"v2"]));
        want.extend(command(&[b"EVAL", b"return 2", b"2", b"a", b"b", b"x"]));
        want.extend(command(&[b"EVALSHA", b"unknown", b"1", b"k", b"v"]));
        assert_eq!(in_full(request, &scripts), want);
    }

    #[test]
    fn what_cannot_be_read_as_commands_goes_as_it_was() {
        let scripts = vec![(Bytes::from_static(b"abc"), Bytes::from_static(b"return 1"))];
        let mut request = command(&[b"EVALSHA", b"abc", b"1", b"k", b"v"]);
        request.extend_from_slice(b"*2\r\n$4\r\nGE");
        assert_eq!(in_full(request.clone(), &scripts), request);
        let plain = command(&[b"DEL", b"k"]);
        assert_eq!(in_full(plain.clone(), &scripts), plain);
        assert_eq!(in_full(Vec::new(), &scripts), Vec::<u8>::new());
        let known = command(&[b"EVALSHA", b"abc", b"0"]);
        assert_eq!(in_full(known, &[]), command(&[b"EVALSHA", b"abc", b"0"]));
    }

    /// Places what `room` (replies each node takes now) lets through; returns `(node, bytes)` queued, in order.
    fn place(d: &mut Detached, now: Instant, room: &mut [usize]) -> (Vec<(usize, Vec<u8>)>, usize) {
        let mut queued = Vec::new();
        let mut given_up = 0;
        d.place(
            now,
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
        assert_eq!(d.earliest(), None);
    }

    #[test]
    fn past_its_bound_a_request_is_given_up_unsent() {
        let t0 = Instant::now();
        let mut d = Detached::default();
        assert!(d.detach(0, b"a".to_vec(), 3, t0 + Duration::from_millis(10), 8));
        assert!(d.detach(0, b"b".to_vec(), 1, t0 + Duration::from_millis(20), 8));
        assert_eq!(d.earliest(), Some(t0 + Duration::from_millis(10)));
        let (queued, given_up) = place(&mut d, t0 + Duration::from_millis(10), &mut [0]);
        assert!(queued.is_empty());
        assert_eq!(given_up, 3);
        assert_eq!(d.earliest(), Some(t0 + Duration::from_millis(20)));
        // "a" no longer holds "b" back.
        let (queued, given_up) = place(&mut d, t0 + Duration::from_millis(15), &mut [1]);
        assert_eq!((queued, given_up), (vec![(0, b"b".to_vec())], 0));
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
}
