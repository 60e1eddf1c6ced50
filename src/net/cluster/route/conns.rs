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
