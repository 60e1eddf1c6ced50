//! The seam between the rounds and the nodes: [`Nodes`] (rounds to a set of nodes), [`NodeRound`] (one such
//! round) and [`Clock`] (now, and the pause between retries).
//!
//! The engine's rounds (acquire, extend, release, pipelined, batched, and each kind's own in `kind/`, run on
//! the engine) and the restart guard reach the nodes and the time only through these traits. The real
//! [`Fanout`] and [`SystemClock`] implement them, and so does the deterministic simulator in the test tree
//! (`tests/sim/`), which runs the same rounds against in-memory nodes on a virtual clock.
//!
//! The engine is generic over them with the real ones as defaults (`Engine<N = Fanout, C = SystemClock>`): the
//! calls are monomorphised and inlined, so a lone caller pays nothing for the seam (no `dyn`, no allocation).
//!
//! # Contract (what the engine relies on, and a simulator must keep)
//!
//! - **Every outcome names the command it answers** ([`CommandId`]: the node, and the reply's place among every
//!   reply the round expected from that node, counted as the requests were sent; see `net/slots.rs`): exactly
//!   one per expected reply, a reply or the reason there is none, in any order. The engine looks each up by its
//!   id ([`NodeRound::next_seq`] before a send says which ids the request's replies get), never by arrival.
//! - **Every outcome is known by the round's deadline**: after it, [`NodeRound::next`] hands out a timeout for
//!   each request still unanswered, and `None` once all have their outcome.
//! - **Dropping a round abandons its replies**, not its requests: what was sent still runs on the node, and so
//!   does a release round's request still held for room on a full node: it is sent once the node has room
//!   (bounded; `net/detached.rs`). So a release round carries only compare-and-deletes of the caller's own value.
//! - **[`Nodes::setup_replies`]** are the replies to the set-up commands the engine gave, in that order, on the
//!   node's current connection ([`Nodes::sessions`] changes with every new connection), each dated when it was
//!   read. The restart guard reads them through typed ids (`restart::SetupIds`), not positions.
//! - **Votes are dated by the clock** right after [`NodeRound::next`] returns them, not when the fanout decoded them
//!   (it dates set-up replies so, not round outcomes), on purpose: the date taken is never earlier than the decode,
//!   and later is the safe side of every check a vote meets. A vote counts only before the lease's validity ends
//!   (`Quorum`: later means fewer votes in time); the restart guard's window is judged at that date, and the lock
//!   then starts to count only after it, when every lease the node knew before its restart has ended; the "up since
//!   the acquisition" rule compares the node's uptime with the same date on both sides. The simulator's `next`
//!   advances its virtual clock to the reply's arrival, so there the two are the same; the real fanout pays no
//!   per-outcome timestamp.

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::net::cluster::{Bracket, Conns, Members, MembersRound};
use crate::net::{CommandId, Fanout, NodeAddr, NodeSet, Reply, Round};
use crate::resp::Value;

/// Where the engine's time comes from: `now` dates rounds and votes, `sleep` is the pause between retries.
pub trait Clock {
    /// The current instant.
    fn now(&self) -> Instant;
    /// The wall clock: the time since the Unix epoch (zero for a clock set before it). Only the clock check
    /// (`clock.rs`) reads it, to compare the nodes' wall clocks with this client's.
    fn wall(&self) -> Duration;
    /// Waits for `pause` (the jittered retry delay).
    fn sleep(&self, pause: Duration) -> impl Future<Output = ()>;
}

/// The real clock: [`Instant::now`] (`CLOCK_MONOTONIC`) and [`std::thread::sleep`].
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> Duration {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }

    /// Under [`block`], [`std::thread::sleep`]; under an executor, a future woken by the crate's timer thread.
    fn sleep(&self, pause: Duration) -> impl Future<Output = ()> {
        let timer = match blocking() {
            true => {
                std::thread::sleep(pause);
                None
            }
            false => Some(crate::timer::sleep(pause)),
        };
        async move {
            if let Some(timer) = timer {
                timer.await;
            }
        }
    }
}

/// N nodes the engine sends rounds to. See the module doc for the contract.
#[allow(clippy::len_without_is_empty)] // never empty: a manager refuses an empty node list
pub trait Nodes {
    /// One round; dropping it abandons the replies still to come.
    type Round<'a>: NodeRound
    where
        Self: 'a;

