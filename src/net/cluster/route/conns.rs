//! [`Conns`] and [`ConnRound`]: what the members' routing needs of the connections it runs over. The threaded
//! [`Fanout`] is one; the deterministic simulator's machine (`tests/sim/`, feature `sim`) is the other, so the
//! routing the simulator runs ([`Members`](super::Members), [`MembersRound`](super::MembersRound)) is this
//! crate's, not a copy.
//!
//! Besides rounds, routing asks its connections for the time (every instant it notes: a quarantine's start, a
//! redirection's deadline, a replica pause's end) and to read a member's map without holding up a round: the
//! fanout reads it on a short thread of its own over fresh sockets, the simulator after a virtual delay.

use std::task::{Context, Poll};
use std::time::Instant;

use crate::net::cluster::SlotMap;
use crate::net::{
    CommandId, Fanout, NodeAddr, NodeCounts, NodeSet, Occupier, Options, Reply, Round, TlsConfig,
};
use crate::resp::Value;

/// What a map read hands its caller: the map with the host it was read from (`None`: none could be read), and
/// the clock to date what it finds by.
pub type MapDone = Box<dyn FnOnce(Option<(SlotMap, String)>, &dyn Fn() -> Instant) + Send>;

/// A member's vacant connections, given to nodes a map refresh finds (see `plan.rs`): [`Occupier`] for the
/// fanout.
pub trait Vacancies: Send {
    /// Gives vacant connection `conn` the address `addr`; `false` if refused.
    fn occupy(&self, conn: usize, addr: NodeAddr) -> bool;
    /// Connection `conn`'s address, if known.
    fn addr(&self, conn: usize) -> Option<NodeAddr>;
}

impl Vacancies for Occupier {
    fn occupy(&self, conn: usize, addr: NodeAddr) -> bool {
        Occupier::occupy(self, conn, addr)
    }

    fn addr(&self, conn: usize) -> Option<NodeAddr> {
        Occupier::addr(self, conn)
    }
}

/// The connections a manager's members run over (see the module doc).
pub trait Conns: std::fmt::Debug {
    /// One round over the connections.
    type Round<'a>: ConnRound
    where
        Self: 'a;

    /// A round whose outcomes are all known by `deadline` ([`Fanout::round`]).
    fn round(&self, deadline: Instant) -> Self::Round<'_>;
    /// A release round ([`Fanout::release_round`]).
    fn release_round(&self, deadline: Instant) -> Self::Round<'_>;
    /// The options in force.
    fn options(&self) -> &Options;
    /// What connection `conn` did so far.
    fn stats(&self, conn: usize) -> NodeCounts;
    /// Connection `conn`'s completed set-ups ([`Fanout::sessions`]).
    fn sessions(&self, conn: usize) -> u64;
    /// The session a request queued on `conn` now would be answered in ([`Fanout::next_session`]).
    fn next_session(&self, conn: usize) -> u64;
    /// Connection `conn`'s set-up replies ([`Fanout::setup_replies`]).
    fn setup_replies(&self, conn: usize) -> Vec<(Value, Instant)>;
    /// Whether connection `conn` has stopped answering ([`Fanout::silent`]); `false` where that is not known.
    fn silent(&self, _conn: usize, _for_at_least: std::time::Duration) -> bool {
        false
    }
    /// The current instant.
    fn now(&self) -> Instant;
    /// Reads a map (`CLUSTER SHARDS`, else `CLUSTER SLOTS`) from the first of `nodes` that gives one, waiting
    /// up to `wait`, without holding up any round, and calls `done` with it. `Err`: it could not start, and
    /// `done` is never called.
    #[allow(clippy::result_unit_err)] // nothing to say but that it did not start
    fn read_map(
        &self,
        nodes: Vec<NodeAddr>,
        wait: std::time::Duration,
        tls: &TlsConfig,
        done: MapDone,
    ) -> Result<(), ()>;
    /// The vacant connections, for a map refresh to occupy.
    fn vacancies(&self) -> Box<dyn Vacancies>;
}

