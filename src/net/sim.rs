//! [`SimFanout`]: the fanout's machine (`net/machine/`) for one simulated client, driven by the deterministic
//! simulator (`tests/sim/`, feature `sim`) instead of `mio`. The simulator is the wire: it takes the connects and the bytes
//! the machine gives out ([`SimFanout::take_io`]), carries them to its in-memory nodes on a virtual clock, and
//! hands back what happened: a connect completed or refused, bytes read, a connection reset. Everything between
//! a round's request and its outcome (ids, queues, room, holds, detaches, patience, hung connections, set-up
//! commands and reconnects, filing by id) is the real machine's, the code the threaded fanout runs.
//!
//! A round is driven as the threaded fanout's [`Round::next`](super::Round::next) drives it, without threads:
//! [`SimFanout::poll`] retries held requests, hands out an outcome filed, files the timeouts due once a read at or
//! after the deadline happened ([`SimFanout::turn`]), or says until when to wait.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::addr::NodeAddr;
use super::error::NodeError;
use super::inbound::{Inbound, Item};
use super::machine::{Link, Machine, RoundState, Write};
use super::node_set::NodeSet;
use super::options::Options;
use super::slots::{CommandId, Reply};
use super::state::Priority;
use super::stats::NodeCounts;
use crate::resp::Value;
use crate::time::later;

/// How soon a round holding requests for room looks again (the threaded fanout's pace).
const HELD_RETRY: Duration = Duration::from_millis(1);

/// One simulated node's link: what the machine asked of it since the simulator last looked.
#[derive(Debug)]
pub struct SimLink {
    addr: NodeAddr,
    /// The current connection's generation, from its dial until it is closed.
    open: Option<u32>,
    /// Dials asked for and not yet taken by the simulator.
    dials: Vec<u32>,
}

impl Link for SimLink {
    type Handle = ();

    fn addr(&self) -> &NodeAddr {
        &self.addr
    }

    fn is_vacant(&self) -> bool {
        false
    }

    fn dial(&mut self, generation: u32) -> Result<(), NodeError> {
        self.open = Some(generation);
        self.dials.push(generation);
        Ok(())
    }

    fn close(&mut self) {
        self.open = None;
    }

    fn handle(&self) -> Option<()> {
        self.open.map(|_| ())
    }
}

/// What the machine gives the wire.
#[derive(Debug)]
pub enum Io {
    /// Open connection `generation` to `node`: answer with [`SimFanout::connected`] or
    /// [`SimFanout::connect_failed`].
    Dial {
        /// The node.
        node: usize,
        /// The connection's name.
        generation: u32,
    },
    /// Carry `bytes` on connection `generation` to `node`, after what was written before on it.
    Write {
        /// The node.
        node: usize,
        /// The connection's name.
        generation: u32,
        /// Encoded commands, whole.
        bytes: Bytes,
    },
}

/// One round of a [`SimFanout`].
#[derive(Debug)]
pub struct SimRound {
    state: RoundState,
}

impl SimRound {
    /// The instant by which every outcome is known (moved by a patient round).
    pub fn deadline(&self) -> Instant {
        self.state.deadline
    }
}

/// What [`SimFanout::poll`] found for a round.
#[derive(Debug)]
pub enum Step {
    /// An outcome, with the id of the command it answers.
    Outcome(CommandId, Reply),
    /// Every request of the round has its outcome.
    Done,
    /// Nothing yet: look again when something is read, or at this instant.
    Wait(Instant),
}

/// One client's fanout, sans-IO: see the module docs.
pub struct SimFanout {
    m: Machine<SimLink>,
    /// Per node: the generation its read buffers follow, and the bytes read and not yet decoded.
    inbound: Vec<(u32, Inbound)>,
    io: Vec<Io>,
}

impl std::fmt::Debug for SimFanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimFanout")
            .field("nodes", &self.m.conns.len())
            .finish_non_exhaustive()
    }
}

impl SimFanout {
    /// A client's fanout to `addrs` with `opts` (its set-up commands, room, timeouts), at `now`. Nothing is dialled
    /// until a round needs a node.
    pub fn new(addrs: &[NodeAddr], opts: Options, now: Instant) -> SimFanout {
        let links = addrs
            .iter()
            .map(|a| SimLink {
                addr: a.clone(),
                open: None,
                dials: Vec::new(),
            })
            .collect();
        let inbound = addrs.iter().map(|_| (0, Inbound::new(&opts))).collect();
        SimFanout {
            m: Machine::new(links, opts, now),
            inbound,
            io: Vec::new(),
        }
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.m.opts
    }

    /// Opens a round (`release`: a release round, whose requests wait for room and are detached when it ends).
    pub fn round(&mut self, deadline: Instant, release: bool) -> SimRound {
        let priority = match release {
            true => Priority::Release,
            false => Priority::Normal,
        };
        SimRound {
            state: RoundState::open(&mut self.m, deadline, priority),
        }
    }

