//! [`Machine`]: the fanout's state machine, sans-IO. It owns every node's connection state ([`NodeState`]: the
//! link's phase, the set-up, the FIFO of waiters, the bytes to write), the rounds' mailboxes ([`Slots`]), the
//! releases detached from their rounds ([`Detached`]), and the rules that join them: offering a round's request to
//! a node (queued, refused, held for room), holding and retrying, detaching, making way for detached releases,
//! patience and timeouts, filing what was read, dropping hung connections. Time comes in as `now`; bytes go out as
//! [`Write`]s and come back in as decoded replies; a connection is opened and closed through its [`Link`], the one
//! piece of a node that touches the outside world.
//!
//! Two drivers run it: the threaded fanout on `mio` sockets (`fanout/`: its lock guards one `Machine`, its
//! threads take turns at the poll), and the deterministic simulator in the test tree (`tests/sim/`, feature `sim`),
//! whose wire carries the same bytes to in-memory nodes on a virtual clock. Everything a round's outcome depends
//! on, below the caller's verbs, is here and runs in both.
//!
//! # Outcomes by identity
//!
//! Every request gets its ids ([`CommandId`](super::CommandId)) from the round when it is offered, whatever becomes
//! of it: queued (its waiters in the connection's FIFO name the ids), held (the held request keeps them), refused
//! (its outcome is filed under them at once), detached (its round's outcome for the node is filed, and the request
//! goes on with no id: its replies are read and dropped). A reply read is filed under the id at the head of its
//! connection's FIFO; [`Slots::file`] checks that the id is the oldest the round awaits on a wire from that node,
//! and a disagreement drops the connection instead of counting a reply for another command.
//!
//! # Order per node
//!
//! A node's requests go on its wire in the order they were offered, across rounds: a round's held request holds
//! back the same round's later requests to that node ([`RoundState::offer`]), and a request offered to a node with
//! detached releases waiting goes behind them ([`Machine::make_way`]), on a connecting connection too.

mod detach;
mod round;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::addr::NodeAddr;
use super::detached::Detached;
use super::error::NodeError;
use super::inbound::Item;
use super::options::Options;
use super::slots::{Slots, Wake};
use super::state::{Filing, NodeState};
pub(crate) use round::RoundState;

/// How long a connection must have been idle before a request asks whether its peer closed it meanwhile: a
/// caller that runs rounds back to back pays nothing; one after a pause pays one non-blocking system call per
/// node (servers close idle clients after whole seconds).
const IDLE_PROBE: Duration = Duration::from_millis(1);

/// The outside world of one node's connection: what opens and closes it. The bytes themselves go through
/// [`Write`]s and come back as decoded replies, handed to the machine by its driver.
pub(crate) trait Link {
    /// What a write needs to reach the current connection (the real transport; nothing in the simulator).
    type Handle;

    /// The address the connection dials (a vacant one's placeholder).
    fn addr(&self) -> &NodeAddr;
    /// Whether the connection is kept for a node not known yet: it is never dialled.
    fn is_vacant(&self) -> bool;
    /// Opens a new connection, named `generation` (its events and bytes carry it). `Err`: it could not be
    /// started; the node's vote is that error.
    fn dial(&mut self, generation: u32) -> Result<(), NodeError>;
    /// Closes the current connection, if any.
    fn close(&mut self);
    /// Whether the peer has closed the current connection (its end of stream or a reset waits unread): asked,
    /// without blocking, of a connection idle for a while before a request is queued on it.
    fn peer_closed(&self) -> bool {
        false
    }
    /// A connect failed or timed out: the name may now resolve elsewhere.
    fn connect_failed(&mut self) {}
    /// The current connection's handle, if it has one.
    fn handle(&self) -> Option<Self::Handle>;
}

/// One node: its protocol state and its link.
pub(crate) struct Conn<L> {
    pub(crate) state: NodeState,
    pub(crate) link: L,
}

/// Bytes for a node's current connection, taken with its writer role: the driver writes them and hands the
/// outcome back with [`Machine::written`].
pub(crate) struct Write<H> {
    pub(crate) node: usize,
    pub(crate) generation: u32,
    pub(crate) handle: H,
    pub(crate) bytes: BytesMut,
}

/// What became of a [`Write`]: `Ok(true)` if every byte went, `Ok(false)` if the socket filled up first (the
/// write's bytes are what was left), `Err` if the connection failed; and how many system calls took bytes.
pub(crate) type Written = (Result<bool, NodeError>, u32);

/// The fanout's state machine: see the module docs.
pub(crate) struct Machine<L> {
    pub(crate) conns: Vec<Conn<L>>,
    pub(crate) slots: Slots,
    pub(crate) detached: Detached,
    /// When the last completed turn read the sockets: timeouts are judged only after one (see `fanout`,
    /// "Timeouts come last").
    pub(crate) last_read: Option<Instant>,
    pub(crate) opts: Options,
}