/// One round over [`Conns`]: [`Round`] for the fanout.
pub trait ConnRound: std::fmt::Debug {
    /// The instant by which every outcome is known.
    fn deadline(&self) -> Instant;
    /// See [`Round::patient_until`].
    fn patient_until(&mut self, hard: Instant);
    /// See [`Round::cut_short`].
    fn cut_short(&mut self, at: Instant);
    /// See [`Round::send`].
    fn send(&mut self, conn: usize, request: &[u8], replies: usize) -> NodeSet;
    /// See [`Round::send_to`].
    fn send_to(&mut self, conns: NodeSet, request: &[u8], replies: usize) -> NodeSet;
    /// See [`Round::send_each`].
    fn send_each(&mut self, requests: &[(usize, &[u8], usize)]) -> NodeSet;
    /// See [`Round::need`].
    fn need(&mut self, outcomes: usize);
    /// See [`Round::next_seq`].
    fn next_seq(&self, conn: usize) -> u32;
    /// See [`Round::next`] (blocking).
    fn next(&mut self) -> Option<(CommandId, Reply)>;
    /// See [`Round::poll_next`] (never blocking).
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(CommandId, Reply)>>;
}

impl Conns for Fanout {
    type Round<'a> = Round<'a>;

    #[inline]
    fn round(&self, deadline: Instant) -> Round<'_> {
        Fanout::round(self, deadline)
    }

    #[inline]
    fn release_round(&self, deadline: Instant) -> Round<'_> {
        Fanout::release_round(self, deadline)
    }

    fn options(&self) -> &Options {
        Fanout::options(self)
    }

    fn stats(&self, conn: usize) -> NodeCounts {
        Fanout::stats(self, conn)
    }

    fn silent(&self, conn: usize, for_at_least: std::time::Duration) -> bool {
        Fanout::silent(self, conn, for_at_least)
    }

    #[inline]
    fn sessions(&self, conn: usize) -> u64 {
        Fanout::sessions(self, conn)
    }

    fn next_session(&self, conn: usize) -> u64 {
        Fanout::next_session(self, conn)
    }

    fn setup_replies(&self, conn: usize) -> Vec<(Value, Instant)> {
        Fanout::setup_replies(self, conn)
    }

    #[inline]
    fn now(&self) -> Instant {
        Instant::now()
    }

    /// On a short thread of its own, over a fanout of its own (`plan::read_map_from`).
    fn read_map(
        &self,
        nodes: Vec<NodeAddr>,
        wait: std::time::Duration,
        tls: &TlsConfig,
        done: MapDone,
    ) -> Result<(), ()> {
        let tls = tls.clone();
        std::thread::Builder::new()
            .name("muxlock-cluster-map".into())
            .spawn(move || {
                let map = super::plan::read_map_from(nodes, wait, &tls).ok().flatten();
                done(map, &Instant::now);
            })
            .map(drop)
            .map_err(drop)
    }

    fn vacancies(&self) -> Box<dyn Vacancies> {
        Box::new(self.occupier())
    }
}