    /// Sends `request` (`replies` replies in all) to the nodes in `nodes`, as
    /// [`Round::send_to`](super::Round::send_to) does. Returns the nodes it was queued (or held) for.
    pub fn send(
        &mut self,
        r: &mut SimRound,
        nodes: NodeSet,
        (request, replies): (&[u8], usize),
        now: Instant,
    ) -> NodeSet {
        let (mut writes, mut wake) = (Vec::new(), Vec::new());
        let mut full = Vec::new();
        let items = (0..self.m.conns.len())
            .filter(|&n| nodes.contains(n))
            .map(|n| (n, request, replies));
        let out = (&mut writes, &mut wake);
        let mut sent = r.state.offer_each(&mut self.m, items, now, out, &mut full);
        if !full.is_empty() {
            // Everything delivered is read already: nothing to read before the second offer.
            let out = (&mut writes, &mut wake);
            sent = sent.union(r.state.offer_again(&mut self.m, full, now, out));
        }
        self.flush(writes, now);
        sent
    }

    /// Sends several requests at once, each `(node, request, replies)`, in this order, as
    /// [`Round::send_each`](super::Round::send_each) does. Returns the nodes at least one was queued (or held) for.
    pub fn send_each(
        &mut self,
        r: &mut SimRound,
        requests: &[(usize, &[u8], usize)],
        now: Instant,
    ) -> NodeSet {
        let (mut writes, mut wake) = (Vec::new(), Vec::new());
        let mut full = Vec::new();
        let items = requests.iter().copied();
        let out = (&mut writes, &mut wake);
        let mut sent = r.state.offer_each(&mut self.m, items, now, out, &mut full);
        if !full.is_empty() {
            let out = (&mut writes, &mut wake);
            sent = sent.union(r.state.offer_again(&mut self.m, full, now, out));
        }
        self.flush(writes, now);
        sent
    }

    /// The session a request queued on `node` now would be answered in (see
    /// [`Fanout::next_session`](super::Fanout::next_session)).
    pub fn next_session(&self, node: usize) -> u64 {
        let set_up = self.m.conns.get(node).is_some_and(|c| c.state.is_set_up());
        self.sessions(node) + u64::from(!set_up)
    }

    /// The id the next reply expected from `node` gets in round `r`.
    pub fn next_seq(&mut self, r: &SimRound, node: usize) -> u32 {
        self.m.slots.next_seq(r.state.slot, node)
    }

    /// Makes `r` patient until `hard` (see [`Round::patient_until`](super::Round::patient_until)).
    pub fn patient_until(&mut self, r: &mut SimRound, hard: Instant, now: Instant) {
        r.state.patient_until(hard, now);
    }

    /// Ends `r` by `at` if sooner than its deadline (see [`Round::cut_short`](super::Round::cut_short)).
    pub fn cut_short(&mut self, r: &mut SimRound, at: Instant) {
        r.state.cut_short(&mut self.m, at);
    }

    /// The next step of round `r` at `now` (see the module docs).
    pub fn poll(&mut self, r: &mut SimRound, now: Instant) -> Step {
        loop {
            if r.state.holds() {
                let (mut writes, mut wake) = (Vec::new(), Vec::new());
                r.state.retry_held(&mut self.m, now, &mut writes, &mut wake);
                self.flush(writes, now);
            }
            if let Some((id, reply)) = self.m.slots.take(r.state.slot) {
                return Step::Outcome(id, reply);
            }
            if self.m.slots.settled(r.state.slot) {
                return Step::Done;
            }
            // Timeouts come last: judged after a read at or after the deadline (everything due is read by now).
            if now >= r.state.deadline && self.m.last_read.is_none_or(|t| t < now) {
                self.turn(now);
                continue;
            }
            if r.state.time_out_due(&mut self.m) {
                continue;
            }
            return Step::Wait(match r.state.holds() {
                true => later(now, HELD_RETRY).min(r.state.deadline.max(now)),
                false => r.state.deadline,
            });
        }
    }

    /// Closes round `r`: its outcomes still to come are dropped when read; its held requests are detached.
    pub fn close(&mut self, mut r: SimRound, now: Instant) {
        drop(r.state.close(&mut self.m, now));
    }

    /// What the wire must do: dials and writes since the last call, in the order they were given.
    pub fn take_io(&mut self) -> Vec<Io> {
        std::mem::take(&mut self.io)
    }

    /// The connect of `node`'s connection `generation` completed at `now`: its set-up goes out.
    pub fn connected(&mut self, node: usize, generation: u32, now: Instant) {
        self.m.connected(node, generation, false, now);
        self.after(now);
    }

    /// The connect of `node`'s connection `generation` failed with `error`.
    pub fn connect_failed(&mut self, node: usize, generation: u32, error: NodeError, now: Instant) {
        let mut wake = Vec::new();
        self.m
            .connect_failed(node, generation, error, now, &mut wake);
        self.after(now);
    }