    /// How many nodes.
    fn len(&self) -> usize;
    /// How many connections: [`len`](Nodes::len), or more with cluster members (one per node of their maps).
    #[cfg(feature = "sim")]
    fn connections(&self) -> usize {
        self.len()
    }
    /// The nodes' addresses, in index order (for reports).
    fn addrs(&self) -> &[NodeAddr];
    /// Opens a round whose outcomes are all known by `deadline`.
    fn round(&self, deadline: Instant) -> Self::Round<'_>;
    /// Opens a round for requests that must reach every reachable node (a release).
    fn release_round(&self, deadline: Instant) -> Self::Round<'_>;
    /// How many connections to `conn` have completed their set-up; changes with every new connection. `conn` is a
    /// connection: `0..len()` are the members' own (a plain node, a cluster member's first master), a cluster
    /// member's other masters follow (see [`NodeRound::source`]).
    fn sessions(&self, conn: usize) -> u64;
    /// The replies to the set-up commands on `conn`'s current connection, in order, each dated when read.
    fn setup_replies(&self, conn: usize) -> Vec<(Value, Instant)>;
    /// When connection `conn` took over what serves `key` on a cluster member, as far as this manager saw: as a
    /// promoted replica (or as a node its map never showed serving), or as the new owner of `key`'s slot (a
    /// migration); with no key, as a promoted replica only. `None` for a plain node. The restart guard treats it
    /// as a restart at that instant for votes on `key` (`restart/mod.rs`, "Failovers in a cluster member").
    fn taken_over(&self, _conn: usize, _key: Option<&[u8]>) -> Option<Instant> {
        None
    }
    /// Whether connection `conn` is a node of a cluster member: its persistence marker proves nothing (a
    /// migration may have moved the marker's slot to it from another master), so after a restart it gets the
    /// window rule (`restart/mod.rs`, "Failovers in a cluster member").
    fn in_cluster(&self, _conn: usize) -> bool {
        false
    }
    /// Whether some member is a Redis Cluster: a script must then keep its keys in one slot (a multi-key
    /// release is sent per key instead).
    fn routed(&self) -> bool {
        false
    }
    /// The connections member `member`'s votes may come on: its own for a plain node; for a cluster member,
    /// every node of its table (for reports: which of them a quarantined grant came from is not kept).
    fn member_conns(&self, member: usize) -> Vec<usize> {
        vec![member]
    }
    /// Whether member `member` has stopped answering: requests outstanding and nothing read from it for at least
    /// `for_at_least` and four times its usual round trip when the sockets were last read ([`Fanout::silent`]).
    /// `false` where that is not known (a cluster member).
    fn silent(&self, _member: usize, _for_at_least: Duration) -> bool {
        false
    }
}

/// One request/reply exchange with some nodes, bounded by a deadline.
pub trait NodeRound {
    /// Sends `request` (encoded commands expecting `replies` replies in all) to the nodes in `nodes`; returns
    /// the nodes it was queued for. Nodes it was not queued for get their outcome from [`next`](Self::next).
    fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet;
    /// Sends `request` to every node.
    fn send_all(&mut self, request: &[u8], replies: usize) -> NodeSet {
        self.send_to(NodeSet::ALL, request, replies)
    }
    /// Sends `request` to node `node` only.
    fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet;
    /// How many outcomes are worth waiting for before the caller is woken.
    fn need(&mut self, outcomes: usize);
    /// Lets the round wait past its deadline, never past `hard`, for nodes that are still answering (see
    /// [`Round::patient_until`]): an outcome may then come at any instant up to `hard`. Only rounds whose length
    /// nothing else relies on are made patient (a plain acquisition, bounded by its lease's validity; a plain
    /// release).
    fn patient_until(&mut self, hard: Instant);
    /// Ends the round by `at` if that is sooner than its deadline (see [`Round::cut_short`]): outcomes not filed
    /// by then time out.
    fn cut_short(&mut self, at: Instant);
    /// The id the next reply expected from `node` gets (its request's other replies take the ids after it).
    fn next_seq(&self, node: usize) -> u32;
    /// The next outcome, with the id of the command it answers; `None` once every request of the round has its
    /// outcome.
    fn next(&mut self) -> impl Future<Output = Option<(CommandId, Reply)>>;
    /// The connection the last outcome [`next`](Self::next) handed out for `node` came from: `node` itself for a
    /// plain node; for a cluster member, the master that answered (the restart guard judges that server).
    fn source(&self, node: usize) -> usize {
        node
    }
    /// Brackets every write to a cluster member's node with `TIME`, in the round below the caller (the clock
    /// check's, `clock.rs`: a routed request's commands go to several nodes, and a redirected one to another);
    /// call before anything is sent. Returns, per node, whether it is so bracketed (its outcomes then come with
    /// [`take_bracket`](Self::take_bracket)); empty by default: plain nodes, bracketed by the caller.
    fn time_writes(&mut self) -> Vec<bool> {
        Vec::new()
    }
    /// The clock readings around the last outcome [`next`](Self::next) handed out for `node`, a node
    /// [`time_writes`](Self::time_writes) bracketed: `None` if it ran in no bracketed write.
    fn take_bracket(&mut self, _node: usize) -> Option<Bracket> {
        None
    }
}