impl ConnRound for Round<'_> {
    #[inline]
    fn deadline(&self) -> Instant {
        Round::deadline(self)
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
    fn send(&mut self, conn: usize, request: &[u8], replies: usize) -> NodeSet {
        Round::send(self, conn, request, replies)
    }

    #[inline]
    fn send_to(&mut self, conns: NodeSet, request: &[u8], replies: usize) -> NodeSet {
        Round::send_to(self, conns, request, replies)
    }

    #[inline]
    fn send_each(&mut self, requests: &[(usize, &[u8], usize)]) -> NodeSet {
        Round::send_each(self, requests)
    }

    #[inline]
    fn need(&mut self, outcomes: usize) {
        Round::need(self, outcomes)
    }

    #[inline]
    fn next_seq(&self, conn: usize) -> u32 {
        Round::next_seq(self, conn)
    }

    #[inline]
    fn next(&mut self) -> Option<(CommandId, Reply)> {
        Round::next(self)
    }

    #[inline]
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(CommandId, Reply)>> {
        Round::poll_next(self, cx)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::mpsc;
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::net::NodeError;
    use crate::net::cluster::{MemberAddr, Members, Plan};
    use crate::net::test_peer::{Peer, block_on, command, nobody};

    fn bulk(x: &str) -> Value {
        Value::BulkString(Bytes::from(x.to_owned()))
    }

    /// Members of plain nodes are the fanout's own rounds through [`Conns`] and [`ConnRound`]: ids, blocking and
    /// polled outcomes, a release round, what the connections tell.
    #[test]
    fn plain_members_run_the_fanouts_rounds_through_the_conns() {
        let peers = [Peer::start(), Peer::start()];
        let addrs: Vec<NodeAddr> = peers.iter().map(Peer::addr).collect();
        let plan = Plan::with_maps(
            addrs.iter().cloned().map(MemberAddr::Node).collect(),
            Vec::new(),
        );
        let setup = vec![Bytes::from(command(&[b"ECHO", b"set-up"]))];
        let members = Members::new(plan, Options::default().with_setup(setup)).expect("members");
        assert!(!members.is_routed());
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut round = members.round(deadline);
        assert_eq!(round.deadline(), deadline);
        round.patient_until(deadline + Duration::from_secs(1));
        round.need(2);
        assert_eq!(round.next_seq(0), 0);
        let sent = round.send_to(NodeSet::ALL, &command(&[b"ECHO", b"a"]), 1);
        assert!(sent.contains(0) && sent.contains(1));
        round.send(1, &command(&[b"ECHO", b"b"]), 1);
        assert_eq!((round.next_seq(0), round.next_seq(1)), (1, 2));
        let mut got = BTreeMap::new();
        while let Some((id, reply)) = round.next() {
            got.insert((id.node, id.seq), reply);
        }
        let want: BTreeMap<(usize, u32), Result<Value, NodeError>> = [
            ((0, 0), Ok(bulk("a"))),
            ((1, 0), Ok(bulk("a"))),
            ((1, 1), Ok(bulk("b"))),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want);
        drop(round);
        let mut release = members.release_round(deadline);
        release.send(0, &command(&[b"ECHO", b"r"]), 1);
        let polled = block_on(std::future::poll_fn(|cx| release.poll_next(cx)));
        assert_eq!(polled.map(|(id, r)| (id.node, r)), Some((0, Ok(bulk("r")))));
        drop(release);
        // The connections, through the trait.
        let f = members.fanout();
        assert_eq!(Conns::options(f).setup().len(), 1);
        for conn in 0..2 {
            assert_eq!(
                (Conns::sessions(f, conn), Conns::next_session(f, conn)),
                (1, 1)
            );
            let replies: Vec<Value> = Conns::setup_replies(f, conn)
                .into_iter()
                .map(|r| r.0)
                .collect();
            assert_eq!(replies, [bulk("set-up")]);
        }
        assert_eq!(
            (Conns::stats(f, 0).replies, Conns::stats(f, 1).replies),
            (3, 3)
        );
        assert_eq!(members.stats(1).replies, 3);
        let t = Instant::now();
        assert!(Conns::now(f) >= t);
        assert_eq!(Conns::vacancies(f).addr(1), Some(addrs[1].clone()));
        // A fanout round through the trait, with several requests in one call.
        let mut round = Conns::round(f, deadline);
        assert_eq!(ConnRound::deadline(&round), deadline);
        ConnRound::need(&mut round, 2);
        let (x, y) = (command(&[b"ECHO", b"x"]), command(&[b"ECHO", b"y"]));
        let sent = ConnRound::send_each(&mut round, &[(0, &x, 1), (1, &y, 1)]);
        assert!(sent.contains(0) && sent.contains(1));
        assert_eq!(ConnRound::next_seq(&round, 0), 1);
        let mut got = BTreeMap::new();
        while let Some((id, reply)) = ConnRound::next(&mut round) {
            got.insert(id.node, reply);
        }
        assert_eq!(
            got.into_values().collect::<Vec<_>>(),
            [Ok(bulk("x")), Ok(bulk("y"))]
        );
    }

    /// A map is read on a thread of its own from the first node that gives one (the scripted peer answers
    /// `CLUSTER SLOTS` with a map of itself), with that node's host; from nodes nobody listens on, none.
    #[test]
    fn a_map_is_read_on_a_thread_of_its_own_from_a_node_that_gives_one() {
        let peer = Peer::start();
        let f = Fanout::new(vec![peer.addr()], Options::default()).expect("fanout");
        let read = |nodes: Vec<NodeAddr>| {
            let (tx, rx) = mpsc::channel();
            let done: MapDone = Box::new(move |map, now| {
                let _ = tx.send((map.map(|(m, host)| (m.shards().len(), host)), now()));
            });
            let start = Instant::now();
            let wait = Duration::from_millis(500);
            assert_eq!(
                Conns::read_map(&f, nodes, wait, &TlsConfig::default(), done),
                Ok(())
            );
            let (map, at) = rx
                .recv_timeout(Duration::from_secs(5))
                .expect("done called");
            assert!(at >= start);
            map
        };
        assert_eq!(
            read(vec![nobody(), peer.addr()]),
            Some((1, "127.0.0.1".to_owned()))
        );
        assert_eq!(read(vec![nobody()]), None);
    }
}