impl<L: Link> Machine<L> {
    /// A machine over `links` (one per node, in index order).
    pub(crate) fn new(links: Vec<L>, opts: Options, now: Instant) -> Machine<L> {
        let conns = links
            .into_iter()
            .enumerate()
            .map(|(i, link)| Conn {
                state: NodeState::new(i, &opts, now),
                link,
            })
            .collect();
        Machine {
            conns,
            slots: Slots::default(),
            detached: Detached::default(),
            last_read: None,
            opts,
        }
    }

    /// Dials every node that is not vacant (a failure is remembered by its connection, and reported by the first
    /// round).
    pub(crate) fn dial_all(&mut self, now: Instant, wake: &mut Vec<Wake>) {
        for node in 0..self.conns.len() {
            if !self.conns[node].link.is_vacant() {
                let _ = self.ensure(node, now, wake);
            }
        }
    }

    /// Makes `node`'s connection usable for a request: dials if it is down and its backoff has passed. `Err` is
    /// the vote of a node that cannot take requests now. (Whether a connection is hung or its connect too slow is
    /// decided only right after a turn read the sockets: [`after_read`](Machine::after_read).)
    pub(crate) fn ensure(
        &mut self,
        node: usize,
        now: Instant,
        wake: &mut Vec<Wake>,
    ) -> Result<(), NodeError> {
        let Some(conn) = self.conns.get_mut(node) else {
            return Err(NodeError::Refused);
        };
        if conn.link.is_vacant() {
            return Err(NodeError::Cluster(
                "a connection kept for a node not known yet".into(),
            ));
        }
        // A connection idle for a while may have been closed by its server meanwhile (`timeout`, a restart) with
        // nobody reading: a request written on it would be lost unread, so it is dialled again first (the FIN came
        // before these bytes: the server never read them).
        if conn.state.idle_for(now, IDLE_PROBE) && conn.link.peer_closed() {
            let mut out = Filing {
                slots: &mut self.slots,
                wake,
            };
            conn.state
                .fail(NodeError::Closed, &self.opts, now, &mut out);
            close(conn);
        }
        if !conn.state.needs_dial(now)? {
            return Ok(());
        }
        match conn.link.dial(conn.state.next_generation()) {
            Ok(()) => {
                conn.state.stats.connect();
                conn.state.dialled(conn.link.addr(), &self.opts, now);
                Ok(())
            }
            Err(e) => {
                self.fail(node, e.clone(), now, wake);
                if let Some(conn) = self.conns.get_mut(node) {
                    conn.link.connect_failed();
                }
                Err(e)
            }
        }
    }

    /// Drops `node`'s connection: every request in flight fails with `error`, the link is closed, and the node
    /// stays down until its backoff has passed.
    pub(crate) fn fail(
        &mut self,
        node: usize,
        error: NodeError,
        now: Instant,
        wake: &mut Vec<Wake>,
    ) {
        let Machine {
            conns, slots, opts, ..
        } = self;
        let Some(conn) = conns.get_mut(node) else {
            return;
        };
        let mut out = Filing { slots, wake };
        conn.state.fail(error, opts, now, &mut out);
        close(conn);
    }

    /// The connect of `node`'s connection `generation` completed at `now` (`tls`: its handshake starts).
    pub(crate) fn connected(&mut self, node: usize, generation: u32, tls: bool, now: Instant) {
        let opts = &self.opts;
        if let Some(conn) = self
            .conns
            .get_mut(node)
            .filter(|c| c.state.generation == generation)
        {
            conn.state.connected(tls, opts, now);
        }
    }

    /// The connect of `node`'s connection `generation` failed.
    pub(crate) fn connect_failed(
        &mut self,
        node: usize,
        generation: u32,
        error: NodeError,
        now: Instant,
        wake: &mut Vec<Wake>,
    ) {
        if self.current(node, generation).is_none() {
            return;
        }
        self.fail(node, error, now, wake);
        if let Some(conn) = self.conns.get_mut(node) {
            conn.link.connect_failed();
        }
    }

    /// `node`'s connection, if `generation` is still its current one.
    fn current(&mut self, node: usize, generation: u32) -> Option<&mut Conn<L>> {
        self.conns
            .get_mut(node)
            .filter(|c| c.state.generation == generation)
    }

    /// Bytes were read from `node`'s connection `generation` at `now`: a sign of life.
    pub(crate) fn progress(&mut self, node: usize, generation: u32, now: Instant) {
        if let Some(conn) = self.current(node, generation) {
            conn.state.progress(now);
        }
    }