impl Nodes for Fanout {
    type Round<'a> = Round<'a>;

    #[inline]
    fn len(&self) -> usize {
        Fanout::len(self)
    }

    #[inline]
    fn addrs(&self) -> &[NodeAddr] {
        Fanout::addrs(self)
    }

    #[inline]
    fn round(&self, deadline: Instant) -> Round<'_> {
        Fanout::round(self, deadline)
    }

    #[inline]
    fn release_round(&self, deadline: Instant) -> Round<'_> {
        Fanout::release_round(self, deadline)
    }

    #[inline]
    fn sessions(&self, node: usize) -> u64 {
        Fanout::sessions(self, node)
    }

    fn setup_replies(&self, node: usize) -> Vec<(Value, Instant)> {
        Fanout::setup_replies(self, node)
    }

    fn silent(&self, node: usize, for_at_least: Duration) -> bool {
        Fanout::silent(self, node, for_at_least)
    }
}

impl NodeRound for Round<'_> {
    #[inline]
    fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        Round::send_to(self, nodes, request, replies)
    }

    #[inline]
    fn send_all(&mut self, request: &[u8], replies: usize) -> NodeSet {
        Round::send_all(self, request, replies)
    }

    #[inline]
    fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet {
        Round::send(self, node, request, replies)
    }

    #[inline]
    fn need(&mut self, outcomes: usize) {
        Round::need(self, outcomes)
    }

    #[inline]
    fn patient_until(&mut self, hard: Instant) {
        Round::patient_until(self, hard)
    }

    #[inline]
    fn cut_short(&mut self, at: Instant) {
        Round::cut_short(self, at)
    }

    #[inline]
    fn next_seq(&self, node: usize) -> u32 {
        Round::next_seq(self, node)
    }

    /// Under [`block`] (a blocking verb), the real round blocks this thread until the outcome is filed (driving
    /// the poll itself or sleeping), and the future is ready at its first poll; under an executor (an `_async`
    /// verb) it is [`Round::poll_next`]: never blocking, woken by whoever files the outcome.
    #[inline]
    fn next(&mut self) -> impl Future<Output = Option<(CommandId, Reply)>> {
        std::future::poll_fn(move |cx| match blocking() {
            true => Poll::Ready(Round::next(self)),
            false => self.poll_next(cx),
        })
    }
}

impl<F: Conns> Nodes for Members<F> {
    type Round<'a>
        = MembersRound<'a, F>
    where
        F: 'a;

    #[inline]
    fn len(&self) -> usize {
        Members::len(self)
    }

    #[inline]
    fn addrs(&self) -> &[NodeAddr] {
        Members::addrs(self)
    }

    #[cfg(feature = "sim")]
    fn connections(&self) -> usize {
        Members::connections(self)
    }