    /// `bytes` arrived on `node`'s connection `generation` at `now` (a whole reply, part of one, or several).
    pub fn read(&mut self, node: usize, generation: u32, bytes: &[u8], now: Instant) {
        let current = self.m.conns.get(node).map(|c| c.state.generation) == Some(generation);
        let Some((following, inbound)) = self.inbound.get_mut(node) else {
            return;
        };
        if !current {
            return; // bytes of a connection since dropped
        }
        if *following != generation {
            inbound.reset();
            *following = generation;
        }
        inbound.buffer().extend_from_slice(bytes);
        let mut items = Vec::new();
        if let Err(e) = inbound.decode(&self.m.opts, &mut items) {
            items.push(Item::Failed(e));
        }
        let mut wake = Vec::new();
        self.m.progress(node, generation, now);
        for item in items {
            self.m.read((node, generation), item, now, &mut wake);
        }
        self.after(now);
    }

    /// `node`'s connection `generation` was reset at `now` (by the peer, or the network): every request on it
    /// fails with [`NodeError::Closed`].
    pub fn reset(&mut self, node: usize, generation: u32, now: Instant) {
        let mut wake = Vec::new();
        self.m.read(
            (node, generation),
            Item::Failed(NodeError::Closed),
            now,
            &mut wake,
        );
        self.after(now);
    }

    /// A turn at `now` with nothing new read: hung connections and slow connects are dropped, detached releases
    /// placed where there is room, and the bytes waiting written.
    pub fn turn(&mut self, now: Instant) {
        self.after(now);
    }

    /// When this client's fanout must be looked at again though nothing is read ([`turn`](SimFanout::turn)):
    /// detached releases wait, or bytes or their replies are still to go; `None` if nothing waits.
    pub fn due(&mut self, now: Instant) -> Option<Instant> {
        self.m.detached_due(now)
    }

    /// How many connections to `node` completed their set-up.
    pub fn sessions(&self, node: usize) -> u64 {
        self.m.conns.get(node).map_or(0, |c| {
            c.state.sessions.load(std::sync::atomic::Ordering::Acquire)
        })
    }

    /// Replies to the set-up commands on `node`'s current connection, each with the instant it was read.
    pub fn setup_replies(&self, node: usize) -> Vec<(Value, Instant)> {
        self.m
            .conns
            .get(node)
            .map(|c| c.state.setup_replies.clone())
            .unwrap_or_default()
    }

    /// Whether `node` has stopped answering (see [`Fanout::silent`](crate::net::Fanout::silent)).
    pub fn silent(&self, node: usize, for_at_least: Duration) -> bool {
        self.m.silent(node, for_at_least)
    }

    /// How many outcomes were filed so far (replies, refusals, timeouts), for any round: whether its rounds
    /// may have something to take.
    pub fn filed(&self) -> u64 {
        self.m.slots.filed()
    }

    /// How many replies read so far were late (their round had ended, or had timed their node out): dropped.
    pub fn late(&self) -> u64 {
        self.m.slots.late()
    }

    /// What `node`'s connections did so far (dials, drops, refusals, releases detached and given up).
    pub fn counts(&self, node: usize) -> NodeCounts {
        self.m
            .conns
            .get(node)
            .map_or_else(NodeCounts::default, |c| c.state.stats.snapshot())
    }

    /// Requests sent to `node` whose replies have not been read (including those nobody waits for any more).
    pub fn in_flight(&self, node: usize) -> usize {
        self.m.conns.get(node).map_or(0, |c| c.state.in_flight())
    }

    /// The generation of `node`'s current connection (it changes when one is dialled and when one is dropped):
    /// the wire's connection is still the client's while they agree.
    pub fn generation(&self, node: usize) -> Option<u32> {
        self.m.conns.get(node).map(|c| c.state.generation)
    }

    /// Why `node`'s last connection was dropped (or its dial failed), if it was.
    pub fn last_error(&self, node: usize) -> Option<NodeError> {
        self.m.conns.get(node).map(|c| c.state.last_error().clone())
    }

    /// When the first release detached and still waiting for room is to be given up, if one waits: none waits
    /// past it (see "Bounded" in `net/detached.rs`).
    pub fn detached_bound(&self) -> Option<Instant> {
        self.m.detached.earliest(|node| self.m.alive_until(node))
    }

    /// After something was read (or nothing, at a turn): the machine's checks, then the dials and writes due.
    fn after(&mut self, now: Instant) {
        let mut wake = Vec::new();
        self.m.after_read(now, true, &mut wake);
        let mut writes = Vec::new();
        self.m.take_writes(&mut writes);
        self.flush(writes, now);
    }

    /// Hands the dials asked for and `writes` to the wire: every write is taken whole (a socket that never fills),
    /// and whatever was queued meanwhile goes after it.
    fn flush(&mut self, mut writes: Vec<Write<()>>, now: Instant) {
        for (node, conn) in self.m.conns.iter_mut().enumerate() {
            for generation in conn.link.dials.drain(..) {
                self.io.push(Io::Dial { node, generation });
            }
        }
        let mut wake = Vec::new();
        while let Some(mut w) = writes.pop() {
            let bytes = std::mem::take(&mut w.bytes).freeze();
            let (node, generation) = (w.node, w.generation);
            self.io.push(Io::Write {
                node,
                generation,
                bytes,
            });
            writes.extend(self.m.written(w, (Ok(true), 1), now, &mut wake));
        }
    }
}