    /// Files one item read from `node`'s connection `generation`, decoded at `now`: a reply under the request it
    /// answers, the end of a TLS handshake, or a failure that drops the connection. Pushes are the driver's.
    pub(crate) fn read(
        &mut self,
        (node, generation): (usize, u32),
        item: Item,
        now: Instant,
        wake: &mut Vec<Wake>,
    ) {
        let Machine {
            conns, slots, opts, ..
        } = self;
        let Some(conn) = conns
            .get_mut(node)
            .filter(|c| c.state.generation == generation)
        else {
            return; // bytes of a connection since dropped
        };
        let mut out = Filing { slots, wake };
        let failed = match item {
            Item::Secured => {
                conn.state.secured(now);
                None
            }
            Item::Reply(value) => conn.state.deliver(value, opts, now, &mut out).err(),
            Item::Push(_) => None,
            Item::Failed(e) => Some(e),
        };
        if let Some(e) = failed {
            conn.state.fail(e, opts, now, &mut out);
            close(conn);
        }
    }

    /// After a turn that read the sockets at `now` (`polled`: it did read them): drops the connections that hung
    /// or whose connect took too long, and places detached releases where there is room now (they take the room
    /// the replies just made first, and go out with this turn's writes).
    pub(crate) fn after_read(&mut self, now: Instant, polled: bool, wake: &mut Vec<Wake>) {
        if polled {
            let Machine {
                conns, slots, opts, ..
            } = self;
            for conn in conns.iter_mut() {
                let connecting = !conn.state.is_up();
                let mut out = Filing {
                    slots: &mut *slots,
                    wake: &mut *wake,
                };
                if conn.state.check(opts, now, &mut out) {
                    close(conn);
                    if connecting {
                        conn.link.connect_failed();
                    }
                }
            }
            self.last_read = Some(now);
        }
        self.place_detached(now, wake);
    }

    /// Takes the writer role and the queued bytes of `node`, if any may go now.
    pub(crate) fn take_write(&mut self, node: usize) -> Option<Write<L::Handle>> {
        let conn = self.conns.get_mut(node)?;
        let handle = conn.link.handle()?;
        let (generation, bytes) = conn.state.take_write()?;
        Some(Write {
            node,
            generation,
            handle,
            bytes,
        })
    }

    /// Takes every node's write that may go now.
    pub(crate) fn take_writes(&mut self, writes: &mut Vec<Write<L::Handle>>) {
        for node in 0..self.conns.len() {
            writes.extend(self.take_write(node));
        }
    }

    /// Ends a write (see [`Written`]). Returns the next write if bytes queued meanwhile must go now (see
    /// [`NodeState::written`]).
    pub(crate) fn written(
        &mut self,
        write: Write<L::Handle>,
        (outcome, writes): Written,
        now: Instant,
        wake: &mut Vec<Wake>,
    ) -> Option<Write<L::Handle>> {
        let Machine {
            conns, slots, opts, ..
        } = self;
        let Write {
            node,
            generation,
            handle,
            bytes,
        } = write;
        let conn = conns.get_mut(node)?;
        (0..writes).for_each(|_| conn.state.stats.write());
        let failed = outcome.is_err() && generation == conn.state.generation;
        let mut out = Filing { slots, wake };
        let next = conn
            .state
            .written(generation, bytes, outcome, opts, now, &mut out);
        if failed {
            close(conn);
        }
        let (generation, bytes) = next?;
        Some(Write {
            node,
            generation,
            handle,
            bytes,
        })
    }

    /// Whether a connection may hold replies nobody read for a while (see [`NodeState::awaits_unread`]), and a
    /// server's close behind them: a driver's turn before queueing more reads them, so that a request is not
    /// written into a connection its server has closed (lost unread), and an idle connection can be asked
    /// whether its peer closed it (see [`ensure`](Machine::ensure)).
    pub(crate) fn has_unread(&self, now: Instant) -> bool {
        self.conns
            .iter()
            .any(|c| c.state.awaits_unread(now, IDLE_PROBE))
    }

    /// Whether `node` has stopped answering (see [`NodeState::silent`]), judged at the last turn that read the
    /// sockets: false before any.
    pub(crate) fn silent(&self, node: usize, for_at_least: Duration) -> bool {
        match (self.conns.get(node), self.last_read) {
            (Some(c), Some(read_at)) => c.state.silent(for_at_least, read_at),
            _ => false,
        }
    }

    /// Whether someone must drive though no round may: releases detached from their rounds wait, or are queued
    /// with their replies to come (see `detach.rs`), or a connection holds bytes not yet written. Those go out
    /// only in a driver's turn (behind a connect or a set-up, or with the batch after the one on the wire), and a
    /// release among them must reach its node whether or not its round still waits: a cancelled acquisition's
    /// clean-up, the minority's share of a release a majority confirmed. The rounds that queued them may all
    /// have ended, and nobody may call the fanout again for a long time.
    pub(crate) fn needs_driver(&self) -> bool {
        self.detached.needs_driver() || self.conns.iter().any(|c| c.state.holds_unwritten())
    }
}

/// Closes a connection's link, counting the drop if it had one.
fn close<L: Link>(conn: &mut Conn<L>) {
    if conn.link.handle().is_some() {
        conn.state.stats.dropped();
    }
    conn.link.close();
}