    #[inline]
    fn round(&self, deadline: Instant) -> MembersRound<'_, F> {
        Members::round(self, deadline)
    }

    #[inline]
    fn release_round(&self, deadline: Instant) -> MembersRound<'_, F> {
        Members::release_round(self, deadline)
    }

    #[inline]
    fn sessions(&self, conn: usize) -> u64 {
        Members::sessions(self, conn)
    }

    fn setup_replies(&self, conn: usize) -> Vec<(Value, Instant)> {
        Members::setup_replies(self, conn)
    }

    fn taken_over(&self, conn: usize, key: Option<&[u8]>) -> Option<Instant> {
        match key {
            Some(key) => Members::taken_over(self, conn, key),
            None => Members::promoted(self, conn),
        }
    }

    fn in_cluster(&self, conn: usize) -> bool {
        Members::in_cluster(self, conn)
    }

    fn member_conns(&self, member: usize) -> Vec<usize> {
        Members::member_conns(self, member)
    }

    fn silent(&self, member: usize, for_at_least: Duration) -> bool {
        Members::silent(self, member, for_at_least)
    }

    #[inline]
    fn routed(&self) -> bool {
        Members::is_routed(self)
    }
}

impl<F: Conns> NodeRound for MembersRound<'_, F> {
    #[inline]
    fn send_to(&mut self, nodes: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        MembersRound::send_to(self, nodes, request, replies)
    }

    #[inline]
    fn send(&mut self, node: usize, request: &[u8], replies: usize) -> NodeSet {
        MembersRound::send(self, node, request, replies)
    }

    #[inline]
    fn need(&mut self, outcomes: usize) {
        MembersRound::need(self, outcomes)
    }

    #[inline]
    fn patient_until(&mut self, hard: Instant) {
        MembersRound::patient_until(self, hard)
    }

    #[inline]
    fn cut_short(&mut self, at: Instant) {
        MembersRound::cut_short(self, at)
    }

    /// As the fanout's round's (above).
    #[inline]
    fn next_seq(&self, node: usize) -> u32 {
        MembersRound::next_seq(self, node)
    }

    #[inline]
    fn next(&mut self) -> impl Future<Output = Option<(CommandId, Reply)>> {
        std::future::poll_fn(move |cx| match blocking() {
            true => Poll::Ready(MembersRound::next(self)),
            false => self.poll_next(cx),
        })
    }

    #[inline]
    fn source(&self, node: usize) -> usize {
        MembersRound::source(self, node)
    }

    fn time_writes(&mut self) -> Vec<bool> {
        MembersRound::time_writes(self)
    }

    fn take_bracket(&mut self, node: usize) -> Option<Bracket> {
        MembersRound::take_bracket(self, node)
    }
}

thread_local! {
    /// Whether this thread runs a verb under [`block`]: the real seam then blocks the thread at each `next()` and
    /// `sleep`, as the blocking API always has; otherwise (a future polled by an executor) it never blocks.
    static BLOCKING: Cell<bool> = const { Cell::new(false) };
}

/// Whether the verb being polled on this thread runs under [`block`].
#[inline]
pub(crate) fn blocking() -> bool {
    BLOCKING.with(Cell::get)
}

/// Runs one of the engine's verbs to its end on this thread, for callers that block (the manager's verbs, the
/// watchdog, the waiting loop).
///
/// The engine's verbs are `async` so that the simulator can run many clients' rounds as tasks on one thread (each
/// `next()` or `sleep` a point where another client may run), and so that the async API runs the very same verbs as
/// futures. Under `block` (a thread-local flag says so) every such point of the real seam blocks inside the call and
/// its future is ready at its first poll, so the verb completes in one poll and this costs no allocation and no
/// hand-off; polled by an executor instead, the same points never block. Were some seam to return a pending future
/// here, this polls again after yielding the thread, so it never spins a core while it waits.
#[inline]
pub(crate) fn block<F: Future>(verb: F) -> F::Output {
    /// Puts the thread's mode back when the verb ends (or unwinds).
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BLOCKING.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BLOCKING.with(|b| b.replace(true)));
    let mut verb = pin!(verb);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = verb.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::net::test_peer::{Peer, block_on, command};
    use crate::net::{NodeError, Options};

    fn bulk(x: &str) -> Value {
        Value::BulkString(bytes::Bytes::from(x.to_owned()))
    }

    /// Every outcome of `round`, by `(node, seq)`, awaited through the seam.
    async fn all<R: NodeRound>(round: &mut R) -> BTreeMap<(usize, u32), Result<Value, NodeError>> {
        let mut out = BTreeMap::new();
        while let Some((id, reply)) = round.next().await {
            out.insert((id.node, id.seq), reply);
        }
        out
    }

    /// The real fanout through the seam: rounds under `block` (a blocking verb) and awaited as a task, ids named
    /// by `next_seq`, a release round, what it tells about its connections, and a plain node's defaults.
    #[test]
    fn the_fanout_runs_rounds_through_the_seam_blocking_and_as_a_task() {
        let peers = [Peer::start(), Peer::start()];
        let addrs: Vec<NodeAddr> = peers.iter().map(Peer::addr).collect();
        let setup = vec![bytes::Bytes::from(command(&[b"ECHO", b"set-up"]))];
        let f = Fanout::new(addrs.clone(), Options::default().with_setup(setup)).expect("fanout");
        assert_eq!((Nodes::len(&f), Nodes::addrs(&f)), (2, &addrs[..]));
        assert!(!blocking());
        let deadline = Instant::now() + Duration::from_secs(5);
        let got = block(async {
            assert!(blocking(), "inside a blocking verb");
            let mut round = Nodes::round(&f, deadline);
            NodeRound::need(&mut round, 3);
            assert_eq!(round.next_seq(1), 0);
            let sent = NodeRound::send_all(&mut round, &command(&[b"ECHO", b"a"]), 1);
            assert!(sent.contains(0) && sent.contains(1));
            NodeRound::send(&mut round, 1, &command(&[b"ECHO", b"b"]), 1);
            let mut zero = NodeSet::EMPTY;
            zero.insert(0);
            NodeRound::send_to(&mut round, zero, &command(&[b"ECHO", b"c"]), 1);
            assert_eq!(
                (
                    NodeRound::next_seq(&round, 0),
                    NodeRound::next_seq(&round, 1)
                ),
                (2, 2)
            );
            all(&mut round).await
        });
        assert!(!blocking(), "put back after the verb");
        let want: BTreeMap<_, _> = [
            ((0, 0), Ok(bulk("a"))),
            ((0, 1), Ok(bulk("c"))),
            ((1, 0), Ok(bulk("a"))),
            ((1, 1), Ok(bulk("b"))),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want);
        // As a task (not under `block`): the round is polled, never blocking.
        let mut round = Nodes::release_round(&f, deadline);
        NodeRound::send(&mut round, 0, &command(&[b"ECHO", b"task"]), 1);
        let got = block_on(all(&mut round));
        assert_eq!(got.into_values().collect::<Vec<_>>(), [Ok(bulk("task"))]);
        drop(round);
        for conn in 0..2 {
            assert_eq!(Nodes::sessions(&f, conn), 1);
            let replies: Vec<Value> = Nodes::setup_replies(&f, conn)
                .into_iter()
                .map(|r| r.0)
                .collect();
            assert_eq!(replies, [bulk("set-up")]);
            // A plain node: no takeover, no cluster, its own connection, a round's outcomes from it.
            assert_eq!(Nodes::taken_over(&f, conn, Some(b"k")), None);
            assert!(!Nodes::in_cluster(&f, conn));
            assert_eq!(Nodes::member_conns(&f, conn), [conn]);
        }
        assert!(!Nodes::routed(&f));
        let mut round = Nodes::round(&f, deadline);
        assert_eq!(NodeRound::source(&round, 1), 1);
        assert!(NodeRound::time_writes(&mut round).is_empty());
        assert!(NodeRound::take_bracket(&mut round, 1).is_none());
    }

    /// Through the seam, the members' connections are each member's own (what its restarts and standing in the
    /// statistics, and a quarantined grant's report, are read from): a plain member's its own alone; a cluster
    /// member's its own first, and never a plain member's.
    #[test]
    fn each_members_connections_through_the_seam_are_its_own() {
        use crate::net::cluster::{MemberAddr, Members, Plan};
        use crate::net::test_peer::nobody;
        let seed = nobody();
        let members = vec![
            MemberAddr::Node(nobody()),
            MemberAddr::Node(nobody()),
            format!("redis+cluster://{}:{}", seed.host(), seed.port())
                .parse()
                .expect("cluster URL"),
        ];
        // The cluster member's map could not be read: it is planned with its seed.
        let plan = Plan::with_maps(members, vec![None, None, Some(None)]);
        let m = Members::new(plan, Options::default()).expect("members");
        assert_eq!(Nodes::member_conns(&m, 0), [0]);
        assert_eq!(Nodes::member_conns(&m, 1), [1]);
        let cluster = Nodes::member_conns(&m, 2);
        assert_eq!(cluster.first(), Some(&2), "{cluster:?}");
        assert!(cluster.iter().all(|&c| c >= 2), "{cluster:?}");
    }

    /// A round through the members' seam (every manager's) is woken once as many outcomes as the engine needs
    /// have come (a 5-node acquisition cannot decide on fewer than 3), not at each: its first outcome, of two
    /// needed, is handed out only once the second has come.
    #[test]
    fn a_round_through_the_members_seam_is_woken_once_it_has_the_outcomes_it_needs() {
        use crate::net::cluster::{MemberAddr, Plan};
        let peers = [Peer::start(), Peer::start(), Peer::start()];
        let members = peers.iter().map(|p| MemberAddr::Node(p.addr())).collect();
        let m = Members::new(Plan::with_maps(members, Vec::new()), Options::default())
            .expect("members");
        // A first task's round that waits starts the fanout's background driver, which then polls for tasks.
        let warm = block_on(async {
            let mut round = Nodes::round(&m, Instant::now() + Duration::from_secs(5));
            NodeRound::send_all(&mut round, &command(&[b"SLEEP", b"20", b"up"]), 1);
            all(&mut round).await
        });
        assert_eq!(warm.len(), 3);
        assert!(warm.values().all(Result::is_ok), "{warm:?}");
        let start = Instant::now();
        let (first, took) = block_on(async {
            let mut round = Nodes::round(&m, start + Duration::from_secs(5));
            NodeRound::need(&mut round, 2);
            NodeRound::send(&mut round, 1, &command(&[b"SLEEP", b"100", b"sooner"]), 1);
            NodeRound::send(&mut round, 2, &command(&[b"SLEEP", b"800", b"later"]), 1);
            let first = NodeRound::next(&mut round)
                .await
                .map(|(id, r)| (id.node, r));
            (first, start.elapsed())
        });
        assert_eq!(first, Some((1, Ok(bulk("sooner")))));
        assert!(
            took >= Duration::from_millis(700),
            "woken for one outcome of the two needed, after {took:?}"
        );
    }

    /// A patient round through the seam waits past its deadline for a node that keeps answering.
    #[test]
    fn a_patient_round_through_the_seam_waits_for_a_node_still_answering() {
        let peer = Peer::start();
        let f = Fanout::new(vec![peer.addr()], Options::default()).expect("fanout");
        let warm = block(async {
            let mut round = Nodes::round(&f, Instant::now() + Duration::from_secs(5));
            NodeRound::send(&mut round, 0, &command(&[b"PING"]), 1);
            all(&mut round).await
        });
        assert!(warm.values().all(Result::is_ok));
        let start = Instant::now();
        let got = block(async {
            let mut round = Nodes::round(&f, start + Duration::from_millis(300));
            NodeRound::patient_until(&mut round, start + Duration::from_secs(3));
            let mut request = command(&[b"ECHO", b"first"]);
            for x in [&b"a"[..], b"b", b"c", b"d"] {
                request.extend(command(&[b"SLEEP", b"100", x]));
            }
            NodeRound::send(&mut round, 0, &request, 5);
            all(&mut round).await
        });
        let values: Vec<_> = got.into_values().collect();
        assert_eq!(
            values,
            [
                Ok(bulk("first")),
                Ok(bulk("a")),
                Ok(bulk("b")),
                Ok(bulk("c")),
                Ok(bulk("d"))
            ],
            "after {:?}",
            start.elapsed()
        );
    }

    /// The real clock: monotonic `now`, the wall clock since the epoch, and `sleep` that waits for its pause,
    /// blocking under `block`, as a timer's future otherwise.
    #[test]
    fn the_system_clock_sleeps_its_pause_blocking_and_as_a_task() {
        let c = SystemClock;
        let t0 = c.now();
        assert!(c.wall() > Duration::from_secs(1_600_000_000));
        block(c.sleep(Duration::from_millis(30)));
        assert!(c.now() >= t0 + Duration::from_millis(30));
        let t1 = Instant::now();
        block_on(c.sleep(Duration::from_millis(30)));
        assert!(t1.elapsed() >= Duration::from_millis(30));
    }
}
